package rustexamples_test

import (
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests below drive examples/wasm/rust/testops, whose operators use the
// parts of the Rust SDK the examples and the conformance module leave out.

// TestIdentityFlush checks the SDK's output buffer: flushed early past
// 64 KiB, once per call for small records, not at all for an empty batch.
func TestIdentityFlush(t *testing.T) {
	wasmtest.CheckIdentityBatches(t, newHost(t, "testops"), 500)
}

// TestNoGrowth checks that the SDK allocates nothing that lasts per record:
// after a warm-up, processing the same batches again does not grow memory.
func TestNoGrowth(t *testing.T) {
	h := newHost(t, "wordcount")
	h.Discard = true
	h.MustOpen(0, "split", "")
	h.MustOpen(1, "count", "")
	lines := randomLines(1000)
	words := newHost(t, "wordcount")
	words.MustOpen(0, "split", "")
	words.MustProcess(0, lines...)
	counted := words.Take()
	for range 5 {
		h.MustProcess(0, lines...)
		h.MustProcess(1, counted...)
	}
	pages, _ := h.Module.Memory().Grow(0)
	for range 50 {
		h.MustProcess(0, lines...)
		h.MustProcess(1, counted...)
	}
	if after, _ := h.Module.Memory().Grow(0); after != pages {
		t.Errorf("guest memory grew from %d to %d pages over 50 repeats of the same batches", pages, after)
	}
}

func TestRoute(t *testing.T) { lang.CheckRoute(t) }

func TestBadOutput(t *testing.T) { lang.CheckBadOutput(t) }

func TestConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want, fail string }{
		{``, "n=- s=- b=-", ""},
		{`{}`, "n=- s=- b=-", ""},
		{`{"n":-9223372036854775808,"s":"a\tb\u00e9\ud83d\ude00","b":true}`, "n=-9223372036854775808 s=a\tbé😀 b=true", ""},
		{`{"n":1,"n":2,"s":null,"b":false,"x":{"y":[1,2.5e3,"z",null]}}`, "n=2 s=- b=false", ""},
		{` { "n" : 0 } `, "n=0 s=- b=-", ""},
		{`{"s":"\ud800"}`, "n=- s=\ufffd b=-", ""},
		{`{"n":9223372036854775808}`, "", `config member "n": 9223372036854775808 is not an integer that fits in 64 bits`},
		{`{"n":1.5}`, "", `config member "n": 1.5 is not an integer`},
		{`{"n":1e3}`, "", `config member "n": 1e3 is not an integer`},
		{`{"n":"1"}`, "", `config member "n" is a string, not an integer`},
		{`{"b":1}`, "", `config member "b" is a number, not a boolean`},
		{`{"s":["x"]}`, "", `config member "s" is an array, not a string`},
		{`[1]`, "", `config "[1]": not a JSON object: it is an array`},
		{`{"n":01}`, "", `not a JSON object`},
		{`{"s":"a` + "\n" + `"}`, "", `not a JSON object`},
		{`{"n":1,}`, "", `not a JSON object`},
		{`{"n":1} x`, "", `not a JSON object`},
		{strings.Repeat("[", 200), "", `not a JSON object`},
	} {
		h := newHost(t, "testops")
		st, err := h.OpenOp(0, "config", tc.cfg)
		if tc.fail != "" {
			if len(h.Failures) == 1 && !strings.HasPrefix(h.Failures[0], `operator "config": open: config `) {
				t.Errorf("config %s: failure %q does not name the operator, the phase and the config", tc.cfg, h.Failures[0])
			}
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

func TestStates(t *testing.T) {
	h := newHost(t, "testops")
	h.MustOpen(0, "states", "")
	if len(h.Kinds) != 1 || h.Kinds[0] != abi.StateValue {
		t.Fatalf("registered kinds %v, want one value state (the same name twice is one state)", h.Kinds)
	}
	// A state registered in open is found by name later.
	h.MustProcess(0, wasmtest.Rec("k", "lookup v", 1), wasmtest.Rec("k", "lookup v", 2), wasmtest.Rec("j", "lookup v", 3))
	wasmtest.WantRecords(t, "lookup v", h.Take(), "0 k=1@1", "0 k=2@2", "0 j=1@3")
	// Get grows its buffer past the first read size.
	big := strings.Repeat("0123456789", 30000)
	h.MustProcess(0, wasmtest.Rec("k", big, 4), wasmtest.Rec("k", "small", 5))
	if out := h.Take(); len(out) != 2 || string(out[0].Value) != big || string(out[1].Value) != "small" {
		t.Fatalf("put and get of a 300000-byte value, then a small one: %d records", len(out))
	}

	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "lookup other", 1)})
	wasmtest.WantFailure(t, h, "unregistered state", st, err, abi.StatusGuestError,
		`operator "states": process: record 0 of 1 (key "k"): value state "other" was not registered: call ctx.value_state("other") in the operator's constructor`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "clash", 1)})
	wasmtest.WantFailure(t, h, "a state of the other kind", st, err, abi.StatusGuestError, `state "v" is a value state, not a map state`)

	// Status codes from the host reach the message, naming the state.
	h.State[wasmtest.StateKey{Handle: h.States["v"], Key: "j2"}] = []byte("abc")
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("j2", "lookup v", 1)})
	wasmtest.WantFailure(t, h, "a 3-byte int64", st, err, abi.StatusGuestError, `value state "v" holds 3 bytes, not an 8-byte int64: bad argument`)

	// The host refuses a name of another kind: the SDK names the state.
	h2 := newHost(t, "testops")
	h2.States["v"] = 0
	h2.Kinds = []int32{abi.StateMap}
	st, err = h2.OpenOp(0, "states", "")
	wasmtest.WantFailure(t, h2, "open with a clashing kind", st, err, abi.StatusGuestError, `operator "states": open: registering value state "v": bad argument`)
}

