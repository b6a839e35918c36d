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
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// Config configures a Coordinator.
type Config struct {
	NATS *nats.Conn
	Logf func(format string, args ...any)
	// WorkerTimeout is how long a worker may stay silent before it is
	// considered lost (default 10s).
	WorkerTimeout time.Duration
	// DeployTimeout bounds a worker's answer to a deployment, which includes
	// fetching and compiling the module (default 60s).
	DeployTimeout time.Duration
}

// Coordinator is the job manager.
type Coordinator struct {
	cfg     Config
	mu      sync.Mutex
	workers map[string]*workerState
	jobs    map[string]*jobState
	subs    []*nats.Subscription
	now     func() time.Time
}

type workerState struct {
	info     transport.WorkerInfo
	lastSeen time.Time
	used     int
}

type jobState struct {
	info     transport.JobInfo
	plan     *job.Plan
	worker   string
	tasks    int
	ended    int
	finished int
	failed   string
	canceled bool
	metrics  map[string]*transport.VertexMetrics
	sub      *nats.Subscription
	started  time.Time
	done     bool
}

// New returns a coordinator; Start subscribes it.
func New(cfg Config) (*Coordinator, error) {
	if cfg.NATS == nil {
		return nil, errors.New("coordinator: no NATS connection")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.WorkerTimeout <= 0 {
		cfg.WorkerTimeout = 10 * time.Second
	}
	if cfg.DeployTimeout <= 0 {
		cfg.DeployTimeout = 60 * time.Second
	}
	return &Coordinator{cfg: cfg, workers: map[string]*workerState{}, jobs: map[string]*jobState{}, now: time.Now}, nil
}

// Start subscribes to the coordinator's subjects.
func (c *Coordinator) Start() error {
	nc := c.cfg.NATS
	for subj, h := range map[string]nats.MsgHandler{
		transport.SubjectRegister:  c.onRegister,
		transport.SubjectHeartbeat: c.onHeartbeat,
		transport.SubjectSubmit:    c.onSubmit,
		transport.SubjectCancel:    c.onCancel,
		transport.SubjectList:      c.onList,
	} {
		s, err := nc.Subscribe(subj, h)
		if err != nil {
			c.Close()
			return fmt.Errorf("coordinator: subscribing to %s: %w", subj, err)
		}
		c.subs = append(c.subs, s)
	}
	return nc.Flush()
}

// Close unsubscribes.
func (c *Coordinator) Close() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.subs = nil
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
	c.mu.Lock()
	if ws, ok := c.workers[w.ID]; ok {
		ws.lastSeen = c.now()
	}
	c.mu.Unlock()
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
	id := newJobID(name)

	// Every subtask of a job runs on one worker: the one with the most free
	// slots among those that fit it.
	c.mu.Lock()
	var pick *workerState
	for _, w := range c.workers {
		if c.now().Sub(w.lastSeen) > c.cfg.WorkerTimeout {
			continue
		}
		free := w.info.Slots - w.used
		if w.info.Slots > 0 && free < len(refs) {
			continue
		}
		if pick == nil || w.info.Slots <= 0 || (pick.info.Slots > 0 && free > pick.info.Slots-pick.used) {
			pick = w
		}
	}
	if pick == nil {
		n := len(c.workers)
		c.mu.Unlock()
		if n == 0 {
			return "", errors.New("no worker is registered: start one with `wstream worker`")
		}
		return "", fmt.Errorf("job %s needs %d slots and no live worker has that many free", name, len(refs))
	}
	pick.used += len(refs)
	js := &jobState{
		info:    transport.JobInfo{JobID: id, Name: name, State: transport.JobRunning, Started: c.now()},
		plan:    plan,
		worker:  pick.info.ID,
		tasks:   len(refs),
		metrics: map[string]*transport.VertexMetrics{},
		started: c.now(),
	}
	c.jobs[id] = js
	c.mu.Unlock()

	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id), c.onTaskStatus)
	if err == nil {
		err = c.cfg.NATS.Flush()
	}
	if err != nil {
		c.forget(id, pick.info.ID, len(refs))
		return "", fmt.Errorf("job %s: %w", id, err)
	}
	c.mu.Lock()
	js.sub = sub
	c.mu.Unlock()

	d := transport.Deployment{JobID: id, Plan: plan.JSON(), ModuleDigest: req.ModuleDigest, ModuleName: req.ModuleName, Tasks: refs}
	b, _ := json.Marshal(d)
	msg, err := c.cfg.NATS.Request(transport.WorkerDeploySubject(pick.info.ID), b, c.cfg.DeployTimeout)
	if err == nil {
		var r transport.Reply
		if uerr := json.Unmarshal(msg.Data, &r); uerr != nil {
			err = uerr
		} else if r.Error != "" {
			err = errors.New(r.Error)
		}
	}
	if err != nil {
		_ = sub.Unsubscribe()
		c.forget(id, pick.info.ID, len(refs))
		return "", fmt.Errorf("deploying job %s on worker %s: %w", id, pick.info.ID, err)
	}
	c.cfg.Logf("coordinator: job %s deployed on worker %s (%d subtasks)", id, pick.info.ID, len(refs))
	return id, nil
}

