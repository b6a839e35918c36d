package goexamples_test

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

var modules = []string{"wordcount", "mapfilter", "window", "testops"}

// TestModuleExports checks every module's exports and imports against
// abi/ABI.md, signature by signature.
func TestModuleExports(t *testing.T) {
	// A Go module exports every hook of the SDK, and _initialize.
	exports := map[string]wasmtest.Sig{"_initialize": {}}
	maps.Copy(exports, wasmtest.RequiredExports)
	maps.Copy(exports, wasmtest.OptionalExports)
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			compiled := wasmtest.Compile(t, lang.Module(t, name))
			wasmtest.CheckExports(t, compiled, exports, nil)
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				if mod != abi.ImportModule && mod != "wasi_snapshot_preview1" {
					t.Errorf("import %s.%s: module must be %s or wasi_snapshot_preview1", mod, fn, abi.ImportModule)
				}
			}
		})
	}
}

// TestModulePlans checks the ABI version and the plan each example exports.
func TestModulePlans(t *testing.T) {
	want := map[string][]string{
		"wordcount": {"split", "count"},
		"mapfilter": {"upper", "filter"},
		"window":    {"window"},
		"testops":   nil,
	}
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			h.MustABIVersion()
			b := h.MustPlan()
			if want[name] == nil {
				if b != nil {
					t.Fatalf("wstream_plan returned %q, want 0 for a module without a plan", b)
				}
				return
			}
			var plan struct {
				Name     string
				Vertices []struct{ ID, Kind, Operator string }
				Edges    []struct{ From, To, Partition string }
			}
			if err := json.Unmarshal(b, &plan); err != nil {
				t.Fatalf("plan is not JSON: %v\n%s", err, b)
			}
			var ops []string
			for _, v := range plan.Vertices {
				if v.Kind == "operator" {
					ops = append(ops, v.Operator)
				}
			}
			if plan.Name != name || !slices.Equal(ops, want[name]) || len(plan.Edges) < len(ops)+1 {
				t.Fatalf("plan name %q operators %q edges %d; want %q %q", plan.Name, ops, len(plan.Edges), name, want[name])
			}
		})
	}
}

func TestWordcount(t *testing.T) {
	wasmtest.CheckWordcount(t, newHost(t, "wordcount"))
}

func TestWindow(t *testing.T) {
	wasmtest.CheckWindow(t, newHost(t, "window", wasmtest.WithOutputs(wasmtest.WindowOutputs...)))
}

