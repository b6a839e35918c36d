package watexamples_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
	"github.com/wstream/wstream/job"
)

// TestReference drives the two operators of the skeleton module.
func TestReference(t *testing.T) {
	t.Run("identity", func(t *testing.T) {
		h := newHost(t, "reference")
		wasmtest.CheckIdentityBatches(t, h, 1000)
		if len(h.Logs) != 1 || h.Logs[0] != (wasmtest.LogLine{Level: abi.LogDebug, Msg: "opened"}) {
			t.Errorf("logs %v, want one debug line from open", h.Logs)
		}
		h.MustClose(0)
	})

	t.Run("dedup", func(t *testing.T) {
		h := newHost(t, "reference")
		h.MustOpen(0, "identity", "")
		h.MustOpen(1, "dedup", "")
		h.MustProcess(1, wasmtest.Rec("a", "1", 100), wasmtest.Rec("b", "2", 150), wasmtest.Rec("a", "3", 900))
		wasmtest.WantRecords(t, "dedup", h.Take(), "0 a=1@100", "0 b=2@150")
		if v := h.State[wasmtest.StateKey{Handle: 0, Key: "a"}]; string(v) != "\x64\x00\x00\x00\x00\x00\x00\x00" {
			t.Errorf("state of a = % x, want 100 as 8 bytes little-endian", v)
		}
		h.Advance(1, 1100) // forgets a, not b (1150)
		h.MustProcess(1, wasmtest.Rec("a", "4", 1200), wasmtest.Rec("b", "5", 1200))
		wasmtest.WantRecords(t, "dedup after the watermark passed a", h.Take(), "0 a=4@1200")
		h.MustProcess(1, wasmtest.Rec("z", "6", math.MaxInt64-10))
		h.Advance(1, abi.MaxWatermark)
		if len(h.State) != 0 || len(h.Timers) != 0 {
			t.Errorf("%d state entries and %d timers left, want none", len(h.State), len(h.Timers))
		}
		h.MustClose(1)
		h.MustClose(0)
	})
}

// TestMemoryStable checks that the arena and the output buffer are reused:
// a long run of batches of one size does not grow the guest's memory.
func TestMemoryStable(t *testing.T) {
	for _, name := range []string{"reference", "wordcount"} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			op := "identity"
			if name == "wordcount" {
				op = "split"
			}
			h.MustOpen(0, op, "")
			recs := make([]abi.Record, 500)
			for i := range recs {
				recs[i] = wasmtest.Rec(fmt.Sprintf("key-%d", i), fmt.Sprintf("the quick brown fox %05d jumps", i), int64(i))
			}
			h.MustProcess(0, recs...)
			h.Take()
			pages, _ := h.Module.Memory().Grow(0)
			for range 200 {
				h.MustProcess(0, recs...)
				h.Take()
			}
			if after, _ := h.Module.Memory().Grow(0); after != pages {
				t.Errorf("guest memory grew from %d to %d pages over 200 batches", pages, after)
			}
		})
	}
}

// TestArena checks wstream_alloc: the same region while it is large enough,
// a larger one on demand (in place when it is the last block), 0 for a
// negative size or more memory than the limit allows.
func TestArena(t *testing.T) {
	h := newHost(t, "reference", wasmtest.WithMemoryLimitMiB(8))
	alloc := func(size int32) uint32 {
		t.Helper()
		res, err := h.AllocFn.Call(h.Ctx, uint64(uint32(size)))
		if err != nil {
			t.Fatal(err)
		}
		return uint32(res[0])
	}
	a := alloc(4096)
	if a == 0 || a%8 != 0 {
		t.Fatalf("wstream_alloc(4096) = %#x, want an 8-byte aligned address", a)
	}
	if b := alloc(65536); b != a {
		t.Errorf("wstream_alloc(65536) = %#x, want the same arena %#x (it has 64 KiB)", b, a)
	}
	if b := alloc(200000); b != a {
		t.Errorf("wstream_alloc(200000) = %#x, want the arena grown in place at %#x", b, a)
	}
	if _, ok := h.Read(a, 200000); !ok {
		t.Errorf("the grown arena lies outside memory")
	}
	if b := alloc(-1); b != 0 {
		t.Errorf("wstream_alloc(-1) = %#x, want 0", b)
	}
	if b := alloc(64 << 20); b != 0 {
		t.Errorf("wstream_alloc(64 MiB) under an 8 MiB limit = %#x, want 0", b)
	}
	// The old arena is still the arena after a failed request.
	h.ArenaPtr, h.ArenaSize = 0, 0
	h.MustOpen(0, "identity", "")
	if h.ArenaPtr != a {
		t.Errorf("arena after a failed wstream_alloc: %#x, want %#x", h.ArenaPtr, a)
	}
}

