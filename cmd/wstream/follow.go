package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/transport"
)

var (
	detachFlag = &cli.BoolFlag{Name: "detach", Aliases: []string{"d"},
		Usage: "with --nats: submit the job, print its id and return; wstream follow JOB attaches to it later"}
	attachedFlag = &cli.BoolFlag{Name: "attached",
		Usage: "with --nats: the job belongs to this client, as a local deploy's does: Ctrl-C or SIGTERM suspends it with a savepoint (a second one, or a job that does not checkpoint: cancels it)"}
)

func followCommand() *cli.Command {
	return &cli.Command{
		Name:      "follow",
		Usage:     "attach to a running job: its events as they happen, then its outcome, summary and exit status",
		ArgsUsage: "JOB",
		Description: `Follows JOB (one a deploy -d started, or any other) until it ends: prints its
events on stderr (state changes, restarts with their causes, and checkpoints when
--data names the server's data directory on this host), then its outcome and
summary, and exits as deploy would: 0 finished, 1 failed, 3 cancelled or stopped
from outside. Ctrl-C or SIGTERM ends the following only (exit 128 + the signal):
the job goes on running. Stop it with wstream stop JOB, or cancel it with
wstream cancel JOB.`,
		Flags: []cli.Flag{natsFlag, dataFlag, &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "do not print the state changes and the summary"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("follow: want one JOB argument, got %d", c.NArg())}
			}
			id := c.Args().First()
			ctx, sigOf := signalContext(c.Context)
			e, err := clientEngine(c)
			if err != nil {
				return err
			}
			defer e.Close(context.Background())
			w, err := coordinator.WatchJobs(e.Conn())
			if err != nil {
				return err
			}
			defer w.Close()
			row, err := findJob(ctx, e.Conn(), id)
			if err != nil {
				return err
			}
			errw := c.App.ErrWriter
			if !c.Bool("quiet") {
				fmt.Fprintf(errw, "following job %s (%s): Ctrl-C stops following, not the job\n", id, row.State)
			}
			// The log flags are checked even though events are lines.
			if _, err := newLogger(c, slog.LevelWarn); err != nil {
				return err
			}
			stopStatus := func() {}
			if !c.Bool("quiet") {
				// Checkpoints too when the job's files are on this host.
				data := c.String("data")
				if _, err := os.Stat(coordinator.JobDir(data, id)); err != nil {
					data = ""
				}
				stopStatus = followEvents(errw, e.Conn(), id, data, time.Second)
			}
			wctx := ctx
			if ended(row.State) {
				// Its result is in the job's record, read within a poll or
				// two; a record without one leaves the state list showed.
				var cancel context.CancelFunc
				wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
			}
			res, err := w.Wait(wctx, id)
			stopStatus()
			if err != nil && ended(row.State) && sigOf() == nil {
				res, err = &transport.JobResult{JobID: id, Error: row.Error, State: coordinator.StatusResultState(row.State)}, nil
			}
			if err != nil {
				if sig := sigOf(); sig != nil {
					return cli.Exit(fmt.Sprintf("%s: stopped following job %s, which goes on running (wstream follow %s%s)", sig, id, id, clusterArgs(c)), exitSignal(sig))
				}
				return err
			}
			if !c.Bool("quiet") {
				fmt.Fprintf(errw, "%s %s\n", time.Now().Format("15:04:05"), outcomeLine(res))
			}
			if asJSON, _ := jsonOutput(c); asJSON {
				if err := writeJSON(c.App.Writer, api.JobOutcome{JobID: res.JobID, Result: api.ResultOf(res)}); err != nil {
					return err
				}
			} else if !c.Bool("quiet") {
				printSummary(errw, nil, res)
			}
			return jobOutcome(res, nil, "")
		},
	}
}

