package asexamples_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

var modules = []string{"wordcount", "window", "conformance"}

// TestModuleExports checks every AssemblyScript module's exports and
// imports against abi/ABI.md, signature by signature: the modules import
// nothing but the wstream module (no env.abort, no WASI) and export every
// checkpoint hook and wstream_plan.
func TestModuleExports(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckModule(t, name, true) })
	}
}

// TestModulePlans checks the ABI version and that each example exports
// exactly the plan of its Go twin; the conformance module has none.
func TestModulePlans(t *testing.T) {
	for _, name := range modules {
		t.Run(name, func(t *testing.T) { lang.CheckPlan(t, name, name != "conformance") })
	}
}

func TestWordcount(t *testing.T) {
	wasmtest.CheckWordcount(t, newHost(t, "wordcount"))
}

// randomLines makes lines of words separated by every kind of white space
// Go's unicode.IsSpace knows, by near misses of their UTF-8 encodings and by
// invalid UTF-8.
func randomLines(n int) []abi.Record {
	return wasmtest.RandomLines(n, "\xc2", "\xe2\x80", "\xe3\x80", "\xff", "\xe2\x80\x80\x80",
		"\xe1\x9a", "\xe2\x81\x9f", "\xe2\x80\xaf", "\xe2\x80\x8b")
}

// TestMatchesGo runs the wordcount and window examples and their Go twins
// on the same input and checks that they emit the same bytes and leave the
// same state.
func TestMatchesGo(t *testing.T) {
	lang.CompareWordcount(t, randomLines(3000))

	// Window: batches of records out of order, some late, some at negative
	// and extreme times, with the watermark advancing between batches.
	rnd := rand.New(rand.NewPCG(3, 4))
	var steps []wasmtest.WindowStep
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
		steps = append(steps, wasmtest.WindowStep{Recs: recs, Watermark: wm})
	}
	for _, cfg := range []string{`{"size":1000}`, `{"size":7}`, ``, `{"Size":333}`, `{"size":null}`, `null`} {
		lang.CompareWindow(t, cfg, steps)
	}
}

func TestWindow(t *testing.T) {
	wasmtest.CheckWindow(t, newHost(t, "window", wasmtest.WithOutputs(wasmtest.WindowOutputs...)))
}

// TestWindowErrors checks that the window operator fails where its Go twin
// does, with a message naming the operator and the cause.
func TestWindowErrors(t *testing.T) {
	lang.CheckWindowFailures(t, []wasmtest.WindowFailure{
		{Name: "zero size", Config: `{"size":0}`, Want: "size must be a positive"},
		{Name: "negative size", Config: `{"size":-5}`, Want: "got -5"},
		{Name: "bad config", Config: `{"size":"x"}`, Want: `config "{\"size\":\"x\"}"`},
		{Name: "fraction", Config: `{"size":1.5}`, Want: `1.5 is not an integer`},
		{Name: "exponent", Config: `{"size":1e3}`, Want: `1e3 is not an integer`},
		{Name: "too big", Config: `{"size":9223372036854775808}`, Want: `fits in 64 bits`},
		{Name: "not JSON", Config: `{"size":1000`, Want: `not valid JSON`},
		{Name: "not an object", Config: `[1000]`, Want: `not a JSON object`},
		{Name: "no late output", Config: `{}`, Outputs: []string{"main"}, Want: `outputs ["main","late"]`},
		{Name: "bad value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "1", 1), wasmtest.Rec("k", "x1", 2)}, Want: `record 1 of 2 (key "k"): value "x1" is not a decimal integer`},
		{Name: "empty value", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "", 2)}, Want: `value "" is not a decimal integer`},
		{Name: "overflow", Config: `{}`, Process: []abi.Record{wasmtest.Rec("k", "9223372036854775808", 2)}, Want: "overflows int64"},
	}, true)
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
