package lifecycle

import (
	"fmt"
	"maps"
	"slices"
)

// Job is the lifecycle of one job. It is a pure state machine: it starts no
// goroutines, reads no clock and does no IO. Its methods take events, with
// the time in milliseconds; Ready hands back the actions they produced. It
// is not safe for concurrent use.
type Job struct {
	cfg   Config
	state State
	now   int64

	started  bool // Submit or Resume came
	attempt  int  // the current attempt (deployed, or to deploy next)
	origin   origin
	restarts int
	log      []Restart
	// cause is the latest restart's cause, or the one a RESTARTING job is
	// restarting for.
	cause string
	// cancel: the user cancelled the job.
	cancel bool
	a      attempt
	// delay and restartAt: a RESTARTING job's delay, and when its next
	// attempt is due once the failed one has ended.
	delay     int64
	restartAt int64
	result    *Result
	// recancel says when each worker was last told to cancel an attempt,
	// so that heartbeats that still list it repeat the cancel only now
	// and then.
	recancel map[cancelKey]int64

	// upg is where an upgrade stands; upgSavepoint its savepoint's id
	// (once known); upgCause why its new attempt is rolled back; module
	// the module the next Deploy asks for.
	upg          upgradePhase
	upgSavepoint int64
	upgCause     string
	module       Module

	actions []Action
}

// New returns a CREATED job at attempt 0.
func New(cfg Config) (*Job, error) {
	switch {
	case cfg.RecancelAfter < 0:
		return nil, fmt.Errorf("lifecycle: RecancelAfter %d must be ≥ 0", cfg.RecancelAfter)
	case cfg.MissedHeartbeats < 0:
		return nil, fmt.Errorf("lifecycle: MissedHeartbeats %d must be ≥ 0", cfg.MissedHeartbeats)
	}
	if cfg.RecancelAfter == 0 {
		cfg.RecancelAfter = DefaultRecancelAfter
	}
	if cfg.MissedHeartbeats == 0 {
		cfg.MissedHeartbeats = DefaultMissedHeartbeats
	}
	return &Job{cfg: cfg, state: Created, recancel: map[cancelKey]int64{}}, nil
}

// Recover gives a job its history from its stored spec or record: last is
// the attempt that ran last, restarts the restarts counted so far and log
// their causes. The job's next attempt is last+1. It must come before
// Submit or Resume.
func (j *Job) Recover(last, restarts int, log []Restart) error {
	if j.started || j.state != Created {
		return errorf(ErrState, "lifecycle: Recover must come before Submit and Resume")
	}
	if last < 0 || restarts < 0 {
		return fmt.Errorf("lifecycle: recovered attempt %d and restarts %d must be ≥ 0", last, restarts)
	}
	j.attempt = last + 1
	j.restarts = restarts
	j.log = slices.Clone(log)
	if len(log) > 0 {
		j.cause = log[len(log)-1].Cause
	}
	return nil
}

// Ready returns the actions produced since the last call, in the order they
// must be carried out.
func (j *Job) Ready() []Action {
	a := j.actions
	j.actions = nil
	return a
}

// State returns the job's state.
func (j *Job) State() State { return j.state }

// Attempt returns the current attempt: the one deployed, or the one to
// deploy next.
func (j *Job) Attempt() int { return j.attempt }

// Restarts returns the number of restarts the restart strategy has made.
func (j *Job) Restarts() int { return j.restarts }

// Cause returns the cause of the latest restart (of the one under way in
// RESTARTING), "" before the first.
func (j *Job) Cause() string { return j.cause }

// Log returns the job's restarts, oldest first.
func (j *Job) Log() []Restart { return slices.Clone(j.log) }

// Result returns how the job ended, once it has.
func (j *Job) Result() (Result, bool) {
	if j.result == nil {
		return Result{}, false
	}
	return *j.result, true
}

// Stopping reports whether a stop with savepoint was requested and has
// neither completed nor failed.
func (j *Job) Stopping() bool { return j.a.stopping }

// Upgrading reports whether an upgrade was requested and has not ended.
func (j *Job) Upgrading() bool { return j.upg != upgNone }

