package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// Config configures a Worker.
type Config struct {
	ID      string     // unique among the workers of a cluster; [A-Za-z0-9_-]
	NATS    *nats.Conn // control plane and module store
	DataDir string     // subtask state lives under DataDir/jobs/JOB/state
	Slots   int        // subtasks it runs at once; 0 = no limit
	Host    host.Config
	// Runtime, when set, is used instead of creating one from Host (the
	// embedded default shares one between deploy-time validation and the
	// worker, so a module is compiled once).
	Runtime *host.Runtime
	Stdout  io.Writer // where stdout sinks write; os.Stdout when nil
	// Log receives the worker's log lines and its guests' (nothing when
	// nil).
	Log *slog.Logger
	// ChannelCapacity is the number of buffers a local channel holds before
	// its producer blocks (default 8).
	ChannelCapacity int
	// HeartbeatInterval is how often the worker tells the coordinator it is
	// alive (default 1s).
	HeartbeatInterval time.Duration
	// ExchangeWindow is the number of buffers a channel to another worker
	// holds in flight before its producer blocks (default
	// transport.DefaultWindow).
	ExchangeWindow int
	// Dial opens another connection to the cluster's NATS server, as the
	// worker (no options) or with the credentials opts give: a tenant's
	// job reaches its data as a user of the tenant's account, and
	// JetStream connectors that name no url reach the cluster's server.
	// Without it a tenant's job is refused and such connectors cannot
	// open.
	Dial func(name string, opts ...nats.Option) (*nats.Conn, error)
	// Gate shares the cores among the guest calls of tenants' jobs
	// (fairshare.Default() when nil: workers of one process share it).
	Gate *fairshare.Gate
	// MaxModuleBytes caps the size of a module the worker fetches, the
	// admin's and every tenant's whatever the deployment allows (default
	// transport.DefaultMaxModuleBytes).
	MaxModuleBytes int64
	// StateMemory is the worker's state memory budget in bytes
	// (state.DefaultMemoryBudget when 0), which its subtasks' stores share
	// (state.Budget).
	StateMemory int64
}

// Worker runs the subtasks the coordinator assigns to it.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	rt      *host.Runtime
	ownsRT  bool
	js      jetstream.JetStream
	cache   *pebble.Cache // budget's
	budget  *state.Budget
	subs    []*nats.Subscription
	mu      sync.Mutex
	modules map[moduleKey]*host.Module
	jobs    map[string]*jobRun
	// creds are the credentials of the attempts the worker runs or
	// deploys, by job id (onCreds renews them).
	creds  map[string]*attemptCreds
	closed bool
	// cacheGone: Close released the block cache (BlockCache).
	cacheGone bool
	stopBeat  chan struct{}
	beatDone  chan struct{}

	// restoreRead counts the bytes of keyed-state files that restores read
	// from checkpoint storage, localRead those they took from local
	// snapshots instead (local recovery).
	restoreRead atomic.Int64
	localRead   atomic.Int64
	// remoteChannels counts the channels to other workers it has made.
	remoteChannels atomic.Int64
	// rates pace each tenant's state writes (writeRate), under mu.
	rates map[string]*fairshare.Rate
	// epoch is the highest leadership epoch of a coordinator that spoke to
	// the worker: commands of lower epochs come from a deposed one.
	epoch atomic.Uint64
}

// admit raises the worker's epoch to a command's and reports whether the
// command may be obeyed: not when a later leader has spoken.
func (w *Worker) admit(epoch uint64, what string) bool {
	for {
		cur := w.epoch.Load()
		if epoch < cur {
			w.log.Warn("refusing a command of a deposed coordinator", "command", what, "epoch", epoch, "leader epoch", cur)
			return false
		}
		if epoch == cur || w.epoch.CompareAndSwap(cur, epoch) {
			return true
		}
	}
}

// onLeader takes the epoch of a coordinator that took the lease.
func (w *Worker) onLeader(m *nats.Msg) {
	var a transport.LeaderAnnouncement
	if json.Unmarshal(m.Data, &a) == nil {
		w.admit(a.Epoch, "leader announcement")
	}
}

// RemoteChannels is the number of channels (either end) between this
// worker's subtasks and other workers' that the worker has made.
func (w *Worker) RemoteChannels() int64 { return w.remoteChannels.Load() }

// RestoreBytesRead is the number of bytes of keyed-state files that the
// worker's subtasks have read from checkpoint storage (and savepoints) to
// restore their state.
func (w *Worker) RestoreBytesRead() int64 { return w.restoreRead.Load() }

// LocalRestoreBytes is the number of bytes of keyed state that the worker's
// subtasks have restored from their local snapshots (local recovery).
func (w *Worker) LocalRestoreBytes() int64 { return w.localRead.Load() }

