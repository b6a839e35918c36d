package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
)

func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:      "upgrade",
		Usage:     "replace the operators of a running job with a new module's, at a savepoint",
		ArgsUsage: "JOB NEW.wasm",
		Description: `Replaces the module and plan of the running JOB with NEW.wasm (and its plan,
or --plan FILE), keeping its state, with no output lost or repeated. The new plan
is checked against the running one before anything stops: vertex ids kept, kinds
and connectors unchanged, declared states of the same kind and no older layout
version, the same max parallelism. Then the job stops at a savepoint (its sinks
commit on it), and its next attempt runs the new module from the savepoint, at
the new plan's parallelism (-p), converting the values of states whose layout
version rose through the module's wstream_migrate export.

If the new module fails before its first checkpoint (a restore, a migration, a
subtask), the old module runs again from the same savepoint and the command exits
non-zero with the cause. On success it prints the downtime: from the barrier to
the first record the new module was handed. If the job's process dies meanwhile
(a deploy killed), the command ends at once, non-zero, with the command that
resumes the job; with --nats, so it does once the coordinator leading when it
started is gone (another took the lease, or it went unrenewed past its period).
See docs/upgrade.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "plan", Usage: "plan `FILE` replacing the new module's plan"},
			&cli.IntFlag{Name: "parallelism", Aliases: []string{"p"}, Usage: "default parallelism of the new plan's vertices (vertices that set their own keep it)"},
			natsFlag, dataFlag,
			&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long (the upgrade goes on)", Value: 10 * time.Minute},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{fmt.Errorf("upgrade: want JOB NEW.wasm, got %d arguments", c.NArg())}
			}
			ov := job.Overrides{Parallelism: c.Int("parallelism")}
			if c.IsSet("parallelism") && ov.Parallelism < 1 {
				return usageError{fmt.Errorf("--parallelism %d: must be ≥ 1", ov.Parallelism)}
			}
			return upgrade(c, c.Args().Get(0), c.Args().Get(1), ov)
		},
	}
}

func upgrade(c *cli.Context, jobID, module string, ov job.Overrides) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	// The module and its plan are checked here, before the job is asked.
	rt, err := host.NewRuntime(ctx, engine.HostConfig(engine.Options{DataDir: c.String("data")}))
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	log, err := newLogger(c, slog.LevelWarn)
	if err != nil {
		return err
	}
	stopBusy := busy(c.App.ErrWriter, log, "compiling "+filepath.Base(module))
	d, err := engine.Prepare(ctx, rt, engine.PrepareOptions{ModulePath: module, PlanPath: c.String("plan"), Overrides: ov})
	stopBusy()
	if err != nil {
		return err
	}
	e, err := clientEngine(c)
	if err != nil {
		if c.String("nats") == "" {
			// Its process was killed while this one compiled.
			if gerr := localOwnerGone(jobID, c.String("data"), true); gerr != nil {
				return gerr
			}
		}
		return err
	}
	defer e.Close(context.Background())
	wctx, gone := context.WithCancelCause(ctx)
	defer gone(nil)
	go watchOwner(wctx, gone, c, jobID, e.Conn())
	stopBusy = busy(c.App.ErrWriter, log, "upgrading job "+jobID+" (savepoint, then the new module)")
	asked := time.Now()
	r, err := e.Upgrade(wctx, jobID, d)
	stopBusy()
	if err != nil {
		if cause := context.Cause(wctx); errors.As(cause, new(ownerGone)) {
			return cause
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("upgrade of job %s: no answer within %s; the upgrade may still end: see wstream checkpoints %s", jobID, c.Duration("timeout"), jobID)
		}
		return cli.Exit(err.Error(), 1)
	}
	w := c.App.Writer
	if asJSON, _ := jsonOutput(c); asJSON {
		st := upgradeJSON{UpgradeStatus: api.UpgradeStatus{JobID: jobID, RequestedAt: asked.UnixMilli()}, Module: d.ModuleName,
			ModuleDigest: d.ModuleDigest, Migrated: orEmpty(r.Migrated)}
		st.Finish(r, nil, time.Now())
		return writeJSON(w, st)
	}
	fmt.Fprintf(w, "job %s upgraded to %s at savepoint %d (attempt %d)\n", jobID, d.ModuleName, r.Savepoint, r.Attempt)
	if r.SavepointDir != "" {
		fmt.Fprintf(w, "  savepoint: %s\n", r.SavepointDir)
	}
	if len(r.Migrated) > 0 {
		fmt.Fprintf(w, "  migrated: %s\n", strings.Join(r.Migrated, ", "))
	}
	if r.DowntimeKnown {
		fmt.Fprintf(w, "  downtime: %s (barrier to the new module's first record)\n", r.Downtime)
	} else {
		fmt.Fprintf(w, "  downtime: unknown (no record reached the new module yet)\n")
	}
	return nil
}

// upgradeJSON is what `wstream upgrade -o json` prints: the fields of a
// rescale through REST (GET /v1/jobs/{id}/rescale), and the module the
// job runs now with the states it migrated.
type upgradeJSON struct {
	api.UpgradeStatus
	Module       string   `json:"module"`
	ModuleDigest string   `json:"moduleDigest"`
	Migrated     []string `json:"migrated"`
}

// ownerGone ends an upgrade's wait: the process that runs the job is gone
// and no answer will come.
type ownerGone struct{ error }

// ownerPoll is how often an upgrade's wait checks that the job's process
// is there; lostConnWait how long it waits for a cluster's NATS to come
// back.
const (
	ownerPoll    = 500 * time.Millisecond
	lostConnWait = time.Minute
)

// watchOwner cancels the wait of an upgrade (gone) when the job's process
// is gone. The answer comes from the coordinator that started the upgrade:
// a killed one never sends it, and a coordinator that resumes the job does
// not carry the upgrade on (the job restores its latest checkpoint or the
// upgrade's savepoint, on whichever module its record names). For a job of
// a local data directory, the process is the `wstream deploy` (or server)
// holding the directory's lock; for a cluster (--nats), the coordinator
// that leads when the wait starts: the wait ends when another takes the
// lease, when the lease is released, or when it goes unrenewed for longer
// than its period (leaseWatch), and when the connection stays down for
// lostConnWait.
func watchOwner(ctx context.Context, gone context.CancelCauseFunc, c *cli.Context, jobID string, nc *nats.Conn) {
	data := c.String("data")
	local := c.String("nats") == ""
	tick := time.NewTicker(ownerPoll)
	defer tick.Stop()
	var down time.Time
	var lw leaseWatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if local {
			if err := localOwnerGone(jobID, data, false); err != nil {
				gone(err)
				return
			}
			continue
		}
		if err := lw.check(ctx, nc, jobID, time.Now()); err != nil {
			gone(err)
			return
		}
		switch {
		case nc.IsConnected():
			down = time.Time{}
		case down.IsZero():
			down = time.Now()
		case time.Since(down) > lostConnWait:
			gone(ownerGone{fmt.Errorf("upgrade of job %s: the connection to NATS has been down for %s and no answer will come; "+
				"the upgrade may still end: see `wstream checkpoints %s` once the cluster is back (a coordinator resumes the job)", jobID, lostConnWait, jobID)})
			return
		}
	}
}

// localOwnerGone returns an ownerGone error when the process that held
// the data directory of job jobID is gone, else nil; killed: only when the
// lock file still names it (a process that exited cleanly emptied it).
func localOwnerGone(jobID, data string, killed bool) error {
	pid, alive, err := engine.DataDirOwner(data)
	if err != nil || alive || killed && pid == 0 {
		return nil
	}
	who := "the process that ran it"
	if pid > 0 {
		who = fmt.Sprintf("process %d, which ran it,", pid)
	}
	return ownerGone{fmt.Errorf("upgrade of job %s: %s is gone (killed?), and no answer will come; "+
		"nothing committed is lost: resume the job with `wstream deploy --resume %s --data %s` "+
		"(it restores the upgrade's savepoint if that completed, else its latest checkpoint), "+
		"then run the upgrade again if it still runs the old module", jobID, who, jobID, data)}
}

// printUpgrades prints a job's upgrade history under its checkpoints.
func printUpgrades(w io.Writer, ups []coordinator.UpgradeEntry) {
	if len(ups) == 0 {
		return
	}
	fmt.Fprintf(w, "\nupgrades:\n%-20s %-12s %-9s %-8s %-10s %s\n", "TIME", "OUTCOME", "SAVEPOINT", "ATTEMPT", "DOWNTIME", "MODULE")
	for _, u := range ups {
		down := "-"
		if u.DowntimeKnown {
			down = u.Downtime.Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%-20s %-12s %-9d %-8s %-10s %s → %s (%d → %d subtasks)",
			u.Time.Local().Format("2006-01-02 15:04:05"), u.Outcome, u.Savepoint, fmt.Sprintf("%d→%d", u.FromAttempt, u.Attempt), down,
			u.OldModule, u.NewModule, u.OldSubtasks, u.NewSubtasks)
		if len(u.Migrated) > 0 {
			fmt.Fprintf(w, ", migrated %s", strings.Join(u.Migrated, ", "))
		}
		if u.Cause != "" {
			fmt.Fprintf(w, "  (%s)", u.Cause)
		}
		fmt.Fprintln(w)
	}
}

// leaseWatch follows the coordinators' lease during an upgrade's wait: the
// coordinator that led when it started is the one that answers, and it is
// gone once another leads, once it released the lease (it shut down), or
// once it has not renewed the lease for longer than its period (it was
// killed, or is cut off: a standby takes over then).
type leaseWatch struct {
	kv     jetstream.KeyValue
	first  coordinator.LeaderInfo
	rev    uint64
	seenAt time.Time
	off    bool // no lease bucket: a coordinator without leases
}

// check reads the lease and returns an ownerGone error when the leader the
// wait started with is gone; a read that fails is tried again next time.
func (lw *leaseWatch) check(ctx context.Context, nc *nats.Conn, jobID string, now time.Time) error {
	if lw.off || !nc.IsConnected() {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if lw.kv == nil {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil
		}
		kv, err := js.KeyValue(rctx, coordinator.LeaderBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			lw.off = true
			return nil
		}
		if err != nil {
			return nil
		}
		lw.kv = kv
	}
	e, err := lw.kv.Get(rctx, "coordinator")
	gone := func(why string) error {
		return ownerGone{fmt.Errorf("upgrade of job %s: %s, and no answer will come (a new leader does not carry an upgrade on: "+
			"it resumes the job on the module its record names); see `wstream checkpoints %s` and `wstream list`, then run the upgrade again if the job still runs the old module",
			jobID, why, jobID)}
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		if lw.first.ID == "" {
			return nil
		}
		return gone(fmt.Sprintf("coordinator %s, which started it, released its lease (it shut down)", lw.first.ID))
	case err != nil:
		return nil
	}
	var h coordinator.LeaderInfo
	_ = json.Unmarshal(e.Value(), &h)
	if lw.first.ID == "" {
		lw.first, lw.rev, lw.seenAt = h, e.Revision(), now
		return nil
	}
	if h.ID != lw.first.ID || (h.Epoch != 0 && lw.first.Epoch != 0 && h.Epoch != lw.first.Epoch) {
		return gone(fmt.Sprintf("coordinator %s, which started it, no longer leads (%s leads now)", lw.first.ID, h.ID))
	}
	if e.Revision() != lw.rev {
		lw.rev, lw.seenAt = e.Revision(), now
		return nil
	}
	lease := time.Duration(h.LeaseMillis) * time.Millisecond
	if lease <= 0 {
		lease = coordinator.DefaultLease
	}
	if d := now.Sub(lw.seenAt); d > lease+ownerPoll {
		return gone(fmt.Sprintf("coordinator %s, which started it, has not renewed its lease for %s (its period is %s): it is dead or cut off", lw.first.ID, d.Round(100*time.Millisecond), lease))
	}
	return nil
}
