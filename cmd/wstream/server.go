package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/transport"
)

func serverCommand() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "run a coordinator, with an embedded NATS server that listens unless --nats names one",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "address of the embedded NATS server", Value: "127.0.0.1:4222"},
			&cli.IntFlag{Name: "workers", Usage: "`N` in-process workers to start as well (0: none, guest code runs in separate wstream worker processes); they take the host flags, with the defaults of wstream worker", Value: 0},
			&cli.DurationFlag{Name: "worker-timeout", Usage: "declare a worker lost (and fail its jobs over) after it has been silent this long (default 10s)"},
			&cli.BoolFlag{Name: "tenants", Usage: "multi-tenant: NATS runs with accounts (the embedded server, or --nats configured by 'wstream tenant init'), each tenant sees and reaches only its own jobs and data; --tenants=false runs an open single-user server", DefaultText: "on with the embedded NATS server, off with --nats"},
			httpFlag,
			&cli.DurationFlag{Name: "attempt-creds-ttl", Usage: "with --tenants: how long the credentials a job attempt's workers get stay valid; the coordinator renews them every third of it", Value: coordinator.DefaultAttemptCredsTTL},
			&cli.IntFlag{Name: "checkpoint-history", Usage: fmt.Sprintf("recent checkpoints per job the REST API keeps with their per-subtask details (default %d)", coordinator.DefaultCheckpointHistory)},
			maxModuleBytesFlag,
			&cli.DurationFlag{Name: "lease", Usage: fmt.Sprintf("the coordinators' lease period: of the servers against one NATS cluster the one holding the lease leads, and a standby takes over once the leader has not renewed it for this long (default %s)", coordinator.DefaultLease)},
			&cli.IntFlag{Name: "replicas", Value: 1, Usage: "copies a NATS cluster keeps of every stream, key-value bucket and object store wstream creates (job records, checkpoint ids, modules, data streams, checkpoints, JetStream sinks; tenants' too): 1 on the embedded server, 3 on a three-node cluster (docs/cluster.md); checked against the cluster at start"},
			authDirFlag, dataFlag, natsFlag, verboseFlag, logFormatFlag, logLevelFlag,
		}, hostFlags()...),
		Action: runServer,
	}
}

// runServer runs a coordinator until a signal, or until another takes
// its lease.
func runServer(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	asJSON, err := jsonOutput(c)
	if err != nil {
		return err
	}
	opts, err := serverOptions(c)
	if err != nil {
		return err
	}
	if asJSON {
		// stdout holds the one JSON object: a stdout sink's records go
		// to stderr.
		opts.Stdout = c.App.ErrWriter
	}
	leads := make(chan coordinator.LeaderInfo, 1)
	deposed := make(chan error, 1)
	opts.OnLead = func(l coordinator.LeaderInfo) { leads <- l }
	opts.Deposed = func(err error) { deposed <- err }
	e, err := engine.Start(ctx, opts)
	if err != nil {
		return err
	}
	if err := reportServer(ctx, c, e, opts, leads, asJSON); err != nil {
		_ = e.Close(context.Background())
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-deposed:
		// Another server leads now: this one has stopped acting,
		// and exits (a supervisor restarts it as a standby).
		l, _ := e.Coordinator().Leader()
		_ = e.Close(context.Background())
		return fmt.Errorf("server: this coordinator no longer leads (%v); %s leads at epoch %d: exiting", err, l.ID, l.Epoch)
	}
	return e.Close(context.Background())
}