// New creates a worker; Start connects it to the control plane.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	if cfg.ID == "" {
		return nil, errors.New("worker: empty id")
	}
	if cfg.NATS == nil {
		return nil, errors.New("worker: no NATS connection")
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	cfg.Log = logging.OrDiscard(cfg.Log).With(logging.Worker, cfg.ID)
	if cfg.ChannelCapacity <= 0 {
		cfg.ChannelCapacity = 8
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.MaxModuleBytes <= 0 {
		cfg.MaxModuleBytes = transport.DefaultMaxModuleBytes
	}
	js, err := jetstream.New(cfg.NATS)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	if err := state.CheckBudget(cfg.StateMemory); err != nil {
		return nil, fmt.Errorf("worker %s: --state-memory: %w", cfg.ID, err)
	}
	w := &Worker{
		cfg:     cfg,
		log:     cfg.Log,
		js:      js,
		modules: map[moduleKey]*host.Module{},
		jobs:    map[string]*jobRun{},
		creds:   map[string]*attemptCreds{},
	}
	// One budget, and its block cache, for every subtask's store keeps a
	// worker's memory bounded however many subtasks it runs.
	w.budget = state.NewBudget(cfg.StateMemory)
	w.cache = w.budget.Cache()
	if cfg.Runtime != nil {
		w.rt = cfg.Runtime
	} else {
		hc := cfg.Host
		if hc.Log == nil {
			log := cfg.Log
			hc.Log = func(level int32, op string, subtask int, msg string) {
				// Lines outside an operator's callback (its stdout and
				// stderr): op names the vertex and the operator.
				log.Log(context.Background(), logging.GuestLevel(level), msg, "guest", true, "operator", op, logging.Subtask, subtask)
			}
		}
		rt, err := host.NewRuntime(ctx, hc)
		if err != nil {
			w.cache.Unref()
			return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
		}
		w.rt, w.ownsRT = rt, true
	}
	return w, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start subscribes to the worker's subjects, registers with the coordinator
// (retrying until ctx is done, so a worker may start before its coordinator)
// and starts heartbeats.
func (w *Worker) Start(ctx context.Context) error {
	nc := w.cfg.NATS
	sub, err := nc.Subscribe(transport.WorkerDeploySubject(w.cfg.ID), w.onDeploy)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, sub)
	sub, err = nc.Subscribe(transport.WorkerCancelSubject(w.cfg.ID), w.onCancel)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, sub)
	sub, err = nc.Subscribe(transport.WorkerCheckpointSubject(w.cfg.ID), w.onCheckpoint)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, sub)
	sub, err = nc.Subscribe(transport.SubjectLeader, w.onLeader)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, sub)
	sub, err = nc.Subscribe(transport.WorkerCredsSubject(w.cfg.ID), w.onCreds)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, sub)
	if err := nc.Flush(); err != nil {
		return err
	}
	info, _ := json.Marshal(transport.WorkerInfo{ID: w.cfg.ID, Slots: w.cfg.Slots})
	for {
		msg, err := nc.Request(transport.WorkerRegisterSubject(w.cfg.ID), info, time.Second)
		if err == nil {
			var r transport.Reply
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				return fmt.Errorf("worker %s: bad registration reply: %w", w.cfg.ID, err)
			}
			if r.Error != "" {
				return fmt.Errorf("worker %s: coordinator refused registration: %s", w.cfg.ID, r.Error)
			}
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("worker %s: no coordinator answered: %w", w.cfg.ID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker %s: no coordinator answered: %w", w.cfg.ID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	w.stopBeat = make(chan struct{})
	w.beatDone = make(chan struct{})
	go w.heartbeat()
	return nil
}

// heartbeat tells the coordinator, every HeartbeatInterval, that the worker
// is alive and which job attempts it runs, and sends it the latest metrics
// samples of its subtasks. A heartbeat carries everything
// registration needs, so a coordinator that restarted, or a NATS server
// that came back, sees the worker again without a new handshake; after the
// worker's connection was re-established it heartbeats at once.
func (w *Worker) heartbeat() {
	defer close(w.beatDone)
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	// A reconnect is noticed within a tenth of the interval (at least every
	// 100ms), so that the coordinator hears of the worker promptly.
	poll := time.NewTicker(min(w.cfg.HeartbeatInterval, max(w.cfg.HeartbeatInterval/10, 100*time.Millisecond)))
	defer poll.Stop()
	reconnects := w.cfg.NATS.Stats().Reconnects
	for {
		select {
		case <-w.stopBeat:
			return
		case <-poll.C:
			if n := w.cfg.NATS.Stats().Reconnects; n != reconnects && w.cfg.NATS.IsConnected() {
				reconnects = n
				w.log.Info("reconnected to NATS", "url", w.cfg.NATS.ConnectedUrlRedacted())
				_ = w.cfg.NATS.Publish(transport.WorkerHeartbeatSubject(w.cfg.ID), w.beat())
			}
		case <-t.C:
			_ = w.cfg.NATS.Publish(transport.WorkerHeartbeatSubject(w.cfg.ID), w.beat())
			w.publishMetrics()
		}
	}
}

// beat is the worker's heartbeat message.
func (w *Worker) beat() []byte {
	info := transport.WorkerInfo{ID: w.cfg.ID, Slots: w.cfg.Slots, Reconnects: w.cfg.NATS.Stats().Reconnects, Epoch: w.epoch.Load()}
	w.mu.Lock()
	for id, j := range w.jobs {
		r := transport.RunningAttempt{JobID: id, Attempt: j.attempt, Module: j.digest, Epoch: j.epoch}
		for _, t := range j.tasks {
			if !t.inputEnded.Load() {
				r.Tasks = append(r.Tasks, transport.TaskRef{Chain: t.id.Chain, Subtask: t.id.Subtask})
			}
		}
		info.Running = append(info.Running, r)
	}
	w.mu.Unlock()
	sort.Slice(info.Running, func(a, b int) bool { return info.Running[a].JobID < info.Running[b].JobID })
	b, _ := json.Marshal(info)
	return b
}

// Close cancels every job, waits for their subtasks, and releases the
// worker's resources.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	jobs := make([]*jobRun, 0, len(w.jobs))
	for _, j := range w.jobs {
		jobs = append(jobs, j)
	}
	w.mu.Unlock()
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	if w.stopBeat != nil {
		close(w.stopBeat)
		<-w.beatDone
	}
	for _, j := range jobs {
		j.cancel()
		j.wg.Wait()
	}
	w.mu.Lock()
	for _, m := range w.modules {
		_ = m.Close(ctx)
	}
	w.modules = nil
	w.cacheGone = true
	w.mu.Unlock()
	w.cache.Unref()
	if w.ownsRT {
		return w.rt.Close(ctx)
	}
	return nil
}

func (w *Worker) reply(m *nats.Msg, err error) {
	var r transport.Reply
	if err != nil {
		r.Error = err.Error()
	}
	b, _ := json.Marshal(r)
	_ = m.Respond(b)
}

