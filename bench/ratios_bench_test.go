package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// BenchmarkRatios measures the throughput ratios of the performance targets
// side by side: every configuration has its own engine, all started up
// front and warmed up once, and each round runs every configuration once,
// in turn. A ratio is computed per round, from runs seconds apart, and
// reported as the median over the rounds, so that the load of a shared
// machine, which changes over minutes, moves numerator and denominator
// alike. -benchtime Nx sets the rounds; make bench runs it and prints the
// ratios against their targets (internal/testkit/benchreport).
// WSTREAM_RATIO_CASES=A,B,… runs only the configurations named, and the
// ratios between them.
func BenchmarkRatios(b *testing.B) {
	goStateless, cStateless := buildModules(b, "mapfilter")
	goKeyed, cKeyed := buildModules(b, "wordcount")
	// Runs of about 2.3 s at the C guest's 7M records/s: a periodic
	// checkpoint or two, and the final one, which a short run weighs more.
	// WSTREAM_CKPT_RECORDS=N runs the checkpoint configurations on N
	// records instead, to see how much of the ratio the final checkpoint is.
	ckptRecords := 16_000_000
	if s := os.Getenv("WSTREAM_CKPT_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("WSTREAM_CKPT_RECORDS=%q: want a positive number of records", s)
		}
		ckptRecords = n
	}
	ckptPlan := func(ckpt string) string { return overheadPlan(ckpt, ckptRecords) }
	noDeadline := host.Config{CallTimeout: -1}
	configs := []pairedRun{
		{name: "stateless-native", run: jobRun{module: goStateless, plan: statelessPlan("go:"), records: records}},
		{name: "stateless-c", run: jobRun{module: cStateless, plan: statelessPlan(""), records: records}},
		{name: "stateless-c-nodeadline", run: jobRun{module: cStateless, plan: statelessPlan(""), records: records, host: noDeadline}},
		{name: "stateless-go", run: jobRun{module: goStateless, plan: statelessPlan(""), records: records}},
		{name: "stateless-go-nodeadline", run: jobRun{module: goStateless, plan: statelessPlan(""), records: records, host: noDeadline}},
		{name: "keyed-native", run: jobRun{module: goKeyed, plan: keyedPlan("go:"), records: records}},
		{name: "keyed-c", run: jobRun{module: cKeyed, plan: keyedPlan(""), records: records}},
		{name: "keyed-c-nodeadline", run: jobRun{module: cKeyed, plan: keyedPlan(""), records: records, host: noDeadline}},
		{name: "keyed-go", run: jobRun{module: goKeyed, plan: keyedPlan(""), records: records}},
		{name: "keyed-go-nodeadline", run: jobRun{module: goKeyed, plan: keyedPlan(""), records: records, host: noDeadline}},
		{name: "checkpoints-none", run: jobRun{module: cKeyed, plan: ckptPlan(""), records: ckptRecords}},
		{name: "checkpoints-1s", run: jobRun{module: cKeyed, plan: ckptPlan(`"checkpoint":{"interval":1000},`), records: ckptRecords}},
	}
	ratios := []pairedRatio{
		{"stateless-c/native", "stateless-c", "stateless-native"},
		{"stateless-go/native", "stateless-go", "stateless-native"},
		{"stateless-c-deadline/nodeadline", "stateless-c", "stateless-c-nodeadline"},
		{"stateless-go-deadline/nodeadline", "stateless-go", "stateless-go-nodeadline"},
		{"keyed-c/native", "keyed-c", "keyed-native"},
		{"keyed-go/native", "keyed-go", "keyed-native"},
		{"keyed-c-deadline/nodeadline", "keyed-c", "keyed-c-nodeadline"},
		{"keyed-go-deadline/nodeadline", "keyed-go", "keyed-go-nodeadline"},
		{"checkpoints-1s/none", "checkpoints-1s", "checkpoints-none"},
	}
	if only := os.Getenv("WSTREAM_RATIO_CASES"); only != "" {
		configs, ratios = onlyCases(only, configs, ratios)
	}
	reportPaired(b, configs, ratios)
}

