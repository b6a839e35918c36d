package rustexamples_test

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
	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests below run the operator "conform" of tests/conformance/SPEC.md
// in examples/wasm/rust/conformance through wasmtest, each command against
// the reply the SPEC gives, next to the Go reference module
// (examples/wasm/go/conformance), which must answer, keep state and fail
// alike. The suite in tests/conformance runs it through the real host.

const conformConfig = `{"mode":"conformance","n":1}`

// conformHost opens conform in slot 0 of module with the SPEC's outputs.
func conformHost(t *testing.T, module string) *wasmtest.Host {
	t.Helper()
	h := newHost(t, module, wasmtest.WithOutputs("out", "side"))
	h.MustOpen(0, "conform", conformConfig)
	return h
}

// stateOf returns h's state by state name, and its timers, for comparing
// two modules whose handles may differ.
func stateOf(h *wasmtest.Host) (map[string]string, map[wasmtest.TimerKey]bool) {
	names := map[int32]string{}
	for name, hd := range h.States {
		names[hd] = name
	}
	state := map[string]string{}
	for sk, v := range h.State {
		state[fmt.Sprintf("%s/%q/%x", names[sk.Handle], sk.Key, sk.NS)] = fmt.Sprintf("%x", v)
	}
	return state, maps.Clone(h.Timers)
}

// hook calls a checkpoint hook export of slot 0.
func hook(t *testing.T, h *wasmtest.Host, export string, id int64) {
	t.Helper()
	st, err := h.Call(h.Ctx, h.Module.ExportedFunction(export), 0, api.EncodeI64(id))
	h.MustOK(export, st, err)
}

// TestConformance runs every command of the SPEC on the Rust module and on
// the Go one, checks each reply and that both modules emit, keep and log
// the same.
func TestConformance(t *testing.T) {
	const ts = 42
	big := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 200000/26+1)[:200000]
	type cmd struct {
		key, cmd, reply string
		want            []string // the records emitted; nil means just the reply
	}
	script := []cmd{
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
		// watermark, processing time, log, config, hooks
		{key: "k", cmd: "wm", reply: "wm=-9223372036854775808"},
		{key: "k", cmd: "ptime", reply: "ptime ok"},
		{key: "k", cmd: "log hello-from-the-guest", reply: "ok"},
		{key: "k", cmd: "log " + strings.Repeat("x", 5000), reply: "ok"},
		{key: "k", cmd: "config", reply: "config=" + conformConfig},
		{key: "k", cmd: "hooks", reply: "pre=-1 complete=-1 aborted=-1"},
	}

	r, g := conformHost(t, "conformance"), conformHost(t, "go/conformance")
	// same checks that both modules emitted want, and keep the same state,
	// timers and logs.
	same := func(what string, want ...string) {
		t.Helper()
		ro, gob := format(r.Take()), format(g.Take())
		if !slices.Equal(ro, want) {
			t.Fatalf("%s: Rust emitted\n%.2000s\nwant\n%.2000s", what, strings.Join(ro, "\n"), strings.Join(want, "\n"))
		}
		if !slices.Equal(gob, want) {
			t.Fatalf("%s: Go emitted\n%.2000s\nwant\n%.2000s", what, strings.Join(gob, "\n"), strings.Join(want, "\n"))
		}
		rs, rt := stateOf(r)
		gs, gt := stateOf(g)
		if !maps.Equal(rs, gs) || !maps.Equal(rt, gt) {
			t.Fatalf("%s: Rust and Go differ in state or timers:\nRust %.2000v %v\nGo   %.2000v %v", what, rs, rt, gs, gt)
		}
		if !slices.Equal(r.Logs, g.Logs) {
			t.Fatalf("%s: Rust logged %.200q, Go %.200q", what, r.Logs, g.Logs)
		}
	}
	for _, s := range script {
		for _, h := range []*wasmtest.Host{r, g} {
			h.MustProcess(0, wasmtest.Rec(s.key, s.cmd, ts))
		}
		want := s.want
		if want == nil {
			want = []string{fmt.Sprintf("0 %s=%s@%d", s.key, s.reply, ts)}
		}
		same(fmt.Sprintf("%.60q (key %q)", s.cmd, s.key), want...)
	}
	if got := r.States; !maps.Equal(got, map[string]int32{"a": 0, "b": 1, "n": 2, "big": 3, "m": 4, "p": 5}) {
		t.Errorf("states registered %v, want a, b, n, big, m, p in that order", got)
	}
	if got := r.Kinds; !slices.Equal(got, []int32{abi.StateValue, abi.StateValue, abi.StateValue, abi.StateValue, abi.StateMap, abi.StateMap}) {
		t.Errorf("state kinds %v, want four value states and two map states", got)
	}
	if v := r.State[wasmtest.StateKey{Handle: r.States["n"], Key: "k1"}]; len(v) != 8 || binary.LittleEndian.Uint64(v) != 2 {
		t.Errorf("state n of k1 = %q, want 2 as 8 bytes little-endian", v)
	}

	// A counter the host wrote is read by the guest, and wraps like Go's.
	for _, h := range []*wasmtest.Host{r, g} {
		h.State[wasmtest.StateKey{Handle: h.States["n"], Key: "k4"}] = binary.LittleEndian.AppendUint64(nil, 1<<40)
		h.State[wasmtest.StateKey{Handle: h.States["n"], Key: "k5"}] = binary.LittleEndian.AppendUint64(nil, math.MaxInt64)
		h.MustProcess(0, wasmtest.Rec("k4", "inc n", 1), wasmtest.Rec("k5", "inc n", 2), wasmtest.Rec("k1", "wm", 3))
	}
	same("inc of host-written counters", fmt.Sprintf("0 k4==%d@1", 1<<40+1), "0 k5==-9223372036854775808@2", "0 k1=wm=-9223372036854775808@3")

	// Event-time timers fire in order with key and namespace; the deleted
	// one does not.
	for _, h := range []*wasmtest.Host{r, g} {
		h.Advance(0, 49)
	}
	same("watermark 49")
	for _, h := range []*wasmtest.Host{r, g} {
		h.Advance(0, 150)
		h.MustProcess(0, wasmtest.Rec("k", "wm", 7))
	}
	same("watermark 150", "0 k2=fired event 50 ns=t@50", "0 k1=fired event 100 ns=t@100", "0 k=wm=150@7")
	for _, h := range []*wasmtest.Host{r, g} {
		st, err := h.Fire(0, abi.TimeProcessing, 8000)
		h.MustOK("processing-time timers", st, err)
	}
	same("clock 8000", "0 k3=fired proc 5000 ns=t@5000")
	for _, h := range []*wasmtest.Host{r, g} {
		h.Advance(0, abi.MaxWatermark)
	}
	same("the end of input", "0 k3=fired event 9223372036854775807 ns=t@9223372036854775807")

	// Checkpoint hooks: pre_barrier emits, the others are remembered.
	for _, h := range []*wasmtest.Host{r, g} {
		hook(t, h, abi.ExportPreBarrier, 7)
		hook(t, h, abi.ExportCkptComplete, 7)
		hook(t, h, abi.ExportCkptAborted, 8)
		h.MustProcess(0, wasmtest.Rec("k", "hooks", 9))
		hook(t, h, abi.ExportPreBarrier, math.MinInt64)
		h.MustProcess(0, wasmtest.Rec("k", "hooks", 10))
		h.MustClose(0)
	}
	same("hooks and close", "0 =pre 7@0", "0 k=pre=7 complete=7 aborted=8@9", "0 =pre -9223372036854775808@0",
		"0 k=pre=-9223372036854775808 complete=7 aborted=8@10", "0 =close@0")
}

