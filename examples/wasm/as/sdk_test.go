package asexamples_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests below drive examples/wasm/as/conformance, whose operator
// "conform" (tests/conformance/SPEC.md) uses every part of the SDK, and
// compare it with its Go twin.

// conform opens the conformance operator in slot 0 of a new host.
func conform(t *testing.T, module, cfg string) *wasmtest.Host {
	t.Helper()
	h := newHost(t, module, wasmtest.WithOutputs("out", "side"))
	h.MustOpen(0, "conform", cfg)
	return h
}

// run processes one batch of commands for key and returns what it emitted.
func run(t *testing.T, h *wasmtest.Host, key string, cmds ...string) []abi.Record {
	t.Helper()
	var recs []abi.Record
	for i, c := range cmds {
		recs = append(recs, wasmtest.Rec(key, c, int64(i)))
	}
	h.MustProcess(0, recs...)
	return h.Take()
}

func TestValueState(t *testing.T) {
	h := conform(t, "conformance", "")
	wasmtest.WantRecords(t, "value state", run(t, h, "k1", "get a", "put a hello", "get a", "put b x", "del a", "get a", "del a", "get b"),
		"0 k1=missing@0", "0 k1=ok@1", "0 k1==hello@2", "0 k1=ok@3", "0 k1=ok@4", "0 k1=missing@5", "0 k1=ok@6", "0 k1==x@7")
	// Another key has its own state.
	wasmtest.WantRecords(t, "other key", run(t, h, "k2", "get b", "put a ", "get a"), "0 k2=missing@0", "0 k2=ok@1", "0 k2==@2")
	wasmtest.WantRecords(t, "counter", run(t, h, "k1", "inc n", "inc n", "inc n"), "0 k1==1@0", "0 k1==2@1", "0 k1==3@2")
	if v := h.State[wasmtest.StateKey{Handle: h.States["n"], Key: "k1"}]; string(v) != "\x03\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("state n of k1 = %q, want 3 as 8 bytes little-endian", v)
	}
	// A counter written by another language reads back.
	h.State[wasmtest.StateKey{Handle: h.States["n"], Key: "k3"}] = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}
	wasmtest.WantRecords(t, "counter at max", run(t, h, "k3", "inc n"), "0 k3==-9223372036854775808@0")

	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k4", "put a 123", 0), wasmtest.Rec("k4", "inc a", 1)})
	wasmtest.WantFailure(t, h, "inc on a 3-byte value", st, err, abi.StatusGuestError,
		`operator "conform": process: record 1 of 2 (key "k4"): value state "a" holds 3 bytes, not an 8-byte int64: bad argument`)
	if len(h.Out) != 0 {
		t.Errorf("a failed call emitted %d records", len(h.Out))
	}

	// Values larger than the SDK's read buffer: it grows on a too-small
	// state_get and reads again.
	wasmtest.WantRecords(t, "big", run(t, h, "k5", "big big 200000", "big a 300", "big big 5"),
		"0 k5=ok 200000@0", "0 k5=ok 300@1", "0 k5=ok 5@2")
	if v := h.State[wasmtest.StateKey{Handle: h.States["a"], Key: "k5"}]; len(v) != 300 || v[27] != 'b' {
		t.Errorf("big a 300 stored %d bytes", len(v))
	}
	wasmtest.WantRecords(t, "get big", run(t, h, "k5", "big big 1000000"), "0 k5=ok 1000000@0")
	h.MustProcess(0, wasmtest.Rec("k5", "get big", 9))
	if out := h.Take(); len(out) != 1 || len(out[0].Value) != 1000001 || string(out[0].Value[:4]) != "=abc" {
		t.Fatalf("get of a 1000000-byte value: %d records", len(out))
	}
}

