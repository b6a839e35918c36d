package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// TestUndoRollbackRestoresBatchStart runs random calls of puts, deletes,
// timer registrations and deletions against a store with a tiny cache (so
// entries are evicted, reloaded and flushed mid-call) and a model; every
// call is committed or rolled back at random, and after each the store must
// equal the model: a rolled-back call leaves no trace. Some calls have
// commit points (dead-letter mode's commit: the journal committed and
// opened again mid-call), and a rollback then undoes only what came after
// the last one.
func TestUndoRollbackRestoresBatchStart(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, CacheEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "m", abi.StateMap)
	rng := rand.New(rand.NewPCG(7, 11))
	model := map[string]string{} // key/ns → value
	timers := map[string]int64{} // key/ns/ts → ts (event time)
	// Keys and values of either side of what a cache entry holds inline.
	key := func() (string, string) {
		i := rng.IntN(12)
		return fmt.Sprintf("k%d%s", i, strings.Repeat("k", i/8*inlineRoom)), fmt.Sprintf("n%d", rng.IntN(3))
	}
	rolledBack, committed, points := 0, 0, 0
	for call := 0; call < 400; call++ {
		next := maps.Clone(model)
		nextT := maps.Clone(timers)
		s.BeginUndo()
		for range 1 + rng.IntN(20) {
			if rng.IntN(8) == 0 {
				// A commit point: what the call did so far stays.
				s.CommitUndo()
				s.BeginUndo()
				model, timers = maps.Clone(next), maps.Clone(nextT)
				points++
			}
			k, ns := key()
			switch op := rng.IntN(10); {
			case op < 4:
				val := fmt.Sprintf("v%d", rng.IntN(1000)) + strings.Repeat("v", rng.IntN(3)*inlineRoom/2)
				mustPut(t, v, h, k, ns, val)
				next[k+"/"+ns] = val
			case op < 6:
				mustDelete(t, v, h, k, ns)
				delete(next, k+"/"+ns)
			case op < 8:
				ts := int64(rng.IntN(5))
				if err := v.RegisterTimer(abi.TimeEvent, []byte(k), []byte(ns), ts); err != nil {
					t.Fatal(err)
				}
				nextT[fmt.Sprintf("%s/%s/%d", k, ns, ts)] = ts
			case op < 9:
				ts := int64(rng.IntN(5))
				if err := v.DeleteTimer(abi.TimeEvent, []byte(k), []byte(ns), ts); err != nil {
					t.Fatal(err)
				}
				delete(nextT, fmt.Sprintf("%s/%s/%d", k, ns, ts))
			default:
				// Iterating flushes the key's writes to Pebble mid-call.
				if err := v.StateIter(h, []byte(k), nil, nil, func(ns, val []byte) bool { return true }); err != nil {
					t.Fatal(err)
				}
			}
		}
		if rng.IntN(3) == 0 {
			if err := s.RollbackUndo(); err != nil {
				t.Fatal(err)
			}
			rolledBack++
		} else {
			s.CommitUndo()
			model, timers = next, nextT
			committed++
		}
		if rng.IntN(4) == 0 {
			flush(t, s)
		}
		checkUndoModel(t, call, v, h, model, timers)
	}
	if rolledBack == 0 || committed == 0 || points == 0 {
		t.Fatalf("%d calls rolled back, %d committed, %d commit points: the test exercised one side only", rolledBack, committed, points)
	}
}

// TestUndoEpochWraps: an entry journaled 2^32 journals ago carries the
// epoch number a journal gets again once the counter wraps, and must still
// be journaled in that one (commit points open a journal every 128
// records, which wraps the counter after about 5·10^11 records).
func TestUndoEpochWraps(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "m", abi.StateMap)
	s.BeginUndo() // epoch 1
	mustPut(t, v, h, "k0", "n0", "old")
	s.CommitUndo()
	s.undo.epoch = math.MaxUint32 // 2^32 - 2 journals later
	s.BeginUndo()                 // the counter wraps to 1 again
	mustPut(t, v, h, "k0", "n0", "new")
	if err := s.RollbackUndo(); err != nil {
		t.Fatal(err)
	}
	checkUndoModel(t, 0, v, h, map[string]string{"k0/n0": "old"}, map[string]int64{})
}

