package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// records per job: large enough that instantiating modules is noise.
const records = 1_000_000

func statelessPlan(op string) string {
	return fmt.Sprintf(`{"name":"stateless","parallelism":1,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":1000,"words":4,"seed":1}},
  {"id":"upper","kind":"operator","operator":"%supper"},
  {"id":"filter","kind":"operator","operator":"%sfilter","config":{"contains":"W1"}},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"upper"},{"from":"upper","to":"filter"},{"from":"filter","to":"sink"}]}`, records, op, op)
}

func keyedPlan(op string) string {
	return fmt.Sprintf(`{"name":"keyed","parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":1,"seed":1},"parallelism":1},
  {"id":"count","kind":"operator","operator":"%scount"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`, records, op)
}

// Each benchmark runs one pipeline with native Go operators ("go:" in the
// plan) and with the same operators from the Go and the C example modules,
// with the default per-call deadline and without (-nodeadline: no wazero
// termination checks).
func BenchmarkStateless(b *testing.B) {
	goMod, cMod := buildModules(b, "mapfilter")
	b.Run("native", func(b *testing.B) { runPipeline(b, goMod, statelessPlan("go:"), 0) })
	b.Run("wasm-go", func(b *testing.B) { runPipeline(b, goMod, statelessPlan(""), 0) })
	b.Run("wasm-go-nodeadline", func(b *testing.B) { runPipeline(b, goMod, statelessPlan(""), -1) })
	b.Run("wasm-c", func(b *testing.B) { runPipeline(b, cMod, statelessPlan(""), 0) })
	b.Run("wasm-c-nodeadline", func(b *testing.B) { runPipeline(b, cMod, statelessPlan(""), -1) })
}

func BenchmarkKeyedCount(b *testing.B) {
	goMod, cMod := buildModules(b, "wordcount")
	b.Run("native", func(b *testing.B) { runPipeline(b, goMod, keyedPlan("go:"), 0) })
	b.Run("wasm-go", func(b *testing.B) { runPipeline(b, goMod, keyedPlan(""), 0) })
	b.Run("wasm-go-nodeadline", func(b *testing.B) { runPipeline(b, goMod, keyedPlan(""), -1) })
	b.Run("wasm-c", func(b *testing.B) { runPipeline(b, cMod, keyedPlan(""), 0) })
	b.Run("wasm-c-nodeadline", func(b *testing.B) { runPipeline(b, cMod, keyedPlan(""), -1) })
}

func buildModules(b *testing.B, name string) (goMod, cMod string) {
	goMod, err := testmod.BuildGo("examples/wasm/go/" + name)
	if err != nil {
		b.Fatal(err)
	}
	cMod, err = testmod.BuildC("examples/wasm/c/" + name)
	if err != nil {
		b.Fatal(err)
	}
	return goMod, cMod
}

// runPipeline runs the job b.N times on one engine (after one warm-up run
// that compiles the module into the cache) and reports source records per
// second of wall time. callTimeout is host.Config.CallTimeout: 0 for the
// default deadline, negative for none.
func runPipeline(b *testing.B, modPath, plan string, callTimeout time.Duration) {
	el := runJob(b, jobRun{module: modPath, plan: plan, records: records, host: host.Config{CallTimeout: callTimeout}, warmUp: true})
	b.ReportMetric(el.Seconds()*1e9/float64(records)/float64(b.N), "ns/record")
}