func TestMapState(t *testing.T) {
	h := conform(t, "conformance", "")
	wasmtest.WantRecords(t, "map", run(t, h, "k1", "mput m b 2", "mput m a 1", "mput m ab 12", "mget m a", "mget m zz", "mdel m b", "mget m b", "mscan m -", "mscan m a", "mscan m q"),
		"0 k1=ok@0", "0 k1=ok@1", "0 k1=ok@2", "0 k1==1@3", "0 k1=missing@4", "0 k1=ok@5", "0 k1=missing@6",
		"0 k1=n=2 first=a last=ab@7", "0 k1=n=2 first=a last=ab@8", "0 k1=n=0@9")
	wasmtest.WantRecords(t, "other key", run(t, h, "k2", "mscan m -", "mscan p -"), "0 k2=n=0@0", "0 k2=n=0@1")

	// Many entries page through state_iter, in map-key order.
	wasmtest.WantRecords(t, "fill", run(t, h, "k3", "mfill p 3000"), "0 k3=ok@0")
	if v := h.State[wasmtest.StateKey{Handle: h.States["p"], Key: "k3", NS: "k0042"}]; string(v) != "v42" {
		t.Errorf("entry k0042 = %q, want v42", v)
	}
	h.IterCalls = 0
	wasmtest.WantRecords(t, "scan", run(t, h, "k3", "mscan p -", "mscan p k1", "mscan p k29", "mscan p k3"),
		"0 k3=n=3000 first=k0000 last=k2999@0", "0 k3=n=1000 first=k1000 last=k1999@1", "0 k3=n=100 first=k2900 last=k2999@2", "0 k3=n=0@3")
	if h.IterCalls < 10 {
		t.Errorf("scanning 3000+1000+100 entries took %d state_iter calls; want many 4 KiB pages", h.IterCalls)
	}

	// An entry larger than the page: the iterator grows its page on LIMIT.
	h.State[wasmtest.StateKey{Handle: h.States["m"], Key: "k4", NS: "a"}] = []byte("1")
	h.State[wasmtest.StateKey{Handle: h.States["m"], Key: "k4", NS: "b"}] = []byte(strings.Repeat("x", 100000))
	h.State[wasmtest.StateKey{Handle: h.States["m"], Key: "k4", NS: "c"}] = []byte("3")
	wasmtest.WantRecords(t, "scan a large entry", run(t, h, "k4", "mscan m -"), "0 k4=n=3 first=a last=c@0")
	// An empty map key is a key, and sorts first.
	h.State[wasmtest.StateKey{Handle: h.States["m"], Key: "k4", NS: ""}] = []byte("0")
	wasmtest.WantRecords(t, "scan with an empty key", run(t, h, "k4", "mscan m -"), "0 k4=n=4 first= last=c@0")

	// Map and value names are not interchangeable.
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k5", "mput a x y", 0)})
	wasmtest.WantFailure(t, h, "value state as a map", st, err, abi.StatusGuestError, `unknown state "a": not a map state of this operator`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k5", "get m", 0)})
	wasmtest.WantFailure(t, h, "map state as a value", st, err, abi.StatusGuestError, `unknown state "m": not a value state of this operator`)
}

func TestOutputsAndBatching(t *testing.T) {
	h := conform(t, "conformance", "")
	wasmtest.WantRecords(t, "emit", run(t, h, "k", "emit side v1", "emit out v2", "emit nope v3"),
		"1 k=v1@0", "0 k=ok@0", "0 k=v2@1", "0 k=ok@1", "0 k=bad output nope@2")

	h.Batches = 0
	out := run(t, h, "k", "batch 5000")
	if len(out) != 5001 {
		t.Fatalf("batch 5000 emitted %d records, want 5001", len(out))
	}
	for i, r := range out[:5000] {
		if string(r.Value) != "r"+strconv.Itoa(i) || string(r.Key) != "k" {
			t.Fatalf("record %d: %s=%s", i, r.Key, r.Value)
		}
	}
	if string(out[5000].Value) != "ok" {
		t.Errorf("last record %q, want the reply ok", out[5000].Value)
	}
	// About 130 KB: flushed past 64 KiB, then at the end.
	if h.Batches < 2 || h.Batches > 4 {
		t.Errorf("5001 records in %d emit_batch calls, want a few (flushes past 64 KiB)", h.Batches)
	}

	// An input batch larger than the arena: the SDK's wstream_alloc grows it.
	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("put a %s", strings.Repeat("v", i%100)))
	}
	if out := run(t, h, strings.Repeat("K", 500), many...); len(out) != 3000 {
		t.Fatalf("a %d-record batch emitted %d replies", len(many), len(out))
	}
	if h.ArenaSize < 1<<20 {
		t.Errorf("arena %d bytes after a large batch", h.ArenaSize)
	}
}

