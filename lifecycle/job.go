package lifecycle

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// State is a job's state, named as Flink's JobStatus.
type State int

// The states; doc.go says what each means.
const (
	Created State = iota
	Running
	Failing
	Restarting
	Cancelling
	Canceled
	Finished
	Failed
	Suspended
)

var stateNames = [...]string{"CREATED", "RUNNING", "FAILING", "RESTARTING", "CANCELLING", "CANCELED", "FINISHED", "FAILED", "SUSPENDED"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// Ended reports whether the job is over: FINISHED, FAILED or CANCELED
// (Flink's globally terminal states).
func (s State) Ended() bool { return s == Finished || s == Failed || s == Canceled }

// Terminal reports whether no event changes the job any more here: it has
// ended, or is SUSPENDED.
func (s State) Terminal() bool { return s.Ended() || s == Suspended }

// ParseState returns the state named name (Flink's name, in capitals).
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("lifecycle: no job state %q", name)
}

// TaskEnd is how a subtask ended.
type TaskEnd int

// How a subtask ends.
const (
	TaskFinished TaskEnd = iota + 1
	TaskFailed
	TaskCanceled
	// TaskFailedAfterPeer is a failure that another subtask's caused (its
	// channel to the failed subtask closed): it fails the attempt, but a
	// root cause reported later replaces it as the attempt's cause.
	TaskFailedAfterPeer
)

func (e TaskEnd) String() string {
	switch e {
	case TaskFinished:
		return "finished"
	case TaskFailed:
		return "failed"
	case TaskCanceled:
		return "canceled"
	case TaskFailedAfterPeer:
		return "failed after a peer"
	}
	return fmt.Sprintf("TaskEnd(%d)", int(e))
}

// Errors returned by events wrap one of these; test with errors.Is.
var (
	// ErrStale marks an event about an attempt that is not the current
	// one, or not in the phase the event belongs to, or a report of a
	// worker that is already counted. It changed nothing.
	ErrStale = errors.New("lifecycle: stale event")
	// ErrEnded marks an event for a job that has ended (or is suspended).
	ErrEnded = errors.New("lifecycle: the job has ended")
	// ErrState marks a request the job's state does not allow, such as a
	// stop with savepoint of a job that is not RUNNING.
	ErrState = errors.New("lifecycle: not allowed in this state")
)

type lcError struct {
	msg  string
	kind error
}

func (e *lcError) Error() string { return e.msg }
func (e *lcError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &lcError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// RestartStrategy decides the restarts: *job.RestartSettings is one.
type RestartStrategy interface {
	// DelayBefore returns the delay in milliseconds before restart number
	// n (1-based), and whether that restart is allowed.
	DelayBefore(n int) (int64, bool)
}

// Defaults that New puts in place of zero Config fields.
const (
	// DefaultRecancelAfter: a worker that still lists an attempt it was
	// told to cancel is told again after a second.
	DefaultRecancelAfter int64 = 1000
	// DefaultMissedHeartbeats: three heartbeats in a row that do not list
	// an attempt whose subtasks there never reported lose those reports.
	DefaultMissedHeartbeats = 3
)

// Config configures a Job.
type Config struct {
	// Restart decides whether a failed attempt restarts and after how
	// long; nil restarts nothing.
	Restart RestartStrategy
	// Checkpoints says the job checkpoints: each attempt has a checkpoint
	// driver, started when it runs and stopped when it ends.
	Checkpoints bool
	// FromSavepoint says the job was started from a savepoint, which its
	// first attempt restores.
	FromSavepoint bool
	// RecancelAfter is the time in milliseconds before a worker that still
	// lists an attempt it was told to cancel is told again
	// (DefaultRecancelAfter when 0).
	RecancelAfter int64
	// MissedHeartbeats is the number of heartbeats in a row from a worker
	// that no longer lists the current attempt, while some of its subtasks
	// there never reported their end, after which their reports count as
	// lost and the attempt fails (DefaultMissedHeartbeats when 0).
	MissedHeartbeats int
}

// Restart is one restart of a job: the attempt that ended, why, and when
// (milliseconds).
type Restart struct {
	Attempt int
	Cause   string
	At      int64
}

// origin says why the current attempt is deployed; a failed deployment's
// error says so.
type origin int

const (
	submitted origin = iota
	restarted
	resumed
	upgraded
	rolledBack
)

// upgradePhase is where an upgrade stands (see doc.go, "Upgrade").
type upgradePhase int

const (
	upgNone upgradePhase = iota
	// upgBarrier: the upgrade's savepoint is under way; the old module
	// runs.
	upgBarrier
	// upgStopping: the savepoint completed; the old attempt's subtasks
	// stop.
	upgStopping
	// upgTrying: the new module's attempt is deployed (or being deployed),
	// on probation until its first completed checkpoint.
	upgTrying
	// upgRollingBack: that attempt failed; once its subtasks have ended the
	// old module is deployed again from the same savepoint.
	upgRollingBack
)

// phase is where the current attempt stands.
type phase int

const (
	idle      phase = iota // nothing asked of the workers yet
	requested              // Deploy emitted, not placed
	placed                 // placed, being deployed
	deployed               // its subtasks run
	over                   // every subtask ended, or its deployment failed
)

// ckptPhase is where the current attempt's checkpoint driver stands.
type ckptPhase int

const (
	ckptNone    ckptPhase = iota // none (yet), or the job does not checkpoint
	ckptMade                     // made with the deployment, not started
	ckptStarted                  // triggering
	ckptHeld                     // the attempt is doomed: no new trigger
	ckptStopped                  // stopped
)

// attempt is what the job knows of its current attempt.
type attempt struct {
	phase phase
	ckpt  ckptPhase
	// tasks counts the attempt's subtasks per worker, total all of them.
	tasks map[string]int
	total int
	// reported counts the ends each worker reported; ended and finished
	// count over all workers (a lost worker's unreported subtasks count as
	// ended).
	reported map[string]int
	ended    int
	finished int
	// lost holds the workers declared lost and why; accounted those whose
	// unreported subtasks are counted as ended.
	lost      map[string]string
	accounted map[string]bool
	// missing counts, per worker, the heartbeats in a row that did not
	// list the attempt although subtasks there never reported.
	missing map[string]int
	// failure is the attempt's first failure (its root cause, when a
	// subtask that failed only because another did reported first);
	// secondary says it is such a consequence.
	failure   string
	secondary bool
	// cancelSent: every worker of the attempt was told to cancel it.
	cancelSent bool
	slots      bool // its slots are held
	// stopping: a stop with savepoint was requested; stopped: it
	// completed, with savepoint stopID.
	stopping bool
	stopped  bool
	stopID   int64
}

type cancelKey struct {
	worker  string
	attempt int
}

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
