package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Checkpoint is the synchronous phase of a snapshot: it writes all cached
// changes, flushes Pebble's memtable so the snapshot is a set of immutable
// SST files plus a small MANIFEST, and creates a Pebble checkpoint (hard
// links) in dir, which must not exist. Processing may continue right after
// it returns; dir is then copied to storage (the asynchronous phase) by the
// caller, and removed.
//
// dir should be on the store's filesystem (a sibling of Dir, say): across
// filesystems Pebble copies the SST files instead of linking them, which
// makes this phase as slow as the copy. A failure leaves no dir behind.
// The store stays usable after a failure of the memtable flush or of the
// checkpoint itself; a failure to write the cached changes is sticky, as in
// Flush.
func (s *Store) Checkpoint(dir string) error {
	if s.err != nil {
		return s.err
	}
	if dir == "" {
		return fmt.Errorf("state: checkpoint of %s: directory is empty", s.dir)
	}
	switch _, err := os.Lstat(dir); {
	case err == nil:
		return fmt.Errorf("state: checkpoint of %s: %s already exists", s.dir, dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("state: checkpoint of %s: %w", s.dir, err)
	}
	if err := s.Flush(); err != nil {
		return err
	}
	if err := s.ready(); err != nil {
		return err
	}
	// The store has no write-ahead log: what is in the memtable reaches
	// the checkpoint only as a table. Nothing reaches Pebble before the
	// checkpoint, as the subtask's goroutine is here.
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("state: checkpoint of %s: flush memtable: %w", s.dir, err)
	}
	if err := s.db.Checkpoint(dir); err != nil {
		return fmt.Errorf("state: checkpoint of %s into %s: %w", s.dir, dir, err)
	}
	return nil
}

// DirSize returns the bytes of the regular files below dir: the state size
// metric of a checkpoint directory.
func DirSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		size += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("state: size of %s: %w", dir, err)
	}
	return size, nil
}
