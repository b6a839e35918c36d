package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// upgradeBenchPlan is a running wordcount: an unbounded, paced gen source,
// keyed counts of 1000 words, checkpoints every 500 ms.
const upgradeBenchPlan = `{"name":"wordcount","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":0,"keys":1000,"words":4,"seed":1,"rate":20000}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}],
 "checkpoint":{"interval":500}}`

// BenchmarkUpgradeDowntime measures the downtime of replacing a running
// wordcount's module, alternately the Go and the Rust wordcount: from the
// barrier (the savepoint's trigger) to the first record handed to the new
// module's operators. "upgrade" is wstream upgrade (the same job's next
// attempt, reported by the coordinator); "stop-redeploy" is a stop with
// savepoint, then a new job deployed from the savepoint, whose first record
// is seen by polling the worker's counters every millisecond. Both prepare
// (compile and check) the module before the barrier. ns/op is the whole
// operation as its client sees it: an upgrade's reply waits for the new
// module's first checkpoint.
func BenchmarkUpgradeDowntime(b *testing.B) {
	var mods []string
	for _, lang := range []string{"go", "rust"} {
		p, err := testmod.Build(lang, "wordcount")
		if err != nil {
			b.Fatal(err)
		}
		mods = append(mods, p)
	}
	b.Run("upgrade", func(b *testing.B) { upgradeDowntime(b, mods, true) })
	b.Run("stop-redeploy", func(b *testing.B) { upgradeDowntime(b, mods, false) })
}

func upgradeDowntime(b *testing.B, mods []string, upgrade bool) {
	ctx := context.Background()
	dir := b.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(upgradeBenchPlan), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := engine.Start(ctx, engine.Options{DataDir: dir, Stdout: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	prepare := func(i int) *engine.Deployment {
		d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{ModulePath: mods[i%len(mods)], PlanPath: plan, Overrides: job.Overrides{}})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	id, err := e.Submit(ctx, prepare(0))
	if err != nil {
		b.Fatal(err)
	}
	firstRecord(b, e, id)
	var downtimes []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d := prepare(i + 1)
		// A checkpoint of the running module first: each barrier finds a
		// job in its steady state.
		waitCheckpoint(b, dir, id)
		b.StartTimer()
		if upgrade {
			r, err := e.Upgrade(ctx, id, d)
			if err != nil {
				b.Fatal(err)
			}
			if !r.DowntimeKnown {
				b.Fatal("the upgrade reported no downtime")
			}
			downtimes = append(downtimes, r.Downtime)
			continue
		}
		sp := stopWithSavepoint(b, e, id, filepath.Join(dir, "savepoints"))
		d.FromSavepoint = sp.Dir
		next, err := e.Submit(ctx, d)
		if err != nil {
			b.Fatal(err)
		}
		seen := firstRecord(b, e, next)
		downtimes = append(downtimes, seen.Sub(time.UnixMilli(savepointTrigger(b, dir, id, sp.ID))))
		id = next
	}
	b.StopTimer()
	slices.Sort(downtimes)
	var sum time.Duration
	for _, d := range downtimes {
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(downtimes)), "ms-downtime")
	b.ReportMetric(float64(downtimes[len(downtimes)/2].Milliseconds()), "ms-downtime-p50")
	b.ReportMetric(float64(downtimes[len(downtimes)-1].Milliseconds()), "ms-downtime-max")
	_ = coordinator.Cancel(ctx, e.Conn(), id)
}

// waitCheckpoint waits for a checkpoint of job id newer than the ones it
// has when called.
func waitCheckpoint(b *testing.B, dir, id string) {
	count := func() int {
		h, _ := coordinator.ReadHistory(dir, id)
		n := 0
		for _, e := range h {
			if e.Status == "completed" {
				n++
			}
		}
		return n
	}
	before := count()
	deadline := time.Now().Add(time.Minute)
	for count() == before {
		if time.Now().After(deadline) {
			b.Fatalf("job %s completed no checkpoint in a minute", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstRecord polls the worker until job id's split operator was handed a
// record, and returns when it saw it.
func firstRecord(b *testing.B, e *engine.Engine, id string) time.Time {
	deadline := time.Now().Add(time.Minute)
	for {
		for _, w := range e.Workers() {
			for _, m := range w.Metrics(id) {
				if m.Vertex == "split" && m.RecordsIn > 0 {
					return time.Now()
				}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("job %s processed no record in a minute", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func stopWithSavepoint(b *testing.B, e *engine.Engine, id, dir string) transport.SavepointReply {
	req, _ := json.Marshal(transport.SavepointRequest{JobID: id, Dir: dir, Stop: true})
	m, err := e.Conn().Request(transport.SubjectSavepoint, req, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	var r transport.SavepointReply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != "" {
		b.Fatalf("stop with savepoint: %v %s", err, r.Error)
	}
	return r
}

// savepointTrigger is when savepoint sp of job id was triggered (Unix ms).
func savepointTrigger(b *testing.B, dir, id string, sp int64) int64 {
	h, err := coordinator.ReadHistory(dir, id)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range h {
		if e.ID == sp {
			return e.Trigger
		}
	}
	b.Fatal(fmt.Sprintf("savepoint %d of job %s is not in its history", sp, id))
	return 0
}
