package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// TestReadersUseTheView: the list, overview, workers and metrics readers
// answer while the coordinator's lock is held (they read the published
// view, never the lock), and see every change once the lock that made it
// is released.
func TestReadersUseTheView(t *testing.T) {
	// The worker stays live however long the test holds the lock.
	c, client := startTestCoordinatorWith(t, func(cfg *Config) { cfg.WorkerTimeout = time.Hour })
	startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool { return len(c.Workers()) == 1 })
	j := addJob(t, c, "v-1", "", statusPlan)
	c.mu.Lock()
	_ = j.lc.Submit(c.nowMillis())
	_ = c.applyLocked(j)
	j.placement = placement{"fw": j.refs}
	c.mu.Unlock()

	c.mu.Lock()
	answered := make(chan struct{})
	var (
		jobs    []transport.JobInfo
		stats   Stats
		over    Overview
		workers []WorkerStatus
	)
	go func() {
		defer close(answered)
		jobs = c.Jobs(Caller{})
		stats = c.MetricsStats()
		over = c.Overview(Caller{})
		workers, _ = c.WorkerStatuses(Caller{})
	}()
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		c.mu.Unlock()
		t.Fatal("a reader waited for the coordinator's lock")
	}
	// A change under the lock is not seen until the lock is released.
	_ = j.lc.Cancel(c.nowMillis())
	c.mu.Unlock()

	if len(jobs) != 1 || jobs[0].JobID != "v-1" || jobs[0].State != lifecycle.Created.String() {
		t.Fatalf("jobs %+v, want v-1 CREATED", jobs)
	}
	if len(stats.Jobs) != 1 || stats.JobsByState[lifecycle.Created.String()] != 1 || stats.LiveWorkers != 1 {
		t.Fatalf("metrics %+v, want one CREATED job and one live worker", stats)
	}
	if over.Jobs[lifecycle.Created.String()] != 1 || over.Workers == nil || over.Workers.Live != 1 {
		t.Fatalf("overview %+v, want one CREATED job and one live worker", over)
	}
	if len(workers) != 1 || len(workers[0].Subtasks) != len(j.refs) || workers[0].Subtasks[0].JobID != "v-1" {
		t.Fatalf("workers %+v, want fw running the %d subtasks of v-1", workers, len(j.refs))
	}
	if got := c.Jobs(Caller{}); len(got) != 1 || got[0].State == lifecycle.Created.String() {
		t.Fatalf("after the cancellation: %+v, want v-1 no longer CREATED", got)
	}
}

// TestDetailReadersUseTheView: a job's detail, a vertex and the checkpoint
// overview answer while the coordinator's lock is held, with the job as
// the last release of the lock left it, and another tenant's job stays
// absent.
func TestDetailReadersUseTheView(t *testing.T) {
	c, client := startTestCoordinatorWith(t, func(cfg *Config) { cfg.WorkerTimeout = time.Hour })
	startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool { return len(c.Workers()) == 1 })
	j := addJob(t, c, "d-1", "", statusPlan)
	c.mu.Lock()
	_ = j.lc.Submit(c.nowMillis())
	_ = c.applyLocked(j)
	j.placement = placement{"fw": j.refs}
	c.mu.Unlock()

	c.mu.Lock()
	answered := make(chan struct{})
	var (
		d        *JobDetail
		v        *VertexStatus
		ov       *CheckpointOverview
		derr     error
		verr     error
		oerr     error
		otherErr error
	)
	go func() {
		defer close(answered)
		d, derr = c.Job(Caller{}, "d-1")
		if derr == nil && len(d.Vertices) > 0 {
			v, verr = c.Vertex(Caller{}, "d-1", d.Vertices[0].ID)
		}
		ov, oerr = c.Checkpoints(Caller{}, "d-1")
		_, otherErr = c.Job(Caller{Tenant: "bolt"}, "d-1")
	}()
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		c.mu.Unlock()
		t.Fatal("a detail reader waited for the coordinator's lock")
	}
	c.mu.Unlock()
	if derr != nil || verr != nil || oerr != nil {
		t.Fatalf("job %v, vertex %v, checkpoints %v", derr, verr, oerr)
	}
	if d.JobID != "d-1" || d.State != lifecycle.Created.String() || len(d.Vertices) == 0 {
		t.Fatalf("detail %+v, want d-1 CREATED with its vertices", d)
	}
	placed := 0
	for _, vs := range d.Vertices {
		for _, s := range vs.Subtasks {
			if s.Worker == "fw" {
				placed++
			}
		}
	}
	if placed == 0 {
		t.Fatalf("no subtask of d-1 is shown on fw: %+v", d.Vertices)
	}
	if v == nil || v.ID != d.Vertices[0].ID || ov == nil || ov.JobID != "d-1" {
		t.Fatalf("vertex %+v, overview %+v", v, ov)
	}
	if !errors.Is(otherErr, ErrNoJob) {
		t.Fatalf("another tenant's detail: %v, want ErrNoJob", otherErr)
	}
}
