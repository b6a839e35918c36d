package watexamples_test

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/internal/wasmtest"
)

// modules are the WAT modules: the examples and the skeleton.
var modules = []string{"wordcount", "window", "conformance", "reference"}

// TestModuleExports checks every WAT module's exports and imports against
// abi/ABI.md, signature by signature: the modules import nothing but the
// wstream module and export every checkpoint hook; the examples with a Go
// twin export its plan.
func TestModuleExports(t *testing.T) {
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
			wantPlan := name == "wordcount" || name == "window"
			if _, ok := compiled.ExportedFunctions()[abi.ExportPlan]; ok != wantPlan {
				t.Errorf("export %s present = %v, want %v", abi.ExportPlan, ok, wantPlan)
			}
			if len(compiled.ImportedMemories()) != 0 {
				t.Errorf("the module imports a memory")
			}
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				want, ok := wasmtest.Imports[fn]
				switch {
				case mod != abi.ImportModule:
					t.Errorf("import %s.%s: a WAT module imports from %s only", mod, fn, abi.ImportModule)
				case !ok:
					t.Errorf("import %s.%s: not a function of abi/ABI.md", mod, fn)
				case !slices.Equal(imp.ParamTypes(), want.Params) || !slices.Equal(imp.ResultTypes(), want.Results):
					t.Errorf("import %s: params %v results %v, want %v %v", fn, imp.ParamTypes(), imp.ResultTypes(), want.Params, want.Results)
				}
			}
			// The skeleton shows every import of the ABI.
			if name == "reference" && len(compiled.ImportedFunctions()) != len(wasmtest.Imports) {
				t.Errorf("the reference module imports %d functions, want all %d of the ABI", len(compiled.ImportedFunctions()), len(wasmtest.Imports))
			}
		})
	}
}

