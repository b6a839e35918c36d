// Command wstream deploys and runs WebAssembly stream operators.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// profileFile is the open --cpuprofile file.
var profileFile *os.File

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ error }

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	notFound = nil
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		err = notFound
	}
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, "wstream:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "wstream:", err)
	if errors.Is(err, nats.ErrAuthorization) {
		// The commonest cause: a server with tenants (the default of
		// `wstream server`) and a command without credentials.
		fmt.Fprintln(stderr, "wstream: the NATS server wants credentials: a worker takes the server's auth/worker.creds, a tenant its own NAME.creds (wstream tenant add), the admin auth/admin.creds (--nats-creds FILE)")
	}
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func newApp(stdout, stderr io.Writer) *cli.App {
	// --version only: -v is --verbose, in every command and before them.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
	app := &cli.App{
		Name:      "wstream",
		Usage:     "run stream operators compiled to WebAssembly",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by run.
		ExitErrHandler: func(*cli.Context, error) {},
		// --source gen:count=10,keys=5 is one value: commas separate
		// connector settings, not flag values (repeat the flag instead).
		DisableSliceFlagSeparator: true,
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError{fmt.Errorf("%s (see wstream --help)", flagMessage(&cli.Command{Flags: c.App.Flags}, err))}
		},
		CommandNotFound:      commandNotFound,
		EnableBashCompletion: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the command to `FILE`"},
			verboseFlag, logFormatFlag, logLevelFlag, contextFlag,
		},
		Before: func(c *cli.Context) error {
			path := c.String("cpuprofile")
			if path == "" {
				return nil
			}
			f, err := os.Create(path)
			if err != nil {
				return usageError{fmt.Errorf("--cpuprofile: %w", err)}
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return err
			}
			profileFile = f
			return nil
		},
		After: func(c *cli.Context) error {
			if profileFile != nil {
				pprof.StopCPUProfile()
				return profileFile.Close()
			}
			return nil
		},
		Commands: withNATSAuth([]*cli.Command{
			initCommand(),
			buildCommand(),
			deployCommand(),
			followCommand(),
			serverCommand(),
			workerCommand(),
			listCommand(),
			workersCommand(),
			checkpointsCommand(),
			cancelCommand(),
			savepointCommand(),
			stopCommand(),
			upgradeCommand(),
			inspectCommand(),
			tenantCommand(),
			completionCommand(),
			contextCommand(),
			{
				Name:  "version",
				Usage: "print the version and ABI version",
				Action: func(c *cli.Context) error {
					fmt.Fprintf(c.App.Writer, "wstream %s (ABI v%d)%s\n", version, abi.Version, commit())
					return nil
				},
			},
		}),
	}
	tidyDefaults(app.Commands)
	usageErrors(app.Commands, "")
	withContexts(app.Commands)
	completeJobs(app.Commands)
	app.Commands = append(app.Commands, valuesCommand(func() []*cli.Command { return app.Commands }))
	categorize(app.Commands)
	return app
}

// commit is the VCS revision the binary was built from, as go build
// records it, or "".
func commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += ", modified"
	}
	return " commit " + rev
}

var natsFlag = &cli.StringFlag{
	Name:    "nats",
	Usage:   "NATS server `URL` of a wstream cluster (else the variables in brackets, then the selected context's: wstream context). Without one, deploy and server embed a NATS server in --data, worker refuses, and the other commands reach the deploy or server running on --data (the URL in DATA/nats.url)",
	EnvVars: []string{"WSTREAM_NATS", "NATS_URL"},
}

var dataFlag = &cli.StringFlag{
	Name:    "data",
	Usage:   "data directory for state, caches and the embedded NATS store",
	Value:   "wstream-data",
	EnvVars: []string{"WSTREAM_DATA"},
}

var verboseFlag = &cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log everything the runtime does and every guest log line to stderr (--log-level debug)"}

var (
	logFormatFlag = &cli.StringFlag{Name: "log-format", Usage: "log lines as `text` (key=value) or json, one object a line", Value: "text"}
	logLevelFlag  = &cli.StringFlag{Name: "log-level", Usage: "least `LEVEL` logged: debug, info, warn or error", DefaultText: "warn for deploy, info for server and worker"}
)

func hostFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "memory-limit", Usage: "memory limit of one operator instance, in MiB", Value: 64},
		&cli.IntFlag{Name: "state-memory", Usage: "state memory budget of each worker, MiB: a quarter is Pebble's block cache, the rest the subtasks' caches of keyed state", Value: state.DefaultMemoryBudget >> 20},
		&cli.DurationFlag{Name: "call-timeout", Usage: "deadline of one guest call; an operator exceeding it fails the job. 0 turns deadlines off, which saves little (deadlines cost a few percent at most) and lets a guest that never returns hang its subtask (trusted modules only)", Value: 10 * time.Second},
		&cli.BoolFlag{Name: "allow-uninstrumented", Usage: "run tenants' modules that cannot be instrumented with wazero's own checks, which stop a guest only at loop headers: a loop-free call tree can then outlive its deadline, and tables grow uncapped (trusted tenants only)"},
	}
	for _, q := range guestQuotas {
		flags = append(flags, &cli.IntFlag{Name: q.flag, Usage: q.usage + " (-1: no bound, for trusted modules)", Value: q.def})
	}
	return flags
}

