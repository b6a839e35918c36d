package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// Config configures a Coordinator.
type Config struct {
	NATS *nats.Conn
	// Log receives the coordinator's log lines (nothing when nil).
	Log *slog.Logger
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
	// Tenants makes the cluster multi-tenant: requests that arrive through
	// a tenant account's import act for that tenant only, and the tenant's
	// jobs reach their data as users of its account (nil: one user, who is
	// the admin).
	Tenants *tenant.Authority
	// TenantConnect connects to the NATS server with the credentials of a
	// user of a tenant's account.
	TenantConnect func(name string, creds tenant.Creds) (*nats.Conn, error)
	// SystemConn is a connection of the NATS system account, through which
	// the coordinator pushes the account JWTs of tenants it adds or changes.
	SystemConn *nats.Conn
	// AttemptCredsTTL is how long the credentials a job attempt's workers
	// get (tenant.AttemptUser) stay valid; the coordinator renews them
	// every third of it (default DefaultAttemptCredsTTL).
	AttemptCredsTTL time.Duration
	// Replicas is how many copies a NATS cluster keeps of every stream,
	// bucket and object store the coordinator and its workers create
	// (the job and id buckets, the lease, module stores, data streams,
	// checkpoint stores, JetStream sinks' streams); 0 means 1. Start
	// refuses more than 1 on a server that is not clustered.
	Replicas int
	// CheckpointHistory is how many recent checkpoints of each job the
	// coordinator keeps with their per-subtask details for the REST API
	// (default DefaultCheckpointHistory); counts and summaries cover all.
	CheckpointHistory int
	// MaxModuleBytes caps the size of a module the coordinator accepts, the
	// admin's and every tenant's whatever its quota (default
	// transport.DefaultMaxModuleBytes).
	MaxModuleBytes int64
	// ServerID names the coordinator in the lease (default the host name
	// and process id).
	ServerID string
	// Lease is the period of the coordinators' lease (DefaultLease when
	// zero): of the coordinators against one cluster, the one holding it
	// leads; the others are standbys that take over once it lapses.
	Lease time.Duration
	// TakeLease takes the lease at start whatever it holds: the process
	// embeds the NATS server, so no other coordinator can have acted on it
	// before it started.
	TakeLease bool
	// OnLead, when set, is called once the coordinator leads: at once from
	// Start, or from a standby's take-over.
	OnLead func(LeaderInfo)
	// Deposed, when set, is called (once) when the coordinator finds that
	// another took its lease, or a standby cannot take over: it has stopped
	// acting, and its process should stop.
	Deposed func(error)
}

// Coordinator is the job manager.
type Coordinator struct {
	cfg Config
	// upgrades caches the jobs' upgrade histories for their details.
	upgrades upgradeCache
	// minted are the attempts' credentials given out (tenants.go).
	minted mintedAttempts
	// mu guards the workers and jobs; its release publishes the readers'
	// view of them (view).
	mu      stateMu
	view    atomic.Pointer[view]
	workers map[string]*workerState
	jobs    map[string]*jobState
	subs    []*nats.Subscription
	// cbMu is held for reading by every NATS callback while it runs
	// (tracked), and for writing by Close, which so waits for the
	// callbacks in flight; cbClosed, set by Close, makes later ones
	// return at once. A callback may write the job's record: one that
	// ran after Close returned wrote into a directory its owner had
	// removed, and could mark ended a job that Close had left to the next
	// coordinator to resume.
	cbMu     sync.RWMutex
	cbClosed bool
	now      func() time.Time
	// gone holds why each worker declared lost was (until it returns).
	gone map[string]string
	// The liveness monitor.
	quit    chan struct{}
	monitor sync.WaitGroup
	// store writes job specs to the job bucket (nil: no JetStream).
	store *jobStore
	// listRunning reads the running jobs' specs from the job bucket
	// (runningSpecs; a test stalls it).
	listRunning func(context.Context, jetstream.KeyValue) ([]*JobSpec, error)
	// ids holds each job's checkpoint id counter (nil without JetStream).
	ids       *idCounter
	startedAt time.Time
	// listening is when the coordinator (or its take-over) subscribed to
	// the workers' heartbeats: what it knows of them starts there, not at
	// startedAt, which the job bucket's read may have preceded by seconds.
	listening time.Time
	// cancelled says when the coordinator last cancelled an attempt that a
	// worker's heartbeat listed (key WORKER/JOB/ATTEMPT).
	cancelled map[string]time.Time
	// The monitor's view of the NATS connection: reconnects seen, and
	// whether it was down at the last check.
	reconnects uint64
	offline    bool
	// tconns are the connections to tenants' accounts, by tenant.
	tconnMu sync.Mutex
	tconns  map[string]*nats.Conn
	// auditLog records every control-plane request.
	auditLog auditLog
	// board holds the subtasks' latest metrics samples.
	board metricsBoard
	// ratios turns consecutive samples into busy and backpressure ratios
	// for the REST API.
	ratios ratioTracker
	// lead holds the lease (nil without JetStream: the coordinator leads
	// alone); electQuit stops the goroutine that renews it or, for a
	// standby, waits to take it; deposeOnce reports a lost lease once.
	lead       *leader
	electQuit  chan struct{}
	elector    sync.WaitGroup
	deposeOnce sync.Once
}