func TestTimers(t *testing.T) {
	h := conform(t, "conformance", "")
	h.Watermark = 42
	wasmtest.WantRecords(t, "register", run(t, h, "a", "timer event 100", "timer event 100", "timer event 200", "untimer event 200", "timer proc 1700000000000", "wm"),
		"0 a=ok@0", "0 a=ok@1", "0 a=ok@2", "0 a=ok@3", "0 a=ok@4", "0 a=wm=42@5")
	wasmtest.WantRecords(t, "register b", run(t, h, "b", "timer event 50", "untimer proc 5"), "0 b=ok@0", "0 b=ok@1")
	if len(h.Timers) != 3 {
		t.Fatalf("%d timers registered, want 3: %v", len(h.Timers), h.Timers)
	}
	if !h.Timers[wasmtest.TimerKey{Domain: abi.TimeEvent, Key: "a", NS: "t", TS: 100}] {
		t.Errorf("no event timer of key a at 100 with namespace t: %v", h.Timers)
	}
	h.Advance(0, 150)
	wasmtest.WantRecords(t, "event timers", h.Take(), "0 b=fired event 50 ns=t@50", "0 a=fired event 100 ns=t@100")
	st, err := h.Fire(0, abi.TimeProcessing, 1_700_000_000_000)
	h.MustOK("processing timers", st, err)
	wasmtest.WantRecords(t, "processing timers", h.Take(), "0 a=fired proc 1700000000000 ns=t@1700000000000")
	if len(h.Timers) != 0 {
		t.Fatalf("timers left: %v", h.Timers)
	}
	h.Watermark = abi.MinWatermark
	wasmtest.WantRecords(t, "wm", run(t, h, "a", "wm", "ptime"), "0 a=wm=-9223372036854775808@0", "0 a=ptime ok@1")
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("a", "timer later 5", 0)})
	wasmtest.WantFailure(t, h, "unknown domain", st, err, abi.StatusGuestError, `unknown time domain "later"`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("a", "timer event -5", 0)})
	wasmtest.WantFailure(t, h, "negative time", st, err, abi.StatusGuestError, `"-5" is not a non-negative decimal integer`)
}

func TestLogConfigHooksClose(t *testing.T) {
	h := conform(t, "conformance", `{"x":[1,"é"]}`)
	wasmtest.WantRecords(t, "log and config", run(t, h, "k", "log hello", "config", "hooks"),
		"0 k=ok@0", `0 k=config={"x":[1,"é"]}@1`, "0 k=pre=-1 complete=-1 aborted=-1@2")
	if want := []wasmtest.LogLine{{Level: abi.LogInfo, Msg: "hello"}}; !slices.Equal(h.Logs, want) {
		t.Errorf("logs %v, want %v", h.Logs, want)
	}

	hook := func(export string, id int64) (int32, error) {
		return h.Call(h.Ctx, h.Module.ExportedFunction(export), 0, uint64(id))
	}
	st, err := hook(abi.ExportPreBarrier, 7)
	h.MustOK("pre_barrier", st, err)
	wasmtest.WantRecords(t, "pre_barrier", h.Take(), "0 =pre 7@0")
	st, err = hook(abi.ExportCkptComplete, 7)
	h.MustOK("checkpoint_complete", st, err)
	st, err = hook(abi.ExportCkptAborted, 8)
	h.MustOK("checkpoint_aborted", st, err)
	wasmtest.WantRecords(t, "hooks", run(t, h, "k", "hooks"), "0 k=pre=7 complete=7 aborted=8@0")

	h.MustClose(0)
	wasmtest.WantRecords(t, "close", h.Take(), "0 =close@0")
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "wm", 0)})
	wasmtest.WantFailure(t, h, "process after close", st, err, abi.StatusBadHandle, "wstream_process: operator slot 0 is not open")
}

