package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// noRestartPlan is onePlan without a restart strategy: a failed attempt
// fails the job.
const noRestartPlan = `{"name":"one","parallelism":1,
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":10}},
  {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}]}`

// onceRestartPlan restarts a failed attempt once, at once.
const onceRestartPlan = `{"name":"one","parallelism":1,
 "restart":{"strategy":"fixed-delay","attempts":1,"delay":0},
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":10}},
  {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}]}`

// clockedCoordinator is a coordinator whose clock the test moves, with
// heartbeat and liveness intervals so long that nothing is declared lost
// unless the test moves the clock and calls checkWorkers: what happens
// does not depend on how busy the machine is.
type clockedCoordinator struct {
	c      *Coordinator
	client *nats.Conn
	skew   atomic.Int64 // added to the wall clock, ns
}

func startClockedCoordinator(t *testing.T) *clockedCoordinator {
	t.Helper()
	connect := startServer(t)
	cc := &clockedCoordinator{client: connect("client")}
	c, err := New(Config{NATS: connect("coordinator"), DataDir: t.TempDir(), HeartbeatInterval: time.Hour, WorkerTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return time.Now().Add(time.Duration(cc.skew.Load())) }
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cc.c = c
	return cc
}

// silentWorker registers worker id without ever heartbeating. onDeploy
// runs in its deploy handler before it answers (successfully); every
// deployment and cancel it gets is recorded.
type silentWorker struct {
	deploys chan transport.Deployment
	cancels chan transport.CancelRequest
}

func (cc *clockedCoordinator) silentWorker(t *testing.T, id string, onDeploy func()) *silentWorker {
	t.Helper()
	w := &silentWorker{deploys: make(chan transport.Deployment, 8), cancels: make(chan transport.CancelRequest, 8)}
	ok, _ := json.Marshal(transport.Reply{})
	subD, err := cc.client.Subscribe(transport.WorkerDeploySubject(id), func(m *nats.Msg) {
		var d transport.Deployment
		if json.Unmarshal(m.Data, &d) != nil {
			return
		}
		if onDeploy != nil {
			onDeploy()
		}
		w.deploys <- d
		_ = m.Respond(ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	subC, err := cc.client.Subscribe(transport.WorkerCancelSubject(id), func(m *nats.Msg) {
		var r transport.CancelRequest
		if json.Unmarshal(m.Data, &r) == nil {
			w.cancels <- r
		}
		_ = m.Respond(ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = subD.Unsubscribe(); _ = subC.Unsubscribe() })
	info, _ := json.Marshal(transport.WorkerInfo{ID: id, Slots: 4})
	msg, err := cc.client.Request(transport.WorkerRegisterSubject(id), info, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r transport.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error != "" {
		t.Fatalf("registering %s: %s %v", id, msg.Data, err)
	}
	return w
}

// loseWorkers moves the clock past every worker's timeout and runs a
// liveness check: every registered worker is declared lost.
func (cc *clockedCoordinator) loseWorkers() {
	cc.skew.Add(int64(2 * time.Hour))
	cc.c.checkWorkers()
}

// submitAndWait submits plan and returns the job's id and result.
func (cc *clockedCoordinator) submitAndWait(t *testing.T, plan string) (string, *transport.JobResult) {
	t.Helper()
	watch, err := WatchJobs(cc.client)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := Submit(ctx, cc.client, transport.SubmitRequest{Name: "one", Plan: json.RawMessage(plan)})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	res, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatalf("waiting for job %s: %v", id, err)
	}
	return id, res
}

// TestDeployLosesItsOnlyWorker: the job's only worker is declared lost
// while it takes its deployment (a deployment made slow by a large plan,
// say). The liveness check takes the worker out of the job's placement;
// the deployment that placed it must go on with its own copy rather than
// find an empty placement (which once panicked the coordinator). The
// attempt then fails over: the job fails, naming the lost worker, and the
// coordinator goes on serving.
func TestDeployLosesItsOnlyWorker(t *testing.T) {
	cc := startClockedCoordinator(t)
	w := cc.silentWorker(t, "fw", cc.loseWorkers)
	id, res := cc.submitAndWait(t, noRestartPlan)
	if res.State != transport.JobFailed || !strings.Contains(res.Error, "worker fw lost") {
		t.Fatalf("result %+v, want failed because worker fw was lost", res)
	}
	if d := <-w.deploys; d.JobID != id || len(d.Tasks) != 1 {
		t.Fatalf("deployment %+v, want the job's one subtask", d)
	}
	cc.c.mu.Lock()
	j := cc.c.jobs[id]
	state, placed := j.lc.State(), len(j.placement)
	cc.c.mu.Unlock()
	if state != lifecycle.Failed || placed != 0 {
		t.Fatalf("job %s: %s with %d workers placed, want FAILED with none", id, state, placed)
	}
	// Still serving: a new worker takes the next job.
	cc.silentWorker(t, "fw2", nil)
	if _, err := cc.c.place("next", []transport.TaskRef{{}}); err != nil {
		t.Fatalf("placing after the failure: %v", err)
	}
}

// TestRestartFindsNoWorker: after its only worker was lost during the
// deployment, the restart finds no worker to place the job on: the job
// fails with the placement's error instead of deploying nothing.
func TestRestartFindsNoWorker(t *testing.T) {
	cc := startClockedCoordinator(t)
	cc.silentWorker(t, "fw", cc.loseWorkers)
	_, res := cc.submitAndWait(t, onceRestartPlan)
	if res.State != transport.JobFailed || res.Restarts != 1 || !strings.Contains(res.Error, "restart 1: no worker is registered") {
		t.Fatalf("result %+v, want failed at restart 1 for want of a worker", res)
	}
}

// TestDeployEmptyPlacement: a placement that gives no worker any subtask
// fails the attempt with an error that says so; nothing is deployed and
// the job does not hang waiting for a deployment that never comes.
func TestDeployEmptyPlacement(t *testing.T) {
	cc := startClockedCoordinator(t)
	w := cc.silentWorker(t, "fw", nil)
	c := cc.c
	plan, err := job.Parse([]byte(noRestartPlan))
	if err != nil {
		t.Fatal(err)
	}
	j := &jobState{
		info: transport.JobInfo{JobID: "one-empty", Name: "one", State: transport.JobRunning, Started: c.now()},
		plan: plan, refs: []transport.TaskRef{{}}, lc: newLifecycle(plan, false),
		pick: placement{}, started: c.now(), metrics: map[string]*transport.VertexMetrics{},
	}
	c.mu.Lock()
	c.jobs[j.info.JobID] = j
	_ = j.lc.Submit(c.nowMillis())
	acts := c.applyLocked(j)
	c.mu.Unlock()
	err = c.carryOut(j, acts)
	if err == nil || !strings.Contains(err.Error(), "empty placement") {
		t.Fatalf("deploying on an empty placement: %v, want an error that says so", err)
	}
	c.mu.Lock()
	state := j.lc.State()
	res := j.result
	c.mu.Unlock()
	if state != lifecycle.Failed || res == nil || res.Error != err.Error() {
		t.Fatalf("job %s with result %+v, want FAILED with %q", state, res, err)
	}
	select {
	case d := <-w.deploys:
		t.Fatalf("deployment %+v sent for an empty placement", d)
	default:
	}
}
