package rustexamples_test

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/internal/wasmtest"
)

var modules = []string{"wordcount", "window", "conformance", "testops"}

// TestModuleExports checks every Rust module's exports and imports against
// abi/ABI.md, signature by signature: the modules import nothing but the
// wstream module (no WASI) and export every checkpoint hook.
func TestModuleExports(t *testing.T) {
	// The SDK implements every hook; only the plan is up to the module.
	required := maps.Clone(wasmtest.RequiredExports)
	optional := map[string]wasmtest.Sig{}
	for export, want := range wasmtest.OptionalExports {
		if export == abi.ExportPlan {
			optional[export] = want
		} else {
			required[export] = want
		}
	}
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			compiled := wasmtest.Compile(t, moduleBytes(t, name))
			wasmtest.CheckExports(t, compiled, required, optional)
			hasPlan := name == "wordcount" || name == "window"
			if _, ok := compiled.ExportedFunctions()[abi.ExportPlan]; ok != hasPlan {
				t.Errorf("export %s present = %v, want %v", abi.ExportPlan, ok, hasPlan)
			}
			if len(compiled.ImportedMemories()) != 0 {
				t.Errorf("the module imports its memory; it must define it")
			}
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				want, ok := wasmtest.Imports[fn]
				switch {
				case mod != abi.ImportModule:
					t.Errorf("import %s.%s: a Rust module imports from %s only", mod, fn, abi.ImportModule)
				case !ok:
					t.Errorf("import %s.%s: not a function of abi/ABI.md", mod, fn)
				case !slices.Equal(imp.ParamTypes(), want.Params) || !slices.Equal(imp.ResultTypes(), want.Results):
					t.Errorf("import %s: params %v results %v, want %v %v", fn, imp.ParamTypes(), imp.ResultTypes(), want.Params, want.Results)
				}
			}
		})
	}
}

// goPlan returns the plan constant of the Go example examples/wasm/go/NAME.
func goPlan(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(testmod.Root(), "examples", "wasm", "go", name, "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name == "plan" {
					lit := vs.Values[i].(*ast.BasicLit)
					return constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
				}
			}
		}
	}
	t.Fatalf("%s has no const plan", path)
	return ""
}

// TestModulePlans checks the ABI version and that each Rust example exports
// exactly the plan of its Go twin, and that the others export none.
func TestModulePlans(t *testing.T) {
	for _, name := range []string{"wordcount", "window"} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			h.MustABIVersion()
			b := h.MustPlan()
			if b == nil {
				t.Fatalf("wstream_plan = 0, want the plan of the Go example")
			}
			if want := goPlan(t, name); string(b) != want {
				t.Fatalf("plan differs from the Go example's:\n%s\nwant\n%s", b, want)
			}
		})
	}
}

func TestWordcount(t *testing.T) {
	wasmtest.CheckWordcount(t, newHost(t, "wordcount"))
}

