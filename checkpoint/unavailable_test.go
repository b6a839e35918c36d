package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// readFaultFS is the operating system's storageFS whose reads of the files
// under dir fail as a disk or network that times out does: the files are
// there and intact, only not readable now. midway makes reads of opened
// files fail after their first bytes instead of at the open.
type readFaultFS struct {
	osStorageFS
	mu     sync.Mutex
	dir    string
	midway bool
	reads  int // reads that failed
}

var errReadTimeout = fmt.Errorf("read timed out: %w", context.DeadlineExceeded)

func (f *readFaultFS) hit(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir == "" || !strings.HasPrefix(name, f.dir+string(filepath.Separator)) {
		return false
	}
	f.reads++
	return true
}

func (f *readFaultFS) Open(name string) (storageReadFile, error) {
	if !f.midway && f.hit(name) {
		return nil, &os.PathError{Op: "open", Path: name, Err: errReadTimeout}
	}
	file, err := f.osStorageFS.Open(name)
	if err != nil || !f.midway || !f.hit(name) {
		return file, err
	}
	return &failingReader{storageReadFile: file}, nil
}

// failingReader returns one byte, then a timeout.
type failingReader struct {
	storageReadFile
	n int
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 || len(p) == 0 {
		return 0, errReadTimeout
	}
	r.n++
	return r.storageReadFile.Read(p[:1])
}

// TestLatestUsableUnavailable: a checkpoint whose metadata or files cannot
// be read now is not corrupt. LatestUsable must neither pass it over for an
// older checkpoint (sinks committed on the newer one) nor report that no
// checkpoint exists (a restore would start from empty state and the file
// sink delete what it committed): it stops with ErrUnavailable, and finds
// the same checkpoint once the reads succeed again.
func TestLatestUsableUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		under  func(s *Storage) string
		midway bool
	}{
		{"metadata read times out", func(s *Storage) string { return s.Dir(2) }, false},
		{"state file open times out", func(s *Storage) string { return filepath.Join(s.Dir(2), "tasks") }, false},
		{"state file read times out midway", func(s *Storage) string { return filepath.Join(s.Dir(2), "tasks") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testStorage(t)
			writeTestCheckpoint(t, s, 1)
			writeTestCheckpoint(t, s, 2)
			ffs := &readFaultFS{dir: tc.under(s), midway: tc.midway}
			setFS(s, ffs)
			m, skipped, err := s.LatestUsable()
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoCheckpoint) || errors.Is(err, ErrCorrupt) || m != nil {
				t.Fatalf("LatestUsable with checkpoint 2 unreadable now = %v, %v; want ErrUnavailable and no checkpoint", m, err)
			}
			if len(skipped) != 0 {
				t.Fatalf("skipped %v: a checkpoint that cannot be read now was passed over", skipped)
			}
			if !strings.Contains(err.Error(), "checkpoint 2") || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %q does not name checkpoint 2 and its cause", err)
			}
			if ffs.reads == 0 {
				t.Fatal("no read was injected a failure")
			}
			// The disk answers again: the same checkpoint is found.
			ffs.mu.Lock()
			ffs.dir = ""
			ffs.mu.Unlock()
			if m, skipped, err := s.LatestUsable(); err != nil || m.ID != 2 || len(skipped) != 0 {
				t.Fatalf("LatestUsable once readable = %v, %v, %v; want checkpoint 2", m, skipped, err)
			}
		})
	}
}

// TestLatestUsableCorruptStillSkipped: damage is still a verdict: a damaged
// checkpoint is skipped for the older one, and one that is damaged while
// an older one cannot be read now stops at the older one.
func TestLatestUsableCorruptStillSkipped(t *testing.T) {
	s := testStorage(t)
	writeTestCheckpoint(t, s, 1)
	writeTestCheckpoint(t, s, 2)
	flipFileByte(t, filepath.Join(s.Dir(2), "tasks", "0-1", "state", "000002.sst"), 10)
	m, skipped, err := s.LatestUsable()
	if err != nil || m.ID != 1 || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) {
		t.Fatalf("LatestUsable with checkpoint 2 damaged = %v, %v, %v; want checkpoint 1", m, skipped, err)
	}
	setFS(s, &readFaultFS{dir: s.Dir(1)})
	m, skipped, err = s.LatestUsable()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoCheckpoint) || m != nil || len(skipped) != 1 {
		t.Fatalf("LatestUsable with 2 damaged and 1 unreadable now = %v, %v, %v; want ErrUnavailable", m, skipped, err)
	}
	// A missing metadata file (removed since it was listed) is no
	// checkpoint: corrupt, not unavailable.
	setFS(s, osStorageFS{})
	if err := os.Remove(filepath.Join(s.Dir(1), MetadataName)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadMetadata(1); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("ReadMetadata of a removed checkpoint = %v; want ErrCorrupt", err)
	}
}

// TestLatestUsableWithUnavailable: the caller's own check (in-flight data in
// a stream) that cannot answer now stops the search as a read does, while
// its verdict that the data is gone skips the checkpoint.
func TestLatestUsableWithUnavailable(t *testing.T) {
	s := testStorage(t)
	writeTestCheckpoint(t, s, 1)
	writeTestCheckpoint(t, s, 2)
	timeout := fmt.Errorf("checking stream range: %w", MarkUnavailable(context.DeadlineExceeded))
	m, skipped, err := s.LatestUsableWith(func(m *Metadata) error {
		if m.ID == 2 {
			return timeout
		}
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || m != nil || len(skipped) != 0 {
		t.Fatalf("LatestUsableWith, check of 2 timing out = %v, %v, %v; want ErrUnavailable", m, skipped, err)
	}
	gone := errors.New("messages 5-9 are gone")
	m, skipped, err = s.LatestUsableWith(func(m *Metadata) error {
		if m.ID == 2 {
			return gone
		}
		return nil
	})
	if err != nil || m.ID != 1 || len(skipped) != 1 {
		t.Fatalf("LatestUsableWith, 2 refused = %v, %v, %v; want checkpoint 1", m, skipped, err)
	}
}

// TestLatestUsableRootGone: a storage directory that is gone (an unmounted
// volume) cannot be read now; it is not a storage without checkpoints, from
// which a restore would start with empty state.
func TestLatestUsableRootGone(t *testing.T) {
	s := testStorage(t)
	writeTestCheckpoint(t, s, 1)
	aside := filepath.Join(t.TempDir(), "aside")
	if err := os.Rename(s.Root(), aside); err != nil {
		t.Fatal(err)
	}
	m, _, err := s.LatestUsable()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoCheckpoint) || m != nil {
		t.Fatalf("LatestUsable with the root gone = %v, %v; want ErrUnavailable", m, err)
	}
	if _, err := s.CleanIncomplete(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("CleanIncomplete with the root gone = %v; want ErrUnavailable", err)
	}
	if err := os.Rename(aside, s.Root()); err != nil {
		t.Fatal(err)
	}
	if m, _, err := s.LatestUsable(); err != nil || m.ID != 1 {
		t.Fatalf("LatestUsable with the root back = %v, %v; want checkpoint 1", m, err)
	}
}
