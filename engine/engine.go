// Package engine assembles the parts into a running system: the embedded
// default (an in-process NATS server with JetStream, a coordinator and
// workers, everything under one data directory) or a client of a running
// cluster. It also prepares deployments: read the module, validate it, take
// its plan, apply overrides, build the graph, so that every bad input is
// refused before anything starts.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/metrics"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
	"github.com/wstream/wstream/worker"
)

// Options configure an Engine.
type Options struct {
	DataDir string // default ./wstream-data
	// NATSURL connects to a running NATS server instead of embedding one.
	NATSURL string
	// NATSOptions are passed to nats.Connect with NATSURL (credentials, TLS).
	NATSOptions []nats.Option
	// Listen makes the embedded NATS server accept network clients.
	Listen string
	// Workers is how many in-process workers to start (default 1; 0 with
	// NATSURL set means none: the cluster has its own). With more than one,
	// each has a NATS connection of its own and the coordinator spreads a
	// job's subtasks over them, so their channels go through JetStream as
	// between hosts.
	Workers int
	// WorkerID is the id of the in-process worker (with several, their ids
	// are WorkerID-w0, WorkerID-w1, …). Without it workers of a cluster
	// (NATSURL set) are named after the host and the process id, and
	// those of the embedded server w0, w1, ….
	WorkerID string
	Slots    int
	// StateMemory is each in-process worker's state memory budget
	// (worker.Config.StateMemory).
	StateMemory int64
	Host        host.Config
	// Runtime, when set, is the wazero runtime of the in-process workers
	// instead of one created from Host (HostConfig); the engine does not
	// close it. Given the runtime that validated a deployment (Prepare),
	// the workers run the module as it was compiled and probed there.
	Runtime *host.Runtime
	Stdout  io.Writer
	// Log receives the log lines of the engine's coordinator, workers,
	// guests and embedded NATS server (nothing when nil).
	Log *slog.Logger
	// NoCoordinator skips starting a coordinator (a cluster has one).
	NoCoordinator bool
	// HeartbeatInterval is how often the in-process workers heartbeat, and
	// what the coordinator expects of every worker (default 1s).
	HeartbeatInterval time.Duration
	// WorkerTimeout is how long a worker may stay silent before the
	// coordinator declares it lost and fails its jobs over (default 10
	// heartbeat intervals).
	WorkerTimeout time.Duration
	// ResumeJobs makes the coordinator resume, when it starts, the jobs
	// that the job bucket says are running (`wstream server`: a coordinator
	// that takes over from one that died).
	ResumeJobs bool
	// Tenants makes the cluster multi-tenant: the embedded NATS server
	// trusts the authority's operator (with NATSURL, the external server
	// must: tenant.Authority.ServerConfig), the coordinator and workers
	// connect as users of its service account, and each tenant is an
	// account of its own.
	Tenants *tenant.Authority
	// AttemptCredsTTL is how long the credentials of a job attempt that
	// workers get stay valid, with Tenants (coordinator.Config).
	AttemptCredsTTL time.Duration
	// NoWorkers starts no in-process worker, even with the embedded server
	// (`wstream server` runs guest code only when asked).
	NoWorkers bool
	// HTTP is the address of the HTTP listener that serves the web UI, the
	// REST API and metrics (package api), e.g. "127.0.0.1:0" for a free
	// port on loopback; "" serves none. Only an engine with a coordinator
	// serves them. With Tenants every request needs an API token.
	HTTP string
	// CheckpointHistory is how many recent checkpoints per job the
	// coordinator keeps with their details for the REST API (default
	// coordinator.DefaultCheckpointHistory).
	CheckpointHistory int
	// MaxModuleBytes caps the size of a module the coordinator accepts and
	// the in-process workers fetch, the admin's and every tenant's (default
	// transport.DefaultMaxModuleBytes).
	MaxModuleBytes int64
	// Lease is the coordinators' lease period (coordinator.DefaultLease
	// when zero). A coordinator against a NATS server that others may
	// reach (NATSURL) leads only if it takes the lease, and is a standby
	// otherwise; one that embeds the server takes it at once.
	Lease time.Duration
	// OnLead and Deposed are the coordinator's (coordinator.Config).
	OnLead  func(coordinator.LeaderInfo)
	Deposed func(error)
	// Replicas is how many copies the NATS cluster keeps of every stream,
	// bucket and object store (coordinator.Config.Replicas); 0 means 1,
	// the only count the embedded server, a single node, can keep.
	Replicas int
}