// guestQuotas are the bounds on what one guest makes the host do
// (host.Limits), as flags.
var guestQuotas = []struct {
	flag, usage string
	def         int
	field       func(*host.Limits) *int
}{
	{"max-records-per-input", "records an operator may emit for one input record or timer", host.DefaultMaxRecordsPerInput, func(l *host.Limits) *int { return &l.MaxRecordsPerInput }},
	{"max-records-per-call", "records an operator may emit in one call", host.DefaultMaxRecordsPerCall, func(l *host.Limits) *int { return &l.MaxRecordsPerCall }},
	{"max-output-bytes-per-call", "bytes an operator may emit in one call", host.DefaultMaxOutputBytesPerCall, func(l *host.Limits) *int { return &l.MaxOutputBytesPerCall }},
	{"max-state-bytes-per-call", "state bytes an operator may write in one call (timer registrations and deletions included)", host.DefaultMaxStateBytesPerCall, func(l *host.Limits) *int { return &l.MaxStateBytesPerCall }},
	{"max-timers-per-key", "pending timers of one key of an operator, counted in host memory (off by default: timers are state on disk, bounded by --max-state-bytes-per-call and a tenant's state quota)", host.DefaultMaxTimersPerKey, func(l *host.Limits) *int { return &l.MaxTimersPerKey }},
	{"max-timers-per-subtask", "pending timers of a subtask, counted in host memory (off by default, as --max-timers-per-key)", host.DefaultMaxTimersPerSubtask, func(l *host.Limits) *int { return &l.MaxTimersPerSubtask }},
	{"max-timer-bytes-per-subtask", "key and namespace bytes of a subtask's pending timers, counted in host memory (off by default, as --max-timers-per-key)", host.DefaultMaxTimerBytesPerSubtask, func(l *host.Limits) *int { return &l.MaxTimerBytesPerSubtask }},
	{"max-cascaded-timers", "due timers an operator may register while its timers fire", host.DefaultMaxCascadedTimers, func(l *host.Limits) *int { return &l.MaxCascadedTimers }},
	{"guest-log-lines-per-second", "log lines an operator instance may write per second (more are dropped and counted)", host.DefaultLogLinesPerSecond, func(l *host.Limits) *int { return &l.LogLinesPerSecond }},
}

func hostConfig(c *cli.Context) (host.Config, error) {
	mib := c.Int("memory-limit")
	if mib < 1 || mib > 4096 {
		return host.Config{}, usageError{fmt.Errorf("--memory-limit %d: must be between 1 and 4096 MiB", mib)}
	}
	timeout := c.Duration("call-timeout")
	switch {
	case timeout < 0:
		return host.Config{}, usageError{fmt.Errorf("--call-timeout %s: must be positive, or 0 for no deadline", timeout)}
	case timeout == 0:
		timeout = -1 // host.Config: negative means no deadline
	}
	var lim host.Limits
	for _, q := range guestQuotas {
		if !c.IsSet(q.flag) {
			continue
		}
		v := c.Int(q.flag)
		if v == 0 || v < -1 {
			return host.Config{}, usageError{fmt.Errorf("--%s %d: must be positive, or -1 for no bound", q.flag, v)}
		}
		*q.field(&lim) = v
	}
	return host.Config{MemoryLimitPages: uint32(mib * 16), CallTimeout: timeout, Limits: lim, AllowUninstrumented: c.Bool("allow-uninstrumented")}, nil
}

// verbose reports -v given to the command or before it (wstream -v deploy):
// a command's own -v flag would otherwise hide the top-level one.
func verbose(c *cli.Context) bool {
	for _, x := range c.Lineage() {
		if x.Bool("verbose") {
			return true
		}
	}
	return false
}

// lineageString is the value of a flag given to the command or before it.
func lineageString(c *cli.Context, name string) string {
	for _, x := range c.Lineage() {
		if x.IsSet(name) {
			return x.String(name)
		}
	}
	return ""
}

// newLogger is the command's logger, writing to stderr: --log-level, else
// debug with -v, else def (a service logs its lifecycle at info, deploy
// only what goes wrong).
func newLogger(c *cli.Context, def slog.Level) (*slog.Logger, error) {
	level := def
	if verbose(c) {
		level = slog.LevelDebug
	}
	if s := lineageString(c, "log-level"); s != "" {
		l, err := logging.ParseLevel(s)
		if err != nil {
			return nil, usageError{fmt.Errorf("--log-level: %w", err)}
		}
		level = l
	}
	format := lineageString(c, "log-format")
	l, err := logging.New(c.App.ErrWriter, format, level)
	if err != nil {
		return nil, usageError{fmt.Errorf("--log-format: %w", err)}
	}
	return l, nil
}

func deployCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "plan", Usage: "plan file (JSON) to use instead of the plan the module exports"},
		&cli.IntFlag{Name: "parallelism", Aliases: []string{"p"}, Usage: "default parallelism of the job's vertices (vertices that set their own keep it)"},
		&cli.StringSliceFlag{Name: "vertex-parallelism", Usage: "`ID=N` parallelism of one vertex (repeatable)"},
		&cli.IntFlag{Name: "max-parallelism", Usage: "number of key groups (default: the plan's, else 128)"},
		&cli.StringSliceFlag{Name: "source", Usage: "`[ID=]CONNECTOR[:k=v,...]` replace a source, e.g. gen:count=1000,keys=10 or file:path=in.txt (repeatable)"},
		&cli.StringSliceFlag{Name: "sink", Usage: "`[ID=]CONNECTOR[:k=v,...]` replace a sink, e.g. stdout or file:path=out.txt (repeatable)"},
		&cli.StringFlag{Name: "name", Usage: "job name (default: the plan's name)"},
		&cli.StringFlag{Name: "tenant", Usage: "with --nats and the admin's credentials: run the job as this tenant (a tenant's own credentials run its jobs as itself)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "check everything a deploy can know beforehand (the module's operators and exports, the plan, connector settings and paths, --from-savepoint's compatibility), print the execution graph, and exit"},
		detachFlag, attachedFlag,
		&cli.StringFlag{Name: "from-savepoint", Aliases: []string{"from-checkpoint"}, Usage: "start from the savepoint in `DIR`, or from a retained checkpoint (a job's checkpoint directory or one chk-* directory in it), at any parallelism up to the max parallelism"},
		&cli.BoolFlag{Name: "allow-non-restored-state", Usage: "with --from-savepoint: drop savepoint state of vertices the plan no longer has"},
		&cli.StringFlag{Name: "resume", Usage: "continue the unfinished job `JOB` of --data from its latest checkpoint (\"-\" or \"\": the only one); no MODULE argument"},
		&cli.DurationFlag{Name: "checkpoint-interval", Usage: "take a checkpoint this often (0 disables checkpoints)"},
		&cli.StringFlag{Name: "checkpoint-mode", Usage: "aligned (exactly-once), unaligned or at-least-once"},
		&cli.DurationFlag{Name: "aligned-timeout", Usage: "switch an aligned checkpoint to unaligned when alignment takes longer"},
		&cli.DurationFlag{Name: "checkpoint-timeout", Usage: "abort a checkpoint that has not completed after this long (default 10m)"},
		&cli.DurationFlag{Name: "min-pause", Usage: "least time between the end of one checkpoint and the next"},
		&cli.IntFlag{Name: "max-concurrent-checkpoints", Usage: "checkpoints in progress at once (default 1)"},
		&cli.IntFlag{Name: "tolerable-failures", Usage: "consecutive failed checkpoints tolerated before the job fails (-1: unlimited)"},
		&cli.IntFlag{Name: "retain", Usage: "completed checkpoints to keep (default 1)"},
		&cli.BoolFlag{Name: "incremental", Usage: "checkpoints upload only the state files that are new since the last one (--incremental=false: every file every time)", Value: true},
		&cli.BoolFlag{Name: "local-recovery", Usage: "keep each subtask's last completed snapshot on its worker and restore from it after a restart there"},
		&cli.StringFlag{Name: "savepoint-format", Usage: "canonical (the default, independent of the state backend's files) or native (copies of the Pebble files: faster)"},
		&cli.StringFlag{Name: "checkpoint-storage", Usage: "where checkpoints go: nats-obj://BUCKET[/PREFIX] for a JetStream object store on the cluster's NATS server (no shared filesystem needed); default the data directory"},
		&cli.IntFlag{Name: "compression", Usage: "zstd level of uploaded checkpoint files: 0 off, 1 fastest … 4 best", DefaultText: "the plan's, else 1"},
		&cli.StringFlag{Name: "restart", Usage: "restart strategy of a failed job: none, fixed-delay or exponential-backoff"},
		&cli.IntFlag{Name: "restart-attempts", Usage: "most restarts before the job fails for good (0: unlimited)"},
		&cli.DurationFlag{Name: "restart-delay", Usage: "delay before a restart (the first one, for exponential backoff)"},
		&cli.DurationFlag{Name: "restart-max-delay", Usage: "cap of the exponential backoff"},
		&cli.StringFlag{Name: "on-guest-error", Usage: "`fail` the job on a guest trap or fail (the default), or dead-letter[:SINK]: roll back, send the failing records to SINK (a sink spec, default files under the data directory) and go on"},
		&cli.StringFlag{Name: "max-dead-letters", Usage: "dead letters one subtask may send before the job fails: `N` over the job's life, N/checkpoint since its last checkpoint, or unlimited", DefaultText: "1000"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "do not print the summary"},
		&cli.IntFlag{Name: "workers", Usage: "in-process workers of the embedded server (default 1); with more, the job's subtasks are spread over them and exchange data through JetStream, as workers on separate hosts do"},
		httpFlag,
		dataFlag, natsFlag, verboseFlag, logFormatFlag, logLevelFlag,
	}
	return &cli.Command{
		Name:      "deploy",
		Usage:     "run a job: operators from MODULE, plan from the module or --plan",
		ArgsUsage: "MODULE.wasm",
		Description: `Validates the module and its plan, then runs the job. Without --nats it starts
an embedded NATS JetStream server, a coordinator and a worker in this process and
keeps everything under --data. A bounded job runs to the end and prints a summary
(records in and out, duration) to stderr; an unbounded one runs until Ctrl-C.

Without --nats, the job is this process's: Ctrl-C or SIGTERM suspends a job
that checkpoints (it stops with a savepoint, its sinks commit, and deploy exits
3; deploy --resume JOB continues it). A job that does not checkpoint, or any job
at a second Ctrl-C, is canceled (exit 128 + the signal) and keeps nothing it had
not committed.

With --nats, the job is the cluster's: a signal ends this client only (exit 128
+ the signal) and the job goes on running; wstream follow JOB attaches again,
wstream stop JOB suspends it. --attached makes such a job this client's as
above; -d submits it, prints its id on stdout and returns.

Exit 0 when the job finished (or was submitted, with -d), 1 when it failed, 2
for bad usage, 3 when it was cancelled or stopped from outside.`,
		Flags: append(flags, hostFlags()...),
		Action: func(c *cli.Context) error {
			if c.IsSet("resume") {
				if c.NArg() != 0 {
					return usageError{fmt.Errorf("deploy --resume takes no MODULE argument: the job's module is stored with it")}
				}
			} else if c.NArg() != 1 {
				return usageError{fmt.Errorf("deploy: want exactly one MODULE.wasm argument, got %d", c.NArg())}
			}
			for _, f := range c.Command.Flags {
				if df, ok := f.(*cli.DurationFlag); ok && c.IsSet(df.Name) && c.Duration(df.Name) < 0 {
					return usageError{fmt.Errorf("--%s %s: must not be negative", df.Name, c.Duration(df.Name))}
				}
			}
			if err := checkGuestErrorFlags(c); err != nil {
				return usageError{err}
			}
			hc, err := hostConfig(c)
			if err != nil {
				return err
			}
			ov := job.Overrides{
				Parallelism:    c.Int("parallelism"),
				MaxParallelism: c.Int("max-parallelism"),
				Source:         c.StringSlice("source"),
				Sink:           c.StringSlice("sink"),
			}
			if c.IsSet("parallelism") && ov.Parallelism < 1 {
				return usageError{fmt.Errorf("--parallelism %d: must be ≥ 1", ov.Parallelism)}
			}
			for _, s := range c.StringSlice("vertex-parallelism") {
				id, n, ok := strings.Cut(s, "=")
				v, err := strconv.Atoi(n)
				if !ok || id == "" || err != nil || v < 1 {
					return usageError{fmt.Errorf("--vertex-parallelism %q: want ID=N with N ≥ 1", s)}
				}
				if ov.VertexParallelism == nil {
					ov.VertexParallelism = map[string]int{}
				}
				ov.VertexParallelism[id] = v
			}
			return deploy(c, hc, ov)
		},
	}
}

