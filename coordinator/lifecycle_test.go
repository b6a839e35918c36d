package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

// slowRestartPlan is onePlan with a restart a minute after a failure.
var slowRestartPlan = strings.Replace(onePlan, `"delay":0`, `"delay":60000`, 1)

// startOne starts a coordinator and a fake worker, submits plan and waits
// for its first deployment.
func startOne(t *testing.T, plan string) (*Coordinator, *fakeWorker, *Watch, string) {
	t.Helper()
	return startOneWith(t, plan, nil)
}

// startOneWith is startOne with a configuration that set changes.
func startOneWith(t *testing.T, plan string, set func(*Config)) (*Coordinator, *fakeWorker, *Watch, string) {
	t.Helper()
	c, client := startTestCoordinatorWith(t, set)
	w := startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool {
		return slices.Equal(workerIDs(c), []string{"fw"})
	})
	watch, err := WatchJobs(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := Submit(ctx, client, transport.SubmitRequest{Name: "one", Plan: json.RawMessage(plan)})
	if err != nil {
		t.Fatal(err)
	}
	if d := nextDeploy(t, w); d.Attempt != 0 {
		t.Fatalf("first deployment: attempt %d", d.Attempt)
	}
	return c, w, watch, id
}

func listed(t *testing.T, c *Coordinator, id string) transport.JobInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := List(ctx, c.cfg.NATS)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.JobID == id {
			return j
		}
	}
	t.Fatalf("job %s is not listed: %+v", id, jobs)
	return transport.JobInfo{}
}

// TestListShowsRestartAndCancelDuringIt: a failed attempt whose restart
// waits is listed RESTARTING with the next attempt and the failure as its
// cause; cancelled then, the job ends CANCELED without another deployment.
func TestListShowsRestartAndCancelDuringIt(t *testing.T) {
	c, w, watch, id := startOne(t, slowRestartPlan)
	if j := listed(t, c, id); j.State != "RUNNING" || j.Attempt != 0 {
		t.Fatalf("listed %+v, want RUNNING attempt 0", j)
	}
	w.report(t, id, 0, transport.TaskFailed)
	waitUntil(t, "the job was never listed RESTARTING", func() bool {
		j := listed(t, c, id)
		return j.State == "RESTARTING" && j.Attempt == 1 && j.Restarts == 1
	})
	if j := listed(t, c, id); j.Cause == "" {
		t.Fatalf("listed %+v without the restart's cause", j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Cancel(ctx, w.nc, id); err != nil {
		t.Fatal(err)
	}
	res, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != transport.JobCanceled || res.Restarts != 1 {
		t.Fatalf("result %+v, want canceled after 1 restart", res)
	}
	if j := listed(t, c, id); j.State != "CANCELED" {
		t.Fatalf("listed %+v, want CANCELED", j)
	}
	select {
	case d := <-w.deploys:
		t.Fatalf("attempt %d deployed after the cancel", d.Attempt)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestStopSavepointHook: a stop with savepoint that completes ends the job
// stopped once its subtasks stop; one that fails leaves it running.
func TestStopSavepointHook(t *testing.T) {
	c, w, watch, id := startOne(t, onePlan)
	c.mu.Lock()
	j := c.jobs[id]
	c.mu.Unlock()
	if err := c.stopSavepointRequested(j); err != nil {
		t.Fatal(err)
	}
	c.stopSavepointEnded(j, 0, 6, errors.New("savepoint 6 failed: declined"))
	waitUntil(t, "the failed stop was never heard of", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !j.lc.Stopping()
	})
	if s := listed(t, c, id).State; s != "RUNNING" {
		t.Fatalf("listed %s after the failed stop, want RUNNING", s)
	}
	c.stopSavepointEnded(j, 0, 7, nil)
	w.report(t, id, 0, transport.TaskCanceled)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != transport.JobStopped {
		t.Fatalf("result %+v, want stopped", res)
	}
	if j := listed(t, c, id); j.State != "FINISHED" {
		t.Fatalf("listed %+v, want FINISHED", j)
	}
}
