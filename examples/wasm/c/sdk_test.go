package cexamples_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests below drive examples/wasm/c/testops, whose operators use every
// part of the C SDK.

// TestIdentityFlush checks the SDK's output buffer: flushed early past
// 64 KiB, once per call for small records, not at all for an empty batch.
func TestIdentityFlush(t *testing.T) {
	wasmtest.CheckIdentityBatches(t, newHost(t, "testops"), 500)
}

func TestFail(t *testing.T) {
	h := newHost(t, "testops")
	h.MustOpen(0, "fail", `{"on":"bad"}`)
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "good", 1), wasmtest.Rec("key\n\"x\"", "bad", 2)})
	wasmtest.WantFailure(t, h, "process", st, err, abi.StatusGuestError,
		`operator "fail": process: record 1 of 2 (key "key\n\"x\""): testops fail on record value "bad"`)
	if len(h.Out) != 0 {
		t.Errorf("a failed call emitted %d records", len(h.Out))
	}
	// The instance goes on after a failed call.
	h.MustProcess(0, wasmtest.Rec("k", "fine", 3))
	wasmtest.WantRecords(t, "fail", h.Take(), "0 k=fine@3")

	st, err = h.OpenOp(1, "fail", `{}`)
	wasmtest.WantFailure(t, h, "open fail without on", st, err, abi.StatusGuestError, `operator "fail": open: config "on" is required`)
}

func TestRouteAndHooks(t *testing.T) {
	h := lang.CheckRoute(t)

	hook := func(export string, id int64) (int32, error) {
		return h.Call(h.Ctx, h.Module.ExportedFunction(export), 0, uint64(id))
	}
	st, err := hook(abi.ExportPreBarrier, 7)
	h.MustOK("pre_barrier", st, err)
	wasmtest.WantRecords(t, "pre_barrier", h.Take(), "0 barrier=7@7")
	st, err = hook(abi.ExportCkptComplete, 7)
	h.MustOK("checkpoint_complete", st, err)
	st, err = hook(abi.ExportCkptAborted, 8)
	h.MustOK("checkpoint_aborted", st, err)
	if want := []wasmtest.LogLine{{Level: abi.LogInfo, Msg: "checkpoint 7 complete"}, {Level: abi.LogWarn, Msg: "checkpoint 8 aborted"}}; !slices.Equal(h.Logs, want) {
		t.Errorf("logs %v, want %v", h.Logs, want)
	}
	st, err = hook(abi.ExportCkptAborted, -3)
	wasmtest.WantFailure(t, h, "checkpoint_aborted", st, err, abi.StatusGuestError, `operator "route": checkpoint_aborted: checkpoint -3: negative checkpoint id -3`)
}

func TestBadOutput(t *testing.T) { lang.CheckBadOutput(t) }

// mapops opens the operator "mapops" of module name (see lang) and returns
// its host and a function that processes one batch of commands, records of
// key with timestamps 0, 1, …, and returns what they emitted.
func mapops(t *testing.T, name string) (*wasmtest.Host, func(key string, cmds ...string) []abi.Record) {
	h := newHost(t, name)
	h.MustOpen(0, "mapops", "")
	return h, func(key string, cmds ...string) []abi.Record {
		t.Helper()
		var recs []abi.Record
		for i, c := range cmds {
			recs = append(recs, wasmtest.Rec(key, c, int64(i)))
		}
		h.MustProcess(0, recs...)
		return h.Take()
	}
}

