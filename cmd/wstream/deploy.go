package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// deployFlags are deploy's own flags; the host flags come after them.
func deployFlags() []cli.Flag {
	return []cli.Flag{
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
}

func deployCommand() *cli.Command {
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
		Flags:  append(deployFlags(), hostFlags()...),
		Action: deployAction,
	}
}

// deployAction checks deploy's arguments and the flags that no later step
// reads, then deploys.
func deployAction(c *cli.Context) error {
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
}

func deploy(c *cli.Context, hc host.Config, ov job.Overrides) (err error) {
	// Ctrl-C and SIGTERM: see interrupts. Before the job runs, they cancel.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	errw := c.App.ErrWriter
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
	asJSON, err := jsonOutput(c)
	if err != nil {
		return err
	}
	log, err := newLogger(c, slog.LevelWarn)
	if err != nil {
		return err
	}
	// deploy says how its job ended itself, once; a log level asked for
	// gets every line.
	if !verbose(c) && lineageString(c, "log-level") == "" {
		log = slog.New(dropMessages{log.Handler(), "job ended"})
	}
	opts, err := deployOptions(c, hc, log)
	if err != nil {
		return err
	}
	if asJSON {
		// stdout holds the one JSON object: a stdout sink's records go
		// to stderr.
		opts.Stdout = errw
	}
	d, closeRuntime, err := prepareDeploy(ctx, c, &opts, ov, log)
	if err != nil {
		return err
	}
	defer closeRuntime()
	if c.Bool("dry-run") {
		if asJSON {
			return writeJSON(c.App.Writer, struct {
				Plan json.RawMessage `json:"plan"`
			}{d.Plan.JSON()})
		}
		fmt.Fprint(c.App.Writer, d.Graph.String())
		return nil
	}
	if t := c.String("tenant"); t != "" {
		if opts.NATSURL == "" {
			return usageError{errors.New("--tenant needs --nats: the embedded default has no tenants")}
		}
		d.Tenant = t
	}
	res, err := runDeploy(ctx, c, opts, d, ir, log, asJSON)
	if err != nil || res == nil { // res nil: detached
		return err
	}
	if asJSON {
		if err := writeJSON(c.App.Writer, api.JobOutcome{JobID: res.JobID, Result: api.ResultOf(res)}); err != nil {
			return err
		}
	} else if !c.Bool("quiet") {
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

// deployOptions are the engine's options the flags of deploy give: in
// this process (an embedded server) or a client of --nats.
func deployOptions(c *cli.Context, hc host.Config, log *slog.Logger) (engine.Options, error) {
	opts := engine.Options{DataDir: c.String("data"), NATSURL: c.String("nats"), Host: hc, Stdout: c.App.Writer, Log: log,
		StateMemory: int64(c.Int("state-memory")) << 20}
	natsOpts, err := natsOptions(c)
	if err != nil {
		return opts, err
	}
	if opts.NATSURL != "" {
		// The admin's credentials of a server's --data, as list finds them.
		natsOpts = defaultAdminCreds(c, natsOpts)
	} else {
		for _, f := range []string{"detach", "attached"} {
			if c.Bool(f) {
				return opts, usageError{fmt.Errorf("--%s goes with --nats: without it the job runs in this process and ends with it", f)}
			}
		}
	}
	if c.Bool("detach") && c.Bool("attached") {
		return opts, usageError{errors.New("--detach and --attached are opposites: give one")}
	}
	opts.NATSOptions = natsOpts
	if c.IsSet("workers") && c.Int("workers") < 1 {
		return opts, usageError{fmt.Errorf("--workers %d: must be ≥ 1", c.Int("workers"))}
	}
	opts.Workers = c.Int("workers")
	if opts.NATSURL != "" {
		if c.IsSet("workers") {
			return opts, usageError{errors.New("--workers starts workers inside the embedded server; with --nats, start `wstream worker` processes instead")}
		}
		if c.IsSet("http") {
			return opts, usageError{errors.New("--http serves the embedded default's UI and REST API; a cluster's come from `wstream server --http`")}
		}
		opts.NoCoordinator = true
		return opts, nil
	}
	// Listen on loopback so that `wstream savepoint`, `stop`, `cancel`
	// and `list` reach this job through the data directory.
	opts.Listen = "127.0.0.1:0"
	opts.HTTP, err = httpAddr(c)
	return opts, err
}

// prepareDeploy validates the module, its plan and the savepoint to start
// from (all of it with --dry-run), before an engine starts: a bad module
// or plan fails fast and touches nothing. The in-process worker of the
// embedded default then runs the module as validation compiled it.
func prepareDeploy(ctx context.Context, c *cli.Context, opts *engine.Options, ov job.Overrides, log *slog.Logger) (*engine.Deployment, func(), error) {
	none := func() {}
	if c.IsSet("resume") {
		id := c.String("resume")
		if id == "-" {
			id = ""
		}
		d, err := engine.PrepareResume(opts.DataDir, id)
		if err != nil {
			return nil, none, err
		}
		reportResumePoint(c.App.ErrWriter, opts.DataDir, d)
		return d, none, nil
	}
	rt, err := host.NewRuntime(ctx, engine.HostConfig(*opts))
	if err != nil {
		return nil, none, err
	}
	closeRuntime := func() { rt.Close(context.Background()) }
	stopBusy := busy(c.App.ErrWriter, log, "compiling "+filepath.Base(c.Args().First()))
	d, err := engine.Prepare(ctx, rt, engine.PrepareOptions{
		ModulePath: c.Args().First(),
		PlanPath:   c.String("plan"),
		Overrides:  ov,
		Name:       c.String("name"),
		Settings:   func(p *job.Plan) { applySettingFlags(c, p) },
	})
	stopBusy()
	if err != nil {
		closeRuntime()
		return nil, none, err
	}
	if opts.NATSURL == "" {
		opts.Runtime = rt
	}
	if dir := c.String("from-savepoint"); dir != "" {
		if !checkpoint.IsObjectLocation(dir) {
			if dir, err = filepath.Abs(dir); err != nil {
				closeRuntime()
				return nil, none, err
			}
			if _, err := os.Stat(dir); err != nil {
				closeRuntime()
				return nil, none, fmt.Errorf("--from-savepoint %s: no such savepoint or checkpoint directory", c.String("from-savepoint"))
			}
		}
		d.FromSavepoint, d.AllowNonRestoredState = dir, c.Bool("allow-non-restored-state")
	}
	if c.Bool("dry-run") {
		if err := dryRun(ctx, rt, d, opts.NATSURL == ""); err != nil {
			closeRuntime()
			return nil, none, err
		}
	}
	return d, closeRuntime, nil
}

// runDeploy starts the engine and runs d: to its end, or with -d until the
// cluster took it (the result is nil then).
func runDeploy(ctx context.Context, c *cli.Context, opts engine.Options, d *engine.Deployment, ir *interrupts, log *slog.Logger, asJSON bool) (*transport.JobResult, error) {
	out, errw := c.App.Writer, c.App.ErrWriter
	e, err := engine.Start(ctx, opts)
	if err != nil {
		return nil, err
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
			// The id alone on stdout, for scripts: JOB=$(wstream deploy -d ...);
			// with -o json, POST /v1/jobs's answer.
			if asJSON {
				_ = writeJSON(out, api.DeployReply{JobID: id})
			} else {
				fmt.Fprintln(out, id)
			}
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
			return nil, cli.Exit(fmt.Sprintf("%s: stopped following job %s, which goes on running (wstream follow %s%s; wstream stop %s%s suspends it)", sig, id, id, clusterArgs(c), id, clusterArgs(c)), exitSignal(sig))
		}
	} else {
		res, err = e.Run(ctx, d, func(id string) {
			started(id)
			if opts.NATSURL != "" || !isTerminal(errw) {
				stopStatus = watchStatus(errw, log, e.Conn(), id, c.Bool("quiet"))
			}
		})
		stopStatus()
	}
	return res, err
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
