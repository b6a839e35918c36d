package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/jwt/v2"
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
	// epochRose is when epoch last rose (Unix nanoseconds): heartbeats
	// list the attempts' credentials for a while after (listCreds).
	epochRose atomic.Int64
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
		if epoch == cur {
			return true
		}
		if w.epoch.CompareAndSwap(cur, epoch) {
			w.epochRose.Store(time.Now().UnixNano())
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

// credsListing is how long after a new leader's epoch heartbeats list the
// credentials of the attempts the worker runs: a leader adopts within
// three heartbeat intervals of its take-over, or cancels.
const credsListing = 30 * time.Second

// beat is the worker's heartbeat message.
func (w *Worker) beat() []byte {
	info := transport.WorkerInfo{ID: w.cfg.ID, Slots: w.cfg.Slots, Reconnects: w.cfg.NATS.Stats().Reconnects, Epoch: w.epoch.Load()}
	now := time.Now()
	// A new leader needs the attempts' credentials as it takes them over
	// (adopted or cancelled), shortly after it announced its epoch; they
	// are kilobytes each, too many to send every heartbeat.
	listCreds := now.Sub(time.Unix(0, w.epochRose.Load())) < max(credsListing, 10*w.cfg.HeartbeatInterval)
	w.mu.Lock()
	for id, j := range w.jobs {
		r := transport.RunningAttempt{JobID: id, Attempt: j.attempt, Module: j.digest, Epoch: j.epoch}
		if j.creds != nil && listCreds {
			r.Creds = j.creds.unexpired(now)
		}
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
	wasm, err := transport.FetchModule(ctx, js, obs, tenant, digest, limit)
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
	j.creds = &attemptCreds{attempt: d.Attempt}
	j.creds.set(d.TenantJWT, d.TenantSeed)
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
	// held are the user JWTs the worker was given for the attempt that
	// have not expired, newest last: connections made before a renewal
	// still use older ones, so a new leader that adopts the attempt must
	// know them all to revoke them when it ends (heartbeats list them).
	held []heldJWT
}

type heldJWT struct {
	jwt     string
	expires int64 // Unix seconds; 0: unknown
}

// maxHeldJWTs bounds the JWTs a heartbeat lists per attempt: renewals
// come every third of the credentials' lifetime, so about three are
// unexpired at a time.
const maxHeldJWTs = 8

// set makes userJWT and seed the credentials that (re)connections use.
func (c *attemptCreds) set(userJWT, seed string) {
	var exp int64
	if uc, err := jwt.DecodeUserClaims(userJWT); err == nil {
		exp = uc.Expires
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jwt, c.seed = userJWT, seed
	c.held = append(c.held, heldJWT{userJWT, exp})
	if n := len(c.held) - maxHeldJWTs; n > 0 {
		c.held = slices.Delete(c.held, 0, n)
	}
}

// unexpired returns the JWTs held that have not expired at now.
func (c *attemptCreds) unexpired(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, h := range c.held {
		if h.expires == 0 || h.expires > now.Unix() {
			out = append(out, h.jwt)
		}
	}
	return out
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
	if c == nil || c.attempt != r.Attempt || r.JWT == "" || r.Seed == "" || !w.admit(r.Epoch, "credentials renewal") {
		return
	}
	c.set(r.JWT, r.Seed)
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

// channels makes the channels of one deployment: local ones between its
// subtasks, JetStream ones to the job's subtasks on other workers.
type channels struct {
	in  func(e *job.ChainEdge, up, down int) (transport.InputChannel, error)
	out func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error)
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