func (w *Worker) onCancel(m *nats.Msg) {
	var req transport.CancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		w.reply(m, fmt.Errorf("bad cancel request: %w", err))
		return
	}
	if !w.admit(req.Epoch, "cancel") {
		w.reply(m, fmt.Errorf("worker %s: refusing the cancel of epoch %d: a later coordinator leads (epoch %d)", w.cfg.ID, req.Epoch, w.epoch.Load()))
		return
	}
	w.mu.Lock()
	j := w.jobs[req.JobID]
	w.mu.Unlock()
	if j != nil && req.Attempt >= j.attempt {
		if req.Failed {
			j.failed.Store(true)
		}
		j.cancel()
	}
	w.reply(m, nil)
}

func (w *Worker) onDeploy(m *nats.Msg) {
	var d transport.Deployment
	if err := json.Unmarshal(m.Data, &d); err != nil {
		w.reply(m, fmt.Errorf("worker %s: bad deployment: %w", w.cfg.ID, err))
		return
	}
	if !w.admit(d.Epoch, "deploy") {
		w.reply(m, fmt.Errorf("worker %s: refusing the deployment of epoch %d: a later coordinator leads (epoch %d)", w.cfg.ID, d.Epoch, w.epoch.Load()))
		return
	}
	// Fetching and compiling a module can take a second: do not hold up the
	// subscription's other messages (cancels) meanwhile.
	go func() {
		w.reply(m, w.deploy(d))
	}()
}

// moduleKey names a compiled module of the worker (Worker.modules): a
// tenant ("" the admin) and the digest of bytes it fetched from its own
// store. A tenant's job runs a module only under its own key.
type moduleKey struct{ tenant, digest string }

// module returns the compiled module with digest for tenant's job,
// fetching it from the tenant's store (js) the first time: at most limit
// bytes (the deployment's ModuleBytes, within the worker's cap), whose
// SHA-256 must be the digest. Another tenant's module of the same digest
// is not used: that tenant fetched its bytes, this one has not yet.
func (w *Worker) module(ctx context.Context, js jetstream.JetStream, tenant, digest, name string, limit int64) (*host.Module, error) {
	key := moduleKey{tenant, digest}
	var copts []host.CompileOption
	if tenant != "" {
		// Admission limits, capped tables, refused if not instrumented.
		copts = append(copts, host.TenantModule())
	}
	w.mu.Lock()
	mod, ok := w.modules[key]
	w.mu.Unlock()
	if ok {
		return mod, nil
	}
	if tenant == "" {
		// Compiled already for the runtime's other users (the embedded
		// engine's validation of this job, from the admin's bytes): no
		// need to fetch it.
		if m := w.rt.Compiled(digest, name); m != nil {
			return w.keep(ctx, key, m), nil
		}
	}
	if limit <= 0 || limit > w.cfg.MaxModuleBytes {
		limit = w.cfg.MaxModuleBytes
	}
	obs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	if err != nil {
		return nil, fmt.Errorf("opening module store %s: %w", transport.ModuleBucket, err)
	}
	wasm, err := transport.FetchModule(ctx, obs, tenant, digest, limit)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", name, err)
	}
	mod, err = w.rt.Compile(ctx, name, wasm, copts...)
	if err != nil {
		return nil, err
	}
	if mod.Digest() != digest {
		// FetchModule hashed these very bytes: the runtime disagreeing
		// is a bug, not a tenant's doing.
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("module %s: compiled as %s, fetched as %s", name, mod.Digest(), digest)
	}
	return w.keep(ctx, key, mod), nil
}

// keep adds mod to the worker's modules, unless a deployment added one
// under the same key meanwhile; it returns the one kept.
func (w *Worker) keep(ctx context.Context, key moduleKey, mod *host.Module) *host.Module {
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.modules[key]; ok {
		_ = mod.Close(ctx)
		return prev
	}
	w.modules[key] = mod
	return mod
}

// jobRun is the part of one job that runs on this worker.
type jobRun struct {
	id     string
	plan   *job.Plan
	graph  *job.Graph
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed atomic.Bool
	tasks  []*task

	attempt int
	// digest and epoch are the module's digest and the deployment's
	// leadership epoch, which heartbeats report with the subtasks so that
	// a new leader can adopt the attempt.
	digest string
	epoch  uint64
	// reportFirst: subtasks report their first records (an upgrade).
	reportFirst bool
	restartable bool
	ckpt        *ckptEnv
	done        chan struct{} // closed when every subtask has ended
	// exch makes the channels to the job's subtasks on other workers (nil:
	// every subtask of the job runs here).
	exch *transport.Exchange
	// nc and js reach the job's data: the worker's own connection, or, for
	// a tenant's job, one as a user of the tenant's account (owned: closed
	// when the job's part here ends); dial opens more such connections
	// (JetStream connectors).
	nc     *nats.Conn
	js     jetstream.JetStream
	ownsNC bool
	dial   connector.Dialer
	// replicas is the cluster's replica count (Deployment.Replicas) for
	// the streams and stores the job's connectors create through dial.
	replicas int
	// tenant owns the job; stateBytes bounds each subtask's keyed state on
	// disk (0: unbounded), from the tenant's quotas.
	tenant     string
	stateBytes int64
	// stateRate paces the tenant's state writes on this worker, bytes per
	// second (0: unpaced).
	stateRate int64
	// memPages bounds each operator instance's memory below the
	// worker's limit (0: the worker's); weight is the tenant's share of
	// the cores.
	memPages uint32
	weight   int
	// creds are the attempt's credentials (nil: the worker's own
	// connection reaches the job's data).
	creds *attemptCreds
}

