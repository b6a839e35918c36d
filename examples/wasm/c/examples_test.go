package cexamples_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

var modules = []string{"wordcount", "mapfilter", "window", "testops", "conformance"}

// planless are the modules that carry no plan: tests build their own.
var planless = map[string]bool{"testops": true, "conformance": true}

// TestModuleExports checks every C module's exports and imports against
// abi/ABI.md, signature by signature: the C modules import nothing but the
// wstream module (no WASI) and export every checkpoint hook.
func TestModuleExports(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckModule(t, name, !planless[name]) })
	}
}

// TestModulePlans checks the ABI version and that each C example exports
// exactly the plan of its Go twin, and the others none.
func TestModulePlans(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckPlan(t, name, !planless[name]) })
	}
}

func TestWordcount(t *testing.T) {
	wasmtest.CheckWordcount(t, newHost(t, "wordcount"))
}

// randomLines makes lines of words separated by every kind of white space
// Go's unicode.IsSpace knows, by near misses of their UTF-8 encodings and by
// invalid UTF-8.
func randomLines(n int) []abi.Record {
	return wasmtest.RandomLines(n, "\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80")
}

// TestMatchesGo runs the C examples and their Go twins on the same input
// and checks that they emit the same bytes.
func TestMatchesGo(t *testing.T) {
	lines := randomLines(2000)
	lang.CompareWordcount(t, lines)

	// mapfilter has a twin in C only.
	run := func(module string, ops []string, cfg string, in []abi.Record) []abi.Record {
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
		return out
	}
	values := slices.Clone(lines)
	for i := range values {
		values[i].Key = []byte(fmt.Sprintf("k%d", i))
		values[i].Value = append(values[i].Value, "abcxyz{`@[AZ az"[:i%16]...)
	}
	lang.Same(t, "upper", run("mapfilter", []string{"upper"}, "", values), run("go/mapfilter", []string{"upper"}, "", values))
	lang.Same(t, "upper+filter", run("mapfilter", []string{"upper", "filter"}, `{"contains":"A"}`, values),
		run("go/mapfilter", []string{"upper", "filter"}, `{"contains":"A"}`, values))

	// The C filter searches for a needle's first two bytes sixteen
	// positions at a time (wasm SIMD), or eight without SIMD, and covers
	// a value's end with an overlapping last step: every length, every
	// position of a match and of a near miss (the first byte alone, at
	// and across word boundaries; WV makes the word compare flag V, one
	// above W; upper makes the x filler X), against Go's bytes.Contains,
	// built both ways.
	var probes []abi.Record
	for n := 0; n <= 40; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, ins := range []string{"WQ", "W", "QW", "WWQ", "\x01W", "Q", "WV", "WQV"} {
				v := []byte(strings.Repeat("x", n))
				v = slices.Insert(v, pos, []byte(ins)...)
				probes = append(probes, abi.Record{Key: []byte(fmt.Sprintf("p%d", len(probes))), Value: v})
			}
		}
	}
	for _, module := range []string{"mapfilter", "mapfilter-nosimd"} {
		for _, needle := range []string{"W", "WQ", "QW", "WWQ", "XW", "Q", "WX", "WV", "WQV", "QWX"} {
			cfg := fmt.Sprintf(`{"contains":%q}`, needle)
			c, g := run(module, []string{"upper", "filter"}, cfg, probes), run("go/mapfilter", []string{"upper", "filter"}, cfg, probes)
			if len(g) == 0 || len(g) == len(probes) {
				t.Fatalf("needle %q keeps %d of %d probes: it does not tell them apart", needle, len(g), len(probes))
			}
			lang.Same(t, module+" filter "+needle, c, g)
		}
	}
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