func (c *Coordinator) forget(id, worker string, slots int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, id)
	if w, ok := c.workers[worker]; ok {
		w.used -= slots
	}
}

func (c *Coordinator) onTaskStatus(m *nats.Msg) {
	var st transport.TaskStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		c.cfg.Logf("coordinator: bad task status on %s: %v", m.Subject, err)
		return
	}
	c.mu.Lock()
	j, ok := c.jobs[st.JobID]
	if !ok || j.done {
		c.mu.Unlock()
		return
	}
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
	var cancelWorker string
	switch st.State {
	case transport.TaskFinished:
		j.finished++
	case transport.TaskFailed:
		if j.failed == "" {
			j.failed = st.Error
			cancelWorker = j.worker
		}
	}
	var result *transport.JobResult
	if j.ended == j.tasks {
		result = c.endJob(j)
	}
	c.mu.Unlock()
	if cancelWorker != "" {
		c.cancelOn(cancelWorker, st.JobID, true)
	}
	if result != nil {
		b, _ := json.Marshal(result)
		_ = c.cfg.NATS.Publish(transport.JobDoneSubject(result.JobID), b)
	}
}

// endJob records a job's end; c.mu is held.
func (c *Coordinator) endJob(j *jobState) *transport.JobResult {
	j.done = true
	if j.sub != nil {
		_ = j.sub.Unsubscribe()
	}
	if w, ok := c.workers[j.worker]; ok {
		w.used -= j.tasks
	}
	r := &transport.JobResult{JobID: j.info.JobID, Name: j.info.Name, Duration: c.now().Sub(j.started)}
	switch {
	case j.failed != "":
		r.State, r.Error = transport.JobFailed, j.failed
	case j.finished == j.tasks:
		r.State = transport.JobFinished
	default:
		r.State = transport.JobCanceled
	}
	j.info.State, j.info.Error = r.State, r.Error
	for _, v := range j.plan.Vertices {
		if m, ok := j.metrics[v.ID]; ok {
			r.Metrics = append(r.Metrics, *m)
		}
	}
	c.cfg.Logf("coordinator: job %s %s after %s", r.JobID, r.State, r.Duration.Round(time.Millisecond))
	return r
}

func (c *Coordinator) cancelOn(worker, id string, failed bool) {
	b, _ := json.Marshal(transport.CancelRequest{JobID: id, Failed: failed})
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
	var worker string
	if ok && !j.done {
		j.canceled = true
		worker = j.worker
	}
	c.mu.Unlock()
	if !ok {
		respond(m, transport.Reply{Error: fmt.Sprintf("no job %q", req.JobID)})
		return
	}
	if worker != "" {
		go c.cancelOn(worker, req.JobID, false)
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

// Wait is a client helper: it returns the result of job id, which must have
// been subscribed to with Watch before the job was submitted.
type Watch struct {
	sub *nats.Subscription
	ch  chan *nats.Msg
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
	return &Watch{sub: sub, ch: ch}, nil
}

// Wait returns the result of job id, or ctx's error.
func (w *Watch) Wait(ctx context.Context, id string) (*transport.JobResult, error) {
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
		}
	}
}

// Close unsubscribes.
func (w *Watch) Close() { _ = w.sub.Unsubscribe() }
