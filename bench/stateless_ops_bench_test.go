package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
)

// BenchmarkStatelessOps runs the stateless pipeline's operators, upper then
// filter, alone on one goroutine over batches of 512 four-word records as
// BenchmarkStateless's chained subtask passes them: native Go, and the Go
// and C mapfilter modules with the default call deadline. Without source
// and sink it shows what the guest itself costs per record.
func BenchmarkStatelessOps(b *testing.B) {
	b.Run("native", func(b *testing.B) {
		statelessOpsRun(b, func(b *testing.B, name string) operator.Operator {
			op, err := builtin.New(name)
			if err != nil {
				b.Fatal(err)
			}
			return op
		})
	})
	for _, lang := range []string{"c", "go"} {
		b.Run("wasm-"+lang, func(b *testing.B) {
			path, err := testmod.Build(lang, "mapfilter")
			if err != nil {
				b.Fatal(err)
			}
			statelessOpsRun(b, moduleOps(b, path))
		})
	}
}

// statelessBatches are the input of BenchmarkStatelessOps: 100 batches of
// 512 records of four words over 1,000 keys, as the gen source makes them.
var statelessBatches = func() [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	batches := make([][]byte, 100)
	for i := range batches {
		var bb abi.Builder
		for j := range 512 {
			w := func() int { return rng.IntN(1000) }
			bb.Add(0, int64(i*512+j), nil, fmt.Appendf(nil, "w%d w%d w%d w%d", w(), w(), w(), w()))
		}
		batches[i] = append([]byte(nil), bb.Bytes()...)
	}
	return batches
}()

// chainCollector passes upper's output batches on to filter.
type chainCollector struct {
	next operator.Operator
	out  operator.Collector
}

func (c *chainCollector) Emit(port uint32, ts int64, key, value []byte) error {
	var bb abi.Builder
	bb.Add(port, ts, key, value)
	return c.next.Process(bb.Bytes(), c.out)
}

func (c *chainCollector) EmitBatch(b []byte) error { return c.next.Process(b, c.out) }

// statelessOpsRun opens upper and filter (config "contains": "W1", as in
// BenchmarkStateless) and reports what processing statelessBatches costs
// per record, in wall and thread CPU time.
func statelessOpsRun(b *testing.B, newOp func(b *testing.B, name string) operator.Operator) {
	upper, filter := newOp(b, "upper"), newOp(b, "filter")
	spec := func(name, cfg string) operator.Spec {
		return operator.Spec{VertexID: name, Operator: name, Subtask: 0, Parallel: 1, MaxParallelism: 128, Config: []byte(cfg)}
	}
	if err := upper.Open(spec("upper", ""), keyedServices{}); err != nil {
		b.Fatal(err)
	}
	if err := filter.Open(spec("filter", `{"contains":"W1"}`), keyedServices{}); err != nil {
		b.Fatal(err)
	}
	var out discardCollector
	chain := &chainCollector{next: filter, out: &out}
	records := 0
	pass := func() {
		for _, batch := range statelessBatches {
			if err := upper.Process(batch, chain); err != nil {
				b.Fatal(err)
			}
			records += abi.Count(batch)
		}
	}
	pass()
	if out.n == 0 || out.n == records {
		b.Fatalf("filter kept %d of %d records: the input does not exercise it", out.n, records)
	}
	timePasses(b, pass, &records)
}

// moduleOps returns operators of the module at path, each in an instance
// of its own, as a worker gives each chained operator.
func moduleOps(b *testing.B, path string) func(b *testing.B, name string) operator.Operator {
	code, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.Compile(ctx, "mapfilter", code)
	if err != nil {
		b.Fatal(err)
	}
	return func(b *testing.B, name string) operator.Operator {
		inst, err := mod.NewInstance(ctx, name+"/0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = inst.Close(ctx) })
		return inst.Operator()
	}
}
