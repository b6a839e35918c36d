package cexamples_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests below check examples/wasm/c/window against its Go twin: the same
// records on both outputs, the same state bytes and the same timers, so
// that a savepoint of one restores into the other.

// step is one call of a window script: a batch to process, or (when recs is
// nil) a new watermark to advance to.
type step struct {
	recs []abi.Record
	wm   int64
}

func batch(recs ...abi.Record) step { return step{recs: recs} }
func advance(wm int64) step         { return step{wm: wm} }

// windowHost opens the window operator of module in slot 0 with cfg and
// outputs main and late.
func windowHost(t *testing.T, module, cfg string) *wasmtest.Host {
	t.Helper()
	h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
	h.MustOpen(0, "window", cfg)
	return h
}

// runSteps runs steps on h and returns what it emitted, one line per record.
func runSteps(t *testing.T, h *wasmtest.Host, steps []step) []string {
	t.Helper()
	for _, s := range steps {
		if s.recs != nil {
			h.MustProcess(0, s.recs...)
		} else {
			h.Advance(0, s.wm)
		}
	}
	return wasmtest.Format(h.Take())
}

// sameWindows runs steps through the C module and the Go one and checks
// that they emit the same records and keep the same state and timers after
// every step; it returns what they emitted.
func sameWindows(t *testing.T, cfg string, steps []step) []string {
	t.Helper()
	c, g := windowHost(t, "window", cfg), windowHost(t, "go/window", cfg)
	var out []string
	for i, s := range steps {
		co, gob := runSteps(t, c, []step{s}), runSteps(t, g, []step{s})
		if !slices.Equal(co, gob) {
			t.Fatalf("config %s, step %d: C emitted\n%s\nGo emitted\n%s", cfg, i, strings.Join(co, "\n"), strings.Join(gob, "\n"))
		}
		cs, ct := wasmtest.StateByName(c)
		gs, gt := wasmtest.StateByName(g)
		if !maps.Equal(cs, gs) {
			t.Fatalf("config %s, step %d: C state %v\nGo state %v", cfg, i, cs, gs)
		}
		if !maps.Equal(ct, gt) {
			t.Fatalf("config %s, step %d: C timers %v\nGo timers %v", cfg, i, ct, gt)
		}
		out = append(out, co...)
	}
	c.MustClose(0)
	g.MustClose(0)
	return out
}

// TestWindow is the Go example's TestWindow on the C module.
func TestWindow(t *testing.T) {
	got := sameWindows(t, `{"size":1000}`, []step{
		// Out of order, across windows, one at a negative time.
		batch(wasmtest.Rec("a", "1", 100), wasmtest.Rec("a", "2", 1500), wasmtest.Rec("b", "5", 900),
			wasmtest.Rec("a", "3", 999), wasmtest.Rec("a", "4", -1)),
		advance(999),
		batch(wasmtest.Rec("a", "7", 500), // its window [0,1000) closed at watermark 999: late
			wasmtest.Rec("a", "6", 1999), wasmtest.Rec("b", "1", 1000)),
		advance(abi.MaxWatermark),
	})
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
}

// TestWindowState pins the state and timer encoding: the sum is an int64 8
// bytes little-endian under namespace = window end 8 bytes big-endian, with
// an event-time timer at end-1.
func TestWindowState(t *testing.T) {
	h := windowHost(t, "window", `{"size":1000}`)
	h.MustProcess(0, wasmtest.Rec("k", "258", 1500), wasmtest.Rec("k", "-3", -1500))
	ns := func(end int64) string { return string(binary.BigEndian.AppendUint64(nil, uint64(end))) }
	want := map[wasmtest.StateKey][]byte{
		{Handle: h.States["sum"], Key: "k", NS: ns(2000)}:  {0x02, 0x01, 0, 0, 0, 0, 0, 0},
		{Handle: h.States["sum"], Key: "k", NS: ns(-1000)}: binary.LittleEndian.AppendUint64(nil, uint64(math.MaxUint64-2)),
	}
	if len(h.States) != 1 || !maps.EqualFunc(h.State, want, bytes.Equal) {
		t.Fatalf("states %v, state %q; want only \"sum\" holding %q", h.States, h.State, want)
	}
	wantTimers := map[wasmtest.TimerKey]bool{
		{Domain: abi.TimeEvent, Key: "k", NS: ns(2000), TS: 1999}:   true,
		{Domain: abi.TimeEvent, Key: "k", NS: ns(-1000), TS: -1001}: true,
	}
	if !maps.Equal(h.Timers, wantTimers) {
		t.Fatalf("timers %v, want %v", h.Timers, wantTimers)
	}
}

