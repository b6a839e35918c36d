package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

func openLazy(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, KeyGroups: fullRange, Lazy: true})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

// hasPebble reports whether dir holds a Pebble store.
func hasPebble(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "OPTIONS-") {
			return true
		}
	}
	return false
}

// TestLazyServesBeforePebbleOpens: a new store opened lazily answers reads
// and takes writes, rolled back or not, without Pebble; the first Flush
// opens it, and what the store was given is there.
func TestLazyServesBeforePebbleOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	s := openLazy(t, dir)
	v := s.Vertex("counter", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	expectGet(t, v, h, "a", "", "", true)
	mustPut(t, v, h, "a", "", "1")
	mustPut(t, v, h, "b", "", "2")
	mustDelete(t, v, h, "b", "")
	expectGet(t, v, h, "a", "", "1", false)
	expectGet(t, v, h, "b", "", "", true)
	if s.Pending() != 2 || s.PendingBytes() == 0 || s.HeldBytes() == 0 {
		t.Fatalf("Pending %d, PendingBytes %d, HeldBytes %d before the open: want 2 and more than 0",
			s.Pending(), s.PendingBytes(), s.HeldBytes())
	}
	if m := s.Metrics(); m.Stores != 1 || m.DiskBytes != 0 {
		t.Fatalf("Metrics before the open = %+v", m)
	}
	// The undo journal works over the cache alone.
	s.BeginUndo()
	mustPut(t, v, h, "a", "", "2")
	mustPut(t, v, h, "c", "", "3")
	if err := s.RollbackUndo(); err != nil {
		t.Fatal(err)
	}
	expectGet(t, v, h, "a", "", "1", false)
	expectGet(t, v, h, "c", "", "", true)
	if s.db != nil || hasPebble(dir) {
		t.Fatal("a read or write opened Pebble")
	}
	flush(t, s)
	if s.db == nil || !hasPebble(dir) {
		t.Fatal("Flush of changes did not open Pebble")
	}
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("counter", true)
	h = mustRegister(t, v, "count", abi.StateValue)
	expectGet(t, v, h, "a", "", "1", false)
	expectGet(t, v, h, "b", "", "", true)
	expectGet(t, v, h, "c", "", "", true)
}

// TestLazyOpensWhereItNeedsPebble: a Flush with nothing to write and a
// Close of a store never written to leave Pebble unopened; iteration,
// checkpoints, exports and a Close with changes open it.
func TestLazyOpensWhereItNeedsPebble(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	s := openLazy(t, dir)
	v := s.Vertex("m", true)
	mustRegister(t, v, "entries", abi.StateMap)
	expectGet(t, v, 0, "k", "n", "", true)
	flush(t, s)
	closeStore(t, s)
	if hasPebble(dir) {
		t.Fatal("a store never written to made a Pebble store")
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a second Close = %v, want ErrClosed", err)
	}

	steps := []struct {
		name string
		run  func(t *testing.T, s *Store, v *VertexState, h int32) error
	}{
		{"StateIter", func(t *testing.T, s *Store, v *VertexState, h int32) error {
			return v.StateIter(h, []byte("k"), nil, nil, func(ns, value []byte) bool { return true })
		}},
		{"Checkpoint", func(t *testing.T, s *Store, v *VertexState, h int32) error {
			return s.Checkpoint(filepath.Join(t.TempDir(), "ckpt"))
		}},
		{"ExportCanonical", func(t *testing.T, s *Store, v *VertexState, h int32) error {
			_, err := s.ExportCanonical(&strings.Builder{}, 1)
			return err
		}},
		{"Close", func(t *testing.T, s *Store, v *VertexState, h int32) error {
			if err := v.StatePut(h, []byte("k"), []byte("n"), []byte("v")); err != nil {
				return err
			}
			return s.Close()
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			s := openLazy(t, dir)
			v := s.Vertex("m", true)
			h := mustRegister(t, v, "entries", abi.StateMap)
			if err := st.run(t, s, v, h); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if !hasPebble(dir) {
				t.Fatalf("%s did not open Pebble", st.name)
			}
			if st.name != "Close" {
				closeStore(t, s)
			}
		})
	}
}

// TestLazyOpenFailureIsSticky: a Pebble open that fails fails the call that
// needed it, and every call after it, with the cause.
func TestLazyOpenFailureIsSticky(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	s := openLazy(t, dir)
	v := s.Vertex("counter", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	mustPut(t, v, h, "a", "", "1")
	// A file where the store's directory should be: Pebble cannot make it.
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Flush()
	if err == nil || !strings.Contains(err.Error(), "open pebble in "+dir) {
		t.Fatalf("Flush after a failed open = %v, want the open's failure", err)
	}
	if err2 := v.StatePut(h, []byte("a"), nil, []byte("2")); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("StatePut after a failed open = %v, want %v", err2, err)
	}
	if _, err2 := v.StateGet(h, []byte("a"), nil, nil); err2 == nil {
		t.Fatal("StateGet after a failed open succeeded")
	}
	if err2 := s.Close(); err2 != nil {
		t.Fatalf("Close after a failed open that Flush reported = %v, want nil", err2)
	}
	if err2 := s.Close(); !errors.Is(err2, ErrClosed) {
		t.Fatalf("a second Close = %v, want ErrClosed", err2)
	}

	// Close is the first to need Pebble.
	dir = filepath.Join(t.TempDir(), "new")
	s = openLazy(t, dir)
	v = s.Vertex("counter", true)
	h = mustRegister(t, v, "count", abi.StateValue)
	mustPut(t, v, h, "a", "", "1")
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "open pebble in "+dir) {
		t.Fatalf("Close of a store whose open failed = %v, want the open's failure", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a second Close = %v, want ErrClosed", err)
	}
}