// dataConn opens what reaches the job's data (jobRun.nc, js, dial): with
// the attempt's credentials when the deployment brings them (a cluster
// with tenants), else through the worker's own connection.
func (w *Worker) dataConn(j *jobRun, d transport.Deployment) error {
	j.nc, j.js = w.cfg.NATS, w.js
	if d.TenantJWT == "" || d.TenantSeed == "" {
		if d.Tenant != "" {
			return fmt.Errorf("job %s of tenant %s: the deployment carries no credentials for the tenant's account", d.JobID, d.Tenant)
		}
		if w.cfg.Dial != nil {
			j.dial = func(name string) (*nats.Conn, error) { return w.cfg.Dial(name) }
		}
		return nil
	}
	if w.cfg.Dial == nil {
		return fmt.Errorf("worker %s cannot run job %s: it has no way to connect with the job's credentials", w.cfg.ID, d.JobID)
	}
	j.creds = &attemptCreds{attempt: d.Attempt, jwt: d.TenantJWT, seed: d.TenantSeed}
	// Renewals may come while the attempt deploys (module, restore).
	w.mu.Lock()
	w.creds[d.JobID] = j.creds
	w.mu.Unlock()
	// Every connection of the attempt reads the latest credentials when it
	// (re)connects: renewed ones (onCreds) take over when the server
	// closes a connection whose credentials expired.
	opts := []nats.Option{nats.UserJWT(j.creds.userJWT, j.creds.sign),
		nats.CustomInboxPrefix(transport.AttemptInboxPrefix(d.JobID, d.Attempt))}
	nc, err := w.cfg.Dial(fmt.Sprintf("wstream-worker-%s-%s", w.cfg.ID, d.JobID), opts...)
	if err != nil {
		return fmt.Errorf("job %s: connecting to its account: %w", d.JobID, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("job %s: %w", d.JobID, err)
	}
	j.nc, j.js, j.ownsNC = nc, js, true
	j.dial = func(name string) (*nats.Conn, error) { return w.cfg.Dial(name, opts...) }
	return nil
}

// attemptCreds are a job attempt's credentials, replaced when the
// coordinator renews them.
type attemptCreds struct {
	attempt   int
	mu        sync.Mutex
	jwt, seed string
}

// forgetCreds drops j's credentials once it no longer runs.
func (w *Worker) forgetCreds(j *jobRun) {
	w.mu.Lock()
	if j.creds != nil && w.creds[j.id] == j.creds {
		delete(w.creds, j.id)
	}
	w.mu.Unlock()
}

func (c *attemptCreds) userJWT() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jwt, nil
}

func (c *attemptCreds) sign(nonce []byte) ([]byte, error) {
	c.mu.Lock()
	seed := c.seed
	c.mu.Unlock()
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, err
	}
	defer kp.Wipe()
	return kp.Sign(nonce)
}

// onCreds takes renewed credentials of a job attempt the worker runs.
func (w *Worker) onCreds(m *nats.Msg) {
	var r transport.CredsRenewal
	if err := json.Unmarshal(m.Data, &r); err != nil {
		w.log.Warn("bad credentials renewal", "err", err)
		return
	}
	w.mu.Lock()
	c := w.creds[r.JobID]
	w.mu.Unlock()
	if c == nil || c.attempt != r.Attempt || r.JWT == "" || r.Seed == "" {
		return
	}
	c.mu.Lock()
	c.jwt, c.seed = r.JWT, r.Seed
	c.mu.Unlock()
}

// gate is the worker's fair-share gate.
func (w *Worker) gate() *fairshare.Gate {
	if w.cfg.Gate != nil {
		return w.cfg.Gate
	}
	return fairshare.Default()
}

// writeRate is the pace of tenant's state writes on this worker: one rate
// for all its subtasks here, so that a tenant's share of the disk does not
// grow with its parallelism. The latest job deployed sets the rate (a
// tenant has one quota).
func (w *Worker) writeRate(tenant string, perSecond int64) *fairshare.Rate {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rates[tenant]
	if r == nil {
		if w.rates == nil {
			w.rates = map[string]*fairshare.Rate{}
		}
		r = fairshare.NewRate(perSecond, 0, nil)
		w.rates[tenant] = r
	} else if r.PerSecond() != perSecond {
		r.Set(perSecond, 0)
	}
	return r
}

// mayCapture reports whether a job's checkpoints may keep batches as
// channel state: unaligned ones, and aligned ones that turn unaligned when
// their alignment times out.
func mayCapture(c *ckptEnv) bool {
	return c != nil && (c.mode == checkpoint.Unaligned || c.alignedTimeout > 0)
}

// stateOptions are the options of the keyed store of a subtask of j that
// serves groups, in dir: a tenant's quotas bound it.
func (w *Worker) stateOptions(j *jobRun, dir string, groups abi.KeyGroupRange) state.Options {
	return state.Options{
		Dir:            dir,
		MaxParallelism: j.plan.MaxParallelism,
		KeyGroups:      groups,
		Cache:          w.cache,
		Budget:         w.budget,
		MaxBytes:       j.stateBytes,
		// A tenant's state in the host's memory is bounded by its memory
		// quota, like its instances' linear memory.
		MemoryBytes: int64(j.memPages) * 65536,
		Admit:       w.admitState(j),
		// A subtask that starts without state (a new job, or one that
		// restarts before its first checkpoint) does not wait for Pebble
		// to create its store, 3-5 ms of a warm start: it is made when
		// first needed, at the first checkpoint or flush.
		Lazy: true,
	}
}

// admitState is the admission of a tenant's Pebble compactions to the
// tenant's slots of the gate (nil for a job without a tenant): the writes
// of a state-flooding tenant are rewritten by compactions that would
// otherwise run beside every tenant's calls, on no one's share.
//
// A compaction waits at most admitWait for a slot and then runs without
// one: a writer that holds the tenant's slot while Pebble stalls its
// writes until a compaction has run would otherwise wait for ever.
func (w *Worker) admitState(j *jobRun) state.Admit {
	if j.tenant == "" {
		return nil
	}
	gate, tenant := w.gate(), j.tenant
	return func(ctx context.Context) (func(), error) {
		wctx, cancel := context.WithTimeout(ctx, admitWait)
		defer cancel()
		release, err := gate.Acquire(wctx, tenant)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return func() {}, nil
		}
		return release, nil
	}
}

