package lifecycle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/wstream/wstream/job"
)

// TestLifecycle runs the scenarios in testdata/lifecycle. Each file keeps
// one job across its commands:
//
//	new [restart=none|fixed-delay|exponential attempts= delay= max-delay=
//	    multiplier=] [checkpoints] [from-savepoint] [recancel-after=]
//	    [missed-heartbeats=]
//	recover attempt= [restarts=] [causes=(a;b)]
//	submit now= · resume now= · tick now= · suspend now= · cancel now=
//	placed now= attempt= tasks=w1:2,w2:1
//	deployed now= attempt=
//	deploy-failed now= attempt= reason=(...) [took=w1,w2]
//	task now= attempt= worker= end=finished|failed|failed-after-peer|canceled [reason=(...)]
//	lost now= worker= [reason=(...)]
//	heartbeat now= worker= [attempts=1,2]
//	fail now= attempt= reason=(...)
//	stop-requested now= · stop-completed now= attempt= [id=]
//	stop-failed now= attempt= [id=] [reason=(...)]
//	upgrade-requested now= · upgrade-confirmed now= attempt=
//	status · log
//
// Commands that feed an event print the state change ("state: A → B"), if
// any, then the actions Ready returns, one a line, then the error, if any,
// with the sentinel it wraps; "ok" when there is none of these.
func TestLifecycle(t *testing.T) {
	datadriven.Walk(t, "testdata/lifecycle", func(t *testing.T, path string) {
		var j *Job
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if j == nil && d.Cmd != "new" {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var before State
			if j != nil {
				before = j.State()
			}
			var err error
			now := int64(0)
			d.MaybeScanArgs(t, "now", &now)
			switch d.Cmd {
			case "new":
				nj, err := New(configArg(t, d))
				if err != nil {
					return result(nil, 0, 0, err)
				}
				j = nj
				return "ok\n"
			case "recover":
				var last, restarts int
				d.ScanArgs(t, "attempt", &last)
				d.MaybeScanArgs(t, "restarts", &restarts)
				var log []Restart
				if arg, ok := d.Arg("causes"); ok {
					for i, c := range strings.Split(arg.SingleVal(t), ";") {
						log = append(log, Restart{Attempt: i, Cause: c})
					}
				}
				err = j.Recover(last, restarts, log)
			case "submit":
				err = j.Submit(now)
			case "resume":
				err = j.Resume(now)
			case "tick":
				j.Tick(now)
			case "suspend":
				j.Suspend(now)
			case "cancel":
				err = j.Cancel(now)
			case "placed":
				tasks := map[string]int{}
				arg, _ := d.Arg("tasks")
				for _, s := range strings.Split(arg.SingleVal(t), ",") {
					w, k, ok := strings.Cut(s, ":")
					n, perr := strconv.Atoi(k)
					if !ok || perr != nil {
						d.Fatalf(t, "bad tasks %q", s)
					}
					tasks[w] = n
				}
				err = j.Placed(now, intArg(t, d, "attempt"), tasks)
			case "deployed":
				err = j.Deployed(now, intArg(t, d, "attempt"))
			case "deploy-failed":
				var took []string
				if arg, ok := d.Arg("took"); ok {
					took = strings.Split(arg.SingleVal(t), ",")
				}
				err = j.DeployFailed(now, intArg(t, d, "attempt"), strArg(d, "reason"), took)
			case "task":
				var end TaskEnd
				switch e := strArg(d, "end"); e {
				case "finished":
					end = TaskFinished
				case "failed":
					end = TaskFailed
				case "canceled":
					end = TaskCanceled
				case "failed-after-peer":
					end = TaskFailedAfterPeer
				default:
					d.Fatalf(t, "bad end %q", e)
				}
				err = j.TaskEnded(now, intArg(t, d, "attempt"), strArg(d, "worker"), end, strArg(d, "reason"))
			case "lost":
				j.WorkerLost(now, strArg(d, "worker"), strArg(d, "reason"))
			case "heartbeat":
				var listed []int
				if arg, ok := d.Arg("attempts"); ok && arg.SingleVal(t) != "" {
					for _, s := range strings.Split(arg.SingleVal(t), ",") {
						n, perr := strconv.Atoi(s)
						if perr != nil {
							d.Fatalf(t, "bad attempt %q", s)
						}
						listed = append(listed, n)
					}
				}
				j.Heartbeat(now, strArg(d, "worker"), listed)
			case "fail":
				err = j.Fail(now, intArg(t, d, "attempt"), strArg(d, "reason"))
			case "stop-requested":
				err = j.StopRequested(now)
			case "stop-completed":
				var id int64
				d.MaybeScanArgs(t, "id", &id)
				err = j.StopCompleted(now, intArg(t, d, "attempt"), id)
			case "stop-failed":
				var id int64
				d.MaybeScanArgs(t, "id", &id)
				err = j.StopFailed(now, intArg(t, d, "attempt"), id, strArg(d, "reason"))
			case "upgrade-requested":
				err = j.UpgradeRequested(now)
			case "upgrade-confirmed":
				err = j.UpgradeConfirmed(now, intArg(t, d, "attempt"))
			case "status":
				return status(j)
			case "log":
				var b strings.Builder
				for _, r := range j.Log() {
					fmt.Fprintf(&b, "attempt %d at %d: %s\n", r.Attempt, r.At, r.Cause)
				}
				if b.Len() == 0 {
					return "no restarts\n"
				}
				return b.String()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return result(j.Ready(), before, j.State(), err)
		})
	})
}

