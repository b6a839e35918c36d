package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fault is what a faultBackend does to the objects a rule names.
type fault int

const (
	faultSlow        fault = iota + 1 // answers, after a delay
	faultUnavailable                  // Open, Stat and List time out
	faultMidway                       // reads time out after the first byte
	faultCorrupt                      // reads return the stored bytes with the first one flipped
	faultMissing                      // Open finds nothing (removed since Stat or List saw it)
	faultPut                          // puts fail after the fill's bytes
	faultDelete                       // Delete and DeleteAll fail
)

// slowDelay is how long a faultSlow answer takes.
const slowDelay = 20 * time.Millisecond

// faultBackend wraps a Backend and does to the objects whose names begin
// with a rule's prefix what a store does that is slow, cannot answer now,
// or hands back bad bytes or nothing. It counts the calls it faulted.
type faultBackend struct {
	Backend
	mu    sync.Mutex
	rules map[string]fault
	hits  int
}

// set makes prefix fail with k; "" names every object (and the listing of
// the root). The longest prefix rules, and k 0 exempts its prefix.
func (f *faultBackend) set(prefix string, k fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[string]fault{}
	}
	f.rules[prefix] = k
}

// clear ends every fault: the store answers again.
func (f *faultBackend) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

func (f *faultBackend) faulted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

// match returns the fault of the longest prefix of name, counting a hit.
func (f *faultBackend) match(name string, kinds ...fault) fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	best, k := -1, fault(0)
	for p, r := range f.rules {
		if strings.HasPrefix(name, p) && len(p) > best {
			best, k = len(p), r
		}
	}
	for _, want := range kinds {
		if k == want {
			f.hits++
			return k
		}
	}
	return 0
}

var errInjectedTimeout = fmt.Errorf("injected: %w", errReadTimeout)

func (f *faultBackend) Put(name string, o PutOptions, fill func(io.Writer) error) error {
	if f.match(name, faultPut) == 0 {
		return f.Backend.Put(name, o, fill)
	}
	return f.Backend.Put(name, o, func(w io.Writer) error {
		if err := fill(w); err != nil {
			return err
		}
		return errors.New("injected: connection lost during put")
	})
}

func (f *faultBackend) Delete(name string) error {
	if f.match(name, faultDelete) != 0 {
		return fmt.Errorf("delete %s: %w", name, errInjectedTimeout)
	}
	return f.Backend.Delete(name)
}

func (f *faultBackend) DeleteAll(dir string) error {
	if f.match(dir, faultDelete) != 0 {
		return fmt.Errorf("delete %s: %w", dir, errInjectedTimeout)
	}
	return f.Backend.DeleteAll(dir)
}

func (f *faultBackend) Open(name string) (ObjectReader, error) {
	switch f.match(name, faultSlow, faultUnavailable, faultMidway, faultCorrupt, faultMissing) {
	case faultSlow:
		time.Sleep(slowDelay)
	case faultUnavailable:
		return nil, unavailable(fmt.Errorf("open %s: %w", name, errInjectedTimeout))
	case faultMissing:
		return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
	case faultMidway:
		r, err := f.Backend.Open(name)
		if err != nil {
			return nil, err
		}
		return &faultReader{ObjectReader: r, midway: true}, nil
	case faultCorrupt:
		r, err := f.Backend.Open(name)
		if err != nil {
			return nil, err
		}
		return &faultReader{ObjectReader: r}, nil
	}
	return f.Backend.Open(name)
}

func (f *faultBackend) Stat(name string) (ObjectInfo, error) {
	switch f.match(name, faultSlow, faultUnavailable) {
	case faultSlow:
		time.Sleep(slowDelay)
	case faultUnavailable:
		return ObjectInfo{}, unavailable(fmt.Errorf("stat %s: %w", name, errInjectedTimeout))
	}
	return f.Backend.Stat(name)
}

func (f *faultBackend) List(dir string) ([]ObjectInfo, error) {
	switch f.match(dir, faultSlow, faultUnavailable) {
	case faultSlow:
		time.Sleep(slowDelay)
	case faultUnavailable:
		return nil, unavailable(fmt.Errorf("list %q: %w", dir, errInjectedTimeout))
	}
	return f.Backend.List(dir)
}

// faultReader flips the first byte it reads, or (midway) fails after it.
type faultReader struct {
	ObjectReader
	midway bool
	n      int64
}

func (r *faultReader) Read(p []byte) (int, error) {
	if r.midway && r.n > 0 {
		return 0, unavailable(errInjectedTimeout)
	}
	if r.midway && len(p) > 1 {
		p = p[:1]
	}
	n, err := r.ObjectReader.Read(p)
	if r.n == 0 && n > 0 && !r.midway {
		p[0] ^= 0xff
	}
	r.n += int64(n)
	return n, err
}

