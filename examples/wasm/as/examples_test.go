package asexamples_test

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

var modules = []string{"wordcount", "window", "conformance"}

// TestModuleExports checks every AssemblyScript module's exports and
// imports against abi/ABI.md, signature by signature: the modules import
// nothing but the wstream module (no env.abort, no WASI) and export every
// checkpoint hook and wstream_plan.
func TestModuleExports(t *testing.T) {
	// The SDK implements every optional export.
	required := maps.Clone(wasmtest.RequiredExports)
	maps.Copy(required, wasmtest.OptionalExports)
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			compiled := wasmtest.Compile(t, moduleBytes(t, name))
			wasmtest.CheckExports(t, compiled, required, nil)
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				want, ok := wasmtest.Imports[fn]
				switch {
				case mod != abi.ImportModule:
					t.Errorf("import %s.%s: an AssemblyScript module imports from %s only", mod, fn, abi.ImportModule)
				case !ok:
					t.Errorf("import %s.%s: not a function of abi/ABI.md", mod, fn)
				case !slices.Equal(imp.ParamTypes(), want.Params) || !slices.Equal(imp.ResultTypes(), want.Results):
					t.Errorf("import %s: params %v results %v, want %v %v", fn, imp.ParamTypes(), imp.ResultTypes(), want.Params, want.Results)
				}
			}
			if len(compiled.ImportedMemories()) != 0 {
				t.Errorf("the module imports its memory")
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

// TestModulePlans checks the ABI version and that each example exports
// exactly the plan of its Go twin; the conformance module has none.
func TestModulePlans(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			h.MustABIVersion()
			b := h.MustPlan()
			if name == "conformance" {
				if b != nil {
					t.Fatalf("wstream_plan returned %q, want 0 (no plan)", b)
				}
				return
			}
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
		"\u2030", "\u3001", "\u1681", "\u00a1", "\u0084", "\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80",
		"\xe1\x9a", "\xe2\x81\x9f", "\xe2\x80\xaf", "\xe2\x80\x8b",
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

// same fails the test unless the AssemblyScript and Go modules emitted the
// same records, byte for byte.
func same(t *testing.T, what string, as, g []abi.Record) {
	t.Helper()
	if len(as) != len(g) {
		t.Fatalf("%s: AssemblyScript emitted %d records, Go %d", what, len(as), len(g))
	}
	for i := range as {
		if as[i].Port != g[i].Port || as[i].Timestamp != g[i].Timestamp || string(as[i].Key) != string(g[i].Key) || string(as[i].Value) != string(g[i].Value) {
			t.Fatalf("%s: record %d: AssemblyScript %d %d %q=%q, Go %d %d %q=%q", what, i, as[i].Port, as[i].Timestamp, as[i].Key, as[i].Value, g[i].Port, g[i].Timestamp, g[i].Key, g[i].Value)
		}
	}
}

// TestMatchesGo runs the wordcount and window examples and their Go twins
// on the same input and checks that they emit the same bytes and leave the
// same state.
func TestMatchesGo(t *testing.T) {
	lines := randomLines(3000)
	wordcount := func(module string, ops []string, final bool) []abi.Record {
		h := newHost(t, module)
		for i, op := range ops {
			h.MustOpen(int32(i), op, "")
		}
		h.MustProcess(0, lines...)
		out := h.Take()
		if len(ops) > 1 {
			// Two batches, so that counts go through state.
			h.MustProcess(1, out[:len(out)/2]...)
			h.MustProcess(1, out[len(out)/2:]...)
			out = h.Take()
			if n := len(h.Timers); n == 0 {
				t.Fatalf("%s: count registered no timers", module)
			}
		}
		if final {
			h.Advance(int32(len(ops)-1), abi.MaxWatermark)
			out = h.Take()
			if len(h.State) != 0 {
				t.Errorf("%s: %d state entries left", module, len(h.State))
			}
		}
		return out
	}
	words := wordcount("wordcount", []string{"split"}, false)
	same(t, "split", words, wordcount("go/wordcount", []string{"split"}, false))
	if len(words) < 3000 {
		t.Fatalf("split emitted only %d words from 3000 lines", len(words))
	}
	same(t, "count", wordcount("wordcount", []string{"split", "count"}, true), wordcount("go/wordcount", []string{"split", "count"}, true))

	// Window: batches of records out of order, some late, some at negative
	// and extreme times, with the watermark advancing between batches.
	rnd := rand.New(rand.NewPCG(3, 4))
	type step struct {
		recs []abi.Record
		wm   int64
	}
	var steps []step
	wm := int64(-5000)
	for range 40 {
		var recs []abi.Record
		for range rnd.IntN(30) {
			ts := wm + int64(rnd.IntN(4000)) - 1500
			switch rnd.IntN(40) {
			case 0:
				ts = math.MaxInt64 - int64(rnd.IntN(3))
			case 1:
				ts = math.MinInt64 + int64(rnd.IntN(3))
			}
			v := strconv.Itoa(rnd.IntN(2000) - 1000)
			if rnd.IntN(10) == 0 {
				v = "+" + v[strings.IndexFunc(v, func(r rune) bool { return r != '-' }):]
			}
			recs = append(recs, wasmtest.Rec(fmt.Sprintf("sensor-%d", rnd.IntN(5)), v, ts))
		}
		wm += int64(rnd.IntN(600))
		steps = append(steps, step{recs, wm})
	}
	window := func(module, cfg string) []abi.Record {
		h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
		h.MustOpen(0, "window", cfg)
		var out []abi.Record
		for _, s := range steps {
			h.MustProcess(0, s.recs...)
			h.Advance(0, s.wm)
			out = append(out, h.Take()...)
		}
		h.Advance(0, abi.MaxWatermark)
		out = append(out, h.Take()...)
		h.MustClose(0)
		if len(h.State) != 0 || len(h.Timers) != 0 {
			t.Errorf("%s: %d state entries and %d timers left", module, len(h.State), len(h.Timers))
		}
		return out
	}
	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, ``, `{"Size":333}`, `{"size":null}`, `null`} {
		as := window("window", cfg)
		late := 0
		for _, r := range as {
			if r.Port == 1 {
				late++
			}
		}
		if late == 0 || late == len(as) {
			t.Fatalf("window %s: %d of %d records late; the input must have both", cfg, late, len(as))
		}
		same(t, "window "+cfg, as, window("go/window", cfg))
	}
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
	if v := h.State[wasmtest.StateKey{Handle: h.States["sum"], Key: "a", NS: "\x00\x00\x00\x00\x00\x00\x03\xe8"}]; string(v) != "\x04\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("sum of a in window [0,1000) = %q, want 4 as 8 bytes little-endian under the end 1000 big-endian", v)
	}
	h.Advance(0, 999)
	h.MustProcess(0,
		wasmtest.Rec("a", "7", 500), // its window [0,1000) closed at watermark 999: late
		wasmtest.Rec("a", "6", 1999),
		wasmtest.Rec("b", "1", 1000),
	)
	h.Advance(0, abi.MaxWatermark)

	var got []string
	for _, r := range h.Take() {
		got = append(got, fmt.Sprintf("%d %s=%s@%d", r.Port, r.Key, r.Value, r.Timestamp))
	}
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
	if len(h.State) != 0 || len(h.Timers) != 0 {
		t.Errorf("%d state entries and %d timers left, want none", len(h.State), len(h.Timers))
	}
}