// TestWindowErrors checks that the window operator fails with a message
// naming the operator, the phase and the cause.
func TestWindowErrors(t *testing.T) {
	lang.CheckWindowFailures(t, []wasmtest.WindowFailure{
		{Name: "zero size", Config: `{"size":0}`, Want: "size must be a positive"},
		{Name: "bad config", Config: `{"size":"x"}`, Want: `config "{\"size\":\"x\"}"`},
		{Name: "no late output", Config: `{}`, Outputs: []string{"main"}, Want: `outputs ["main","late"]`},
		{Name: "bad value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, Want: `record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{Name: "overflow", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, Want: "overflows int64"},
	}, false)
}

func TestMapFilter(t *testing.T) {
	h := newHost(t, "mapfilter")
	h.MustOpen(0, "upper", "")
	h.MustOpen(1, "filter", `{"contains":"LO"}`)
	h.MustOpen(2, "filter", "")
	in := []abi.Record{wasmtest.Rec("k1", "hello", 1), wasmtest.Rec("k2", "World 42!", 2), wasmtest.Rec("", "", 3), wasmtest.Rec("k4", "ünïcode lo", 4)}
	want := []string{"k1=HELLO@1", "k2=WORLD 42!@2", "=@3", "k4=üNïCODE LO@4"}
	upper := wasmtest.CheckUpper(t, h, 0, in, want)

	h.MustProcess(1, upper...)
	var got []string
	for _, r := range h.Take() {
		got = append(got, string(r.Key))
	}
	if want := []string{"k1", "k4"}; !slices.Equal(got, want) {
		t.Fatalf("filter contains LO kept keys %q, want %q", got, want)
	}

	h.MustProcess(2, upper...)
	if out := h.Take(); len(out) != len(upper) {
		t.Fatalf("filter without config kept %d of %d records, want all", len(out), len(upper))
	}
}

func TestTestops(t *testing.T) {
	t.Run("identity", func(t *testing.T) {
		in := []abi.Record{wasmtest.Rec("c", strings.Repeat("v", 100<<10), math.MaxInt64), wasmtest.Rec("a", "1", -5), wasmtest.Rec("", "", 0)}
		wasmtest.CheckIdentityFlush(t, newHost(t, "testops"), in)
	})

	t.Run("trap", func(t *testing.T) {
		h := newHost(t, "testops")
		h.MustOpen(0, "trap", `{"on":"boom"}`)
		h.MustProcess(0, wasmtest.Rec("k", "fine", 1))
		_, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "fine", 1), wasmtest.Rec("k", "boom", 2)})
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("trap on \"boom\": error %v, want a wasm unreachable trap", err)
		}
		t.Logf("trap: %v", err)
		if !strings.Contains(h.Stderr.String(), `panic: testops trap on record value "boom"`) {
			t.Fatalf("stderr %q does not quote the trap's record value", h.Stderr.String())
		}
		if len(h.Failures) != 0 {
			t.Fatalf("a trap went through fail: %q", h.Failures)
		}
	})

	t.Run("fail", func(t *testing.T) {
		h := newHost(t, "testops")
		h.MustOpen(0, "fail", `{"on":"bad"}`)
		st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "good", 1), wasmtest.Rec("key", "bad", 2)})
		if err != nil || st != abi.StatusGuestError {
			t.Fatalf("status %d, error %v; want %d (guest error)", st, err, abi.StatusGuestError)
		}
		want := `operator "fail": process: record 1 of 2 (key "key"): testops fail on record value "bad"`
		if len(h.Failures) != 1 || h.Failures[0] != want {
			t.Fatalf("failures %q, want [%q]", h.Failures, want)
		}
	})

	t.Run("panic", func(t *testing.T) {
		h := newHost(t, "testops")
		h.MustOpen(0, "panic", `{"on":"oops"}`)
		st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "fine", 1), wasmtest.Rec("k", "oops", 2)})
		if err != nil || st != abi.StatusGuestError {
			t.Fatalf("status %d, error %v; want %d (guest error)", st, err, abi.StatusGuestError)
		}
		want := `operator "panic": process: panic: testops panic on record value "oops"`
		if len(h.Failures) != 1 || h.Failures[0] != want {
			t.Fatalf("failures %q, want [%q]", h.Failures, want)
		}
		if !strings.Contains(h.Stderr.String(), "goroutine ") {
			t.Fatalf("stderr %q lacks the panic's stack", h.Stderr.String())
		}
		// The instance survives a recovered panic.
		h.MustProcess(0, wasmtest.Rec("k", "fine", 3))
	})

	t.Run("sleep", func(t *testing.T) {
		h := newHost(t, "testops")
		h.MustOpen(0, "sleep", `{"on":"zzz"}`)
		h.MustProcess(0, wasmtest.Rec("k", "awake", 1))
		ctx, cancel := context.WithTimeout(h.Ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := h.ProcessCtx(ctx, 0, []abi.Record{wasmtest.Rec("k", "zzz", 1)})
		if err == nil || ctx.Err() == nil {
			t.Fatalf("sleep returned %v before the deadline", err)
		}
		t.Logf("sleep: %v", err)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the deadline took %v to stop the call", d)
		}
	})

	t.Run("grow", func(t *testing.T) {
		h := newHost(t, "testops", wasmtest.WithMemoryLimitMiB(64))
		h.MustOpen(0, "grow", `{"mb":4}`)
		h.MustProcess(0, wasmtest.Rec("k", "x", 1)) // 4 MiB fit under the limit
		h.MustOpen(1, "grow", `{"mb":128,"on":"big"}`)
		h.MustProcess(1, wasmtest.Rec("k", "small", 1))
		_, err := h.ProcessCtx(h.Ctx, 1, []abi.Record{wasmtest.Rec("k", "big", 1)})
		if err == nil {
			t.Fatalf("allocating 128 MiB under a 64 MiB limit succeeded")
		}
		t.Logf("grow: %v; stderr: %.80q", err, h.Stderr.String())
		if !strings.Contains(h.Stderr.String(), "out of memory") {
			t.Fatalf("error %v, stderr %q: want the runtime's out of memory message", err, h.Stderr.String())
		}
		if pages, _ := h.Module.Memory().Grow(0); pages > 64*16 {
			t.Fatalf("memory is %d pages, over the 64 MiB limit", pages)
		}
	})

	t.Run("bad config", func(t *testing.T) {
		h := newHost(t, "testops")
		st, err := h.OpenOp(0, "grow", `{"mb":0}`)
		if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 || !strings.Contains(h.Failures[0], `"mb" must be a positive`) {
			t.Fatalf("open grow with mb 0: status %d, error %v, failures %q", st, err, h.Failures)
		}
	})
}