type workerState struct {
	info     transport.WorkerInfo
	lastSeen time.Time
	used     int
}

// jobState is what the coordinator holds of a job: what it runs, and the
// job's lifecycle, which decides what happens to it. The coordinator feeds
// the lifecycle events and carries out its actions (apply, carryOut); the
// fields here are what carrying them out needs.
type jobState struct {
	// info names the job (id, name, start) and holds its state and error
	// as its spec and record say them: running until the job ends, then
	// its result's. List rows take the lifecycle's state instead.
	info   transport.JobInfo
	plan   *job.Plan
	digest string
	module string
	refs   []transport.TaskRef
	// lc is the job's lifecycle: its state, attempts, restarts, and what
	// the current attempt's subtasks did. c.mu guards it.
	lc *lifecycle.Job
	// attempt, done and restartLog mirror the lifecycle (its current
	// attempt, whether the job has ended or been let go of, its restarts)
	// for the checkpoint driver, the savepoint handler and the job record;
	// apply keeps them up to date.
	attempt    int
	done       bool
	restartLog []RestartEntry
	// placement says which worker runs which subtasks of the current
	// attempt (their slots are held until the attempt ends; a lost
	// worker's go with it); a job spread over several workers exchanges
	// data through its JetStream data stream.
	placement placement
	// pick is the placement submit made for the first attempt before it
	// accepted the job.
	pick placement
	// resuming, set on a job resumed from the job bucket, makes the
	// placement of its first attempt wait for the workers to heartbeat and
	// for the old attempt to stop, until it closes.
	resuming <-chan struct{}
	// adopt, on a job a new leader loaded, lets it adopt the attempt the
	// workers run (adopt.go); adopting is set while its checkpoint driver
	// is made.
	adopt    *adoption
	adopting bool
	ckpt     *ckptDriver
	// inbox holds what the checkpoint driver reported for the lifecycle,
	// until it is handed over (drainLocked).
	inbox inbox
	// recordMu orders the writes of the job's record and spec: each
	// takes its view of the job under it, so that an older view never
	// replaces a newer one.
	recordMu sync.Mutex
	// chains names the chains of chainsOf, the plan the job runs, for the
	// readers' view (built again only when the plan changes).
	chains   []string
	chainsOf *job.Plan
	// savepoint the first attempt restores from
	fromSavepoint string
	savepointID   int64
	// metrics sums the current attempt's record counts.
	metrics map[string]*transport.VertexMetrics
	sub     *nats.Subscription
	started time.Time
	// ckptRoot is the checkpoint storage a resumed job's spec names;
	// latestCheckpoint the job's latest completed checkpoint.
	ckptRoot         string
	latestCheckpoint int64
	// result is set when the job has ended.
	result *transport.JobResult
	// restored is the checkpoint or savepoint the current attempt
	// restored (ID 0: none).
	restored RestoredCheckpoint
	// stats are the job's checkpoint statistics and exceptions its recent
	// failures, for the REST API; each has a lock of its own.
	stats      ckptStats
	exceptions exceptionLog
	// upgrade is the upgrade under way (nil: none), lastUpgrade the latest
	// that was done (its new module's first record may come after).
	upgrade, lastUpgrade *upgradeOp
	// probation is 1 + the attempt of an upgrade's new module until it
	// completes a checkpoint (0: none): the driver's report of that
	// checkpoint (checkpointConfirmed) confirms the upgrade.
	probation int
}

// newLifecycle makes the lifecycle of a job that runs plan.
func newLifecycle(plan *job.Plan, fromSavepoint bool) *lifecycle.Job {
	cfg := lifecycle.Config{Checkpoints: plan.Checkpoint.Enabled(), FromSavepoint: fromSavepoint}
	if plan.Restart != nil {
		cfg.Restart = plan.Restart
	}
	lc, err := lifecycle.New(cfg)
	if err != nil {
		// Only negative intervals are refused, and there are none.
		panic(err)
	}
	return lc
}

