package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host/instrument"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// The tests in this file cover how deadlines and cancellation stop guests
// through the stop flag of package instrument: every shape of code that
// runs for ever, garbage collections while a guest spins, the start
// function, modules that cannot be instrumented, and that instrumented
// modules behave as the originals.

// spinShapes are process functions that log an empty line, then never
// return, each of a shape that the stop flag must reach differently.
var spinShapes = map[string]string{
	// A loop without calls.
	"loop": `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (loop $l (br $l)) (i32.const 0))`,
	// A loop whose every iteration calls the host.
	"host calls": `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (loop $l (drop (call $current_watermark)) (br $l)) (i32.const 0))`,
	// Loops in calls that each stay under the budget, inside a loop.
	"nested calls": `(func $inner (param $n i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n))))
  (func $middle (local $i i32)
    (loop $l
      (call $inner (i32.const 60000))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 60000)))))
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (loop $l (call $middle) (br $l)) (i32.const 0))`,
	// A loop filling the whole memory (16 MiB) at each iteration.
	"bulk memory": `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (drop (memory.grow (i32.sub (i32.const 256) (memory.size))))
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (loop $l (memory.fill (i32.const 0) (i32.const 0) (i32.const 0x1000000)) (br $l)) (i32.const 0))`,
	// A call tree of 2^60 calls without a loop.
	"call tree": `(func $tree (param $d i32)
    (if (local.get $d) (then
      (call $tree (i32.sub (local.get $d) (i32.const 1)))
      (call $tree (i32.sub (local.get $d) (i32.const 1))))))
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (call $tree (i32.const 60)) (i32.const 0))`,
}

// spin runs Process on s in a goroutine; the result arrives on the channel.
func spin(s *slot) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- s.Process(batchOf(rec(0, 1, "k", "v")), &builderCollector{}) }()
	return errc
}

// cancelSpinning starts a spinning Process on an instance of m, cancels
// the instance's context once the guest has logged (it is inside its loop)
// and returns the slot and what Process returned. The instance is closed
// when the test ends.
func cancelSpinning(t *testing.T, m *Module) (*slot, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inst, err := m.NewInstance(ctx, "v1/3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(context.Background()) })
	s := inst.Operator().(*slot)
	started := make(chan struct{})
	svc := newLeanServices()
	svc.onLog = func(string) { close(started) }
	if err := s.Open(testSpec(), svc); err != nil {
		t.Fatal(err)
	}
	errc := spin(s)
	<-started
	cancel()
	return s, wait(t, errc, "cancelling")
}

// wait returns the error from errc, failing t after 30 s.
func wait(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop the guest within 30s", what)
		return nil
	}
}

func TestStopShapes(t *testing.T) {
	for name, src := range spinShapes {
		t.Run(name, func(t *testing.T) {
			mod := moduleWAT(map[string]string{abi.ExportProcess: src}, "")
			t.Run("deadline", func(t *testing.T) {
				r := newTestRuntime(t, Config{CallTimeout: 100 * time.Millisecond})
				m := compileWAT(t, r, mod)
				if !m.c.stop {
					t.Fatal("the module was not instrumented")
				}
				_, s := openOp(t, m)
				err := wait(t, spin(s), "the deadline")
				ge := asGuestError(t, err)
				if !errors.Is(err, ErrDeadlineExceeded) || !strings.HasPrefix(ge.Message, "exceeded the call deadline of 100ms; the instance was closed") {
					t.Errorf("got %v", err)
				}
				checkUnusable(t, s)
				checkWorkerAlive(t, r, m)
			})
			t.Run("cancel", func(t *testing.T) {
				r := newTestRuntime(t, Config{CallTimeout: time.Hour})
				m := compileWAT(t, r, mod)
				s, err := cancelSpinning(t, m)
				if ge := asGuestError(t, err); !errors.Is(err, ErrCanceled) || !strings.HasPrefix(ge.Message, "stopped: the instance's context was cancelled") {
					t.Errorf("got %v", err)
				}
				if err := s.Process(batchOf(), &fakeCollector{}); !errors.Is(err, ErrCanceled) {
					t.Errorf("a call after the cancellation: %v", err)
				}
			})
		})
	}
}

// TestStopWhileCollecting: a spinning guest lets garbage collections stop
// the world (a guest that never calls into Go would hold them, and the
// deadline timer with them, for ever), and is stopped on time.
func TestStopWhileCollecting(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 300 * time.Millisecond})
	m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportProcess: spinShapes["loop"]}, ""))
	_, s := openOp(t, m)
	errc := spin(s)
	gcs := 0
	var err error
	for done := false; !done; {
		runtime.GC()
		gcs++
		select {
		case err = <-errc:
			done = true
		default:
			if gcs > 100000 {
				t.Fatal("the guest was not stopped")
			}
		}
	}
	t.Logf("%d collections while the guest ran", gcs)
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("got %v", err)
	}
}