// TestWindowErrors checks that the window operator fails where its Go twin
// does, with a message naming the operator and the cause.
func TestWindowErrors(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		outputs   []string
		process   []abi.Record
		want      string
	}{
		{"zero size", `{"size":0}`, []string{"main", "late"}, nil, "size must be a positive"},
		{"negative size", `{"size":-5}`, []string{"main", "late"}, nil, "got -5"},
		{"bad config", `{"size":"x"}`, []string{"main", "late"}, nil, `config "{\"size\":\"x\"}"`},
		{"fraction", `{"size":1.5}`, []string{"main", "late"}, nil, `1.5 is not an integer`},
		{"exponent", `{"size":1e3}`, []string{"main", "late"}, nil, `1e3 is not an integer`},
		{"too big", `{"size":9223372036854775808}`, []string{"main", "late"}, nil, `fits in 64 bits`},
		{"not JSON", `{"size":1000`, []string{"main", "late"}, nil, `not valid JSON`},
		{"not an object", `[1000]`, []string{"main", "late"}, nil, `not a JSON object`},
		{"no late output", `{}`, []string{"main"}, nil, `outputs ["main","late"]`},
		{"bad value", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, `record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{"empty value", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "", 2)}, `value "" is not a decimal integer`},
		{"overflow", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, "overflows int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, module := range []string{"window", "go/window"} {
				h := newHost(t, module, wasmtest.WithOutputs(tc.outputs...))
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

// TestMemoryStable runs the wordcount operators over many batches and
// checks that the module's memory stops growing once the garbage collector
// reached its working size: a long-running job must not grow it for ever.
func TestMemoryStable(t *testing.T) {
	h := newHost(t, "wordcount")
	h.MustOpen(0, "split", "")
	h.MustOpen(1, "count", "")
	lines := randomLines(500)
	round := func() {
		h.MustProcess(0, lines...)
		h.MustProcess(1, h.Take()...)
		h.Advance(1, abi.MaxWatermark)
		h.Take()
	}
	for range 50 {
		round()
	}
	pages, _ := h.Module.Memory().Grow(0)
	for range 200 {
		round()
	}
	if after, _ := h.Module.Memory().Grow(0); after != pages {
		t.Errorf("memory grew from %d to %d pages over 200 rounds after the warm-up", pages, after)
	}
}

// BenchmarkSplit measures the split operator on 1000-line batches and
// reports the cost per line, emit_batch included, next to its Go twin.
func BenchmarkSplit(b *testing.B) {
	for _, module := range []string{"wordcount", "go/wordcount"} {
		b.Run(module, func(b *testing.B) {
			h := newHost(b, module)
			h.Discard = true
			h.MustOpen(0, "split", "")
			recs := make([]abi.Record, 1000)
			for i := range recs {
				recs[i] = wasmtest.Rec("", fmt.Sprintf("the quick brown fox %05d jumps over", i), int64(i))
			}
			batch := abi.Encode(recs)
			args := []uint64{0, uint64(h.Write(batch)), uint64(len(batch))}
			b.ResetTimer()
			for b.Loop() {
				res, err := h.ProcessFn.Call(h.Ctx, args...)
				if err != nil || res[0] != 0 {
					b.Fatalf("process: %v %v %q", res, err, h.Failures)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/line")
			if h.Emitted != b.N*len(recs)*7 {
				b.Fatalf("emitted %d words, want %d", h.Emitted, b.N*len(recs)*7)
			}
		})
	}
}
