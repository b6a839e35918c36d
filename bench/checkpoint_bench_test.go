package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// BenchmarkCheckpointOverhead runs the keyed count (WASM, C guest) with and
// without 1 s checkpoints; the ratio of records/s is the checkpoint overhead.
func BenchmarkCheckpointOverhead(b *testing.B) {
	_, cMod := buildModules(b, "wordcount")
	const n = 16_000_000 // over 2 s a run: 1 s checkpoints, then the final one
	plan := func(ckpt string) string { return overheadPlan(ckpt, n) }
	b.Run("none", func(b *testing.B) { runJob(b, jobRun{module: cMod, plan: plan(""), records: n}) })
	report := func(b *testing.B, h []coordinator.HistoryEntry) {
		completed := 0
		var dur, sync, async time.Duration
		for _, e := range h {
			if e.Status == "completed" {
				completed++
				dur, sync, async = dur+e.Duration, sync+e.Sync, async+e.Async
			}
			b.Logf("checkpoint %d (%s): %s, %s in all, alignment %s, sync %s, async %s, %d bytes uploaded",
				e.ID, e.Kind, e.Status, e.Duration, e.Alignment, e.Sync, e.Async, e.Uploaded)
		}
		b.ReportMetric(float64(completed)/float64(b.N), "checkpoints/op")
		if completed > 0 {
			b.ReportMetric(float64(dur.Milliseconds())/float64(completed), "ms/checkpoint")
			b.ReportMetric(float64(sync.Microseconds())/1000/float64(completed), "sync-ms/checkpoint")
			b.ReportMetric(float64(async.Microseconds())/1000/float64(completed), "async-ms/checkpoint")
		}
	}
	b.Run("1s", func(b *testing.B) {
		runJob(b, jobRun{module: cMod, plan: plan(`"checkpoint":{"interval":1000},`), records: n, report: report})
	})
	// Checkpoints in the embedded server's object store: every write
	// synced to disk before it is acknowledged.
	b.Run("1s-objstore", func(b *testing.B) {
		runJob(b, jobRun{module: cMod, plan: plan(`"checkpoint":{"interval":1000,"storage":"nats-obj://bench_checkpoints"},`), records: n, report: report})
	})
}

// overheadPlan is the keyed count of the checkpoint overhead benchmarks: n
// records, C guest, with the checkpoint settings ckpt (a JSON member and a
// comma, or "").
func overheadPlan(ckpt string, n int) string {
	return fmt.Sprintf(`{"name":"overhead","parallelism":2,%s
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":1,"seed":1},"parallelism":1},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`, ckpt, n)
}

// BenchmarkUnalignedVsAligned backs up both input channels of a subtask
// behind a slow sink (20,000 records/s) and compares checkpoint durations:
// an aligned barrier waits behind the queued data, an unaligned one
// overtakes it and persists it instead.
func BenchmarkUnalignedVsAligned(b *testing.B) {
	const n = 60000
	plan := func(mode string) string {
		return fmt.Sprintf(`{"name":"slow","checkpoint":{"interval":300,"mode":%q},
 "vertices":[
  {"id":"a","kind":"source","connector":"gen","config":{"count":%d,"keys":100,"words":4,"seed":1}},
  {"id":"b","kind":"source","connector":"gen","config":{"count":%d,"keys":100,"words":4,"seed":2}},
  {"id":"id","kind":"operator","operator":"go:identity"},
  {"id":"sink","kind":"sink","connector":"discard","config":{"rate":20000}}],
 "edges":[{"from":"a","to":"id","partition":"key"},{"from":"b","to":"id","partition":"key"},{"from":"id","to":"sink"}]}`, mode, n/2, n/2)
	}
	for _, mode := range []string{"aligned", "unaligned"} {
		b.Run(mode, func(b *testing.B) {
			runJob(b, jobRun{plan: plan(mode), records: n, report: func(b *testing.B, h []coordinator.HistoryEntry) {
				var dur, align time.Duration
				var inflight int64
				c := 0
				for _, e := range h {
					if e.Status != "completed" {
						continue
					}
					c++
					dur += e.Duration
					align += e.Alignment
					inflight += e.InFlightBytes
				}
				if c == 0 {
					b.Fatal("no checkpoint completed")
				}
				b.ReportMetric(float64(dur.Milliseconds())/float64(c), "ms/checkpoint")
				b.ReportMetric(float64(align.Milliseconds())/float64(c), "alignment-ms")
				b.ReportMetric(float64(inflight)/float64(c), "inflight-B")
			}})
		})
	}
}

// jobRun says what runJob runs.
type jobRun struct {
	module  string // "" when every operator is native
	plan    string
	records int
	host    host.Config
	warmUp  bool // one run before the timer, to fill the compilation cache
	// report, when set, gets the checkpoint history of the runs.
	report func(*testing.B, []coordinator.HistoryEntry)
	// check, when set, gets each timed run's result: a benchmark that
	// measures a cost (bad records) checks that it was paid.
	check func(*testing.B, *transport.JobResult)
}

// runJob runs a plan b.N times on one engine, reports records/s, and
// returns the wall time of the timed runs.
func runJob(b *testing.B, r jobRun) time.Duration {
	ctx := context.Background()
	dir := b.TempDir()
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(r.plan), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := engine.Start(ctx, engine.Options{DataDir: dir, Stdout: io.Discard, Host: r.host})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{ModulePath: r.module, PlanPath: planPath, Overrides: job.Overrides{}})
	if err != nil {
		b.Fatal(err)
	}
	if r.warmUp {
		if res, err := e.Run(ctx, d, nil); err != nil || res.State != transport.JobFinished {
			b.Fatalf("warm-up: %v %+v", err, res)
		}
	}
	var hist []coordinator.HistoryEntry
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var id string
		res, err := e.Run(ctx, d, func(s string) { id = s })
		if err != nil {
			b.Fatal(err)
		}
		if res.State != transport.JobFinished {
			b.Fatalf("job %s: %s", res.State, res.Error)
		}
		if r.check != nil {
			r.check(b, res)
		}
		h, err := coordinator.ReadHistory(dir, id)
		if err != nil {
			b.Fatal(err)
		}
		hist = append(hist, h...)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(r.records)*float64(b.N)/el.Seconds(), "records/s")
	if r.report != nil {
		r.report(b, hist)
	}
	return el
}