// admitWait bounds a compaction's wait for its tenant's slot.
const admitWait = 2 * time.Second

// instance instantiates mod for a subtask of j: within the memory quota of
// j's tenant, and, for a tenant's job, holding a slot of the gate, since
// instantiation runs guest code (_initialize) and a job that restarts in a
// loop instantiates again each time.
func (w *Worker) instance(j *jobRun, mod *host.Module, label string) (*host.Instance, error) {
	var opts []host.InstanceOption
	if j.memPages > 0 {
		opts = append(opts, host.WithMemoryLimit(j.memPages))
	}
	if j.tenant == "" {
		return mod.NewInstance(j.ctx, label, opts...)
	}
	rel, err := w.gate().Acquire(j.ctx, j.tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: waiting for a guest call slot to instantiate %s: %w", j.tenant, label, err)
	}
	defer rel()
	return mod.NewInstance(j.ctx, label, opts...)
}

// releaseConn closes the job's own connection.
func (j *jobRun) releaseConn() {
	if j.ownsNC {
		j.nc.Close()
	}
}

// releaseSink lets go of a sink's resources and leaves its files.
func releaseSink(s connector.Sink) {
	if r, ok := s.(interface{ Release() error }); ok {
		_ = r.Release()
	}
}

// abortSink discards what a sink has not committed, when it can.
func abortSink(s connector.Sink) {
	if a, ok := s.(interface{ Abort() error }); ok {
		_ = a.Abort()
		return
	}
	_ = s.Close()
}

type chanKey struct{ edge, up, down int }

func (w *Worker) deploy(d transport.Deployment) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return fmt.Errorf("worker %s is shutting down", w.cfg.ID)
	}
	if prev, dup := w.jobs[d.JobID]; dup {
		if prev.attempt >= d.Attempt {
			w.mu.Unlock()
			return fmt.Errorf("worker %s already runs attempt %d of job %s", w.cfg.ID, prev.attempt, d.JobID)
		}
		// A restart: the previous attempt's subtasks have all reported their
		// end, but may still be releasing resources.
		w.mu.Unlock()
		prev.cancel()
		select {
		case <-prev.done:
		case <-time.After(time.Minute):
			return fmt.Errorf("worker %s: attempt %d of job %s did not stop within a minute", w.cfg.ID, prev.attempt, d.JobID)
		}
	} else {
		w.mu.Unlock()
	}

	plan, err := job.Parse(d.Plan)
	if err != nil {
		return err
	}
	g, err := job.Build(plan)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &jobRun{id: d.JobID, attempt: d.Attempt, digest: d.ModuleDigest, epoch: d.Epoch, plan: plan, graph: g, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), restartable: d.Restartable, tenant: d.Tenant, stateBytes: d.StateBytes, stateRate: d.StateWriteRate,
		memPages: uint32(d.MemoryLimitMiB) * 16, weight: d.Weight, reportFirst: d.ReportFirstRecord, replicas: d.Replicas}
	if err := w.dataConn(j, d); err != nil {
		cancel()
		return err
	}
	fail := func(err error) error {
		cancel()
		j.releaseConn()
		w.forgetCreds(j)
		return err
	}
	if plan.Checkpoint.Enabled() {
		env, err := w.checkpointEnv(j, d)
		if err != nil {
			return fail(err)
		}
		j.ckpt = env
	}
	var mod *host.Module
	if needsModule(g) {
		mod, err = w.module(ctx, j.js, d.Tenant, d.ModuleDigest, d.ModuleName, d.ModuleBytes)
		if err != nil {
			return fail(err)
		}
	}
	if d.DataStream != "" {
		if d.DataStream != transport.DataStream(d.JobID) {
			return fail(fmt.Errorf("job %s: deployment names data stream %s, want %s", d.JobID, d.DataStream, transport.DataStream(d.JobID)))
		}
		x, err := transport.NewExchange(ctx, transport.ExchangeConfig{NATS: j.nc, Job: d.JobID, Attempt: d.Attempt, Window: w.cfg.ExchangeWindow})
		if err != nil {
			return fail(fmt.Errorf("worker %s: %w", w.cfg.ID, err))
		}
		j.exch = x
	}
	tasks, err := w.wire(j, mod, d.Tasks)
	if err != nil {
		if j.exch != nil {
			j.exch.Close()
		}
		return fail(err)
	}
	j.tasks = tasks
	w.mu.Lock()
	w.jobs[d.JobID] = j
	w.mu.Unlock()
	for _, t := range tasks {
		j.wg.Add(1)
		go w.runTask(j, t)
	}
	go func() {
		j.wg.Wait()
		cancel()
		if j.exch != nil {
			j.exch.Close()
		}
		j.releaseConn()
		w.mu.Lock()
		if w.jobs[j.id] == j {
			delete(w.jobs, j.id)
		}
		w.mu.Unlock()
		w.forgetCreds(j)
		close(j.done)
	}()
	return nil
}

