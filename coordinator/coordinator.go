package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// Config configures a Coordinator.
type Config struct {
	NATS *nats.Conn
	Logf func(format string, args ...any)
	// HeartbeatInterval is how often workers send heartbeats (the workers'
	// default, 1s, when zero); the coordinator checks its workers' liveness
	// as often.
	HeartbeatInterval time.Duration
	// WorkerTimeout is how long a worker may stay silent before it is
	// declared lost (default 10 heartbeat intervals, 10s with the default
	// interval: a loaded machine or a long pause must not fail jobs over
	// needlessly): it leaves placement,
	// and every job attempt with subtasks on it fails and goes through its
	// restart strategy on the remaining workers. A lost worker that
	// heartbeats again takes new work.
	WorkerTimeout time.Duration
	// DeployTimeout bounds a worker's answer to a deployment, which includes
	// fetching and compiling the module (default 60s).
	DeployTimeout time.Duration
	// DataDir holds each job's record (jobs/JOB/job.json) and, for
	// checkpointing jobs, its checkpoints (jobs/JOB/checkpoints). Workers
	// must see the same path (one host, or a shared file system).
	DataDir string
	// ResumeJobs makes Start resume the jobs that the job bucket
	// (transport.JobsBucket) says are running: they were left by a
	// coordinator that died. Only one coordinator may run against a NATS
	// cluster at a time.
	ResumeJobs bool
}

// Coordinator is the job manager.
type Coordinator struct {
	cfg     Config
	mu      sync.Mutex
	workers map[string]*workerState
	jobs    map[string]*jobState
	subs    []*nats.Subscription
	now     func() time.Time
	// gone holds why each worker declared lost was (until it returns).
	gone map[string]string
	// The liveness monitor.
	quit    chan struct{}
	monitor sync.WaitGroup
	// store writes job specs to the job bucket (nil: no JetStream).
	store *jobStore
	// ids holds each job's checkpoint id counter (nil without JetStream).
	ids       *idCounter
	startedAt time.Time
	// cancelled says when the coordinator last cancelled an attempt that a
	// worker's heartbeat listed (key WORKER/JOB/ATTEMPT).
	cancelled map[string]time.Time
	// The monitor's view of the NATS connection: reconnects seen, and
	// whether it was down at the last check.
	reconnects uint64
	offline    bool
}

type workerState struct {
	info     transport.WorkerInfo
	lastSeen time.Time
	used     int
}

type jobState struct {
	info   transport.JobInfo
	plan   *job.Plan
	digest string
	module string
	// placement says which worker runs which subtasks of the current
	// attempt; a job spread over several workers exchanges data through
	// its JetStream data stream.
	placement placement
	refs      []transport.TaskRef
	attempt   int
	restarts  int
	// Per attempt:
	ended    int
	finished int
	failed   string
	canceled bool
	ckpt     *ckptDriver
	// stopped: stopped with a savepoint. Atomic because the checkpoint
	// driver sets it under its own mutex, where it must not take c.mu
	// (lock order: c.mu, then ckptDriver.mu, never the reverse).
	stopped atomic.Bool
	// savepoint the first attempt restores from
	fromSavepoint string
	savepointID   int64
	metrics       map[string]*transport.VertexMetrics
	sub           *nats.Subscription
	started       time.Time
	done          bool
	// deploying is set while an attempt is being deployed (and stays set
	// when deploying it failed: whoever deployed ends the job).
	deploying bool
	// reported counts, per worker, the subtasks of the attempt that
	// reported their end; lost holds the attempt's workers declared lost
	// (their reports are ignored from then on) and why.
	reported map[string]int
	lost     map[string]string
	// restartLog says why each restart happened.
	restartLog []RestartEntry
	// ckptRoot is the checkpoint storage a resumed job's spec names;
	// latestCheckpoint the job's latest completed checkpoint.
	ckptRoot         string
	latestCheckpoint int64
	// result is set when the job has ended.
	result *transport.JobResult
	// missing counts, per worker, the heartbeats in a row that did not list
	// the current attempt although subtasks of it there never reported.
	missing map[string]int
}