// TestCallErrors checks every module's answers to calls the host gets
// wrong: slots, operator names, pointers outside the arena and malformed
// batches, each refused with its status and a message through fail.
func TestCallErrors(t *testing.T) {
	for _, tc := range []struct {
		module, op, cfg, has string
		outputs              []string
	}{
		{"wordcount", "count", "", `["count" "split"]`, nil},
		{"window", "window", `{"size":10}`, `["window"]`, []string{"main", "late"}},
		{"conformance", "conform", "cfg", `["conform"]`, []string{"out", "side"}},
		{"reference", "dedup", "", `["dedup" "identity"]`, nil},
	} {
		t.Run(tc.module, func(t *testing.T) {
			var opts []wasmtest.Option
			if tc.outputs != nil {
				opts = append(opts, wasmtest.WithOutputs(tc.outputs...))
			}
			h := newHost(t, tc.module, opts...)
			check := func(what string, st int32, err error, status int32, want string) {
				t.Helper()
				if err != nil || st != status {
					t.Fatalf("%s: status %d (%s), error %v; want %d (%s)", what, st, abi.StatusText(st), err, status, abi.StatusText(status))
				}
				if len(h.Failures) != 1 || !strings.Contains(h.Failures[0], want) {
					t.Fatalf("%s: failures %q, want one containing %q", what, h.Failures, want)
				}
				h.Failures = nil
			}
			st, err := h.OpenOp(0, "nope\n", "")
			check("open nope", st, err, abi.StatusUnknownOp, `wstream_open: the module has no operator "nope\n"; it has `+tc.has)
			st, err = h.OpenOp(64, tc.op, tc.cfg)
			check("open slot 64", st, err, abi.StatusBadHandle, "operator slot 64 is outside [0, 64)")
			st, err = h.OpenOp(-1, tc.op, tc.cfg)
			check("open slot -1", st, err, abi.StatusBadHandle, "operator slot -1 is outside [0, 64)")
			h.MustOpen(0, tc.op, tc.cfg)
			st, err = h.OpenOp(0, tc.op, tc.cfg)
			check("open slot 0 twice", st, err, abi.StatusBadHandle, fmt.Sprintf("operator slot 0 is already open (operator %q)", tc.op))
			st, err = h.ProcessCtx(h.Ctx, 7, []abi.Record{wasmtest.Rec("k", "v", 1)})
			check("process slot 7", st, err, abi.StatusBadHandle, "wstream_process: operator slot 7 is not open")

			// Regions outside the arena wstream_alloc returned: the
			// modules make it at least 64 KiB.
			const arena = 64 << 10
			p := uint64(h.Write([]byte{0, 0, 0, 0}))
			st, err = h.Call(h.Ctx, h.ProcessFn, 0, p-8, 4)
			check("process before the arena", st, err, abi.StatusBadPointer, fmt.Sprintf("wstream_process: region [%#x, +4) lies outside the %d-byte argument arena returned by wstream_alloc", p-8, arena))
			st, err = h.Call(h.Ctx, h.ProcessFn, 0, p+arena-2, 4)
			check("process past the arena", st, err, abi.StatusBadPointer, "lies outside the")
			st, err = h.Call(h.Ctx, h.ProcessFn, 0, p, uint64(uint32(0xffffffff)))
			check("process with a negative length", st, err, abi.StatusBadPointer, ", +-1) lies outside")
			st, err = h.Call(h.Ctx, h.OnTimerFn, 0, 0xfffffff0, 4)
			check("on_timer far away", st, err, abi.StatusBadPointer, "wstream_on_timer: region [0xfffffff0, +4)")
			st, err = h.Call(h.Ctx, h.OpenFn, 1, p, 4, p+arena, 1)
			check("open with a config past the arena", st, err, abi.StatusBadPointer, "wstream_open: region")

			// Malformed batches.
			rec := abi.Encode([]abi.Record{wasmtest.Rec("k", "12", 5)})
			for _, b := range []struct {
				batch []byte
				want  string
			}{
				{[]byte{1, 0}, "malformed batch: 2 bytes is shorter than the 4-byte header"},
				{[]byte{1, 0, 0, 0}, "malformed batch: record 0 at offset 4: header truncated"},
				{rec[:len(rec)-1], "malformed batch: record 0 at offset 4: key and value overrun the batch"},
				{append(slices.Clone(rec), 9), "malformed batch: 1 trailing bytes after 1 records"},
				{append([]byte{2, 0, 0, 0}, append(rec[4:], rec[4:]...)[:33]...), "malformed batch: record 1 at offset 27: header truncated"},
				{append([]byte{2, 0, 0, 0}, append(rec[4:], rec[4:]...)[:44]...), "malformed batch: record 1 at offset 27: key and value overrun the batch"},
			} {
				p := h.Write(b.batch)
				st, err := h.Call(h.Ctx, h.ProcessFn, 0, uint64(p), uint64(len(b.batch)))
				check(fmt.Sprintf("process % x", b.batch), st, err, abi.StatusBadArgument, fmt.Sprintf("operator %q: input batch from the host: %s", tc.op, b.want))
				st, err = h.Call(h.Ctx, h.OnTimerFn, 0, uint64(p), uint64(len(b.batch)))
				check(fmt.Sprintf("on_timer % x", b.batch), st, err, abi.StatusBadArgument, fmt.Sprintf("operator %q: timer batch from the host: %s", tc.op, b.want))
			}
			if len(h.Out) != 0 {
				t.Errorf("refused calls emitted %d records", len(h.Out))
			}
			// Empty batches are fine; so are the hooks of an open slot.
			st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(h.Write([]byte{0, 0, 0, 0})), 4)
			h.MustOK("an empty batch", st, err)
			for _, hook := range []string{abi.ExportCkptComplete, abi.ExportCkptAborted} {
				st, err := h.Call(h.Ctx, h.Module.ExportedFunction(hook), 0, 5)
				h.MustOK(hook, st, err)
			}
			h.MustClose(0)
			st, err = h.Call(h.Ctx, h.CloseFn, 0)
			check("close twice", st, err, abi.StatusBadHandle, "wstream_close: operator slot 0 is not open")
			for _, hook := range []string{abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted} {
				st, err := h.Call(h.Ctx, h.Module.ExportedFunction(hook), 0, 5)
				check(hook+" on a closed slot", st, err, abi.StatusBadHandle, hook+": operator slot 0 is not open")
			}
			// The slot can be opened again.
			h.MustOpen(0, tc.op, tc.cfg)
		})
	}
}