// onlyCases keeps the configurations named in only (a comma-separated
// list) and the ratios between them.
func onlyCases(only string, configs []pairedRun, ratios []pairedRatio) ([]pairedRun, []pairedRatio) {
	names := strings.Split(only, ",")
	var keep []pairedRun
	for _, c := range configs {
		if slices.Contains(names, c.name) {
			keep = append(keep, c)
		}
	}
	var rs []pairedRatio
	for _, r := range ratios {
		if slices.Contains(names, r.num) && slices.Contains(names, r.den) {
			rs = append(rs, r)
		}
	}
	return keep, rs
}

// pairedRatio is the metric name of num's rate over den's, each a
// pairedRun's name.
type pairedRatio struct{ name, num, den string }

// reportPaired runs configs in paired rounds (runPaired) and reports each
// one's median rate and the median over rounds of each ratio's per-round
// quotient.
func reportPaired(b *testing.B, configs []pairedRun, ratios []pairedRatio) {
	rates := runPaired(b, configs)
	for _, c := range configs {
		b.ReportMetric(median(rates[c.name]), c.name+"-records/s")
	}
	for _, r := range ratios {
		per := make([]float64, b.N)
		for i := range per {
			per[i] = rates[r.num][i] / rates[r.den][i]
		}
		b.ReportMetric(median(per), r.name)
		b.Logf("%s per round: %.3f", r.name, per)
		// The same per CPU-second of the process: on a machine shared
		// with other work, what the other processes take moves the wall
		// rates from one run to the next, much less the CPU time a run
		// costs.
		num, den := rates[r.num+cpuSuffix], rates[r.den+cpuSuffix]
		if len(num) == b.N && len(den) == b.N {
			for i := range per {
				per[i] = num[i] / den[i]
			}
			b.ReportMetric(median(per), r.name+cpuSuffix)
			b.Logf("%s per CPU-second, per round: %.3f", r.name, per)
		}
	}
}

// cpuSuffix names a configuration's or a ratio's rate per CPU-second of
// the process.
const cpuSuffix = "-cpu"

// pairedRun is one configuration of BenchmarkRatios.
type pairedRun struct {
	name string
	run  jobRun
}

// runPaired runs every configuration b.N times, one of each per round, and
// returns the records/s of every run by configuration name.
func runPaired(b *testing.B, configs []pairedRun) map[string][]float64 {
	ctx := context.Background()
	type prepared struct {
		e *engine.Engine
		d *engine.Deployment
	}
	ready := make([]prepared, len(configs))
	for i, c := range configs {
		dir := b.TempDir()
		planPath := filepath.Join(dir, "plan.json")
		if err := os.WriteFile(planPath, []byte(c.run.plan), 0o644); err != nil {
			b.Fatal(err)
		}
		e, err := engine.Start(ctx, engine.Options{DataDir: dir, Stdout: io.Discard, Host: c.run.host})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Close(ctx) })
		d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{ModulePath: c.run.module, PlanPath: planPath, Overrides: job.Overrides{}})
		if err != nil {
			b.Fatal(err)
		}
		// One run compiles the module into the cache and warms the engine.
		if res, err := e.Run(ctx, d, nil); err != nil || res.State != transport.JobFinished {
			b.Fatalf("%s: warm-up: %v %+v", c.name, err, res)
		}
		ready[i] = prepared{e, d}
	}
	rates := map[string][]float64{}
	b.ResetTimer()
	for range b.N {
		for i, c := range configs {
			start, cpu0 := time.Now(), processCPU()
			res, err := ready[i].e.Run(ctx, ready[i].d, nil)
			if err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			if res.State != transport.JobFinished {
				b.Fatalf("%s: job %s: %s", c.name, res.State, res.Error)
			}
			if c.run.check != nil {
				c.run.check(b, res)
			}
			rates[c.name] = append(rates[c.name], float64(c.run.records)/time.Since(start).Seconds())
			if cpu := processCPU() - cpu0; cpu > 0 {
				rates[c.name+cpuSuffix] = append(rates[c.name+cpuSuffix], float64(c.run.records)/cpu.Seconds())
			}
		}
	}
	b.StopTimer()
	return rates
}