// New returns a coordinator; Start subscribes it.
func New(cfg Config) (*Coordinator, error) {
	if cfg.NATS == nil {
		return nil, errors.New("coordinator: no NATS connection")
	}
	cfg.Log = logging.OrDiscard(cfg.Log).With(logging.Component, "coordinator")
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.WorkerTimeout <= 0 {
		cfg.WorkerTimeout = 10 * cfg.HeartbeatInterval
	}
	if cfg.AttemptCredsTTL <= 0 {
		cfg.AttemptCredsTTL = DefaultAttemptCredsTTL
	}
	if cfg.DeployTimeout <= 0 {
		cfg.DeployTimeout = 60 * time.Second
	}
	if cfg.MaxModuleBytes <= 0 {
		cfg.MaxModuleBytes = transport.DefaultMaxModuleBytes
	}
	if cfg.CheckpointHistory <= 0 {
		cfg.CheckpointHistory = DefaultCheckpointHistory
	}
	c := &Coordinator{cfg: cfg, workers: map[string]*workerState{}, jobs: map[string]*jobState{}, now: time.Now, gone: map[string]string{},
		cancelled: map[string]time.Time{}, tconns: map[string]*nats.Conn{}, listRunning: runningSpecs}
	c.mu.publish = c.publishLocked
	return c, nil
}

// Start opens the job bucket and takes the lease: a coordinator that leads
// subscribes to the coordinator's subjects and, with Config.ResumeJobs,
// resumes the jobs the bucket says are running. One that finds the lease
// held by another is a standby: it subscribes to nothing, acts on nothing,
// and takes over (as activate) once the lease lapses.
func (c *Coordinator) Start() error {
	nc := c.cfg.NATS
	c.mu.Lock()
	c.startedAt = c.now()
	c.mu.Unlock()
	c.reconnects = nc.Stats().Reconnects
	if err := transport.CheckReplicas(nc, c.replicas()); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	kv, err := OpenJobs(ctx, nc, c.replicas())
	switch {
	case err == nil:
		c.store = newJobStore(kv, c.cfg.Log)
		c.store.fence = c.fence
		if c.ids, err = openIDCounter(ctx, nc, c.replicas()); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		if c.lead, err = openLeader(ctx, nc, c.serverID(), c.leasePeriod(), c.replicas(), c.cfg.Log); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		js, _ := jetstream.New(nc)
		if err := replicateModules(ctx, js, c.replicas(), true); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
	case c.cfg.ResumeJobs:
		return fmt.Errorf("coordinator: %w", err)
	default:
		c.cfg.Log.Warn("jobs are not kept in JetStream", "err", err)
	}
	if c.lead != nil {
		leading, err := c.lead.step(ctx, c.cfg.TakeLease)
		if err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		c.electQuit = make(chan struct{})
		if !leading {
			h, _ := c.lead.info()
			c.cfg.Log.Info("standby: another coordinator leads; this one takes over when its lease lapses",
				"leader", h.ID, "epoch", h.Epoch, "lease", c.leasePeriod())
			c.elector.Add(1)
			go c.standby(c.electQuit)
			return nil
		}
	}
	if err := c.activate(ctx); err != nil {
		c.Close()
		return err
	}
	return nil
}

// unsubscribe drops the coordinator's subscriptions.
func (c *Coordinator) unsubscribe() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.subs = nil
}

