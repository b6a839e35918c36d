package lifecycle

import (
	"errors"
	"fmt"
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