// checkpointEnv prepares what a checkpointing job's subtasks need: its
// storage, its mode, and the checkpoint the attempt restores from.
func (w *Worker) checkpointEnv(j *jobRun, d transport.Deployment) (*ckptEnv, error) {
	cs := j.plan.Checkpoint
	if d.CheckpointRoot == "" {
		return nil, fmt.Errorf("job %s checkpoints but its deployment names no checkpoint storage", j.id)
	}
	st, err := checkpoint.OpenReplicatedStorageAt(d.CheckpointRoot, j.nc, d.Replicas)
	if err != nil {
		return nil, err
	}
	mode := checkpoint.ExactlyOnce
	if cs.Mode != "" {
		if mode, err = checkpoint.ParseMode(string(cs.Mode)); err != nil {
			return nil, err
		}
	}
	if err := st.SetCompression(cs.CompressionLevel()); err != nil {
		return nil, err
	}
	env := &ckptEnv{
		storage:          st,
		mode:             mode,
		incremental:      cs.IncrementalOn(),
		nativeSavepoints: cs.SavepointFormat == job.SavepointNative,
		alignedTimeout:   cs.AlignedTimeout,
		tmpDir:           filepath.Join(w.cfg.DataDir, "jobs", j.id, "snapshots"),
		log:              w.log.With(logging.Job, j.id, logging.Attempt, j.attempt),
		js:               j.js,
		publish: func(a transport.CheckpointAck) {
			if err := w.cfg.NATS.Publish(transport.CheckpointAckSubject(j.id), ackJSON(a)); err != nil {
				w.log.Warn("acknowledging a checkpoint", logging.Job, j.id, logging.Checkpoint, a.ID, "err", err)
			}
		},
	}
	localRoot := filepath.Join(w.cfg.DataDir, "jobs", j.id, "local")
	if cs.LocalRecovery {
		env.localRoot = localRoot
	} else if err := os.RemoveAll(localRoot); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(env.tmpDir, 0o755); err != nil {
		return nil, err
	}
	switch {
	case d.SavepointRoot != "":
		sp, err := checkpoint.OpenReplicatedStorageAt(d.SavepointRoot, j.nc, d.Replicas)
		if err != nil {
			return nil, err
		}
		m, err := sp.ReadMetadata(d.RestoreID)
		if err != nil {
			return nil, err
		}
		if err := sp.Verify(m); err != nil {
			return nil, err
		}
		old, err := job.Parse(m.Plan)
		if err == nil {
			env.oldGraph, err = job.Build(old)
		}
		if err != nil {
			return nil, fmt.Errorf("savepoint %s: its plan: %w", d.SavepointRoot, err)
		}
		env.migrations = job.Migrations(old, j.plan)
		env.restore, env.restoreStorage, env.fromSavepoint = m, sp, true
	case d.RestoreID > 0:
		m, err := st.ReadMetadata(d.RestoreID)
		if err != nil {
			return nil, err
		}
		if err := st.Verify(m); err != nil {
			return nil, err
		}
		env.restore, env.restoreStorage = m, st
	}
	return env, nil
}

func needsModule(g *job.Graph) bool {
	for _, c := range g.Chains {
		for _, v := range c.Vertices {
			if v.Kind == job.KindOperator && !strings.HasPrefix(v.Operator, builtin.Prefix) {
				return true
			}
		}
	}
	return false
}

// channels makes the channels of one deployment: local ones between its
// subtasks, JetStream ones to the job's subtasks on other workers.
type channels struct {
	in  func(e *job.ChainEdge, up, down int) (transport.InputChannel, error)
	out func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error)
}

// wire builds the tasks of refs and the channels between them: local
// channels between two subtasks of refs, JetStream channels (when the job
// has a data stream) to subtasks on other workers.
func (w *Worker) wire(j *jobRun, mod *host.Module, refs []transport.TaskRef) (tasks []*task, err error) {
	g := j.graph
	local := map[[2]int]bool{}
	for _, r := range refs {
		if r.Chain < 0 || r.Chain >= len(g.Chains) || r.Subtask < 0 || r.Subtask >= g.Chains[r.Chain].Parallelism {
			return nil, fmt.Errorf("deployment of job %s names subtask %d of chain %d, which the plan does not have", j.id, r.Subtask, r.Chain)
		}
		local[[2]int{r.Chain, r.Subtask}] = true
	}
	chans := map[chanKey]*transport.LocalChannel{}
	remote := func(e *job.ChainEdge) error {
		if j.exch == nil {
			return fmt.Errorf("job %s: edge %s→%s joins subtasks on different workers, and the job has no data stream to carry it", j.id, e.FromVertex, e.ToVertex)
		}
		return nil
	}
	localChannel := func(e *job.ChainEdge, up, down int) *transport.LocalChannel {
		k := chanKey{e.Index, up, down}
		c, ok := chans[k]
		if !ok {
			c = transport.NewLocalChannel(w.cfg.ChannelCapacity)
			chans[k] = c
		}
		return c
	}
	cs := channels{
		in: func(e *job.ChainEdge, up, down int) (transport.InputChannel, error) {
			if local[[2]int{e.From.Index, up}] {
				return localChannel(e, up, down), nil
			}
			if err := remote(e); err != nil {
				return nil, err
			}
			w.remoteChannels.Add(1)
			in, err := j.exch.NewInput(e.Index, up, down)
			if err != nil {
				return nil, err
			}
			if j.ckpt != nil {
				// It holds the stream ranges the subtask's checkpoints
				// refer to until they are subsumed.
				j.ckpt.observe(checkpoint.TaskID{Chain: e.To.Index, Subtask: down}, e.Index, up, in)
			}
			return in, nil
		},
		out: func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error) {
			if local[[2]int{e.To.Index, down}] {
				return localChannel(e, up, down), nil
			}
			if err := remote(e); err != nil {
				return nil, err
			}
			w.remoteChannels.Add(1)
			return j.exch.NewOutput(e.Index, up, down)
		},
	}
	// The subtasks are built in parallel: instantiating a module (the
	// guest's _initialize) and opening keyed state take milliseconds each,
	// and a deployment is not done until every subtask is built. Only the
	// channels are shared between them.
	var mu sync.Mutex
	shared := channels{
		in: func(e *job.ChainEdge, up, down int) (transport.InputChannel, error) {
			mu.Lock()
			defer mu.Unlock()
			return cs.in(e, up, down)
		},
		out: func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error) {
			mu.Lock()
			defer mu.Unlock()
			return cs.out(e, up, down)
		},
	}
	tasks = make([]*task, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tasks[i], errs[i] = w.newTask(j, mod, g.Chains[r.Chain], r.Subtask, shared)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, t := range tasks {
				if t != nil {
					_ = t.close()
				}
			}
			// The first in deployment order, as when they were built one
			// by one.
			return nil, err
		}
	}
	return tasks, nil
}