// dataSegment matches an active data segment at a constant address; its
// strings follow.
var (
	dataSegment = regexp.MustCompile(`\(data \(i32\.const (0x[0-9a-f]+)\)((?:\s*"(?:[^"\\]|\\.)*")+)\)`)
	watString   = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

// watStringLen is the length in bytes of a WAT string literal's contents.
func watStringLen(t *testing.T, s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			switch {
			case strings.IndexByte(`nt"'\`, s[i]) >= 0:
			case i+1 < len(s) && strings.IndexByte("0123456789abcdefABCDEF", s[i]) >= 0:
				i++
			default:
				t.Fatalf("unknown escape in WAT string %q", s)
			}
		}
		n++
	}
	return n
}

// TestDataSegments checks that the constant data of every module, laid out
// by hand at fixed addresses, neither overlaps itself nor the fixed areas
// below 0x2000, nor runs into the heap at 0x10000; and that every
// string used as a C string ends with NUL.
func TestDataSegments(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(testmod.Root(), filepath.FromSlash(watFile(name))))
			if err != nil {
				t.Fatal(err)
			}
			type seg struct{ start, end int }
			var segs []seg
			for _, m := range dataSegment.FindAllStringSubmatch(string(src), -1) {
				start, err := strconv.ParseInt(m[1], 0, 64)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				var last string
				for _, s := range watString.FindAllStringSubmatch(m[2], -1) {
					n += watStringLen(t, s[1])
					last = s[1]
				}
				if !strings.HasSuffix(last, `\00`) {
					t.Errorf("data at %s does not end with NUL", m[1])
				}
				segs = append(segs, seg{int(start), int(start) + n})
			}
			if len(segs) < 20 {
				t.Fatalf("found only %d data segments", len(segs))
			}
			sort.Slice(segs, func(i, j int) bool { return segs[i].start < segs[j].start })
			for i, s := range segs {
				if s.start < 0x2000 || s.end > 0x10000 {
					t.Errorf("data [%#x, %#x) lies outside [0x2000, 0x10000)", s.start, s.end)
				}
				if i > 0 && segs[i-1].end > s.start {
					t.Errorf("data [%#x, %#x) overlaps [%#x, %#x)", segs[i-1].start, segs[i-1].end, s.start, s.end)
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

// TestModulePlans checks the ABI version and that each WAT example exports
// exactly the plan of its Go twin, and the others none.
func TestModulePlans(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			h.MustABIVersion()
			if h.PlanFn == nil {
				return
			}
			b := h.MustPlan()
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
		"\u2030", "\u3001", "\u1681", "\u00a1", "\u0084", "\u200b", "\u2027", "\u202e", "\u205e", "\u0008", "\u000e", "\u001f",
		"\xc2", "\xe2\x80", "\xe3\x80", "\xe1\x9a", "\xff", "\xe2\x80\x80\x80", "\xc2\xc2\xa0", "\xe2\xe2\x80\x80",
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	recs := make([]abi.Record, n)
	for i := range recs {
		var b strings.Builder
		for range rnd.IntN(12) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		recs[i] = wasmtest.Rec("", b.String(), int64(i)-int64(n/2))
	}
	return recs
}

// same fails the test unless two modules emitted the same records, byte for
// byte, in the same order.
func same(t *testing.T, what string, w, g []abi.Record) {
	t.Helper()
	if len(w) != len(g) {
		t.Fatalf("%s: WAT emitted %d records, Go %d", what, len(w), len(g))
	}
	for i := range w {
		if w[i].Port != g[i].Port || w[i].Timestamp != g[i].Timestamp || string(w[i].Key) != string(g[i].Key) || string(w[i].Value) != string(g[i].Value) {
			t.Fatalf("%s: record %d: WAT %d %d %q=%q, Go %d %d %q=%q", what, i, w[i].Port, w[i].Timestamp, w[i].Key, w[i].Value, g[i].Port, g[i].Timestamp, g[i].Key, g[i].Value)
		}
	}
}

// TestWordcountMatchesGo runs the WAT wordcount and its Go twin on the same
// input and checks that they emit the same bytes and leave the same state.
func TestWordcountMatchesGo(t *testing.T) {
	lines := randomLines(3000)
	run := func(module string, final bool) ([]abi.Record, *wasmtest.Host) {
		h := newHost(t, module)
		h.MustOpen(0, "split", "")
		h.MustOpen(1, "count", "")
		h.MustProcess(0, lines...)
		words := h.Take()
		if !final {
			return words, h
		}
		// Two batches, so that counts carry over through state.
		h.MustProcess(1, words[:len(words)/2]...)
		h.MustProcess(1, words[len(words)/2:]...)
		if out := h.Take(); len(out) != 0 {
			t.Fatalf("%s: count emitted %d records before the end of input", module, len(out))
		}
		h.Advance(1, abi.MaxWatermark)
		return h.Take(), h
	}
	w, _ := run("wordcount", false)
	g, _ := run("go/wordcount", false)
	same(t, "split", w, g)
	if len(w) < 3000 {
		t.Fatalf("split emitted only %d words from 3000 lines", len(w))
	}
	// State before the timers fire: the same keys, the same 8-byte counts.
	hw, hg := newHost(t, "wordcount"), newHost(t, "go/wordcount")
	for _, h := range []*wasmtest.Host{hw, hg} {
		h.MustOpen(0, "count", "")
		h.MustProcess(0, w...)
	}
	if fmt.Sprint(hw.State) != fmt.Sprint(hg.State) || fmt.Sprint(hw.Timers) != fmt.Sprint(hg.Timers) {
		t.Fatalf("count state differs:\nWAT %v\nGo  %v", hw.State, hg.State)
	}
	w, _ = run("wordcount", true)
	g, _ = run("go/wordcount", true)
	same(t, "count", w, g)
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
	h.MustClose(0)
}

// windowInput makes batches of records over a few keys with timestamps
// mostly increasing but out of order, some far behind the watermark (late),
// some near the ends of the int64 range, and values with signs.
func windowInput(batches, per int) [][]abi.Record {
	rnd := rand.New(rand.NewPCG(3, 4))
	var out [][]abi.Record
	now := int64(-5000)
	for range batches {
		recs := make([]abi.Record, per)
		for i := range recs {
			ts := now + rnd.Int64N(3000) - 1500
			switch rnd.IntN(40) {
			case 0:
				ts = math.MaxInt64 - rnd.Int64N(3)
			case 1:
				ts = math.MinInt64 + rnd.Int64N(3)
			case 2:
				ts = now - 10000 // late
			}
			v := strconv.FormatInt(rnd.Int64N(2000)-1000, 10)
			if rnd.IntN(10) == 0 {
				v = "+" + strconv.FormatInt(rnd.Int64N(100), 10)
			}
			recs[i] = wasmtest.Rec(fmt.Sprintf("sensor-%d", rnd.IntN(7)), v, ts)
			now += rnd.Int64N(40)
		}
		out = append(out, recs)
	}
	return out
}

// TestWindowMatchesGo runs the WAT window and its Go twin on the same
// out-of-order input with late records, advancing the watermark between
// batches, and checks that both outputs (main and late) are the same bytes.
func TestWindowMatchesGo(t *testing.T) {
	in := windowInput(40, 200)
	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, `{"size":9223372036854775807}`, ``} {
		run := func(module string) []abi.Record {
			h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
			h.MustOpen(0, "window", cfg)
			var out []abi.Record
			for i, recs := range in {
				h.MustProcess(0, recs...)
				h.Advance(0, recs[len(recs)-1].Timestamp-int64(i%5)*300)
				out = append(out, h.Take()...)
			}
			h.Advance(0, abi.MaxWatermark)
			out = append(out, h.Take()...)
			if len(h.State) != 0 {
				t.Errorf("%s: %d state entries left", module, len(h.State))
			}
			return out
		}
		w := run("window")
		same(t, "window "+cfg, w, run("go/window"))
		late := 0
		for _, r := range w {
			late += int(r.Port)
		}
		if late == 0 || late == len(w) {
			t.Fatalf("config %s: %d of %d records late, want some of both", cfg, late, len(w))
		}
	}
}

// TestWindowConfig opens the WAT window and its Go twin with each config
// and checks that they accept and refuse the same ones, and that what they
// accept sets the same size.
func TestWindowConfig(t *testing.T) {
	configs := []string{
		``, `{}`, `null`, ` {"size" : 250 } `, "\t{\"size\":250}\r\n", `{"size":null}`, `{"SIZE":250}`, `{"Size":250}`,
		`{"si\u007ae":250}`, `{"size":1,"size":250}`, `{"size":250,"size":null}`, `{"other":[1,{"a":"b\"\\\/\b\f\n\r\t\u00e9"}],"size":250}`,
		`{"size":{"size":3}}`, `{"x":{"size":3},"size":250}`, `{"size":-0}`, `{"size":0}`, `{"size":-5}`, `{"size":"250"}`,
		`{"size":250.0}`, `{"size":2.5e2}`, `{"size":1e3}`, `{"size":9223372036854775808}`, `{"size":true}`, `{"size":[250]}`,
		`[]`, `"x"`, `250`, `true`, `{"size":250`, `{"size":250}}`, `{"size":250} x`, `{"size":0250}`, `{"size":+250}`,
		`{"size":-}`, `{size:250}`, `{"size":250,}`, `{,"size":250}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}",
		"{\"a\":\"\xff\"}", `{"a":[1,]}`, `{"a":[,1]}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-1.5E+3}`, `{"a":nul}`,
		`{"a" "b"}`, `{"a":1 "b":2}`, `{"a":[]}`, `{"a":{}}`, `{"a":[[]],"b":{"c":{}}}`, `{"size" :  3 ,"a":false}`,
		strings.Repeat("[", 200) + strings.Repeat("]", 200), `{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"size":250}`,
		`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"size":250}`,
	}
	for _, cfg := range configs {
		result := func(module string) string {
			h := newHost(t, module, wasmtest.WithOutputs("main", "late"))
			st, err := h.OpenOp(0, "window", cfg)
			if err != nil {
				t.Fatalf("%s: open with %q: %v", module, cfg, err)
			}
			if st != abi.StatusOK {
				if st != abi.StatusGuestError || len(h.Failures) != 1 || !strings.Contains(h.Failures[0], `operator "window": open: `) {
					t.Errorf("%s: open with %q: status %d, failures %q; want a guest error naming the operator", module, cfg, st, h.Failures)
				}
				return "refused"
			}
			// The window of a record at 1 ends at the size (default 1000).
			h.MustProcess(0, wasmtest.Rec("k", "1", 1))
			h.Advance(0, abi.MaxWatermark)
			out := h.Take()
			if len(out) != 1 {
				t.Fatalf("%s: config %q: %d records, want 1", module, cfg, len(out))
			}
			return string(out[0].Value)
		}
		w, g := result("window"), result("go/window")
		if w != g {
			t.Errorf("config %.80q: WAT %s, Go %s", cfg, w, g)
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
		{"zero size", `{"size":0}`, []string{"main", "late"}, nil, "open: config size must be a positive number of milliseconds, got 0"},
		{"bad config", `{"size":"x"}`, []string{"main", "late"}, nil, `open: config "{\"size\":\"x\"}": member "size" is not an integer`},
		{"bad JSON", `{"size":1`, []string{"main", "late"}, nil, `open: config "{\"size\":1": invalid JSON at offset 9`},
		{"no late output", `{}`, []string{"main"}, nil, `outputs ["main","late"]: output "late": status -4 (BAD_OUTPUT)`},
		{"bad value", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, `process: record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{"empty value", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k\n", "-", 2)}, `process: record 0 of 1 (key "k\n"): value "-" is not a decimal integer`},
		{"overflow", `{}`, []string{"main", "late"}, []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, `value "9223372036854775808" overflows int64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, "window", wasmtest.WithOutputs(tc.outputs...))
			st, err := h.OpenOp(0, "window", tc.cfg)
			if tc.process != nil {
				h.MustOK("open", st, err)
				st, err = h.ProcessCtx(h.Ctx, 0, tc.process)
			}
			if err != nil || st != abi.StatusGuestError {
				t.Fatalf("status %d (%s), error %v; want %d (guest error)", st, abi.StatusText(st), err, abi.StatusGuestError)
			}
			if len(h.Failures) != 1 || !strings.Contains(h.Failures[0], tc.want) || !strings.HasPrefix(h.Failures[0], `operator "window": `) {
				t.Fatalf("failure messages %q, want one naming the operator and containing %q", h.Failures, tc.want)
			}
			if len(h.Out) != 0 {
				t.Errorf("a failed call emitted %d records", len(h.Out))
			}
		})
	}
	// The most negative value sums, and a timer namespace that is not a
	// window end fails on_timer.
	h := newHost(t, "window", wasmtest.WithOutputs("main", "late"))
	h.MustOpen(0, "window", "")
	h.MustProcess(0, wasmtest.Rec("k", "-9223372036854775808", 5))
	h.Timers[wasmtest.TimerKey{Domain: abi.TimeEvent, Key: "k", NS: "short", TS: 3}] = true
	st, err := h.Fire(0, abi.TimeEvent, 3)
	if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 ||
		h.Failures[0] != `operator "window": on_timer: event time timer at 3 (key "k"): timer namespace has 5 bytes, want an 8-byte window end` {
		t.Fatalf("a timer with a 5-byte namespace: status %d, error %v, failures %q", st, err, h.Failures)
	}
	h.Advance(0, abi.MaxWatermark)
	if out := h.Take(); len(out) != 1 || string(out[0].Value) != "0,1000,-9223372036854775808" {
		t.Fatalf("window of the most negative value: %v", out)
	}
}