// injectFaults wraps s's backend in a faultBackend and returns it.
func injectFaults(s *Storage) *faultBackend {
	f := &faultBackend{Backend: s.b}
	s.b = f
	return f
}

// setFS makes the directory backend of s (under any faultBackend) work
// through fsys.
func setFS(s *Storage, fsys storageFS) {
	b := s.b
	for {
		f, ok := b.(*faultBackend)
		if !ok {
			break
		}
		b = f.Backend
	}
	b.(*dirBackend).fs = fsys
}

// TestBackendsUnavailableIsNotCorrupt: on every backend, a checkpoint that
// cannot be read now (its listing, metadata or files time out, at the open
// or midway) stops LatestUsable with ErrUnavailable, never passing it over
// for an older one or reporting none, and is found again once the store
// answers; bad bytes and a missing file the metadata names are corruption,
// skipped for the older checkpoint; a slow store is only slow.
func TestBackendsUnavailableIsNotCorrupt(t *testing.T) {
	const chk2 = "chk-0000000002/"
	for _, tc := range []struct {
		name    string
		prefix  string
		fault   fault
		corrupt bool // a verdict: 2 is skipped for 1
	}{
		{"listing times out", "", faultUnavailable, false},
		{"metadata times out", chk2 + MetadataName, faultUnavailable, false},
		{"state file open times out", chk2 + "tasks/", faultUnavailable, false},
		{"state file read times out midway", chk2 + "tasks/", faultMidway, false},
		{"state file bytes damaged", chk2 + "tasks/0-1/state/000002.sst", faultCorrupt, true},
		{"state file missing", chk2 + "tasks/0-1/channels/", faultMissing, true},
		{"metadata removed since listed", chk2 + MetadataName, faultMissing, true},
		{"slow store", "", faultSlow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, b backend) {
				s := b.s
				writeTestCheckpoint(t, s, 1)
				writeTestCheckpoint(t, s, 2)
				f := injectFaults(s)
				f.set(tc.prefix, tc.fault)
				m, skipped, err := s.LatestUsable()
				if f.faulted() == 0 {
					t.Fatal("no call was injected a fault")
				}
				switch {
				case tc.fault == faultSlow:
					if err != nil || m.ID != 2 || len(skipped) != 0 {
						t.Fatalf("LatestUsable on a slow store = %v, %v, %v; want checkpoint 2", m, skipped, err)
					}
					return
				case tc.corrupt:
					if err != nil || m.ID != 1 || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) || errors.Is(skipped[0], ErrUnavailable) {
						t.Fatalf("LatestUsable with 2 corrupt = %v, %v, %v; want 1, 2 skipped as corrupt", m, skipped, err)
					}
					return
				}
				if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoCheckpoint) || errors.Is(err, ErrCorrupt) || m != nil || len(skipped) != 0 {
					t.Fatalf("LatestUsable, 2 unreadable now = %v, %v, %v; want ErrUnavailable, nothing skipped", m, skipped, err)
				}
				if !errors.Is(err, errReadTimeout) {
					t.Fatalf("error %q hides its cause", err)
				}
				f.clear()
				// Nothing was deleted on the way.
				if ids, err := s.Completed(); err != nil || len(ids) != 2 {
					t.Fatalf("Completed = %v, %v; want both checkpoints kept", ids, err)
				}
				if m, skipped, err := s.LatestUsable(); err != nil || m.ID != 2 || len(skipped) != 0 {
					t.Fatalf("LatestUsable once the store answers = %v, %v, %v; want checkpoint 2", m, skipped, err)
				}
			})
		})
	}
}

// TestBackendsFailedPutLeavesNothing: on every backend, a put cut short
// after its bytes (a lost connection) leaves no object, so a checkpoint
// file or _metadata never half-lands, and the checkpoint stays incomplete.
func TestBackendsFailedPutLeavesNothing(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		writeTestCheckpoint(t, s, 1)
		before := b.names()
		f := injectFaults(s)
		f.set("", faultPut)
		if _, err := s.WriteFile(2, "tasks/0-1/channels/in-0-0", []byte("data")); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("WriteFile through a failing put = %v", err)
		}
		if err := s.WriteMetadata(&Metadata{ID: 2, Kind: KindCheckpoint}); err == nil {
			t.Fatal("WriteMetadata through a failing put succeeded")
		}
		if after := b.names(); !slices.Equal(before, after) {
			t.Fatalf("failed puts changed the storage: %v → %v", before, after)
		}
		f.clear()
		if ids, err := s.Completed(); err != nil || !slices.Equal(ids, []int64{1}) {
			t.Fatalf("Completed = %v, %v; want [1]", ids, err)
		}
	})
}