// TestFailingHostCalls checks that a status the host returns fails the call
// with a message naming what failed, the record and the status.
func TestFailingHostCalls(t *testing.T) {
	// A vertex without outputs: emit_batch says BAD_OUTPUT.
	h := newHost(t, "wordcount")
	h.Outputs = nil
	h.MustOpen(0, "split", "")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("", "a b", 1)})
	if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 ||
		h.Failures[0] != `operator "split": process: emitting 2 records: status -4 (BAD_OUTPUT)` {
		t.Fatalf("emit to a vertex without outputs: status %d, error %v, failures %q", st, err, h.Failures)
	}

	// A state value of the wrong size where an int64 belongs.
	h = newHost(t, "wordcount")
	h.MustOpen(0, "count", "")
	h.State[wasmtest.StateKey{Handle: 0, Key: "w\"1"}] = []byte("1234")
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("w0", "", 1), wasmtest.Rec("w\"1", "", 2)})
	if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 ||
		h.Failures[0] != `operator "count": process: record 1 of 2 (key "w\"1"): value state "count" holds 4 bytes, not an 8-byte int64` {
		t.Fatalf("a 4-byte count: status %d, error %v, failures %q", st, err, h.Failures)
	}
	h.Failures = nil
	delete(h.State, wasmtest.StateKey{Handle: 0, Key: "w\"1"})
	h.State[wasmtest.StateKey{Handle: 0, Key: "x"}] = make([]byte, 9)
	timer := abi.Encode([]abi.Record{{Port: uint32(abi.TimeEvent), Timestamp: 7, Key: []byte("x")}})
	st, err = h.Call(h.Ctx, h.OnTimerFn, 0, uint64(h.Write(timer)), uint64(len(timer)))
	if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 ||
		h.Failures[0] != `operator "count": on_timer: event time timer at 7 (key "x"): value state "count" holds 9 bytes, not an 8-byte int64` {
		t.Fatalf("a 9-byte count at a timer: status %d, error %v, failures %q", st, err, h.Failures)
	}
}

// TestRealHost compiles every module with the worker's host, which checks
// the exports, the imports, the ABI version and the plan at deploy, and
// parses the plans of the examples as job plans.
func TestRealHost(t *testing.T) {
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			m, err := rt.Compile(ctx, name, lang.Module(t, name))
			if err != nil {
				t.Fatalf("the host refuses the module: %v", err)
			}
			defer m.Close(ctx)
			if (m.Plan() != nil) != (name == "wordcount" || name == "window") {
				t.Fatalf("plan %q", m.Plan())
			}
			if m.Plan() == nil {
				return
			}
			if _, err := job.Parse(m.Plan()); err != nil {
				t.Fatalf("the plan is not a valid job plan: %v", err)
			}
		})
	}
}