// activate makes the coordinator act: it subscribes, resumes the jobs of
// the bucket (Config.ResumeJobs) and, with a lease, renews it.
func (c *Coordinator) activate(ctx context.Context) error {
	nc := c.cfg.NATS
	c.mu.Lock()
	c.startedAt = c.now()
	c.mu.Unlock()
	var resume []*jobState
	if c.cfg.ResumeJobs {
		// The bucket is read before c.mu is taken: a listing tried again
		// through a fault takes seconds, and REST reads wait for c.mu.
		specs, err := c.listRunning(ctx, c.store.kv)
		if err != nil {
			return fmt.Errorf("coordinator: reading the running jobs from %s: %w", transport.JobsBucket, err)
		}
		c.mu.Lock()
		resume = c.loadJobsLocked(specs)
		c.mu.Unlock()
	}
	handlers := map[string]nats.MsgHandler{
		transport.WorkerRegisterSubject("*"):  workerSubject(c.onRegister),
		transport.WorkerHeartbeatSubject("*"): workerSubject(c.onHeartbeat),
		transport.SubjectMetrics:              c.onMetrics,
	}
	// Requests made in the coordinator's own account come from the admin
	// (on a cluster without tenants, from every user).
	for verb, h := range c.apiHandlers() {
		handlers["wstream.coord."+verb] = func(m *nats.Msg) { h(m, adminCaller(m)) }
	}
	for subj, h := range handlers {
		s, err := nc.Subscribe(subj, c.tracked(h))
		if err != nil {
			c.unsubscribe()
			return fmt.Errorf("coordinator: subscribing to %s: %w", subj, err)
		}
		c.subs = append(c.subs, s)
	}
	if c.cfg.Tenants != nil {
		if err := c.reloadTenants(ctx); err != nil {
			c.unsubscribe()
			return err
		}
		if err := c.subscribeTenants(nc); err != nil {
			c.unsubscribe()
			return err
		}
	}
	if err := nc.Flush(); err != nil {
		c.unsubscribe()
		return err
	}
	c.mu.Lock()
	c.listening = c.now()
	c.mu.Unlock()
	if c.lead != nil {
		// Workers refuse the commands of earlier leaders from now on.
		_ = nc.Publish(transport.SubjectLeader, c.lead.announcement())
		c.elector.Add(1)
		go c.keepLease(c.electQuit)
	}
	c.quit = make(chan struct{})
	c.monitor.Add(1)
	go c.watchWorkers(c.quit)
	if c.cfg.Tenants != nil {
		c.monitor.Add(1)
		go c.renewAttemptCreds(c.quit)
	}
	for _, j := range resume {
		c.mu.Lock()
		j.resuming = c.quit
		// The job's record carries this leader's epoch before anything
		// else is done with it: an earlier leader's writes are refused
		// from then on.
		c.store.put(c.specLocked(j, transport.JobRunning))
		c.mu.Unlock()
		c.monitor.Add(1)
		go func() {
			defer c.monitor.Done()
			c.resume(j, c.quit)
		}()
	}
	if c.cfg.OnLead != nil {
		h := LeaderInfo{ID: c.serverID()}
		if c.lead != nil {
			h, _ = c.lead.info()
		}
		c.cfg.OnLead(h)
	}
	return nil
}

// Close unsubscribes and suspends the jobs that have not ended: their
// checkpoints stop, and their specs stay in the job bucket, so that a
// coordinator started later with Config.ResumeJobs resumes them.
func (c *Coordinator) Close() {
	if c.electQuit != nil {
		// A standby's take-over is over, or does not start, before the
		// rest is closed.
		close(c.electQuit)
		c.elector.Wait()
		c.electQuit = nil
	}
	c.unsubscribe()
	c.cbMu.Lock()
	c.cbClosed = true
	c.cbMu.Unlock()
	if c.quit != nil {
		close(c.quit)
		c.monitor.Wait()
		c.quit = nil
	}
	c.mu.Lock()
	now := c.nowMillis()
	for _, j := range c.jobs {
		// The coordinator lets go of the job: its checkpoints stop, and
		// its spec still says it runs, so that the next coordinator
		// resumes it. A suspended job asks for nothing more.
		j.lc.Suspend(now)
		_ = c.applyLocked(j)
		if j.sub != nil {
			_ = j.sub.Unsubscribe()
		}
	}
	c.mu.Unlock()
	if c.store != nil {
		c.store.close(2 * time.Second)
	}
	if c.lead != nil {
		// Last, once the jobs' records are written: a standby takes over
		// at once.
		c.lead.release()
	}
	c.tconnMu.Lock()
	for _, nc := range c.tconns {
		nc.Close()
	}
	c.tconns = map[string]*nats.Conn{}
	c.tconnMu.Unlock()
	c.auditLog.mu.Lock()
	if c.auditLog.f != nil {
		_ = c.auditLog.f.Close()
		c.auditLog.f = nil
	}
	c.auditLog.mu.Unlock()
}

// tracked wraps a NATS callback so that Close waits for it (cbMu).
func (c *Coordinator) tracked(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		c.cbMu.RLock()
		defer c.cbMu.RUnlock()
		if c.cbClosed {
			return
		}
		h(m)
	}
}

