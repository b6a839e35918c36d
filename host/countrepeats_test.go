package host

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// TestWordcountCountRepeatsOverStore runs the wordcount modules' count
// over a real state store, through the SDKs' state cache (one
// state_get_many of a chunk's keys, then one state_write_batch with the
// store's refs), with a key several times in one batch: in a row, apart,
// on both sides of the SDKs' 256-record chunks and of the store's
// 128-pair StateGetMany chunks, and across batches with flushes between.
// Every record counts once: the final counts are the test's own.
func TestWordcountCountRepeatsOverStore(t *testing.T) {
	var batches [][]string
	batches = append(batches, []string{"a", "b", "a", "a", "c", "b", "a"})
	long := make([]string, 0, 700)
	for i := range 700 {
		switch {
		case i%3 == 0:
			long = append(long, "x")
		case i%7 == 0:
			long = append(long, "y")
		default:
			long = append(long, "k"+strconv.Itoa(i%40))
		}
	}
	batches = append(batches, long, []string{"a", "a"}, long)
	want := map[string]int{}
	for _, b := range batches {
		for _, k := range b {
			want[k]++
		}
	}
	for _, lang := range []string{"c", "rust"} {
		t.Run(lang, func(t *testing.T) {
			path, err := testmod.Build(lang, "wordcount")
			if err != nil {
				t.Fatal(err)
			}
			code, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			r := newTestRuntime(t, Config{})
			m, err := r.Compile(context.Background(), "wordcount", code)
			if err != nil {
				t.Fatal(err)
			}
			op := newInstance(t, m).Operator()
			store, err := state.Open(state.Options{Dir: t.TempDir(), MaxParallelism: 128, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, CacheEntries: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			svc := &realServices{VertexState: store.Vertex("count", true)}
			if _, ok := operator.Services(svc).(operator.StateRefPutter); !ok {
				t.Fatal("the store's services take no refs: the test would not test the puts by ref")
			}
			if err := op.Open(operator.Spec{VertexID: "count", Operator: "count", Parallel: 1, MaxParallelism: 128, Keyed: true}, svc); err != nil {
				t.Fatal(err)
			}
			var out fakeCollector
			for i, words := range batches {
				var b abi.Builder
				for j, w := range words {
					b.Add(0, int64(j), []byte(w), nil)
				}
				if err := op.Process(b.Bytes(), &out); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if err := store.Flush(); err != nil {
					t.Fatal(err)
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
			if err := op.OnTimers(tb.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, r := range out.records {
				c, err := strconv.Atoi(string(r.Value))
				if err != nil {
					t.Fatalf("count of %q = %q", r.Key, r.Value)
				}
				got[string(r.Key)] += c
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("counts %v\nwant %v", got, want)
			}
		})
	}
}