// AwaitsPlacement reports whether attempt n waits for its placement: its
// Deploy was emitted and nothing has made it unwanted since.
func (j *Job) AwaitsPlacement(n int) bool {
	return !j.state.Terminal() && n == j.attempt && j.a.phase == requested
}

// RestartDue returns when the next attempt of a RESTARTING job whose failed
// attempt has ended is due.
func (j *Job) RestartDue() (int64, bool) {
	if j.state != Restarting || j.a.phase != idle {
		return 0, false
	}
	return j.restartAt, true
}

// Submit starts a new job (or, after Recover, one a client resumes): its
// spec is persisted and its first attempt deployed.
func (j *Job) Submit(now int64) error {
	return j.start(now, submitted)
}

// Resume starts a job recovered from the HA store (after Recover): a new
// attempt from the latest completed checkpoint. The coordinator restart
// enters the restart log without counting as a restart.
func (j *Job) Resume(now int64) error {
	return j.start(now, resumed)
}

func (j *Job) start(now int64, o origin) error {
	j.advance(now)
	if j.state != Created || j.started {
		return errorf(ErrState, "lifecycle: the job is %s, not a CREATED job waiting to start", j.state)
	}
	j.started = true
	j.origin = o
	if o == resumed {
		// seed 002 §6.2: the new coordinator takes the job over from its
		// stored metadata and latest checkpoint.
		cause := "the coordinator restarted: attempt resumed by a new coordinator"
		j.log = append(j.log, Restart{Attempt: j.attempt - 1, Cause: cause, At: j.now})
		j.cause = cause
	}
	j.persist()
	j.requestDeploy()
	return nil
}

// requestDeploy asks for the current attempt.
func (j *Job) requestDeploy() {
	j.a = attempt{phase: requested}
	d := Deploy{Attempt: j.attempt, Restore: RestoreLatest}
	if j.attempt == 0 {
		d.Restore = RestoreNone
		if j.cfg.FromSavepoint {
			d.Restore = RestoreSavepoint
		}
	}
	_, d.Restartable = j.restartAllowed()
	if j.module != ModuleCurrent {
		d.Restore, d.Module = RestoreUpgrade, j.module
		// A failure of the new module's attempt is followed by the old
		// module's: sinks keep their files for it.
		d.Restartable = d.Restartable || j.module == ModuleNew
		j.module = ModuleCurrent
	}
	j.emit(d)
}

func (j *Job) restartAllowed() (int64, bool) {
	if j.cfg.Restart == nil {
		return 0, false
	}
	return j.cfg.Restart.DelayBefore(j.restarts + 1)
}

// doomed reports whether the current attempt will not run to its end: it
// failed, or the job is being cancelled.
func (j *Job) doomed() bool {
	return j.state == Failing || j.state == Cancelling || j.a.failure != "" || j.cancel
}

// fail records the attempt's first failure and decides: RESTARTING when
// the restart strategy allows another restart, FAILING otherwise (seed 002
// §6.1). A job being cancelled stays CANCELLING.
func (j *Job) fail(reason string) {
	if j.a.failure != "" {
		if j.a.secondary && !j.state.Terminal() {
			// The root cause arrived after a consequence of it.
			j.a.failure, j.a.secondary = reason, false
			if j.state == Restarting {
				j.cause = reason
			}
		}
		return
	}
	j.a.failure = reason
	j.a.stopping = false
	if j.cancel {
		return
	}
	switch j.upg {
	case upgBarrier, upgStopping:
		// The old module failed before it stopped for the upgrade: the
		// job fails over as usual, on the old module.
		j.upg = upgNone
		j.emit(UpgradeEnded{Attempt: j.attempt, Outcome: UpgradeAborted, Savepoint: j.upgSavepoint,
			Cause: "the job failed before the old module stopped for the upgrade: " + reason})
	case upgTrying:
		// The new module failed on probation: the old one runs again
		// from the same savepoint, whatever the restart strategy says.
		j.upg, j.upgCause = upgRollingBack, reason
		j.setState(Restarting)
		return
	}
	if delay, ok := j.restartAllowed(); ok {
		j.delay = delay
		j.cause = reason
		j.setState(Restarting)
		return
	}
	j.setState(Failing)
}

