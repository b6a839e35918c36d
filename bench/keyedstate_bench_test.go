package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
)

// BenchmarkKeyedCountUnbatched is BenchmarkKeyedCount's pipeline with the
// Go and C wordcount modules built without their SDK's state cache (ABI v1
// modules: one state_get and one state_put per record): the figures of
// before batched state access, on the same host and in the same run.
func BenchmarkKeyedCountUnbatched(b *testing.B) {
	goMod, err := testmod.BuildGoTags("examples/wasm/go/wordcount", "wstream_unbatched")
	if err != nil {
		b.Fatal(err)
	}
	cMod, err := testmod.BuildCFlags("examples/wasm/c/wordcount", "-DWSTREAM_UNBATCHED_STATE")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("wasm-go", func(b *testing.B) { runPipeline(b, goMod, keyedPlan(""), 0) })
	b.Run("wasm-go-nodeadline", func(b *testing.B) { runPipeline(b, goMod, keyedPlan(""), -1) })
	b.Run("wasm-c", func(b *testing.B) { runPipeline(b, cMod, keyedPlan(""), 0) })
	b.Run("wasm-c-nodeadline", func(b *testing.B) { runPipeline(b, cMod, keyedPlan(""), -1) })
}

// BenchmarkKeyedState runs the wordcount "count" operator alone, on one
// goroutine, over real keyed state (package state), fed batches of 512
// records over 10,000 keys as a keyed subtask of BenchmarkKeyedCount
// receives them: native Go, and each SDK's module with the default call
// deadline, batched (the SDKs' state cache) and, for C and Go, built
// without it (-v1: one state_get and one state_put per record). Without
// the source, the exchange and the sink around it, it shows the cost of
// keyed state per record, which the pipeline benchmark mixes with theirs.
func BenchmarkKeyedState(b *testing.B) {
	b.Run("native", func(b *testing.B) {
		keyedStateRun(b, func(b *testing.B) operator.Operator {
			op, err := builtin.New("count")
			if err != nil {
				b.Fatal(err)
			}
			return op
		})
	})
	for _, lang := range []string{"c", "go", "rust", "as"} {
		b.Run("wasm-"+lang, func(b *testing.B) {
			keyedStateRun(b, wasmOp(func() (string, error) { return testmod.Build(lang, "wordcount") }))
		})
	}
	b.Run("wasm-c-nodeadline", func(b *testing.B) {
		keyedStateRun(b, wasmOp(func() (string, error) { return testmod.Build("c", "wordcount") }, -1))
	})
	b.Run("wasm-c-v1", func(b *testing.B) {
		keyedStateRun(b, wasmOp(func() (string, error) {
			return testmod.BuildCFlags("examples/wasm/c/wordcount", "-DWSTREAM_UNBATCHED_STATE")
		}))
	})
	// As a worker runs it: its guest and host calls counted for metrics.
	b.Run("wasm-c-v1-stats", func(b *testing.B) {
		keyedStateRun(b, wasmOpStats(func() (string, error) {
			return testmod.BuildCFlags("examples/wasm/c/wordcount", "-DWSTREAM_UNBATCHED_STATE")
		}, &host.CallStats{}))
	})
	b.Run("wasm-go-v1", func(b *testing.B) {
		keyedStateRun(b, wasmOp(func() (string, error) { return testmod.BuildGoTags("examples/wasm/go/wordcount", "wstream_unbatched") }))
	})
}

// keyedBatches are the input of BenchmarkKeyedState: 200 batches of 512
// records over 10,000 keys.
var keyedBatches = func() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	batches := make([][]byte, 200)
	for i := range batches {
		var bb abi.Builder
		for j := range 512 {
			bb.Add(0, int64(i*512+j), fmt.Appendf(nil, "w%d", rng.IntN(10_000)), nil)
		}
		batches[i] = append([]byte(nil), bb.Bytes()...)
	}
	return batches
}()