// serverOptions are the engine's options the flags of server give.
func serverOptions(c *cli.Context) (engine.Options, error) {
	var opts engine.Options
	if r := c.Int("replicas"); r < 1 || r > 5 {
		return opts, usageError{fmt.Errorf("--replicas %d: must be 1 to 5 (JetStream's range)", r)}
	}
	if c.Int("workers") < 0 {
		return opts, usageError{fmt.Errorf("--workers %d: must be ≥ 0", c.Int("workers"))}
	}
	hc, err := hostConfig(c)
	if err != nil {
		return opts, err
	}
	log, err := newLogger(c, slog.LevelInfo)
	if err != nil {
		return opts, err
	}
	// A server takes over the jobs a previous one left running.
	opts = engine.Options{DataDir: c.String("data"), NATSURL: c.String("nats"), Workers: c.Int("workers"), NoWorkers: c.Int("workers") == 0,
		Host: hc, Log: log, Stdout: c.App.Writer, ResumeJobs: true, WorkerTimeout: c.Duration("worker-timeout"), StateMemory: int64(c.Int("state-memory")) << 20}
	if opts.NATSOptions, err = natsOptions(c); err != nil {
		return opts, err
	}
	if opts.NATSURL == "" {
		opts.Listen = c.String("listen")
	}
	if opts.HTTP, err = httpAddr(c); err != nil {
		return opts, err
	}
	if opts.MaxModuleBytes, err = maxModuleBytes(c); err != nil {
		return opts, err
	}
	if opts.AttemptCredsTTL = c.Duration("attempt-creds-ttl"); opts.AttemptCredsTTL < 3*time.Second {
		return opts, usageError{fmt.Errorf("--attempt-creds-ttl %s: must be at least 3s", opts.AttemptCredsTTL)}
	}
	if n := c.Int("checkpoint-history"); n < 0 {
		return opts, usageError{fmt.Errorf("--checkpoint-history %d: must be ≥ 1", n)}
	}
	opts.CheckpointHistory = c.Int("checkpoint-history")
	// The embedded server has accounts unless asked not to: a server that
	// listens is reachable by others, and without accounts anyone who
	// reaches it can act on every job. An external server has accounts
	// only if configured for them.
	tenants := opts.NATSURL == ""
	if c.IsSet("tenants") {
		tenants = c.Bool("tenants")
	}
	if tenants {
		if opts.Tenants, err = openAuthority(authDir(c)); err != nil {
			return opts, err
		}
	} else if c.IsSet("auth-dir") {
		return opts, usageError{errors.New("--auth-dir goes with --tenants")}
	}
	if d := c.Duration("lease"); d < 0 || (d > 0 && d < 100*time.Millisecond) {
		return opts, usageError{fmt.Errorf("--lease %s: must be at least 100ms", d)}
	}
	opts.Lease = c.Duration("lease")
	opts.Replicas = c.Int("replicas")
	return opts, nil
}

// serverReady is what `wstream server -o json` prints once it serves.
type serverReady struct {
	NATS    string `json:"nats"`
	HTTP    string `json:"http,omitempty"`
	Leader  string `json:"leader"`
	Epoch   uint64 `json:"epoch"`
	Leading bool   `json:"leading"`
	Tenants bool   `json:"tenants"`
}

// reportServer says the server is up: where, whether it leads, and how
// to reach it; lines on stderr, or one JSON object on stdout.
func reportServer(ctx context.Context, c *cli.Context, e *engine.Engine, opts engine.Options, leads <-chan coordinator.LeaderInfo, asJSON bool) error {
	errw := c.App.ErrWriter
	natsURL := orDefault(opts.NATSURL, e.ClientURL())
	l, leading := e.Coordinator().Leader()
	if leading {
		l = <-leads
	}
	if asJSON {
		return writeJSON(c.App.Writer, serverReady{NATS: natsURL, HTTP: e.HTTPURL(), Leader: l.ID, Epoch: l.Epoch, Leading: leading, Tenants: opts.Tenants != nil})
	}
	if leading {
		fmt.Fprintf(errw, "wstream server: coordinator running (NATS %s; leader %s, epoch %d)\n", natsURL, l.ID, l.Epoch)
	} else {
		// It does nothing until the leader's lease lapses.
		fmt.Fprintf(errw, "wstream server: standby (NATS %s): coordinator %s leads (epoch %d); this one takes over when its lease lapses\n", natsURL, l.ID, l.Epoch)
		go func() {
			select {
			case l := <-leads:
				fmt.Fprintf(errw, "wstream server: coordinator running (NATS %s; took over the lease: leader %s, epoch %d)\n", natsURL, l.ID, l.Epoch)
			case <-ctx.Done():
			}
		}()
	}
	if opts.Tenants != nil {
		dir := authDir(c)
		fmt.Fprintf(errw, "wstream server: tenants on; admin credentials %s, worker %s's %s (more: wstream tenant worker-creds NAME)\n",
			filepath.Join(dir, adminCredsFile), firstWorker, filepath.Join(dir, workerCredsFile))
	} else {
		fmt.Fprintf(errw, "wstream server: tenants off: whoever reaches NATS may act on every job\n")
	}
	if u := e.HTTPURL(); u != "" {
		fmt.Fprintf(errw, "wstream server: web UI and REST API at %s\n", u)
		if opts.Tenants != nil {
			fmt.Fprintf(errw, "wstream server: every request needs an API token; the admin's is in %s\n", filepath.Join(authDir(c), adminTokenFile))
		} else if !loopback(opts.HTTP) {
			fmt.Fprintf(errw, "wstream server: warning: without --tenants the REST API takes no credentials, and %s is reachable from other hosts\n", opts.HTTP)
		}
	}
	return nil
}