// New returns a coordinator; Start subscribes it.
func New(cfg Config) (*Coordinator, error) {
	if cfg.NATS == nil {
		return nil, errors.New("coordinator: no NATS connection")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.WorkerTimeout <= 0 {
		cfg.WorkerTimeout = 10 * cfg.HeartbeatInterval
	}
	if cfg.DeployTimeout <= 0 {
		cfg.DeployTimeout = 60 * time.Second
	}
	return &Coordinator{cfg: cfg, workers: map[string]*workerState{}, jobs: map[string]*jobState{}, now: time.Now, gone: map[string]string{},
		cancelled: map[string]time.Time{}}, nil
}

// Start opens the job bucket, subscribes to the coordinator's subjects and,
// with Config.ResumeJobs, resumes the jobs the bucket says are running.
func (c *Coordinator) Start() error {
	nc := c.cfg.NATS
	c.startedAt = c.now()
	c.reconnects = nc.Stats().Reconnects
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	kv, err := OpenJobs(ctx, nc)
	switch {
	case err == nil:
		c.store = newJobStore(kv, c.cfg.Logf)
		if c.ids, err = openIDCounter(ctx, nc); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
	case c.cfg.ResumeJobs:
		return fmt.Errorf("coordinator: %w", err)
	default:
		c.cfg.Logf("coordinator: jobs are not kept in JetStream: %v", err)
	}
	var resume []*jobState
	if c.cfg.ResumeJobs {
		c.mu.Lock()
		resume, err = c.loadJobs(ctx)
		c.mu.Unlock()
		if err != nil {
			c.Close()
			return err
		}
	}
	for subj, h := range map[string]nats.MsgHandler{
		transport.SubjectRegister:  c.onRegister,
		transport.SubjectHeartbeat: c.onHeartbeat,
		transport.SubjectSubmit:    c.onSubmit,
		transport.SubjectCancel:    c.onCancel,
		transport.SubjectList:      c.onList,
		transport.SubjectSavepoint: c.onSavepoint,
	} {
		s, err := nc.Subscribe(subj, h)
		if err != nil {
			c.Close()
			return fmt.Errorf("coordinator: subscribing to %s: %w", subj, err)
		}
		c.subs = append(c.subs, s)
	}
	if err := nc.Flush(); err != nil {
		c.Close()
		return err
	}
	c.quit = make(chan struct{})
	c.monitor.Add(1)
	go c.watchWorkers(c.quit)
	for _, j := range resume {
		c.monitor.Add(1)
		go func() {
			defer c.monitor.Done()
			c.resume(j, c.quit)
		}()
	}
	return nil
}

// Close unsubscribes. The jobs' specs stay in the job bucket: a
// coordinator started later with Config.ResumeJobs resumes the jobs that
// still run.
func (c *Coordinator) Close() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.subs = nil
	if c.quit != nil {
		close(c.quit)
		c.monitor.Wait()
		c.quit = nil
	}
	if c.store != nil {
		c.store.close(2 * time.Second)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jobs {
		if j.sub != nil {
			_ = j.sub.Unsubscribe()
		}
	}
}

func respond(m *nats.Msg, v any) {
	b, _ := json.Marshal(v)
	_ = m.Respond(b)
}

var idChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *Coordinator) onRegister(m *nats.Msg) {
	var w transport.WorkerInfo
	if err := json.Unmarshal(m.Data, &w); err != nil {
		respond(m, transport.Reply{Error: "bad registration: " + err.Error()})
		return
	}
	if !idChars.MatchString(w.ID) {
		respond(m, transport.Reply{Error: fmt.Sprintf("worker id %q: use letters, digits, '_' and '-'", w.ID)})
		return
	}
	c.mu.Lock()
	ws, ok := c.workers[w.ID]
	if !ok {
		ws = &workerState{}
		c.workers[w.ID] = ws
	}
	ws.info = w
	ws.lastSeen = c.now()
	delete(c.gone, w.ID)
	c.mu.Unlock()
	c.cfg.Logf("coordinator: worker %s registered (%s slots)", w.ID, slotsText(w.Slots))
	respond(m, transport.Reply{})
}

