package wasmtest

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

// The checks below run the operator "conform" of tests/conformance/SPEC.md
// in a language's conformance module, each command against the reply the
// SPEC gives, next to the Go reference module (examples/wasm/go/conformance),
// which must answer, keep state and fail alike. The suite in
// tests/conformance runs the same modules through the real host.

// ConformConfig is the config the conform operator is opened with, and
// hands back to the command "config".
const ConformConfig = `{"mode":"conformance","n":1}`

// ConformHost opens conform with ConformConfig in slot 0 of l's module
// (see Lang) with the SPEC's outputs, out and side.
func (l Lang) ConformHost(t testing.TB, module string) *Host {
	t.Helper()
	h := l.New(t, module, WithOutputs("out", "side"))
	h.MustOpen(0, "conform", ConformConfig)
	return h
}

// MustHook calls the checkpoint hook export (wstream_pre_barrier,
// wstream_checkpoint_complete or wstream_checkpoint_aborted) of slot op for
// checkpoint id, failing the test unless it returns OK.
func (h *Host) MustHook(op int32, export string, id int64) {
	h.TB.Helper()
	st, err := h.Call(h.Ctx, h.Module.ExportedFunction(export), uint64(op), api.EncodeI64(id))
	h.MustOK(export, st, err)
}

// conformCmd is one command of the SPEC's script with the reply it must
// give.
type conformCmd struct {
	key, cmd, reply string
	want            []string // the records emitted; nil means just the reply
}