func deploy(c *cli.Context, hc host.Config, ov job.Overrides) (err error) {
	// Ctrl-C and SIGTERM: see interrupts. Before the job runs, they cancel.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	out, errw := c.App.Writer, c.App.ErrWriter
	cluster := c.String("nats") != ""
	ir := &interrupts{errw: errw, cancel: cancel, started: make(chan string, 1), detach: cluster && !c.Bool("attached")}
	go ir.watch(ctx, sigs)
	defer func() {
		// A signal before the job ran canceled validation or start-up.
		var ec cli.ExitCoder
		if sig := ir.signal(); sig != nil && err != nil && !errors.As(err, &ec) {
			err = cli.Exit(fmt.Sprintf("interrupted (%s): %v", sig, err), exitSignal(sig))
		}
	}()

	log, err := newLogger(c, slog.LevelWarn)
	if err != nil {
		return err
	}
	// deploy says how its job ended itself, once; a log level asked for
	// gets every line.
	if !verbose(c) && lineageString(c, "log-level") == "" {
		log = slog.New(dropMessages{log.Handler(), "job ended"})
	}
	opts := engine.Options{DataDir: c.String("data"), NATSURL: c.String("nats"), Host: hc, Stdout: out, Log: log, StateMemory: int64(c.Int("state-memory")) << 20}
	natsOpts, err := natsOptions(c)
	if err != nil {
		return err
	}
	if cluster {
		// The admin's credentials of a server's --data, as list finds them.
		natsOpts = defaultAdminCreds(c, natsOpts)
	} else {
		for _, f := range []string{"detach", "attached"} {
			if c.Bool(f) {
				return usageError{fmt.Errorf("--%s goes with --nats: without it the job runs in this process and ends with it", f)}
			}
		}
	}
	if c.Bool("detach") && c.Bool("attached") {
		return usageError{errors.New("--detach and --attached are opposites: give one")}
	}
	opts.NATSOptions = natsOpts
	if c.IsSet("workers") && c.Int("workers") < 1 {
		return usageError{fmt.Errorf("--workers %d: must be ≥ 1", c.Int("workers"))}
	}
	opts.Workers = c.Int("workers")
	if opts.NATSURL != "" {
		if c.IsSet("workers") {
			return usageError{errors.New("--workers starts workers inside the embedded server; with --nats, start `wstream worker` processes instead")}
		}
		if c.IsSet("http") {
			return usageError{errors.New("--http serves the embedded default's UI and REST API; a cluster's come from `wstream server --http`")}
		}
		opts.NoCoordinator = true
	} else {
		// Listen on loopback so that `wstream savepoint`, `stop`, `cancel`
		// and `list` reach this job through the data directory.
		opts.Listen = "127.0.0.1:0"
		if opts.HTTP, err = httpAddr(c); err != nil {
			return err
		}
	}
	// Validation needs only a wazero runtime; start the engine after it so
	// that a bad module or plan fails fast and touches nothing.
	var d *engine.Deployment
	if c.IsSet("resume") {
		id := c.String("resume")
		if id == "-" {
			id = ""
		}
		var err error
		if d, err = engine.PrepareResume(opts.DataDir, id); err != nil {
			return err
		}
		reportResumePoint(errw, opts.DataDir, d)
	} else {
		rt, err := host.NewRuntime(ctx, engine.HostConfig(opts))
		if err != nil {
			return err
		}
		stopBusy := busy(errw, log, "compiling "+filepath.Base(c.Args().First()))
		d, err = engine.Prepare(ctx, rt, engine.PrepareOptions{
			ModulePath: c.Args().First(),
			PlanPath:   c.String("plan"),
			Overrides:  ov,
			Name:       c.String("name"),
			Settings:   func(p *job.Plan) { applySettingFlags(c, p) },
		})
		stopBusy()
		if err != nil || opts.NATSURL != "" {
			defer rt.Close(context.Background())
		} else {
			// The in-process worker runs the module as validation compiled
			// it: compiled and probed once.
			opts.Runtime = rt
			defer rt.Close(context.Background())
		}
		if err != nil {
			return err
		}
		if dir := c.String("from-savepoint"); dir != "" {
			if !checkpoint.IsObjectLocation(dir) {
				if dir, err = filepath.Abs(dir); err != nil {
					return err
				}
				if _, err := os.Stat(dir); err != nil {
					return fmt.Errorf("--from-savepoint %s: no such savepoint or checkpoint directory", c.String("from-savepoint"))
				}
			}
			d.FromSavepoint, d.AllowNonRestoredState = dir, c.Bool("allow-non-restored-state")
		}
		if c.Bool("dry-run") {
			if err := dryRun(ctx, rt, d, opts.NATSURL == ""); err != nil {
				return err
			}
		}
	}
	if c.Bool("dry-run") {
		fmt.Fprint(out, d.Graph.String())
		return nil
	}
	if t := c.String("tenant"); t != "" {
		if opts.NATSURL == "" {
			return usageError{errors.New("--tenant needs --nats: the embedded default has no tenants")}
		}
		d.Tenant = t
	}
	e, err := engine.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	if u := e.HTTPURL(); u != "" && !c.Bool("quiet") {
		fmt.Fprintf(errw, "web UI and REST API: %s\n", u)
		if !loopback(opts.HTTP) {
			fmt.Fprintf(errw, "warning: the REST API takes no credentials, and %s is reachable from other hosts\n", opts.HTTP)
		}
	}
	ir.ready(e.Conn(), d.Plan.Checkpoint.Enabled())
	stopProgress := showRestoreProgress(errw, opts.DataDir, d)
	defer stopProgress()
	jp, stopJobProgress := startJobProgress(errw, e, d.Plan, c.Bool("quiet"))
	defer stopJobProgress()
	started := func(id string) {
		ir.started <- id
		if d.Suspended != "" {
			if err := engine.MarkResumed(opts.DataDir, d.Suspended, id); err != nil {
				fmt.Fprintf(errw, "wstream: %v\n", err)
			}
		}
		if c.Bool("detach") {
			// The id alone on stdout, for scripts: JOB=$(wstream deploy -d ...).
			fmt.Fprintln(out, id)
			fmt.Fprintf(errw, "job %s submitted (%d subtasks); follow it with: wstream follow %s%s\n", id, countSubtasks(d.Graph), id, clusterArgs(c))
			return
		}
		if !c.Bool("quiet") {
			fmt.Fprintf(errw, "job %s running (%d subtasks)\n", id, countSubtasks(d.Graph))
		}
		jp.started(id) // after the line above: the bar starts below it
	}
	var res *transport.JobResult
	stopStatus := func() {}
	if ir.detach {
		var id string
		id, res, err = runCluster(ctx, e, d, c.Bool("detach"), func(id string) {
			started(id)
			if !c.Bool("detach") {
				stopStatus = watchStatus(errw, log, e.Conn(), id, c.Bool("quiet"))
			}
		})
		stopStatus()
		if err != nil && id != "" && ir.signal() != nil {
			sig := ir.signal()
			return cli.Exit(fmt.Sprintf("%s: stopped following job %s, which goes on running (wstream follow %s%s; wstream stop %s%s suspends it)", sig, id, id, clusterArgs(c), id, clusterArgs(c)), exitSignal(sig))
		}
	} else {
		res, err = e.Run(ctx, d, func(id string) {
			started(id)
			if cluster || !isTerminal(errw) {
				stopStatus = watchStatus(errw, log, e.Conn(), id, c.Bool("quiet"))
			}
		})
		stopStatus()
	}
	stopProgress()
	stopJobProgress()
	if err != nil {
		return err
	}
	if res == nil { // detached
		return nil
	}
	if !c.Bool("quiet") {
		printSummary(errw, d.Plan, res)
	}
	hint := ""
	if res.State == transport.JobStopped {
		if sp := ir.suspendedAt(); sp != "" {
			if hint, err = recordSuspension(c, opts.DataDir, res.JobID, sp); err != nil {
				return err
			}
		}
	}
	return jobOutcome(res, ir, hint)
}

