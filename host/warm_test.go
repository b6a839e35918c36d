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
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// poisonSpec is testops' poison picking one value in a million: the
// values poisonValues returns.
var poisonSpec = operator.Spec{VertexID: "v", Operator: "poison", Config: []byte(`{"every":1000000,"salt":"s"}`),
	Subtask: 0, Parallel: 1, MaxParallelism: 128, Keyed: true}

// poisonValues returns the first value w<k> that poisonSpec picks and the
// first n that it does not.
func poisonValues(n int) (bad string, good []string) {
	for k := 0; bad == "" || len(good) < n; k++ {
		v := "w" + strconv.Itoa(k)
		h := uint64(14695981039346656037)
		for _, c := range []byte("s" + v) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		if h%1000000 == 0 {
			if bad == "" {
				bad = v
			}
		} else if len(good) < n {
			good = append(good, v)
		}
	}
	return bad, good
}

// poisonBatches returns count batches of n records over distinct keys
// that poisonSpec does not pick, and a batch of n whose last record is one
// it traps on.
func poisonBatches(n, count int) ([][]byte, []byte) {
	bad, good := poisonValues(n * count)
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
	return batches, batchOf(recs...)
}

// compileTestops compiles the testops example module (Go) on a new test
// runtime, with ctx (which may carry a function listener factory).
func compileTestops(t testing.TB, ctx context.Context) *Module {
	t.Helper()
	wasm, err := os.ReadFile(testmod.GoModule(t, "examples/wasm/go/testops"))
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRuntime(t, Config{})
	m, err := r.Compile(ctx, "testops.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// openSnapshottedPoison opens testops' poison as spec in a new instance of
// m and snapshots the instance, as a dead-letter subtask does.
func openSnapshottedPoison(t testing.TB, m *Module, spec operator.Spec) (*Instance, operator.Operator, *fakeServices) {
	t.Helper()
	inst, err := m.NewInstance(context.Background(), "v/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	op := inst.Operator()
	svc := newFakeServices()
	if err := op.Open(spec, svc); err != nil {
		t.Fatal(err)
	}
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	return inst, op, svc
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
// them again and grow the Go heap (0.05-0.1 ms a trap,
// BenchmarkFirstCallAfterReset): in that callback the SDK allocates
// nothing.
func TestGoSDKWarmAtOpen(t *testing.T) {
	allocs := &sdkAllocs{}
	m := compileTestops(t, experimental.WithFunctionListenerFactory(context.Background(), allocs))
	batches, trap := poisonBatches(128, 3)
	// The listener sees the SDK's allocations at open (warm's among them):
	// without it the test below would pass whatever the SDK did.
	allocs.on = true
	inst, op, _ := openSnapshottedPoison(t, m, poisonSpec)
	allocs.on = false
	if allocs.count == 0 {
		t.Fatal("no allocation of the SDK seen while the operator opened: the listener does not see them")
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
	m := compileTestops(b, context.Background())
	batches, trap := poisonBatches(128, 64)
	inst, op, svc := openSnapshottedPoison(b, m, poisonSpec)
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