// conformScript is the SPEC's command script, in order: later commands read
// what earlier ones wrote.
func conformScript() []conformCmd {
	big := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 200000/26+1)[:200000]
	return []conformCmd{
		// value state
		{key: "k1", cmd: "get a", reply: "missing"},
		{key: "k1", cmd: "put a x1", reply: "ok"},
		{key: "k1", cmd: "get a", reply: "=x1"},
		{key: "k2", cmd: "get a", reply: "missing"},
		{key: "k1", cmd: "put b ", reply: "ok"}, // an empty value is a value
		{key: "k1", cmd: "get b", reply: "="},
		{key: "k1", cmd: "del a", reply: "ok"},
		{key: "k1", cmd: "del a", reply: "ok"},
		{key: "k1", cmd: "get a", reply: "missing"},
		{key: "k1", cmd: "inc n", reply: "=1"},
		{key: "k1", cmd: "inc n", reply: "=2"},
		{key: "", cmd: "inc n", reply: "=1"},
		{key: "k1", cmd: "put a caf\u00e9\x00\xff", reply: "ok"},
		{key: "k1", cmd: "get a", reply: "=caf\u00e9\x00\xff"},
		// large values: far beyond the SDK's first read buffer
		{key: "k1", cmd: "big big 200000", reply: "ok 200000"},
		{key: "k1", cmd: "get big", reply: "=" + big},
		{key: "k1", cmd: "big big 70000", reply: "ok 70000"},
		{key: "k1", cmd: "big big 64", reply: "ok 64"},
		{key: "k1", cmd: "big big 65", reply: "ok 65"},
		{key: "k1", cmd: "big big +1", reply: "ok 1"},
		{key: "k1", cmd: "big big -0", reply: "ok 0"},
		{key: "k1", cmd: "big a 007", reply: "ok 7"},
		{key: "k1", cmd: "get a", reply: "=abcdefg"},
		// map state
		{key: "k1", cmd: "mget m x", reply: "missing"},
		{key: "k1", cmd: "mput m x 1", reply: "ok"},
		{key: "k1", cmd: "mput m y 2", reply: "ok"},
		{key: "k1", cmd: "mget m x", reply: "=1"},
		{key: "k1", cmd: "mscan m -", reply: "n=2 first=x last=y"},
		{key: "k1", cmd: "mdel m x", reply: "ok"},
		{key: "k1", cmd: "mdel m x", reply: "ok"},
		{key: "k1", cmd: "mget m x", reply: "missing"},
		{key: "k1", cmd: "mscan m x", reply: "n=0"},
		{key: "k1", cmd: "mfill p 3000", reply: "ok"},
		{key: "k1", cmd: "mscan p -", reply: "n=3000 first=k0000 last=k2999"},
		{key: "k1", cmd: "mscan p k12", reply: "n=100 first=k1200 last=k1299"},
		{key: "k1", cmd: "mscan p k3", reply: "n=0"},
		{key: "k1", cmd: "mget p k0042", reply: "=v42"},
		{key: "k1", cmd: "mfill m 0", reply: "ok"},
		// An entry larger than the first page: the SDK grows its page.
		{key: "k1", cmd: "mput m " + strings.Repeat("n", 5000) + " " + strings.Repeat("v", 9000), reply: "ok"},
		{key: "k1", cmd: "mscan m -", reply: "n=2 first=" + strings.Repeat("n", 5000) + " last=y"},
		{key: "k2", cmd: "mscan p -", reply: "n=0"},
		{key: "k2", cmd: "mfill p 10000", reply: "ok"},
		{key: "k2", cmd: "mscan p k99", reply: "n=100 first=k9900 last=k9999"},
		// outputs
		{key: "k", cmd: "emit side hello", want: []string{"1 k=hello@42", "0 k=ok@42"}},
		{key: "k", cmd: "emit out direct", want: []string{"0 k=direct@42", "0 k=ok@42"}},
		{key: "k", cmd: "emit nowhere x", reply: "bad output nowhere"},
		{key: "k", cmd: "emit  x", reply: "bad output "},
		{key: "k", cmd: "emit out\x00 x", reply: "bad output out\x00"},
		{key: "k", cmd: "emit \xff x", reply: "bad output \xff"},
		// batching
		{key: "k", cmd: "batch 0", reply: "ok"},
		{key: "k", cmd: "batch 3", want: []string{"0 k=r0@42", "0 k=r1@42", "0 k=r2@42", "0 k=ok@42"}},
		// timers
		{key: "k1", cmd: "timer event 100", reply: "ok"},
		{key: "k1", cmd: "timer event 200", reply: "ok"},
		{key: "k1", cmd: "timer event 100", reply: "ok"},
		{key: "k1", cmd: "untimer event 200", reply: "ok"},
		{key: "k1", cmd: "untimer event 999", reply: "ok"},
		{key: "k2", cmd: "timer event 50", reply: "ok"},
		{key: "k3", cmd: "timer proc 5000", reply: "ok"},
		{key: "k3", cmd: "timer proc 7000", reply: "ok"},
		{key: "k3", cmd: "untimer proc 7000", reply: "ok"},
		{key: "k3", cmd: "timer event 9223372036854775807", reply: "ok"},
		// a timer that counts in state written by the call that set it
		{key: "k6", cmd: "inc n", reply: "=1"},
		{key: "k6", cmd: "tinc n 60", reply: "ok"},
		// watermark, processing time, log, config, hooks
		{key: "k", cmd: "wm", reply: "wm=-9223372036854775808"},
		{key: "k", cmd: "ptime", reply: "ptime ok"},
		{key: "k", cmd: "log hello-from-the-guest", reply: "ok"},
		{key: "k", cmd: "log " + strings.Repeat("x", 5000), reply: "ok"},
		{key: "k", cmd: "config", reply: "config=" + ConformConfig},
		{key: "k", cmd: "hooks", reply: "pre=-1 complete=-1 aborted=-1"},
	}
}

// conformPair is a language's conformance module and the Go reference
// module, driven alike.
type conformPair struct {
	t    *testing.T
	lang string
	m, g *Host
}

func (c *conformPair) both() []*Host { return []*Host{c.m, c.g} }

