package cexamples_test

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

// The tests below drive examples/wasm/c/testops, whose operators use every
// part of the C SDK.

func format(recs []abi.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %s=%s@%d", r.Port, r.Key, r.Value, r.Timestamp))
	}
	return out
}

func wantRecords(t *testing.T, what string, got []abi.Record, want ...string) {
	t.Helper()
	if g := format(got); !slices.Equal(g, want) {
		t.Fatalf("%s emitted\n%s\nwant\n%s", what, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// wantFailure checks that a call failed with GUEST_ERROR (or the given
// status) and exactly one fail message containing want.
func wantFailure(t *testing.T, h *host, what string, st int32, err error, status int32, want string) {
	t.Helper()
	if err != nil || st != status {
		t.Fatalf("%s: status %d (%s), error %v; want %d (%s)", what, st, abi.StatusText(st), err, status, abi.StatusText(status))
	}
	if len(h.failures) != 1 || !strings.Contains(h.failures[0], want) {
		t.Fatalf("%s: failures %q, want one containing %q", what, h.failures, want)
	}
	h.failures = nil
}

func TestIdentityFlush(t *testing.T) {
	h := newHost(t, "testops")
	h.mustOpen(0, "identity", "")
	in := []abi.Record{rec("c", strings.Repeat("v", 100<<10), math.MaxInt64), rec("a", "1", -5), rec("", "", math.MinInt64)}
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
	// Small records: one batch per call, however many.
	h.batches = 0
	many := make([]abi.Record, 500)
	for i := range many {
		many[i] = rec(strconv.Itoa(i), "value", int64(i))
	}
	h.mustProcess(0, many...)
	if out := h.take(); len(out) != 500 || h.batches != 1 {
		t.Errorf("500 small records: %d emitted in %d emit_batch calls, want 500 in 1", len(out), h.batches)
	}
	// An empty batch emits nothing and calls nothing.
	h.batches = 0
	h.mustProcess(0)
	if h.batches != 0 {
		t.Errorf("an empty batch made %d emit_batch calls", h.batches)
	}
}

func TestFail(t *testing.T) {
	h := newHost(t, "testops")
	h.mustOpen(0, "fail", `{"on":"bad"}`)
	st, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k", "good", 1), rec("key\n\"x\"", "bad", 2)})
	wantFailure(t, h, "process", st, err, abi.StatusGuestError,
		`operator "fail": process: record 1 of 2 (key "key\n\"x\""): testops fail on record value "bad"`)
	if len(h.out) != 0 {
		t.Errorf("a failed call emitted %d records", len(h.out))
	}
	// The instance goes on after a failed call.
	h.mustProcess(0, rec("k", "fine", 3))
	wantRecords(t, "fail", h.take(), "0 k=fine@3")

	st, err = h.openOp(1, "fail", `{}`)
	wantFailure(t, h, "open fail without on", st, err, abi.StatusGuestError, `operator "fail": open: config "on" is required`)
}

func TestRouteAndHooks(t *testing.T) {
	h := newHost(t, "testops", withOutputs("main", "side"))
	h.mustOpen(0, "route", "")
	h.mustProcess(0, rec("a", "one", 1), rec("b", "side:two", 2), rec("c", "direct:three", 3), rec("d", "four", 4))
	// The unbuffered emit flushed what was buffered first, so order holds.
	wantRecords(t, "route", h.take(), "0 a=one@1", "1 b=side:two@2", "0 c=direct:three@3", "0 d=four@4")
	if h.emits != 1 || h.batches != 2 {
		t.Errorf("emit calls %d, emit_batch calls %d; want 1 and 2", h.emits, h.batches)
	}

	hook := func(export string, id int64) (int32, error) {
		return h.call(h.ctx, h.mod.ExportedFunction(export), 0, uint64(id))
	}
	st, err := hook(abi.ExportPreBarrier, 7)
	h.mustOK("pre_barrier", st, err)
	wantRecords(t, "pre_barrier", h.take(), "0 barrier=7@7")
	st, err = hook(abi.ExportCkptComplete, 7)
	h.mustOK("checkpoint_complete", st, err)
	st, err = hook(abi.ExportCkptAborted, 8)
	h.mustOK("checkpoint_aborted", st, err)
	if want := []logLine{{abi.LogInfo, "checkpoint 7 complete"}, {abi.LogWarn, "checkpoint 8 aborted"}}; !slices.Equal(h.logs, want) {
		t.Errorf("logs %v, want %v", h.logs, want)
	}
	st, err = hook(abi.ExportCkptAborted, -3)
	wantFailure(t, h, "checkpoint_aborted", st, err, abi.StatusGuestError, `operator "route": checkpoint_aborted: checkpoint -3: negative checkpoint id -3`)

	// Without a "side" output the operator cannot open.
	h2 := newHost(t, "testops")
	st, err = h2.openOp(0, "route", "")
	wantFailure(t, h2, "open route", st, err, abi.StatusGuestError, `operator "route": open: output "side": bad output`)
}