func slotsText(n int) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func (c *Coordinator) onHeartbeat(m *nats.Msg) {
	var w transport.WorkerInfo
	if json.Unmarshal(m.Data, &w) != nil {
		return
	}
	if !idChars.MatchString(w.ID) {
		return
	}
	c.mu.Lock()
	ws, known := c.workers[w.ID]
	// A heartbeat carries what registration needs: a worker this
	// coordinator does not know (it restarted, or declared the worker lost
	// when it was cut off or stalled) registers anew and takes new work; the
	// subtasks it ran belong to attempts that have failed over already, and
	// are cancelled below.
	why, wasLost := c.gone[w.ID]
	if !known {
		delete(c.gone, w.ID)
		ws = &workerState{}
		c.workers[w.ID] = ws
	}
	ws.info = w
	ws.lastSeen = c.now()
	cancels, failovers := c.reconcileLocked(w.ID, w.Running)
	c.mu.Unlock()
	switch {
	case known:
	case wasLost:
		c.cfg.Logf("coordinator: worker %s is back (%s slots) after it was declared lost (%s)", w.ID, slotsText(w.Slots), why)
	default:
		c.cfg.Logf("coordinator: worker %s registered by its heartbeat (%s slots)", w.ID, slotsText(w.Slots))
	}
	for _, r := range cancels {
		c.cfg.Logf("coordinator: worker %s still runs attempt %d of job %s: cancelling it", w.ID, r.Attempt, r.JobID)
		go c.cancelOn(w.ID, r.JobID, r.Attempt, true)
	}
	for _, f := range failovers {
		go c.runFailover(f)
	}
}