func status(j *Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s attempt %d restarts %d", j.State(), j.Attempt(), j.Restarts())
	if c := j.Cause(); c != "" {
		fmt.Fprintf(&b, " cause: %s", c)
	}
	if j.Stopping() {
		b.WriteString(" (stopping)")
	}
	if j.Upgrading() {
		b.WriteString(" (upgrading)")
	}
	if at, ok := j.RestartDue(); ok {
		fmt.Fprintf(&b, " (restart due at %d)", at)
	}
	if r, ok := j.Result(); ok {
		fmt.Fprintf(&b, "\nresult: %s", r)
	}
	b.WriteByte('\n')
	return b.String()
}

// sentinels are the errors a scenario names when an error wraps them.
var sentinels = []struct {
	name string
	err  error
}{
	{"stale", ErrStale},
	{"ended", ErrEnded},
	{"state", ErrState},
}

func result(actions []Action, before, after State, err error) string {
	var b strings.Builder
	if before != after {
		fmt.Fprintf(&b, "state: %s → %s\n", before, after)
	}
	for _, a := range actions {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	if err != nil {
		fmt.Fprintf(&b, "error: %s\n", err)
		var kinds []string
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				kinds = append(kinds, s.name)
			}
		}
		if len(kinds) > 0 {
			fmt.Fprintf(&b, "is: %s\n", strings.Join(kinds, ", "))
		}
	}
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

// configArg builds the job's config; the restart strategy is the plan's
// own (job.RestartSettings), so that scenarios run the delays jobs get.
func configArg(t *testing.T, d *datadriven.TestData) Config {
	var cfg Config
	if arg, ok := d.Arg("restart"); ok {
		r := &job.RestartSettings{Strategy: arg.SingleVal(t)}
		d.MaybeScanArgs(t, "attempts", &r.Attempts)
		d.MaybeScanArgs(t, "delay", &r.Delay)
		d.MaybeScanArgs(t, "max-delay", &r.MaxDelay)
		d.MaybeScanArgs(t, "multiplier", &r.Multiplier)
		cfg.Restart = r
	}
	cfg.Checkpoints = d.HasArg("checkpoints")
	cfg.FromSavepoint = d.HasArg("from-savepoint")
	d.MaybeScanArgs(t, "recancel-after", &cfg.RecancelAfter)
	d.MaybeScanArgs(t, "missed-heartbeats", &cfg.MissedHeartbeats)
	return cfg
}

func intArg(t *testing.T, d *datadriven.TestData, key string) int {
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func strArg(d *datadriven.TestData, key string) string {
	arg, ok := d.Arg(key)
	if !ok || len(arg.Vals) == 0 {
		return ""
	}
	return strings.Join(arg.Vals, ", ")
}
