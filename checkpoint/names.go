package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// Two directory formats begin with DirPrefix, and this file owns both: a
// checkpoint's directory in storage, chk-%010d (zero-padded so that names
// sort by id), and a subtask's local snapshot on a worker's disk, chk-<id>
// (unpadded). Every reader and writer of either name uses these functions.

// DirPrefix begins the name of every checkpoint directory (and of every
// local snapshot directory).
const DirPrefix = "chk-"

// DirGlob matches every checkpoint directory name (filepath.Glob).
const DirGlob = DirPrefix + "*"

// DirName is the name of checkpoint id's directory below a storage root:
// chk-%010d.
func DirName(id int64) string { return fmt.Sprintf(DirPrefix+"%010d", id) }

// ParseDirName returns the id of a directory named by DirName, and false
// for any other name (an unpadded chk-<id> included).
func ParseDirName(name string) (int64, bool) {
	return parseName(name, DirName)
}

// LocalSnapshotName is the name of a subtask's local snapshot of
// checkpoint id on a worker's disk: chk-<id>, unpadded.
func LocalSnapshotName(id int64) string { return DirPrefix + strconv.FormatInt(id, 10) }

// ParseLocalSnapshotName returns the id of a directory named by
// LocalSnapshotName, and false for any other name.
func ParseLocalSnapshotName(name string) (int64, bool) {
	return parseName(name, LocalSnapshotName)
}

// SnapshotTempName is the name of the scratch directory a subtask writes
// the synchronous part of its snapshot of checkpoint id to:
// chk-<id>-<chain>-<subtask>. No parser reads it back.
func SnapshotTempName(id int64, t TaskID) string {
	return fmt.Sprintf(DirPrefix+"%d-%d-%d", id, t.Chain, t.Subtask)
}

// parseName returns the id of name if format(id) gives it back exactly,
// so that each format accepts its own names and no other.
func parseName(name string, format func(int64) string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, DirPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id < 1 || format(id) != name {
		return 0, false
	}
	return id, true
}