// TestConformanceBatch checks that replies come in input order, after the
// records a command emits, for many commands and records in one call, with
// the output flushed early past 64 KiB.
func TestConformanceBatch(t *testing.T) {
	var in []abi.Record
	var want []string
	for i := range 5000 {
		want = append(want, fmt.Sprintf("0 k=r%d@9", i))
	}
	want = append(want, "0 k=ok@9")
	in = append(in, wasmtest.Rec("k", "batch 5000", 9))
	for i := 1; i <= 300; i++ {
		key := fmt.Sprintf("k%d", i%3)
		in = append(in, wasmtest.Rec(key, "inc n", 10))
		want = append(want, fmt.Sprintf("0 %s==%d@10", key, (i+2)/3))
	}
	h := conformHost(t, "conformance")
	h.MustProcess(0, in...)
	wantRecords(t, "batch 5000 and 300 inc", h.Take(), want...)
	if h.Batches < 2 {
		t.Errorf("%d emit_batch calls for over 64 KiB of output, want the early flushes too", h.Batches)
	}
}

// TestConformanceFailures checks every way a command fails: the call fails
// with GUEST_ERROR and the same message as the Go module's, naming the
// record, and emits nothing.
func TestConformanceFailures(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"fail boom-42", `operator "conform": process: record 0 of 1 (key "k"): conform: fail boom-42`},
		{"frobnicate now", `unknown command "frobnicate now"`},
		{"", `unknown command ""`},
		{"\xffbad\u00a0", `unknown command "\xffbad\u00a0"`},
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
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var msgs []string
			for _, module := range []string{"conformance", "go/conformance"} {
				h := conformHost(t, module)
				st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", tc.cmd, 1)})
				if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 {
					t.Fatalf("%s: status %d (%s), error %v, failures %q; want one guest error", module, st, abi.StatusText(st), err, h.Failures)
				}
				if !strings.Contains(h.Failures[0], tc.want) || !strings.HasPrefix(h.Failures[0], `operator "conform": process: record 0 of 1 (key "k"): `) {
					t.Fatalf("%s: failure %q, want one naming the record and containing %q", module, h.Failures[0], tc.want)
				}
				if len(h.Out) != 0 {
					t.Errorf("%s: a failed call emitted %d records", module, len(h.Out))
				}
				msgs = append(msgs, h.Failures[0])
			}
			if msgs[0] != msgs[1] {
				t.Errorf("Rust failed with %q, Go with %q", msgs[0], msgs[1])
			}
		})
	}

	// A failing command in the middle of a batch fails the batch and drops
	// the replies before it.
	h := conformHost(t, "conformance")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k", "inc n", 3), wasmtest.Rec("k", "fail late", 3), wasmtest.Rec("k", "inc n", 3)})
	wantFailure(t, h, "a batch with a failing command", st, err, abi.StatusGuestError, `record 1 of 3 (key "k"): conform: fail late`)
	if len(h.Out) != 0 {
		t.Errorf("a failed batch emitted %d records", len(h.Out))
	}
	// The instance goes on after a failed call.
	h.MustProcess(0, wasmtest.Rec("k", "inc n", 4))
	wantRecords(t, "after a failed call", h.Take(), "0 k==2@4")

	// An operator name the module lacks fails open.
	h = newHost(t, "conformance", wasmtest.WithOutputs("out", "side"))
	st, err = h.OpenOp(0, "no-such-operator", conformConfig)
	wantFailure(t, h, "open of an unknown operator", st, err, abi.StatusUnknownOp, `wstream_open: the module has no operator "no-such-operator"; it has ["conform"]`)
}
