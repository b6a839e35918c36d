package builtin

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// storeServices is Services over a real state store.
type storeServices struct {
	*state.VertexState
}

func (storeServices) Watermark() int64      { return abi.MinWatermark }
func (storeServices) ProcessingTime() int64 { return 0 }
func (storeServices) Log(int32, string)     {}

// The count over a state store: keys repeated within a batch and across
// batches, and flushes between batches, give the exact counts, one
// end-of-input timer per key and the final counts at the end.
func TestCountOverStore(t *testing.T) {
	store, err := state.Open(state.Options{Dir: t.TempDir(), MaxParallelism: 128, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, CacheEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := storeServices{store.Vertex("count", true)}
	op, _ := New("count")
	if err := op.Open(operator.Spec{VertexID: "count", Keyed: true}, svc); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]uint64{}
	for range 200 {
		var b abi.Builder
		for range 1 + rng.IntN(300) {
			k := "k" + strconv.Itoa(rng.IntN(500))
			want[k]++
			b.Add(0, 0, []byte(k), nil)
		}
		if err := op.Process(b.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
		if store.Pending() >= store.CacheEntries() {
			if err := store.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var tb abi.Builder
	n, err := svc.PopTimers(abi.TimeEvent, abi.MaxWatermark, &tb)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("%d timers fired, want one per key: %d", n, len(want))
	}
	var out collect
	if err := op.OnTimers(tb.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.recs) != len(want) {
		t.Fatalf("%d final counts, want %d", len(out.recs), len(want))
	}
	for _, r := range out.recs {
		if got, w := string(r.Value), strconv.FormatUint(want[string(r.Key)], 10); got != w {
			t.Fatalf("count of %s = %s, want %s", r.Key, got, w)
		}
	}
}

// A key several times in one batch counts every time: in a row, apart, and
// in several chunks of 256 records (as a batched count would read them),
// with the state read back after the batch.
func TestCountRepeatsInOneBatch(t *testing.T) {
	store, err := state.Open(state.Options{Dir: t.TempDir(), MaxParallelism: 128, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := storeServices{store.Vertex("count", true)}
	op, _ := New("count")
	if err := op.Open(operator.Spec{VertexID: "count", Keyed: true}, svc); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "a", "a", "c", "b", "a"}
	for i := range 300 {
		keys = append(keys, "k"+strconv.Itoa(i%7), "a")
	}
	want := map[string]uint64{}
	var b abi.Builder
	for _, k := range keys {
		want[k]++
		b.Add(0, 0, []byte(k), nil)
	}
	for round := 1; round <= 2; round++ {
		if err := op.Process(b.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
		for k, n := range want {
			v, err := svc.StateGet(0, []byte(k), nil, nil)
			if err != nil || len(v) != 8 || leUint64(v) != uint64(round)*n {
				t.Errorf("round %d: state of %q = %x, %v; want %d", round, k, v, err, uint64(round)*n)
			}
		}
	}
}