func TestTimers(t *testing.T) {
	h := newHost(t, "testops")
	h.MustOpen(0, "notimer", "")
	h.MustProcess(0, wasmtest.Rec("z", "", 10))
	if !h.Timers[wasmtest.TimerKey{Domain: abi.TimeEvent, Key: "z", TS: 10}] {
		t.Fatalf("timers %v, want an event timer of z at 10", h.Timers)
	}
	h.Watermark = 10
	st, err := h.Fire(0, abi.TimeEvent, 10)
	wasmtest.WantFailure(t, h, "timers without on_timer", st, err, abi.StatusGuestError,
		`operator "notimer": on_timer: event time timer at 10 (key "z"): the operator does not implement on_timer`)

	// A timer batch with a domain other than event or processing time.
	var bb abi.Builder
	bb.Add(7, 5, []byte("k"), nil)
	st, err = h.Call(h.Ctx, h.OnTimerFn, 0, uint64(h.Write(bb.Bytes())), uint64(len(bb.Bytes())))
	wasmtest.WantFailure(t, h, "a timer of domain 7", st, err, abi.StatusBadArgument, `operator "notimer": timer batch from the host: malformed batch: record 0 at offset 4: time domain 7`)
}

// TestPanic checks that a panic fails the call with its message through
// the host's fail, naming the operator and the record, then traps.
func TestPanic(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"panic", `operator "panic": process: record 1 of 2 (key "k"): panic: testops panic on record value "panic" (at examples/wasm/rust/testops/main.rs:`},
		{"unwrap", `operator "panic": process: record 1 of 2 (key "k"): panic: called ` + "`Option::unwrap()`" + ` on a ` + "`None`" + ` value (at examples/wasm/rust/testops/main.rs:`},
	} {
		h := newHost(t, "testops")
		h.MustOpen(0, "panic", "")
		h.MustProcess(0, wasmtest.Rec("k", "fine", 1))
		wasmtest.WantRecords(t, "no panic", h.Take(), "0 k=fine@1")
		_, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "fine", 1), wasmtest.Rec("k", tc.value, 2)})
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("%s: error %v, want a trap (unreachable)", tc.value, err)
		}
		if len(h.Failures) != 1 || !strings.HasPrefix(h.Failures[0], tc.want) {
			t.Errorf("%s: failures %q, want one starting with %q", tc.value, h.Failures, tc.want)
		}
		if len(h.Out) != 0 {
			t.Errorf("%s: a call that panicked emitted %d records", tc.value, len(h.Out))
		}
	}
}