// same checks that both modules emitted want, and keep the same state,
// timers and logs.
func (c *conformPair) same(what string, want ...string) {
	c.t.Helper()
	m, g, t := c.m, c.g, c.t
	mo, gob := Format(m.Take()), Format(g.Take())
	if !slices.Equal(mo, want) {
		t.Fatalf("%s: %s emitted\n%.2000s\nwant\n%.2000s", what, c.lang, strings.Join(mo, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(gob, want) {
		t.Fatalf("%s: Go emitted\n%.2000s\nwant\n%.2000s", what, strings.Join(gob, "\n"), strings.Join(want, "\n"))
	}
	ms, mt := StateByName(m)
	gs, gt := StateByName(g)
	if !maps.Equal(ms, gs) || !maps.Equal(mt, gt) {
		t.Fatalf("%s: %s and Go differ in state or timers:\n%s %.2000v %v\nGo %.2000v %v", what, c.lang, c.lang, ms, mt, gs, gt)
	}
	if !slices.Equal(m.Logs, g.Logs) {
		t.Fatalf("%s: %s logged %.200q, Go %.200q", what, c.lang, m.Logs, g.Logs)
	}
}

// CheckConformance runs every command of the SPEC on l's conformance
// module and on the Go one, checks each reply and that both modules emit,
// keep and log the same.
func (l Lang) CheckConformance(t *testing.T) {
	t.Helper()
	c := &conformPair{t: t, lang: l.Name, m: l.ConformHost(t, "conformance"), g: l.ConformHost(t, "go/conformance")}
	c.runScript()
	c.checkRegistered()
	c.checkHostCounters()
	c.checkTimers()
	c.checkHooks()
}

// runScript runs the SPEC's script, each command checked as it goes.
func (c *conformPair) runScript() {
	const ts = 42
	for _, s := range conformScript() {
		for _, h := range c.both() {
			h.MustProcess(0, Rec(s.key, s.cmd, ts))
		}
		want := s.want
		if want == nil {
			want = []string{fmt.Sprintf("0 %s=%s@%d", s.key, s.reply, ts)}
		}
		c.same(fmt.Sprintf("%.60q (key %q)", s.cmd, s.key), want...)
	}
}

// checkRegistered checks the states, kinds, encoding and logs the script
// left behind.
func (c *conformPair) checkRegistered() {
	if got := c.m.States; !maps.Equal(got, map[string]int32{"a": 0, "b": 1, "n": 2, "big": 3, "m": 4, "p": 5}) {
		c.t.Errorf("states registered %v, want a, b, n, big, m, p in that order", got)
	}
	if got := c.m.Kinds; !slices.Equal(got, []int32{abi.StateValue, abi.StateValue, abi.StateValue, abi.StateValue, abi.StateMap, abi.StateMap}) {
		c.t.Errorf("state kinds %v, want four value states and two map states", got)
	}
	if v := c.m.State[StateKey{Handle: c.m.States["n"], Key: "k1"}]; len(v) != 8 || binary.LittleEndian.Uint64(v) != 2 {
		c.t.Errorf("state n of k1 = %q, want 2 as 8 bytes little-endian", v)
	}
	wantLogs := []LogLine{{Level: abi.LogInfo, Msg: "hello-from-the-guest"}, {Level: abi.LogInfo, Msg: strings.Repeat("x", 5000)}}
	if !slices.Equal(c.m.Logs, wantLogs) {
		c.t.Errorf("logs %.200q, want %.200q", c.m.Logs, wantLogs)
	}

}

// checkHostCounters: a counter the host wrote is read by the guest, and
// wraps like Go's.
func (c *conformPair) checkHostCounters() {
	for _, h := range c.both() {
		h.State[StateKey{Handle: h.States["n"], Key: "k4"}] = binary.LittleEndian.AppendUint64(nil, 1<<40)
		h.State[StateKey{Handle: h.States["n"], Key: "k5"}] = binary.LittleEndian.AppendUint64(nil, math.MaxInt64)
		h.MustProcess(0, Rec("k4", "inc n", 1), Rec("k5", "inc n", 2), Rec("k1", "wm", 3))
	}
	c.same("inc of host-written counters", fmt.Sprintf("0 k4==%d@1", 1<<40+1), "0 k5==-9223372036854775808@2", "0 k1=wm=-9223372036854775808@3")

}

// checkTimers: event-time timers fire in order with key and namespace; the
// deleted one does not; processing-time timers fire on the clock.
func (c *conformPair) checkTimers() {
	// Event-time timers fire in order with key and namespace; the deleted
	// one does not.
	for _, h := range c.both() {
		h.Advance(0, 49)
	}
	c.same("watermark 49")
	for _, h := range c.both() {
		h.Advance(0, 150)
		h.MustProcess(0, Rec("k", "wm", 7))
	}
	c.same("watermark 150", "0 k2=fired event 50 ns=t@50", "0 k6=fired event 60 ns=inc:n =2@60", "0 k1=fired event 100 ns=t@100", "0 k=wm=150@7")
	for _, h := range c.both() {
		h.MustProcess(0, Rec("k6", "inc n", 8))
	}
	c.same("inc after the timer's", "0 k6==3@8")
	for _, h := range c.both() {
		st, err := h.Fire(0, abi.TimeProcessing, 8000)
		h.MustOK("processing-time timers", st, err)
	}
	c.same("clock 8000", "0 k3=fired proc 5000 ns=t@5000")
	for _, h := range c.both() {
		h.Advance(0, abi.MaxWatermark)
	}
	c.same("the end of input", "0 k3=fired event 9223372036854775807 ns=t@9223372036854775807")

}

// checkHooks: pre_barrier emits, the others are remembered.
func (c *conformPair) checkHooks() {
	for _, h := range c.both() {
		h.MustHook(0, abi.ExportPreBarrier, 7)
		h.MustHook(0, abi.ExportCkptComplete, 7)
		h.MustHook(0, abi.ExportCkptAborted, 8)
		h.MustProcess(0, Rec("k", "hooks", 9))
		h.MustHook(0, abi.ExportPreBarrier, math.MinInt64)
		h.MustProcess(0, Rec("k", "hooks", 10))
		h.MustClose(0)
	}
	c.same("hooks and close", "0 =pre 7@0", "0 k=pre=7 complete=7 aborted=8@9", "0 =pre -9223372036854775808@0",
		"0 k=pre=-9223372036854775808 complete=7 aborted=8@10", "0 =close@0")
}

// CheckConformanceBatchedState runs many state commands over two keys in
// one call, as the SDKs' per-callback state cache sees them: every read
// sees the writes before it in the call, an iteration sees them, a timer
// set in the call reads them when it fires, and the host holds them when
// the call returns.
func (l Lang) CheckConformanceBatchedState(t *testing.T) {
	t.Helper()
	big := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 20000/26+1)[:20000]
	steps := []struct{ key, cmd, reply string }{
		{"k7", "put a x1", "ok"},
		{"k7", "get a", "=x1"},
		{"k8", "inc n", "=1"},
		{"k7", "inc n", "=1"},
		{"k8", "inc n", "=2"},
		{"k7", "del a", "ok"},
		{"k7", "get a", "missing"},
		{"k7", "put a x2", "ok"},
		{"k8", "get a", "missing"},
		{"k7", "get a", "=x2"},
		{"k7", "mput m q 1", "ok"},
		{"k7", "mput m r 2", "ok"},
		{"k7", "mscan m -", "n=2 first=q last=r"},
		{"k7", "mdel m q", "ok"},
		{"k7", "mscan m -", "n=1 first=r last=r"},
		{"k7", "mget m q", "missing"},
		{"k8", "tinc n 80", "ok"},
		{"k8", "inc n", "=3"},
		{"k7", "big big 20000", "ok 20000"}, // more than the room for values in state_get_many's results
		{"k7", "get big", "=" + big},
		{"k7", "get b", "missing"},
	}
	var in []abi.Record
	var want []string
	for _, s := range steps {
		in = append(in, Rec(s.key, s.cmd, 11))
		want = append(want, fmt.Sprintf("0 %s=%s@11", s.key, s.reply))
	}
	m, g := l.ConformHost(t, "conformance"), l.ConformHost(t, "go/conformance")
	for _, h := range []*Host{m, g} {
		h.MustProcess(0, in...)
		WantRecords(t, h.Module.Name()+": one batch", h.Take(), want...)
		wantState := map[StateKey]string{
			{h.States["a"], "k7", ""}:   "x2",
			{h.States["n"], "k7", ""}:   "\x01\x00\x00\x00\x00\x00\x00\x00",
			{h.States["n"], "k8", ""}:   "\x03\x00\x00\x00\x00\x00\x00\x00",
			{h.States["m"], "k7", "r"}:  "2",
			{h.States["big"], "k7", ""}: big,
		}
		if len(h.State) != len(wantState) {
			t.Errorf("%s: the host holds %d entries after the call, want %d", h.Module.Name(), len(h.State), len(wantState))
		}
		for k, v := range wantState {
			if string(h.State[k]) != v {
				t.Errorf("%s: the host holds %.40q for %+v after the call, want %.40q", h.Module.Name(), h.State[k], k, v)
			}
		}
		h.Advance(0, 100)
		WantRecords(t, h.Module.Name()+": the timer set in the batch", h.Take(), "0 k8=fired event 80 ns=inc:n =4@80")
		h.MustProcess(0, Rec("k8", "inc n", 12), Rec("k7", "inc n", 12))
		WantRecords(t, h.Module.Name()+": after the timer", h.Take(), "0 k8==5@12", "0 k7==2@12")
	}
	if !l.NoStateCache && (m.GetCalls > 2 || m.PutCalls != 0 || m.DeleteCalls != 0 || m.GetManyCalls == 0 || m.WriteBatchCalls == 0) {
		t.Errorf("%s: %d state_get, %d state_put, %d state_delete, %d state_get_many and %d state_write_batch calls; want the SDK's cache to batch them",
			l.Name, m.GetCalls, m.PutCalls, m.DeleteCalls, m.GetManyCalls, m.WriteBatchCalls)
	}
}

// CheckConformanceBatch checks that replies come in input order, after the
// records a command emits, for many commands and records in one call, with
// the output flushed early past 64 KiB.
func (l Lang) CheckConformanceBatch(t *testing.T) {
	t.Helper()
	var in []abi.Record
	var want []string
	for i := range 5000 {
		want = append(want, fmt.Sprintf("0 k=r%d@9", i))
	}
	want = append(want, "0 k=ok@9")
	in = append(in, Rec("k", "batch 5000", 9))
	for i := 1; i <= 300; i++ {
		key := fmt.Sprintf("k%d", i%3)
		in = append(in, Rec(key, "inc n", 10))
		want = append(want, fmt.Sprintf("0 %s==%d@10", key, (i+2)/3))
	}
	h := l.ConformHost(t, "conformance")
	h.MustProcess(0, in...)
	WantRecords(t, "batch 5000 and 300 inc", h.Take(), want...)
	if h.Batches < 2 {
		t.Errorf("%d emit_batch calls for over 64 KiB of output, want the early flushes too", h.Batches)
	}
	// The SDKs read the counters of a batch in a few state_get_many calls
	// and write them back in a few state_write_batch calls; the WAT module
	// makes one of each per inc.
	calls := fmt.Sprintf("%d state_get, %d state_put, %d state_get_many, %d state_write_batch calls",
		h.GetCalls, h.PutCalls, h.GetManyCalls, h.WriteBatchCalls)
	if l.NoStateCache {
		if h.GetManyCalls != 300 || h.WriteBatchCalls != 300 {
			t.Errorf("300 inc: %s; want 300 of the batched ones", calls)
		}
	} else if h.GetCalls != 0 || h.PutCalls != 0 || h.GetManyCalls == 0 || h.GetManyCalls > 3 || h.WriteBatchCalls == 0 || h.WriteBatchCalls > 3 {
		t.Errorf("300 inc: %s; want a few batched ones only", calls)
	}
}

// ConformFailure is a command that fails and what its failure message
// contains.
type ConformFailure struct{ Cmd, Want string }

// CheckConformanceFailures checks every way a command fails: the call fails
// with GUEST_ERROR and the same message as the Go module's, naming the
// record, and emits nothing.
//
// extra are more commands a language checks, beyond those every language
// fails alike.
func (l Lang) CheckConformanceFailures(t *testing.T, extra ...ConformFailure) {
	t.Helper()
	cases := []ConformFailure{
		{"fail boom-42", `operator "conform": process: record 0 of 1 (key "k"): conform: fail boom-42`},
		{"frobnicate now", `unknown command "frobnicate now"`},
		{"", `unknown command ""`},
		{"put zz v", `unknown state "zz": not a value state of this operator`},
		{"mput a x y", `unknown state "a": not a map state of this operator`},
		{"get m", `unknown state "m": not a value state of this operator`},
		{"mscan big -", `unknown state "big": not a map state of this operator`},
		{"put a", `command "put a": want 3 tokens, got 2`},
		{"put a b c", `command "put a b c": want 3 tokens, got 4`},
		{"get  a", `command "get  a": want 2 tokens, got 3`},
		{"fail", `command "fail": want 2 tokens, got 1`},
		{"log two words", `command "log two words": want 2 tokens, got 3`},
		{"big big -1", `"-1" is not a non-negative decimal integer`},
		{"big big x", `"x" is not a non-negative decimal integer`},
		{"batch 9223372036854775808", `"9223372036854775808" is not a non-negative decimal integer`},
		{"batch ", `"" is not a non-negative decimal integer`},
		{"mfill p 10001", "mfill: 10001 entries, at most 10000"},
		{"timer later 5", `unknown time domain "later"`},
		{"untimer event 1.5", `"1.5" is not a non-negative decimal integer`},
		{"put b v\nfail x", `want 3 tokens, got 4`},
	}
	for _, tc := range append(cases, extra...) {
		t.Run(tc.Cmd, func(t *testing.T) {
			var msgs []string
			for _, module := range []string{"conformance", "go/conformance"} {
				h := l.ConformHost(t, module)
				st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{Rec("k", tc.Cmd, 1)})
				if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 {
					t.Fatalf("%s: status %d (%s), error %v, failures %q; want one guest error", module, st, abi.StatusText(st), err, h.Failures)
				}
				if !strings.Contains(h.Failures[0], tc.Want) || !strings.HasPrefix(h.Failures[0], `operator "conform": process: record 0 of 1 (key "k"): `) {
					t.Fatalf("%s: failure %q, want one naming the record and containing %q", module, h.Failures[0], tc.Want)
				}
				if len(h.Out) != 0 {
					t.Errorf("%s: a failed call emitted %d records", module, len(h.Out))
				}
				msgs = append(msgs, h.Failures[0])
			}
			if msgs[0] != msgs[1] {
				t.Errorf("%s failed with %q, Go with %q", l.Name, msgs[0], msgs[1])
			}
		})
	}

	// A failing command in the middle of a batch fails the batch and drops
	// the replies before it.
	h := l.ConformHost(t, "conformance")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{Rec("k", "inc n", 3), Rec("k", "fail late", 3), Rec("k", "inc n", 3)})
	WantFailure(t, h, "a batch with a failing command", st, err, abi.StatusGuestError, `record 1 of 3 (key "k"): conform: fail late`)
	if len(h.Out) != 0 {
		t.Errorf("a failed batch emitted %d records", len(h.Out))
	}
	// The instance goes on after a failed call.
	h.MustProcess(0, Rec("k", "inc n", 4))
	WantRecords(t, "after a failed call", h.Take(), "0 k==2@4")

	// An operator name the module lacks fails open.
	h = l.New(t, "conformance", WithOutputs("out", "side"))
	st, err = h.OpenOp(0, "no-such-operator", ConformConfig)
	WantFailure(t, h, "open of an unknown operator", st, err, abi.StatusUnknownOp, `wstream_open: the module has no operator "no-such-operator"; it has ["conform"]`)
}

