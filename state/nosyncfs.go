package state

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// noSyncFS is the filesystem of a store: vfs.Default without syncs.
//
// Nothing in a store's directory, nor in the checkpoint directories that
// Store.Checkpoint fills, needs to reach the disk before the machine could
// fail:
//
//   - a store's directory is never opened again after a crash, or after
//     any end of its subtask: a subtask removes it and starts from its
//     checkpoint's files, or empty (package worker);
//   - a checkpoint directory is staging: checkpoint storage writes its own
//     copies of the files and makes those durable, and a copy kept for
//     local recovery is checked against the SHA-256 sums of the completed
//     checkpoint before it is used.
//
// Pebble syncs a new store's MANIFEST, OPTIONS file, markers and directory
// (about 18 fsyncs, 15 to 150 ms on a busy disk, on every subtask's
// start), every memtable flush's table, MANIFEST and directory, and every
// file and directory of a checkpoint: a checkpoint's synchronous phase,
// during which the subtask processes nothing, spent about half its time
// in those syncs. The kernel still writes the files back in its own time.
type noSyncFS struct {
	vfs.FS
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func wrapNoSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{File: f}, nil
}

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.Create(name, c))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.ReuseForWrite(oldname, newname, c))
}

// noSyncFile is a file of a noSyncFS.
type noSyncFile struct {
	vfs.File
}

func (f noSyncFile) Sync() error     { return nil }
func (f noSyncFile) SyncData() error { return nil }

// SyncTo queues nothing and reports no full sync (Pebble then calls Sync,
// which does nothing either).
func (f noSyncFile) SyncTo(length int64) (bool, error) { return false, nil }
