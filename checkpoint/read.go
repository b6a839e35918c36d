package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// Verify checks every file of m (state and channel state of every task,
// shared files included): that it exists and has the recorded size and
// SHA-256, of the stored bytes for a compressed file. Each problem is an
// error that wraps ErrCorrupt and names the file by its path relative to
// the root (shared/<name> for a shared file); all of them are returned,
// joined.
func (s *Storage) Verify(m *Metadata) error {
	hs := m.handles()
	errs := parallel(len(hs), false, func(i int) error {
		return s.verifyFile(m.ID, hs[i])
	})
	return errors.Join(errs...)
}

func (s *Storage) verifyFile(id int64, h FileHandle) error {
	r, err := s.open(id, h)
	if err != nil {
		return err
	}
	defer r.Close()
	r.count = &readStats.verified
	if size := r.f.Size(); size != h.Size {
		problem := "larger than"
		if size < h.Size {
			problem = "truncated: smaller than"
		}
		return &corruptError{path: r.name, problem: fmt.Sprintf("%d bytes, %s the %d bytes the metadata records", size, problem, h.Size)}
	}
	_, err = io.Copy(io.Discard, r)
	return err
}

// corruptError is a problem with one file of a checkpoint.
type corruptError struct {
	path    string // relative to the storage root
	problem string
	cause   error // what found the problem, if anything
}

func (e *corruptError) Error() string { return "checkpoint: " + e.path + ": " + e.problem }

func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *corruptError) Unwrap() error { return e.cause }

func (s *Storage) corrupt(id int64, rel, format string, args ...any) error {
	return &corruptError{path: s.relToRoot(id, rel), problem: fmt.Sprintf(format, args...)}
}

// Open opens the file h of checkpoint id for reading; a shared file is
// found below the root whatever id is. The reader returns the raw bytes,
// decompressing a compressed file. It returns an error wrapping ErrCorrupt,
// instead of io.EOF, when the bytes stored are not h.Size bytes with
// SHA-256 h.SHA256, or do not decompress to h.RawSize bytes; a missing file
// is such an error too.
func (s *Storage) Open(id int64, h FileHandle) (io.ReadCloser, error) {
	r, err := s.open(id, h)
	if err != nil {
		return nil, err
	}
	if h.Compressed {
		return &rawReader{hr: r}, nil
	}
	return r, nil
}

// locate returns the name of the object of h (of checkpoint id) relative
// to the root, as errors name it too.
func (s *Storage) locate(id int64, h FileHandle) (string, error) {
	if h.Shared {
		base, ok := sharedBase(h.Path)
		if !ok {
			return h.Path, &corruptError{path: h.Path, problem: "metadata names an invalid shared file path"}
		}
		return SharedDir + "/" + base, nil
	}
	rel, err := cleanRel(h.Path)
	if err != nil || rel != h.Path || rel == MetadataName {
		return s.relToRoot(id, h.Path), s.corrupt(id, h.Path, "metadata names an invalid file path")
	}
	return s.relToRoot(id, rel), nil
}

