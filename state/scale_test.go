package state_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
)

type scaleServices struct{ *state.VertexState }

func (scaleServices) Watermark() int64      { return abi.MinWatermark }
func (scaleServices) ProcessingTime() int64 { return 1 }
func (scaleServices) Log(int32, string)     {}

// countsOut collects the (key, count) pairs a count operator emits.
type countsOut struct{ got map[string]string }

func (c *countsOut) Emit(_ uint32, _ int64, k, v []byte) error {
	c.got[string(k)] = string(v)
	return nil
}

func (c *countsOut) EmitBatch(b []byte) error {
	recs, err := abi.Decode(b)
	if err != nil {
		return err
	}
	for _, r := range recs {
		c.got[string(r.Key)] = string(r.Value)
	}
	return nil
}

// A keyed count (the native count operator: a state entry and an
// end-of-input timer per key) over more distinct keys than the old
// per-subtask timer bound of 200,000, in a store on the smallest worker
// budget, so that its cache holds a part of the keys and reads the rest
// from Pebble: every key's count comes out exact at the end of input.
// WSTREAM_STATE_SCALE_KEYS=5000000 runs it on 5M keys.
func TestKeyedCountBeyondCache(t *testing.T) {
	keys := 210_000
	if s := os.Getenv("WSTREAM_STATE_SCALE_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("WSTREAM_STATE_SCALE_KEYS=%q: want a positive number of keys", s)
		}
		keys = n
	}
	records := keys + keys/2
	budget := state.NewBudget(16 << 20)
	defer budget.Close()
	store, err := state.Open(state.Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	op, err := builtin.New("count")
	if err != nil {
		t.Fatal(err)
	}
	svc := scaleServices{store.Vertex("count", true)}
	if err := op.Open(operator.Spec{VertexID: "count", Operator: "count", Parallel: 1, MaxParallelism: abi.DefaultMaxParallelism, Keyed: true}, svc); err != nil {
		t.Fatal(err)
	}
	// Every key once (so that there are keys distinct ones), then half as
	// many records again at random: counts of 1 and more.
	want := make([]uint32, keys)
	rng := rand.New(rand.NewPCG(7, uint64(keys)))
	var bb abi.Builder
	var out countsOut
	for i := range records {
		k := i
		if i >= keys {
			k = rng.IntN(keys)
		}
		want[k]++
		bb.Add(0, int64(i), strconv.AppendInt([]byte("word-"), int64(k), 10), nil)
		if bb.Len() == 512 || i == records-1 {
			if err := op.Process(bb.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			bb.Reset()
			if store.Pending() >= store.CacheEntries() || store.PendingBytes() >= 32<<20 {
				if err := store.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if held := store.HeldBytes(); held > 32<<20 {
		t.Errorf("the store holds %d bytes of cache on a 16 MiB budget", held)
	}
	// End of input: every timer fires.
	out.got = make(map[string]string, keys)
	for {
		bb.Reset()
		n, err := svc.PopTimers(abi.TimeEvent, abi.MaxWatermark, &bb)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if err := op.OnTimers(bb.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.got) != keys {
		t.Fatalf("%d counts at the end of input, want %d", len(out.got), keys)
	}
	for k, n := range want {
		if got := out.got["word-"+strconv.Itoa(k)]; got != strconv.Itoa(int(n)) {
			t.Fatalf("word-%d counted %q, want %d", k, got, n)
		}
	}
}