func TestErrors(t *testing.T) {
	h := conform(t, "conformance", "")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "batch 3", 1), wasmtest.Rec("key\n\"x\"", "fail boom", 2)})
	wasmtest.WantFailure(t, h, "fail", st, err, abi.StatusGuestError,
		`operator "conform": process: record 1 of 2 (key "key\n\"x\""): conform: fail boom`)
	if len(h.Out) != 0 {
		t.Errorf("a failed call emitted %d records", len(h.Out))
	}
	// The instance goes on after a failed call.
	wasmtest.WantRecords(t, "after a failure", run(t, h, "k", "inc n"), "0 k==1@0")

	for _, tc := range []struct{ cmd, want string }{
		{"frobnicate x", `unknown command "frobnicate x"`},
		{"", `unknown command ""`},
		{"put a", `command "put a": want 3 tokens, got 2`},
		{"get zz", `unknown state "zz"`},
		{"big a x", `"x" is not a non-negative decimal integer`},
		{"mfill m 10001", `mfill: 10001 entries, at most 10000`},
	} {
		st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", tc.cmd, 0)})
		wasmtest.WantFailure(t, h, tc.cmd, st, err, abi.StatusGuestError, tc.want)
	}

	st, err = h.OpenOp(1, "nope", "")
	wasmtest.WantFailure(t, h, "open nope", st, err, abi.StatusUnknownOp, `wstream_open: the module has no operator "nope"; it has ["conform"]`)
	st, err = h.OpenOp(0, "conform", "")
	wasmtest.WantFailure(t, h, "opening slot 0 twice", st, err, abi.StatusBadHandle, `operator slot 0 is already open (operator "conform")`)
	st, err = h.OpenOp(-1, "conform", "")
	wasmtest.WantFailure(t, h, "opening slot -1", st, err, abi.StatusBadHandle, `operator slot -1 is outside [0, 4096)`)

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
		{"trailing", append(abi.Encode([]abi.Record{wasmtest.Rec("k", "wm", 1)}), 9), "1 trailing bytes after 1 records"},
	} {
		p := h.Write(tc.batch)
		st, err := h.Call(h.Ctx, h.ProcessFn, 0, uint64(p), uint64(len(tc.batch)))
		wasmtest.WantFailure(t, h, tc.name, st, err, abi.StatusBadArgument, tc.want)
		if len(h.Out) != 0 {
			t.Errorf("%s: emitted %d records", tc.name, len(h.Out))
		}
	}

	// Emitting to an output the vertex lacks fails the call when the
	// buffered output reaches the host.
	h2 := newHost(t, "conformance") // outputs ["main"] only
	h2.MustOpen(0, "conform", "")
	st, err = h2.ProcessCtx(h2.Ctx, 0, []abi.Record{wasmtest.Rec("k", "emit main x", 0)})
	h2.MustOK("emit main", st, err)
	wasmtest.WantRecords(t, "emit main", h2.Take(), "0 k=x@0", "0 k=ok@0")
	wasmtest.WantRecords(t, "emit side", run(t, h2, "k", "emit side x"), "0 k=bad output side@0")
	// pre_barrier may emit, checkpoint_complete may not: the host refuses it.
	st, err = h2.Call(h2.Ctx, h2.Module.ExportedFunction(abi.ExportCkptComplete), 0, 3)
	h2.MustOK("checkpoint_complete", st, err)
}

// TestAbort checks the path of an AssemblyScript abort (here a typed array
// too large for the runtime): the message reaches the host's log and fail,
// then the module traps.
func TestAbort(t *testing.T) {
	h := conform(t, "conformance", "")
	_, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "big a 1500000000", 0)})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("an abort: error %v, want a trap (unreachable)", err)
	}
	if len(h.Failures) != 1 || !strings.HasPrefix(h.Failures[0], "abort: ") || !strings.Contains(h.Failures[0], "length") {
		t.Fatalf("failures %q, want the abort's message", h.Failures)
	}
	if len(h.Logs) != 1 || h.Logs[0].Level != abi.LogError || h.Logs[0].Msg != h.Failures[0] {
		t.Fatalf("logs %v, want the abort's message at level error", h.Logs)
	}
}

