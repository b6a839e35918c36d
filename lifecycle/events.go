package lifecycle

import (
	"fmt"
	"maps"
)

// Placed reports that attempt n's subtasks have slots: tasks counts them
// per worker. It wraps ErrStale when the attempt is not waiting for its
// placement (the job was cancelled meanwhile): the driver releases the
// slots and deploys nothing.
func (j *Job) Placed(now int64, n int, tasks map[string]int) error {
	j.advance(now)
	if !j.AwaitsPlacement(n) {
		return j.stale("placement", n)
	}
	total := 0
	for w, k := range tasks {
		if k <= 0 {
			return fmt.Errorf("lifecycle: placement of attempt %d gives worker %s %d subtasks", n, w, k)
		}
		total += k
	}
	if total == 0 {
		return fmt.Errorf("lifecycle: placement of attempt %d has no subtask", n)
	}
	j.a.phase = placed
	j.a.tasks = maps.Clone(tasks)
	j.a.total = total
	j.a.reported = map[string]int{}
	j.a.lost = map[string]string{}
	j.a.accounted = map[string]bool{}
	j.a.missing = map[string]int{}
	j.a.slots = true
	if j.cfg.Checkpoints {
		// The driver makes the attempt's checkpoint driver with its
		// deployment: the deployment names the checkpoint it restores.
		j.a.ckpt = ckptMade
	}
	return nil
}

// Deployed reports that every worker took its part of attempt n. The job
// is RUNNING unless something doomed the attempt meanwhile, whose cancels
// go out now.
func (j *Job) Deployed(now int64, n int) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: deployment of attempt %d: the job is %s", n, j.state)
	}
	if n != j.attempt || j.a.phase != placed {
		return j.stale("deployment", n)
	}
	j.a.phase = deployed
	if !j.doomed() {
		j.setState(Running)
		if j.a.ckpt == ckptMade && j.a.ended < j.a.total {
			// seed 002 §3.2: the checkpoint scheduler starts when the job
			// turns RUNNING.
			j.a.ckpt = ckptStarted
			j.emit(StartCheckpoints{Attempt: n})
		}
	}
	j.settle()
	return nil
}

// DeployFailed reports that attempt n could not be deployed (no placement,
// or a worker refused its part, or what it restores could not be read):
// took lists the workers that took theirs. A new job's first deployment
// that fails ends it FAILED; any later one (a restart's, a resumed or
// rolled-back attempt's) is a failure of the attempt like any other and
// goes through the restart strategy: the job is RESTARTING while it allows
// another restart, FAILED otherwise. A job cancelled meanwhile ends
// CANCELED.
func (j *Job) DeployFailed(now int64, n int, reason string, took []string) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: failed deployment of attempt %d: the job is %s", n, j.state)
	}
	if n != j.attempt || (j.a.phase != requested && j.a.phase != placed) {
		return j.stale("failed deployment", n)
	}
	j.cancelOn(n, took, true)
	j.a.phase = over
	if j.cancel {
		j.end(Canceled, "")
		return nil
	}
	why := reason
	switch j.origin {
	case restarted:
		why = fmt.Sprintf("restart %d: %s", j.restarts, reason)
	case resumed:
		why = fmt.Sprintf("resuming attempt %d: %s", n, reason)
	case upgraded:
		if j.upg == upgTrying {
			// The new module could not be deployed (a restore or a
			// migration failed on a worker): the old one runs again.
			j.upgCause = reason
			j.setState(Restarting)
			j.rollBack()
			return nil
		}
		why = fmt.Sprintf("deploying attempt %d after an upgrade: %s", n, reason)
	case rolledBack:
		why = fmt.Sprintf("deploying the old module again after the upgrade was rolled back: %s", reason)
	}
	if j.origin != submitted {
		if delay, ok := j.restartAllowed(); ok {
			// A lost worker's slots, a KV or storage read that times out:
			// such faults pass, and the next attempt may well deploy.
			j.a.failure = why
			j.delay = delay
			j.setState(Restarting)
			j.restartNext()
			return nil
		}
	}
	j.end(Failed, why)
	return nil
}

// TaskEnded reports that a subtask of attempt n on worker ended; reason is
// a failed subtask's error. It wraps ErrStale for another attempt, a lost
// worker (its subtasks were counted when it was lost) and a worker with no
// subtask left to report, and ErrEnded after the job's end.
func (j *Job) TaskEnded(now int64, n int, worker string, end TaskEnd, reason string) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: subtask end on %s of attempt %d: the job is %s", worker, n, j.state)
	}
	a := &j.a
	if n != j.attempt || (a.phase != placed && a.phase != deployed) {
		return j.stale("subtask end", n)
	}
	if why := a.lost[worker]; why != "" {
		return errorf(ErrStale, "lifecycle: subtask end on %s of attempt %d: the worker was lost (%s)", worker, n, why)
	}
	if a.tasks[worker] == 0 {
		return errorf(ErrStale, "lifecycle: subtask end on %s of attempt %d: no subtask of the attempt runs there", worker, n)
	}
	if a.reported[worker] >= a.tasks[worker] {
		return errorf(ErrStale, "lifecycle: subtask end on %s of attempt %d: its %d subtasks there have all reported", worker, n, a.tasks[worker])
	}
	a.reported[worker]++
	a.ended++
	switch end {
	case TaskFinished:
		a.finished++
	case TaskFailed, TaskFailedAfterPeer:
		if reason == "" {
			reason = fmt.Sprintf("a subtask on worker %s failed", worker)
		}
		if end == TaskFailedAfterPeer {
			j.failAfterPeer(reason)
		} else {
			j.fail(reason)
		}
	}
	j.settle()
	return nil
}