// Workers lists the registered workers that are alive.
func (c *Coordinator) Workers() []transport.WorkerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []transport.WorkerInfo
	for _, w := range c.workers {
		if c.now().Sub(w.lastSeen) <= c.cfg.WorkerTimeout {
			out = append(out, w.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func newJobID(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = strings.Map(func(r rune) rune {
		if r < 128 && idChars.MatchString(string(r)) {
			return r
		}
		return '_'
	}, name)
	if name == "" {
		name = "job"
	}
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b[:])
}

func (c *Coordinator) onSubmit(m *nats.Msg) {
	var req transport.SubmitRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respond(m, transport.SubmitReply{Error: "bad submit request: " + err.Error()})
		return
	}
	// Deploying waits on a worker: answer from a goroutine so that status
	// messages keep flowing meanwhile.
	go func() {
		id, err := c.submit(req)
		if err != nil {
			respond(m, transport.SubmitReply{Error: err.Error()})
			return
		}
		respond(m, transport.SubmitReply{JobID: id})
	}()
}

func (c *Coordinator) submit(req transport.SubmitRequest) (string, error) {
	plan, err := job.Parse(req.Plan)
	if err != nil {
		return "", err
	}
	g, err := job.Build(plan)
	if err != nil {
		return "", err
	}
	var refs []transport.TaskRef
	for _, ch := range g.Chains {
		for s := 0; s < ch.Parallelism; s++ {
			refs = append(refs, transport.TaskRef{Chain: ch.Index, Subtask: s})
		}
	}
	name := req.Name
	if name == "" {
		name = plan.Name
	}
	id := req.Resume
	attempt := 0
	var restartLog []RestartEntry
	if id != "" {
		// A resumed job continues from its latest checkpoint; its sinks
		// recover as after any restart.
		rec, err := c.readRecord(id)
		if err != nil {
			return "", err
		}
		if rec.State != transport.JobRunning {
			return "", fmt.Errorf("job %s has %s: there is nothing to resume", id, rec.State)
		}
		attempt = rec.Attempt + 1
		restartLog = rec.Restarts
	} else {
		id = newJobID(name)
	}

	var spID int64
	if req.FromSavepoint != "" {
		if id != "" && req.Resume != "" {
			return "", errors.New("a job cannot both resume and start from a savepoint")
		}
		var root string
		if root, spID, err = checkSavepoint(req.FromSavepoint, plan, req.AllowNonRestoredState, c.cfg.NATS); err != nil {
			return "", err
		}
		req.FromSavepoint = root
	}
	pick, err := c.place(name, refs)
	if err != nil {
		return "", err
	}
	js := &jobState{
		info:      transport.JobInfo{JobID: id, Name: name, State: transport.JobRunning, Started: c.now()},
		plan:      plan,
		digest:    req.ModuleDigest,
		module:    req.ModuleName,
		placement: pick,
		refs:      refs,
		attempt:   attempt,
		started:   c.now(),
		metrics:   map[string]*transport.VertexMetrics{},

		fromSavepoint: req.FromSavepoint,
		savepointID:   spID,
		restartLog:    restartLog,
	}
	c.mu.Lock()
	if old, ok := c.jobs[id]; ok && !old.done {
		c.mu.Unlock()
		c.release(pick)
		return "", fmt.Errorf("job %s is running already", id)
	}
	c.jobs[id] = js
	c.mu.Unlock()
	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id), c.onTaskStatus)
	if err == nil {
		err = c.cfg.NATS.Flush()
	}
	if err != nil {
		c.forget(id, pick)
		return "", fmt.Errorf("job %s: %w", id, err)
	}
	c.mu.Lock()
	js.sub = sub
	c.mu.Unlock()
	c.writeRecord(js, transport.JobRunning)
	if err := c.deployAttempt(js); err != nil {
		_ = sub.Unsubscribe()
		c.mu.Lock()
		pl := js.placement
		c.mu.Unlock()
		c.forget(id, pl)
		c.dropDataStream(id)
		c.writeRecord(js, transport.JobFailed)
		return "", err
	}
	return id, nil
}

// placement maps worker ids to the subtasks they run.
type placement map[string][]transport.TaskRef

