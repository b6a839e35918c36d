package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// onePlan is a job of one subtask (the source chained with the sink).
const onePlan = `{"name":"one","parallelism":1,
 "restart":{"strategy":"fixed-delay","attempts":3,"delay":0},
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":10}},
  {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}]}`

// fakeWorker answers a coordinator as a worker would: it takes
// deployments and cancels (recording them), and heartbeats the attempts it
// runs.
type fakeWorker struct {
	id      string
	nc      *nats.Conn
	mu      sync.Mutex
	running []transport.RunningAttempt
	deploys chan transport.Deployment
	cancels chan transport.CancelRequest
	stop    chan struct{}
	stopped chan struct{}
	// beforeReply, when set, sees each deployment before it is answered.
	beforeReply func(transport.Deployment)
}

func startFakeWorker(t *testing.T, nc *nats.Conn, id string, running ...transport.RunningAttempt) *fakeWorker {
	t.Helper()
	w := &fakeWorker{id: id, nc: nc, running: running, deploys: make(chan transport.Deployment, 16),
		cancels: make(chan transport.CancelRequest, 64), stop: make(chan struct{}), stopped: make(chan struct{})}
	ok, _ := json.Marshal(transport.Reply{})
	subD, err := nc.Subscribe(transport.WorkerDeploySubject(id), func(m *nats.Msg) {
		var d transport.Deployment
		if json.Unmarshal(m.Data, &d) != nil {
			return
		}
		w.mu.Lock()
		w.running = append(w.running, transport.RunningAttempt{JobID: d.JobID, Attempt: d.Attempt})
		before := w.beforeReply
		w.mu.Unlock()
		if before != nil {
			before(d)
		}
		w.deploys <- d
		_ = m.Respond(ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	subC, err := nc.Subscribe(transport.WorkerCancelSubject(id), func(m *nats.Msg) {
		var r transport.CancelRequest
		if json.Unmarshal(m.Data, &r) != nil {
			return
		}
		w.cancels <- r
		_ = m.Respond(ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.stopped)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			w.mu.Lock()
			b, _ := json.Marshal(transport.WorkerInfo{ID: id, Running: slices.Clone(w.running)})
			w.mu.Unlock()
			_ = nc.Publish(transport.WorkerHeartbeatSubject(id), b)
			select {
			case <-w.stop:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(w.stop)
		<-w.stopped
		_ = subD.Unsubscribe()
		_ = subC.Unsubscribe()
	})
	return w
}

// setRunning replaces the attempts the worker says it runs.
func (w *fakeWorker) setRunning(r ...transport.RunningAttempt) {
	w.mu.Lock()
	w.running = r
	w.mu.Unlock()
}

func (w *fakeWorker) report(t *testing.T, jobID string, attempt int, state string) {
	t.Helper()
	b, _ := json.Marshal(transport.TaskStatus{JobID: jobID, Attempt: attempt, Worker: w.id, Task: transport.TaskRef{}, State: state})
	if err := w.nc.Publish(transport.TaskStatusSubject(jobID, w.id), b); err != nil {
		t.Fatal(err)
	}
}

func nextDeploy(t *testing.T, w *fakeWorker) transport.Deployment {
	t.Helper()
	select {
	case d := <-w.deploys:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no deployment came")
	}
	return transport.Deployment{}
}

// startServer starts an in-process NATS server and returns how to connect.
func startServer(t *testing.T) (connect func(name string) *nats.Conn) {
	t.Helper()
	s, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return func(name string) *nats.Conn {
		nc, err := transport.ConnectInProcess(s, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// TestResumeJobsFromBucket: a coordinator started with ResumeJobs finds a
// running job in the job bucket, registers the worker from its heartbeat,
// cancels the old attempt the worker still runs, waits until it has
// stopped, deploys a new attempt, ignores the old attempt's reports, and
// stores the job's end and result, which a waiting client gets.
func TestResumeJobsFromBucket(t *testing.T) {
	connect := startServer(t)
	nc, client := connect("coordinator"), connect("client")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := OpenJobs(ctx, client, 1)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().Add(-time.Minute).Round(time.Millisecond)
	spec := JobSpec{JobID: "one-1", Name: "one", Plan: json.RawMessage(onePlan), State: transport.JobRunning,
		Attempt: 2, Restarts: 1, Started: started,
		RestartLog: []RestartEntry{{Attempt: 1, Reason: "boom"}}}
	b, _ := json.Marshal(spec)
	if _, err := kv.Put(ctx, spec.JobID, b); err != nil {
		t.Fatal(err)
	}
	w := startFakeWorker(t, client, "fw", transport.RunningAttempt{JobID: "one-1", Attempt: 2})
	watch, err := WatchJobs(client)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()

	c, err := New(Config{NATS: nc, DataDir: t.TempDir(), HeartbeatInterval: 20 * time.Millisecond, WorkerTimeout: time.Second, ResumeJobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	select {
	case r := <-w.cancels:
		if r.JobID != "one-1" || r.Attempt != 2 || !r.Failed {
			t.Fatalf("cancel %+v, want attempt 2 of one-1", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the old attempt was never cancelled")
	}
	// Its subtask reports (late): the new coordinator does not count it.
	w.report(t, "one-1", 2, transport.TaskFailed)
	select {
	case d := <-w.deploys:
		t.Fatalf("attempt %d deployed while the old attempt still ran", d.Attempt)
	case <-time.After(300 * time.Millisecond):
	}
	w.setRunning() // the old attempt has stopped
	d := nextDeploy(t, w)
	if d.JobID != "one-1" || d.Attempt != 3 || !slices.Equal(d.Tasks, []transport.TaskRef{{}}) {
		t.Fatalf("deployment %+v, want attempt 3 of one-1 with its one subtask", d)
	}
	if ids := workerIDs(c); !slices.Equal(ids, []string{"fw"}) {
		t.Fatalf("workers %v, want the one that only heartbeats", ids)
	}
	w.report(t, "one-1", 3, transport.TaskFinished)
	res, err := watch.Wait(ctx, "one-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != transport.JobFinished || res.Restarts != 1 || res.Duration < time.Minute {
		t.Fatalf("result %+v, want finished after 1 restart, timed from the job's start", res)
	}
	waitUntil(t, "the bucket never got the job's end", func() bool {
		s, err := ReadJobSpec(ctx, client, "one-1")
		return err == nil && s.State == transport.JobFinished && s.Result != nil && s.Attempt == 3
	})
	s, _ := ReadJobSpec(ctx, client, "one-1")
	if len(s.RestartLog) != 2 || s.RestartLog[1].Attempt != 2 || !strings.Contains(s.RestartLog[1].Reason, "coordinator restarted") {
		t.Fatalf("restart log %+v", s.RestartLog)
	}
	if !s.Started.Equal(started) {
		t.Fatalf("started %v, want %v", s.Started, started)
	}
}

// TestLostReportsFailAttempt: a worker whose heartbeats stop listing an
// attempt whose subtask there never reported its end lost that report; the
// attempt fails and restarts instead of waiting for ever.
func TestLostReportsFailAttempt(t *testing.T) {
	c, client := startTestCoordinator(t)
	w := startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool {
		return slices.Equal(workerIDs(c), []string{"fw"})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch, err := WatchJobs(client)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	id, err := Submit(ctx, client, transport.SubmitRequest{Name: "one", Plan: json.RawMessage(onePlan)})
	if err != nil {
		t.Fatal(err)
	}
	if d := nextDeploy(t, w); d.Attempt != 0 {
		t.Fatalf("first deployment: attempt %d", d.Attempt)
	}
	// The subtask ended, but its report was lost.
	w.setRunning()
	d := nextDeploy(t, w)
	if d.Attempt != 1 {
		t.Fatalf("deployment after the lost report: attempt %d, want 1", d.Attempt)
	}
	c.mu.Lock()
	log := slices.Clone(c.jobs[id].restartLog)
	c.mu.Unlock()
	if len(log) != 1 || !strings.Contains(log[0].Reason, "never reported their end") {
		t.Fatalf("restart log %+v, want the lost report as the cause", log)
	}
	w.report(t, id, 1, transport.TaskFinished)
	res, err := watch.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != transport.JobFinished || res.Restarts != 1 {
		t.Fatalf("result %+v, want finished after 1 restart", res)
	}
}

// TestWaitTakesResultFromBucket: a client that missed the job's done
// message (its connection was down when it was published) takes the result
// from the job's spec.
func TestWaitTakesResultFromBucket(t *testing.T) {
	connect := startServer(t)
	client := connect("client")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch, err := WatchJobs(client)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	watch.Poll = 20 * time.Millisecond
	kv, err := OpenJobs(ctx, client, 1)
	if err != nil {
		t.Fatal(err)
	}
	put := func(s JobSpec) {
		b, _ := json.Marshal(s)
		if _, err := kv.Put(ctx, s.JobID, b); err != nil {
			t.Fatal(err)
		}
	}
	put(JobSpec{JobID: "j-1", Name: "j", State: transport.JobRunning})
	got := make(chan *transport.JobResult, 1)
	go func() {
		r, _ := watch.Wait(ctx, "j-1")
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("Wait returned %+v for a running job", r)
	case <-time.After(200 * time.Millisecond):
	}
	put(JobSpec{JobID: "j-1", Name: "j", State: transport.JobFailed,
		Result: &transport.JobResult{JobID: "j-1", State: transport.JobFailed, Error: "boom"}})
	select {
	case r := <-got:
		if r == nil || r.State != transport.JobFailed || r.Error != "boom" {
			t.Fatalf("result %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait never took the result from the bucket")
	}
}

// TestTakeOverReadsBucketOutsideLock: a standby that takes over reads the
// running jobs from the bucket without holding c.mu; while that read is
// stalled (a listing tried again through a fault takes seconds), REST
// reads are served, and once it returns the new leader has the job and
// answers requests.
func TestTakeOverReadsBucketOutsideLock(t *testing.T) {
	connect := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := OpenJobs(ctx, connect("setup"), 1)
	if err != nil {
		t.Fatal(err)
	}
	spec := JobSpec{JobID: "one-1", Name: "one", Plan: json.RawMessage(onePlan), State: transport.JobRunning, Started: time.Now()}
	data, _ := json.Marshal(spec)
	if _, err := kv.Put(ctx, spec.JobID, data); err != nil {
		t.Fatal(err)
	}
	start := func(id string, set func(*Coordinator)) *Coordinator {
		t.Helper()
		c, err := New(Config{NATS: connect(id), DataDir: t.TempDir(), ServerID: id, Lease: time.Second, ResumeJobs: true,
			HeartbeatInterval: 20 * time.Millisecond, WorkerTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if set != nil {
			set(c)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a := start("a", nil)
	if _, leading := a.Leader(); !leading {
		t.Fatal("the first coordinator does not lead")
	}
	listing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	b := start("b", func(c *Coordinator) {
		c.listRunning = func(ctx context.Context, kv jetstream.KeyValue) ([]*JobSpec, error) {
			close(listing)
			<-release
			return runningSpecs(ctx, kv)
		}
	})
	if _, leading := b.Leader(); leading {
		t.Fatal("the second coordinator leads beside the first")
	}
	a.Close()
	select {
	case <-listing:
	case <-time.After(time.Minute):
		t.Fatal("the standby never took over")
	}
	// The listing is stalled: a REST read that takes c.mu is served.
	read := make(chan error, 1)
	go func() {
		_, err := b.JobPlan(Caller{}, "one-1")
		read <- err
	}()
	select {
	case err := <-read:
		if !errors.Is(err, ErrNoJob) {
			t.Fatalf("the plan of a job not loaded yet: %v, want %v", err, ErrNoJob)
		}
	case <-time.After(time.Minute):
		t.Fatal("a REST read waited for the take-over's read of the job bucket")
	}
	once.Do(func() { close(release) })
	waitUntil(t, "the new leader never loaded the job", func() bool {
		p, err := b.JobPlan(Caller{}, "one-1")
		return err == nil && p != nil
	})
	client := connect("client")
	waitUntil(t, "the new leader never answered a list request", func() bool {
		_, err := List(ctx, client)
		return err == nil
	})
}