// TestWindowMatchesGo drives both modules through random scripts: several
// keys, records out of order and late, negative and extreme timestamps,
// signed values, window sizes from 1 to the whole int64 range.
func TestWindowMatchesGo(t *testing.T) {
	const min, max = math.MinInt64, math.MaxInt64
	extremes := []int64{min, min + 1, min + 999, min + 1000, min + 1001, -1001, -1000, -999, -1, 0, 1, 999, 1000,
		max - 1001, max - 1000, max - 999, max - 2, max - 1, max}
	values := []string{"0", "1", "-1", "+5", "42", "-0", "+0", "007", "9223372036854775807", "-9223372036854775808", "1000000"}
	for _, size := range []int64{1000, 1, 7, 1 << 62, max - 1, max} {
		cfg := fmt.Sprintf(`{"size":%d}`, size)
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(size), 7))
			ts := func() int64 {
				switch rnd.IntN(3) {
				case 0:
					return extremes[rnd.IntN(len(extremes))]
				case 1:
					return rnd.Int64N(20000) - 10000
				}
				return int64(rnd.Uint64())
			}
			var steps []step
			wm := int64(min)
			for range 40 {
				recs := make([]abi.Record, 1+rnd.IntN(30))
				for i := range recs {
					recs[i] = wasmtest.Rec(fmt.Sprintf("s%d", rnd.IntN(5)), values[rnd.IntN(len(values))], ts())
				}
				steps = append(steps, batch(recs...))
				// The watermark only moves forward, mostly in small steps.
				if rnd.IntN(3) == 0 {
					next := ts()
					if rnd.IntN(2) == 0 && wm < max-5000 {
						next = wm + rnd.Int64N(5000)
					}
					if next > wm {
						wm = next
						steps = append(steps, advance(wm))
					}
				}
			}
			steps = append(steps, advance(abi.MaxWatermark))
			out := sameWindows(t, cfg, steps)
			late := 0
			for _, o := range out {
				if strings.HasPrefix(o, "1 ") {
					late++
				}
			}
			if len(out) == 0 || late == 0 || late == len(out) {
				t.Fatalf("the script emitted %d records, %d of them late: it must exercise both outputs", len(out), late)
			}
		})
	}
}

// TestWindowSavepoint moves the state and timers of a Go window into a C
// one halfway through, and the other way round, as restoring a savepoint in
// a module of the other language does: the output must be the same as
// without the move.
func TestWindowSavepoint(t *testing.T) {
	first := []step{
		batch(wasmtest.Rec("a", "1", 100), wasmtest.Rec("b", "2", 2500), wasmtest.Rec("a", "-3", -700), wasmtest.Rec("c", "4", math.MaxInt64)),
		advance(999),
		batch(wasmtest.Rec("a", "5", 1100), wasmtest.Rec("b", "6", 2999)),
	}
	second := []step{
		batch(wasmtest.Rec("a", "7", 1500), wasmtest.Rec("b", "8", 100)),
		advance(2500),
		batch(wasmtest.Rec("b", "9", 2001)),
		advance(abi.MaxWatermark),
	}
	whole := runSteps(t, windowHost(t, "go/window", ""), append(slices.Clone(first), second...))
	for _, mods := range [][2]string{{"go/window", "window"}, {"window", "go/window"}} {
		from, to := windowHost(t, mods[0], ""), windowHost(t, mods[1], "")
		out := runSteps(t, from, first)
		// wasmtest keeps state by handle: both register "sum" as their only state.
		if !maps.Equal(from.States, to.States) {
			t.Fatalf("%s registered %v, %s %v", mods[0], from.States, mods[1], to.States)
		}
		to.State, to.Timers, to.Watermark = maps.Clone(from.State), maps.Clone(from.Timers), from.Watermark
		out = append(out, runSteps(t, to, second)...)
		if !slices.Equal(out, whole) {
			t.Fatalf("%s then %s emitted\n%s\nwant\n%s", mods[0], mods[1], strings.Join(out, "\n"), strings.Join(whole, "\n"))
		}
	}
}

