package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// counterWAT reads and writes an 8-byte counter per record in value state
// (one state_get and one state_put each), then passes the batch through
// with one emit_batch.
var counterWAT = moduleWAT(map[string]string{
	abi.ExportProcess: `
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (local $cnt i32) (local $off i32) (local $kl i32)
    (local.set $cnt (i32.load (local.get $p)))
    (local.set $off (i32.add (local.get $p) (i32.const 4)))
    (block $done (loop $next
      (br_if $done (i32.eqz (local.get $cnt)))
      (local.set $kl (i32.load offset=12 (local.get $off)))
      (if (i32.ne (call $state_get (i32.const 0) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
                    (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 8)) (i32.const 8))
        (then (i64.store (i32.const 1024) (i64.const 0))))
      (i64.store (i32.const 1024) (i64.add (i64.load (i32.const 1024)) (i64.const 1)))
      (if (call $state_put (i32.const 0) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
            (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 8))
        (then (return (i32.const -8))))
      (local.set $off (i32.add (local.get $off)
        (i32.add (i32.const 20) (i32.add (local.get $kl) (i32.load offset=16 (local.get $off))))))
      (local.set $cnt (i32.sub (local.get $cnt) (i32.const 1)))
      (br $next)))
    (call $emit_batch (local.get $p) (local.get $n)))`,
}, "")

// benchServices is a Services whose state calls allocate nothing once every
// key exists, so benchmarks measure the host.
type benchServices struct {
	fakeServices
	m map[string]*[]byte
}

func (b *benchServices) StateGet(_ int32, key, _, dst []byte) ([]byte, error) {
	v := b.m[string(key)]
	if v == nil {
		return nil, operator.ErrNotFound
	}
	return append(dst[:0], *v...), nil
}

func (b *benchServices) StatePut(_ int32, key, _, value []byte) error {
	if v := b.m[string(key)]; v != nil {
		*v = append((*v)[:0], value...)
		return nil
	}
	v := append([]byte(nil), value...)
	b.m[string(key)] = &v
	return nil
}

// discard is a Collector that counts records.
type discard struct{ n int }

func (d *discard) Emit(uint32, int64, []byte, []byte) error { d.n++; return nil }
func (d *discard) EmitBatch(b []byte) error                 { d.n += abi.Count(b); return nil }

const benchRecords = 1000

// benchBatch is benchRecords records over 100 keys with 16-byte values.
func benchBatch() []byte {
	var b abi.Builder
	for i := range benchRecords {
		b.Add(0, int64(i), fmt.Appendf(nil, "key-%03d", i%100), []byte("0123456789abcdef"))
	}
	return append([]byte(nil), b.Bytes()...)
}

func benchOperator(tb testing.TB, src string) (operator.Operator, *discard) {
	return benchOperatorStats(tb, src, nil)
}

// benchOperatorStats is benchOperator with the slot's calls counted in st
// (none when nil), as workers run guest operators.
func benchOperatorStats(tb testing.TB, src string, st *CallStats) (operator.Operator, *discard) {
	r := newTestRuntime(tb, Config{})
	m := compileWAT(tb, r, src)
	var op operator.Operator
	if st != nil {
		op = newInstance(tb, m).OperatorWithStats(st)
	} else {
		op = newInstance(tb, m).Operator()
	}
	svc := &benchServices{fakeServices: *newFakeServices(), m: map[string]*[]byte{}}
	if err := op.Open(testSpec(), svc); err != nil {
		tb.Fatal(err)
	}
	return op, &discard{}
}

func runBench(b *testing.B, src string) { runBenchStats(b, src, nil) }

func runBenchStats(b *testing.B, src string, st *CallStats) {
	op, out := benchOperatorStats(b, src, st)
	in := benchBatch()
	if err := op.Process(in, out); err != nil { // warm up: arena, keys
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		if err := op.Process(in, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRecords), "ns/record")
}

// BenchmarkProcessPassThrough: one guest call and one emit_batch per
// 1000-record batch.
func BenchmarkProcessPassThrough(b *testing.B) { runBench(b, passWAT) }

