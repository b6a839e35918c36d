package state

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// createFS is the filesystem of a store: vfs.Default, except that syncs
// do nothing while Open creates a new store.
//
// Creating a store syncs a MANIFEST, an OPTIONS file, markers and their
// directory, about 18 fsyncs that take 15 to 150 ms on a busy disk, on
// every subtask's start. They protect nothing: the files describe an empty
// database, and a store's directory is never opened again after a crash
// (a subtask removes it and starts from its checkpoint). Once Open returns
// syncs are real again, so the flushes and checkpoints that make state
// durable sync as before, and a later sync of the MANIFEST or of the
// directory also covers what was written unsynced.
type createFS struct {
	vfs.FS
	creating atomic.Bool
}

// newCreateFS returns the filesystem for a store in dir, quiet until
// opened when dir holds nothing yet.
func newCreateFS(base vfs.FS, dir string) *createFS {
	fs := &createFS{FS: base}
	names, err := base.List(dir)
	fs.creating.Store(errors.Is(err, os.ErrNotExist) || (err == nil && len(names) == 0))
	return fs
}

// opened makes syncs real from now on.
func (fs *createFS) opened() { fs.creating.Store(false) }

func (fs *createFS) Unwrap() vfs.FS { return fs.FS }

func (fs *createFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return createFile{File: f, fs: fs}, nil
}

func (fs *createFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *createFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs *createFS) OpenDir(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenDir(name))
}

func (fs *createFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

// createFile is a file of a createFS.
type createFile struct {
	vfs.File
	fs *createFS
}

func (f createFile) Sync() error {
	if f.fs.creating.Load() {
		return nil
	}
	return f.File.Sync()
}

func (f createFile) SyncData() error {
	if f.fs.creating.Load() {
		return nil
	}
	return f.File.SyncData()
}

func (f createFile) SyncTo(length int64) (bool, error) {
	if f.fs.creating.Load() {
		return false, nil
	}
	return f.File.SyncTo(length)
}
