package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
)

// OpenSavepoint opens the savepoint in dir: a checkpoint storage root holding
// exactly one complete checkpoint, in canonical form. It reads and verifies
// its metadata and every file.
func OpenSavepoint(dir string) (*Storage, *Metadata, error) { return OpenSavepointAt(dir, nil) }

// OpenSavepointAt is OpenSavepoint for a savepoint at any storage location:
// a directory, or an object store location (nats-obj://BUCKET/PREFIX),
// reached through nc.
func OpenSavepointAt(location string, nc *nats.Conn) (*Storage, *Metadata, error) {
	if !IsObjectLocation(location) {
		if fi, err := os.Stat(location); err != nil || !fi.IsDir() {
			return nil, nil, fmt.Errorf("no savepoint at %s: not a directory", location)
		}
	}
	st, err := OpenStorageAt(location, nc)
	if err != nil {
		return nil, nil, err
	}
	ids, err := st.Completed()
	if err != nil {
		return nil, nil, err
	}
	if len(ids) != 1 {
		return nil, nil, fmt.Errorf("%s is not a savepoint: it holds %d complete checkpoints, want 1", location, len(ids))
	}
	m, err := st.ReadMetadata(ids[0])
	if err != nil {
		return nil, nil, err
	}
	if m.Kind != KindSavepoint {
		return nil, nil, fmt.Errorf("%s holds a %s, not a savepoint", location, m.Kind)
	}
	if err := st.Verify(m); err != nil {
		return nil, nil, err
	}
	return st, m, nil
}

// OpenRestorePoint opens what a job can start from: a savepoint directory,
// a job's checkpoint directory (its newest usable checkpoint), or one
// chk-* directory. It returns the storage holding it and its verified
// metadata.
func OpenRestorePoint(dir string) (*Storage, *Metadata, error) { return OpenRestorePointAt(dir, nil) }

// OpenRestorePointAt is OpenRestorePoint for any storage location: a
// directory, or an object store location (nats-obj://BUCKET/PREFIX, whose
// last element may name one checkpoint, …/chk-0000000042), reached
// through nc.
func OpenRestorePointAt(location string, nc *nats.Conn) (*Storage, *Metadata, error) {
	parent, base := filepath.Dir(location), filepath.Base(location)
	if IsObjectLocation(location) {
		trimmed := strings.TrimRight(location, "/")
		i := strings.LastIndex(trimmed, "/")
		parent, base = trimmed[:i], trimmed[i+1:]
	} else if fi, err := os.Stat(location); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("no savepoint or checkpoint at %s: not a directory", location)
	}
	if id, ok := ParseDirName(base); ok && parent+"/" != ObjectScheme {
		st, err := OpenStorageAt(parent, nc)
		if err != nil {
			return nil, nil, err
		}
		m, err := st.ReadMetadata(id)
		if err != nil {
			return nil, nil, err
		}
		if err := st.Verify(m); err != nil {
			return nil, nil, err
		}
		return st, m, nil
	}
	st, err := OpenStorageAt(location, nc)
	if err != nil {
		return nil, nil, err
	}
	m, skipped, err := st.LatestUsable()
	if err != nil {
		// Say why each complete one could not be used: the damaged files.
		return nil, nil, fmt.Errorf("%s: %w", location, errors.Join(append([]error{err}, skipped...)...))
	}
	return st, m, nil
}

// CopyCheckpoint copies the complete checkpoint id, with the shared files
// it references, into dst under the same id, which must not be complete
// there: the stored bytes as they are (compressed files stay compressed),
// each checked against its handle while copied, the metadata last. dst,
// a directory or an object store, then holds the checkpoint
// self-contained, as a savepoint's storage does. It returns the metadata
// written to dst.
func (s *Storage) CopyCheckpoint(id int64, dst *Storage) (*Metadata, error) {
	m, err := s.ReadMetadata(id)
	if err != nil {
		return nil, err
	}
	if err := dst.checkIncomplete(id); err != nil {
		return nil, fmt.Errorf("checkpoint: copy checkpoint %d to %s: %w", id, dst.root, err)
	}
	var hs []FileHandle
	seen := map[string]bool{}
	for _, h := range m.handles() {
		if h.Shared && seen[h.Path] {
			continue
		}
		seen[h.Path] = true
		hs = append(hs, h)
	}
	errs := parallel(len(hs), true, func(i int) error { return s.copyStored(id, hs[i], dst) })
	if err := firstError(errs); err != nil {
		return nil, fmt.Errorf("checkpoint: copy checkpoint %d from %s to %s: %w", id, s.root, dst.root, err)
	}
	if err := dst.WriteMetadata(m); err != nil {
		return nil, err
	}
	return m, nil
}

// copyStored copies file h of checkpoint id from s into dst, its stored
// bytes as they are, checked against h.
func (s *Storage) copyStored(id int64, h FileHandle, dst *Storage) error {
	if h.Shared && dst.verifyFile(id, h) == nil {
		return nil // dst holds it already
	}
	// Opened by each call: a put tried again calls fill again.
	fill := func(w io.Writer) error {
		r, err := s.open(id, h)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}
	o := writeOpts{check: storedCheck(h)}
	if h.Shared {
		base, _ := sharedBase(h.Path) // open checked it
		lock := dst.sharedLock(base)
		lock.Lock()
		defer lock.Unlock()
		_, err := dst.put(h.Path, o, PutOptions{Meta: sharedMeta(h)}, fill)
		return err
	}
	rel, err := dst.checkWritable(id, h.Path)
	if err != nil {
		return err
	}
	_, err = dst.put(dst.relToRoot(id, rel), o, PutOptions{Deferred: true}, fill)
	return err
}

// storedCheck vets a copy of h's stored bytes.
func storedCheck(h FileHandle) func(written) error {
	return func(w written) error {
		if w.size != h.Size || w.sum != h.SHA256 {
			return &corruptError{path: h.Path, problem: fmt.Sprintf("copied %d bytes with SHA-256 %s, the metadata records %d with %s", w.size, w.sum, h.Size, h.SHA256)}
		}
		return nil
	}
}

// CopyLocalFile copies the file src to dst, which must not exist, and
// fsyncs it.
func CopyLocalFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