// BenchmarkProcessStateGetPut: plus a state_get and a state_put per record.
func BenchmarkProcessStateGetPut(b *testing.B) { runBench(b, counterWAT) }

// BenchmarkProcessStateGetPutStats is BenchmarkProcessStateGetPut with the
// calls counted in CallStats, as workers run guest operators (metrics).
func BenchmarkProcessStateGetPutStats(b *testing.B) { runBenchStats(b, counterWAT, &CallStats{}) }

// TestProcessAllocations pins the hot path's allocations: none per record,
// and only wazero's per-call deadline watcher per batch.
func TestProcessAllocations(t *testing.T) {
	for name, src := range map[string]string{"pass-through": passWAT, "state get+put": counterWAT} {
		op, out := benchOperator(t, src)
		in := benchBatch()
		if err := op.Process(in, out); err != nil {
			t.Fatal(err)
		}
		before := out.n
		allocs := testing.AllocsPerRun(20, func() {
			if err := op.Process(in, out); err != nil {
				t.Fatal(err)
			}
		})
		if out.n-before != 21*benchRecords {
			t.Errorf("%s: %d records out, want %d", name, out.n-before, 21*benchRecords)
		}
		// wazero starts one goroutine with a channel and a closure per call
		// to close the instance on the deadline.
		if allocs > 4 {
			t.Errorf("%s: %.0f allocations per %d-record batch", name, allocs, benchRecords)
		}
		t.Logf("%s: %.0f allocations per batch", name, allocs)
	}
}

// benchOperatorWith is benchOperator with a runtime configuration and
// instance options.
func benchOperatorWith(tb testing.TB, cfg Config, src string, opts ...InstanceOption) (operator.Operator, *discard) {
	r := newTestRuntime(tb, cfg)
	m := compileWAT(tb, r, src)
	inst, err := m.NewInstance(context.Background(), "v1/3", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = inst.Close(context.Background()) })
	op := inst.Operator()
	svc := &benchServices{fakeServices: *newFakeServices(), m: map[string]*[]byte{}}
	if err := op.Open(testSpec(), svc); err != nil {
		tb.Fatal(err)
	}
	return op, &discard{}
}

// memoryLoopWAT's wstream_process increments each of the 16384 words of
// the first memory page, a load and a store per word, and emits nothing.
var memoryLoopWAT = moduleWAT(map[string]string{
	abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $a i32)
    (loop $next
      (i32.store (local.get $a) (i32.add (i32.load (local.get $a)) (i32.const 1)))
      (local.set $a (i32.add (local.get $a) (i32.const 4)))
      (br_if $next (i32.lt_u (local.get $a) (i32.const 65536))))
    (i32.const 0))`,
}, "")

// BenchmarkMemoryLimit compares instances under the runtime's memory limit
// (wazero's own buffer) and under WithMemoryLimit (the memLimiter buffer):
// "calls" makes one guest call per one-record batch, so per-call overhead
// dominates; "state" makes 2000 host calls that read and write guest
// memory per 1000-record batch; "memory" runs 16384 guest loads and stores
// per call, compiled without the deadline's per-iteration check, which
// would dwarf them.
func BenchmarkMemoryLimit(b *testing.B) {
	var one abi.Builder
	one.Add(0, 1, []byte("key-001"), []byte("0123456789abcdef"))
	for _, g := range []struct {
		name string
		cfg  Config
		src  string
		in   []byte
	}{
		{"calls", Config{}, passWAT, one.Bytes()},
		{"state", Config{}, counterWAT, benchBatch()},
		{"memory", Config{CallTimeout: -1}, memoryLoopWAT, one.Bytes()},
	} {
		for _, c := range []struct {
			name string
			opts []InstanceOption
		}{
			{"runtime", nil},
			{"instance", []InstanceOption{WithMemoryLimit(DefaultMemoryLimitPages / 2)}},
		} {
			b.Run(g.name+"/"+c.name, func(b *testing.B) {
				op, out := benchOperatorWith(b, g.cfg, g.src, c.opts...)
				if err := op.Process(g.in, out); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(g.in)))
				for b.Loop() {
					if err := op.Process(g.in, out); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*abi.Count(g.in)), "ns/record")
			})
		}
	}
}
