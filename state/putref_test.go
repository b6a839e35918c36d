package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// TestStatePutRefAsStatePut runs the same gets and puts on two stores,
// StatePutRef with the refs StateGetMany gave on one and StatePut on the
// other, and checks that they answer alike and hold the same state after
// every round: refs that still lead to their pair, refs gone stale (the
// 16-entry cache evicts most entries between rounds; flushes drop blind
// entries), refs of another pair (as when a guest changes the key bytes
// behind a pointer), refs of another state or vertex, made-up refs, keys
// of another subtask's key groups, bad handles, values over the limit,
// deletions in between, and puts inside undo journals that are rolled
// back or committed.
func TestStatePutRefAsStatePut(t *testing.T) {
	half := abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism/2 - 1}
	open := func() (*Store, *VertexState, *VertexState) {
		s, err := Open(Options{Dir: t.TempDir(), KeyGroups: half, CacheEntries: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeStore(t, s) })
		return s, s.Vertex("v", true), s.Vertex("w", true)
	}
	sa, va, wa := open() // StatePutRef
	sb, vb, wb := open() // StatePut
	for _, v := range []*VertexState{va, vb} {
		if h := mustRegister(t, v, "count", abi.StateValue); h != 0 {
			t.Fatal(h)
		}
		if m := mustRegister(t, v, "map", abi.StateMap); m != 1 {
			t.Fatal(m)
		}
	}
	for _, w := range []*VertexState{wa, wb} {
		mustRegister(t, w, "count", abi.StateValue)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var keys [][]byte
	for range 40 {
		keys = append(keys, keyIn(t, "k", rng.IntN(int(half.End)+1)))
	}
	foreign := keyIn(t, "far", abi.DefaultMaxParallelism-1)
	nss := [][]byte{nil, []byte("a"), []byte("ns-b")}
	type pair struct {
		h       int32
		key, ns []byte
		ref     operator.StateRef
	}
	pick := func() pair {
		p := pair{key: keys[rng.IntN(len(keys))]}
		switch rng.IntN(10) {
		case 0:
			p.key = foreign
		case 1, 2:
			p.h = 1
			p.ns = nss[rng.IntN(len(nss))]
		case 3:
			p.h = 7
		}
		return p
	}
	same := func(round int, what string, ea, eb error) {
		t.Helper()
		if operator.Status(ea) != operator.Status(eb) || (ea == nil) != (eb == nil) {
			t.Fatalf("round %d: %s: %v with refs, %v without", round, what, ea, eb)
		}
	}
	for round := range 300 {
		// Gets through StateGetMany on a, one handle at a time, keeping
		// the refs; StateGet on b.
		var pairs []pair
		for range 1 + rng.IntN(60) {
			pairs = append(pairs, pick())
		}
		for _, h := range []int32{0, 1, 7} {
			var idx []int
			for i, p := range pairs {
				if p.h == h {
					idx = append(idx, i)
				}
			}
			err := va.StateGetMany(h, len(idx), func(j int) ([]byte, []byte) { return pairs[idx[j]].key, pairs[idx[j]].ns },
				func(j int, val []byte, ref operator.StateRef, err error) error {
					p := &pairs[idx[j]]
					p.ref = ref
					want, werr := vb.StateGet(h, p.key, p.ns, nil)
					same(round, fmt.Sprintf("get %q %q", p.key, p.ns), err, werr)
					if !bytes.Equal(val, want) {
						t.Fatalf("round %d: get %q %q = %q with refs, %q without", round, p.key, p.ns, val, want)
					}
					return nil
				})
			if err != nil {
				t.Fatalf("round %d: StateGetMany: %v", round, err)
			}
		}
		undo := rng.IntN(4) == 0
		if undo {
			sa.BeginUndo()
			sb.BeginUndo()
		}
		// Puts of those pairs, in another order, with their refs or
		// others; deletions and other gets in between.
		rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
		for i, p := range pairs {
			ref := p.ref
			switch rng.IntN(12) {
			case 0:
				ref = pairs[rng.IntN(len(pairs))].ref // another pair's
			case 1:
				ref = operator.StateRef(rng.Uint32()) // made up
			case 2:
				p.key = keys[rng.IntN(len(keys))] // the bytes changed
			case 3:
				same(round, "a delete between puts", va.StateDelete(0, p.key, nil), vb.StateDelete(0, p.key, nil))
			case 4:
				q := pick()
				_, ea := va.StateGet(q.h, q.key, q.ns, nil)
				_, eb := vb.StateGet(q.h, q.key, q.ns, nil)
				same(round, "a get between puts", ea, eb)
			}
			val := []byte(fmt.Sprintf("r%d-%d", round, i))
			if rng.IntN(50) == 0 {
				val = make([]byte, operator.MaxValueSize+1)
			}
			if rng.IntN(20) == 0 {
				// Another vertex's state with the same name and handle.
				same(round, "put to w", wa.StatePutRef(0, p.key, nil, val, ref), wb.StatePut(0, p.key, nil, val))
				continue
			}
			same(round, fmt.Sprintf("put %q %q", p.key, p.ns), va.StatePutRef(p.h, p.key, p.ns, val, ref), vb.StatePut(p.h, p.key, p.ns, val))
		}
		if undo {
			if rng.IntN(2) == 0 {
				if err := sa.RollbackUndo(); err != nil {
					t.Fatal(err)
				}
				if err := sb.RollbackUndo(); err != nil {
					t.Fatal(err)
				}
			} else {
				sa.CommitUndo()
				sb.CommitUndo()
			}
		}
		if rng.IntN(5) == 0 {
			if err := sa.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := sb.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		// Both hold the same state.
		for _, k := range keys {
			for _, c := range []struct {
				a, b *VertexState
				h    int32
				ns   []byte
			}{{va, vb, 0, nil}, {wa, wb, 0, nil}, {va, vb, 1, nss[1]}, {va, vb, 1, nss[2]}, {va, vb, 1, nil}} {
				ga, ea := c.a.StateGet(c.h, k, c.ns, nil)
				gb, eb := c.b.StateGet(c.h, k, c.ns, nil)
				same(round, "state after the round", ea, eb)
				if !bytes.Equal(ga, gb) {
					t.Fatalf("round %d: %q %q holds %q with refs, %q without", round, k, c.ns, ga, gb)
				}
			}
		}
	}
}