// CheckProgress checks that the SDK names, at its first open, where it
// keeps the index of the record its callback is at (the optional import
// progress_at), that the word holds the failing record's index after a
// failed call, and that it reads 0xFFFFFFFF ("no record") after a call
// that succeeded: dead-letter mode takes the failing record out by it
// instead of searching the batch.
func (l Lang) CheckProgress(t *testing.T) {
	t.Helper()
	h := l.ConformHost(t, "conformance")
	if h.ProgressAt == 0 {
		t.Fatalf("%s: the module never named its progress with progress_at", l.Name)
	}
	word := func() uint32 {
		v, ok := h.Module.Memory().ReadUint32Le(h.ProgressAt)
		if !ok {
			t.Fatalf("%s: progress word at %#x is outside memory", l.Name, h.ProgressAt)
		}
		return v
	}
	for _, at := range []int{0, 1, 4} {
		recs := make([]abi.Record, 6)
		for i := range recs {
			recs[i] = Rec("k", "inc n", 3)
		}
		recs[at] = Rec("k", "fail here", 3)
		st, err := h.ProcessCtx(h.Ctx, 0, recs)
		WantFailure(t, h, fmt.Sprintf("a batch failing at record %d", at), st, err, abi.StatusGuestError,
			fmt.Sprintf("record %d of 6 (key \"k\"): conform: fail here", at))
		if v := word(); v != uint32(at) {
			t.Errorf("%s: the progress word reads %d after a failure at record %d", l.Name, v, at)
		}
	}
	h.MustProcess(0, Rec("k", "inc n", 4), Rec("k", "inc n", 4))
	h.Take()
	if v := word(); v != 0xFFFFFFFF {
		t.Errorf("%s: the progress word reads %d after a call that succeeded, want 0xFFFFFFFF", l.Name, v)
	}
}

