package rustexamples_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

var modules = []string{"wordcount", "window", "conformance", "testops"}

// TestModuleExports checks every Rust module's exports and imports against
// abi/ABI.md, signature by signature: the modules import nothing but the
// wstream module (no WASI) and export every checkpoint hook.
func TestModuleExports(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckModule(t, name, twins[name]) })
	}
}

// twins are the examples with a Go twin, whose plan they export.
var twins = map[string]bool{"wordcount": true, "window": true}

// TestModulePlans checks the ABI version and that each Rust example exports
// exactly the plan of its Go twin, and that the others export none.
func TestModulePlans(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckPlan(t, name, twins[name]) })
	}
}

func TestWordcount(t *testing.T) {
	wasmtest.CheckWordcount(t, newHost(t, "wordcount"))
}

// randomLines makes lines of words separated by every kind of white space
// Go's unicode.IsSpace knows, by near misses of their UTF-8 encodings and by
// invalid UTF-8.
func randomLines(n int) []abi.Record {
	return wasmtest.RandomLines(n, "\u200b", "\u180e", "\u2060", "\ufeff",
		"\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80", "\xe1\x9a", "\xe2\x81\x9f\x9f", "\x1f", "\x7f")
}

// TestMatchesGo runs the Rust wordcount and its Go twin on the same input
// and checks that they emit the same bytes.
func TestMatchesGo(t *testing.T) {
	lang.CompareWordcount(t, randomLines(2000))
}

func TestWindow(t *testing.T) {
	wasmtest.CheckWindow(t, newHost(t, "window", wasmtest.WithOutputs(wasmtest.WindowOutputs...)))
}

// TestWindowMatchesGo runs the Rust window and its Go twin on the same
// shuffled input, with the watermark advancing between batches so that
// some records are late, and checks that both emit the same records on
// both outputs and leave no state or timers.
func TestWindowMatchesGo(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	var steps []wasmtest.WindowStep
	wm := int64(-3000)
	for range 40 {
		var recs []abi.Record
		for range rnd.IntN(30) {
			// Around the watermark: some behind it (late), most ahead.
			ts := wm + int64(rnd.IntN(6000)) - 1500
			v := strconv.Itoa(rnd.IntN(2000) - 1000)
			recs = append(recs, wasmtest.Rec(fmt.Sprintf("sensor-%d", rnd.IntN(5)), v, ts))
		}
		wm += int64(rnd.IntN(700))
		steps = append(steps, wasmtest.WindowStep{Recs: recs, Watermark: wm})
	}
	// Extremes: the first and last windows of the int64 range.
	steps = append(steps, wasmtest.WindowStep{Recs: []abi.Record{wasmtest.Rec("edge", "1", math.MaxInt64), wasmtest.Rec("edge", "2", math.MinInt64+5000)}, Watermark: wm})

	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, ``, `{"size":9223372036854775807}`} {
		lang.CompareWindow(t, cfg, steps)
	}
}

func TestWindowErrors(t *testing.T) {
	lang.CheckWindowFailures(t, []wasmtest.WindowFailure{
		{Name: "zero size", Config: `{"size":0}`, Want: "config size must be a positive number of milliseconds, got 0"},
		{Name: "negative size", Config: `{"size":-5}`, Want: "got -5"},
		{Name: "string size", Config: `{"size":"x"}`, Want: `config member "size" is a string, not an integer`},
		{Name: "fraction", Config: `{"size":1.5}`, Want: `config member "size": 1.5 is not an integer`},
		{Name: "not JSON", Config: `{"size":`, Want: `config "{\"size\":": not a JSON object`},
		{Name: "no late output", Config: `{}`, Outputs: []string{"main"}, Want: `the window vertex needs outputs ["main","late"]: output "late": bad output`},
		{Name: "bad value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)},
			Want: `operator "window": process: record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{Name: "overflow", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)},
			Want: `value "9223372036854775808" overflows int64`},
	}, true)
	// The value errors read like the Go module's.
	for _, v := range []string{"x1", "9223372036854775808", "", "\xff\n"} {
		var msgs []string
		for _, module := range []string{"window", "go/window"} {
			h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
			h.MustOpen(0, "window", "")
			st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{wasmtest.Rec("k\x00", v, 5)})
			if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 {
				t.Fatalf("%s value %q: status %d, error %v, failures %q", module, v, st, err, h.Failures)
			}
			msgs = append(msgs, h.Failures[0])
		}
		if msgs[0] != msgs[1] {
			t.Errorf("value %q: Rust failed with %q, Go with %q", v, msgs[0], msgs[1])
		}
	}
}