func TestBadOutput(t *testing.T) {
	h := newHost(t, "testops")
	h.mustOpen(0, "badport", "")
	st, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k", "v", 1), rec("k", "w", 2)})
	wantFailure(t, h, "process", st, err, abi.StatusGuestError, `operator "badport": process: emitting 2 records: bad output`)
	if len(h.out) != 0 {
		t.Errorf("emitted %d records to a bad output", len(h.out))
	}
}

func TestMapState(t *testing.T) {
	h := newHost(t, "testops")
	h.mustOpen(0, "mapops", "")
	cmd := func(key string, cmds ...string) []abi.Record {
		t.Helper()
		var recs []abi.Record
		for i, c := range cmds {
			recs = append(recs, rec(key, c, int64(i)))
		}
		h.mustProcess(0, recs...)
		return h.take()
	}
	wantRecords(t, "put/get", cmd("k1", "put b 2", "put a 1", "put ab 12", "get a", "get zz", "del b", "get b"),
		"0 a=1@3", "0 zz=<absent>@4", "0 b=<absent>@6")
	// Another key has its own map.
	wantRecords(t, "other key", cmd("k2", "put a other", "get a"), "0 a=other@1")
	wantRecords(t, "list", cmd("k1", "list"), "0 a=1@0", "0 ab=12@0")
	wantRecords(t, "list prefix", cmd("k1", "list ab"), "0 ab=12@0")
	wantRecords(t, "list none", cmd("k1", "list q"))

	// Many entries page through state_iter, in map-key order.
	var puts, want []string
	for i := range 300 {
		k := fmt.Sprintf("p%03d", i)
		puts = append(puts, fmt.Sprintf("put %s %s", k, strings.Repeat("v", 40)))
		want = append(want, fmt.Sprintf("0 %s=%s@0", k, strings.Repeat("v", 40)))
	}
	cmd("k3", puts...)
	h.iterCalls = 0
	wantRecords(t, "list 300", cmd("k3", "list p"), want...)
	if h.iterCalls < 3 {
		t.Errorf("300 entries of 52 bytes took %d state_iter calls; want several 4 KiB pages", h.iterCalls)
	}
	wantRecords(t, "first 3", cmd("k3", "first p 3"), want[:3]...)

	// An entry larger than the page: the SDK grows the page on LIMIT.
	cmd("k4", "put a small", "big b 100000", "put c small")
	h.mustProcess(0, rec("k4", "list", 0))
	out := h.take()
	if len(out) != 3 || string(out[0].Key) != "a" || len(out[1].Value) != 100000 || strings.Trim(string(out[1].Value), "x") != "" || string(out[2].Key) != "c" {
		t.Fatalf("list with a 100000-byte entry: %d records", len(out))
	}
	// A value larger than the read buffer: get grows it.
	h.mustProcess(0, rec("k4", "get b", 0))
	if out := h.take(); len(out) != 1 || len(out[0].Value) != 100000 {
		t.Fatalf("get of a 100000-byte value: %d records", len(out))
	}

	// Nested ranges: for each entry, the entries sharing its first byte.
	wantRecords(t, "nest", cmd("k5", "put a1 x", "put a2 x", "put b1 x", "nest"), "0 a1=2@3", "0 a2=2@3", "0 b1=1@3")

	// Namespaced int64 value state: 8 bytes little-endian.
	wantRecords(t, "add", cmd("k6", "add w1 5", "add w2 -7", "add w1 10"), "0 w1=5@0", "0 w2=-7@1", "0 w1=15@2")
	if v := h.state[stateKey{h.states["v"], "k6", "w1"}]; string(v) != "\x0f\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("value state v of k6 under w1 = %q, want 15 as 8 bytes little-endian", v)
	}
	cmd("k6", "vdel w1")
	if _, ok := h.state[stateKey{h.states["v"], "k6", "w1"}]; ok {
		t.Errorf("vdel left the value")
	}
	wantRecords(t, "add after delete", cmd("k6", "add w1 1"), "0 w1=1@0")

	st, err := h.processCtx(h.ctx, 0, []abi.Record{rec("k7", "vraw w abc", 0), rec("k7", "add w 1", 1)})
	wantFailure(t, h, "add on a 3-byte value", st, err, abi.StatusGuestError,
		`operator "mapops": process: record 1 of 2 (key "k7"): value state "v" holds 3 bytes, not an 8-byte int64: bad argument`)
	st, err = h.processCtx(h.ctx, 0, []abi.Record{rec("k7", "unknown", 0)})
	wantFailure(t, h, "unregistered state", st, err, abi.StatusGuestError,
		`value state "other" was not registered: call ws_value_state_get(ctx, "other", ...) in open`)
	st, err = h.processCtx(h.ctx, 0, []abi.Record{rec("k7", "frobnicate", 0)})
	wantFailure(t, h, "unknown command", st, err, abi.StatusGuestError, `(key "k7"): unknown command "frobnicate"`)
	h.mustClose(0)

	// The host refuses a name of another kind: the SDK names the state.
	h.states["m"] = 0
	h.kinds = []int32{abi.StateValue}
	st, err = h.openOp(1, "mapops", "")
	wantFailure(t, h, "open with a clashing kind", st, err, abi.StatusGuestError, `operator "mapops": open: registering map state "m": bad argument`)
}