// recordSuspension records a job this client suspended so that deploy
// --resume finds it, and says how to continue it. The record goes into
// the data directory that holds the job: this process's, or, with --nats,
// the server's when --data names it on this host; otherwise the job
// continues from its savepoint.
func recordSuspension(c *cli.Context, dataDir, id, sp string) (string, error) {
	if c.String("nats") != "" {
		if _, err := os.Stat(coordinator.JobDir(dataDir, id)); err != nil {
			module := c.Args().First()
			if module == "" {
				module = "MODULE.wasm"
			}
			return fmt.Sprintf("continue it with: wstream deploy%s --from-savepoint %s %s", clusterArgs(c), sp, module), nil
		}
	}
	if err := engine.MarkSuspended(dataDir, id, sp); err != nil {
		return "", err
	}
	return fmt.Sprintf("continue it with: wstream deploy --resume %s%s", id, clusterArgs(c)), nil
}

// reportResumePoint tells the user which checkpoint a resumed job starts
// from, and why newer ones cannot be used.
func reportResumePoint(w io.Writer, dataDir string, d *engine.Deployment) {
	if d.Suspended != "" {
		fmt.Fprintf(w, "resuming job %s from the savepoint it was suspended with, %s\n", d.Suspended, d.FromSavepoint)
		return
	}
	if !d.Plan.Checkpoint.Enabled() {
		fmt.Fprintf(w, "job %s does not checkpoint: it starts over\n", d.Resume)
		return
	}
	if loc := d.Plan.Checkpoint.Storage; loc != "" {
		// Reached through the job's NATS server, which is not up yet.
		fmt.Fprintf(w, "resuming job %s from its latest usable checkpoint in %s\n", d.Resume, loc)
		return
	}
	st, err := checkpoint.OpenStorage(coordinator.CheckpointRoot(dataDir, d.Resume))
	if err != nil {
		return
	}
	m, skipped, err := st.LatestUsable()
	for _, s := range skipped {
		fmt.Fprintf(w, "skipping an unusable checkpoint: %v\n", s)
	}
	// A savepoint newer than every usable checkpoint (of a stop or an
	// upgrade, or the one the job started from) is what it restores.
	if rp, _ := coordinator.ReadRestorePoint(dataDir, d.Resume); rp != nil && (err != nil || m.ID < rp.ID) {
		fmt.Fprintf(w, "resuming job %s from savepoint %s\n", d.Resume, rp.Dir)
		return
	}
	if err != nil {
		fmt.Fprintf(w, "job %s has no usable checkpoint: it starts over\n", d.Resume)
		return
	}
	fmt.Fprintf(w, "resuming job %s from checkpoint %d\n", d.Resume, m.ID)
}