// ReconnectWait is how long a connection to a NATS server waits between
// attempts to reconnect; it tries for ever.
const ReconnectWait = 250 * time.Millisecond

// connectOptions are the options of every connection to a NATS server
// given by URL: reconnect for ever, briskly, so that the coordinator,
// workers and clients outlive a restart of the server; o.NATSOptions
// (credentials, TLS) come last and may override them.
func connectOptions(name string, o Options) []nats.Option {
	return append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(ReconnectWait),
		nats.ReconnectJitter(100*time.Millisecond, time.Second)}, o.NATSOptions...)
}

// Engine is a running embedded system or a connection to a cluster.
type Engine struct {
	opts    Options
	srv     *server.Server
	nc      *nats.Conn
	sys     *nats.Conn               // the system account's (tenants)
	modules *coordinator.ModuleStore // stores deployed modules through nc
	rt      *host.Runtime
	ownsRT  bool
	coord   *coordinator.Coordinator
	workers []*worker.Worker
	// conns are the workers' own connections (several workers).
	conns   []*nats.Conn
	urlFile string
	// api serves the UI and the REST API (nil: Options.HTTP is empty).
	api *api.Server
	// unlock lets go of the data directory (lockDataDir).
	unlock func()
	// metrics is the process's registry (MetricsHandler).
	metrics *metrics.Registry
}

// URLFile is where an embedded server that listens writes its client URL.
func URLFile(dataDir string) string { return filepath.Join(dataDir, "nats.url") }

// LocalURL returns the URL of the server a running `wstream deploy` embeds
// for dataDir, or an error saying that none runs.
func LocalURL(dataDir string) (string, error) {
	b, err := os.ReadFile(URLFile(dataDir))
	if err != nil {
		return "", fmt.Errorf("no wstream is running with data directory %s (start the job with wstream deploy, or pass --nats)", dataDir)
	}
	return strings.TrimSpace(string(b)), nil
}

