package bench

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/transport"
)

// startPlan is the wordcount example's plan with one input line and a
// stdout sink: the first record reaches the sink once the line has been
// split, counted and the input has ended, so what is timed is the start.
const startPlan = `{"name":"start","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":1,"keys":1,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

// warmStarts is how many warm deploys follow each cold one.
const warmStarts = 5

// BenchmarkStart deploys the wordcount example (Go and C guests, four
// module instances per job) and reports, as medians in ms, the time from
// the start of the deploy (validation, which compiles the module,
// included) to the first record at the sink:
//
//   - cold: a new engine with an empty compilation cache;
//   - warm: the same module deployed again on that engine (warmStarts
//     times); warm-job is the part after validation, from the job's
//     submission;
//   - disk: a new engine whose compilation cache the cold run filled, as a
//     second `wstream deploy` finds it.
//
// warm/cold is the ratio of the medians. One op is one cold deploy,
// warmStarts warm ones and one from the disk cache.
//
//	go test -run '^$' -bench Start -benchtime 5x ./bench/
func BenchmarkStart(b *testing.B) {
	goMod, cMod := buildModules(b, "wordcount")
	b.Run("go", func(b *testing.B) { runStarts(b, goMod) })
	b.Run("c", func(b *testing.B) { runStarts(b, cMod) })
}

func runStarts(b *testing.B, module string) {
	var cold, warm, warmJob, disk []float64
	for i := 0; i < b.N; i++ {
		cache := b.TempDir()
		s := newStarter(b, cache)
		c, _ := s.deploy(b, module)
		cold = append(cold, millis(c))
		for range warmStarts {
			w, j := s.deploy(b, module)
			warm = append(warm, millis(w))
			warmJob = append(warmJob, millis(j))
		}
		s.close(b)
		s = newStarter(b, cache)
		d, _ := s.deploy(b, module)
		disk = append(disk, millis(d))
		s.close(b)
	}
	c, w := median(cold), median(warm)
	b.ReportMetric(c, "cold-ms")
	b.ReportMetric(w, "warm-ms")
	b.ReportMetric(median(warmJob), "warm-job-ms")
	b.ReportMetric(median(disk), "disk-ms")
	b.ReportMetric(w/c, "warm/cold")
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// starter is an engine with a data directory of its own, whose stdout
// sink marks the first record of each job.
type starter struct {
	e     *engine.Engine
	dir   string
	first *firstWrite
}

func newStarter(b *testing.B, cacheDir string) *starter {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(startPlan), 0o644); err != nil {
		b.Fatal(err)
	}
	fw := &firstWrite{}
	e, err := engine.Start(context.Background(), engine.Options{DataDir: dir, Stdout: fw, Host: host.Config{CacheDir: cacheDir}})
	if err != nil {
		b.Fatal(err)
	}
	return &starter{e: e, dir: dir, first: fw}
}

func (s *starter) close(b *testing.B) {
	if err := s.e.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// deploy validates the module and runs the job to its end, as `wstream
// deploy` does. It returns the time from the start of validation to the
// first record at the sink, and from the job's submission to that record.
func (s *starter) deploy(b *testing.B, module string) (start, job time.Duration) {
	ctx := context.Background()
	seen := s.first.arm()
	t0 := time.Now()
	d, err := engine.Prepare(ctx, s.e.Runtime(), engine.PrepareOptions{ModulePath: module, PlanPath: filepath.Join(s.dir, "plan.json")})
	if err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	res, err := s.e.Run(ctx, d, nil)
	if err != nil {
		b.Fatal(err)
	}
	if res.State != transport.JobFinished {
		b.Fatalf("job %s: %s", res.State, res.Error)
	}
	// The sink wrote before the job finished.
	select {
	case at := <-seen:
		return at.Sub(t0), at.Sub(t1)
	default:
		b.Fatal("the job finished without a record at its sink")
		return 0, 0
	}
}

// firstWrite is an engine's stdout: it notes when the first write after
// each arm arrives.
type firstWrite struct {
	mu   sync.Mutex
	seen chan time.Time // buffered; nil once the first write was noted
}

// arm returns a channel that receives the time of the next write.
func (f *firstWrite) arm() <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = make(chan time.Time, 1)
	return f.seen
}

func (f *firstWrite) Write(p []byte) (int, error) {
	now := time.Now()
	f.mu.Lock()
	if f.seen != nil {
		f.seen <- now
		f.seen = nil
	}
	f.mu.Unlock()
	return len(p), nil
}
