package host

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/operator"
)

// poisonBatches returns testops' poison spec (which picks no record of
// these), batches of n records over distinct keys, and a batch of n whose
// last record is one poison traps on.
func poisonBatches(t testing.TB, n, count int) (operator.Spec, [][]byte, []byte) {
	t.Helper()
	spec := operator.Spec{VertexID: "v", Operator: "poison", Config: []byte(`{"every":1000000,"salt":"s"}`),
		Subtask: 0, Parallel: 1, MaxParallelism: 128, Keyed: true}
	bad := ""
	var good []string
	for k := 0; bad == "" || len(good) < n*count; k++ {
		v := "w" + strconv.Itoa(k)
		h := uint64(14695981039346656037)
		for _, c := range []byte("s" + v) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		if h%1000000 == 0 {
			bad = v
		} else if len(good) < n*count {
			good = append(good, v)
		}
	}
	batches := make([][]byte, count)
	for b := range batches {
		recs := make([]abi.Record, n)
		for j := range recs {
			v := good[b*n+j]
			recs[j] = rec(0, int64(j), v, v)
		}
		batches[b] = batchOf(recs...)
	}
	recs := make([]abi.Record, n)
	for j := range recs {
		v := good[j]
		if j == n-1 {
			v = bad
		}
		recs[j] = rec(0, int64(j), v, v)
	}
	return spec, batches, batchOf(recs...)
}

// sdkAllocs counts the Go runtime's allocations that the guest SDK's own
// functions make while on is set.
type sdkAllocs struct {
	on    bool
	count int
	where []string
}

func (a *sdkAllocs) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if def.DebugName() != ".runtime.mallocgc" {
		return nil
	}
	return experimental.FunctionListenerFunc(func(_ context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, si experimental.StackIterator) {
		if !a.on {
			return
		}
		// mallocgc, then makeslice or growslice, then the caller.
		for k := 0; k < 4 && si.Next(); k++ {
			if name := si.Function().Definition().DebugName(); strings.Contains(name, "guest_sdk_go_wstream") {
				a.count++
				a.where = append(a.where, name)
				return
			}
		}
	})
}

// TestGoSDKWarmAtOpen: a dead-letter subtask snapshots its instance right
// after open and resets it there after each trap. The Go SDK makes the
// buffers of its callbacks (state cache, write list, output) while the
// operator opens, so that the first callback after a reset does not make
// them again and grow the Go heap (about 0.1 ms a trap,
// BenchmarkFirstCallAfterReset): in that callback the SDK allocates
// nothing.
func TestGoSDKWarmAtOpen(t *testing.T) {
	wasm, err := os.ReadFile(testmod.GoModule(t, "examples/wasm/go/testops"))
	if err != nil {
		t.Fatal(err)
	}
	allocs := &sdkAllocs{}
	r := newTestRuntime(t, Config{})
	m, err := r.Compile(experimental.WithFunctionListenerFactory(context.Background(), allocs), "testops.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	spec, batches, trap := poisonBatches(t, 128, 3)
	inst, err := m.NewInstance(context.Background(), "v/0")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	op := inst.Operator()
	svc := newFakeServices()
	if err := op.Open(spec, svc); err != nil {
		t.Fatal(err)
	}
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	process := func(what string, batch []byte) {
		t.Helper()
		allocs.on, allocs.count, allocs.where = true, 0, nil
		err := op.Process(batch, &fakeCollector{})
		allocs.on = false
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if allocs.count != 0 {
			t.Errorf("%s: the SDK allocated %d times, in %q; want its buffers made at open", what, allocs.count, allocs.where)
		}
	}
	process("the first call", batches[0])
	for round := range 2 {
		if err := op.Process(trap, &fakeCollector{}); err == nil {
			t.Fatal("the poison record did not trap")
		}
		if err := inst.Reset(); err != nil {
			t.Fatal(err)
		}
		process("the first call after reset "+strconv.Itoa(round+1), batches[1+round])
	}
}

// BenchmarkFirstCallAfterReset times, for testops' poison (a Go guest) on
// batches of 128 records, a call in the steady state and the first call
// after a trap and a reset to the snapshot taken after open, whose
// difference is what that state costs a dead-letter subtask per trap.
//
//	go test -run '^$' -bench FirstCallAfterReset -benchtime 500x ./host/
func BenchmarkFirstCallAfterReset(b *testing.B) {
	wasm, err := os.ReadFile(testmod.GoModule(b, "examples/wasm/go/testops"))
	if err != nil {
		b.Fatal(err)
	}
	r := newTestRuntime(b, Config{})
	m, err := r.Compile(context.Background(), "testops.wasm", wasm)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	spec, batches, trap := poisonBatches(b, 128, 64)
	inst, err := m.NewInstance(context.Background(), "v/0")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(context.Background())
	op := inst.Operator()
	svc := newFakeServices()
	if err := op.Open(spec, svc); err != nil {
		b.Fatal(err)
	}
	if err := inst.Snapshot(); err != nil {
		b.Fatal(err)
	}
	call := func(batch []byte) time.Duration {
		t0 := time.Now()
		if err := op.Process(batch, &fakeCollector{}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var steady, after time.Duration
	i := 0
	for b.Loop() {
		svc.calls = svc.calls[:0] // the fake's log of calls would grow
		if err := op.Process(trap, &fakeCollector{}); err == nil {
			b.Fatal("no trap")
		}
		if err := inst.Reset(); err != nil {
			b.Fatal(err)
		}
		after += call(batches[i%len(batches)])
		steady += call(batches[(i+1)%len(batches)])
		i += 2
	}
	n := float64(b.N)
	b.ReportMetric(float64(after.Microseconds())/n, "after-reset-µs")
	b.ReportMetric(float64(steady.Microseconds())/n, "steady-µs")
}