// applySettingFlags writes the checkpoint and restart flags that are set
// into the plan; validation then checks them with the rest of the plan.
func applySettingFlags(c *cli.Context, p *job.Plan) {
	ms := func(name string) int64 { return c.Duration(name).Milliseconds() }
	cp := p.Checkpoint
	get := func() *job.CheckpointSettings {
		if cp == nil {
			cp = &job.CheckpointSettings{}
		}
		return cp
	}
	if c.IsSet("checkpoint-interval") {
		get().Interval = ms("checkpoint-interval")
	}
	if c.IsSet("checkpoint-mode") {
		get().Mode = job.Mode(c.String("checkpoint-mode"))
	}
	if c.IsSet("aligned-timeout") {
		get().AlignedTimeout = ms("aligned-timeout")
	}
	if c.IsSet("checkpoint-timeout") {
		get().Timeout = ms("checkpoint-timeout")
	}
	if c.IsSet("min-pause") {
		get().MinPause = ms("min-pause")
	}
	if c.IsSet("max-concurrent-checkpoints") {
		get().MaxConcurrent = c.Int("max-concurrent-checkpoints")
	}
	if c.IsSet("tolerable-failures") {
		get().TolerableFailures = c.Int("tolerable-failures")
	}
	if c.IsSet("retain") {
		get().Retain = c.Int("retain")
	}
	if c.IsSet("incremental") {
		v := c.Bool("incremental")
		get().Incremental = &v
	}
	if c.IsSet("compression") {
		v := c.Int("compression")
		get().Compression = &v
	}
	if c.IsSet("checkpoint-storage") {
		get().Storage = c.String("checkpoint-storage")
	}
	if c.IsSet("savepoint-format") {
		get().SavepointFormat = c.String("savepoint-format")
	}
	if c.IsSet("local-recovery") {
		get().LocalRecovery = c.Bool("local-recovery")
	}
	p.Checkpoint = cp
	r := p.Restart
	getR := func() *job.RestartSettings {
		if r == nil {
			r = &job.RestartSettings{Strategy: job.RestartFixedDelay}
		}
		return r
	}
	if c.IsSet("restart") {
		getR().Strategy = c.String("restart")
	}
	if c.IsSet("restart-attempts") {
		getR().Attempts = c.Int("restart-attempts")
	}
	if c.IsSet("restart-delay") {
		getR().Delay = ms("restart-delay")
	}
	if c.IsSet("restart-max-delay") {
		getR().MaxDelay = ms("restart-max-delay")
	}
	p.Restart = r
	applyGuestErrorFlags(c, p)
}

func countSubtasks(g *job.Graph) int {
	n := 0
	for _, c := range g.Chains {
		n += c.Parallelism
	}
	return n
}