// chainedOutput is the output index of from that the chained edge from→to
// carries.
func chainedOutput(p *job.Plan, from, to string) int {
	v := p.Vertex(from)
	for _, e := range p.Edges {
		if e.From == from && e.To == to {
			for i, o := range v.Outputs {
				if o == e.Output {
					return i
				}
			}
		}
	}
	return 0
}

// sinkStates returns the sink state of vertex that the subtask restores:
// after a checkpoint restore of the same job, its own (the sink adopts it);
// after a restore from a savepoint, or at another parallelism, none of its
// own, and the old subtasks' states it takes over for connector.TakesOver:
// its own index, and the removed s' ≥ parallelism with s' mod parallelism =
// its index.
func (t *task) sinkStates(vertex string) (own []byte, taken [][]byte) {
	env := t.ckpt
	if env == nil || env.restore == nil || !env.fromSavepoint {
		return t.operatorState(vertex), nil
	}
	olds, _ := env.oldTasks(t.chain.Vertices[0].ID)
	p := t.chain.Parallelism
	for s, st := range olds {
		if st == nil || st.Operator[vertex] == nil {
			continue
		}
		if s == t.subtask || (s >= p && s%p == t.subtask) {
			taken = append(taken, st.Operator[vertex])
		}
	}
	return nil, taken
}

