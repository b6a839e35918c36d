package engine

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/transport"
	"github.com/wstream/wstream/worker"
)

// Short heartbeats keep the failover tests fast; the timeout leaves a
// loaded machine ample room before a live worker could look lost.
const (
	testHeartbeat     = 50 * time.Millisecond
	testWorkerTimeout = time.Second
)

// failoverPlan is localPlan without failures of its own, long enough
// (records at a throttled rate) for a worker to be killed mid-run.
func failoverPlan(out string, records, parallelism int) string {
	p := localPlan(out, false, false)
	p = strings.Replace(p, `"count":6000,"keys":60,"rate":4000`, fmt.Sprintf(`"count":%d,"keys":60,"rate":4000`, records), 1)
	return strings.Replace(p, `"parallelism":2`, fmt.Sprintf(`"parallelism":%d`, parallelism), 1)
}

// startFailoverEngine starts n in-process workers with short heartbeats;
// the coordinator's log goes to the returned buffer.
func startFailoverEngine(t *testing.T, n int) (*Engine, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	e, err := Start(context.Background(), Options{
		DataDir: t.TempDir(), Stdout: &lockedBuffer{}, Workers: n, Host: host.Config{},
		HeartbeatInterval: testHeartbeat, WorkerTimeout: testWorkerTimeout,
		Log: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("closing engine: %v", err)
		}
	})
	return e, logs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func liveWorkerIDs(e *Engine) []string {
	var ids []string
	for _, w := range e.coord.Workers() {
		ids = append(ids, w.ID)
	}
	return ids
}