// workers lists the placement's workers in order.
func (p placement) workers() []string {
	out := make([]string, 0, len(p))
	for w := range p {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// place reserves slots for a job's subtasks on the live workers. Subtask s
// of every chain goes to the s-th live worker (in id order, round robin), or
// the next one with a free slot: forward edges stay on one worker and keyed
// exchanges spread over all of them. With one live worker every subtask runs
// there, as long as it has the slots.
func (c *Coordinator) place(name string, refs []transport.TaskRef) (placement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*workerState
	for _, w := range c.workers {
		if c.now().Sub(w.lastSeen) <= c.cfg.WorkerTimeout {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		if len(c.workers) == 0 {
			return nil, errors.New("no worker is registered: start one with `wstream worker`")
		}
		return nil, fmt.Errorf("job %s needs %d slots and no live worker has that many free", name, len(refs))
	}
	sort.Slice(live, func(i, k int) bool { return live[i].info.ID < live[k].info.ID })
	free := make([]int, len(live))
	total, unlimited := 0, false
	for i, w := range live {
		if w.info.Slots <= 0 {
			free[i] = -1
			unlimited = true
			continue
		}
		free[i] = max(0, w.info.Slots-w.used)
		total += free[i]
	}
	if !unlimited && total < len(refs) {
		if len(live) == 1 {
			return nil, fmt.Errorf("job %s needs %d slots and no live worker has that many free", name, len(refs))
		}
		return nil, fmt.Errorf("job %s needs %d slots and the %d live workers have %d free", name, len(refs), len(live), total)
	}
	p := placement{}
	for _, r := range refs {
		for k := 0; k < len(live); k++ {
			i := (r.Subtask + k) % len(live)
			if free[i] == 0 {
				continue
			}
			if free[i] > 0 {
				free[i]--
			}
			p[live[i].info.ID] = append(p[live[i].info.ID], r)
			break
		}
	}
	for _, w := range live {
		w.used += len(p[w.info.ID])
	}
	return p, nil
}

// release gives back the slots of a placement.
func (c *Coordinator) release(p placement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(p)
}

func (c *Coordinator) releaseLocked(p placement) {
	for id, refs := range p {
		if w, ok := c.workers[id]; ok {
			w.used -= len(refs)
		}
	}
}

// dataStream creates a job's data stream, unless it exists, when its
// placement spans several workers, and returns its name ("" for a job on
// one worker). The stream is not reset between attempts.
func (c *Coordinator) dataStream(id string, p placement) (string, error) {
	if len(p) < 2 {
		// An earlier attempt's stream is kept: the checkpoint this one
		// restores from may refer to ranges of it. It goes with the job.
		return "", nil
	}
	js, err := jetstream.New(c.cfg.NATS)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Right after a NATS server restart JetStream may not answer yet.
		err := transport.CreateDataStream(ctx, js, id)
		if err == nil {
			return transport.DataStream(id), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("job %s: %w", id, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// dropDataStream removes a job's data stream, if it has one.
func (c *Coordinator) dropDataStream(id string) {
	js, err := jetstream.New(c.cfg.NATS)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = transport.DeleteDataStream(ctx, js, id)
		cancel()
	}
	if err != nil {
		c.cfg.Logf("coordinator: job %s: %v", id, err)
	}
}

// deployAttempt starts the current attempt of a job: checkpointing jobs
// restore from their latest usable checkpoint (none on a first attempt).
func (c *Coordinator) deployAttempt(js *jobState) error {
	d := transport.Deployment{
		JobID: js.info.JobID, Attempt: js.attempt, Plan: js.plan.JSON(),
		ModuleDigest: js.digest, ModuleName: js.module, Tasks: js.refs,
	}
	if js.plan.Restart != nil {
		_, d.Restartable = js.plan.Restart.DelayBefore(js.restarts + 1)
	}
	c.mu.Lock()
	pl := js.placement
	js.deploying = true
	c.mu.Unlock()
	stream, err := c.dataStream(js.info.JobID, pl)
	if err != nil {
		return err
	}
	d.DataStream = stream
	if js.plan.Checkpoint.Enabled() {
		drv, restore, err := c.newCkptDriver(js)
		if err != nil {
			return fmt.Errorf("job %s: %w", js.info.JobID, err)
		}
		drv.workers = pl.workers()
		d.CheckpointRoot = drv.storage.Root()
		d.RestoreID = restore
		if restore == 0 && js.fromSavepoint != "" {
			// No checkpoint of its own yet: start (again) from the savepoint.
			d.SavepointRoot, d.RestoreID = js.fromSavepoint, js.savepointID
		}
		// Every later restart can fall back on a checkpoint.
		d.Restartable = d.Restartable || js.plan.Restart != nil
		c.mu.Lock()
		js.ckpt = drv
		c.mu.Unlock()
	}
	// Every worker gets its subtasks at once; the channels between them
	// wait for each other through the data stream.
	workers := pl.workers()
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dw := d
			dw.Tasks = pl[w]
			errs[i] = c.deployOn(w, dw)
		}()
	}
	wg.Wait()
	var failed error
	for i, err := range errs {
		if err != nil && failed == nil {
			failed = fmt.Errorf("deploying job %s on worker %s: %w", js.info.JobID, workers[i], err)
		}
	}
	if failed != nil {
		if js.ckpt != nil {
			js.ckpt.stop()
		}
		// The workers that took their part stop it.
		for i, w := range workers {
			if errs[i] == nil {
				c.cancelOn(w, js.info.JobID, js.attempt, true)
			}
		}
		return failed
	}
	if js.ckpt != nil {
		js.ckpt.start()
	}
	c.mu.Lock()
	js.deploying = false
	c.mu.Unlock()
	where := "worker " + workers[0]
	if len(workers) > 1 {
		where = fmt.Sprintf("%d workers (%s)", len(workers), strings.Join(workers, ", "))
	}
	c.cfg.Logf("coordinator: job %s attempt %d deployed on %s (%d subtasks%s)", js.info.JobID, js.attempt, where, len(js.refs), restoreText(d.RestoreID))
	return nil
}

// deployOn sends a worker its part of an attempt and waits for its answer.
func (c *Coordinator) deployOn(worker string, d transport.Deployment) error {
	b, _ := json.Marshal(d)
	// A worker that has not re-established its connection yet (after a
	// NATS server restart) has no subscription: give it a few seconds.
	retryUntil := time.Now().Add(5 * time.Second)
	var msg *nats.Msg
	var err error
	for {
		msg, err = c.cfg.NATS.Request(transport.WorkerDeploySubject(worker), b, c.cfg.DeployTimeout)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(retryUntil) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	var r transport.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

func restoreText(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf(", from checkpoint %d", id)
}

func (c *Coordinator) forget(id string, p placement) {
	c.mu.Lock()
	delete(c.jobs, id)
	c.releaseLocked(p)
	c.mu.Unlock()
}

func (c *Coordinator) onTaskStatus(m *nats.Msg) {
	var st transport.TaskStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		c.cfg.Logf("coordinator: bad task status on %s: %v", m.Subject, err)
		return
	}
	c.mu.Lock()
	j, ok := c.jobs[st.JobID]
	if !ok || j.done || st.Attempt != j.attempt || j.lost[st.Worker] != "" {
		// A lost worker's subtasks were counted as ended when it was lost.
		c.mu.Unlock()
		return
	}
	if j.reported == nil {
		j.reported = map[string]int{}
	}
	j.reported[st.Worker]++
	j.ended++
	for _, vm := range st.Metrics {
		agg, ok := j.metrics[vm.Vertex]
		if !ok {
			agg = &transport.VertexMetrics{Vertex: vm.Vertex}
			j.metrics[vm.Vertex] = agg
		}
		agg.RecordsIn += vm.RecordsIn
		agg.RecordsOut += vm.RecordsOut
	}
	cancel := false
	switch st.State {
	case transport.TaskFinished:
		j.finished++
		if j.ckpt != nil {
			j.ckpt.taskFinished(checkpoint.TaskID{Chain: st.Task.Chain, Subtask: st.Task.Subtask})
		}
	case transport.TaskFailed:
		if j.failed == "" {
			j.failed = st.Error
			cancel = true
		}
	}
	attemptOver := j.ended == len(j.refs)
	workers := j.placement.workers()
	c.mu.Unlock()
	if cancel {
		c.cancelAll(workers, st.JobID, st.Attempt, true)
	}
	if attemptOver {
		c.attemptEnded(j)
	}
}

// failJob fails the current attempt of a job for a reason of the
// coordinator's own (too many failed checkpoints).
func (c *Coordinator) failJob(j *jobState, attempt int, reason string) {
	c.mu.Lock()
	if j.done || j.attempt != attempt || j.failed != "" {
		c.mu.Unlock()
		return
	}
	j.failed = reason
	workers := j.placement.workers()
	c.mu.Unlock()
	c.cancelAll(workers, j.info.JobID, attempt, true)
}

// attemptEnded runs when every subtask of the current attempt has ended:
// the job finishes, fails, is cancelled, or restarts per its strategy.
func (c *Coordinator) attemptEnded(j *jobState) {
	c.mu.Lock()
	if j.ckpt != nil {
		j.ckpt.stop()
		j.ckpt = nil
	}
	restart := false
	var delay int64
	if j.failed != "" && !j.canceled && j.plan.Restart != nil {
		delay, restart = j.plan.Restart.DelayBefore(j.restarts + 1)
	}
	if !restart {
		result := c.endJob(j)
		c.mu.Unlock()
		c.announce(j, result)
		return
	}
	reason := j.failed
	j.restartLog = append(j.restartLog, RestartEntry{Attempt: j.attempt, Reason: reason, Time: c.now()})
	j.restarts++
	j.attempt++
	j.ended, j.finished, j.failed = 0, 0, ""
	j.reported, j.lost, j.missing = nil, nil, nil
	j.metrics = map[string]*transport.VertexMetrics{}
	// The next attempt is placed again on the workers alive then.
	c.releaseLocked(j.placement)
	j.placement = nil
	c.mu.Unlock()
	c.cfg.Logf("coordinator: job %s failed (%s); restart %d in %dms", j.info.JobID, reason, j.restarts, delay)
	c.writeRecord(j, transport.JobRunning)
	go func() {
		time.Sleep(time.Duration(delay) * time.Millisecond)
		c.mu.Lock()
		stop := j.canceled || j.done
		c.mu.Unlock()
		if stop {
			c.mu.Lock()
			result := c.endJob(j)
			c.mu.Unlock()
			c.announce(j, result)
			return
		}
		pl, err := c.place(j.info.Name, j.refs)
		if err == nil {
			c.mu.Lock()
			j.placement = pl
			c.mu.Unlock()
			err = c.deployAttempt(j)
		}
		if err != nil {
			c.mu.Lock()
			j.failed = fmt.Sprintf("restart %d: %v", j.restarts, err)
			j.canceled = true // no further restarts
			result := c.endJob(j)
			c.mu.Unlock()
			c.announce(j, result)
		}
	}()
}

// endJob records a job's end; c.mu is held.
func (c *Coordinator) endJob(j *jobState) *transport.JobResult {
	j.done = true
	if j.sub != nil {
		_ = j.sub.Unsubscribe()
	}
	c.releaseLocked(j.placement)
	j.placement = nil
	r := &transport.JobResult{JobID: j.info.JobID, Name: j.info.Name, Duration: c.now().Sub(j.started), Restarts: j.restarts}
	switch {
	case j.failed != "":
		r.State, r.Error = transport.JobFailed, j.failed
		if j.restarts > 0 {
			r.Error = fmt.Sprintf("%s (after %d restarts)", j.failed, j.restarts)
		}
	case j.finished == len(j.refs):
		r.State = transport.JobFinished
	case j.stopped.Load():
		r.State = transport.JobStopped
	default:
		r.State = transport.JobCanceled
	}
	j.info.State, j.info.Error = r.State, r.Error
	for _, v := range j.plan.Vertices {
		if m, ok := j.metrics[v.ID]; ok {
			r.Metrics = append(r.Metrics, *m)
		}
	}
	j.result = r
	c.cfg.Logf("coordinator: job %s %s after %s", r.JobID, r.State, r.Duration.Round(time.Millisecond))
	return r
}

// announce removes an ended job's data stream, records its end and
// publishes its result.
func (c *Coordinator) announce(j *jobState, result *transport.JobResult) {
	c.dropDataStream(j.info.JobID)
	c.writeRecord(j, result.State)
	b, _ := json.Marshal(result)
	_ = c.cfg.NATS.Publish(transport.JobDoneSubject(result.JobID), b)
}

// cancelAll tells every worker of a job to stop its subtasks of attempt.
func (c *Coordinator) cancelAll(workers []string, id string, attempt int, failed bool) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.cancelOn(w, id, attempt, failed)
		}()
	}
	wg.Wait()
}

func (c *Coordinator) cancelOn(worker, id string, attempt int, failed bool) {
	b, _ := json.Marshal(transport.CancelRequest{JobID: id, Attempt: attempt, Failed: failed})
	if _, err := c.cfg.NATS.Request(transport.WorkerCancelSubject(worker), b, 5*time.Second); err != nil {
		c.cfg.Logf("coordinator: cancelling job %s on worker %s: %v", id, worker, err)
	}
}

func (c *Coordinator) onCancel(m *nats.Msg) {
	var req transport.CancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respond(m, transport.Reply{Error: "bad cancel request: " + err.Error()})
		return
	}
	c.mu.Lock()
	j, ok := c.jobs[req.JobID]
	var workers []string
	var attempt int
	if ok && !j.done {
		j.canceled = true
		workers, attempt = j.placement.workers(), j.attempt
	}
	c.mu.Unlock()
	if !ok {
		respond(m, transport.Reply{Error: fmt.Sprintf("no job %q", req.JobID)})
		return
	}
	if len(workers) > 0 {
		go c.cancelAll(workers, req.JobID, attempt, false)
	}
	respond(m, transport.Reply{})
}