func checkUndoModel(t *testing.T, call int, v *VertexState, h int32, model map[string]string, timers map[string]int64) {
	t.Helper()
	for i := range 12 {
		for j := range 3 {
			k, ns := fmt.Sprintf("k%d", i), fmt.Sprintf("n%d", j)
			got, err := v.StateGet(h, []byte(k), []byte(ns), nil)
			want, ok := model[k+"/"+ns]
			switch {
			case !ok && err != operator.ErrNotFound:
				t.Fatalf("after call %d: %s/%s = %q, %v; want absent", call, k, ns, got, err)
			case ok && (err != nil || string(got) != want):
				t.Fatalf("after call %d: %s/%s = %q, %v; want %q", call, k, ns, got, err, want)
			}
		}
	}
	var got []string
	for _, tm := range v.timers[abi.TimeEvent].heap {
		got = append(got, fmt.Sprintf("%s/%s/%d", tm.key, tm.ns, tm.ts))
	}
	slices.Sort(got)
	want := slices.Sorted(maps.Keys(timers))
	if !slices.Equal(got, want) {
		t.Fatalf("after call %d: timers %v, want %v", call, got, want)
	}
}

// TestUndoRollbackSurvivesReopen checks that a rolled-back change does not
// reach Pebble even when a flush had written it before the rollback.
func TestUndoRollbackSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "x", abi.StateValue)
	mustPut(t, v, h, "a", "", "old")
	flush(t, s)
	s.BeginUndo()
	mustPut(t, v, h, "a", "", "new")
	mustPut(t, v, h, "b", "", "born")
	if err := v.RegisterTimer(abi.TimeEvent, []byte("a"), nil, 5); err != nil {
		t.Fatal(err)
	}
	flush(t, s) // the call's writes reach Pebble
	if err := s.RollbackUndo(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("op", true)
	h = mustRegister(t, v, "x", abi.StateValue)
	expectGet(t, v, h, "a", "", "old", false)
	expectGet(t, v, h, "b", "", "", true)
	if ts, ok := v.NextTimer(abi.TimeEvent); ok {
		t.Fatalf("a rolled-back timer at %d survived a reopen", ts)
	}
}

// With a memory bound, a journal refuses the change that takes it past
// the bound (a *operator.MemoryQuotaError), and rolling back restores every
// value; without one it takes them all.
func TestUndoJournalIsBoundedByMemory(t *testing.T) {
	const (
		bound  = 1 << 20
		valLen = 400 << 10
	)
	for _, bounded := range []bool{false, true} {
		o := Options{Dir: t.TempDir(), KeyGroups: fullRange}
		if bounded {
			o.MemoryBytes = bound
		}
		s, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		v := s.Vertex("op", true)
		h := mustRegister(t, v, "blob", 2)
		old := func(k int) []byte { return bytes.Repeat([]byte{byte('a' + k)}, valLen) }
		for k := range 5 {
			if err := v.StatePut(h, fmt.Appendf(nil, "k%d", k), nil, old(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		s.BeginUndo()
		refused := -1
		for k := range 5 {
			if err := v.StatePut(h, fmt.Appendf(nil, "k%d", k), nil, []byte("x")); err != nil {
				if !errors.Is(err, operator.ErrMemoryQuota) {
					t.Fatalf("bounded %v: put %d: %v", bounded, k, err)
				}
				refused = k
				break
			}
		}
		switch {
		case bounded && refused != 2:
			t.Errorf("with a bound of %d bytes the put refused was %d, want 2 (the third old value of %d bytes)", bound, refused, valLen)
		case !bounded && refused != -1:
			t.Errorf("without a bound put %d was refused", refused)
		}
		if err := s.RollbackUndo(); err != nil {
			t.Fatal(err)
		}
		for k := range 5 {
			got, err := v.StateGet(h, fmt.Appendf(nil, "k%d", k), nil, nil)
			if err != nil || !bytes.Equal(got, old(k)) {
				t.Fatalf("bounded %v: key %d after the rollback: err %v, %d bytes", bounded, k, err, len(got))
			}
		}
		closeStore(t, s)
	}
}
