package watexamples_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// conformScript is run batch by batch, each batch a list of key, command.
var conformScript = [][]string{
	{"k1", "get a", "k1", "put a x1", "k1", "get a", "k2", "put b y", "k1", "inc n", "k1", "inc n", "k2", "inc n",
		"k1", "del a", "k1", "del a", "k1", "get a", "k1", "get b", "k2", "get b", "", "put a empty-key", "", "get a"},
	{"k1", "big big 200000", "k1", "get big", "k2", "big big 70000", "k1", "big big 0", "k1", "get big", "k1", "big big +1"},
	{"k1", "mput m x 1", "k1", "mput m y 2", "k1", "mget m x", "k1", "mget m z", "k1", "mscan m -", "k1", "mdel m x",
		"k1", "mdel m x", "k1", "mscan m -", "k1", "mscan m x", "k1", "mput m - dash", "k1", "mscan m -", "k1", "mput m big" + strings.Repeat("v", 9000) + " x", "k1", "mscan m b"},
	{"k1", "mfill p 3000", "k1", "mscan p -", "k1", "mscan p k12", "k1", "mscan p k2999", "k1", "mscan p k3", "k2", "mscan p -",
		"k1", "mget p k0042", "k1", "mfill p 0", "k2", "mfill p 10000", "k2", "mscan p k9"},
	{"k1", "emit side hello", "k1", "emit out direct", "k1", "emit nowhere x", "k1", "emit side ünï"},
	{"k1", "batch 5000", "k2", "batch 0", "k1", "batch +3", "k1", "batch -0"},
	{"k1", "timer event 100", "k1", "timer event 200", "k2", "timer event 50", "k1", "untimer event 200", "k1", "untimer event 999",
		"k3", "timer proc 5000", "k3", "timer proc 7000", "k3", "untimer proc 7000", "k4", "timer event 9223372036854775807"},
	{"k", "wm", "k", "ptime", "k", "log hello-from-the-guest", "k", "config", "k", "hooks", "k", "wm extra tokens", "k", "inc n"},
}

// TestConformanceMatchesGo runs the WAT conform operator and the Go one of
// examples/wasm/go/conformance through the same script, timers,
// watermarks, checkpoint hooks and close, and checks that they emit the
// same records, log the same lines and leave the same state.
func TestConformanceMatchesGo(t *testing.T) {
	run := func(module string) (*wasmtest.Host, []abi.Record) {
		h := lang.ConformHost(t, module)
		var out []abi.Record
		for i, batch := range conformScript {
			var recs []abi.Record
			for j := 0; j < len(batch); j += 2 {
				recs = append(recs, wasmtest.Rec(batch[j], batch[j+1], int64(i*10+j)))
			}
			h.Watermark = []int64{abi.MinWatermark, -5, 0, 1234}[i%4]
			h.MustProcess(0, recs...)
			out = append(out, h.Take()...)
		}
		h.Advance(0, 49)
		h.Advance(0, 150)
		st, err := h.Fire(0, abi.TimeProcessing, 6000)
		h.MustOK("on_timer (processing time)", st, err)
		h.Advance(0, math.MaxInt64)
		h.MustHook(0, abi.ExportPreBarrier, 7)
		h.MustHook(0, abi.ExportCkptComplete, 7)
		h.MustHook(0, abi.ExportCkptAborted, 8)
		h.MustHook(0, abi.ExportPreBarrier, 9)
		h.MustProcess(0, wasmtest.Rec("k", "hooks", 1), wasmtest.Rec("k", "wm", 2))
		h.MustClose(0)
		return h, append(out, h.Take()...)
	}
	hw, w := run("conformance")
	hg, g := run("go/conformance")
	lang.Same(t, "conform", w, g)
	if len(w) < 5000 {
		t.Fatalf("only %d records", len(w))
	}
	for _, want := range []string{"0 k1=n=3000 first=k0000 last=k2999@32", "1 k1=hello@40", "0 k1=fired event 100 ns=t@100",
		"0 k3=fired proc 5000 ns=t@5000", "0 =pre 9@0", "0 k=pre=9 complete=7 aborted=8@1", "0 =close@0", "0 k=config=" + wasmtest.ConformConfig + "@76"} {
		found := false
		for _, s := range wasmtest.Format(w) {
			found = found || s == want
		}
		if !found {
			t.Errorf("no record %q", want)
		}
	}
	if fmt.Sprint(hw.Logs) != fmt.Sprint(hg.Logs) {
		t.Errorf("logs differ: WAT %v, Go %v", hw.Logs, hg.Logs)
	}
	if fmt.Sprint(hw.States) != fmt.Sprint(hg.States) || fmt.Sprint(hw.State) != fmt.Sprint(hg.State) {
		t.Errorf("state differs:\nWAT %v %.300v\nGo  %v %.300v", hw.States, hw.State, hg.States, hg.State)
	}
	// 3000 entries of 18 bytes and more: many state_iter pages.
	if hw.IterCalls < 20 {
		t.Errorf("%d state_iter calls, want many pages", hw.IterCalls)
	}
}