// recoverFinishedSink commits the transactions that the sink of a subtask
// restored as finished pre-committed in the restored checkpoint (its final
// one), and closes the sink.
func (w *Worker) recoverFinishedSink(j *jobRun, t *task) error {
	sink := t.sink
	t.sink = nil
	if sink == nil {
		return nil
	}
	v := t.chain.Vertices[len(t.chain.Vertices)-1]
	st := t.operatorState(v.ID)
	if !t.sinkTxn || st == nil {
		releaseSink(sink)
		return nil
	}
	if idf, ok := sink.(connector.Identified); ok {
		if err := idf.SetIdentity(j.id, v.ID); err != nil {
			return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
	}
	if err := sink.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
		return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
	}
	if err := sink.(connector.Transactional).Recover(st, j.ckpt.restore.ID); err != nil {
		releaseSink(sink)
		return fmt.Errorf("sink %q (vertex %s, subtask %d): recovering: %w", v.Connector, v.ID, t.subtask, err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("sink %q (vertex %s, subtask %d): closing: %w", v.Connector, v.ID, t.subtask, err)
	}
	return nil
}

// open opens the task's connectors and operators; it runs on the task's
// goroutine so that a slow guest open does not hold up the deployment.
func (w *Worker) open(j *jobRun, t *task) error {
	p := j.plan
	if t.source != nil {
		v := t.chain.Vertices[0]
		if err := t.source.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
			return fmt.Errorf("source %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
		off := t.operatorState(v.ID)
		if off == nil {
			off = t.sourceOffset
		}
		if off != nil {
			r, ok := t.source.(connector.Rewindable)
			if !ok {
				return fmt.Errorf("source %q (vertex %s, subtask %d) cannot rewind to its checkpointed position", v.Connector, v.ID, t.subtask)
			}
			if err := r.Seek(off); err != nil {
				return fmt.Errorf("source %q (vertex %s, subtask %d): rewinding to checkpoint %d: %w", v.Connector, v.ID, t.subtask, j.ckpt.restore.ID, err)
			}
		}
	}
	if t.sink != nil {
		v := t.chain.Vertices[len(t.chain.Vertices)-1]
		if idf, ok := t.sink.(connector.Identified); ok {
			if err := idf.SetIdentity(j.id, v.ID); err != nil {
				return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
			}
		}
		if err := t.sink.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
			return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
		if t.sinkTxn && (j.attempt > 0 || j.ckpt.restore != nil) {
			// Commit what the restored checkpoint pre-committed, and remove
			// what the failed attempt wrote after it.
			var id int64
			if j.ckpt.restore != nil {
				id = j.ckpt.restore.ID
			}
			own, taken := t.sinkStates(v.ID)
			if err := t.sink.(connector.Transactional).Recover(own, id); err != nil {
				return fmt.Errorf("sink %q (vertex %s, subtask %d): recovering: %w", v.Connector, v.ID, t.subtask, err)
			}
			if to, ok := t.sink.(connector.TakesOver); ok && len(taken) > 0 {
				if err := to.RecoverFrom(taken, id); err != nil {
					return fmt.Errorf("sink %q (vertex %s, subtask %d): committing what %s %d pre-committed: %w", v.Connector, v.ID, t.subtask, j.ckpt.restore.Kind, id, err)
				}
			}
		}
	}
	for k, s := range t.stages {
		v := s.vertex
		// Guest text arrives escaped (package host); the line says whose
		// job wrote it.
		attrs := []any{"guest", true, logging.Job, j.id, logging.Vertex, v.ID, logging.Subtask, t.subtask}
		if j.tenant != "" {
			attrs = append(attrs, logging.Tenant, j.tenant)
		}
		glog := w.log
		svc := &stageServices{keyedState: s.state, t: t, log: func(level int32, msg string) {
			glog.Log(context.Background(), logging.GuestLevel(level), msg, attrs...)
		}}
		spec := operator.Spec{
			VertexID:       v.ID,
			Operator:       strings.TrimPrefix(v.Operator, builtin.Prefix),
			Config:         v.Config,
			Outputs:        v.Outputs,
			Subtask:        t.subtask,
			Parallel:       t.chain.Parallelism,
			MaxParallelism: p.MaxParallelism,
			Keyed:          k == 0 && t.store != nil,
		}
		s.spec, s.svc = spec, svc
		if err := s.op.Open(spec, svc); err != nil {
			return t.stageError(s, "failed to open", err)
		}
	}
	if t.dl != nil && t.inst != nil {
		// Saved now, so that the first trap resets the instance too
		// rather than makes a new one (recoverInstance). A module whose
		// instances cannot be reset has them replaced.
		_ = t.inst.Snapshot()
	}
	return t.openDeadLetters(j.ctx, j)
}

func (w *Worker) runTask(j *jobRun, t *task) {
	defer j.wg.Done()
	var err error
	if t.restored != nil && t.restored.Finished {
		// It finished before the checkpoint it restores from: its output
		// is complete, so it only commits what its sink pre-committed for
		// that checkpoint and tells downstream that it has ended.
		err = w.recoverFinishedSink(j, t)
		if err == nil && t.dl != nil {
			// Its dead letters too: commit what the checkpoint lists.
			if err = t.openDeadLetters(j.ctx, j); err == nil {
				err = t.closeDeadLetters()
			} else {
				t.endDeadLetters(true)
			}
		}
		if err == nil {
			err = t.broadcast(j.ctx, transport.Message{Kind: transport.KindEnd})
		}
		if cerr := t.close(); err == nil && cerr != nil {
			err = cerr
		}
		w.report(j, t, err)
		return
	}
	err = w.open(j, t)
	if err == nil && t.restored != nil && len(t.restored.Channels) > 0 {
		err = t.restoreChannels(j.ctx, t.restored)
	}
	if err == nil {
		err = t.run(j.ctx)
	}
	// Acknowledgements of snapshots already taken still go out.
	t.asyncWG.Wait()
	if err == nil {
		// A finished subtask never restores again from its local snapshots.
		if dir := t.localDir(); dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	failed := err != nil && !(j.ctx.Err() != nil && errors.Is(err, context.Canceled)) && !errors.Is(err, errStopped)
	if failed {
		// Before any sink of the job is closed: they must abort instead.
		j.failed.Store(true)
	}
	if t.sink != nil {
		// The input did not end. A job stopped with a savepoint flushes
		// what its sinks hold; a failed or canceled job's sinks abort, so a
		// file sink never leaves a file that looks complete. A
		// transactional sink's files are what recovery (after a restart, or
		// a resumed run) commits or removes, so they stay as they are.
		switch {
		case t.sinkTxn:
			releaseSink(t.sink)
		case j.failed.Load() || (err != nil && !errors.Is(err, errStopped)):
			abortSink(t.sink)
		default:
			_ = t.sink.Close()
		}
	}
	t.endDeadLetters(j.failed.Load() || (err != nil && !errors.Is(err, errStopped)))
	if cerr := t.close(); err == nil && cerr != nil {
		err = fmt.Errorf("subtask %s: releasing resources: %w", t.label, cerr)
	}
	w.report(j, t, err)
}

// report publishes how a subtask ended.
func (w *Worker) report(j *jobRun, t *task, err error) {
	st := transport.TaskStatus{JobID: j.id, Attempt: j.attempt, Worker: w.cfg.ID, Task: transport.TaskRef{Chain: t.chain.Index, Subtask: t.subtask}, Metrics: t.metrics()}
	switch {
	case err == nil:
		st.State = transport.TaskFinished
	case j.ctx.Err() != nil && errors.Is(err, context.Canceled), errors.Is(err, errStopped):
		st.State = transport.TaskCanceled
	default:
		st.State = transport.TaskFailed
		st.Error = err.Error()
		st.AfterPeer = errors.Is(err, transport.ErrClosed)
		j.failed.Store(true)
		// Stop the job's other local subtasks at once; the coordinator also
		// cancels them everywhere.
		j.cancel()
	}
	b, _ := json.Marshal(st)
	if perr := w.cfg.NATS.Publish(transport.TaskStatusSubject(j.id, w.cfg.ID), b); perr != nil {
		w.log.Warn("reporting a subtask's state", logging.Job, j.id, "subtask", t.label, "state", st.State, "err", perr)
	}
}

// Jobs lists the ids of the jobs with subtasks on this worker.
func (w *Worker) Jobs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.jobs))
	for id := range w.jobs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Metrics returns the live record counts of a job's subtasks on this
// worker, summed per vertex in plan order; nil when the worker does not run
// the job.
func (w *Worker) Metrics(jobID string) []transport.VertexMetrics {
	w.mu.Lock()
	j := w.jobs[jobID]
	w.mu.Unlock()
	if j == nil {
		return nil
	}
	sum := map[string]*transport.VertexMetrics{}
	for _, t := range j.tasks {
		for _, m := range t.metrics() {
			a, ok := sum[m.Vertex]
			if !ok {
				a = &transport.VertexMetrics{Vertex: m.Vertex}
				sum[m.Vertex] = a
			}
			a.RecordsIn += m.RecordsIn
			a.RecordsOut += m.RecordsOut
			a.DeadLetters += m.DeadLetters
		}
	}
	out := make([]transport.VertexMetrics, 0, len(sum))
	for _, v := range j.plan.Vertices {
		if m, ok := sum[v.ID]; ok {
			out = append(out, *m)
		}
	}
	return out
}

// onCheckpoint routes a checkpoint trigger to the listed subtasks and a
// notification to every subtask of the job's attempt.
func (w *Worker) onCheckpoint(m *nats.Msg) {
	var c transport.CheckpointControl
	if err := json.Unmarshal(m.Data, &c); err != nil {
		w.log.Warn("bad checkpoint message", "err", err)
		return
	}
	if !w.admit(c.Epoch, "checkpoint "+string(c.Action)) {
		return
	}
	w.mu.Lock()
	j := w.jobs[c.JobID]
	w.mu.Unlock()
	if j == nil || j.attempt != c.Attempt || j.ckpt == nil {
		return
	}
	ctl := control{action: c.Action, id: c.ID, kind: c.Kind, timestamp: c.Timestamp, reason: c.Reason, stop: c.Stop, drain: c.Drain}
	for _, t := range j.tasks {
		if c.Action == transport.CheckpointTrigger && !slices.Contains(c.Tasks, t.id) {
			continue
		}
		t.mbox.put(ctl)
	}
}