// TestCallErrors checks the SDK's answers to calls the host gets wrong.
func TestCallErrors(t *testing.T) {
	h := newHost(t, "testops")
	st, err := h.OpenOp(0, "nope", "")
	if err != nil || st != abi.StatusUnknownOp || len(h.Failures) != 1 || !strings.Contains(h.Failures[0], `no operator "nope"; it has ["chaos" "fail" "fill" "grow" "identity" "panic" "poison" "runcount" "sleep" "trap"]`) {
		t.Fatalf("open nope: status %d, error %v, failures %q", st, err, h.Failures)
	}
	h.MustOpen(0, "identity", "")
	if st, err := h.OpenOp(0, "identity", ""); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("opening slot 0 twice: status %d, error %v; want bad handle", st, err)
	}
	if st, err := h.ProcessCtx(h.Ctx, 7, []abi.Record{wasmtest.Rec("k", "v", 1)}); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("process on slot 7 that was never opened: status %d, error %v; want bad handle", st, err)
	}
	// A region outside the arena wstream_alloc returned.
	p := h.Write([]byte{0, 0, 0, 0})
	if st, err := h.Call(h.Ctx, h.ProcessFn, 0, uint64(p)-8, 4); err != nil || st != abi.StatusBadPointer {
		t.Fatalf("process with a pointer before the arena: status %d, error %v; want bad pointer", st, err)
	}
	// A malformed batch: count 1, no record.
	if st, err := h.Call(h.Ctx, h.ProcessFn, 0, uint64(h.Write([]byte{1, 0, 0, 0})), 4); err != nil || st != abi.StatusBadArgument {
		t.Fatalf("process with a malformed batch: status %d, error %v; want bad argument", st, err)
	}
	for _, hook := range []string{abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted} {
		if st, err := h.Call(h.Ctx, h.Module.ExportedFunction(hook), 0, 5); err != nil || st != abi.StatusOK {
			t.Errorf("%s on an operator without checkpoint hooks: status %d, error %v; want OK", hook, st, err)
		}
	}
	h.MustClose(0)
	if st, err := h.Call(h.Ctx, h.CloseFn, 0); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("closing slot 0 twice: status %d, error %v; want bad handle", st, err)
	}
}

// BenchmarkUpper measures one wstream_process call over a 1000-record batch
// of the upper operator, emit_batch included, and reports the cost per
// record: with the checks wazero compiles in for WithCloseOnContextDone (what
// a host enforcing call deadlines pays) and without them.
func BenchmarkUpper(b *testing.B) {
	b.Run("deadline-checks", func(b *testing.B) { wasmtest.BenchUpper(b, newHost(b, "mapfilter")) })
	b.Run("no-deadline-checks", func(b *testing.B) {
		wasmtest.BenchUpper(b, newHost(b, "mapfilter", wasmtest.WithoutDeadlineChecks()))
	})
}