func (c *Coordinator) onList(m *nats.Msg) {
	c.mu.Lock()
	out := transport.ListReply{Jobs: []transport.JobInfo{}}
	for _, j := range c.jobs {
		out.Jobs = append(out.Jobs, j.info)
	}
	c.mu.Unlock()
	sort.Slice(out.Jobs, func(i, k int) bool { return out.Jobs[i].Started.Before(out.Jobs[k].Started) })
	respond(m, out)
}

// Watch is a client helper: it returns the result of a job, which must
// have been subscribed to with WatchJobs before the job was submitted.
type Watch struct {
	nc  *nats.Conn
	sub *nats.Subscription
	ch  chan *nats.Msg
	kv  jetstream.KeyValue
	// Poll is how often Wait also looks up the job's spec in the job
	// bucket (default 1s).
	Poll time.Duration
}

// WatchJobs subscribes to every job's done subject; call it before
// submitting so that a short job's end is not missed.
func WatchJobs(nc *nats.Conn) (*Watch, error) {
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(transport.JobDoneSubject("*"), ch)
	if err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return &Watch{nc: nc, sub: sub, ch: ch, Poll: time.Second}, nil
}

// Wait returns the result of job id, or ctx's error. The result comes on
// the job's done subject; since that message is lost when it is published
// while this client's connection is down (a NATS server restart), Wait also
// looks for the result in the job's spec in the job bucket now and then.
// It waits across coordinator and NATS server restarts.
func (w *Watch) Wait(ctx context.Context, id string) (*transport.JobResult, error) {
	poll := time.NewTicker(max(w.Poll, 10*time.Millisecond))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-w.ch:
			var r transport.JobResult
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return nil, fmt.Errorf("bad job result: %w", err)
			}
			if r.JobID == id {
				return &r, nil
			}
		case <-poll.C:
			if r := w.stored(ctx, id); r != nil {
				return r, nil
			}
		}
	}
}

// stored returns the result in the spec of job id, nil when it has none
// (yet) or cannot be read now.
func (w *Watch) stored(ctx context.Context, id string) *transport.JobResult {
	if w.nc == nil || !w.nc.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	if w.kv == nil {
		js, err := jetstream.New(w.nc)
		if err != nil {
			return nil
		}
		kv, err := js.KeyValue(ctx, transport.JobsBucket)
		if err != nil {
			return nil
		}
		w.kv = kv
	}
	s, err := getSpec(ctx, w.kv, id)
	if err != nil || s.State == transport.JobRunning || s.Result == nil {
		return nil
	}
	return s.Result
}

// Close unsubscribes.
func (w *Watch) Close() { _ = w.sub.Unsubscribe() }
