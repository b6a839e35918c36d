package checkpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestCoordinator runs the scenarios in testdata/coordinator. Each file
// keeps one coordinator across its commands:
//
//	new tasks=0/0,1/0 [interval= initial-delay= min-pause= max-concurrent=
//	    timeout= tolerable= retain= next= now=]
//	validate [interval= initial-delay= min-pause= max-concurrent= timeout=
//	    tolerable= retain=]
//	tick now=
//	savepoint now=
//	ack now= id= task= [state=] [state-task=] [size=]
//	decline now= id= task= [reason=(...)]
//	finished task=
//	persisted id= [err=(...)]
//	stop
//	hold
//	recover ids=3,4 [kind=savepoint]
//	pending
//	completed
//
// Commands that feed an event print the actions Ready returns, one a line,
// then the error, if any, with the sentinel it wraps; "ok" when there is
// neither.
func TestCoordinator(t *testing.T) {
	datadriven.Walk(t, "testdata/coordinator", func(t *testing.T, path string) {
		var c *Coordinator
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if c == nil && d.Cmd != "new" && d.Cmd != "validate" {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var err error
			switch d.Cmd {
			case "validate":
				return result(nil, configArg(t, d).Validate())
			case "new":
				var tasks []TaskID
				if arg, ok := d.Arg("tasks"); ok && arg.SingleVal(t) != "" {
					for _, s := range strings.Split(arg.SingleVal(t), ",") {
						tasks = append(tasks, parseTask(t, d, s))
					}
				}
				next, now := int64(1), int64(0)
				d.MaybeScanArgs(t, "next", &next)
				d.MaybeScanArgs(t, "now", &now)
				nc, err := NewCoordinator(configArg(t, d), tasks, next, now)
				if err == nil {
					c = nc
				}
				return result(nil, err)
			case "tick":
				c.Tick(int64Arg(t, d, "now"))
			case "savepoint":
				_, err = c.TriggerSavepoint(int64Arg(t, d, "now"))
			case "ack":
				task := taskArg(t, d, "task")
				st := SubtaskState{Task: task}
				if d.HasArg("state-task") {
					st.Task = taskArg(t, d, "state-task")
				}
				if arg, ok := d.Arg("state"); ok {
					st.Operator = map[string][]byte{"op": []byte(arg.SingleVal(t))}
				}
				var m Metrics
				d.MaybeScanArgs(t, "size", &m.StateSize)
				err = c.Ack(int64Arg(t, d, "now"), int64Arg(t, d, "id"), task, st, m)
			case "decline":
				var reason string
				d.MaybeScanArgs(t, "reason", &reason)
				err = c.Decline(int64Arg(t, d, "now"), int64Arg(t, d, "id"), taskArg(t, d, "task"), reason)
			case "finished":
				c.TaskFinished(taskArg(t, d, "task"))
			case "ended-input":
				c.TaskEndedInput(int64Arg(t, d, "now"), taskArg(t, d, "task"))
			case "trigger-failed":
				var reason string
				d.MaybeScanArgs(t, "reason", &reason)
				c.TriggerFailed(int64Arg(t, d, "now"), int64Arg(t, d, "id"), reason)
			case "persisted":
				var perr error
				if arg, ok := d.Arg("err"); ok {
					perr = errors.New(arg.SingleVal(t))
				}
				c.Persisted(int64Arg(t, d, "id"), perr)
			case "stop":
				c.Stop()
			case "hold":
				c.HoldTriggers()
			case "abort-pending":
				var reason string
				d.MaybeScanArgs(t, "reason", &reason)
				c.AbortPending(int64Arg(t, d, "now"), reason)
			case "recover":
				kind := KindCheckpoint
				if arg, ok := d.Arg("kind"); ok && arg.SingleVal(t) == "savepoint" {
					kind = KindSavepoint
				}
				var cps []Completed
				arg, _ := d.Arg("ids")
				for _, s := range strings.Split(arg.SingleVal(t), ",") {
					id, perr := strconv.ParseInt(s, 10, 64)
					if perr != nil {
						d.Fatalf(t, "bad id %q: %v", s, perr)
					}
					cps = append(cps, Completed{ID: id, Kind: kind})
				}
				err = c.Recover(cps)
			case "pending":
				ids := c.Pending()
				if len(ids) == 0 {
					return "pending: none\n"
				}
				return fmt.Sprintf("pending: %v\n", ids)
			case "completed":
				return printCompleted(c)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return result(c.Ready(), err)
		})
	})
}

