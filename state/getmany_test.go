package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// TestStateGetManyAsStateGet checks that StateGetMany answers every pair
// as StateGet does: values in the cache (clean and dirty), values only in
// Pebble, absences known and unknown, deletions, values too large to stay
// cached, keys of another subtask's key groups, bad handles, pairs
// repeated, chunks ended by their count or by their keys' size, and a
// cache small enough that the batch's own loads evict entries it warmed.
func TestStateGetManyAsStateGet(t *testing.T) {
	half := abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism/2 - 1}
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: half, CacheEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	m := mustRegister(t, v, "map", abi.StateMap)
	rng := rand.New(rand.NewPCG(3, 4))
	var keys [][]byte
	for range 40 {
		keys = append(keys, keyIn(t, "k", rng.IntN(int(half.End)+1)))
	}
	// Keys of 30 KiB end a chunk after a few pairs (manyGetKeyBytes).
	for range 4 {
		keys = append(keys, keyIn(t, strings.Repeat("K", 30<<10), rng.IntN(int(half.End)+1)))
	}
	foreign := keyIn(t, "far", abi.DefaultMaxParallelism-1)
	big := bytes.Repeat([]byte("x"), maxCachedValue+1)
	for i, k := range keys {
		switch i % 5 {
		case 0, 1:
			mustPut(t, v, h, string(k), "", fmt.Sprintf("v%d", i))
		case 2:
			if err := v.StatePut(h, k, nil, big); err != nil {
				t.Fatal(err)
			}
		case 3:
			mustPut(t, v, m, string(k), "ns", "in-map")
			mustDelete(t, v, h, string(k), "")
		}
	}
	// Most of it to Pebble, out of the 16-entry cache; some dirty again.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(keys); i += 7 {
		mustPut(t, v, h, string(keys[i]), "", "dirty")
	}
	type pair struct {
		h       int32
		key, ns []byte
	}
	for round := range 20 {
		var pairs []pair
		for range 1 + rng.IntN(300) { // several chunks (manyGetChunk)
			p := pair{h: h, key: keys[rng.IntN(len(keys))]}
			switch rng.IntN(12) {
			case 0:
				p.key = foreign
			case 1:
				p.h = m
				p.ns = []byte("ns")
			case 2:
				p.h = 9
			}
			pairs = append(pairs, p)
		}
		// StateGetMany takes one handle: split the batch by handle as a
		// guest's calls would.
		for _, hh := range []int32{h, m, 9} {
			var sel []pair
			for _, p := range pairs {
				if p.h == hh {
					sel = append(sel, p)
				}
			}
			var want []string
			for _, p := range sel {
				got, err := v.StateGet(hh, p.key, p.ns, nil)
				want = append(want, describe(got, err))
			}
			var got []string
			err := v.StateGetMany(hh, len(sel), func(j int) ([]byte, []byte) { return sel[j].key, sel[j].ns },
				func(j int, val []byte, _ operator.StateRef, err error) error {
					if j != len(got) {
						t.Fatalf("round %d: answer %d came after %d answers", round, j, len(got))
					}
					got = append(got, describe(val, err))
					return nil
				})
			if err != nil {
				t.Fatalf("round %d: StateGetMany: %v", round, err)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("round %d, handle %d: StateGetMany answered\n%s\nStateGet\n%s", round, hh, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	// fn's error stops the batch and comes back.
	stop := errors.New("stop")
	calls := 0
	err = v.StateGetMany(h, 3, func(int) ([]byte, []byte) { return keys[0], nil },
		func(int, []byte, operator.StateRef, error) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("StateGetMany after fn's error: %v after %d calls, want stop after 1", err, calls)
	}
}

// describe is a get's outcome as text: the value (its length when long) or
// the error's status.
func describe(val []byte, err error) string {
	if err != nil {
		return fmt.Sprintf("status %d", operator.Status(err))
	}
	if len(val) > 32 {
		return fmt.Sprintf("%d bytes", len(val))
	}
	return fmt.Sprintf("%q", val)
}