// failAfterPeer is fail for a consequence of another subtask's failure.
func (j *Job) failAfterPeer(reason string) {
	if j.a.failure != "" {
		return
	}
	j.fail(reason)
	j.a.secondary = true
}

// settle carries out what the attempt's state asks for once it is
// deployed: a doomed attempt is cancelled on its live workers, a lost
// worker is told to cancel it too (it may only be cut off) and its
// unreported subtasks count as ended, and an attempt whose subtasks have
// all ended ends. A doomed attempt's checkpoints go on until then: one
// that its failed subtask acknowledged before failing may still complete,
// and the restart restores it (Flink aborts, at a task's failure, only the
// pending checkpoints that task did not acknowledge).
func (j *Job) settle() {
	a := &j.a
	if a.phase != deployed {
		// A deployment under way completes first: cancels must not
		// overtake it.
		return
	}
	if j.doomed() && !a.cancelSent {
		a.cancelSent = true
		j.cancelOn(j.attempt, j.running(), a.failure != "")
	}
	for _, w := range sorted(slices.Collect(maps.Keys(a.lost))) {
		if a.accounted[w] {
			continue
		}
		a.accounted[w] = true
		owed := a.tasks[w] - a.reported[w]
		a.reported[w] = a.tasks[w]
		a.ended += owed
		if _, told := j.recancel[cancelKey{w, j.attempt}]; !told {
			j.cancelOn(j.attempt, []string{w}, true)
		}
	}
	if a.ended == a.total {
		j.attemptEnded()
		return
	}
	if j.doomed() && a.ckpt == ckptStarted {
		// No trigger outside RUNNING: a new barrier would only meet
		// subtasks being cancelled. What they acknowledged may complete.
		a.ckpt = ckptHeld
		j.emit(HoldCheckpoints{Attempt: j.attempt})
	}
}

// running lists the attempt's workers that are not lost and still run
// some of its subtasks (not all of them reported their end).
func (j *Job) running() []string {
	var out []string
	for w, k := range j.a.tasks {
		if j.a.lost[w] == "" && j.a.reported[w] < k {
			out = append(out, w)
		}
	}
	return sorted(out)
}

// cancelOn tells workers to cancel attempt n, and notes when, so that
// heartbeats listing it repeat the cancel only after RecancelAfter.
func (j *Job) cancelOn(n int, workers []string, failed bool) {
	if len(workers) == 0 {
		return
	}
	workers = sorted(workers)
	for _, w := range workers {
		j.recancel[cancelKey{w, n}] = j.now
	}
	j.emit(CancelAttempt{Attempt: n, Workers: workers, Failed: failed})
}

// attemptEnded runs when every subtask of the deployed attempt has ended.
func (j *Job) attemptEnded() {
	a := &j.a
	a.phase = over
	switch j.state {
	case Running:
		switch {
		case a.finished == a.total:
			j.end(Finished, "")
		case a.stopped && j.upg == upgStopping:
			// The old module stopped at the upgrade's savepoint.
			j.setState(Restarting)
			j.upg = upgTrying
			j.nextAttempt(ModuleNew)
		case a.stopped:
			j.end(Finished, "")
		default:
			// Subtasks cancelled on their workers' own account (a worker
			// that shuts down cancels what it runs).
			j.end(Canceled, "")
		}
	case Failing:
		j.end(Failed, a.failure)
	case Cancelling:
		j.end(Canceled, "")
	case Restarting:
		if j.upg == upgRollingBack {
			j.rollBack()
			return
		}
		j.restartNext()
	}
}

// restartNext ends the current attempt, which failed, and schedules the
// next one after the restart strategy's delay.
func (j *Job) restartNext() {
	cause := j.a.failure
	j.stopCheckpoints()
	j.releaseSlots()
	j.restarts++
	j.log = append(j.log, Restart{Attempt: j.attempt, Cause: cause, At: j.now})
	j.cause = cause
	j.attempt++
	j.a = attempt{}
	j.restartAt = j.now + j.delay
	j.persist()
	j.emit(ScheduleRestart{Attempt: j.attempt, Restart: j.restarts, At: j.restartAt, Cause: j.cause})
}