// maxModuleBytesFlag caps the modules a server or worker fetches.
var maxModuleBytesFlag = &cli.Int64Flag{Name: "max-module-bytes", Value: transport.DefaultMaxModuleBytes,
	Usage: "largest module, in bytes, fetched from a module store: the admin's modules, and every tenant's within its module-bytes quota"}

func maxModuleBytes(c *cli.Context) (int64, error) {
	n := c.Int64("max-module-bytes")
	if n < 1 {
		return 0, usageError{fmt.Errorf("--max-module-bytes %d: must be positive", n)}
	}
	return n, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "run a worker that executes subtasks for the coordinator at --nats",
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "slots", Usage: "subtasks this worker runs at once (0 = no limit)"},
			&cli.StringFlag{Name: "id", Usage: "worker id (default: host name and process id)"},
			&cli.StringFlag{Name: "http", Usage: "serve Prometheus metrics at http://`ADDR`/metrics (host:port; port 0 picks one)"},
			maxModuleBytesFlag,
			dataFlag, natsFlag, verboseFlag, logFormatFlag, logLevelFlag,
		}, hostFlags()...),
		Action: func(c *cli.Context) error {
			if c.String("nats") == "" {
				return usageError{errors.New("worker: --nats URL is required")}
			}
			hc, err := hostConfig(c)
			if err != nil {
				return err
			}
			log, err := newLogger(c, slog.LevelInfo)
			if err != nil {
				return err
			}
			maxModule, err := maxModuleBytes(c)
			if err != nil {
				return err
			}
			natsOpts, err := natsOptions(c)
			if err != nil {
				return err
			}
			var l net.Listener
			if addr := c.String("http"); addr != "" {
				if l, err = listenMetrics(addr); err != nil {
					return fmt.Errorf("worker: %w", err)
				}
			}
			asJSON, err := jsonOutput(c)
			if err != nil {
				return err
			}
			stdout := c.App.Writer
			if asJSON {
				// stdout holds the one JSON object.
				stdout = c.App.ErrWriter
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := engine.Start(ctx, engine.Options{
				DataDir: c.String("data"), NATSURL: c.String("nats"), NATSOptions: natsOpts, Workers: 1, Slots: c.Int("slots"), WorkerID: c.String("id"),
				Host: hc, Log: log, Stdout: stdout, NoCoordinator: true, MaxModuleBytes: maxModule,
				StateMemory: int64(c.Int("state-memory")) << 20,
			})
			if err != nil {
				if l != nil {
					l.Close()
				}
				return err
			}
			ready := struct {
				NATS    string `json:"nats"`
				Metrics string `json:"metrics,omitempty"`
			}{NATS: c.String("nats")}
			if l != nil {
				url, stopHTTP := serveMetrics(l, e.MetricsHandler(), log)
				defer stopHTTP()
				ready.Metrics = url
			}
			if asJSON {
				if err := writeJSON(c.App.Writer, ready); err != nil {
					return err
				}
			} else {
				if ready.Metrics != "" {
					fmt.Fprintf(c.App.ErrWriter, "wstream worker: metrics at %s\n", ready.Metrics)
				}
				fmt.Fprintf(c.App.ErrWriter, "wstream worker: connected to %s\n", ready.NATS)
			}
			<-ctx.Done()
			return e.Close(context.Background())
		},
	}
}