// sharedBase returns the file name of the shared path p, "shared/<name>".
func sharedBase(p string) (string, bool) {
	base, ok := strings.CutPrefix(p, SharedDir+"/")
	if !ok || base == "" || strings.ContainsAny(base, `/\`) || strings.HasPrefix(base, ".") || !filepath.IsLocal(base) {
		return "", false
	}
	return base, true
}

// open opens the file h of checkpoint id. A file the metadata names that
// is missing is corrupt; one that cannot be opened now is unavailable.
func (s *Storage) open(id int64, h FileHandle) (*handleReader, error) {
	name, err := s.locate(id, h)
	if err != nil {
		return nil, err
	}
	if !h.Compressed && h.RawSize != 0 && h.RawSize != h.Size {
		return nil, &corruptError{path: name, problem: fmt.Sprintf("metadata records %d raw bytes for an uncompressed file of %d", h.RawSize, h.Size)}
	}
	f, err := s.b.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &corruptError{path: name, problem: "missing"}
		}
		return nil, fmt.Errorf("checkpoint: open %s in %s: %w", name, s.root, unavailable(err))
	}
	return &handleReader{f: f, h: sha256.New(), want: h, name: name, count: &readStats.restored}, nil
}

// readStats counts the stored bytes this process read from checkpoint
// storage, for progress displays: a restore verifies every file and then
// reads it again.
var readStats struct{ verified, restored atomic.Int64 }

// ReadProgress returns how many stored bytes of checkpoint files this
// process has read so far to verify them (Verify) and to restore or import
// them (Open, Restore).
func ReadProgress() (verified, restored int64) {
	return readStats.verified.Load(), readStats.restored.Load()
}

// handleReader reads a checkpoint file's stored bytes and checks them
// against its handle.
type handleReader struct {
	f     ObjectReader
	h     hash.Hash
	n     int64
	want  FileHandle
	name  string        // relative to the storage root, for errors
	err   error         // sticky verdict
	count *atomic.Int64 // the ReadProgress counter this read adds to
}

func (r *handleReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.f.Read(p)
	r.n += int64(n)
	r.count.Add(int64(n))
	r.h.Write(p[:n])
	switch {
	case r.n > r.want.Size:
		r.err = &corruptError{path: r.name, problem: fmt.Sprintf("larger than the %d bytes the metadata records", r.want.Size)}
		return n, r.err
	case err == io.EOF:
		if r.n < r.want.Size {
			r.err = &corruptError{path: r.name, problem: fmt.Sprintf("truncated: %d bytes, the metadata records %d", r.n, r.want.Size)}
		} else if got := hex.EncodeToString(r.h.Sum(nil)); got != r.want.SHA256 {
			r.err = &corruptError{path: r.name, problem: fmt.Sprintf("SHA-256 %s, the metadata records %s (content changed)", got, r.want.SHA256)}
		} else {
			r.err = io.EOF
		}
		return n, r.err
	case err != nil:
		// The backend marked bad bytes as corrupt; anything else is a read
		// that may succeed later.
		r.err = fmt.Errorf("checkpoint: read %s: %w", r.name, unavailable(err))
		return n, r.err
	}
	return n, nil
}

func (r *handleReader) Close() error { return r.f.Close() }

// rawReader decompresses a compressed file read through a handleReader.
// The stored bytes' verdict comes first: when they are damaged, that is the
// error, whatever the decompression made of them.
type rawReader struct {
	hr  *handleReader
	dec *zstd.Decoder
	n   int64
	err error // sticky
}

func (r *rawReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.dec == nil {
		dec, err := getDecoder(r.hr)
		r.dec = dec
		if err != nil {
			r.err = r.verdict(err)
			return 0, r.err
		}
	}
	n, err := r.dec.Read(p)
	r.n += int64(n)
	switch {
	case r.n > r.hr.want.RawSize:
		r.err = r.verdict(fmt.Errorf("decompresses to more than the %d bytes the metadata records", r.hr.want.RawSize))
	case err == io.EOF:
		r.err = r.verdict(nil)
		if r.err == io.EOF && r.n != r.hr.want.RawSize {
			r.err = &corruptError{path: r.hr.name, problem: fmt.Sprintf("decompresses to %d bytes, the metadata records %d", r.n, r.hr.want.RawSize)}
		}
	case err != nil:
		r.err = r.verdict(fmt.Errorf("does not decompress: %v", err))
	default:
		return n, nil
	}
	return n, r.err
}

// verdict reads the rest of the stored bytes and returns their error, if
// any; else the decompression problem, as corruption; else io.EOF.
func (r *rawReader) verdict(problem error) error {
	if _, err := io.Copy(io.Discard, r.hr); err != nil {
		return err
	}
	if problem != nil {
		return &corruptError{path: r.hr.name, problem: problem.Error()}
	}
	return io.EOF
}

func (r *rawReader) Close() error {
	if r.dec != nil {
		putDecoder(r.dec)
		r.dec = nil
	}
	return r.hr.Close()
}

// Restore copies the keyed-state files of task t in checkpoint m into dst,
// which it creates and which must be empty, verifying each file's size and
// SHA-256 while copying and decompressing compressed files. A file's path
// in the snapshot is its Path, or, for a shared file, its Name; every such
// path must lie below TaskDir(m.ID, t)/state, and the file is restored to
// the same path below dst, so dst is then the Pebble directory the task
// snapshotted. On failure dst is left empty. The copies are not synced: a
// crash during a restore restarts it.
func (s *Storage) Restore(m *Metadata, t TaskID, dst string) error {
	var task *SubtaskState
	for i := range m.Tasks {
		if m.Tasks[i].Task == t {
			task = &m.Tasks[i]
			break
		}
	}
	if task == nil {
		return fmt.Errorf("checkpoint: restore: checkpoint %d in %s has no state for task %s", m.ID, s.root, t)
	}
	prefix := s.TaskDir(m.ID, t) + "/state/"
	for _, h := range task.State {
		p := h.Path
		if h.Shared {
			if h.Name == "" {
				return &corruptError{path: h.Path, problem: fmt.Sprintf("shared state file of task %s has no name in checkpoint %d", t, m.ID)}
			}
			if clean, err := cleanRel(h.Name); err != nil || clean != h.Name {
				return &corruptError{path: h.Path, problem: fmt.Sprintf("shared state file of task %s has the invalid name %q in checkpoint %d", t, h.Name, m.ID)}
			}
			p = h.Name
		}
		if !strings.HasPrefix(p, prefix) || strings.TrimPrefix(p, prefix) == "" {
			return s.corrupt(m.ID, p, "state file of task %s outside %s", t, prefix)
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("checkpoint: restore task %s: %w", t, err)
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("checkpoint: restore task %s: %w", t, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("checkpoint: restore task %s: %s is not empty (holds %s)", t, dst, entries[0].Name())
	}
	errs := parallel(len(task.State), true, func(i int) error {
		h := task.State[i]
		p := h.Path
		if h.Shared {
			p = h.Name
		}
		return s.restoreFile(m.ID, h, filepath.Join(dst, filepath.FromSlash(strings.TrimPrefix(p, prefix))))
	})
	if err := firstError(errs); err != nil {
		if entries, rerr := os.ReadDir(dst); rerr == nil {
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dst, e.Name()))
			}
		}
		return fmt.Errorf("checkpoint: restore task %s of checkpoint %d into %s: %w", t, m.ID, dst, err)
	}
	return nil
}

func (s *Storage) restoreFile(id int64, h FileHandle, target string) error {
	r, err := s.Open(id, h)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
