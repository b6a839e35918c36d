package watexamples_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// modules are the WAT modules: the examples and the skeleton.
var modules = []string{"wordcount", "window", "conformance", "reference"}

// TestModuleExports checks every WAT module's exports and imports against
// abi/ABI.md, signature by signature: the modules import nothing but the
// wstream module and export every checkpoint hook; the examples with a Go
// twin export its plan.
func TestModuleExports(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) {
			lang.CheckModule(t, name, twins[name])
			// The skeleton shows every import of the ABI.
			if imports := wasmtest.Compile(t, lang.Module(t, name)).ImportedFunctions(); name == "reference" && len(imports) != len(wasmtest.Imports) {
				t.Errorf("the reference module imports %d functions, want all %d of the ABI", len(imports), len(wasmtest.Imports))
			}
		})
	}
}

// twins are the examples with a Go twin, whose plan they export.
var twins = map[string]bool{"wordcount": true, "window": true}

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

// TestModulePlans checks the ABI version and that each WAT example exports
// exactly the plan of its Go twin, and the others none.
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
// invalid UTF-8, at timestamps around 0.
func randomLines(n int) []abi.Record {
	recs := wasmtest.RandomLines(n, "\u200b", "\u2027", "\u202e", "\u205e", "\u0008", "\u000e", "\u001f",
		"\xc2", "\xe2\x80", "\xe3\x80", "\xe1\x9a", "\xff", "\xe2\x80\x80\x80", "\xc2\xc2\xa0", "\xe2\xe2\x80\x80")
	for i := range recs {
		recs[i].Timestamp -= int64(n / 2)
	}
	return recs
}

// TestWordcountMatchesGo runs the WAT wordcount and its Go twin on the same
// input and checks that they emit the same bytes and leave the same state.
func TestWordcountMatchesGo(t *testing.T) {
	lang.CompareWordcount(t, randomLines(3000))
}

func TestWindow(t *testing.T) {
	wasmtest.CheckWindow(t, newHost(t, "window", wasmtest.WithOutputs(wasmtest.WindowOutputs...)))
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
	var steps []wasmtest.WindowStep
	for i, recs := range windowInput(40, 200) {
		steps = append(steps, wasmtest.WindowStep{Recs: recs, Watermark: recs[len(recs)-1].Timestamp - int64(i%5)*300})
	}
	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, `{"size":9223372036854775807}`, ``} {
		lang.CompareWindow(t, cfg, steps)
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
	lang.CheckWindowFailures(t, []wasmtest.WindowFailure{
		{Name: "zero size", Config: `{"size":0}`, Want: "open: config size must be a positive number of milliseconds, got 0"},
		{Name: "bad config", Config: `{"size":"x"}`, Want: `open: config "{\"size\":\"x\"}": member "size" is not an integer`},
		{Name: "bad JSON", Config: `{"size":1`, Want: `open: config "{\"size\":1": invalid JSON at offset 9`},
		{Name: "no late output", Config: `{}`, Outputs: []string{"main"}, Want: `outputs ["main","late"]: output "late": status -4 (BAD_OUTPUT)`},
		{Name: "bad value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, Want: `process: record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{Name: "empty value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k\n", "-", 2)}, Want: `process: record 0 of 1 (key "k\n"): value "-" is not a decimal integer`},
		{Name: "overflow", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, Want: `value "9223372036854775808" overflows int64`},
	}, true)
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