func TestMapState(t *testing.T) {
	h, cmd := mapops(t, "testops")
	wasmtest.WantRecords(t, "put/get", cmd("k1", "put b 2", "put a 1", "put ab 12", "get a", "get zz", "del b", "get b"),
		"0 a=1@3", "0 zz=<absent>@4", "0 b=<absent>@6")
	// Another key has its own map.
	wasmtest.WantRecords(t, "other key", cmd("k2", "put a other", "get a"), "0 a=other@1")
	wasmtest.WantRecords(t, "list", cmd("k1", "list"), "0 a=1@0", "0 ab=12@0")
	wasmtest.WantRecords(t, "list prefix", cmd("k1", "list ab"), "0 ab=12@0")
	wasmtest.WantRecords(t, "list none", cmd("k1", "list q"))

	// Many entries page through state_iter, in map-key order.
	var puts, want []string
	for i := range 300 {
		k := fmt.Sprintf("p%03d", i)
		puts = append(puts, fmt.Sprintf("put %s %s", k, strings.Repeat("v", 40)))
		want = append(want, fmt.Sprintf("0 %s=%s@0", k, strings.Repeat("v", 40)))
	}
	cmd("k3", puts...)
	h.IterCalls = 0
	wasmtest.WantRecords(t, "list 300", cmd("k3", "list p"), want...)
	if h.IterCalls < 3 {
		t.Errorf("300 entries of 52 bytes took %d state_iter calls; want several 4 KiB pages", h.IterCalls)
	}
	wasmtest.WantRecords(t, "first 3", cmd("k3", "first p 3"), want[:3]...)

	// An entry larger than the page: the SDK grows the page on LIMIT.
	cmd("k4", "put a small", "big b 100000", "put c small")
	h.MustProcess(0, wasmtest.Rec("k4", "list", 0))
	out := h.Take()
	if len(out) != 3 || string(out[0].Key) != "a" || len(out[1].Value) != 100000 || strings.Trim(string(out[1].Value), "x") != "" || string(out[2].Key) != "c" {
		t.Fatalf("list with a 100000-byte entry: %d records", len(out))
	}
	// A value larger than the read buffer: get grows it.
	h.MustProcess(0, wasmtest.Rec("k4", "get b", 0))
	if out := h.Take(); len(out) != 1 || len(out[0].Value) != 100000 {
		t.Fatalf("get of a 100000-byte value: %d records", len(out))
	}

	// Nested ranges: for each entry, the entries sharing its first byte.
	wasmtest.WantRecords(t, "nest", cmd("k5", "put a1 x", "put a2 x", "put b1 x", "nest"), "0 a1=2@3", "0 a2=2@3", "0 b1=1@3")

	// Namespaced int64 value state: 8 bytes little-endian.
	wasmtest.WantRecords(t, "add", cmd("k6", "add w1 5", "add w2 -7", "add w1 10"), "0 w1=5@0", "0 w2=-7@1", "0 w1=15@2")
	if v := h.State[wasmtest.StateKey{Handle: h.States["v"], Key: "k6", NS: "w1"}]; string(v) != "\x0f\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("value state v of k6 under w1 = %q, want 15 as 8 bytes little-endian", v)
	}
	cmd("k6", "vdel w1")
	if _, ok := h.State[wasmtest.StateKey{Handle: h.States["v"], Key: "k6", NS: "w1"}]; ok {
		t.Errorf("vdel left the value")
	}
	wasmtest.WantRecords(t, "add after delete", cmd("k6", "add w1 1"), "0 w1=1@0")

	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k7", "vraw w abc", 0), wasmtest.Rec("k7", "add w 1", 1)})
	wasmtest.WantFailure(t, h, "add on a 3-byte value", st, err, abi.StatusGuestError,
		`operator "mapops": process: record 1 of 2 (key "k7"): value state "v" holds 3 bytes, not an 8-byte int64: bad argument`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k7", "unknown", 0)})
	wasmtest.WantFailure(t, h, "unregistered state", st, err, abi.StatusGuestError,
		`value state "other" was not registered: call ws_value_state_get(ctx, "other", ...) in open`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k7", "frobnicate", 0)})
	wasmtest.WantFailure(t, h, "unknown command", st, err, abi.StatusGuestError, `(key "k7"): unknown command "frobnicate"`)
	h.MustClose(0)

	// The host refuses a name of another kind: the SDK names the state.
	h.States["m"] = 0
	h.Kinds = []int32{abi.StateValue}
	st, err = h.OpenOp(1, "mapops", "")
	wasmtest.WantFailure(t, h, "open with a clashing kind", st, err, abi.StatusGuestError, `operator "mapops": open: registering map state "m": bad argument`)
}

// TestValueAdd checks ws_value_add_int64: the sum of the value (0 when
// there is none) and the delta is stored and returned, with whether there
// was a value, and mixes with gets, puts and deletes of the same entry in
// one callback. With the state cache on, a batch's records of one key
// share a cache entry; with it off, every call goes to the host.
func TestValueAdd(t *testing.T) {
	for _, name := range []string{"testops", "testops-unbatched"} {
		t.Run(name, func(t *testing.T) {
			h, cmd := mapops(t, name)
			wasmtest.WantRecords(t, "one batch",
				cmd("k8", "inc a 5", "inc a 10", "inc b -3", "add a 1", "inc a 1", "vdel a", "inc a 2", "inc - 7", "inc - 1"),
				"0 a=5 new@0", "0 a=15@1", "0 b=-3 new@2", "0 a=16@3", "0 a=17@4", "0 a=2 new@6", "0 -=7 new@7", "0 -=8@8")
			for ns, want := range map[string]int64{"a": 2, "b": -3, "": 8} {
				v := h.State[wasmtest.StateKey{Handle: h.States["v"], Key: "k8", NS: ns}]
				if len(v) != 8 || int64(binary.LittleEndian.Uint64(v)) != want {
					t.Errorf("value state v of k8 under %q = %q, want %d as 8 bytes little-endian", ns, v, want)
				}
			}
			// The next batch reads what the last one wrote back; another
			// key has its own values.
			wasmtest.WantRecords(t, "next batch", cmd("k8", "inc a 1", "inc - -8"), "0 a=3@0", "0 -=0@1")
			wasmtest.WantRecords(t, "other key", cmd("k9", "inc a 1"), "0 a=1 new@0")

			cmd("k7", "vraw w abc")
			st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k7", "inc w 1", 0)})
			wasmtest.WantFailure(t, h, "inc on a 3-byte value", st, err, abi.StatusGuestError,
				`operator "mapops": process: record 0 of 1 (key "k7"): value state "v" holds 3 bytes, not an 8-byte int64: bad argument`)
			if v := h.State[wasmtest.StateKey{Handle: h.States["v"], Key: "k7", NS: "w"}]; string(v) != "abc" {
				t.Errorf("a failed inc left %q, want the 3 bytes stored before", v)
			}
		})
	}
}

func TestTimers(t *testing.T) {
	h := newHost(t, "testops")
	h.MustOpen(0, "timers", "")
	h.Watermark = 42
	h.MustProcess(0,
		wasmtest.Rec("a", "ev 100 w1", 1),
		wasmtest.Rec("a", "ev 100 w1", 2), // the same timer twice is one timer
		wasmtest.Rec("b", "ev 50", 3),
		wasmtest.Rec("a", "ev 200 w2", 4),
		wasmtest.Rec("a", "del 200 w2", 5),
		wasmtest.Rec("c", "pt 1700000000000 p", 6),
		wasmtest.Rec("k", "now", 7),
	)
	wasmtest.WantRecords(t, "now", h.Take(), "0 k=42,1700000000000@7")
	if len(h.Timers) != 3 {
		t.Fatalf("%d timers registered, want 3: %v", len(h.Timers), h.Timers)
	}
	h.Advance(0, 150)
	wasmtest.WantRecords(t, "event timers", h.Take(), "0 b=0,@50", "0 a=0,w1@100")
	st, err := h.Fire(0, abi.TimeProcessing, 1_700_000_000_000)
	h.MustOK("processing timers", st, err)
	wasmtest.WantRecords(t, "processing timers", h.Take(), "0 c=1,p@1700000000000")
	if len(h.Timers) != 0 {
		t.Fatalf("timers left: %v", h.Timers)
	}

	h.MustProcess(0, wasmtest.Rec("z", "ev 10 boom", 1))
	h.Watermark = 10
	st, err = h.Fire(0, abi.TimeEvent, 10)
	wasmtest.WantFailure(t, h, "failing timer", st, err, abi.StatusGuestError, `operator "timers": on_timer: event time timer at 10 (key "z"): timer boom`)
	if len(h.Out) != 0 {
		t.Errorf("a failed on_timer emitted %d records", len(h.Out))
	}

	// An operator without on_timer cannot take timers.
	h.MustOpen(1, "identity", "")
	var bb abi.Builder
	bb.Add(0, 5, []byte("k"), nil)
	st, err = h.Call(h.Ctx, h.OnTimerFn, 1, uint64(h.Write(bb.Bytes())), uint64(len(bb.Bytes())))
	wasmtest.WantFailure(t, h, "timers without on_timer", st, err, abi.StatusGuestError, `operator "identity": on_timer: 1 timers fired but the operator has no on_timer callback`)
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
		st, err := h.OpenOp(0, "config", tc.cfg)
		if tc.fail != "" {
			wasmtest.WantFailure(t, h, "open config "+tc.cfg, st, err, abi.StatusGuestError, tc.fail)
			continue
		}
		h.MustOK("open config "+tc.cfg, st, err)
		h.MustClose(0)
		out := h.Take()
		if len(out) != 1 || string(out[0].Key) != tc.cfg || string(out[0].Value) != tc.want {
			t.Errorf("config %s: emitted %v, want %q", tc.cfg, wasmtest.Format(out), tc.want)
		}
	}
}