// TestConformanceFailures checks that the commands that fail do so in both
// modules, the WAT one with the message given.
func TestConformanceFailures(t *testing.T) {
	for _, tc := range []struct {
		cmds []string
		want string
	}{
		{[]string{"fail boom-42"}, `process: record 0 of 1 (key "k"): conform: fail boom-42`},
		{[]string{"frobnicate now"}, `unknown command "frobnicate now"`},
		{[]string{""}, `unknown command ""`},
		{[]string{"inc n", "put zz v"}, `record 1 of 2 (key "k"): unknown state "zz": not a value state of this operator`},
		{[]string{"mput a x y"}, `unknown state "a": not a map state of this operator`},
		{[]string{"get m"}, `unknown state "m": not a value state`},
		{[]string{"put a"}, `command "put a": want 3 tokens, got 2`},
		{[]string{"put a b c"}, `want 3 tokens, got 4`},
		{[]string{"put a  b"}, `want 3 tokens, got 4`},
		{[]string{"get"}, `want 2 tokens, got 1`},
		{[]string{"put a xyz", "inc a"}, `value state "a" holds 3 bytes, not an 8-byte int64`},
		{[]string{"big big x"}, `"x" is not a non-negative decimal integer`},
		{[]string{"big big -1"}, `"-1" is not a non-negative decimal integer`},
		{[]string{"batch 9223372036854775808"}, `is not a non-negative decimal integer`},
		{[]string{"mfill p 10001"}, `mfill: 10001 entries, at most 10000`},
		{[]string{"timer later 5"}, `unknown time domain "later"`},
		{[]string{"untimer proc 1.5"}, `"1.5" is not a non-negative decimal integer`},
		{[]string{"log a b"}, `want 2 tokens, got 3`},
		{[]string{"fail"}, `want 2 tokens, got 1`},
		{[]string{"mscan m"}, `want 3 tokens, got 2`},
	} {
		t.Run(tc.cmds[len(tc.cmds)-1], func(t *testing.T) {
			var recs []abi.Record
			for _, c := range tc.cmds {
				recs = append(recs, wasmtest.Rec("k", c, 1))
			}
			for _, module := range []string{"conformance", "go/conformance"} {
				h := newHost(t, module, wasmtest.WithOutputs("out", "side"))
				h.MustOpen(0, "conform", "")
				st, err := h.ProcessCtx(h.Ctx, 0, recs)
				if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 {
					t.Fatalf("%s: status %d, error %v, failures %q; want one guest error", module, st, err, h.Failures)
				}
				if module == "conformance" && !strings.Contains(h.Failures[0], `operator "conform": `+tc.want) && !strings.Contains(h.Failures[0], tc.want) {
					t.Errorf("failure %q, want it to contain %q", h.Failures[0], tc.want)
				}
				if len(h.Out) != 0 {
					t.Errorf("%s: a failed call emitted %d records", module, len(h.Out))
				}
			}
		})
	}
}

// TestConformanceBadStatus checks the answers to host calls that fail: a
// state_register refused in open, a state_get that says LIMIT.
func TestConformanceBadStatus(t *testing.T) {
	h := newHost(t, "conformance", wasmtest.WithOutputs("out", "side"))
	// "p" registered before as a value state: registering it as a map is
	// BAD_ARGUMENT.
	h.States["p"], h.Kinds = 0, []int32{abi.StateValue}
	st, err := h.OpenOp(0, "conform", "")
	if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 ||
		h.Failures[0] != `operator "conform": open: registering state p: status -5 (BAD_ARGUMENT)` {
		t.Fatalf("open with a clashing state: status %d, error %v, failures %q", st, err, h.Failures)
	}
	h.Failures = nil
	// The slot stayed closed: a new host state opens it.
	h.States, h.Kinds = map[string]int32{}, nil
	h.MustOpen(0, "conform", "")
	h.MustProcess(0, wasmtest.Rec("k", "put a 1", 1))
	if out := h.Take(); len(out) != 1 || string(out[0].Value) != "ok" {
		t.Fatalf("put after a failed open: %v", wasmtest.Format(out))
	}
}

// TestConformanceBatch checks replies in input order for many commands in
// one call, and that inc goes through the batched state imports.
func TestConformanceBatch(t *testing.T) { lang.CheckConformanceBatch(t) }

// TestConformanceBatchedState checks state read and written many times in
// one call: reads see earlier writes, an iteration and a timer see them,
// and the host holds them.
func TestConformanceBatchedState(t *testing.T) { lang.CheckConformanceBatchedState(t) }