func TestTimers(t *testing.T) {
	h := newHost(t, "testops")
	h.mustOpen(0, "timers", "")
	h.wm = 42
	h.mustProcess(0,
		rec("a", "ev 100 w1", 1),
		rec("a", "ev 100 w1", 2), // the same timer twice is one timer
		rec("b", "ev 50", 3),
		rec("a", "ev 200 w2", 4),
		rec("a", "del 200 w2", 5),
		rec("c", "pt 1700000000000 p", 6),
		rec("k", "now", 7),
	)
	wantRecords(t, "now", h.take(), "0 k=42,1700000000000@7")
	if len(h.timers) != 3 {
		t.Fatalf("%d timers registered, want 3: %v", len(h.timers), h.timers)
	}
	h.advance(0, 150)
	wantRecords(t, "event timers", h.take(), "0 b=0,@50", "0 a=0,w1@100")
	st, err := h.fire(0, abi.TimeProcessing, 1_700_000_000_000)
	h.mustOK("processing timers", st, err)
	wantRecords(t, "processing timers", h.take(), "0 c=1,p@1700000000000")
	if len(h.timers) != 0 {
		t.Fatalf("timers left: %v", h.timers)
	}

	h.mustProcess(0, rec("z", "ev 10 boom", 1))
	h.wm = 10
	st, err = h.fire(0, abi.TimeEvent, 10)
	wantFailure(t, h, "failing timer", st, err, abi.StatusGuestError, `operator "timers": on_timer: event time timer at 10 (key "z"): timer boom`)
	if len(h.out) != 0 {
		t.Errorf("a failed on_timer emitted %d records", len(h.out))
	}

	// An operator without on_timer cannot take timers.
	h.mustOpen(1, "identity", "")
	var bb abi.Builder
	bb.Add(0, 5, []byte("k"), nil)
	st, err = h.call(h.ctx, h.onTimer, 1, uint64(h.write(bb.Bytes())), uint64(len(bb.Bytes())))
	wantFailure(t, h, "timers without on_timer", st, err, abi.StatusGuestError, `operator "identity": on_timer: 1 timers fired but the operator has no on_timer callback`)
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want, fail string }{
		{``, "n=-0 s=- b=-0", ""},
		{`{}`, "n=-0 s=- b=-0", ""},
		{`{"n":-9223372036854775808,"s":"a\tb\u00e9\ud83d\ude00","b":true}`, "n=-9223372036854775808 s=a\tbé😀 b=1", ""},
		{`{"n":1,"n":2,"s":null,"b":false,"x":{"y":[1,2.5e3,"z",null]}}`, "n=2 s=- b=0", ""},
		{`{"n":9223372036854775808}`, "", `config member "n": 9223372036854775808 is not an integer that fits in 64 bits`},
		{`{"n":1.5}`, "", `config member "n": 1.5 is not an integer`},
		{`{"n":"1"}`, "", `member "n" is a string, not an integer`},
		{`{"b":1}`, "", `member "b" is a number, not a boolean`},
		{`{"s":["x"]}`, "", `member "s" is an array, not a string`},
		{`{"s":"\ud800"}`, "n=-0 s=\ufffd b=-0", ""},
		{`{"n":01}`, "", `not a JSON object`},
		{`{"s":"a` + "\n" + `"}`, "", `not a JSON object`},
		{`{"n":1,}`, "", `not a JSON object`},
		{strings.Repeat("[", 200), "", `not a JSON object`},
		{`{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "", `not a JSON object`},
	} {
		h := newHost(t, "testops")
		st, err := h.openOp(0, "config", tc.cfg)
		if tc.fail != "" {
			wantFailure(t, h, "open config "+tc.cfg, st, err, abi.StatusGuestError, tc.fail)
			continue
		}
		h.mustOK("open config "+tc.cfg, st, err)
		h.mustClose(0)
		out := h.take()
		if len(out) != 1 || string(out[0].Key) != tc.cfg || string(out[0].Value) != tc.want {
			t.Errorf("config %s: emitted %v, want %q", tc.cfg, format(out), tc.want)
		}
	}
}

// TestCallErrors checks the SDK's answers to calls the host gets wrong.
func TestCallErrors(t *testing.T) {
	h := newHost(t, "testops")
	st, err := h.openOp(0, "nope", "")
	wantFailure(t, h, "open nope", st, err, abi.StatusUnknownOp,
		`wstream_open: the module has no operator "nope"; it has ["identity" "fail" "route" "badport" "mapops" "timers" "config"]`)
	h.mustOpen(0, "identity", "")
	st, err = h.openOp(0, "identity", "")
	wantFailure(t, h, "opening slot 0 twice", st, err, abi.StatusBadHandle, `operator slot 0 is already open (operator "identity")`)
	st, err = h.openOp(-1, "identity", "")
	wantFailure(t, h, "opening slot -1", st, err, abi.StatusBadHandle, `operator slot -1 is outside [0, 4096)`)
	st, err = h.processCtx(h.ctx, 7, []abi.Record{rec("k", "v", 1)})
	wantFailure(t, h, "process on slot 7", st, err, abi.StatusBadHandle, "wstream_process: operator slot 7 is not open")

	// Regions outside the arena wstream_alloc returned.
	p := h.write([]byte{0, 0, 0, 0})
	st, err = h.call(h.ctx, h.process, 0, uint64(p)-8, 4)
	wantFailure(t, h, "process before the arena", st, err, abi.StatusBadPointer, "lies outside the")
	st, err = h.call(h.ctx, h.process, 0, uint64(p), 1<<30)
	wantFailure(t, h, "process past the arena", st, err, abi.StatusBadPointer, "lies outside the")

	// Malformed batches.
	for _, tc := range []struct {
		name  string
		batch []byte
		want  string
	}{
		{"short", []byte{1, 0}, "2 bytes is shorter than the 4-byte header"},
		{"count without record", []byte{1, 0, 0, 0}, "record 0 at offset 4: header truncated"},
		{"overrun", append(abi.Encode([]abi.Record{rec("k", "v", 1)})[:24], 0), "record 0 at offset 4: key and value overrun"},
		{"trailing", append(abi.Encode([]abi.Record{rec("k", "v", 1)}), 9), "1 trailing bytes after 1 records"},
	} {
		st, err := h.call(h.ctx, h.process, 0, uint64(h.write(tc.batch)), uint64(len(tc.batch)))
		wantFailure(t, h, tc.name, st, err, abi.StatusBadArgument, `operator "identity": input batch from the host: malformed batch: `+tc.want)
	}
	if len(h.out) != 0 {
		t.Errorf("malformed batches emitted %d records", len(h.out))
	}
	for _, hook := range []string{abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted} {
		if st, err := h.call(h.ctx, h.mod.ExportedFunction(hook), 0, 5); err != nil || st != abi.StatusOK {
			t.Errorf("%s on an operator without checkpoint hooks: status %d, error %v; want OK", hook, st, err)
		}
		st, err := h.call(h.ctx, h.mod.ExportedFunction(hook), 3, 5)
		wantFailure(t, h, hook+" on a closed slot", st, err, abi.StatusBadHandle, "operator slot 3 is not open")
	}
	h.mustClose(0)
	st, err = h.call(h.ctx, h.closeFn, 0)
	wantFailure(t, h, "closing slot 0 twice", st, err, abi.StatusBadHandle, "wstream_close: operator slot 0 is not open")

	// wstream_alloc: a negative size is refused, a larger one moves the
	// arena, and slots reopen after close.
	if res, err := h.alloc.Call(h.ctx, api.EncodeI32(-1)); err != nil || res[0] != 0 {
		t.Errorf("wstream_alloc(-1) = %v, %v; want 0", res, err)
	}
	res, err := h.alloc.Call(h.ctx, 1<<20)
	if err != nil || res[0] == 0 {
		t.Fatalf("wstream_alloc(1 MiB) = %v, %v", res, err)
	}
	h.arenaPtr, h.arenaSize = api.DecodeU32(res[0]), 1<<20
	h.mustOpen(0, "identity", "")
	h.mustProcess(0, rec("k", strings.Repeat("x", 900<<10), 1))
	if out := h.take(); len(out) != 1 || len(out[0].Value) != 900<<10 {
		t.Fatalf("a 900 KiB record through a 1 MiB arena: %d records", len(out))
	}
}

// BenchmarkUpper measures one wstream_process call over a 1000-record batch
// of the upper operator, emit_batch included, and reports the cost per
// record: with the checks wazero compiles in for WithCloseOnContextDone (what
// a host enforcing call deadlines pays) and without them. It is the
// benchmark of examples/wasm/go, on the C module.
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
	// Warm up: the output buffer grows to its working size on the first call.
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
