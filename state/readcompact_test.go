package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

// deepL0 writes rounds × perRound keys, each round spread over the whole
// key space and flushed to an L0 table of its own, so that every read
// that misses the cache probes every round's sublevel.
func deepL0(t *testing.T, s *Store, v *VertexState, h int32, rounds, perRound int) {
	t.Helper()
	for r := range rounds {
		for i := range perRound {
			k := i*rounds + r
			mustPut(t, v, h, fmt.Sprintf("k%07d", k), "", fmt.Sprintf("v%d", k))
		}
		flush(t, s)
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func l0Sublevels(s *Store) int32 { return s.db.Metrics().Levels[0].Sublevels }

// TestReadsCompactDeepL0: a store whose L0 is deep and that then only
// reads, missing its cache, compacts L0 once the reads have cost more than
// a rewrite; the reads go on meanwhile and find every value.
func TestReadsCompactDeepL0(t *testing.T) {
	const rounds, perRound = 8, 4000
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, CacheEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	deepL0(t, s, v, h, rounds, perRound)
	if sub := l0Sublevels(s); sub < readCompactMinSublevels {
		t.Fatalf("L0 has %d sublevels after %d flushes; the test needs at least %d", sub, rounds, readCompactMinSublevels)
	}
	n := rounds * perRound
	deadline := time.Now().Add(2 * time.Minute)
	for pass := 0; ; pass++ {
		for k := range n {
			// A stride through the keys, so that the small cache misses.
			k = (k * 7919) % n
			expectGet(t, v, h, fmt.Sprintf("k%07d", k), "", fmt.Sprintf("v%d", k), false)
		}
		if s.rcomp.runs > 0 && !s.rcomp.running || s.rcomp.runs > 0 && l0Sublevels(s) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d passes of reads: %d read compactions, L0 at %d sublevels", pass+1, s.rcomp.runs, l0Sublevels(s))
		}
	}
	// The compaction ends (polled: it runs on its own goroutine).
	for l0Sublevels(s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("L0 still has %d sublevels after the read compaction", l0Sublevels(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.rcomp.runs != 1 {
		t.Fatalf("%d read compactions; want 1", s.rcomp.runs)
	}
	for k := range n {
		expectGet(t, v, h, fmt.Sprintf("k%07d", k), "", fmt.Sprintf("v%d", k), false)
	}
}

// TestReadCompactorLook: the decision, look by look.
func TestReadCompactorLook(t *testing.T) {
	const mb = 1 << 20
	type look struct {
		n    int64
		sub  int32
		size int64
		want bool
	}
	for _, c := range []struct {
		name  string
		looks []look
	}{
		{"deep L0 and reads only: compact once reads cost a rewrite", []look{
			{4096, 20, 100 * mb, false}, // the first look sees a new shape
			{4096, 20, 100 * mb, false}, // 4096×20×256 = 20 MiB
			{4096, 20, 100 * mb, false},
			{4096, 20, 100 * mb, false},
			{4096, 20, 100 * mb, false}, // 80 MiB
			{4096, 20, 100 * mb, true},  // 100 MiB
		}},
		{"shallow L0: never", []look{
			{4096, 3, mb, false}, {1 << 30, 3, mb, false}, {1 << 30, 3, mb, false},
		}},
		{"a new sublevel at every look: never", []look{
			{4096, 10, mb, false}, {1 << 20, 11, mb, false}, {1 << 20, 12, mb, false}, {1 << 20, 13, mb, false},
		}},
		{"a change of shape starts the count again", []look{
			{4096, 8, 64 * mb, false}, {16384, 8, 64 * mb, false}, // 32 MiB
			{4096, 9, 64 * mb, false},  // new shape: dropped
			{16384, 9, 64 * mb, false}, // 36 MiB
			{16384, 9, 64 * mb, true},  // 72 MiB
		}},
		{"2 GB of state, 100,000 reads an interval at 56 sublevels: never", []look{
			{4096, 56, 2600 * mb, false}, {100000, 56, 2600 * mb, false}, {4096, 57, 2600 * mb, false},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rc readCompactor
			for i, l := range c.looks {
				if got := rc.look(l.n, l.sub, l.size); got != l.want {
					t.Fatalf("look %d (%d reads, %d sublevels, %d bytes) = %v; want %v", i, l.n, l.sub, l.size, got, l.want)
				}
			}
		})
	}
}

// TestCloseDuringReadCompaction: Close and Discard wait for a compaction
// under way (Pebble must not close under it) and succeed.
func TestCloseDuringReadCompaction(t *testing.T) {
	for _, discard := range []bool{false, true} {
		dir := t.TempDir()
		s, err := Open(Options{Dir: dir, KeyGroups: fullRange, CacheEntries: 64})
		if err != nil {
			t.Fatal(err)
		}
		v := s.Vertex("v", true)
		h := mustRegister(t, v, "s", abi.StateValue)
		deepL0(t, s, v, h, 6, 3000)
		s.startReadCompaction()
		if !s.rcomp.running {
			t.Fatal("no compaction started")
		}
		if discard {
			err = s.Discard()
		} else {
			err = s.Close()
		}
		if err != nil {
			t.Fatalf("closing (discard %v) during a read compaction: %v", discard, err)
		}
		if discard {
			continue
		}
		s = openStore(t, dir, fullRange)
		v = s.Vertex("v", true)
		h = mustRegister(t, v, "s", abi.StateValue)
		for k := range 6 * 3000 {
			expectGet(t, v, h, fmt.Sprintf("k%07d", k), "", fmt.Sprintf("v%d", k), false)
		}
		closeStore(t, s)
	}
}