// signalContext is ctx, done at Ctrl-C or SIGTERM; sig says which came.
func signalContext(parent context.Context) (ctx context.Context, sig func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var mu sync.Mutex
	var got os.Signal
	go func() {
		defer signal.Stop(sigs)
		select {
		case s := <-sigs:
			mu.Lock()
			got = s
			mu.Unlock()
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() os.Signal {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// findJob is the row of job id, or an error saying there is none.
func findJob(ctx context.Context, nc *nats.Conn, id string) (transport.JobInfo, error) {
	jobs, _, err := coordinator.ListJobs(ctx, nc)
	if err != nil {
		return transport.JobInfo{}, err
	}
	for _, j := range jobs {
		if j.JobID == id {
			return j, nil
		}
	}
	return transport.JobInfo{}, fmt.Errorf("no job %q (wstream list shows the jobs)", id)
}

// ended reports whether a job in state (Flink's names, as list shows them)
// has ended for good.
func ended(state string) bool {
	switch state {
	case "FINISHED", "FAILED", "CANCELED", "SUSPENDED":
		return true
	}
	return false
}

// clusterArgs is the --nats and --data part of a command that reaches the
// same job again, as the user gave them.
func clusterArgs(c *cli.Context) string {
	s := ""
	if u := c.String("nats"); u != "" {
		s += " --nats " + u
	}
	if c.String("data") != dataFlag.Value {
		s += " --data " + c.String("data")
	}
	return s
}

// jobOutcome is the exit of a command that waited for a job's end: nil
// when it finished, exit 1 when it failed, exit 3 when it was cancelled or
// stopped from outside. ir, when not nil, tells this client's own signals
// (which end with their own statuses) from others'.
func jobOutcome(res *transport.JobResult, ir *interrupts, resumeHint string) error {
	switch res.State {
	case transport.JobFinished:
		return nil
	case transport.JobFailed:
		return cli.Exit(fmt.Sprintf("job %s failed: %s", res.JobID, res.Error), exitFailed)
	case transport.JobStopped:
		if ir != nil {
			if sp := ir.suspendedAt(); sp != "" {
				return cli.Exit(fmt.Sprintf("job %s suspended with a savepoint in %s; %s", res.JobID, sp, resumeHint), exitSuspended)
			}
		}
		return cli.Exit(fmt.Sprintf("job %s was stopped with a savepoint from outside (wstream stop, the REST API or the web UI)", res.JobID), exitSuspended)
	case transport.JobCanceled:
		if ir != nil {
			if sig := ir.signal(); sig != nil {
				return cli.Exit(fmt.Sprintf("job %s canceled (%s); nothing it had not committed was kept", res.JobID, sig), exitSignal(sig))
			}
		}
		return cli.Exit(fmt.Sprintf("job %s was canceled from outside (wstream cancel, the REST API or the web UI); nothing it had not committed was kept", res.JobID), exitSuspended)
	}
	return cli.Exit(fmt.Sprintf("job %s ended %s", res.JobID, res.State), exitFailed)
}

// runCluster submits d to the cluster and, unless detach, waits for its
// end. Unlike engine.Run, it leaves the job alone when ctx ends: a client's
// signal ends the client, not the cluster's job.
func runCluster(ctx context.Context, e *engine.Engine, d *engine.Deployment, detach bool, started func(id string)) (string, *transport.JobResult, error) {
	w, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		return "", nil, err
	}
	defer w.Close()
	id, err := e.Submit(ctx, d)
	if err != nil {
		return "", nil, err
	}
	if started != nil {
		started(id)
	}
	if detach {
		return id, nil, nil
	}
	res, err := w.Wait(ctx, id)
	return id, res, err
}

// watchStatus reports job id's state while a client waits for its end:
// on a terminal a line rewritten in place; off one, log gets a line at
// info level whenever the state or attempt changes and once a minute
// besides, at warn level when the job is failing or restarting (a log
// then shows a job that restarts over and over without --log-level info).
// quiet shows nothing.
func watchStatus(w io.Writer, log *slog.Logger, nc *nats.Conn, id string, quiet bool) (stop func()) {
	if quiet {
		return func() {}
	}
	return pollStatus(w, isTerminal(w), log, 2*time.Second, time.Minute, func() (transport.JobInfo, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		row, err := findJob(ctx, nc, id)
		return row, err == nil
	})
}

// pollStatus runs watchStatus's display with its clock and source given.
func pollStatus(w io.Writer, terminal bool, log *slog.Logger, every, heartbeat time.Duration, get func() (transport.JobInfo, bool)) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		var last transport.JobInfo
		var lastLine time.Time
		start := time.Now()
		for {
			select {
			case <-done:
				if terminal && !lastLine.IsZero() {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			row, ok := get()
			if !ok {
				continue
			}
			line := statusLine(row, time.Since(start))
			changed := row.State != last.State || row.Attempt != last.Attempt
			switch {
			case terminal:
				fmt.Fprintf(w, "\r\033[K%s", line)
				lastLine = time.Now()
			case changed || time.Since(lastLine) >= heartbeat:
				level := slog.LevelInfo
				if changed && (row.State == "RESTARTING" || row.State == "FAILING") {
					level = slog.LevelWarn
				}
				log.Log(context.Background(), level, line)
				lastLine = time.Now()
			}
			last = row
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}

// statusLine is one line of a job's state.
func statusLine(row transport.JobInfo, waited time.Duration) string {
	s := fmt.Sprintf("job %s %s, attempt %d", row.JobID, row.State, row.Attempt)
	if row.Restarts > 0 {
		s += fmt.Sprintf(", %d restarts", row.Restarts)
	}
	s += fmt.Sprintf(", watched %s", waited.Round(time.Second))
	if row.Cause != "" && row.State != "RUNNING" {
		s += ": " + oneLine(row.Cause, 120)
	}
	return s
}