// TestCallErrors checks the SDK's answers to calls the host gets wrong.
func TestCallErrors(t *testing.T) {
	h := newHost(t, "testops")
	st, err := h.OpenOp(0, "nope", "")
	wasmtest.WantFailure(t, h, "open nope", st, err, abi.StatusUnknownOp,
		`wstream_open: the module has no operator "nope"; it has ["identity" "fail" "route" "badport" "mapops" "timers" "config"]`)
	h.MustOpen(0, "identity", "")
	st, err = h.OpenOp(0, "identity", "")
	wasmtest.WantFailure(t, h, "opening slot 0 twice", st, err, abi.StatusBadHandle, `operator slot 0 is already open (operator "identity")`)
	st, err = h.OpenOp(-1, "identity", "")
	wasmtest.WantFailure(t, h, "opening slot -1", st, err, abi.StatusBadHandle, `operator slot -1 is outside [0, 4096)`)
	st, err = h.ProcessCtx(h.Ctx, 7, []abi.Record{wasmtest.Rec("k", "v", 1)})
	wasmtest.WantFailure(t, h, "process on slot 7", st, err, abi.StatusBadHandle, "wstream_process: operator slot 7 is not open")

	// Regions outside the arena wstream_alloc returned.
	p := h.Write([]byte{0, 0, 0, 0})
	st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(p)-8, 4)
	wasmtest.WantFailure(t, h, "process before the arena", st, err, abi.StatusBadPointer, "lies outside the")
	st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(p), 1<<30)
	wasmtest.WantFailure(t, h, "process past the arena", st, err, abi.StatusBadPointer, "lies outside the")

	// Malformed batches.
	for _, tc := range []struct {
		name  string
		batch []byte
		want  string
	}{
		{"short", []byte{1, 0}, "2 bytes is shorter than the 4-byte header"},
		{"count without record", []byte{1, 0, 0, 0}, "record 0 at offset 4: header truncated"},
		{"overrun", append(abi.Encode([]abi.Record{wasmtest.Rec("k", "v", 1)})[:24], 0), "record 0 at offset 4: key and value overrun"},
		{"trailing", append(abi.Encode([]abi.Record{wasmtest.Rec("k", "v", 1)}), 9), "1 trailing bytes after 1 records"},
	} {
		st, err := h.Call(h.Ctx, h.ProcessFn, 0, uint64(h.Write(tc.batch)), uint64(len(tc.batch)))
		wasmtest.WantFailure(t, h, tc.name, st, err, abi.StatusBadArgument, `operator "identity": input batch from the host: malformed batch: `+tc.want)
	}
	if len(h.Out) != 0 {
		t.Errorf("malformed batches emitted %d records", len(h.Out))
	}
	for _, hook := range []string{abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted} {
		if st, err := h.Call(h.Ctx, h.Module.ExportedFunction(hook), 0, 5); err != nil || st != abi.StatusOK {
			t.Errorf("%s on an operator without checkpoint hooks: status %d, error %v; want OK", hook, st, err)
		}
		st, err := h.Call(h.Ctx, h.Module.ExportedFunction(hook), 3, 5)
		wasmtest.WantFailure(t, h, hook+" on a closed slot", st, err, abi.StatusBadHandle, "operator slot 3 is not open")
	}
	h.MustClose(0)
	st, err = h.Call(h.Ctx, h.CloseFn, 0)
	wasmtest.WantFailure(t, h, "closing slot 0 twice", st, err, abi.StatusBadHandle, "wstream_close: operator slot 0 is not open")

	// wstream_alloc: a negative size is refused, a larger one moves the
	// arena, and slots reopen after close.
	if res, err := h.AllocFn.Call(h.Ctx, api.EncodeI32(-1)); err != nil || res[0] != 0 {
		t.Errorf("wstream_alloc(-1) = %v, %v; want 0", res, err)
	}
	res, err := h.AllocFn.Call(h.Ctx, 1<<20)
	if err != nil || res[0] == 0 {
		t.Fatalf("wstream_alloc(1 MiB) = %v, %v", res, err)
	}
	h.ArenaPtr, h.ArenaSize = api.DecodeU32(res[0]), 1<<20
	h.MustOpen(0, "identity", "")
	h.MustProcess(0, wasmtest.Rec("k", strings.Repeat("x", 900<<10), 1))
	if out := h.Take(); len(out) != 1 || len(out[0].Value) != 900<<10 {
		t.Fatalf("a 900 KiB record through a 1 MiB arena: %d records", len(out))
	}
}

// BenchmarkUpper measures one wstream_process call over a 1000-record batch
// of the upper operator, emit_batch included, and reports the cost per
// record: with the checks wazero compiles in for WithCloseOnContextDone (what
// a host enforcing call deadlines pays) and without them. It is the
// benchmark of examples/wasm/go, on the C module.
func BenchmarkUpper(b *testing.B) {
	b.Run("deadline-checks", func(b *testing.B) { wasmtest.BenchUpper(b, newHost(b, "mapfilter")) })
	b.Run("no-deadline-checks", func(b *testing.B) {
		wasmtest.BenchUpper(b, newHost(b, "mapfilter", wasmtest.WithoutDeadlineChecks()))
	})
}