func printSummary(w io.Writer, p *job.Plan, r *transport.JobResult) {
	fmt.Fprintf(w, "job %s %s in %s", r.JobID, r.State, r.Duration.Round(time.Millisecond))
	if r.Restarts > 0 {
		fmt.Fprintf(w, " after %d restarts", r.Restarts)
	}
	fmt.Fprintln(w)
	var in, out int64
	for _, m := range r.Metrics {
		var v *job.Vertex
		if p != nil {
			v = p.Vertex(m.Vertex)
		}
		kind := ""
		if p == nil {
			// follow: no plan, no kinds; sources emit without input,
			// sinks take without output.
			switch {
			case m.RecordsIn == 0:
				in += m.RecordsOut
			case m.RecordsOut == 0:
				out += m.RecordsIn
			}
		} else if v != nil {
			kind = v.Kind
			switch v.Kind {
			case job.KindSource:
				in += m.RecordsOut
			case job.KindSink:
				out += m.RecordsIn
			}
		}
		fmt.Fprintf(w, "  %-20s %-8s in %-12d out %d", m.Vertex, kind, m.RecordsIn, m.RecordsOut)
		if m.DeadLetters > 0 {
			fmt.Fprintf(w, " dead letters %d", m.DeadLetters)
		}
		fmt.Fprintln(w)
	}
	secs := r.Duration.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(in) / secs
	}
	fmt.Fprintf(w, "records in: %d, records out: %d (%.0f records/s)\n", in, out, rate)
}

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
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if r := c.Int("replicas"); r < 1 || r > 5 {
				return usageError{fmt.Errorf("--replicas %d: must be 1 to 5 (JetStream's range)", r)}
			}
			if c.Int("workers") < 0 {
				return usageError{fmt.Errorf("--workers %d: must be ≥ 0", c.Int("workers"))}
			}
			hc, err := hostConfig(c)
			if err != nil {
				return err
			}
			log, err := newLogger(c, slog.LevelInfo)
			if err != nil {
				return err
			}
			// A server takes over the jobs a previous one left running.
			opts := engine.Options{DataDir: c.String("data"), NATSURL: c.String("nats"), Workers: c.Int("workers"), NoWorkers: c.Int("workers") == 0,
				Host: hc, Log: log, Stdout: c.App.Writer, ResumeJobs: true, WorkerTimeout: c.Duration("worker-timeout"), StateMemory: int64(c.Int("state-memory")) << 20}
			natsOpts, err := natsOptions(c)
			if err != nil {
				return err
			}
			opts.NATSOptions = natsOpts
			if opts.NATSURL == "" {
				opts.Listen = c.String("listen")
			}
			if opts.HTTP, err = httpAddr(c); err != nil {
				return err
			}
			if opts.MaxModuleBytes, err = maxModuleBytes(c); err != nil {
				return err
			}
			if opts.AttemptCredsTTL = c.Duration("attempt-creds-ttl"); opts.AttemptCredsTTL < 3*time.Second {
				return usageError{fmt.Errorf("--attempt-creds-ttl %s: must be at least 3s", opts.AttemptCredsTTL)}
			}
			if n := c.Int("checkpoint-history"); n < 0 {
				return usageError{fmt.Errorf("--checkpoint-history %d: must be ≥ 1", n)}
			} else {
				opts.CheckpointHistory = n
			}
			// The embedded server has accounts unless asked not to: a
			// server that listens is reachable by others, and without
			// accounts anyone who reaches it can act on every job. An
			// external server has accounts only if configured for them.
			tenants := opts.NATSURL == ""
			if c.IsSet("tenants") {
				tenants = c.Bool("tenants")
			}
			if tenants {
				if opts.Tenants, err = openAuthority(authDir(c)); err != nil {
					return err
				}
			} else if c.IsSet("auth-dir") {
				return usageError{errors.New("--auth-dir goes with --tenants")}
			}
			if d := c.Duration("lease"); d < 0 || (d > 0 && d < 100*time.Millisecond) {
				return usageError{fmt.Errorf("--lease %s: must be at least 100ms", d)}
			}
			opts.Lease = c.Duration("lease")
			opts.Replicas = c.Int("replicas")
			leads := make(chan coordinator.LeaderInfo, 1)
			deposed := make(chan error, 1)
			opts.OnLead = func(l coordinator.LeaderInfo) { leads <- l }
			opts.Deposed = func(err error) { deposed <- err }
			e, err := engine.Start(ctx, opts)
			if err != nil {
				return err
			}
			natsURL := orDefault(opts.NATSURL, e.ClientURL())
			if l, leading := e.Coordinator().Leader(); leading {
				<-leads
				fmt.Fprintf(c.App.ErrWriter, "wstream server: coordinator running (NATS %s; leader %s, epoch %d)\n", natsURL, l.ID, l.Epoch)
			} else {
				// It does nothing until the leader's lease lapses.
				fmt.Fprintf(c.App.ErrWriter, "wstream server: standby (NATS %s): coordinator %s leads (epoch %d); this one takes over when its lease lapses\n", natsURL, l.ID, l.Epoch)
				go func() {
					select {
					case l := <-leads:
						fmt.Fprintf(c.App.ErrWriter, "wstream server: coordinator running (NATS %s; took over the lease: leader %s, epoch %d)\n", natsURL, l.ID, l.Epoch)
					case <-ctx.Done():
					}
				}()
			}
			if opts.Tenants != nil {
				dir := authDir(c)
				fmt.Fprintf(c.App.ErrWriter, "wstream server: tenants on; admin credentials %s, worker %s's %s (more: wstream tenant worker-creds NAME)\n",
					filepath.Join(dir, adminCredsFile), firstWorker, filepath.Join(dir, workerCredsFile))
			} else {
				fmt.Fprintf(c.App.ErrWriter, "wstream server: tenants off: whoever reaches NATS may act on every job\n")
			}
			if u := e.HTTPURL(); u != "" {
				fmt.Fprintf(c.App.ErrWriter, "wstream server: web UI and REST API at %s\n", u)
				if opts.Tenants != nil {
					fmt.Fprintf(c.App.ErrWriter, "wstream server: every request needs an API token; the admin's is in %s\n", filepath.Join(authDir(c), adminTokenFile))
				} else if !loopback(opts.HTTP) {
					fmt.Fprintf(c.App.ErrWriter, "wstream server: warning: without --tenants the REST API takes no credentials, and %s is reachable from other hosts\n", opts.HTTP)
				}
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
		},
	}
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
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := engine.Start(ctx, engine.Options{
				DataDir: c.String("data"), NATSURL: c.String("nats"), NATSOptions: natsOpts, Workers: 1, Slots: c.Int("slots"), WorkerID: c.String("id"),
				Host: hc, Log: log, Stdout: c.App.Writer, NoCoordinator: true, MaxModuleBytes: maxModule,
				StateMemory: int64(c.Int("state-memory")) << 20,
			})
			if err != nil {
				if l != nil {
					l.Close()
				}
				return err
			}
			if l != nil {
				url, stopHTTP := serveMetrics(l, e.MetricsHandler(), log)
				defer stopHTTP()
				fmt.Fprintf(c.App.ErrWriter, "wstream worker: metrics at %s\n", url)
			}
			fmt.Fprintf(c.App.ErrWriter, "wstream worker: connected to %s\n", c.String("nats"))
			<-ctx.Done()
			return e.Close(context.Background())
		},
	}
}