// sentinels are the errors a scenario names when an error wraps them.
var sentinels = []struct {
	name string
	err  error
}{
	{"invalid config", ErrInvalidConfig},
	{"unknown checkpoint", ErrUnknownCheckpoint},
	{"unknown task", ErrUnknownTask},
	{"duplicate ack", ErrDuplicateAck},
	{"task finished", ErrTaskFinished},
	{"stopped", ErrStopped},
	{"all tasks finished", ErrAllTasksFinished},
}

func result(actions []CoordinatorAction, err error) string {
	var b strings.Builder
	for _, a := range actions {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	if err != nil {
		var kinds []string
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				kinds = append(kinds, s.name)
			}
		}
		// errors.Join separates the errors of Validate by newlines.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(&b, "error: %s\n", line)
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

func printCompleted(c *Coordinator) string {
	var b strings.Builder
	for _, cp := range c.Completed() {
		fmt.Fprintf(&b, "%s %d trigger=%d done=%d tasks:", cp.Kind, cp.ID, cp.Trigger, cp.Done)
		for _, st := range cp.Tasks {
			op := "-"
			if v, ok := st.Operator["op"]; ok {
				op = string(v)
			}
			fmt.Fprintf(&b, " %s=%s", st.Task, op)
			if m, ok := cp.Metrics[st.Task]; ok {
				fmt.Fprintf(&b, "(size %d)", m.StateSize)
			}
		}
		b.WriteByte('\n')
	}
	if latest, ok := c.LatestCompleted(); ok {
		fmt.Fprintf(&b, "latest: %d\n", latest.ID)
	} else {
		b.WriteString("latest: none\n")
	}
	return b.String()
}

func configArg(t *testing.T, d *datadriven.TestData) Config {
	var cfg Config
	d.MaybeScanArgs(t, "interval", &cfg.Interval)
	d.MaybeScanArgs(t, "initial-delay", &cfg.InitialDelay)
	d.MaybeScanArgs(t, "min-pause", &cfg.MinPause)
	d.MaybeScanArgs(t, "max-concurrent", &cfg.MaxConcurrent)
	d.MaybeScanArgs(t, "timeout", &cfg.Timeout)
	d.MaybeScanArgs(t, "tolerable", &cfg.TolerableFailures)
	d.MaybeScanArgs(t, "retain", &cfg.Retain)
	return cfg
}

func int64Arg(t *testing.T, d *datadriven.TestData, key string) int64 {
	var v int64
	d.ScanArgs(t, key, &v)
	return v
}

func taskArg(t *testing.T, d *datadriven.TestData, key string) TaskID {
	var s string
	d.ScanArgs(t, key, &s)
	return parseTask(t, d, s)
}

func parseTask(t *testing.T, d *datadriven.TestData, s string) TaskID {
	chain, sub, ok := strings.Cut(s, "/")
	c, err1 := strconv.Atoi(chain)
	st, err2 := strconv.Atoi(sub)
	if !ok || err1 != nil || err2 != nil {
		d.Fatalf(t, "bad task %q: want chain/subtask", s)
	}
	return TaskID{Chain: c, Subtask: st}
}

// TestCoordinatorProperties drives coordinators with random event sequences
// and checks, on the actions they produce, the invariants that exactly-once
// recovery rests on.
func TestCoordinatorProperties(t *testing.T) {
	const seeds, steps = 1000, 500
	var total runStats
	for seed := range uint64(seeds) {
		s := checkRandomRun(t, seed, steps)
		total.completed += s.completed
		total.aborted += s.aborted
		total.failJobs += s.failJobs
	}
	// The runs must exercise completions, aborts and failed jobs, or the
	// invariants above were checked against nothing.
	if total.completed == 0 || total.aborted == 0 || total.failJobs == 0 {
		t.Fatalf("random runs reached too little: %+v", total)
	}
	t.Logf("random runs: %+v", total)
}

// runStats counts what a random run did, so that the property test can
// check that its runs reach every outcome.
type runStats struct {
	completed, aborted, failJobs int
}

func checkRandomRun(t *testing.T, seed uint64, steps int) runStats {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := Config{
		Interval:          int64(rng.IntN(3)) * int64(20+rng.IntN(80)), // 0 disables periodic triggers
		InitialDelay:      int64(rng.IntN(50)),
		MinPause:          int64(rng.IntN(3)) * int64(rng.IntN(40)),
		MaxConcurrent:     rng.IntN(4),
		Timeout:           int64(50 + rng.IntN(300)),
		TolerableFailures: rng.IntN(6) - 1,
		Retain:            rng.IntN(4),
	}
	maxConcurrent := max(cfg.MaxConcurrent, DefaultMaxConcurrent)
	retain := max(cfg.Retain, DefaultRetain)
	var tasks []TaskID
	for chain := range 1 + rng.IntN(3) {
		for sub := range 1 + rng.IntN(3) {
			tasks = append(tasks, TaskID{Chain: chain, Subtask: sub})
		}
	}
	first := int64(1 + rng.IntN(100))
	now := int64(rng.IntN(1000))
	c, err := NewCoordinator(cfg, tasks, first, now)
	if err != nil {
		t.Fatalf("seed %d: NewCoordinator(%+v): %v", seed, cfg, err)
	}
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d (config %+v): %s", seed, step, cfg, fmt.Sprintf(format, args...))
	}

	// What the actions told so far.
	kinds := map[int64]Kind{}         // triggered ids
	persisted := map[int64]bool{}     // Persisted(id, nil) was reported after a Persist
	persistIssued := map[int64]bool{} // a Persist was emitted
	aborted := map[int64]bool{}       // NotifyAborted was emitted
	completed := map[int64]bool{}     // NotifyComplete was emitted
	discarded := map[int64]bool{}     // Discard was emitted
	lastID := first - 1               // the highest id triggered
	var outstanding []int64           // Persists emitted and not yet reported
	var failJobs int
	var stopped bool

	check := func(step int) {
		for _, a := range c.Ready() {
			switch a := a.(type) {
			case Trigger:
				if a.ID <= lastID {
					fail(step, "trigger %d after %d: ids must strictly increase", a.ID, lastID)
				}
				if failJobs > 0 || stopped {
					fail(step, "trigger %d after FailJob or Stop", a.ID)
				}
				lastID = a.ID
				kinds[a.ID] = a.Kind
			case Persist:
				id := a.Checkpoint.ID
				if _, ok := kinds[id]; !ok || aborted[id] || completed[id] {
					fail(step, "persist of %d, which is not pending", id)
				}
				if len(a.Checkpoint.Tasks) != len(tasks) {
					fail(step, "persist of %d with %d task states, want %d", id, len(a.Checkpoint.Tasks), len(tasks))
				}
				persistIssued[id] = true
				outstanding = append(outstanding, id)
				if len(outstanding) > 1 {
					fail(step, "persists %v outstanding at once", outstanding)
				}
			case NotifyComplete:
				if !persistIssued[a.ID] || !persisted[a.ID] {
					fail(step, "notify-complete %d without a Persist and a successful Persisted", a.ID)
				}
				if aborted[a.ID] {
					fail(step, "notify-complete %d after notify-aborted", a.ID)
				}
				if completed[a.ID] {
					fail(step, "notify-complete %d twice", a.ID)
				}
				completed[a.ID] = true
			case NotifyAborted:
				if completed[a.ID] {
					fail(step, "notify-aborted %d after notify-complete", a.ID)
				}
				if aborted[a.ID] {
					fail(step, "notify-aborted %d twice", a.ID)
				}
				if _, ok := kinds[a.ID]; !ok {
					fail(step, "notify-aborted %d, never triggered", a.ID)
				}
				aborted[a.ID] = true
			case Discard:
				if discarded[a.ID] {
					fail(step, "discard %d twice", a.ID)
				}
				if kinds[a.ID] == KindSavepoint && completed[a.ID] {
					fail(step, "discard of completed savepoint %d", a.ID)
				}
				if !aborted[a.ID] && !completed[a.ID] {
					fail(step, "discard %d of a checkpoint that has not ended", a.ID)
				}
				discarded[a.ID] = true
			case FailJob:
				failJobs++
				if failJobs > 1 {
					fail(step, "FailJob twice")
				}
				if cfg.TolerableFailures < 0 {
					fail(step, "FailJob with unlimited tolerable failures")
				}
			default:
				fail(step, "unexpected action %T", a)
			}
		}
		periodic := 0
		for _, id := range c.Pending() {
			if kinds[id] == KindCheckpoint {
				periodic++
			}
		}
		if periodic > maxConcurrent {
			fail(step, "%d periodic checkpoints pending, at most %d allowed", periodic, maxConcurrent)
		}
		retained := c.Completed()
		if len(retained) > retain {
			fail(step, "%d checkpoints retained, at most %d", len(retained), retain)
		}
		for _, cp := range retained {
			if !completed[cp.ID] || discarded[cp.ID] || cp.Kind != KindCheckpoint {
				fail(step, "retained %s %d is not a live completed checkpoint", cp.Kind, cp.ID)
			}
		}
	}

	// anyID picks an id that is pending, recently triggered, or never triggered.
	anyID := func() int64 {
		if p := c.Pending(); len(p) > 0 && rng.IntN(4) > 0 {
			return p[rng.IntN(len(p))]
		}
		return first - 2 + rng.Int64N(lastID-first+5)
	}
	for step := range steps {
		now += int64(rng.IntN(30))
		task := tasks[rng.IntN(len(tasks))]
		switch r := rng.IntN(100); {
		case r < 30:
			c.Tick(now)
		case r < 65:
			id := anyID()
			err := c.Ack(now, id, task, SubtaskState{Task: task}, Metrics{})
			if err != nil && !errors.Is(err, ErrUnknownCheckpoint) && !errors.Is(err, ErrDuplicateAck) && !errors.Is(err, ErrTaskFinished) {
				fail(step, "ack %d from %s: unexpected error %v", id, task, err)
			}
		case r < 70:
			c.Decline(now, anyID(), task, "random")
		case r < 85:
			if len(outstanding) > 0 {
				id := outstanding[0]
				outstanding = outstanding[1:]
				var err error
				if rng.IntN(4) == 0 {
					err = errors.New("disk full")
				} else {
					persisted[id] = true
				}
				c.Persisted(id, err)
			}
		case r < 90:
			if _, err := c.TriggerSavepoint(now); err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrAllTasksFinished) {
				fail(step, "savepoint: unexpected error %v", err)
			}
		case r < 93:
			c.TaskFinished(task)
		case r < 94:
			c.Stop()
			stopped = true
		default:
			// A Persisted for an id that is not outstanding changes nothing.
			if id := anyID(); !slices.Contains(outstanding, id) {
				c.Persisted(id, nil)
				if a := c.Ready(); len(a) > 0 {
					fail(step, "Persisted(%d) for an id not outstanding produced %v", id, a)
				}
			}
		}
		check(step)
	}
	// Every checkpoint that ended was discarded unless it completed; a
	// completed periodic checkpoint is discarded unless retained.
	live := map[int64]bool{}
	for _, cp := range c.Completed() {
		live[cp.ID] = true
	}
	pend := map[int64]bool{}
	for _, id := range c.Pending() {
		pend[id] = true
	}
	for id, kind := range kinds {
		switch {
		case pend[id]:
		case aborted[id] && !discarded[id]:
			t.Fatalf("seed %d: aborted %d was never discarded", seed, id)
		case completed[id] && kind == KindCheckpoint && !live[id] && !discarded[id]:
			t.Fatalf("seed %d: completed checkpoint %d is neither retained nor discarded", seed, id)
		case !aborted[id] && !completed[id]:
			t.Fatalf("seed %d: %d is neither pending nor ended", seed, id)
		}
	}
	retained := c.Completed()
	for i := 1; i < len(retained); i++ {
		if retained[i].ID <= retained[i-1].ID {
			t.Fatalf("seed %d: retained checkpoints %d, %d out of order", seed, retained[i-1].ID, retained[i].ID)
		}
	}
	if latest, ok := c.LatestCompleted(); ok != (len(retained) > 0) || ok && latest.ID != retained[len(retained)-1].ID {
		t.Fatalf("seed %d: LatestCompleted %d (%t) is not the newest retained checkpoint", seed, latest.ID, ok)
	}
	return runStats{completed: len(completed), aborted: len(aborted), failJobs: failJobs}
}
