package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// dirState is a checkpoint directory found in the root.
type dirState struct {
	id       int64
	complete bool // _metadata exists
}

// list returns the checkpoint directories in the root, by ascending id: a
// directory is complete when its _metadata exists.
func (s *Storage) list() ([]dirState, error) {
	entries, err := s.b.List("")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, unavailable(err))
	}
	var dirs []dirState
	for _, e := range entries {
		dir, isDir := strings.CutSuffix(e.Name, "/")
		id, ok := ParseDirName(dir)
		if !ok || !isDir {
			continue
		}
		switch _, err := s.b.Stat(e.Name + MetadataName); {
		case err == nil:
			dirs = append(dirs, dirState{id: id, complete: true})
		case errors.Is(err, fs.ErrNotExist):
			dirs = append(dirs, dirState{id: id})
		case errors.Is(err, ErrCorrupt):
			// Complete but damaged: reading the metadata says so, and
			// LatestUsable passes it over as it does other damage.
			dirs = append(dirs, dirState{id: id, complete: true})
		default:
			return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, unavailable(err))
		}
	}
	sortDirs(dirs)
	return dirs, nil
}

// sortDirs sorts dirs by ascending id. (Names sort as ids up to ten
// digits; longer ids do not.)
func sortDirs(dirs []dirState) {
	slices.SortFunc(dirs, func(a, b dirState) int { return cmp.Compare(a.id, b.id) })
}

// Completed returns the ids of the complete checkpoints (those whose
// _metadata exists), ascending.
func (s *Storage) Completed() ([]int64, error) {
	dirs, err := s.list()
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, d := range dirs {
		if d.complete {
			ids = append(ids, d.id)
		}
	}
	return ids, nil
}

// MaxID returns the highest id with a directory, complete or not, and 0
// when there is none: a restarted coordinator numbers its checkpoints from
// MaxID()+1, so that no id is used twice.
func (s *Storage) MaxID() (int64, error) {
	dirs, err := s.list()
	if err != nil || len(dirs) == 0 {
		return 0, err
	}
	return dirs[len(dirs)-1].id, nil
}

// LatestUsable returns the metadata of the newest complete checkpoint whose
// metadata reads and whose files verify. skipped explains, for each newer
// complete checkpoint, why it was passed over: it is damaged (ErrCorrupt),
// or of a format this wstream does not read. When none is usable the error
// wraps ErrNoCheckpoint. A checkpoint that cannot be read now is not passed
// over: the search stops there with an error that wraps ErrUnavailable, so
// that a restore neither falls back to an older checkpoint (sinks may have
// committed on the newer one) nor starts from empty state while a
// checkpoint exists; the caller retries later.
func (s *Storage) LatestUsable() (m *Metadata, skipped []error, err error) {
	return s.LatestUsableWith(nil)
}

// LatestUsableWith is LatestUsable with a further test: a checkpoint is
// usable only when accept (if not nil) returns nil for its metadata too,
// for what lies outside this storage (in-flight data left in a stream).
// An error from accept that wraps ErrUnavailable stops the search as a
// read of the storage does.
func (s *Storage) LatestUsableWith(accept func(*Metadata) error) (m *Metadata, skipped []error, err error) {
	ids, err := s.Completed()
	if err != nil {
		return nil, nil, err
	}
	for i := len(ids) - 1; i >= 0; i-- {
		m, err := s.ReadMetadata(ids[i])
		if err == nil {
			err = s.Verify(m)
		}
		if err == nil && accept != nil {
			err = accept(m)
		}
		if err == nil {
			return m, skipped, nil
		}
		if errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCorrupt) {
			return nil, skipped, fmt.Errorf("checkpoint %d in %s cannot be read now: %w", ids[i], s.root, err)
		}
		skipped = append(skipped, fmt.Errorf("checkpoint %d skipped: %w", ids[i], err))
	}
	return nil, skipped, fmt.Errorf("%w in %s (%d complete, all unusable)", ErrNoCheckpoint, s.root, len(ids))
}

// Discard removes checkpoint id. Its _metadata goes first, durably, so that
// a checkpoint whose removal a crash interrupts never looks complete.
// Discarding an id without files does nothing.
func (s *Storage) Discard(id int64) error {
	dir := DirName(id) + "/"
	if err := s.b.Delete(dir + MetadataName); err != nil {
		return fmt.Errorf("checkpoint: discard checkpoint %d in %s: %w", id, s.root, err)
	}
	if err := s.b.DeleteAll(dir); err != nil {
		return fmt.Errorf("checkpoint: discard checkpoint %d in %s: %w", id, s.root, err)
	}
	return nil
}

// CleanIncomplete removes the checkpoints without _metadata, left by a
// crash or an abort, and returns their ids, and what interrupted writes of
// shared files left (temporary files in ROOT/shared). Call it when no
// checkpoint is in progress, such as when a job (re)starts.
func (s *Storage) CleanIncomplete() ([]int64, error) {
	dirs, err := s.list()
	if err != nil {
		return nil, err
	}
	var removed []int64
	for _, d := range dirs {
		if d.complete {
			continue
		}
		if err := s.b.DeleteAll(DirName(d.id) + "/"); err != nil {
			return removed, fmt.Errorf("checkpoint: remove incomplete checkpoint %d in %s: %w", d.id, s.root, err)
		}
		removed = append(removed, d.id)
	}
	if _, err := s.b.RemoveTemporaries(SharedDir + "/"); err != nil {
		return removed, fmt.Errorf("checkpoint: clean %s in %s: %w", SharedDir, s.root, err)
	}
	return removed, nil
}