// TestWindowErrors checks that the C module fails where the Go one does,
// with the same message.
func TestWindowErrors(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		outputs   []string
		process   []abi.Record
		want      string
	}{
		{"zero size", `{"size":0}`, nil, nil, "config size must be a positive number of milliseconds, got 0"},
		{"negative size", `{"size":-5}`, nil, nil, "config size must be a positive number of milliseconds, got -5"},
		{"string size", `{"size":"x"}`, nil, nil, `config "{\"size\":\"x\"}"`},
		{"fraction", `{"size":1.5}`, nil, nil, "1.5"},
		{"size overflows", `{"size":9223372036854775808}`, nil, nil, "9223372036854775808"},
		{"invalid JSON", `{"size":1000`, nil, nil, `config "{\"size\":1000"`},
		{"not an object", `[1000]`, nil, nil, `config "[1000]"`},
		{"white space", "  ", nil, nil, "unexpected end of JSON input"},
		{"no late output", `{}`, []string{"main"}, nil, `outputs ["main","late"]`},
		{"bad value", `{}`, nil, []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, `record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{"empty value", `{}`, nil, []abi.Record{wasmtest.Rec("k", "", 2)}, `value "" is not a decimal integer`},
		{"sign only", `{}`, nil, []abi.Record{wasmtest.Rec("k", "-", 2)}, `value "-" is not a decimal integer`},
		{"two signs", `{}`, nil, []abi.Record{wasmtest.Rec("k", "+-1", 2)}, `value "+-1" is not a decimal integer`},
		{"space", `{}`, nil, []abi.Record{wasmtest.Rec("k", " 1", 2)}, `value " 1" is not a decimal integer`},
		{"quoted", `{}`, nil, []abi.Record{wasmtest.Rec("k\n", "1\x00\"é\xff", 2)}, `(key "k\n"): value "1\x00\"é\xff" is not a decimal integer`},
		{"long value", `{}`, nil, []abi.Record{wasmtest.Rec("k", strings.Repeat("x", 300), 2)}, `value "` + strings.Repeat("x", 256) + `"... is not a decimal integer`},
		{"overflow", `{}`, nil, []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, `value "9223372036854775808" overflows int64`},
		{"negative overflow", `{}`, nil, []abi.Record{wasmtest.Rec("k", "-9223372036854775809", 2)}, `value "-9223372036854775809" overflows int64`},
		{"long overflow", `{}`, nil, []abi.Record{wasmtest.Rec("k", "+99999999999999999999999x", 2)}, `overflows int64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outputs := tc.outputs
			if outputs == nil {
				outputs = []string{"main", "late"}
			}
			for _, module := range []string{"window", "go/window"} {
				h := newHost(t, module, wasmtest.WithOutputs(outputs...))
				st, err := h.OpenOp(0, "window", tc.cfg)
				if tc.process != nil {
					h.MustOK("open", st, err)
					st, err = h.ProcessCtx(h.Ctx, 0, tc.process)
				}
				if err != nil || st != abi.StatusGuestError {
					t.Fatalf("%s: status %d (%s), error %v; want %d (guest error)", module, st, abi.StatusText(st), err, abi.StatusGuestError)
				}
				if len(h.Failures) != 1 || !strings.Contains(h.Failures[0], `operator "window"`) {
					t.Fatalf("%s: failure messages %q, want one naming the operator", module, h.Failures)
				}
				// The Go messages come from encoding/json for bad configs: only
				// the C ones are pinned.
				if module == "window" && !strings.Contains(h.Failures[0], tc.want) {
					t.Fatalf("failure message %q, want one containing %q", h.Failures[0], tc.want)
				}
				if len(h.Out) != 0 {
					t.Errorf("%s: a failed call emitted %d records", module, len(h.Out))
				}
			}
		})
	}
}

// TestWindowConfig checks the configurations both modules accept: none,
// null, an object without size, and size among other members.
func TestWindowConfig(t *testing.T) {
	in := []step{
		batch(wasmtest.Rec("k", "1", 10), wasmtest.Rec("k", "2", 1010), wasmtest.Rec("k", "4", 1500), wasmtest.Rec("k", "8", -1)),
		advance(abi.MaxWatermark),
	}
	for cfg, want := range map[string][]string{
		"":                                 {"0 k=-1000,0,8@-1", "0 k=0,1000,1@999", "0 k=1000,2000,6@1999"},
		"null":                             {"0 k=-1000,0,8@-1", "0 k=0,1000,1@999", "0 k=1000,2000,6@1999"},
		` { "size" : null } `:              {"0 k=-1000,0,8@-1", "0 k=0,1000,1@999", "0 k=1000,2000,6@1999"},
		`{"other":[1,{"size":3}]}`:         {"0 k=-1000,0,8@-1", "0 k=0,1000,1@999", "0 k=1000,2000,6@1999"},
		`{"size":500,"x":"y","size":2000}`: {"0 k=-2000,0,8@-1", "0 k=0,2000,7@1999"},
		`{"size":1}`:                       {"0 k=-1,0,8@-1", "0 k=10,11,1@10", "0 k=1010,1011,2@1010", "0 k=1500,1501,4@1500"},
		`{"size":9223372036854775807}`:     {"0 k=-9223372036854775807,0,8@-1", "0 k=0,9223372036854775807,7@9223372036854775806"},
	} {
		if got := sameWindows(t, cfg, in); !slices.Equal(got, want) {
			t.Errorf("config %q: emitted\n%s\nwant\n%s", cfg, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
