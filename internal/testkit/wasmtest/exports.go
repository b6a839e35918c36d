package wasmtest

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// CheckModule checks the exports and imports of l's module name against
// abi/ABI.md, signature by signature, for a module that runs without WASI:
// it must export the required functions, its memory and every checkpoint
// hook (the SDKs implement them all), and wstream_plan exactly when
// exportsPlan; it must define its memory and import nothing but functions
// of the wstream module.
func (l Lang) CheckModule(t *testing.T, name string, exportsPlan bool) {
	t.Helper()
	required := maps.Clone(RequiredExports)
	optional := map[string]Sig{}
	for export, want := range OptionalExports {
		if export == abi.ExportPlan {
			optional[export] = want
		} else {
			required[export] = want
		}
	}
	compiled := Compile(t, l.Module(t, name))
	CheckExports(t, compiled, required, optional)
	if _, ok := compiled.ExportedFunctions()[abi.ExportPlan]; ok != exportsPlan {
		t.Errorf("export %s present = %v, want %v", abi.ExportPlan, ok, exportsPlan)
	}
	if len(compiled.ImportedMemories()) != 0 {
		t.Errorf("the module imports its memory; it must define it")
	}
	for _, imp := range compiled.ImportedFunctions() {
		mod, fn, _ := imp.Import()
		want, ok := Imports[fn]
		switch {
		case mod != abi.ImportModule:
			t.Errorf("import %s.%s: a %s module imports from %s only", mod, fn, l.Name, abi.ImportModule)
		case !ok:
			t.Errorf("import %s.%s: not a function of abi/ABI.md", mod, fn)
		case !slices.Equal(imp.ParamTypes(), want.Params) || !slices.Equal(imp.ResultTypes(), want.Results):
			t.Errorf("import %s: params %v results %v, want %v %v", fn, imp.ParamTypes(), imp.ResultTypes(), want.Params, want.Results)
		}
	}
}

// GoPlan returns the plan constant of the Go example examples/wasm/go/NAME,
// read from its source so that the twins cannot drift from it.
func GoPlan(tb testing.TB, name string) string {
	tb.Helper()
	path := filepath.Join(testmod.Root(), "examples", "wasm", "go", name, "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		tb.Fatal(err)
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
	tb.Fatalf("%s has no const plan", path)
	return ""
}

// CheckPlan checks the ABI version of l's module name and its plan: with
// goTwin, exactly the plan of the Go example of the same name; without, no
// plan (no wstream_plan export, or one that returns 0).
func (l Lang) CheckPlan(t *testing.T, name string, goTwin bool) {
	t.Helper()
	h := l.New(t, name)
	h.MustABIVersion()
	if !goTwin {
		if h.PlanFn != nil {
			if b := h.MustPlan(); b != nil {
				t.Fatalf("wstream_plan returned %q, want 0 (no plan)", b)
			}
		}
		return
	}
	if h.PlanFn == nil {
		t.Fatalf("no %s export, want the plan of the Go example", abi.ExportPlan)
	}
	b := h.MustPlan()
	if b == nil {
		t.Fatalf("wstream_plan = 0, want the plan of the Go example")
	}
	if want := GoPlan(t, name); string(b) != want {
		t.Fatalf("plan differs from the Go example's:\n%s\nwant\n%s", b, want)
	}
}
