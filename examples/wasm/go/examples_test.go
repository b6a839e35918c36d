package goexamples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

var modules = []string{"wordcount", "mapfilter", "window", "testops"}

// TestModuleExports checks every module's exports and imports against
// abi/ABI.md, signature by signature.
func TestModuleExports(t *testing.T) {
	const i32, i64 = api.ValueTypeI32, api.ValueTypeI64
	type sig struct{ params, results []api.ValueType }
	exports := map[string]sig{
		abi.ExportABIVersion:   {nil, []api.ValueType{i32}},
		abi.ExportAlloc:        {[]api.ValueType{i32}, []api.ValueType{i32}},
		abi.ExportOpen:         {[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		abi.ExportProcess:      {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
		abi.ExportOnTimer:      {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
		abi.ExportClose:        {[]api.ValueType{i32}, []api.ValueType{i32}},
		abi.ExportPlan:         {nil, []api.ValueType{i64}},
		abi.ExportPreBarrier:   {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
		abi.ExportCkptComplete: {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
		abi.ExportCkptAborted:  {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
		"_initialize":          {nil, nil},
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig())
	defer rt.Close(ctx)
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			compiled, err := rt.CompileModule(ctx, moduleBytes(t, name))
			if err != nil {
				t.Fatal(err)
			}
			got := compiled.ExportedFunctions()
			for export, want := range exports {
				fn, ok := got[export]
				if !ok {
					t.Errorf("missing export %s", export)
					continue
				}
				if !slices.Equal(fn.ParamTypes(), want.params) || !slices.Equal(fn.ResultTypes(), want.results) {
					t.Errorf("export %s: params %v results %v, want %v %v", export, fn.ParamTypes(), fn.ResultTypes(), want.params, want.results)
				}
			}
			if _, ok := compiled.ExportedMemories()[abi.ExportMemory]; !ok {
				t.Errorf("missing export %s", abi.ExportMemory)
			}
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
			st, err := h.call(h.ctx, h.mod.ExportedFunction(abi.ExportABIVersion))
			if err != nil || st != abi.Version {
				t.Fatalf("wstream_abi_version = %d, %v; want %d", st, err, abi.Version)
			}
			res, err := h.planFn.Call(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want[name] == nil {
				if res[0] != 0 {
					t.Fatalf("wstream_plan = %#x, want 0 for a module without a plan", res[0])
				}
				return
			}
			b, ok := h.read(uint32(res[0]>>32), uint32(res[0]))
			if !ok {
				t.Fatalf("wstream_plan = %#x: out of memory range", res[0])
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
	h := newHost(t, "wordcount")
	h.mustOpen(0, "split", "")
	h.mustOpen(1, "count", "")

	h.mustProcess(0,
		rec("", "the quick brown fox", 10),
		rec("", "  jumps over\tthe lazy dog\n", 11),
		rec("", "", 12),
		rec("", "naïve\u00a0the   end", 13), // U+00A0 is a space too
	)
	words := h.take()
	if h.batches != 1 {
		t.Errorf("split emitted through %d emit_batch calls, want 1", h.batches)
	}
	var got []string
	for _, r := range words {
		got = append(got, fmt.Sprintf("%s@%d", r.Key, r.Timestamp))
		if len(r.Value) != 0 || r.Port != 0 {
			t.Errorf("word %q: value %q port %d, want empty value on port 0", r.Key, r.Value, r.Port)
		}
	}
	want := []string{"the@10", "quick@10", "brown@10", "fox@10", "jumps@11", "over@11", "the@11", "lazy@11", "dog@11", "naïve@13", "the@13", "end@13"}
	if !slices.Equal(got, want) {
		t.Fatalf("split emitted %q\nwant %q", got, want)
	}

	// Two batches, so counts carry over through state.
	h.mustProcess(1, words[:5]...)
	h.mustProcess(1, words[5:]...)
	if out := h.take(); len(out) != 0 {
		t.Fatalf("count emitted %d records before the end of input", len(out))
	}
	if len(h.timers) != 10 {
		t.Errorf("%d timers registered, want one per distinct word (10)", len(h.timers))
	}
	h.advance(1, abi.MaxWatermark)
	counts := map[string]string{}
	for _, r := range h.take() {
		if r.Timestamp != math.MaxInt64 {
			t.Errorf("count for %q at ts %d, want the timer's time", r.Key, r.Timestamp)
		}
		counts[string(r.Key)] = string(r.Value)
	}
	wantCounts := map[string]string{"the": "3", "quick": "1", "brown": "1", "fox": "1", "jumps": "1", "over": "1", "lazy": "1", "dog": "1", "naïve": "1", "end": "1"}
	if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
		t.Fatalf("counts %v\nwant %v", counts, wantCounts)
	}
	if len(h.state) != 0 {
		t.Errorf("%d state entries left after the final counts, want 0", len(h.state))
	}
	h.mustClose(0)
	h.mustClose(1)
}

func TestWindow(t *testing.T) {
	h := newHost(t, "window", withOutputs("main", "late"))
	h.mustOpen(0, "window", `{"size":1000}`)

	// Out of order, across windows, one at a negative time.
	h.mustProcess(0,
		rec("a", "1", 100),
		rec("a", "2", 1500),
		rec("b", "5", 900),
		rec("a", "3", 999),
		rec("a", "4", -1),
	)
	h.advance(0, 999)
	h.mustProcess(0,
		rec("a", "7", 500), // its window [0,1000) closed at watermark 999: late
		rec("a", "6", 1999),
		rec("b", "1", 1000),
	)
	h.advance(0, abi.MaxWatermark)

	var got []string
	for _, r := range h.take() {
		got = append(got, fmt.Sprintf("%d %s=%s@%d", r.Port, r.Key, r.Value, r.Timestamp))
	}
	want := []string{
		"0 a=-1000,0,4@-1",
		"0 a=0,1000,4@999",
		"0 b=0,1000,5@999",
		"1 a=7@500",
		"0 a=1000,2000,8@1999",
		"0 b=1000,2000,1@1999",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("window emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(h.state) != 0 || len(h.timers) != 0 {
		t.Errorf("%d state entries and %d timers left, want none", len(h.state), len(h.timers))
	}
}

func TestWindowErrors(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		outputs   []string
		process   []abi.Record
		want      string
	}{
		{"zero size", `{"size":0}`, []string{"main", "late"}, nil, "size must be a positive"},
		{"bad config", `{"size":"x"}`, []string{"main", "late"}, nil, `config "{\"size\":\"x\"}"`},
		{"no late output", `{}`, []string{"main"}, nil, `outputs ["main","late"]`},
		{"bad value", `{}`, []string{"main", "late"}, []abi.Record{rec("k", "1", 1), rec("k", "x1", 2)}, `record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{"overflow", `{}`, []string{"main", "late"}, []abi.Record{rec("k", "9223372036854775808", 2)}, "overflows int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, "window", withOutputs(tc.outputs...))
			st, err := h.openOp(0, "window", tc.cfg)
			if tc.process != nil {
				h.mustOK("open", st, err)
				st, err = h.processCtx(h.ctx, 0, tc.process)
			}
			if err != nil || st != abi.StatusGuestError {
				t.Fatalf("status %d (%s), error %v; want %d (guest error)", st, abi.StatusText(st), err, abi.StatusGuestError)
			}
			if len(h.failures) != 1 || !strings.Contains(h.failures[0], tc.want) || !strings.Contains(h.failures[0], `operator "window"`) {
				t.Fatalf("failure messages %q, want one naming the operator and containing %q", h.failures, tc.want)
			}
			if len(h.out) != 0 {
				t.Errorf("a failed call emitted %d records", len(h.out))
			}
		})
	}
}

func TestMapFilter(t *testing.T) {
	h := newHost(t, "mapfilter")
	h.mustOpen(0, "upper", "")
	h.mustOpen(1, "filter", `{"contains":"LO"}`)
	h.mustOpen(2, "filter", "")
	in := []abi.Record{rec("k1", "hello", 1), rec("k2", "World 42!", 2), rec("", "", 3), rec("k4", "ünïcode lo", 4)}
	h.mustProcess(0, in...)
	upper := h.take()
	var got []string
	for _, r := range upper {
		got = append(got, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	want := []string{"k1=HELLO@1", "k2=WORLD 42!@2", "=@3", "k4=üNïCODE LO@4"}
	if !slices.Equal(got, want) {
		t.Fatalf("upper emitted %q, want %q", got, want)
	}

	h.mustProcess(1, upper...)
	got = got[:0]
	for _, r := range h.take() {
		got = append(got, string(r.Key))
	}
	if want := []string{"k1", "k4"}; !slices.Equal(got, want) {
		t.Fatalf("filter contains LO kept keys %q, want %q", got, want)
	}

	h.mustProcess(2, upper...)
	if out := h.take(); len(out) != len(upper) {
		t.Fatalf("filter without config kept %d of %d records, want all", len(out), len(upper))
	}
}

func TestTestops(t *testing.T) {
	t.Run("identity", func(t *testing.T) {
		h := newHost(t, "testops")
		h.mustOpen(0, "identity", "")
		in := []abi.Record{rec("c", strings.Repeat("v", 100<<10), math.MaxInt64), rec("a", "1", -5), rec("", "", 0)}
		h.mustProcess(0, in...)
		out := h.take()
		if len(out) != len(in) {
			t.Fatalf("identity emitted %d records, want %d", len(out), len(in))
		}
		for i := range in {
			if string(out[i].Key) != string(in[i].Key) || string(out[i].Value) != string(in[i].Value) || out[i].Timestamp != in[i].Timestamp {
				t.Errorf("record %d: got key %q ts %d (%d value bytes), want key %q ts %d (%d)", i, out[i].Key, out[i].Timestamp, len(out[i].Value), in[i].Key, in[i].Timestamp, len(in[i].Value))
			}
		}
		// The 100 KiB record pushed the buffer past 64 KiB: one early flush.
		if h.batches != 2 {
			t.Errorf("emit_batch calls = %d, want 2 (one early flush past 64 KiB, one at the end)", h.batches)
		}
	})

	t.Run("trap", func(t *testing.T) {
		h := newHost(t, "testops")
		h.mustOpen(0, "trap", `{"on":"boom"}`)
		h.mustProcess(0, rec("k", "fine", 1))
		_, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k", "fine", 1), rec("k", "boom", 2)})
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("trap on \"boom\": error %v, want a wasm unreachable trap", err)
		}
		t.Logf("trap: %v", err)
		if !strings.Contains(h.stderr.String(), `panic: testops trap on record value "boom"`) {
			t.Fatalf("stderr %q does not quote the trap's record value", h.stderr.String())
		}
		if len(h.failures) != 0 {
			t.Fatalf("a trap went through fail: %q", h.failures)
		}
	})

	t.Run("fail", func(t *testing.T) {
		h := newHost(t, "testops")
		h.mustOpen(0, "fail", `{"on":"bad"}`)
		st, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k", "good", 1), rec("key", "bad", 2)})
		if err != nil || st != abi.StatusGuestError {
			t.Fatalf("status %d, error %v; want %d (guest error)", st, err, abi.StatusGuestError)
		}
		want := `operator "fail": process: record 1 of 2 (key "key"): testops fail on record value "bad"`
		if len(h.failures) != 1 || h.failures[0] != want {
			t.Fatalf("failures %q, want [%q]", h.failures, want)
		}
	})

	t.Run("panic", func(t *testing.T) {
		h := newHost(t, "testops")
		h.mustOpen(0, "panic", `{"on":"oops"}`)
		st, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k", "fine", 1), rec("k", "oops", 2)})
		if err != nil || st != abi.StatusGuestError {
			t.Fatalf("status %d, error %v; want %d (guest error)", st, err, abi.StatusGuestError)
		}
		want := `operator "panic": process: panic: testops panic on record value "oops"`
		if len(h.failures) != 1 || h.failures[0] != want {
			t.Fatalf("failures %q, want [%q]", h.failures, want)
		}
		if !strings.Contains(h.stderr.String(), "goroutine ") {
			t.Fatalf("stderr %q lacks the panic's stack", h.stderr.String())
		}
		// The instance survives a recovered panic.
		h.mustProcess(0, rec("k", "fine", 3))
	})

	t.Run("sleep", func(t *testing.T) {
		h := newHost(t, "testops")
		h.mustOpen(0, "sleep", `{"on":"zzz"}`)
		h.mustProcess(0, rec("k", "awake", 1))
		ctx, cancel := context.WithTimeout(h.ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := h.processCtx(ctx, 0, []abi.Record{rec("k", "zzz", 1)})
		if err == nil || ctx.Err() == nil {
			t.Fatalf("sleep returned %v before the deadline", err)
		}
		t.Logf("sleep: %v", err)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the deadline took %v to stop the call", d)
		}
	})

	t.Run("grow", func(t *testing.T) {
		h := newHost(t, "testops", withMemoryLimitMiB(64))
		h.mustOpen(0, "grow", `{"mb":4}`)
		h.mustProcess(0, rec("k", "x", 1)) // 4 MiB fit under the limit
		h.mustOpen(1, "grow", `{"mb":128,"on":"big"}`)
		h.mustProcess(1, rec("k", "small", 1))
		_, err := h.processCtx(h.ctx, 1, []abi.Record{rec("k", "big", 1)})
		if err == nil {
			t.Fatalf("allocating 128 MiB under a 64 MiB limit succeeded")
		}
		t.Logf("grow: %v; stderr: %.80q", err, h.stderr.String())
		if !strings.Contains(h.stderr.String(), "out of memory") {
			t.Fatalf("error %v, stderr %q: want the runtime's out of memory message", err, h.stderr.String())
		}
		if pages, _ := h.mod.Memory().Grow(0); pages > 64*16 {
			t.Fatalf("memory is %d pages, over the 64 MiB limit", pages)
		}
	})

	t.Run("bad config", func(t *testing.T) {
		h := newHost(t, "testops")
		st, err := h.openOp(0, "grow", `{"mb":0}`)
		if err != nil || st != abi.StatusGuestError || len(h.failures) != 1 || !strings.Contains(h.failures[0], `"mb" must be a positive`) {
			t.Fatalf("open grow with mb 0: status %d, error %v, failures %q", st, err, h.failures)
		}
	})
}

// TestCallErrors checks the SDK's answers to calls the host gets wrong.
func TestCallErrors(t *testing.T) {
	h := newHost(t, "testops")
	st, err := h.openOp(0, "nope", "")
	if err != nil || st != abi.StatusUnknownOp || len(h.failures) != 1 || !strings.Contains(h.failures[0], `no operator "nope"; it has ["chaos" "fail" "grow" "identity" "panic" "runcount" "sleep" "trap"]`) {
		t.Fatalf("open nope: status %d, error %v, failures %q", st, err, h.failures)
	}
	h.mustOpen(0, "identity", "")
	if st, err := h.openOp(0, "identity", ""); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("opening slot 0 twice: status %d, error %v; want bad handle", st, err)
	}
	if st, err := h.processCtx(h.ctx, 7, []abi.Record{rec("k", "v", 1)}); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("process on slot 7 that was never opened: status %d, error %v; want bad handle", st, err)
	}
	// A region outside the arena wstream_alloc returned.
	p := h.write([]byte{0, 0, 0, 0})
	if st, err := h.call(h.ctx, h.process, 0, uint64(p)-8, 4); err != nil || st != abi.StatusBadPointer {
		t.Fatalf("process with a pointer before the arena: status %d, error %v; want bad pointer", st, err)
	}
	// A malformed batch: count 1, no record.
	if st, err := h.call(h.ctx, h.process, 0, uint64(h.write([]byte{1, 0, 0, 0})), 4); err != nil || st != abi.StatusBadArgument {
		t.Fatalf("process with a malformed batch: status %d, error %v; want bad argument", st, err)
	}
	for _, hook := range []string{abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted} {
		if st, err := h.call(h.ctx, h.mod.ExportedFunction(hook), 0, 5); err != nil || st != abi.StatusOK {
			t.Errorf("%s on an operator without checkpoint hooks: status %d, error %v; want OK", hook, st, err)
		}
	}
	h.mustClose(0)
	if st, err := h.call(h.ctx, h.closeFn, 0); err != nil || st != abi.StatusBadHandle {
		t.Fatalf("closing slot 0 twice: status %d, error %v; want bad handle", st, err)
	}
}

// BenchmarkUpper measures one wstream_process call over a 1000-record batch
// of the upper operator, emit_batch included, and reports the cost per
// record: with the checks wazero compiles in for WithCloseOnContextDone (what
// a host enforcing call deadlines pays) and without them.
func BenchmarkUpper(b *testing.B) {
	b.Run("deadline-checks", func(b *testing.B) { benchmarkUpper(b) })
	b.Run("no-deadline-checks", func(b *testing.B) { benchmarkUpper(b, withoutDeadlineChecks()) })
}

func benchmarkUpper(b *testing.B, opts ...hostOption) {
	const records = 1000
	h := newHost(b, "mapfilter", opts...)
	h.discard = true
	h.mustOpen(0, "upper", "")
	recs := make([]abi.Record, records)
	for i := range recs {
		recs[i] = rec(fmt.Sprintf("key-%05d", i), fmt.Sprintf("the quick brown fox %05d jumps", i), int64(i))
	}
	batch := abi.Encode(recs)
	args := []uint64{0, uint64(h.write(batch)), uint64(len(batch))}
	// Warm up: the output buffer grows to its working size on the first calls.
	for range 10 {
		if _, err := h.process.Call(h.ctx, args...); err != nil {
			b.Fatal(err)
		}
	}
	h.emitted = 0
	pages, _ := h.mod.Memory().Grow(0)
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for b.Loop() {
		res, err := h.process.Call(h.ctx, args...)
		if err != nil || res[0] != 0 {
			b.Fatalf("process: %v %v %q", res, err, h.failures)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
	if h.emitted != b.N*records {
		b.Fatalf("emitted %d records, want %d", h.emitted, b.N*records)
	}
	// The SDK allocates nothing per record: the guest heap must not grow.
	if after, _ := h.mod.Memory().Grow(0); after != pages {
		b.Errorf("guest memory grew from %d to %d pages over the run", pages, after)
	}
}