// WorkerLost reports that worker was declared lost: its subtasks of the
// current attempt that did not report count as ended, and the attempt
// fails with reason (unless it failed already or is being cancelled).
// Workers without subtasks of the current attempt are none of the job's
// business.
func (j *Job) WorkerLost(now int64, worker, reason string) {
	j.advance(now)
	a := &j.a
	if j.state.Terminal() || (a.phase != placed && a.phase != deployed) || a.tasks[worker] == 0 || a.lost[worker] != "" {
		return
	}
	if reason == "" {
		reason = fmt.Sprintf("worker %s lost", worker)
	}
	a.lost[worker] = reason
	j.fail(reason)
	j.settle()
}

// Heartbeat reports a worker's heartbeat and the attempts of this job it
// lists. Attempts the job no longer runs are cancelled there (see doc.go,
// "Stale events"). When the current attempt has subtasks on the worker that
// never reported their end and Config.MissedHeartbeats heartbeats in a row
// do not list it, those reports were lost (published while NATS was
// unreachable): they count as ended and the attempt fails.
func (j *Job) Heartbeat(now int64, worker string, listed []int) {
	j.advance(now)
	if j.state == Suspended {
		// The next coordinator decides about the attempts that run.
		return
	}
	for k, t := range j.recancel {
		if j.now-t > 60*j.cfg.RecancelAfter {
			delete(j.recancel, k)
		}
	}
	listsCurrent := false
	for _, n := range uniq(listed) {
		if n == j.attempt {
			listsCurrent = true
		}
		if !j.staleListing(n) {
			continue
		}
		if t, ok := j.recancel[cancelKey{worker, n}]; ok && j.now-t < j.cfg.RecancelAfter {
			continue
		}
		j.cancelOn(n, []string{worker}, true)
	}
	a := &j.a
	if j.state.Terminal() || a.phase != deployed || a.tasks[worker] == 0 || a.lost[worker] != "" {
		return
	}
	owed := a.tasks[worker] - a.reported[worker]
	if owed <= 0 || listsCurrent {
		delete(a.missing, worker)
		return
	}
	a.missing[worker]++
	if a.missing[worker] < j.cfg.MissedHeartbeats {
		return
	}
	delete(a.missing, worker)
	a.reported[worker] += owed
	a.ended += owed
	j.fail(fmt.Sprintf("worker %s no longer runs attempt %d, but %d of its subtasks there never reported their end (reports lost while NATS was unreachable)",
		worker, j.attempt, owed))
	j.settle()
}

// staleListing reports whether a worker that lists attempt n should be told
// to cancel it.
func (j *Job) staleListing(n int) bool {
	switch {
	case j.state.Ended(), n < j.attempt:
		return true
	case n > j.attempt:
		// Not one of this coordinator's: leave it to whoever deployed it.
		return false
	}
	return j.a.phase == deployed && j.doomed()
}

// Cancel cancels the job. Nothing runs before the deployment of an
// attempt (CREATED, or RESTARTING during the delay): the job ends CANCELED
// at once. A deployed attempt is cancelled and the job is CANCELLING until
// its subtasks have ended. A FAILING job stays FAILING: it fails anyway.
// It wraps ErrEnded after the job's end.
func (j *Job) Cancel(now int64) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: cancel: the job is %s", j.state)
	}
	if j.state == Failing || j.state == Cancelling {
		return nil
	}
	j.cancel = true
	switch j.a.phase {
	case idle, requested:
		// A placement made meanwhile is refused (Placed: ErrStale).
		j.end(Canceled, "")
	default:
		j.setState(Cancelling)
		j.settle()
	}
	return nil
}

// StopRequested records that a stop with savepoint was asked for: the
// savepoint goes out, and the job stays RUNNING until StopCompleted or
// StopFailed. It wraps ErrState unless the job is RUNNING.
func (j *Job) StopRequested(now int64) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: stop with savepoint: the job is %s", j.state)
	}
	if j.state != Running {
		return errorf(ErrState, "lifecycle: stop with savepoint: the job is %s, not RUNNING: try again", j.state)
	}
	if j.upg != upgNone {
		return errorf(ErrState, "lifecycle: stop with savepoint: an upgrade of the job is under way: try again when it has ended")
	}
	j.a.stopping = true
	return nil
}