// CheckCommits checks an SDK that marks commit points (the optional import
// commit): asked for one every 2 records, it marks them before records 2,
// 4 and 6 of a batch of 7, each after the host got the output and the
// state writes of the records before it; a callback failing at record 5
// has marked those before it; asked for none, it marks none.
func (l Lang) CheckCommits(t *testing.T) {
	t.Helper()
	h := l.ConformHost(t, "conformance")
	h.CommitEvery = 2
	n := StateKey{Handle: -1, Key: "k"}
	count := func(c Commit) int64 {
		if n.Handle < 0 {
			h, ok := h.States["n"]
			if !ok {
				t.Fatalf("%s: state n was never registered", l.Name)
			}
			n.Handle = h
		}
		v := c.State[n]
		if len(v) != 8 {
			return 0
		}
		return int64(binary.LittleEndian.Uint64(v))
	}
	points := func() string {
		var s []string
		for _, c := range h.Commits {
			s = append(s, fmt.Sprintf("%d:out=%d:n=%d", c.Done, c.Emitted, count(c)))
		}
		h.Commits = nil
		return strings.Join(s, " ")
	}
	recs := make([]abi.Record, 7)
	for i := range recs {
		recs[i] = Rec("k", "inc n", 3)
	}
	h.MustProcess(0, recs...)
	h.Take()
	if got, want := points(), "2:out=2:n=2 4:out=4:n=4 6:out=6:n=6"; got != want {
		t.Errorf("%s: commit points every 2 of 7 records: %s, want %s", l.Name, got, want)
	}
	recs[5] = Rec("k", "fail here", 3)
	st, err := h.ProcessCtx(h.Ctx, 0, recs)
	WantFailure(t, h, "a batch failing at record 5", st, err, abi.StatusGuestError, "record 5 of 7")
	h.Take()
	if got, want := points(), "2:out=2:n=9 4:out=4:n=11"; got != want {
		t.Errorf("%s: commit points before a failure at record 5: %s, want %s", l.Name, got, want)
	}
	h.CommitEvery = 0
	h.MustProcess(0, recs[:4]...)
	if got := points(); got != "" {
		t.Errorf("%s: commit points %s when the host asked for none", l.Name, got)
	}
}
