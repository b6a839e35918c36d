package wasmtest

import (
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// The checks below are of the window operator of examples/wasm/go/window
// and its twins in the other languages, which must emit the same records
// and keep the same state bytes, so that a savepoint of one restores into
// another.

// WindowOutputs are the outputs the window operator needs: the sums on
// main, the records behind the watermark on late.
var WindowOutputs = []string{"main", "late"}

// CheckWindow drives the window operator of the window module h runs
// (instantiated with WithOutputs(WindowOutputs...)) through records out of
// order, across windows, at a negative time and late, and checks the sums,
// the late record, the state layout and that nothing is left at the end.
func CheckWindow(t testing.TB, h *Host) {
	t.Helper()
	h.MustOpen(0, "window", `{"size":1000}`)
	// The sums are int64s, 8 bytes little-endian, under the window end as
	// 8 bytes big-endian, with an event-time timer at the end - 1.
	sum := func(key, end string) []byte {
		return h.State[StateKey{Handle: h.States["sum"], Key: key, NS: end}]
	}
	const end1000, end2000 = "\x00\x00\x00\x00\x00\x00\x03\xe8", "\x00\x00\x00\x00\x00\x00\x07\xd0"

	// Out of order, across windows, one at a negative time.
	h.MustProcess(0,
		Rec("a", "1", 100),
		Rec("a", "2", 1500),
		Rec("b", "5", 900),
		Rec("a", "3", 999),
		Rec("a", "4", -1),
	)
	if v := sum("a", end1000); string(v) != "\x04\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("sum of a in window [0,1000) = %q, want 4 as 8 bytes little-endian under the end 1000 big-endian", v)
	}
	h.Advance(0, 999)
	h.MustProcess(0,
		Rec("a", "7", 500), // its window [0,1000) closed at watermark 999: late
		Rec("a", "6", 1999),
		Rec("b", "1", 1000),
	)
	if v := sum("a", end2000); string(v) != "\x08\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("sum of a in window [1000,2000) = %q, want 8 as 8 bytes little-endian", v)
	}
	if !h.Timers[TimerKey{Domain: abi.TimeEvent, Key: "a", NS: end2000, TS: 1999}] {
		t.Errorf("no event timer of a at 1999 under the window end: %v", h.Timers)
	}
	h.Advance(0, abi.MaxWatermark)
	WantRecords(t, "window", h.Take(),
		"0 a=-1000,0,4@-1",
		"0 a=0,1000,4@999",
		"0 b=0,1000,5@999",
		"1 a=7@500",
		"0 a=1000,2000,8@1999",
		"0 b=1000,2000,1@1999",
	)
	if len(h.State) != 0 || len(h.Timers) != 0 {
		t.Errorf("%d state entries and %d timers left, want none", len(h.State), len(h.Timers))
	}
	h.MustClose(0)
}

// WindowStep is one batch for the window operator and the watermark to
// advance to after it.
type WindowStep struct {
	Recs      []abi.Record
	Watermark int64
}

// CompareWindow runs steps through the window operator of l's window
// module and of its Go twin, opened with cfg, then ends the input, and
// checks that both emit the same records on both outputs, that some are
// late and some not (the input must have both), and that both close with
// no state or timers left. It returns what l's module emitted.
func (l Lang) CompareWindow(t *testing.T, cfg string, steps []WindowStep) []abi.Record {
	t.Helper()
	run := func(module string) []abi.Record {
		h := l.New(t, module, WithOutputs(WindowOutputs...))
		h.MustOpen(0, "window", cfg)
		var out []abi.Record
		for _, s := range steps {
			h.MustProcess(0, s.Recs...)
			h.Advance(0, s.Watermark)
			out = append(out, h.Take()...)
		}
		h.Advance(0, abi.MaxWatermark)
		out = append(out, h.Take()...)
		h.MustClose(0)
		if len(h.State) != 0 || len(h.Timers) != 0 {
			t.Errorf("%s: window %s: %d state entries and %d timers left", module, cfg, len(h.State), len(h.Timers))
		}
		return out
	}
	out := run("window")
	l.Same(t, "window "+cfg, out, run("go/window"))
	late := 0
	for _, r := range out {
		if r.Port == 1 {
			late++
		}
	}
	if late == 0 || late == len(out) {
		t.Fatalf("window %s: %d of %d records late; the input must have both", cfg, late, len(out))
	}
	return out
}

// WindowFailure is one way the window operator fails: opened with Config
// on Outputs (WindowOutputs when nil), and then, when Process is not nil,
// processing Process.
type WindowFailure struct {
	Name, Config string
	Outputs      []string
	Process      []abi.Record
	// Want is in the failure message of l's own module. Only its messages
	// are pinned: the Go twin's come from encoding/json for bad configs.
	Want string
}

// CheckWindowFailures runs each case on the window module of l and, with
// withGo, on its Go twin too: the failing call must return GUEST_ERROR
// without a trap, fail with one message that names the operator and the
// phase (open or process), and emit nothing.
func (l Lang) CheckWindowFailures(t *testing.T, cases []WindowFailure, withGo bool) {
	t.Helper()
	modules := []string{"window"}
	if withGo {
		modules = append(modules, "go/window")
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			outputs := tc.Outputs
			if outputs == nil {
				outputs = WindowOutputs
			}
			for _, module := range modules {
				h := l.New(t, module, WithOutputs(outputs...))
				st, err := h.OpenOp(0, "window", tc.Config)
				phase := `operator "window": open: `
				if tc.Process != nil {
					h.MustOK("open", st, err)
					st, err = h.ProcessCtx(h.Ctx, 0, tc.Process)
					phase = `operator "window": process: `
				}
				if err != nil || st != abi.StatusGuestError {
					t.Fatalf("%s: status %d (%s), error %v; want %d (guest error)", module, st, abi.StatusText(st), err, abi.StatusGuestError)
				}
				if len(h.Failures) != 1 || !strings.HasPrefix(h.Failures[0], phase) {
					t.Fatalf("%s: failure messages %q, want one starting with %q", module, h.Failures, phase)
				}
				if module == "window" && !strings.Contains(h.Failures[0], tc.Want) {
					t.Fatalf("%s: failure message %q, want one containing %q", module, h.Failures[0], tc.Want)
				}
				if len(h.Out) != 0 {
					t.Errorf("%s: a failed call emitted %d records", module, len(h.Out))
				}
			}
		})
	}
}