// TestBackendsDiscard: on every backend, Discard removes a checkpoint and
// only it, twice is no error, and one cut short after its _metadata went
// leaves an incomplete checkpoint (never a complete one with files
// missing) that CleanIncomplete removes; a failure to remove _metadata
// leaves the checkpoint complete and usable.
func TestBackendsDiscard(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		for id := int64(1); id <= 3; id++ {
			writeTestCheckpoint(t, s, id)
		}
		if err := s.Discard(1); err != nil {
			t.Fatalf("Discard(1): %v", err)
		}
		for _, n := range b.names() {
			if strings.HasPrefix(n, "chk-0000000001") {
				t.Fatalf("Discard(1) left %s", n)
			}
		}
		if err := s.Discard(1); err != nil {
			t.Fatalf("Discard of a discarded checkpoint: %v", err)
		}
		f := injectFaults(s)
		f.set("chk-0000000002/", faultDelete)
		f.set("chk-0000000002/"+MetadataName, 0)
		if err := s.Discard(2); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("Discard with its files undeletable = %v", err)
		}
		f.set("chk-0000000003/"+MetadataName, faultDelete)
		if err := s.Discard(3); err == nil {
			t.Fatal("Discard with _metadata undeletable succeeded")
		}
		f.clear()
		if ids, err := s.Completed(); err != nil || !slices.Equal(ids, []int64{3}) {
			t.Fatalf("Completed after failed discards = %v, %v; want [3]", ids, err)
		}
		if m, _, err := s.LatestUsable(); err != nil || m.ID != 3 {
			t.Fatalf("LatestUsable = %v, %v; want checkpoint 3 intact", m, err)
		}
		if removed, err := s.CleanIncomplete(); err != nil || !slices.Equal(removed, []int64{2}) {
			t.Fatalf("CleanIncomplete = %v, %v; want [2]", removed, err)
		}
		for _, n := range b.names() {
			if strings.HasPrefix(n, "chk-0000000002") {
				t.Fatalf("CleanIncomplete left %s", n)
			}
		}
	})
}

// TestBackendsCopyCheckpoint: a checkpoint with shared and compressed
// files copies from every backend into a directory and into an object
// store, self-contained, and restores there; a source that cannot be read
// now, or holds damaged bytes, stops the copy with that error, and nothing
// at the destination looks complete.
func TestBackendsCopyCheckpoint(t *testing.T) {
	files := map[string]string{"000002.sst": strings.Repeat("two ", 500), "000003.sst": "three", "OPTIONS-1": "o"}
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		if err := s.SetCompression(1); err != nil {
			t.Fatal(err)
		}
		m := writeSavepoint(t, s, 3, files)
		nc := b.nc
		if nc == nil {
			nc = startJetStream(t)
		}
		for i, loc := range []string{filepath.Join(t.TempDir(), "dst"), "nats-obj://copies/c"} {
			dst, err := OpenStorageAt(loc, nc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.CopyCheckpoint(3, dst); err != nil {
				t.Fatalf("CopyCheckpoint to %s: %v", loc, err)
			}
			got, err := dst.ReadMetadata(3)
			if err != nil || !reflect.DeepEqual(got.Tasks, m.Tasks) {
				t.Fatalf("copied metadata %v, %v", got, err)
			}
			out := t.TempDir()
			if err := dst.Restore(got, testTask, out); err != nil {
				t.Fatalf("Restore from %s: %v", loc, err)
			}
			if tree := readTree(t, out); !reflect.DeepEqual(tree, files) {
				t.Fatalf("restored from %s: %v, want %v", loc, tree, files)
			}

			f := injectFaults(s)
			for _, k := range []fault{faultMidway, faultCorrupt} {
				other, err := OpenStorageAt(JoinLocation(loc, fmt.Sprintf("fault-%d-%d", i, k)), nc)
				if err != nil {
					t.Fatal(err)
				}
				f.set(SharedDir+"/", k)
				_, err = s.CopyCheckpoint(3, other)
				f.clear()
				if k == faultMidway && (!errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt)) {
					t.Fatalf("copy from a source that times out = %v; want ErrUnavailable", err)
				}
				if k == faultCorrupt && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("copy of damaged bytes = %v; want ErrCorrupt", err)
				}
				if ids, err := other.Completed(); err != nil || len(ids) != 0 {
					t.Fatalf("after a failed copy the destination holds %v, %v", ids, err)
				}
			}
			s.b = f.Backend
		}
	})
}
