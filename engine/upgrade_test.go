package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// upgradeWordcount is a paced wordcount: about six seconds of input, so
// that the upgrades the tests make once a checkpoint has completed find it
// running on a busy machine too.
const upgradeWordcount = `{"name":"wc","parallelism":2,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":60000,"keys":500,"words":3,"seed":7,"rate":10000}},
 {"id":"split","kind":"operator","operator":"split"},
 {"id":"count","kind":"operator","operator":"count"},
 {"id":"out","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[{"from":"src","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"out","partition":"rebalance"}],
 "checkpoint":{"interval":200}}`

// TestUpgradeAcrossWorkers upgrades a wordcount running on two workers
// (channels through JetStream) from the Go module to the Rust one at
// parallelism 3, after a refused upgrade: the counts must be those of a
// run without upgrades, and the job's lifecycle must show one more attempt
// and no restart.
func TestUpgradeAcrossWorkers(t *testing.T) {
	ref, refOut := startWorkers(t, 1)
	if r := run(t, ref, prepare(t, ref, "wordcount", unpaced(upgradeWordcount))); r.State != transport.JobFinished {
		t.Fatalf("the run without upgrades: %s %s", r.State, r.Error)
	}
	want := sortedLines(refOut.String())
	if len(want) != 500 {
		t.Fatalf("the run without upgrades printed %d counts, want 500", len(want))
	}

	e, out := startWorkers(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Both upgrades are built and compiled before the job starts, so that
	// they come while it runs.
	rust, err := testmod.Build("rust", "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prepareUpgrade := func(name, plan string) *Deployment {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Prepare(ctx, e.Runtime(), PrepareOptions{ModulePath: rust, PlanPath: path, Overrides: job.Overrides{Parallelism: 3}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	noSplit := prepareUpgrade("nosplit", strings.Replace(strings.Replace(upgradeWordcount, `{"id":"split","kind":"operator","operator":"split"},`, "", 1),
		`{"from":"src","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"}`, `{"from":"src","to":"count","partition":"key"}`, 1))
	same := prepareUpgrade("same", upgradeWordcount)

	id, done := runUntilCheckpoint(ctx, t, e)
	if _, err := e.Upgrade(ctx, id, noSplit); err == nil || !strings.Contains(err.Error(), `vertex "split" (operator) of the running job is missing`) {
		t.Fatalf("an upgrade without vertex split: %v", err)
	}
	r, err := e.Upgrade(ctx, id, same)
	if err != nil {
		t.Fatal(err)
	}
	if r.Attempt != 1 || r.Savepoint == 0 || !r.DowntimeKnown || r.Downtime <= 0 {
		t.Fatalf("upgrade reply %+v", r)
	}
	t.Logf("upgraded at savepoint %d, downtime %s", r.Savepoint, r.Downtime)

	finishedExactly(t, id, done, out, want, "the upgrade")
	rec, err := coordinator.ReadRecord(e.opts.DataDir, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Attempt != 1 || !strings.Contains(rec.ModuleName, filepath.Base(rust)) {
		t.Fatalf("the job's record: attempt %d, module %s", rec.Attempt, rec.ModuleName)
	}
}

// unpaced is plan without its source's rate: a reference run needs only
// its counts.
func unpaced(plan string) string { return strings.Replace(plan, `,"rate":10000`, "", 1) }

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return lines
}

// TestUpgradeRollsBackInProcess: an upgrade whose new module fails to
// restore (its plan raises the count state's layout version and the
// module registers no migration) rolls back to the old module from the
// same savepoint; the job then finishes with the counts of a run without
// upgrades, after no restart.
func TestUpgradeRollsBackInProcess(t *testing.T) {
	ref, refOut := startWorkers(t, 1)
	if r := run(t, ref, prepare(t, ref, "wordcount", unpaced(upgradeWordcount))); r.State != transport.JobFinished {
		t.Fatalf("the run without upgrades: %s %s", r.State, r.Error)
	}
	want := sortedLines(refOut.String())

	e, out := startWorkers(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v2 := prepare(t, e, "wordcount", strings.Replace(upgradeWordcount, `"operator":"count"}`, `"operator":"count","states":[{"name":"count","kind":"value","version":2}]}`, 1))
	id, done := runUntilCheckpoint(ctx, t, e)
	r, err := e.Upgrade(ctx, id, v2)
	if err == nil || r == nil || !r.RolledBack || !strings.Contains(err.Error(), "no migration registered") {
		t.Fatalf("an upgrade whose restore fails: %+v, %v", r, err)
	}
	if r.Attempt != 2 || r.Savepoint == 0 {
		t.Fatalf("roll-back reply %+v", r)
	}
	finishedExactly(t, id, done, out, want, "the roll-back")
	ups, err := coordinator.ReadUpgrades(e.opts.DataDir, id)
	if err != nil || len(ups) != 1 || ups[0].Outcome != "rolled back" {
		t.Fatalf("upgrade history %+v, %v", ups, err)
	}
}

type runOutcome struct {
	r   *transport.JobResult
	err error
}

// runUntilCheckpoint runs the upgradable wordcount on e and returns its id
// once it has completed a checkpoint, and where its result will arrive.
func runUntilCheckpoint(ctx context.Context, t *testing.T, e *Engine) (string, <-chan runOutcome) {
	t.Helper()
	ids := make(chan string, 1)
	done := make(chan runOutcome, 1)
	go func() {
		r, err := e.Run(ctx, prepare(t, e, "wordcount", upgradeWordcount), func(id string) { ids <- id })
		done <- runOutcome{r, err}
	}()
	id := <-ids
	waitFor(t, 2*time.Minute, "no completed checkpoint", func() bool {
		h, _ := coordinator.ReadHistory(e.opts.DataDir, id)
		return len(h) > 0
	})
	return id, done
}

// finishedExactly waits for job id's result: finished without a restart,
// its output the counts of a run without upgrades.
func finishedExactly(t *testing.T, id string, done <-chan runOutcome, out fmt.Stringer, want []string, after string) {
	t.Helper()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.r.State != transport.JobFinished || o.r.Restarts != 0 {
		t.Fatalf("job %s: %s after %d restarts: %s", id, o.r.State, o.r.Restarts, o.r.Error)
	}
	if got := sortedLines(out.String()); !slices.Equal(got, want) {
		t.Fatalf("%d counts after %s differ from the %d of a run without upgrades", len(got), after, len(want))
	}
}
