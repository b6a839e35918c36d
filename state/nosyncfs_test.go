package state

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wstream/wstream/abi"
)

// syncCountFS counts the syncs that reach the disk.
type syncCountFS struct {
	vfs.FS
	syncs atomic.Int64
}

func (fs *syncCountFS) Unwrap() vfs.FS { return fs.FS }

func (fs *syncCountFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return syncCountFile{File: f, n: &fs.syncs}, nil
}

func (fs *syncCountFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *syncCountFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs *syncCountFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

func (fs *syncCountFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

type syncCountFile struct {
	vfs.File
	n *atomic.Int64
}

func (f syncCountFile) Sync() error     { f.n.Add(1); return f.File.Sync() }
func (f syncCountFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }
func (f syncCountFile) SyncTo(length int64) (bool, error) {
	f.n.Add(1)
	return f.File.SyncTo(length)
}

// TestStoreSyncsNothing: creating a store, flushing it, checkpointing it,
// closing it and opening it again sync nothing (noSyncFS), and what was
// written is still there.
func TestStoreSyncsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	groups := abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}
	fs := &syncCountFS{FS: vfs.Default}
	s, err := Open(Options{Dir: dir, KeyGroups: groups, fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "count", 1)
	mustPut(t, v, h, "k", "", "1")
	chk := filepath.Join(t.TempDir(), "chk")
	if err := s.Checkpoint(chk); err != nil {
		t.Fatal(err)
	}
	mustPut(t, v, h, "k", "", "2")
	closeStore(t, s)
	if n := fs.syncs.Load(); n != 0 {
		t.Fatalf("creating, checkpointing and closing the store synced %d times, want 0", n)
	}

	for _, c := range []struct{ dir, want string }{{dir, "2"}, {chk, "1"}} {
		s, err = Open(Options{Dir: c.dir, KeyGroups: groups, fs: fs})
		if err != nil {
			t.Fatal(err)
		}
		v = s.Vertex("v", true)
		expectGet(t, v, mustRegister(t, v, "count", 1), "k", "", c.want, false)
		closeStore(t, s)
	}
	if n := fs.syncs.Load(); n != 0 {
		t.Fatalf("reopening the store and its checkpoint synced %d times, want 0", n)
	}
}
