// Command wstream deploys and runs WebAssembly stream operators.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/state"
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
					if asJSON, err := jsonOutput(c); asJSON || err != nil {
						if err != nil {
							return err
						}
						return writeJSON(c.App.Writer, api.Build())
					}
					fmt.Fprintf(c.App.Writer, "wstream %s (ABI v%d)%s\n", version, abi.Version, commit())
					return nil
				},
			},
		}),
	}
	withOutput(app.Commands, "")
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