// TestLazyOnlyForNewDirectories: a directory that holds a store opens at
// once, with its contents and timers, whatever Lazy says; an existing empty
// one opens lazily.
func TestLazyOnlyForNewDirectories(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("counter", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	mustPut(t, v, h, "a", "", "1")
	if err := v.RegisterTimer(abi.TimeEvent, []byte("a"), nil, 7); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	s = openLazy(t, dir)
	defer closeStore(t, s)
	if s.lazy != nil || s.db == nil {
		t.Fatal("a store with contents was not opened at once")
	}
	v = s.Vertex("counter", true)
	h = mustRegister(t, v, "count", abi.StateValue)
	expectGet(t, v, h, "a", "", "1", false)
	if ts, ok := v.NextTimer(abi.TimeEvent); !ok || ts != 7 {
		t.Fatalf("NextTimer = %d, %t; want the stored timer at 7", ts, ok)
	}

	s2 := openLazy(t, t.TempDir())
	if s2.lazy == nil {
		t.Fatal("a store in an empty directory was opened at once")
	}
	closeStore(t, s2)
}

// TestLazyTimers: timers registered, deleted, popped and rolled back before
// Pebble opens work from memory, and reach Pebble, in order, with the first
// Flush.
func TestLazyTimers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	s := openLazy(t, dir)
	v := s.Vertex("w", true)
	mustTimer(t, v, abi.TimeEvent, "a", "", 10)
	mustTimer(t, v, abi.TimeEvent, "b", "", 20)
	mustTimer(t, v, abi.TimeEvent, "c", "", 30)
	mustTimer(t, v, abi.TimeEvent, "d", "", 40)
	if err := v.DeleteTimer(abi.TimeEvent, []byte("b"), nil, 20); err != nil {
		t.Fatal(err)
	}
	expectTimers(t, pop(t, v, abi.TimeEvent, 10), "10:a/")
	s.BeginUndo()
	mustTimer(t, v, abi.TimeEvent, "e", "", 50)
	if err := v.DeleteTimer(abi.TimeEvent, []byte("c"), nil, 30); err != nil {
		t.Fatal(err)
	}
	if err := s.RollbackUndo(); err != nil {
		t.Fatal(err)
	}
	mustTimer(t, v, abi.TimeEvent, "b", "", 25) // a key deleted earlier, again at another time
	if s.db != nil || hasPebble(dir) {
		t.Fatal("a timer opened Pebble")
	}
	if s.Pending() == 0 || s.PendingBytes() == 0 {
		t.Fatalf("Pending %d, PendingBytes %d with staged timers: want more than 0", s.Pending(), s.PendingBytes())
	}
	if ts, ok := v.NextTimer(abi.TimeEvent); !ok || ts != 25 {
		t.Fatalf("NextTimer = %d, %t; want 25", ts, ok)
	}
	flush(t, s)
	if !hasPebble(dir) || s.Pending() != 0 {
		t.Fatalf("after Flush: Pebble store %t, %d pending; want a store and nothing pending", hasPebble(dir), s.Pending())
	}
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	expectTimers(t, pop(t, s.Vertex("w", true), abi.TimeEvent, 1000), "25:b/", "30:c/", "40:d/")
}

// TestDiscard: a store discarded before Pebble opened leaves no Pebble
// store behind, timers and writes included; one discarded after it opened
// closes it without flushing what the batch holds; either refuses every
// later call.
func TestDiscard(t *testing.T) {
	t.Run("lazy", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		s := openLazy(t, dir)
		v := s.Vertex("counter", true)
		h := mustRegister(t, v, "count", abi.StateValue)
		mustPut(t, v, h, "a", "", "1")
		if err := v.RegisterTimer(abi.TimeEvent, []byte("a"), nil, 10); err != nil {
			t.Fatal(err)
		}
		if err := s.Discard(); err != nil {
			t.Fatalf("Discard: %v", err)
		}
		if hasPebble(dir) {
			t.Fatal("Discard made a Pebble store")
		}
		if _, err := v.StateGet(h, []byte("a"), nil, nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("StateGet after Discard: %v, want ErrClosed", err)
		}
		if err := s.Discard(); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Discard: %v, want ErrClosed", err)
		}
		if err := s.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Close after Discard: %v, want ErrClosed", err)
		}
	})
	t.Run("open", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, fullRange)
		v := s.Vertex("counter", true)
		h := mustRegister(t, v, "count", abi.StateValue)
		mustPut(t, v, h, "a", "", "1")
		flush(t, s)
		mustPut(t, v, h, "b", "", "2")
		if err := s.Discard(); err != nil {
			t.Fatalf("Discard: %v", err)
		}
		if err := s.Flush(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Flush after Discard: %v, want ErrClosed", err)
		}
		// Pebble was closed: the directory opens again. What Flush
		// handed it is there or not (no WAL); the later put is not.
		s = openStore(t, dir, fullRange)
		defer closeStore(t, s)
		v = s.Vertex("counter", true)
		h = mustRegister(t, v, "count", abi.StateValue)
		expectGet(t, v, h, "b", "", "", true)
	})
}