// TestMatchesGoConformance runs one script of commands through the
// AssemblyScript conformance module and its Go twin and requires the same
// records and the same outcome of every call.
func TestMatchesGoConformance(t *testing.T) {
	batches := [][]string{
		{"put a v1", "get a", "get b", "inc n", "inc n", "del a", "get a", "big big 200000", "big b 27"},
		{"mput m x 1", "mput m y 2", "mget m x", "mget m z", "mdel m x", "mscan m -", "mfill p 3000", "mscan p k2", "mscan p -", "mscan p zz"},
		{"emit side hello", "emit nope x", "batch 2000", "timer event 10", "timer event 5", "untimer event 10", "timer proc 99", "wm", "ptime", "log msg", "config", "hooks"},
		{"put a  two", "get a", "put a x+y", "get a"},
		{"fail boom"},
		{"inc a"},
		{"nonsense"},
		{"timer event 007", "timer event +8", "big a -0"},
		{"big a"},
	}
	type result struct {
		out    []string
		status int32
		err    bool
	}
	exec := func(module string) []result {
		h := conform(t, module, `{"k":"v"}`)
		var res []result
		for i, b := range batches {
			var recs []abi.Record
			for j, c := range b {
				recs = append(recs, wasmtest.Rec(fmt.Sprintf("key%d", i%3), c, int64(100*i+j)))
			}
			st, err := h.ProcessCtx(h.Ctx, 0, recs)
			res = append(res, result{wasmtest.Format(h.Take()), st, err != nil})
			h.Failures = nil
		}
		h.Watermark = 9
		st, err := h.Fire(0, abi.TimeEvent, 9)
		res = append(res, result{wasmtest.Format(h.Take()), st, err != nil})
		st, err = h.Fire(0, abi.TimeProcessing, 100)
		res = append(res, result{wasmtest.Format(h.Take()), st, err != nil})
		st, err = h.Call(h.Ctx, h.Module.ExportedFunction(abi.ExportPreBarrier), 0, 12)
		res = append(res, result{wasmtest.Format(h.Take()), st, err != nil})
		st, err = h.Call(h.Ctx, h.CloseFn, 0)
		res = append(res, result{wasmtest.Format(h.Take()), st, err != nil})
		return res
	}
	as, g := exec("conformance"), exec("go/conformance")
	for i := range g {
		if as[i].status != g[i].status || as[i].err != g[i].err || !slices.Equal(as[i].out, g[i].out) {
			t.Fatalf("call %d: AssemblyScript status %d (trap %v)\n%s\nGo status %d (trap %v)\n%s", i,
				as[i].status, as[i].err, strings.Join(as[i].out, "\n"), g[i].status, g[i].err, strings.Join(g[i].out, "\n"))
		}
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want, fail string }{
		{``, "n=12345 s=- b=01", ""},
		{`{}`, "n=12345 s=- b=01", ""},
		{`null`, "n=12345 s=- b=01", ""},
		{`{"n":-9223372036854775808,"s":"a\tb\u00e9\ud83d\ude00","b":true}`, "n=-9223372036854775808 s=a\tbé😀 b=11", ""},
		{`{"n":1,"N":2,"s":null,"b":false,"x":{"y":[1,2.5e3,"z",null]}}`, "n=2 s=- b=00", ""},
		{` { "S" : "\"q\"" , "\u006e" : 9223372036854775807 } `, `n=9223372036854775807 s="q" b=01`, ""},
		{`{"s":"\ud800"}`, "n=12345 s=\ufffd b=01", ""},
		{`{"n":9223372036854775808}`, "", `config member "n": 9223372036854775808 is not an integer that fits in 64 bits`},
		{`{"n":1.5}`, "", `config member "n": 1.5 is not an integer`},
		{`{"n":"1"}`, "", `member "n" is a string, not an integer`},
		{`{"b":1}`, "", `member "b" is a number, not a boolean`},
		{`{"s":["x"]}`, "", `member "s" is an array, not a string`},
		{`{"n":01}`, "", `not valid JSON`},
		{`{"s":"a` + "\n" + `"}`, "", `not valid JSON`},
		{`{"n":1,}`, "", `not valid JSON`},
		{`{"n":1} x`, "", `not valid JSON`},
		{`"n"`, "", `not a JSON object`},
		{strings.Repeat("[", 2000) + strings.Repeat("]", 2000), "", `not valid JSON`},
		{`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"n":3}`, "n=3 s=- b=01", ""},
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

func TestMapIterator(t *testing.T) {
	h := newHost(t, "testops")
	h.MustOpen(0, "iter", "")
	var cmds []string
	for i := range 400 {
		cmds = append(cmds, fmt.Sprintf("put p%03d %s", i, strings.Repeat("v", i%50)))
	}
	run(t, h, "k1", cmds...)
	h.IterCalls = 0
	out := run(t, h, "k1", "list p1", "get p123", "get q")
	if len(out) != 102 || string(out[0].Key) != "p100" || string(out[99].Key) != "p199" || string(out[23].Value) != strings.Repeat("v", 23) {
		t.Fatalf("list p1: %d records, first %q, last %q", len(out), out[0].Key, out[99].Key)
	}
	wasmtest.WantRecords(t, "get", out[100:], "0 p123="+strings.Repeat("v", 23)+"@1", "0 q=<absent>@2")
	if h.IterCalls < 2 {
		t.Errorf("100 entries took %d state_iter calls, want several pages", h.IterCalls)
	}
	wasmtest.WantRecords(t, "sum", run(t, h, "k2", "add a 5", "add b -7", "add c 1000000000000", "sum"), "0 k2=999999999998@3")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k2", "put d xyz", 0), wasmtest.Rec("k2", "sum", 1)})
	wasmtest.WantFailure(t, h, "sum over a 3-byte value", st, err, abi.StatusGuestError,
		`operator "iter": process: record 1 of 2 (key "k2"): map state "m" holds 3 bytes, not an 8-byte int64: bad argument`)
	st, err = h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k2", "frob", 0)})
	wasmtest.WantFailure(t, h, "unknown command", st, err, abi.StatusGuestError, `unknown command frob`)

	// The host refuses a name of another kind: the SDK names the state.
	h.States["m"] = 0
	h.Kinds = []int32{abi.StateValue}
	st, err = h.OpenOp(1, "iter", "")
	wasmtest.WantFailure(t, h, "open with a clashing kind", st, err, abi.StatusGuestError, `operator "iter": open: registering map state "m": bad argument`)
}
