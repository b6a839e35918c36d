package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// OpenSavepoint opens the savepoint in dir: a checkpoint storage root holding
// exactly one complete checkpoint, in canonical form. It reads and verifies
// its metadata and every file.
func OpenSavepoint(dir string) (*Storage, *Metadata, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("no savepoint at %s: not a directory", dir)
	}
	st, err := OpenStorage(dir)
	if err != nil {
		return nil, nil, err
	}
	ids, err := st.Completed()
	if err != nil {
		return nil, nil, err
	}
	if len(ids) != 1 {
		return nil, nil, fmt.Errorf("%s is not a savepoint: it holds %d complete checkpoints, want 1", dir, len(ids))
	}
	m, err := st.ReadMetadata(ids[0])
	if err != nil {
		return nil, nil, err
	}
	if m.Kind != KindSavepoint {
		return nil, nil, fmt.Errorf("%s holds a %s, not a savepoint", dir, m.Kind)
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
func OpenRestorePoint(dir string) (*Storage, *Metadata, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("no savepoint or checkpoint at %s: not a directory", dir)
	}
	if id, ok := parseCheckpointDirName(filepath.Base(dir)); ok {
		st, err := OpenStorage(filepath.Dir(dir))
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
	st, err := OpenStorage(dir)
	if err != nil {
		return nil, nil, err
	}
	m, skipped, err := st.LatestUsable()
	if err != nil {
		// Say why each complete one could not be used: the damaged files.
		return nil, nil, fmt.Errorf("%s: %w", dir, errors.Join(append([]error{err}, skipped...)...))
	}
	return st, m, nil
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