// randomLines makes lines of words separated by every kind of white space
// Go's unicode.IsSpace knows, by near misses of their UTF-8 encodings and by
// invalid UTF-8.
func randomLines(n int) []abi.Record {
	pieces := []string{
		"a", "bb", "word", "naïve", "日本", "x\u200by", // U+200B is not a space
		" ", "\t", "\n", "\v", "\f", "\r", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2005", "\u200a",
		"\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
		"\u2030", "\u3001", "\u1681", "\u00a1", "\u0084", "\u200b", "\u180e", "\u2060", "\ufeff",
		"\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80", "\xe1\x9a", "\xe2\x81\x9f\x9f", "\x1f", "\x7f",
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	recs := make([]abi.Record, n)
	for i := range recs {
		var b strings.Builder
		for range rnd.IntN(12) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		recs[i] = wasmtest.Rec("", b.String(), int64(i))
	}
	return recs
}

// same fails unless two modules emitted the same records, byte for byte.
func same(t *testing.T, what string, rust, goRecs []abi.Record) {
	t.Helper()
	if len(rust) != len(goRecs) {
		t.Fatalf("%s: Rust emitted %d records, Go %d", what, len(rust), len(goRecs))
	}
	for i := range rust {
		r, g := rust[i], goRecs[i]
		if r.Port != g.Port || r.Timestamp != g.Timestamp || string(r.Key) != string(g.Key) || string(r.Value) != string(g.Value) {
			t.Fatalf("%s: record %d: Rust %d %d %q=%q, Go %d %d %q=%q", what, i, r.Port, r.Timestamp, r.Key, r.Value, g.Port, g.Timestamp, g.Key, g.Value)
		}
	}
}

// TestMatchesGo runs the Rust wordcount and its Go twin on the same input
// and checks that they emit the same bytes.
func TestMatchesGo(t *testing.T) {
	lines := randomLines(2000)
	run := func(module string, ops []string, final bool) []abi.Record {
		h := newHost(t, module)
		for i, op := range ops {
			h.MustOpen(int32(i), op, "")
		}
		h.MustProcess(0, lines...)
		out := h.Take()
		if len(ops) > 1 {
			h.MustProcess(1, out...)
			out = h.Take()
		}
		if final {
			h.Advance(int32(len(ops)-1), abi.MaxWatermark)
			out = h.Take()
		}
		return out
	}
	words := run("wordcount", []string{"split"}, false)
	same(t, "split", words, run("go/wordcount", []string{"split"}, false))
	if len(words) < 2000 {
		t.Fatalf("split emitted only %d words from 2000 lines", len(words))
	}
	same(t, "count", run("wordcount", []string{"split", "count"}, true), run("go/wordcount", []string{"split", "count"}, true))
}

func TestWindow(t *testing.T) {
	h := newHost(t, "window", wasmtest.WithOutputs("main", "late"))
	h.MustOpen(0, "window", `{"size":1000}`)

	// Out of order, across windows, one at a negative time.
	h.MustProcess(0,
		wasmtest.Rec("a", "1", 100),
		wasmtest.Rec("a", "2", 1500),
		wasmtest.Rec("b", "5", 900),
		wasmtest.Rec("a", "3", 999),
		wasmtest.Rec("a", "4", -1),
	)
	h.Advance(0, 999)
	h.MustProcess(0,
		wasmtest.Rec("a", "7", 500), // its window [0,1000) closed at watermark 999: late
		wasmtest.Rec("a", "6", 1999),
		wasmtest.Rec("b", "1", 1000),
	)
	// The sums are int64s, 8 bytes little-endian, under the window end as
	// 8 bytes big-endian: the state layout of the Go module.
	ns := "\x00\x00\x00\x00\x00\x00\x07\xd0"
	if v := h.State[wasmtest.StateKey{Handle: h.States["sum"], Key: "a", NS: ns}]; string(v) != "\x08\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("sum of a in window [1000,2000) = %q, want 8 as 8 bytes little-endian", v)
	}
	if !h.Timers[wasmtest.TimerKey{Domain: abi.TimeEvent, Key: "a", NS: ns, TS: 1999}] {
		t.Errorf("no event timer of a at 1999 under the window end: %v", h.Timers)
	}
	h.Advance(0, abi.MaxWatermark)
	wantRecords(t, "window", h.Take(),
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

// TestWindowMatchesGo runs the Rust window and its Go twin on the same
// shuffled input, with the watermark advancing between batches so that
// some records are late, and checks that both emit the same records on
// both outputs, and keep the same state and timers.
func TestWindowMatchesGo(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	type step struct {
		recs []abi.Record
		wm   int64
	}
	var steps []step
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
		steps = append(steps, step{recs, wm})
	}
	// Extremes: the first and last windows of the int64 range.
	steps = append(steps, step{[]abi.Record{wasmtest.Rec("edge", "1", math.MaxInt64), wasmtest.Rec("edge", "2", math.MinInt64+5000)}, wm})

	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, ``, `{"size":9223372036854775807}`} {
		run := func(module string) ([]abi.Record, *wasmtest.Host) {
			h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
			h.MustOpen(0, "window", cfg)
			for _, s := range steps {
				h.MustProcess(0, s.recs...)
				h.Advance(0, s.wm)
			}
			h.Advance(0, abi.MaxWatermark)
			return h.Take(), h
		}
		r, rh := run("window")
		g, gh := run("go/window")
		same(t, "window "+cfg, r, g)
		late := 0
		for _, rec := range r {
			if rec.Port == 1 {
				late++
			}
		}
		if late == 0 || late == len(r) {
			t.Errorf("window %s: %d of %d records late; want both kinds", cfg, late, len(r))
		}
		if !maps.EqualFunc(rh.State, gh.State, func(a, b []byte) bool { return string(a) == string(b) }) || !maps.Equal(rh.Timers, gh.Timers) {
			t.Errorf("window %s: Rust and Go left different state or timers", cfg)
		}
	}
}

func TestWindowErrors(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		outputs   []string
		process   []abi.Record
		want      string
	}{
		{"zero size", `{"size":0}`, []string{"main", "late"}, nil, "config size must be a positive number of milliseconds, got 0"},
		{"negative size", `{"size":-5}`, []string{"main", "late"}, nil, "got -5"},
		{"string size", `{"size":"x"}`, []string{"main", "late"}, nil, `config member "size" is a string, not an integer`},
		{"fraction", `{"size":1.5}`, []string{"main", "late"}, nil, `config member "size": 1.5 is not an integer`},
		{"not JSON", `{"size":`, []string{"main", "late"}, nil, `config "{\"size\":": not a JSON object`},
		{"no late output", `{}`, []string{"main"}, nil, `the window vertex needs outputs ["main","late"]: output "late": bad output`},
		{"bad value", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)},
			`operator "window": process: record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{"overflow", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)},
			`value "9223372036854775808" overflows int64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, "window", wasmtest.WithOutputs(tc.outputs...))
			st, err := h.OpenOp(0, "window", tc.cfg)
			if tc.process != nil {
				h.MustOK("open", st, err)
				st, err = h.ProcessCtx(h.Ctx, 0, tc.process)
			}
			// Every failure names the operator and the phase.
			phase := `operator "window": open: `
			if tc.process != nil {
				phase = `operator "window": process: `
			}
			if len(h.Failures) == 1 && !strings.HasPrefix(h.Failures[0], phase) {
				t.Errorf("failure %q does not start with %q", h.Failures[0], phase)
			}
			wantFailure(t, h, tc.name, st, err, abi.StatusGuestError, tc.want)
			if len(h.Out) != 0 {
				t.Errorf("a failed call emitted %d records", len(h.Out))
			}
		})
	}
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
