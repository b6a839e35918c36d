package cexamples_test

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/internal/wasmtest"
)

var modules = []string{"wordcount", "mapfilter", "window", "testops", "conformance"}

// planless are the modules that carry no plan: tests build their own.
var planless = map[string]bool{"testops": true, "conformance": true}

// TestModuleExports checks every C module's exports and imports against
// abi/ABI.md, signature by signature: the C modules import nothing but the
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
			if _, ok := compiled.ExportedFunctions()[abi.ExportPlan]; ok != !planless[name] {
				t.Errorf("export %s present = %v, want %v", abi.ExportPlan, ok, !planless[name])
			}
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				want, ok := wasmtest.Imports[fn]
				switch {
				case mod != abi.ImportModule:
					t.Errorf("import %s.%s: a C module imports from %s only", mod, fn, abi.ImportModule)
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

// TestModulePlans checks the ABI version and that each C example exports
// exactly the plan of its Go twin.
func TestModulePlans(t *testing.T) {
	for _, name := range []string{"wordcount", "mapfilter", "window"} {
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
		"\u2030", "\u3001", "\u1681", "\u00a1", "\u0084", "\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80",
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

// TestMatchesGo runs the C examples and their Go twins on the same input
// and checks that they emit the same bytes.
func TestMatchesGo(t *testing.T) {
	lines := randomLines(2000)
	run := func(module string, ops []string, cfg string, in []abi.Record, final bool) []abi.Record {
		h := newHost(t, module)
		for i, op := range ops {
			h.MustOpen(int32(i), op, cfg)
		}
		h.MustProcess(0, in...)
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
	same := func(what string, c, g []abi.Record) {
		t.Helper()
		if len(c) != len(g) {
			t.Fatalf("%s: C emitted %d records, Go %d", what, len(c), len(g))
		}
		for i := range c {
			if c[i].Port != g[i].Port || c[i].Timestamp != g[i].Timestamp || string(c[i].Key) != string(g[i].Key) || string(c[i].Value) != string(g[i].Value) {
				t.Fatalf("%s: record %d: C %d %d %q=%q, Go %d %d %q=%q", what, i, c[i].Port, c[i].Timestamp, c[i].Key, c[i].Value, g[i].Port, g[i].Timestamp, g[i].Key, g[i].Value)
			}
		}
	}

	cWords := run("wordcount", []string{"split"}, "", lines, false)
	same("split", cWords, run("go/wordcount", []string{"split"}, "", lines, false))
	if len(cWords) < 2000 {
		t.Fatalf("split emitted only %d words from 2000 lines", len(cWords))
	}
	same("count", run("wordcount", []string{"split", "count"}, "", lines, true), run("go/wordcount", []string{"split", "count"}, "", lines, true))

	values := slices.Clone(lines)
	for i := range values {
		values[i].Key = []byte(fmt.Sprintf("k%d", i))
		values[i].Value = append(values[i].Value, "abcxyz{`@[AZ az"[:i%16]...)
	}
	same("upper", run("mapfilter", []string{"upper"}, "", values, false), run("go/mapfilter", []string{"upper"}, "", values, false))
	same("upper+filter", run("mapfilter", []string{"upper", "filter"}, `{"contains":"A"}`, values, false),
		run("go/mapfilter", []string{"upper", "filter"}, `{"contains":"A"}`, values, false))
}

func TestMapFilter(t *testing.T) {
	h := newHost(t, "mapfilter")
	h.MustOpen(0, "upper", "")
	h.MustOpen(1, "filter", `{"contains":"LO"}`)
	h.MustOpen(2, "filter", "")
	h.MustOpen(3, "filter", ` { "other": [1, {"contains": "no"}], "contains" : "\u00fcN\u00efCODE LO \"" } `)
	in := []abi.Record{wasmtest.Rec("k1", "hello", 1), wasmtest.Rec("k2", "World 42! abcdefghijklmnopqrstuvwxyz", 2), wasmtest.Rec("", "", 3), wasmtest.Rec("k4", "ünïcode lo \"", 4)}
	want := []string{"k1=HELLO@1", "k2=WORLD 42! ABCDEFGHIJKLMNOPQRSTUVWXYZ@2", "=@3", "k4=üNïCODE LO \"@4"}
	upper := wasmtest.CheckUpper(t, h, 0, in, want)

	keys := func(op int32) []string {
		h.MustProcess(op, upper...)
		var got []string
		for _, r := range h.Take() {
			got = append(got, string(r.Key))
		}
		return got
	}
	if got, want := keys(1), []string{"k1", "k4"}; !slices.Equal(got, want) {
		t.Fatalf("filter contains LO kept keys %q, want %q", got, want)
	}
	if got := keys(2); len(got) != len(upper) {
		t.Fatalf("filter without config kept %d of %d records, want all", len(got), len(upper))
	}
	if got, want := keys(3), []string{"k4"}; !slices.Equal(got, want) {
		t.Fatalf("filter with an escaped contains kept keys %q, want %q", got, want)
	}
	for op := int32(0); op < 4; op++ {
		h.MustClose(op)
	}

	for _, tc := range []struct{ cfg, want string }{
		{`{"contains":5}`, `operator "filter": open: config "{\"contains\":5}": member "contains" is a number, not a string`},
		{`{"contains":"x"`, `operator "filter": open: config "{\"contains\":\"x\"": not a JSON object`},
		{`["contains"]`, `not a JSON object`},
		{`{"contains":"x"} x`, `not a JSON object`},
		{`{"contains":"\q"}`, `not a JSON object`},
	} {
		h := newHost(t, "mapfilter")
		st, err := h.OpenOp(0, "filter", tc.cfg)
		if err != nil || st != abi.StatusGuestError || len(h.Failures) != 1 || !strings.Contains(h.Failures[0], tc.want) {
			t.Errorf("open filter with %s: status %d, error %v, failures %q; want guest error containing %q", tc.cfg, st, err, h.Failures, tc.want)
		}
		// The slot stayed closed: opening it again works.
		h.MustOpen(0, "filter", `{"contains":null}`)
	}
}