// UpgradeRequested records that an upgrade was asked for: its savepoint
// goes out as a stop with savepoint does, and the job stays RUNNING on the
// old module until StopCompleted (the savepoint completed: the subtasks
// stop, and when they have all ended the new module's attempt is deployed
// from it) or StopFailed (the upgrade is aborted and the old module goes
// on). It wraps ErrState unless the job is RUNNING with no stop or upgrade
// under way.
func (j *Job) UpgradeRequested(now int64) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: upgrade: the job is %s", j.state)
	}
	switch {
	case j.state != Running:
		return errorf(ErrState, "lifecycle: upgrade: the job is %s, not RUNNING: try again", j.state)
	case j.upg != upgNone:
		return errorf(ErrState, "lifecycle: upgrade: another upgrade of the job is under way")
	case j.a.stopping || j.a.stopped:
		return errorf(ErrState, "lifecycle: upgrade: the job is being stopped with a savepoint")
	}
	j.a.stopping = true
	j.upg = upgBarrier
	return nil
}

// UpgradeConfirmed reports that attempt n, the new module's, completed a
// checkpoint: the upgrade is done, and a later failure restarts the new
// module as any failure does. It wraps ErrStale unless n is an upgrade's
// attempt on probation.
func (j *Job) UpgradeConfirmed(now int64, n int) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: upgrade confirmation of attempt %d: the job is %s", n, j.state)
	}
	if j.upg != upgTrying || n != j.attempt || j.a.phase != deployed || j.doomed() {
		return j.stale("upgrade confirmation", n)
	}
	j.upg = upgNone
	j.emit(UpgradeEnded{Attempt: n, Outcome: UpgradeDone, Savepoint: j.upgSavepoint})
	return nil
}

// StopCompleted reports that the stop-with-savepoint savepoint id of
// attempt n completed (0: id unknown): the subtasks stop, and when they
// have all ended the job is FINISHED, stopped. Only a RUNNING attempt can
// be stopped; otherwise it wraps ErrStale or ErrState and the job goes on
// as it was (a failure before the completion wins).
func (j *Job) StopCompleted(now int64, n int, id int64) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: stop with savepoint %d: the job is %s", id, j.state)
	}
	if n != j.attempt || j.a.phase != deployed {
		return j.stale("stop with savepoint", n)
	}
	if j.state != Running {
		return errorf(ErrState, "lifecycle: stop with savepoint %d of attempt %d: the job is %s", id, n, j.state)
	}
	j.a.stopping = false
	if !j.a.stopped || id != 0 {
		j.a.stopped, j.a.stopID = true, id
	}
	if j.upg == upgBarrier || j.upg == upgStopping {
		j.upg = upgStopping
		if id != 0 {
			j.upgSavepoint = id
		}
	}
	return nil
}

// StopFailed reports that the stop-with-savepoint savepoint id of attempt n
// failed: the job goes on RUNNING, and its sources resume.
func (j *Job) StopFailed(now int64, n int, id int64, reason string) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: failed stop with savepoint %d: the job is %s", id, j.state)
	}
	if n != j.attempt {
		return j.stale("failed stop with savepoint", n)
	}
	j.a.stopping = false
	if j.upg == upgBarrier {
		j.upg = upgNone
		if reason == "" {
			reason = fmt.Sprintf("savepoint %d failed", id)
		}
		j.emit(UpgradeEnded{Attempt: n, Outcome: UpgradeAborted, Cause: "the upgrade's savepoint failed: " + reason})
	}
	return nil
}

// Fail fails attempt n for a reason of the coordinator's own: more
// consecutive checkpoint failures than tolerated (seed 003,
// CheckpointFailureManager: failJob → failGlobal), or its data stream was
// lost. It wraps ErrStale unless attempt n is the deployed one.
func (j *Job) Fail(now int64, n int, reason string) error {
	j.advance(now)
	if j.state.Terminal() {
		return errorf(ErrEnded, "lifecycle: fail attempt %d: the job is %s", n, j.state)
	}
	if n != j.attempt || j.a.phase != deployed {
		return j.stale("failure", n)
	}
	j.fail(reason)
	j.settle()
	return nil
}

// Tick gives the job the time: a RESTARTING job whose delay has passed
// deploys its next attempt.
func (j *Job) Tick(now int64) {
	j.advance(now)
	if at, ok := j.RestartDue(); ok && j.now >= at {
		j.origin = restarted
		j.requestDeploy()
	}
}

// Suspend lets go of the job: the coordinator shuts down, and the next one
// resumes the job from the HA store. Checkpoints stop; the workers go on
// until the next coordinator cancels what they run.
func (j *Job) Suspend(now int64) {
	j.advance(now)
	if j.state.Terminal() {
		return
	}
	j.stopCheckpoints()
	j.setState(Suspended)
}