// Start starts an engine: the NATS connection (an embedded server unless
// Options.NATSURL names one), the runtime, the coordinator, the workers and
// the HTTP listener, in that order. On an error it closes what it started.
func Start(ctx context.Context, o Options) (e *Engine, err error) {
	unlock, err := prepareDataDir(&o)
	if err != nil {
		return nil, err
	}
	e = &Engine{opts: o, unlock: unlock}
	// The error returns below say "return nil, err", which clears e before
	// this runs: close what was started through a copy.
	started := e
	defer func() {
		if err != nil {
			_ = started.Close(context.Background())
			e = nil
		}
	}()
	d, err := newDialer(e, &o)
	if err != nil {
		return nil, err
	}
	if err := e.connect(&o, d); err != nil {
		return nil, err
	}
	tenantConnect, err := e.connectSystem(o, d)
	if err != nil {
		return nil, err
	}
	if err := e.startRuntime(ctx, o); err != nil {
		return nil, err
	}
	if err := e.startCoordinator(o, tenantConnect); err != nil {
		return nil, err
	}
	if err := e.startWorkers(ctx, o, d); err != nil {
		return nil, err
	}
	if err := e.registerMetrics(); err != nil {
		return nil, err
	}
	// Last: the listener serves the metrics of everything above.
	if e.coord != nil && o.HTTP != "" {
		if err := e.startAPI(o); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// prepareDataDir fills in the defaults, makes the data directory and takes it.
func prepareDataDir(o *Options) (unlock func(), err error) {
	if o.DataDir == "" {
		o.DataDir = "wstream-data"
	}
	o.Log = logging.OrDiscard(o.Log)
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	// The directory is the engine's own when it holds a NATS store, job
	// records or state: a client of a cluster (deploy --nats) keeps only
	// the compilation cache there, which many may share.
	if o.NATSURL == "" || !o.NoCoordinator || (o.Workers > 0 && !o.NoWorkers) {
		if unlock, err = lockDataDir(o.DataDir); err != nil {
			return nil, err
		}
	}
	o.Host = HostConfig(*o)
	return unlock, nil
}

// dialer connects to the server as the engine's processes do: in process or
// by URL, as a user of the service account when there are tenants.
type dialer struct {
	e    *Engine
	o    *Options
	base []nats.Option
}

func newDialer(e *Engine, o *Options) (*dialer, error) {
	d := &dialer{e: e, o: o}
	if o.Tenants != nil {
		// The in-process workers share the coordinator's user: they run
		// in the process that holds the authority.
		cr, err := o.Tenants.CoordinatorUser("wstream-coordinator")
		if err != nil {
			return nil, err
		}
		d.base = append(d.base, cr.Option())
	}
	if o.NATSURL != "" && o.NoCoordinator {
		if err := workerIdentity(o); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// dial connects; opts (a tenant user's credentials) come last.
func (d *dialer) dial(name string, opts ...nats.Option) (*nats.Conn, error) {
	all := append(slices.Clone(d.base), opts...)
	if d.e.srv != nil {
		return transport.ConnectInProcess(d.e.srv, name, all...)
	}
	nc, err := nats.Connect(d.o.NATSURL, append(connectOptions(name, *d.o), all...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", d.o.NATSURL, err)
	}
	return nc, nil
}

// connect starts the embedded server when no URL is given, and makes the
// engine's own connection.
func (e *Engine) connect(o *Options, d *dialer) (err error) {
	if o.NATSURL != "" {
		if e.nc, err = d.dial("wstream"); err != nil {
			return err
		}
	} else if err := e.startEmbedded(o, d); err != nil {
		return err
	}
	e.modules = coordinator.NewModuleStore(e.nc)
	if o.NoWorkers {
		o.Workers = 0
	}
	return nil
}

func (e *Engine) startEmbedded(o *Options, d *dialer) (err error) {
	if o.Replicas > 1 {
		return fmt.Errorf("--replicas %d: the embedded NATS server is not clustered (1 node); run a NATS cluster and pass it with --nats (docs/cluster.md)", o.Replicas)
	}
	eo := transport.EmbeddedOptions{StoreDir: filepath.Join(o.DataDir, "nats"), Listen: o.Listen, Log: o.Log}
	tenants := o.Tenants
	eo.Configure = func(so *server.Options) error {
		// JetStream acknowledges a write before it reaches the disk
		// and syncs every two minutes: a crash of the host would
		// lose job records, checkpoint ids and checkpoint files
		// their acknowledgement counted as written. One node has no
		// replica to recover them from, so every write is synced.
		so.SyncAlways = true
		if tenants != nil {
			return tenants.ConfigureServer(so)
		}
		return nil
	}
	if e.srv, err = transport.StartEmbedded(eo); err != nil {
		return err
	}
	if e.nc, err = d.dial("wstream"); err != nil {
		return err
	}
	if o.Listen != "" {
		// Commands such as `wstream savepoint` find this process's
		// server through the data directory.
		if err := os.WriteFile(URLFile(o.DataDir), []byte(e.srv.ClientURL()+"\n"), 0o644); err != nil {
			return err
		}
		e.urlFile = URLFile(o.DataDir)
	}
	if o.Workers <= 0 && !o.NoWorkers {
		o.Workers = 1
	}
	return nil
}

// connectSystem connects to the system account when a coordinator runs
// with tenants, and returns how the coordinator connects as a tenant.
func (e *Engine) connectSystem(o Options, d *dialer) (func(string, tenant.Creds) (*nats.Conn, error), error) {
	if o.Tenants == nil || o.NoCoordinator {
		return nil, nil
	}
	cr, err := o.Tenants.SystemUser("wstream-system")
	if err != nil {
		return nil, err
	}
	// The system account's connection carries no service credentials.
	if e.srv != nil {
		e.sys, err = transport.ConnectInProcess(e.srv, "wstream-system", cr.Option())
	} else {
		e.sys, err = nats.Connect(o.NATSURL, append(connectOptions("wstream-system", o), cr.Option())...)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS's system account: %w", err)
	}
	if e.srv == nil {
		// An external server learns the tenants added while it was
		// started from an older configuration.
		if err := o.Tenants.PushAll(e.sys); err != nil {
			return nil, err
		}
	}
	return func(name string, c tenant.Creds) (*nats.Conn, error) { return d.dial(name, c.Option()) }, nil
}

func (e *Engine) startRuntime(ctx context.Context, o Options) (err error) {
	if o.Runtime != nil {
		e.rt = o.Runtime
		return nil
	}
	if e.rt, err = host.NewRuntime(ctx, o.Host); err != nil {
		return err
	}
	e.ownsRT = true
	return nil
}

func (e *Engine) startCoordinator(o Options, tenantConnect func(string, tenant.Creds) (*nats.Conn, error)) (err error) {
	if o.NoCoordinator {
		return nil
	}
	e.coord, err = coordinator.New(coordinator.Config{NATS: e.nc, Log: o.Log, DataDir: o.DataDir,
		HeartbeatInterval: o.HeartbeatInterval, WorkerTimeout: o.WorkerTimeout, ResumeJobs: o.ResumeJobs,
		Tenants: o.Tenants, TenantConnect: tenantConnect, SystemConn: e.sys, CheckpointHistory: o.CheckpointHistory,
		MaxModuleBytes: o.MaxModuleBytes, Lease: o.Lease, TakeLease: e.srv != nil, OnLead: o.OnLead, Deposed: o.Deposed,
		AttemptCredsTTL: o.AttemptCredsTTL, Replicas: o.Replicas})
	if err != nil {
		return err
	}
	return e.coord.Start()
}

func (e *Engine) startWorkers(ctx context.Context, o Options, d *dialer) error {
	for i := 0; i < o.Workers; i++ {
		nc := e.nc
		if o.Workers > 1 {
			// A connection per worker, as workers on separate hosts have:
			// the data exchange between them does not share one socket.
			var err error
			if nc, err = d.dial(fmt.Sprintf("wstream-w%d", i)); err != nil {
				return err
			}
			e.conns = append(e.conns, nc)
		}
		w, err := worker.New(ctx, worker.Config{
			ID:      workerID(o, i),
			NATS:    nc,
			DataDir: o.DataDir,
			Slots:   o.Slots,
			Runtime: e.rt,

			StateMemory: o.StateMemory,
			Stdout:      o.Stdout,
			Log:         o.Log,
			Dial:        d.dial,

			HeartbeatInterval: o.HeartbeatInterval,
			MaxModuleBytes:    o.MaxModuleBytes,
		})
		if err != nil {
			return err
		}
		e.workers = append(e.workers, w)
		sctx, stop := context.WithTimeout(ctx, 30*time.Second)
		err = w.Start(sctx)
		stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// registerMetrics makes the process's metrics registry with the collectors
// of what the engine runs.
func (e *Engine) registerMetrics() error {
	reg := metrics.New()
	if e.srv != nil {
		if err := reg.AddNATSServer(e.srv); err != nil {
			return err
		}
	}
	if e.coord != nil {
		if err := reg.AddCoordinator(e.coord); err != nil {
			return err
		}
	}
	if err := reg.AddWorkers(e.workers...); err != nil {
		return err
	}
	e.metrics = reg
	return nil
}

// MetricsHandler serves the process's Prometheus metrics (docs/metrics.md):
// its workers', coordinator's and embedded NATS server's, with Go's and
// the process's.
func (e *Engine) MetricsHandler() http.Handler { return e.metrics.Handler() }

// HostConfig is o.Host with the engine's defaults filled in: the
// compilation cache under the data directory, and guest logs through
// o.Log. A Runtime given to Start is created from it.
func HostConfig(o Options) host.Config {
	hc := o.Host
	if o.DataDir == "" {
		o.DataDir = "wstream-data"
	}
	if hc.CacheDir == "" {
		hc.CacheDir = filepath.Join(o.DataDir, "cache", "wazero")
	}
	if hc.Log == nil && o.Log != nil {
		log := o.Log
		hc.Log = func(level int32, op string, subtask int, msg string) {
			log.Log(context.Background(), logging.GuestLevel(level), msg, "guest", true, "operator", op, logging.Subtask, subtask)
		}
	}
	return hc
}

// workerID is the id of in-process worker i.
// workerIdentity makes a worker that connects with a worker's own
// credentials (tenant.WorkerUser) take the id they were minted for, with
// its inbox under its own subjects: those are all its user may subscribe
// to.
func workerIdentity(o *Options) error {
	var no nats.Options
	for _, opt := range o.NATSOptions {
		if err := opt(&no); err != nil {
			return err
		}
	}
	if no.UserJWT == nil {
		return nil
	}
	j, err := no.UserJWT()
	if err != nil {
		return fmt.Errorf("NATS credentials: %w", err)
	}
	name, ok := tenant.WorkerName(j)
	if !ok {
		return nil
	}
	if o.Workers > 1 {
		return fmt.Errorf("the credentials are those of worker %s: they run one worker", name)
	}
	if o.WorkerID != "" && o.WorkerID != name {
		return fmt.Errorf("the credentials are those of worker %s, not %s: leave out --id, or use the credentials of worker %s (wstream tenant worker-creds %s)", name, o.WorkerID, o.WorkerID, o.WorkerID)
	}
	o.WorkerID = name
	o.NATSOptions = append(slices.Clone(o.NATSOptions), nats.CustomInboxPrefix(transport.WorkerInboxPrefix(name)))
	return nil
}

func workerID(o Options, i int) string {
	base := o.WorkerID
	if base == "" && o.NATSURL != "" {
		// Unique among the workers of a cluster.
		host, _ := os.Hostname()
		host = strings.Map(func(r rune) rune {
			if r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
				return r
			}
			return '_'
		}, host)
		if host == "" {
			host = "worker"
		}
		base = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	switch {
	case base == "":
		return fmt.Sprintf("w%d", i)
	case o.Workers > 1:
		return fmt.Sprintf("%s-w%d", base, i)
	}
	return base
}

// Workers are the engine's in-process workers.
func (e *Engine) Workers() []*worker.Worker { return e.workers }

// KillWorker stops in-process worker i abruptly, as a SIGKILL would: its
// NATS connection closes first, so neither heartbeats nor reports of its
// subtasks reach the coordinator any more, then its subtasks stop. It needs
// several workers (each has a connection of its own).
func (e *Engine) KillWorker(ctx context.Context, i int) error {
	if len(e.conns) != len(e.workers) || i < 0 || i >= len(e.workers) {
		return fmt.Errorf("engine: no in-process worker %d with a connection of its own", i)
	}
	e.conns[i].Close()
	return e.workers[i].Close(ctx)
}

// Conn is the engine's NATS connection.
func (e *Engine) Conn() *nats.Conn { return e.nc }

// storeModule puts d's module into the module bucket and returns its
// digest.
func (e *Engine) storeModule(ctx context.Context, d *Deployment) (string, error) {
	digest := ""
	if d.module != nil {
		// Compile hashed it already: a Go module is megabytes.
		digest = d.module.Digest()
	}
	return e.modules.Store(ctx, digest, d.Wasm)
}

// ClientURL is the URL clients reach the embedded NATS server at (the
// address it listens on, with the port it picked for port 0); empty when
// the engine connects to an external server or its server does not listen.
func (e *Engine) ClientURL() string {
	if e.urlFile == "" {
		return ""
	}
	return e.srv.ClientURL()
}

// Runtime is the engine's wazero host runtime.
func (e *Engine) Runtime() *host.Runtime { return e.rt }

// Close stops workers, coordinator and server.
func (e *Engine) Close(ctx context.Context) error {
	var errs []error
	if e.api != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = e.api.Close(sctx)
		cancel()
		_ = os.Remove(HTTPURLFile(e.opts.DataDir))
		e.api = nil
	}
	for _, w := range e.workers {
		errs = append(errs, w.Close(ctx))
	}
	e.workers = nil
	for _, nc := range e.conns {
		nc.Close()
	}
	e.conns = nil
	if e.coord != nil {
		e.coord.Close()
		e.coord = nil
	}
	if e.rt != nil && e.ownsRT {
		errs = append(errs, e.rt.Close(ctx))
	}
	e.rt = nil
	if e.nc != nil {
		e.nc.Close()
		e.nc = nil
	}
	if e.sys != nil {
		e.sys.Close()
		e.sys = nil
	}
	if e.urlFile != "" {
		_ = os.Remove(e.urlFile)
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		e.srv = nil
	}
	// Last: everything that used the directory is closed.
	if e.unlock != nil {
		e.unlock()
		e.unlock = nil
	}
	return errors.Join(errs...)
}

// Deployment is a validated job ready to submit.
type Deployment struct {
	Name       string
	ModuleName string
	Wasm       []byte // nil when every operator is native or the module is stored already
	Plan       *job.Plan
	Graph      *job.Graph
	// Resume continues the job with this id from its latest checkpoint;
	// its module is the one stored under ModuleDigest.
	Resume       string
	ModuleDigest string
	// FromSavepoint starts the job from the savepoint in this directory.
	FromSavepoint string
	// Suspended is the job this one continues from the savepoint it was
	// suspended with (PrepareResume), or "".
	Suspended             string
	AllowNonRestoredState bool
	// Tenant runs the job as this tenant (the admin only).
	Tenant string
	// module is the module as Prepare compiled it, held until the job is
	// submitted: a worker sharing the runtime then finds it compiled and
	// does not compile or probe it again.
	module *host.Module
}

// PrepareResume prepares the continuation of a job recorded in the data
// directory: id names it, or, when empty, the only job there that has not
// ended.
func PrepareResume(dataDir, id string) (*Deployment, error) {
	if id == "" {
		recs, err := coordinator.ListRecords(dataDir)
		if err != nil {
			return nil, err
		}
		var open []string
		for _, r := range recs {
			if resumable(dataDir, r) {
				open = append(open, r.JobID)
			}
		}
		switch len(open) {
		case 0:
			return nil, fmt.Errorf("--resume: no job in %s is unfinished", dataDir)
		case 1:
			id = open[0]
		default:
			return nil, fmt.Errorf("--resume: %d unfinished jobs in %s (%s): name one", len(open), dataDir, strings.Join(open, ", "))
		}
	}
	rec, err := coordinator.ReadRecord(dataDir, id)
	if err != nil {
		return nil, err
	}
	if rec.State == transport.JobStopped {
		return prepareSuspended(dataDir, rec)
	}
	if rec.State != transport.JobRunning {
		return nil, fmt.Errorf("--resume: job %s has %s", id, rec.State)
	}
	plan, err := job.Parse(rec.Plan)
	if err != nil {
		return nil, fmt.Errorf("job %s: its recorded plan: %w", id, err)
	}
	g, err := job.Build(plan)
	if err != nil {
		return nil, err
	}
	return &Deployment{Name: rec.Name, ModuleName: rec.ModuleName, Plan: plan, Graph: g, Resume: id, ModuleDigest: rec.ModuleDigest}, nil
}

// PrepareOptions say what to deploy.
type PrepareOptions struct {
	ModulePath string // the .wasm file
	PlanPath   string // a plan file overriding the module's plan
	Overrides  job.Overrides
	Name       string
	// Settings, when set, adjusts the plan's checkpoint and restart
	// settings (from flags) before it is validated.
	Settings func(p *job.Plan)
}

// Prepare reads and validates the module, takes the plan from the plan file
// or the module, applies the overrides and builds the graph.
func Prepare(ctx context.Context, rt *host.Runtime, o PrepareOptions) (*Deployment, error) {
	d := &Deployment{Name: o.Name, ModuleName: filepath.Base(o.ModulePath)}
	var modPlan []byte
	if o.ModulePath != "" {
		wasm, err := os.ReadFile(o.ModulePath)
		if err != nil {
			return nil, fmt.Errorf("reading module: %w", err)
		}
		mod, err := rt.Compile(ctx, d.ModuleName, wasm)
		if err != nil {
			return nil, err
		}
		modPlan = mod.Plan()
		d.Wasm, d.module = wasm, mod
	}
	ok := false
	defer func() {
		if !ok && d.module != nil {
			_ = d.module.Close(ctx)
		}
	}()
	var plan *job.Plan
	var err error
	switch {
	case o.PlanPath != "":
		plan, err = job.Load(o.PlanPath)
	case modPlan != nil:
		plan, err = job.Parse(modPlan)
		if err != nil {
			err = fmt.Errorf("the plan exported by module %s: %w", d.ModuleName, err)
		}
	default:
		err = fmt.Errorf("module %s exports no plan (wstream_plan or a %q section): pass one with --plan", d.ModuleName, "wstream.plan")
	}
	if err != nil {
		return nil, err
	}
	if plan.Name == "" {
		plan.Name = nameFromFile(d.ModuleName)
	}
	if err := plan.Apply(o.Overrides); err != nil {
		return nil, err
	}
	if o.Settings != nil {
		o.Settings(plan)
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	g, err := job.Build(plan)
	if err != nil {
		return nil, err
	}
	for i, v := range plan.Vertices {
		if name, ok := strings.CutPrefix(v.Operator, builtin.Prefix); ok && v.Kind == job.KindOperator {
			if _, err := builtin.New(name); err != nil {
				return nil, fmt.Errorf("plan: vertices[%d] (%q).operator: %w", i, v.ID, err)
			}
		}
	}
	if d.Name == "" {
		d.Name = plan.Name
	}
	d.Plan, d.Graph = plan, g
	ok = true
	return d, nil
}

// Submit stores the module and submits the job; it returns the job id.
func (e *Engine) Submit(ctx context.Context, d *Deployment) (string, error) {
	// The coordinator answers once the first attempt is deployed, and its
	// workers hold the module from then on.
	defer d.release(ctx)
	req := transport.SubmitRequest{Name: d.Name, Plan: d.Plan.JSON(), ModuleName: d.ModuleName, Resume: d.Resume,
		ModuleDigest: d.ModuleDigest, FromSavepoint: d.FromSavepoint, AllowNonRestoredState: d.AllowNonRestoredState,
		Tenant: d.Tenant}
	if d.Wasm != nil {
		digest, err := e.storeModule(ctx, d)
		if err != nil {
			return "", err
		}
		req.ModuleDigest = digest
	}
	return coordinator.Submit(ctx, e.nc, req)
}

// release lets go of the module Prepare compiled.
func (d *Deployment) release(ctx context.Context) {
	if d.module != nil {
		_ = d.module.Close(ctx)
		d.module = nil
	}
}

// Run submits d and waits for its end. When ctx is done first the job is
// cancelled and Run waits (up to a minute) for it to stop cleanly.
// started, when not nil, is called with the job id once it runs.
func (e *Engine) Run(ctx context.Context, d *Deployment, started func(id string)) (*transport.JobResult, error) {
	w, err := coordinator.WatchJobs(e.nc)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	id, err := e.Submit(ctx, d)
	if err != nil {
		return nil, err
	}
	if started != nil {
		started(id)
	}
	res, err := w.Wait(ctx, id)
	if err == nil {
		return res, nil
	}
	cctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if cerr := coordinator.Cancel(cctx, e.nc, id); cerr != nil {
		return nil, cerr
	}
	return w.Wait(cctx, id)
}

// nameFromFile derives a job name from a module file name: the base name
// without extension, with characters a job name cannot hold replaced.
func nameFromFile(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	name := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, base)
	if name == "" || name == "." {
		return "job"
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}