// TestStopWhileSleeping: WASI's sleep ends when the instance's context is
// cancelled, and the guest stops.
func TestStopWhileSleeping(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: time.Hour})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: `(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))`,
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (i64.store (i32.const 0) (i64.const 1))
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 3600000000000))
    (i64.store (i32.const 32) (i64.const 0))
    (i32.store16 (i32.const 40) (i32.const 0))
    (call $log (i32.const 1) (i32.const 0) (i32.const 0))
    (loop $l (drop (call $poll (i32.const 0) (i32.const 100) (i32.const 1) (i32.const 200))) (br $l))
    (i32.const 0))`,
	}, ""))
	if _, err := cancelSpinning(t, m); !errors.Is(err, ErrCanceled) || !strings.Contains(err.Error(), "stopped: the instance's context was cancelled") {
		t.Errorf("got %v", err)
	}
}

// startWAT's start function sets $g to 1 and its _initialize doubles it:
// wstream_abi_version returns $g - 1, the ABI version only when both ran,
// in that order.
const startWAT = `(global $g (mut i32) (i32.const 0))
  (func $start (global.set $g (i32.const 1)))
  (start $start)
  (func (export "_initialize") (global.set $g (i32.mul (global.get $g) (i32.const 2))))`

func TestStopStartFunction(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 100 * time.Millisecond})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportABIVersion: `(func (export "wstream_abi_version") (result i32) (i32.sub (global.get $g) (i32.const 1)))`,
	}, startWAT))
	if !m.c.start {
		t.Error("the start function was not exported")
	}
	newInstance(t, m)

	// A start function that never returns fails the compilation.
	_, err := r.Compile(context.Background(), "spin.wasm", testmod.WAT(t, moduleWAT(nil,
		`(func $start (loop $l (br $l))) (start $start)`)))
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrDeadlineExceeded) ||
		!strings.Contains(err.Error(), "instantiating: start: exceeded the call deadline of 100ms") {
		t.Errorf("got %v", err)
	}
}

// TestStopFallback: a module that the rewrite refuses (here, because it
// exports the stop flag's name itself) runs with wazero's own checks, and
// is stopped as well.
func TestStopFallback(t *testing.T) {
	src := moduleWAT(map[string]string{abi.ExportProcess: spinShapes["loop"]},
		`(func (export "`+instrument.StopExport+`"))`)
	logs := &logSink{}
	r := newTestRuntime(t, Config{CallTimeout: 100 * time.Millisecond, Log: logs.log})
	m := compileWAT(t, r, src)
	if m.c.stop || m.c.rt == r.rt {
		t.Fatal("the module was instrumented")
	}
	if e, ok := logs.find("cannot take a stop flag"); !ok || !strings.Contains(e.msg, `already exports "wstream:stop"`) {
		t.Errorf("logged %+v", logs)
	}
	_, s := openOp(t, m)
	if err := wait(t, spin(s), "the deadline"); !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("got %v", err)
	}
	checkWorkerAlive(t, r, m)

	r = newTestRuntime(t, Config{CallTimeout: time.Hour})
	m = compileWAT(t, r, src)
	if _, err := cancelSpinning(t, m); !errors.Is(err, ErrCanceled) || !strings.Contains(err.Error(), "stopped: the instance's context was cancelled") {
		t.Errorf("got %v", err)
	}
}

// TestStopNoDeadline: without deadlines modules run as they are.
func TestStopNoDeadline(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: -1})
	m := compileWAT(t, r, passWAT)
	if m.c.stop || m.c.rt != r.rt {
		t.Error("the module was instrumented")
	}
	_, s := openOp(t, m)
	if err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
}

// TestStopCache: the digest is the module's, and a second runtime on the
// same cache directory finds the instrumented code there.
func TestStopCache(t *testing.T) {
	dir := t.TempDir()
	wasm := testmod.WAT(t, passWAT)
	files := func() []string {
		var names []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				names = append(names, p)
			}
			return nil
		})
		return names
	}
	var before []string
	for i := range 2 {
		r, err := NewRuntime(context.Background(), Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Compile(context.Background(), "pass.wasm", wasm)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(wasm)
		if want := "sha256:" + hex.EncodeToString(sum[:]); m.Digest() != want {
			t.Errorf("digest %s, want %s", m.Digest(), want)
		}
		_ = r.Close(context.Background())
		if i == 0 {
			before = files()
		} else if after := files(); !slices.Equal(before, after) || len(after) == 0 {
			t.Errorf("cache files %v, then %v", before, after)
		}
	}
}

// TestStopIdentity runs the wordcount and window examples of every guest
// language, instrumented and not, and compares everything they did.
func TestStopIdentity(t *testing.T) {
	type run struct {
		name, config string
		outputs      []string
		input        []byte
		timers       bool
	}
	lines := batchOf(rec(0, 10, "", "the quick brown fox"), rec(0, 20, "", "jumps over the lazy dog"),
		rec(0, 30, "", "the end"), rec(0, 40, "", "  spaces\tand\ttabs  "))
	words := batchOf(rec(0, 10, "the", ""), rec(0, 20, "fox", ""), rec(0, 30, "the", ""), rec(0, 40, "émoji✓", ""))
	sums := batchOf(rec(0, 100, "a", "5"), rec(0, 1500, "a", "7"), rec(0, 900, "b", "-2"), rec(0, 2100, "a", "1"))
	modules := map[string][]run{
		"wordcount": {{name: "split", input: lines}, {name: "count", input: words}},
		"window":    {{name: "window", config: `{"size":1000}`, outputs: []string{"main", "late"}, input: sums, timers: true}},
	}
	for _, lang := range testmod.Languages {
		for mod, runs := range modules {
			t.Run(lang+"/"+mod, func(t *testing.T) {
				p, err := testmod.Build(lang, mod)
				if err != nil {
					t.Fatal(err)
				}
				wasm, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				results := [2]string{}
				for k, instrumented := range []bool{true, false} {
					r := newTestRuntime(t, Config{})
					r.noInstrument = !instrumented
					m, err := r.Compile(context.Background(), mod+".wasm", wasm)
					if err != nil {
						t.Fatal(err)
					}
					if m.c.stop != instrumented {
						t.Fatalf("instrumented %v, want %v", m.c.stop, instrumented)
					}
					var b strings.Builder
					for _, run := range runs {
						svc := newFakeServices()
						op := newInstance(t, m).Operator()
						spec := operator.Spec{VertexID: "v", Operator: run.name, Config: []byte(run.config), Outputs: run.outputs,
							Subtask: 0, Parallel: 1, MaxParallelism: 128, Keyed: true}
						out := &fakeCollector{}
						fmt.Fprintf(&b, "open %v\n", op.Open(spec, svc))
						fmt.Fprintf(&b, "process %v\n", op.Process(run.input, out))
						if run.timers {
							svc.watermark = 5000
							var due []abi.Record
							for _, key := range slices.Sorted(func(yield func(string) bool) {
								for k := range svc.timers {
									if !yield(k) {
										return
									}
								}
							}) {
								var dom int32
								var k, ns string
								var ts int64
								if _, err := fmt.Sscanf(key, "%d/%q/%q/%d", &dom, &k, &ns, &ts); err != nil {
									t.Fatalf("timer %s: %v", key, err)
								}
								due = append(due, abi.Record{Port: uint32(dom), Timestamp: ts, Key: []byte(k), Value: []byte(ns)})
							}
							fmt.Fprintf(&b, "timers %v\n", op.OnTimers(abi.Encode(due), out))
						}
						fmt.Fprintf(&b, "close %v\n", op.Close(out))
						fmt.Fprintf(&b, "out:\n%s", out)
						fmt.Fprintf(&b, "calls:\n%s\n", strings.Join(svc.calls, "\n"))
						for _, k := range slices.Sorted(func(yield func(string) bool) {
							for k := range svc.values {
								if !yield(k) {
									return
								}
							}
						}) {
							fmt.Fprintf(&b, "state %s = %q\n", k, svc.values[k])
						}
					}
					results[k] = b.String()
				}
				if results[0] != results[1] {
					t.Errorf("instrumented:\n%s\nwant:\n%s", results[0], results[1])
				}
				if !strings.Contains(results[0], "out:\n0@") {
					t.Errorf("the module emitted nothing:\n%s", results[0])
				}
			})
		}
	}
}

// BenchmarkDeadlineChecks measures what deadlines cost in the tightest
// loop, memoryLoopWAT's (a load and a store per iteration): without
// deadlines, with the stop flag, and with wazero's own checks (a call into
// Go per iteration), which modules that cannot be instrumented get.
func BenchmarkDeadlineChecks(b *testing.B) {
	one := batchOf(rec(0, 1, "key-001", "0123456789abcdef"))
	for _, c := range []struct {
		name   string
		cfg    Config
		legacy bool
	}{
		{"none", Config{CallTimeout: -1}, false},
		{"flag", Config{}, false},
		{"wazero", Config{}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newTestRuntime(b, c.cfg)
			r.noInstrument = c.legacy
			m := compileWAT(b, r, memoryLoopWAT)
			op := newInstance(b, m).Operator()
			if err := op.Open(testSpec(), newFakeServices()); err != nil {
				b.Fatal(err)
			}
			out := &discard{}
			for b.Loop() {
				if err := op.Process(one, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16384), "ns/iteration")
		})
	}
}