func respond(m *nats.Msg, v any) {
	if m == nil {
		// No client waits (an upgrade's savepoint answers through the
		// upgrade).
		return
	}
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
	c.cfg.Log.Info("worker registered", logging.Worker, w.ID, "slots", slotsText(w.Slots))
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
	if known && w.Reconnects > ws.info.Reconnects {
		// Checkpoint messages to or from the worker may have been lost
		// while it was cut off from NATS.
		c.workerReconnectedLocked(w.ID)
	}
	ws.info = w
	ws.lastSeen = c.now()
	cancels, steps := c.reconcileLocked(w.ID, w.Running)
	c.mu.Unlock()
	switch {
	case known:
	case wasLost:
		c.cfg.Log.Info("worker is back after it was declared lost", logging.Worker, w.ID, "slots", slotsText(w.Slots), "lost", why)
	default:
		c.cfg.Log.Info("worker registered by its heartbeat", logging.Worker, w.ID, "slots", slotsText(w.Slots))
	}
	for _, r := range cancels {
		c.cfg.Log.Warn("worker still runs an old attempt: cancelling it", logging.Worker, w.ID, logging.Job, r.JobID, logging.Attempt, r.Attempt)
		go c.cancelOn(w.ID, r.JobID, r.Attempt, true)
	}
	for _, st := range steps {
		for _, a := range st.acts {
			if a, ok := a.(lifecycle.CancelAttempt); ok && slices.Equal(a.Workers, []string{w.ID}) {
				c.cfg.Log.Warn("worker still runs an old attempt: cancelling it", logging.Worker, w.ID, logging.Job, st.j.info.JobID, logging.Attempt, a.Attempt)
			}
		}
		go c.carryOut(st.j, st.acts)
	}
}

// Workers lists the registered workers that are alive.
func (c *Coordinator) Workers() []transport.WorkerInfo {
	var out []transport.WorkerInfo
	for _, w := range c.readView().workers {
		if c.live(w) {
			out = append(out, w.info)
		}
	}
	return out
}

// forget drops a job whose submission failed.
func (c *Coordinator) forget(id string) {
	c.mu.Lock()
	delete(c.jobs, id)
	c.mu.Unlock()
	c.board.drop(id)
	c.ratios.drop(id)
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
	epoch, err := c.fence()
	if err != nil {
		c.cfg.Log.Warn("not cancelling the job on a worker", logging.Job, id, logging.Worker, worker, "err", err)
		return
	}
	b, _ := json.Marshal(transport.CancelRequest{JobID: id, Attempt: attempt, Failed: failed, Epoch: epoch})
	if _, err := c.cfg.NATS.Request(transport.WorkerCancelSubject(worker), b, 5*time.Second); err != nil {
		c.cfg.Log.Warn("cancelling the job on a worker", logging.Job, id, logging.Worker, worker, "err", err)
	}
}

func (c *Coordinator) onCancel(m *nats.Msg, who caller) {
	var req transport.CancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		err = c.outcome(who, "cancel", "", fmt.Errorf("bad cancel request: %w", err))
		respond(m, transport.Reply{Error: err.Error()})
		return
	}
	if err := c.cancel(req.JobID, who); err != nil {
		respond(m, transport.Reply{Error: err.Error()})
		return
	}
	respond(m, transport.Reply{})
}

// cancel cancels job id for who; it returns before the job has ended.
func (c *Coordinator) cancel(id string, who caller) error {
	c.mu.Lock()
	j, ok := c.jobs[id]
	// Another tenant's job is as absent as one that never was.
	ok = ok && visibleLocked(j, who)
	var acts []lifecycle.Action
	if ok {
		// A job that has ended already: nothing to do.
		_ = j.lc.Cancel(c.nowMillis())
		acts = c.applyLocked(j)
	}
	c.mu.Unlock()
	if !ok {
		return c.outcome(who, "cancel", id, errNoJob(id))
	}
	c.audit(who, "cancel", id, nil)
	go c.carryOut(j, acts)
	return nil
}

// onList answers with a row per job: its state by Flink's names, its
// attempt, and the cause of its latest restart.
func (c *Coordinator) onList(m *nats.Msg, who caller) {
	out := transport.ListReply{Jobs: []transport.JobInfo{}, Leader: c.serverID()}
	for _, jv := range c.readView().jobs {
		if jv.visible(who) {
			row := jv.row
			row.Cause = c.tenantText(who, row.Cause)
			out.Jobs = append(out.Jobs, row)
		}
	}
	respond(m, out)
}

// onWorkers answers the admin with a row per registered worker; workers
// are shared by every tenant, so a tenant is refused.
func (c *Coordinator) onWorkers(m *nats.Msg, who caller) {
	if !who.admin() {
		err := c.outcome(who, "workers", "", errors.New("workers: only the cluster's admin sees its workers"))
		respond(m, transport.WorkersReply{Error: err.Error()})
		return
	}
	out := transport.WorkersReply{Workers: []transport.WorkerRow{}, Leader: c.serverID()}
	for _, w := range c.readView().workers {
		out.Workers = append(out.Workers, c.workerRow(w))
	}
	respond(m, out)
}