// clientEngine connects to the server at --nats, or to the one a running
// `wstream deploy` embeds for --data.
func clientEngine(c *cli.Context) (*engine.Engine, error) {
	url := c.String("nats")
	local := url == ""
	if local {
		u, err := engine.LocalURL(c.String("data"))
		if err != nil {
			return nil, err
		}
		url = u
	}
	tmp, err := os.MkdirTemp("", "wstream-client")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	natsOpts, err := natsOptions(c)
	if err != nil {
		return nil, err
	}
	natsOpts = defaultAdminCreds(c, natsOpts)
	e, err := engine.Start(c.Context, engine.Options{DataDir: tmp, NATSURL: url, NATSOptions: natsOpts, NoCoordinator: true})
	if err != nil && local && errors.Is(err, nats.ErrNoServers) {
		// A deploy or server killed (SIGKILL, a crash) leaves its URL file.
		data := c.String("data")
		return nil, fmt.Errorf("tried %s, the NATS server %s names, and none answers: the wstream deploy or server that wrote it is no longer running (killed?). Start it again (wstream deploy --resume JOB --data %s, or wstream server --data %s), or pass --nats URL of a running cluster",
			url, engine.URLFile(data), data, data)
	}
	return e, err
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a running job of a cluster",
		ArgsUsage: "JOB",
		Flags:     []cli.Flag{natsFlag, dataFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("cancel: want one JOB argument, got %d", c.NArg())}
			}
			e, err := clientEngine(c)
			if err != nil {
				return err
			}
			defer e.Close(context.Background())
			id := c.Args().First()
			// An unknown job is the coordinator's to answer (and audit).
			if row, err := findJob(c.Context, e.Conn(), id); err == nil && ended(row.State) {
				return fmt.Errorf("job %s has already ended (%s): there is nothing to cancel", id, row.State)
			}
			if err := coordinator.Cancel(c.Context, e.Conn(), id); err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "job %s cancelling\n", id)
			return nil
		},
	}
}

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoints",
		Usage:     "list the checkpoint history of a job in --data",
		ArgsUsage: "[JOB]",
		Description: `Prints one line per checkpoint of the job (the only job in --data when
JOB is omitted): id, status, duration, state size, persisted in-flight bytes,
and the slowest subtask's alignment, sync and async times; then the
checkpoints retained on disk.`,
		Flags: []cli.Flag{dataFlag, outputFlag},
		Action: func(c *cli.Context) error {
			asJSON, err := jsonOutput(c)
			if err != nil {
				return err
			}
			dir := c.String("data")
			id := c.Args().First()
			if id == "" {
				recs, err := coordinator.ListRecords(dir)
				if err != nil {
					return err
				}
				switch len(recs) {
				case 0:
					return fmt.Errorf("no job in %s", dir)
				case 1:
					id = recs[0].JobID
				default:
					var ids []string
					for _, r := range recs {
						ids = append(ids, r.JobID)
					}
					return usageError{fmt.Errorf("checkpoints: %d jobs in %s (%s): name one", len(recs), dir, strings.Join(ids, ", "))}
				}
			}
			if _, err := coordinator.ReadRecord(dir, id); err != nil {
				return err
			}
			hist, err := coordinator.ReadHistory(dir, id)
			if err != nil {
				return err
			}
			st, err := checkpoint.OpenStorage(coordinator.CheckpointRoot(dir, id))
			if err != nil {
				return err
			}
			ids, err := st.Completed()
			if err != nil {
				return err
			}
			ups, err := coordinator.ReadUpgrades(dir, id)
			if err != nil {
				return err
			}
			return printCheckpoints(c.App.Writer, asJSON, id, hist, ids, ups)
		},
	}
}

// printCheckpoints writes a job's checkpoint history and its retained
// checkpoints as a table, or as JSON.
func printCheckpoints(w io.Writer, asJSON bool, id string, hist []coordinator.HistoryEntry, ids []int64, ups []coordinator.UpgradeEntry) error {
	if asJSON {
		return checkpointsJSON(w, id, hist, ids, ups)
	}
	fmt.Fprintf(w, "%-6s %-11s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-10s %s\n",
		"ID", "KIND", "STATUS", "DURATION", "SIZE", "UPLOADED", "IN-FLIGHT", "ALIGNMENT", "SYNC", "ASYNC", "ATTEMPT")
	for _, e := range hist {
		kind := e.Kind.String()
		if e.Kind == 0 {
			kind = "-"
		}
		if e.Unaligned {
			kind += "*"
		}
		fmt.Fprintf(w, "%-6d %-11s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-10s %d",
			e.ID, kind, e.Status, e.Duration.Round(time.Millisecond), humanBytes(e.StateSize), humanBytes(e.Uploaded), humanBytes(e.InFlightBytes),
			e.Alignment.Round(time.Millisecond), e.Sync.Round(time.Millisecond), e.Async.Round(time.Millisecond), e.Attempt)
		if e.Reason != "" {
			fmt.Fprintf(w, "  (%s)", e.Reason)
		}
		if e.DeadLetters > 0 {
			fmt.Fprintf(w, "  %d dead letters", e.DeadLetters)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "retained: %v (* = unaligned)\n", ids)
	printUpgrades(w, ups)
	return nil
}