// TestCallErrors checks the SDK's answers to calls the host gets wrong.
func TestCallErrors(t *testing.T) {
	h := newHost(t, "testops")
	st, err := h.OpenOp(0, "nope", "")
	wasmtest.WantFailure(t, h, "open nope", st, err, abi.StatusUnknownOp,
		`wstream_open: the module has no operator "nope"; it has ["identity" "route" "badport" "config" "states" "notimer" "panic"]`)
	h.MustOpen(0, "identity", "")
	st, err = h.OpenOp(0, "identity", "")
	wasmtest.WantFailure(t, h, "opening slot 0 twice", st, err, abi.StatusBadHandle, `operator slot 0 is already open (operator "identity")`)
	st, err = h.OpenOp(-1, "identity", "")
	wasmtest.WantFailure(t, h, "opening slot -1", st, err, abi.StatusBadHandle, `operator slot -1 is outside [0, 4096)`)
	st, err = h.ProcessCtx(h.Ctx, 7, []abi.Record{wasmtest.Rec("k", "v", 1)})
	wasmtest.WantFailure(t, h, "process on slot 7", st, err, abi.StatusBadHandle, "wstream_process: operator slot 7 is not open")
	st, err = h.ProcessCtx(h.Ctx, -2, []abi.Record{wasmtest.Rec("k", "v", 1)})
	wasmtest.WantFailure(t, h, "process on slot -2", st, err, abi.StatusBadHandle, "wstream_process: operator slot -2 is not open")

	// Regions outside the arena wstream_alloc returned.
	p := h.Write([]byte{0, 0, 0, 0})
	st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(p)-8, 4)
	wasmtest.WantFailure(t, h, "process before the arena", st, err, abi.StatusBadPointer, "lies outside the")
	st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(p), 1<<30)
	wasmtest.WantFailure(t, h, "process past the arena", st, err, abi.StatusBadPointer, "lies outside the")
	st, err = h.Call(h.Ctx, h.ProcessFn, 0, uint64(p), api.EncodeI32(-4))
	wasmtest.WantFailure(t, h, "process with a negative length", st, err, abi.StatusBadPointer, "lies outside the")

	// Malformed batches.
	for _, tc := range []struct {
		name  string
		batch []byte
		want  string
	}{
		{"short", []byte{1, 0}, "2 bytes is shorter than the 4-byte header"},
		{"count without record", []byte{1, 0, 0, 0}, "record 0 at offset 4: header truncated"},
		{"overrun", append(abi.Encode([]abi.Record{wasmtest.Rec("k", "v", 1)})[:24], 0), "record 0 at offset 4: key and value overrun"},
		{"huge lengths", append(abi.Encode([]abi.Record{wasmtest.Rec("k", "v", 1)})[:16], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), "record 0 at offset 4: key and value overrun"},
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
	st, err = h.Call(h.Ctx, h.CloseFn, api.EncodeI32(-1))
	wasmtest.WantFailure(t, h, "closing slot -1", st, err, abi.StatusBadHandle, "wstream_close: operator slot -1 is not open")

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
	// More than the memory limit: 0, not a trap.
	h2 := newHost(t, "testops", wasmtest.WithMemoryLimitMiB(4))
	if res, err := h2.AllocFn.Call(h2.Ctx, 8<<20); err != nil || res[0] != 0 {
		t.Errorf("wstream_alloc(8 MiB) under a 4 MiB limit = %v, %v; want 0", res, err)
	}
}