// TestLostWorkerFailover kills one of three workers abruptly while a keyed,
// checkpointing job runs on two of them: the coordinator must notice the
// silence, fail the attempt with the lost worker as its cause, and restart
// the job from its latest checkpoint on the remaining workers, whose
// committed output must be exactly a failure-free run's. A worker with the
// lost one's id then registers again and takes new work.
func TestLostWorkerFailover(t *testing.T) {
	const records = 12000
	ref, _ := startWorkers(t, 1)
	refOut := filepath.Join(t.TempDir(), "out")
	if r := run(t, ref, prepare(t, ref, "testops", failoverPlan(refOut, records, 2))); r.State != transport.JobFinished {
		t.Fatalf("reference run: %s %s", r.State, r.Error)
	}
	want := committedLines(t, refOut)
	if len(want) != records {
		t.Fatalf("reference run committed %d lines, want %d", len(want), records)
	}

	e, logs := startFailoverEngine(t, 3)
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	w0, w1, w2 := e.Workers()[0], e.Workers()[1], e.Workers()[2]
	out := filepath.Join(t.TempDir(), "out")
	d := prepare(t, e, "testops", failoverPlan(out, records, 2))
	watch, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, err := e.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}

	// Two subtasks per chain: the first attempt runs on w0 and w1 only.
	// Kill w1 once a checkpoint has completed, while the job still runs.
	waitFor(t, time.Minute, "no checkpoint completed", func() bool {
		hist, _ := coordinator.ReadHistory(e.opts.DataDir, id)
		for _, h := range hist {
			if h.Status == "completed" {
				return true
			}
		}
		return false
	})
	if !slices.Contains(w0.Jobs(), id) || !slices.Contains(w1.Jobs(), id) {
		t.Fatalf("before the kill: job %s on w0 %v, w1 %v; want it running on both", id, w0.Jobs(), w1.Jobs())
	}
	if len(w2.Jobs()) != 0 || w2.RemoteChannels() != 0 {
		t.Fatalf("w2 took part in the first attempt (jobs %v): the test proves nothing", w2.Jobs())
	}
	if err := e.KillWorker(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := coordinator.ReadRecord(e.opts.DataDir, id); err != nil || r.State != transport.JobRunning {
		t.Fatalf("the job ended before w1 was killed: %+v %v", r, err)
	}

	r, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != transport.JobFinished {
		t.Fatalf("%s %s", r.State, r.Error)
	}
	if r.Restarts == 0 {
		t.Fatal("the job never restarted after its worker was lost")
	}
	got := committedLines(t, out)
	if !slices.Equal(got, want) {
		t.Fatalf("after failover: committed %d lines, want %d identical to a run without failures", len(got), len(want))
	}

	rec, err := coordinator.ReadRecord(e.opts.DataDir, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.RestartLog) == 0 || rec.RestartLog[0].Attempt != 0 ||
		!strings.HasPrefix(rec.RestartLog[0].Reason, "worker w1 lost: no heartbeat for ") {
		t.Fatalf("restarts recorded: %+v; want the first caused by worker w1 lost", rec.RestartLog)
	}
	if rec.Attempt < 1 || rec.State != transport.JobFinished {
		t.Fatalf("record: attempt %d, %s; want a later attempt finished", rec.Attempt, rec.State)
	}
	if ids := liveWorkerIDs(e); !slices.Equal(ids, []string{"w0", "w2"}) {
		t.Fatalf("live workers %v, want [w0 w2]", ids)
	}
	// The restart spread the subtasks over both remaining workers.
	if w2.RemoteChannels() == 0 {
		t.Fatal("w2 exchanged nothing through JetStream: the restart did not place subtasks on it")
	}
	streamGone(t, e, id)

	// A worker with the lost one's id comes back and takes new work.
	nc, err := transport.ConnectInProcess(e.srv, "wstream-w1-again")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	back, err := worker.New(ctx, worker.Config{ID: "w1", NATS: nc, DataDir: e.opts.DataDir, Runtime: e.rt,
		Stdout: &lockedBuffer{}, HeartbeatInterval: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close(context.Background())
	if err := back.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := liveWorkerIDs(e); !slices.Equal(ids, []string{"w0", "w1", "w2"}) {
		t.Fatalf("live workers %v after w1 registered again, want [w0 w1 w2]", ids)
	}
	out2 := filepath.Join(t.TempDir(), "out")
	r2, _ := runID(t, e, prepare(t, e, "testops", failoverPlan(out2, 3000, 3)))
	if r2.State != transport.JobFinished || r2.Restarts != 0 {
		t.Fatalf("job after w1 came back: %s %s (%d restarts)", r2.State, r2.Error, r2.Restarts)
	}
	if n := len(committedLines(t, out2)); n != 3000 {
		t.Fatalf("job after w1 came back committed %d lines, want 3000", n)
	}
	if back.RemoteChannels() == 0 {
		t.Fatal("the returned w1 took no part in the new job")
	}
}

// TestLostWorkerWithoutRestart: a job without a restart strategy fails with
// the lost worker as its error, and does not hang.
func TestLostWorkerWithoutRestart(t *testing.T) {
	e, logs := startFailoverEngine(t, 2)
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	plan := strings.Replace(failoverPlan(filepath.Join(t.TempDir(), "out"), 40000, 2),
		`"restart":{"strategy":"fixed-delay","attempts":100,"delay":10},`, "", 1)
	d := prepare(t, e, "testops", plan)
	if d.Plan.Restart != nil {
		t.Fatal("the plan still has a restart strategy")
	}
	watch, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := e.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	w1 := e.Workers()[1]
	waitFor(t, time.Minute, "the job never started on w1", func() bool {
		for _, m := range w1.Metrics(id) {
			if m.RecordsOut > 0 {
				return true
			}
		}
		return false
	})
	killed := time.Now()
	if err := e.KillWorker(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != transport.JobFailed || !strings.HasPrefix(r.Error, "worker w1 lost: no heartbeat for ") {
		t.Fatalf("%s %q; want failed with worker w1 lost", r.State, r.Error)
	}
	// The last heartbeat came at most one interval before the kill.
	if since := time.Since(killed); since < testWorkerTimeout-testHeartbeat {
		t.Fatalf("the job failed %s after the kill, before the worker timeout (%s) ran out", since, testWorkerTimeout)
	}
	if r.Restarts != 0 {
		t.Fatalf("%d restarts without a restart strategy", r.Restarts)
	}
	if ids := liveWorkerIDs(e); !slices.Equal(ids, []string{"w0"}) {
		t.Fatalf("live workers %v, want [w0]", ids)
	}
	streamGone(t, e, id)
}