// keyedStateRun opens the operator newOp returns as a keyed subtask over a
// fresh state store and reports what processing keyedBatches costs.
func keyedStateRun(b *testing.B, newOp func(b *testing.B) operator.Operator) {
	store, op := openKeyedOp(b, nil, newOp)
	defer store.Close()
	var out discardCollector
	records := 0
	pass := func() {
		for _, batch := range keyedBatches {
			if err := op.Process(batch, &out); err != nil {
				b.Fatal(err)
			}
			records += abi.Count(batch)
			// As a worker does between input messages.
			if store.Pending() >= store.CacheEntries() {
				if err := store.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	pass() // every key exists, and its timer: the steady state
	timePasses(b, pass, &records)
}

// openKeyedOp opens the operator newOp returns as the keyed subtask of
// all 128 key groups over a fresh store on budget (none when nil).
func openKeyedOp(b *testing.B, budget *state.Budget, newOp func(b *testing.B) operator.Operator) (*state.Store, operator.Operator) {
	store, err := state.Open(state.Options{Dir: b.TempDir(), MaxParallelism: 128, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, Budget: budget})
	if err != nil {
		b.Fatal(err)
	}
	op := newOp(b)
	svc := &keyedServices{VertexState: store.Vertex("count", true)}
	spec := operator.Spec{VertexID: "count", Operator: "count", Subtask: 0, Parallel: 1, MaxParallelism: 128, Keyed: true}
	if err := op.Open(spec, svc); err != nil {
		_ = store.Close()
		b.Fatal(err)
	}
	return store, op
}

// timePasses runs pass b.N times on this goroutine's thread and reports
// wall and thread CPU time per record, counted in *records by pass. The
// thread's CPU time, unlike the wall time, does not count what other
// processes take of the machine.
func timePasses(b *testing.B, pass func(), records *int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	*records = 0
	cpu0 := threadCPU()
	b.ResetTimer()
	for range b.N {
		pass()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(*records), "ns/record")
	b.ReportMetric(float64(threadCPU()-cpu0)/float64(*records), "cpu-ns/record")
}

// wasmOp returns a new operator slot of the module build returns, in an
// instance of a runtime with the call timeout given (default: the
// default deadline; negative: none).
func wasmOp(build func() (string, error), timeout ...time.Duration) func(b *testing.B) operator.Operator {
	return wasmOpStats(build, nil, timeout...)
}

// wasmOpStats is wasmOp with the slot's calls counted in st (none when
// nil), as workers count them for metrics.
func wasmOpStats(build func() (string, error), st *host.CallStats, timeout ...time.Duration) func(b *testing.B) operator.Operator {
	cfg := host.Config{}
	if len(timeout) > 0 {
		cfg.CallTimeout = timeout[0]
	}
	return wasmOpConfig(build, cfg, st)
}

// wasmOpConfig is wasmOpStats in a runtime configured by cfg.
func wasmOpConfig(build func() (string, error), cfg host.Config, st *host.CallStats) func(b *testing.B) operator.Operator {
	return func(b *testing.B) operator.Operator {
		path, err := build()
		if err != nil {
			b.Fatal(err)
		}
		code, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		rt, err := host.NewRuntime(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rt.Close(ctx) })
		mod, err := rt.Compile(ctx, "wordcount", code)
		if err != nil {
			b.Fatal(err)
		}
		inst, err := mod.NewInstance(ctx, "count/0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = inst.Close(ctx) })
		if st != nil {
			return inst.OperatorWithStats(st)
		}
		return inst.Operator()
	}
}

// threadCPU is the CPU time of the calling thread in nanoseconds.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// rusageThread is RUSAGE_THREAD of getrusage(2) on Linux.
const rusageThread = 1

type keyedServices struct{ *state.VertexState }

func (keyedServices) Watermark() int64      { return abi.MinWatermark }
func (keyedServices) ProcessingTime() int64 { return 1 }
func (keyedServices) Log(int32, string)     {}

type discardCollector struct{ n int }

func (d *discardCollector) Emit(uint32, int64, []byte, []byte) error { d.n++; return nil }
func (d *discardCollector) EmitBatch(b []byte) error                 { d.n += abi.Count(b); return nil }
