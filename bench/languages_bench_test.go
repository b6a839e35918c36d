package bench

import (
	"fmt"
	"testing"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// wordcountLines is the input of BenchmarkWordcountLanguages: lines of four
// words, so each line costs a split call and four keyed counts.
const wordcountLines = 300_000

func wordcountPlan(op string) string {
	return fmt.Sprintf(`{"name":"wordcount","parallelism":1,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"%ssplit"},
  {"id":"count","kind":"operator","operator":"%scount"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"split"},{"from":"split","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`,
		wordcountLines, op, op)
}

// BenchmarkWordcountLanguages runs the wordcount example of every guest
// language, and the same operators in native Go ("go:" in the plan), with
// the default per-call deadline, in one run: ns/record is per input line,
// and the ratio to native Go is per-record cost of the language.
func BenchmarkWordcountLanguages(b *testing.B) {
	goMod, err := testmod.Build("go", "wordcount")
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, mod, plan string) {
		el := runJob(b, jobRun{module: mod, plan: plan, records: wordcountLines, host: host.Config{}, warmUp: true})
		b.ReportMetric(el.Seconds()*1e9/float64(wordcountLines)/float64(b.N), "ns/record")
	}
	b.Run("native", func(b *testing.B) { run(b, goMod, wordcountPlan("go:")) })
	for _, lang := range testmod.Languages {
		mod, err := testmod.Build(lang, "wordcount")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(lang, func(b *testing.B) { run(b, mod, wordcountPlan("")) })
	}
}