// nextAttempt ends the current attempt for an upgrade or its roll-back
// and deploys the next one with module m from the upgrade's savepoint.
func (j *Job) nextAttempt(m Module) {
	j.stopCheckpoints()
	j.releaseSlots()
	j.attempt++
	j.a = attempt{}
	j.origin = upgraded
	j.module = m
	j.persist()
	j.requestDeploy()
}

// rollBack deploys the old module again after the new one failed on
// probation. The roll-back enters the restart log, without counting as a
// restart of the restart strategy.
func (j *Job) rollBack() {
	cause := "upgrade rolled back: " + j.upgCause
	j.log = append(j.log, Restart{Attempt: j.attempt, Cause: cause, At: j.now})
	j.cause = cause
	j.upg = upgNone
	j.emit(UpgradeEnded{Attempt: j.attempt + 1, Outcome: UpgradeRolledBack, Savepoint: j.upgSavepoint, Cause: j.upgCause})
	j.nextAttempt(ModuleOld)
	// Its deployment is no longer the upgrade's: a failure of it ends the
	// job as any failed deployment does.
	j.origin = rolledBack
}

// end ends the job: checkpoints stop, slots are released, the data stream
// goes, the spec is persisted with the result, and the result published.
func (j *Job) end(s State, reason string) {
	j.a.phase = over
	j.stopCheckpoints()
	j.releaseSlots()
	j.setState(s)
	r := Result{State: s, Restarts: j.restarts}
	if s == Failed {
		r.Error = reason
		switch j.restarts {
		case 0:
		case 1:
			r.Error += " (after 1 restart)"
		default:
			r.Error += fmt.Sprintf(" (after %d restarts)", j.restarts)
		}
	}
	if s == Finished && j.a.stopped && j.a.finished < j.a.total {
		r.Stopped, r.Savepoint = true, j.a.stopID
	}
	j.result = &r
	if j.upg != upgNone {
		u := UpgradeEnded{Attempt: j.attempt, Outcome: UpgradeAborted, Savepoint: j.upgSavepoint, Cause: "the job ended " + s.String()}
		if j.upg == upgTrying && s == Finished {
			u.Outcome, u.Cause = UpgradeDone, ""
		}
		j.upg = upgNone
		j.emit(u)
	}
	j.emit(DropDataStream{})
	j.persist()
	j.emit(PublishResult{Result: r})
}

func (j *Job) stopCheckpoints() {
	switch j.a.ckpt {
	case ckptMade, ckptStarted, ckptHeld:
		j.a.ckpt = ckptStopped
		j.emit(StopCheckpoints{Attempt: j.attempt})
	}
}

func (j *Job) releaseSlots() {
	if j.a.slots {
		j.a.slots = false
		j.emit(ReleaseSlots{Attempt: j.attempt})
	}
}

func (j *Job) persist() {
	j.emit(PersistSpec{State: j.state, Attempt: j.attempt, Restarts: j.restarts})
}

func (j *Job) setState(s State) { j.state = s }

func (j *Job) stale(what string, n int) error {
	var where string
	switch j.a.phase {
	case idle:
		where = "waits to deploy it"
		if j.state == Created && !j.started {
			where = "has not started"
		}
	case requested:
		where = "waits for its placement"
	case placed:
		where = "is deploying it"
	case deployed:
		where = "runs it"
	case over:
		where = "has ended it"
	}
	return errorf(ErrStale, "lifecycle: %s of attempt %d: the job is %s at attempt %d and %s", what, n, j.state, j.attempt, where)
}

// advance moves the time forward, never back.
func (j *Job) advance(now int64) {
	if now > j.now {
		j.now = now
	}
}

func (j *Job) emit(a Action) { j.actions = append(j.actions, a) }

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func uniq(s []int) []int {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
