package cexamples_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
)

var modules = []string{"wordcount", "mapfilter", "testops"}

const i32, i64 = api.ValueTypeI32, api.ValueTypeI64

type sig struct{ params, results []api.ValueType }

func types(t ...api.ValueType) []api.ValueType { return t }

// The signatures of abi/ABI.md.
var (
	requiredExports = map[string]sig{
		abi.ExportABIVersion: {nil, types(i32)},
		abi.ExportAlloc:      {types(i32), types(i32)},
		abi.ExportOpen:       {types(i32, i32, i32, i32, i32), types(i32)},
		abi.ExportProcess:    {types(i32, i32, i32), types(i32)},
		abi.ExportOnTimer:    {types(i32, i32, i32), types(i32)},
		abi.ExportClose:      {types(i32), types(i32)},
	}
	optionalExports = map[string]sig{
		abi.ExportPlan:         {nil, types(i64)},
		abi.ExportPreBarrier:   {types(i32, i64), types(i32)},
		abi.ExportCkptComplete: {types(i32, i64), types(i32)},
		abi.ExportCkptAborted:  {types(i32, i64), types(i32)},
	}
	imports = map[string]sig{
		abi.ImportEmit:          {types(i32, i64, i32, i32, i32, i32), types(i32)},
		abi.ImportEmitBatch:     {types(i32, i32), types(i32)},
		abi.ImportOutputIndex:   {types(i32, i32), types(i32)},
		abi.ImportStateRegister: {types(i32, i32, i32), types(i32)},
		abi.ImportStateGet:      {types(i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStatePut:      {types(i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStateDelete:   {types(i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStateIter:     {types(i32, i32, i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportTimerRegister: {types(i32, i32, i32, i32, i32, i64), types(i32)},
		abi.ImportTimerDelete:   {types(i32, i32, i32, i32, i32, i64), types(i32)},
		abi.ImportWatermark:     {nil, types(i64)},
		abi.ImportProcTime:      {nil, types(i64)},
		abi.ImportLog:           {types(i32, i32, i32), nil},
		abi.ImportFail:          {types(i32, i32), nil},
	}
)

// TestModuleExports checks every C module's exports and imports against
// abi/ABI.md, signature by signature: the C modules import nothing but the
// wstream module (no WASI) and export every checkpoint hook.
func TestModuleExports(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig())
	defer rt.Close(ctx)
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			compiled, err := rt.CompileModule(ctx, moduleBytes(t, name))
			if err != nil {
				t.Fatal(err)
			}
			got := compiled.ExportedFunctions()
			check := func(export string, want sig, required bool) {
				fn, ok := got[export]
				if !ok {
					if required {
						t.Errorf("missing export %s", export)
					}
					return
				}
				if !slices.Equal(fn.ParamTypes(), want.params) || !slices.Equal(fn.ResultTypes(), want.results) {
					t.Errorf("export %s: params %v results %v, want %v %v", export, fn.ParamTypes(), fn.ResultTypes(), want.params, want.results)
				}
			}
			for export, want := range requiredExports {
				check(export, want, true)
			}
			for export, want := range optionalExports {
				// The SDK implements every hook; only the plan is up to the module.
				check(export, want, export != abi.ExportPlan)
			}
			if _, ok := got[abi.ExportPlan]; ok != (name != "testops") {
				t.Errorf("export %s present = %v, want %v", abi.ExportPlan, ok, name != "testops")
			}
			if _, ok := compiled.ExportedMemories()[abi.ExportMemory]; !ok {
				t.Errorf("missing export %s", abi.ExportMemory)
			}
			for _, imp := range compiled.ImportedFunctions() {
				mod, fn, _ := imp.Import()
				want, ok := imports[fn]
				switch {
				case mod != abi.ImportModule:
					t.Errorf("import %s.%s: a C module imports from %s only", mod, fn, abi.ImportModule)
				case !ok:
					t.Errorf("import %s.%s: not a function of abi/ABI.md", mod, fn)
				case !slices.Equal(imp.ParamTypes(), want.params) || !slices.Equal(imp.ResultTypes(), want.results):
					t.Errorf("import %s: params %v results %v, want %v %v", fn, imp.ParamTypes(), imp.ResultTypes(), want.params, want.results)
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
	for _, name := range []string{"wordcount", "mapfilter"} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, name)
			st, err := h.call(h.ctx, h.mod.ExportedFunction(abi.ExportABIVersion))
			if err != nil || st != abi.Version {
				t.Fatalf("wstream_abi_version = %d, %v; want %d", st, err, abi.Version)
			}
			res, err := h.planFn.Call(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, ok := h.read(uint32(res[0]>>32), uint32(res[0]))
			if !ok {
				t.Fatalf("wstream_plan = %#x: out of memory range", res[0])
			}
			if want := goPlan(t, name); string(b) != want {
				t.Fatalf("plan differs from the Go example's:\n%s\nwant\n%s", b, want)
			}
		})
	}
}

func TestWordcount(t *testing.T) {
	h := newHost(t, "wordcount")
	h.mustOpen(0, "split", "")
	h.mustOpen(1, "count", "")

	h.mustProcess(0,
		rec("", "the quick brown fox", 10),
		rec("", "  jumps over\tthe lazy dog\n", 11),
		rec("", "", 12),
		rec("", "naïve\u00a0the   end", 13), // U+00A0 is a space too
	)
	words := h.take()
	if h.batches != 1 {
		t.Errorf("split emitted through %d emit_batch calls, want 1", h.batches)
	}
	var got []string
	for _, r := range words {
		got = append(got, fmt.Sprintf("%s@%d", r.Key, r.Timestamp))
		if len(r.Value) != 0 || r.Port != 0 {
			t.Errorf("word %q: value %q port %d, want empty value on port 0", r.Key, r.Value, r.Port)
		}
	}
	want := []string{"the@10", "quick@10", "brown@10", "fox@10", "jumps@11", "over@11", "the@11", "lazy@11", "dog@11", "naïve@13", "the@13", "end@13"}
	if !slices.Equal(got, want) {
		t.Fatalf("split emitted %q\nwant %q", got, want)
	}

	// Two batches, so counts carry over through state.
	h.mustProcess(1, words[:5]...)
	h.mustProcess(1, words[5:]...)
	if out := h.take(); len(out) != 0 {
		t.Fatalf("count emitted %d records before the end of input", len(out))
	}
	if len(h.timers) != 10 {
		t.Errorf("%d timers registered, want one per distinct word (10)", len(h.timers))
	}
	for sk, v := range h.state {
		if sk.key == "the" && string(v) != "\x03\x00\x00\x00\x00\x00\x00\x00" {
			t.Errorf("state of \"the\" = %q, want 3 as 8 bytes little-endian", v)
		}
	}
	h.advance(1, abi.MaxWatermark)
	counts := map[string]string{}
	for _, r := range h.take() {
		if r.Timestamp != math.MaxInt64 {
			t.Errorf("count for %q at ts %d, want the timer's time", r.Key, r.Timestamp)
		}
		counts[string(r.Key)] = string(r.Value)
	}
	wantCounts := map[string]string{"the": "3", "quick": "1", "brown": "1", "fox": "1", "jumps": "1", "over": "1", "lazy": "1", "dog": "1", "naïve": "1", "end": "1"}
	if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
		t.Fatalf("counts %v\nwant %v", counts, wantCounts)
	}
	if len(h.state) != 0 {
		t.Errorf("%d state entries left after the final counts, want 0", len(h.state))
	}
	h.mustClose(0)
	h.mustClose(1)
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
		recs[i] = rec("", b.String(), int64(i))
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
			h.mustOpen(int32(i), op, cfg)
		}
		h.mustProcess(0, in...)
		out := h.take()
		if len(ops) > 1 {
			h.mustProcess(1, out...)
			out = h.take()
		}
		if final {
			h.advance(int32(len(ops)-1), abi.MaxWatermark)
			out = h.take()
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
	h.mustOpen(0, "upper", "")
	h.mustOpen(1, "filter", `{"contains":"LO"}`)
	h.mustOpen(2, "filter", "")
	h.mustOpen(3, "filter", ` { "other": [1, {"contains": "no"}], "contains" : "\u00fcN\u00efCODE LO \"" } `)
	in := []abi.Record{rec("k1", "hello", 1), rec("k2", "World 42! abcdefghijklmnopqrstuvwxyz", 2), rec("", "", 3), rec("k4", "ünïcode lo \"", 4)}
	h.mustProcess(0, in...)
	upper := h.take()
	var got []string
	for _, r := range upper {
		got = append(got, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	want := []string{"k1=HELLO@1", "k2=WORLD 42! ABCDEFGHIJKLMNOPQRSTUVWXYZ@2", "=@3", "k4=üNïCODE LO \"@4"}
	if !slices.Equal(got, want) {
		t.Fatalf("upper emitted %q, want %q", got, want)
	}

	keys := func(op int32) []string {
		h.mustProcess(op, upper...)
		var got []string
		for _, r := range h.take() {
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
		h.mustClose(op)
	}

	for _, tc := range []struct{ cfg, want string }{
		{`{"contains":5}`, `operator "filter": open: config "{\"contains\":5}": member "contains" is a number, not a string`},
		{`{"contains":"x"`, `operator "filter": open: config "{\"contains\":\"x\"": not a JSON object`},
		{`["contains"]`, `not a JSON object`},
		{`{"contains":"x"} x`, `not a JSON object`},
		{`{"contains":"\q"}`, `not a JSON object`},
	} {
		h := newHost(t, "mapfilter")
		st, err := h.openOp(0, "filter", tc.cfg)
		if err != nil || st != abi.StatusGuestError || len(h.failures) != 1 || !strings.Contains(h.failures[0], tc.want) {
			t.Errorf("open filter with %s: status %d, error %v, failures %q; want guest error containing %q", tc.cfg, st, err, h.failures, tc.want)
		}
		// The slot stayed closed: opening it again works.
		h.mustOpen(0, "filter", `{"contains":null}`)
	}
}
