package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Defaults that NewCoordinator puts in place of zero Config fields.
const (
	// DefaultTimeout is the checkpoint timeout in milliseconds: 10 minutes,
	// Flink's execution.checkpointing.timeout.
	DefaultTimeout int64 = 10 * 60 * 1000
	// DefaultMaxConcurrent is the number of periodic checkpoints that may be
	// pending at once.
	DefaultMaxConcurrent = 1
	// DefaultRetain is the number of completed checkpoints kept: only the
	// latest (seeds/001, "Checkpoint 保存数默认是1").
	DefaultRetain = 1
)

// RecentEnded is how many ended checkpoint ids the coordinator remembers so
// that late messages for them are ignored rather than reported as unknown
// (Flink's recentExpiredCheckpoints, an ArrayDeque of 16: seeds/000 §2.4).
const RecentEnded = 16

// Errors returned by the coordinator wrap one of these; test with errors.Is.
var (
	// ErrInvalidConfig marks a Config that Validate rejects.
	ErrInvalidConfig = errors.New("checkpoint: invalid coordinator config")
	// ErrUnknownCheckpoint marks an ack or decline for an id that this
	// coordinator never triggered, or that ended too long ago to remember.
	ErrUnknownCheckpoint = errors.New("checkpoint: unknown checkpoint")
	// ErrUnknownTask marks a message from a task that is not one of the
	// job's tasks.
	ErrUnknownTask = errors.New("checkpoint: unknown task")
	// ErrDuplicateAck marks a second answer (ack or decline) from a task
	// that has already acknowledged the checkpoint. It is ignored.
	ErrDuplicateAck = errors.New("checkpoint: duplicate acknowledgement")
	// ErrTaskFinished marks an ack or decline from a task reported finished.
	// It is ignored: the coordinator already counts the task as acked with
	// empty state.
	ErrTaskFinished = errors.New("checkpoint: task has finished")
	// ErrStopped marks a savepoint requested after Stop or after the
	// coordinator failed the job.
	ErrStopped = errors.New("checkpoint: coordinator stopped")
	// ErrAllTasksFinished marks a savepoint requested when every task has
	// finished: there is nothing left to snapshot.
	ErrAllTasksFinished = errors.New("checkpoint: every task has finished")
)

// coordError is an error with a full message of its own that still matches
// its sentinel under errors.Is.
type coordError struct {
	msg  string
	kind error
}

func (e *coordError) Error() string { return e.msg }
func (e *coordError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &coordError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// Config is the coordinator's configuration. Times are milliseconds. The zero
// value of MaxConcurrent, Timeout and Retain means the default.
type Config struct {
	// Interval is the time between periodic triggers; 0 disables periodic
	// checkpoints (savepoints still work).
	Interval int64
	// InitialDelay is the time after start before the first periodic
	// trigger. The driver draws it at random in [MinPause, Interval] so that
	// the checkpoints of many jobs started together spread out (seeds/002 §3,
	// getRandomInitDelay).
	InitialDelay int64
	// MinPause is the time from the end (completion or abort) of one
	// checkpoint to the next periodic trigger (seeds/001, setMinPauseBetweenCheckpoints).
	MinPause int64
	// MaxConcurrent is the number of periodic checkpoints pending at once
	// (DefaultMaxConcurrent when 0).
	MaxConcurrent int
	// Timeout is the time after its trigger when a pending checkpoint
	// expires (DefaultTimeout when 0).
	Timeout int64
	// TolerableFailures is the number of consecutive failed checkpoints
	// tolerated; one more fails the job. 0 tolerates none; -1 tolerates any
	// number (seeds/000 Q5, seeds/003 CheckpointFailureManager).
	TolerableFailures int
	// Retain is the number of completed checkpoints kept (DefaultRetain
	// when 0).
	Retain int
}

// Validate reports every field that is out of range, each by name.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, errorf(ErrInvalidConfig, "checkpoint: "+format, args...))
	}
	if c.Interval < 0 {
		bad("Interval %d must be ≥ 0 (0 disables periodic checkpoints)", c.Interval)
	}
	if c.InitialDelay < 0 {
		bad("InitialDelay %d must be ≥ 0", c.InitialDelay)
	}
	if c.MinPause < 0 {
		bad("MinPause %d must be ≥ 0", c.MinPause)
	}
	if c.MaxConcurrent < 0 {
		bad("MaxConcurrent %d must be ≥ 0 (0 means %d)", c.MaxConcurrent, DefaultMaxConcurrent)
	}
	if c.Timeout < 0 {
		bad("Timeout %d must be ≥ 0 (0 means %d)", c.Timeout, DefaultTimeout)
	}
	if c.TolerableFailures < -1 {
		bad("TolerableFailures %d must be ≥ -1 (-1 tolerates any number)", c.TolerableFailures)
	}
	if c.Retain < 0 {
		bad("Retain %d must be ≥ 0 (0 means %d)", c.Retain, DefaultRetain)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retain == 0 {
		c.Retain = DefaultRetain
	}
	return c
}

// Completed is a checkpoint or savepoint that every task acknowledged.
// The coordinator hands it to the driver in a Persist action and keeps the
// retained checkpoints; callers must not modify its slices and maps.
type Completed struct {
	ID   int64
	Kind Kind
	// Trigger is when it was triggered and Done when the last task
	// acknowledged it, in milliseconds.
	Trigger, Done int64
	// Tasks holds one state per task of the job, ordered by TaskID. A task
	// that finished before acknowledging has an empty SubtaskState.
	Tasks []SubtaskState
	// Metrics holds what each task that acknowledged reported; finished
	// tasks have no entry.
	Metrics map[TaskID]Metrics
}

// CoordinatorAction is work the coordinator hands to its driver through
// Ready. It is one of Trigger, Persist, NotifyComplete, NotifyAborted,
// Discard and FailJob. (The barrier handler's are HandlerAction.)
type CoordinatorAction interface {
	fmt.Stringer
	coordinatorAction()
}

// Trigger asks the driver to send the trigger for a new checkpoint to the
// source subtasks.
type Trigger struct {
	ID        int64
	Kind      Kind
	Timestamp int64 // ms, the coordinator's time at the trigger
}

// Persist asks the driver to write the checkpoint's metadata atomically and
// then to report the outcome with Coordinator.Persisted. At most one Persist
// is outstanding at a time.
type Persist struct {
	Checkpoint Completed
}

// NotifyComplete tells every subtask that the checkpoint completed: sinks
// commit the transaction they prepared for it. It only follows a Persist
// that the driver reported successful.
type NotifyComplete struct {
	ID   int64
	Kind Kind
}

// NotifyAborted tells every subtask to drop the checkpoint (a cancel
// marker): it will never complete.
type NotifyAborted struct {
	ID     int64
	Reason string
}

// Discard asks the driver to delete the checkpoint's files: it was aborted,
// expired, failed to persist, or was subsumed by a newer one.
type Discard struct {
	ID     int64
	Reason string
}

// FailJob asks the driver to fail the job: more consecutive checkpoints
// failed than Config.TolerableFailures allows. It is emitted once.
type FailJob struct {
	Reason string
}

func (Trigger) coordinatorAction()        {}
func (Persist) coordinatorAction()        {}
func (NotifyComplete) coordinatorAction() {}
func (NotifyAborted) coordinatorAction()  {}
func (Discard) coordinatorAction()        {}
func (FailJob) coordinatorAction()        {}

func (a Trigger) String() string {
	return fmt.Sprintf("trigger %s %d at %d", a.Kind, a.ID, a.Timestamp)
}

// String names up to 8 tasks; a task with no metrics finished without
// acknowledging.
func (a Persist) String() string {
	const most = 8
	c := a.Checkpoint
	var b strings.Builder
	fmt.Fprintf(&b, "persist %s %d (triggered at %d, acknowledged at %d):", c.Kind, c.ID, c.Trigger, c.Done)
	for i, st := range c.Tasks {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(c.Tasks)-most)
			break
		}
		b.WriteString(" " + st.Task.String())
		if _, acked := c.Metrics[st.Task]; !acked {
			b.WriteString("(finished)")
		}
	}
	return b.String()
}

func (a NotifyComplete) String() string {
	return fmt.Sprintf("notify-complete %s %d", a.Kind, a.ID)
}

func (a NotifyAborted) String() string {
	return fmt.Sprintf("notify-aborted %d: %s", a.ID, a.Reason)
}

func (a Discard) String() string {
	return fmt.Sprintf("discard %d: %s", a.ID, a.Reason)
}

func (a FailJob) String() string {
	return "fail-job: " + a.Reason
}

// pending is a triggered checkpoint that has not ended (Flink's
// PendingCheckpoint, seeds/000 §2.3).
type pending struct {
	id      int64
	kind    Kind
	trigger int64
	// waiting holds the tasks whose ack is still missing.
	waiting map[TaskID]struct{}
	// states and metrics hold what the tasks that acked sent.
	states  map[TaskID]SubtaskState
	metrics map[TaskID]Metrics
	// done is set once no task is waited for: the checkpoint is queued for,
	// or in, Persist. It can no longer expire or be declined.
	done *Completed
	// final: triggered after every task's input had ended.
	final bool
}

// Coordinator triggers checkpoints, collects the acknowledgements of the
// job's tasks and decides when each checkpoint completes or aborts. It is a
// pure state machine: it starts no goroutines, reads no clock and does no IO.
// Its methods take events, with the time as milliseconds; Ready hands back
// the actions they produced. It is not safe for concurrent use: one
// goroutine owns it.
type Coordinator struct {
	cfg Config

	tasks    []TaskID        // every task, sorted
	finished map[TaskID]bool // every task: whether it has finished
	nDone    int             // number of finished tasks
	// ended holds the tasks whose input ended and that wait for the final
	// checkpoint; finalDone is set once a checkpoint triggered after every
	// task's input ended has completed.
	ended     map[TaskID]bool
	finalDone bool

	first int64 // the first id this coordinator used
	next  int64 // the next id to use

	now         int64 // the latest time seen
	nextTrigger int64 // when the next periodic checkpoint is due
	lastEnd     int64 // when the last checkpoint ended, if hasEnded
	hasEnded    bool

	pending    []*pending // by id
	queue      []*pending // fully acknowledged, waiting for Persist
	persisting *pending   // its Persist is outstanding

	completed []Completed // retained checkpoints, oldest first
	recent    []int64     // the last RecentEnded ended ids
	failures  int         // consecutive failed periodic checkpoints

	stopped bool // Stop was called
	failed  bool // FailJob was emitted
	// held: the job left RUNNING (HoldTriggers); nothing new is triggered,
	// while what is pending may still complete.
	held bool

	actions []CoordinatorAction
}

// NewCoordinator returns a coordinator for a job whose tasks are tasks; every
// one of them must acknowledge a checkpoint for it to complete. next is the
// first checkpoint id to use: to keep ids increasing across restarts
// (seeds/000 §2.2, "跨 JM 重启保持递增"), the driver passes 1 + the highest id
// ever used, read from storage. now is the start time; the first periodic
// checkpoint is due at now + cfg.InitialDelay.
func NewCoordinator(cfg Config, tasks []TaskID, next int64, now int64) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, errors.New("checkpoint: a coordinator needs at least one task to wait for")
	}
	if next < 1 {
		return nil, fmt.Errorf("checkpoint: the next checkpoint id %d must be ≥ 1", next)
	}
	finished := make(map[TaskID]bool, len(tasks))
	for _, t := range tasks {
		if _, dup := finished[t]; dup {
			return nil, fmt.Errorf("checkpoint: task %s is listed twice", t)
		}
		finished[t] = false
	}
	sorted := slices.Clone(tasks)
	slices.SortFunc(sorted, compareTasks)
	return &Coordinator{
		cfg:         cfg.withDefaults(),
		tasks:       sorted,
		finished:    finished,
		ended:       map[TaskID]bool{},
		first:       next,
		next:        next,
		now:         now,
		nextTrigger: now + cfg.InitialDelay,
	}, nil
}

func compareTasks(a, b TaskID) int {
	return cmp.Or(cmp.Compare(a.Chain, b.Chain), cmp.Compare(a.Subtask, b.Subtask))
}

// Recover puts the checkpoints retained before a restart, oldest first,
// into the completed store, so that retention keeps counting across
// restarts. It must come before the first trigger. Checkpoints beyond
// Config.Retain are discarded at once, oldest first.
func (c *Coordinator) Recover(retained []Completed) error {
	if c.next != c.first || len(c.completed) > 0 {
		return errors.New("checkpoint: Recover must come before the first trigger and only once")
	}
	for i, cp := range retained {
		if cp.Kind != KindCheckpoint {
			return fmt.Errorf("checkpoint: recovered %s %d: only checkpoints are retained", cp.Kind, cp.ID)
		}
		if cp.ID >= c.first {
			return fmt.Errorf("checkpoint: recovered checkpoint %d is not below the next id %d", cp.ID, c.first)
		}
		if i > 0 && cp.ID <= retained[i-1].ID {
			return fmt.Errorf("checkpoint: recovered checkpoints are not in increasing id order: %d follows %d",
				cp.ID, retained[i-1].ID)
		}
	}
	c.completed = slices.Clone(retained)
	c.retain(fmt.Sprintf("beyond the %d retained after restart", c.cfg.Retain))
	return nil
}

// Ready returns the actions produced since the last call, in the order
// they must be carried out.
func (c *Coordinator) Ready() []CoordinatorAction {
	a := c.actions
	c.actions = nil
	return a
}

// Pending returns the ids of the checkpoints and savepoints that have not
// ended, in increasing order; this includes the fully acknowledged ones
// waiting for Persist.
func (c *Coordinator) Pending() []int64 {
	ids := make([]int64, len(c.pending))
	for i, p := range c.pending {
		ids[i] = p.id
	}
	return ids
}

// Completed returns the retained checkpoints, oldest first. Savepoints are
// never among them.
func (c *Coordinator) Completed() []Completed {
	return slices.Clone(c.completed)
}

// LatestCompleted returns the newest retained checkpoint: the one to
// restore from.
func (c *Coordinator) LatestCompleted() (Completed, bool) {
	if len(c.completed) == 0 {
		return Completed{}, false
	}
	return c.completed[len(c.completed)-1], true
}

// Tick advances the time to now: it expires the checkpoints whose timeout
// has passed and triggers a periodic checkpoint when one is due and allowed.
func (c *Coordinator) Tick(now int64) {
	c.advance(now)
	c.maybeTrigger()
}

// TriggerSavepoint triggers a savepoint and returns its id. A savepoint is
// always allowed: it ignores MaxConcurrent and MinPause and does not count
// among the pending periodic checkpoints (seeds/002 §5, triggerSavepoint).
// While it is pending no periodic checkpoint is triggered, and no
// checkpoint subsumes it.
// It fails after Stop or FailJob, and when every task has finished.
func (c *Coordinator) TriggerSavepoint(now int64) (int64, error) {
	c.advance(now)
	switch {
	case c.failed:
		return 0, errorf(ErrStopped, "checkpoint: cannot trigger a savepoint: the job failed")
	case c.stopped:
		return 0, errorf(ErrStopped, "checkpoint: cannot trigger a savepoint: the coordinator is stopped")
	case c.held:
		return 0, errorf(ErrStopped, "checkpoint: cannot trigger a savepoint: the job is not running")
	case c.allFinished():
		return 0, errorf(ErrAllTasksFinished, "checkpoint: cannot trigger a savepoint: all %d tasks have finished", len(c.tasks))
	}
	return c.trigger(KindSavepoint), nil
}

// Ack records that task acknowledged checkpoint id with its state and
// metrics. When it was the last task waited for, the checkpoint is queued
// for Persist.
//
// An ack for a checkpoint that ended recently (expired, aborted or
// completed; the last RecentEnded) is a late ack: ignored, nil
// (seeds/000 §2.4). An ack for an id never triggered or long forgotten
// wraps ErrUnknownCheckpoint. A second ack from the same task wraps
// ErrDuplicateAck, and an ack from a finished task ErrTaskFinished; both are
// ignored. Acks for a checkpoint whose Persist is queued or outstanding can
// only be of these two kinds, since every task has answered it.
func (c *Coordinator) Ack(now int64, id int64, task TaskID, st SubtaskState, m Metrics) error {
	c.advance(now)
	p, err := c.answering("ack", id, task)
	if p == nil {
		return err
	}
	if st.Task != task {
		return fmt.Errorf("checkpoint: ack for checkpoint %d from task %s carries the state of task %s", id, task, st.Task)
	}
	p.states[task] = st
	p.metrics[task] = m
	delete(p.waiting, task)
	if len(p.waiting) == 0 {
		c.finalize(p)
	}
	return nil
}

// Decline aborts checkpoint id because task could not take its part
// (seeds/003, declineCheckpoint): every subtask is told to drop it, its
// files are discarded, and it counts as a failed checkpoint, unless the
// task dropped it because a newer checkpoint this coordinator triggered
// overtook it (a reason that ends as SubsumedReason or
// SubsumedByCancelReason make it, naming that checkpoint): Flink's
// CHECKPOINT_SUBSUMED, which the failure manager does not count, since the
// newer checkpoint, a savepoint perhaps, goes on. Late, unknown,
// duplicate and finished-task declines are treated as in Ack; a decline from
// a task that already acknowledged the checkpoint wraps ErrDuplicateAck and
// is ignored.
func (c *Coordinator) Decline(now int64, id int64, task TaskID, reason string) error {
	c.advance(now)
	p, err := c.answering("decline", id, task)
	if p == nil {
		return err
	}
	why := "declined by " + task.String()
	if reason != "" {
		why += ": " + reason
	}
	by, subsumed := subsumedBy(reason)
	c.abort(p, why, !subsumed || by <= id || by >= c.next)
	return nil
}

// answering returns the pending checkpoint that task may answer, or nil and
// the error to return (nil for a late answer).
func (c *Coordinator) answering(verb string, id int64, task TaskID) (*pending, error) {
	done, ok := c.finished[task]
	if !ok {
		return nil, errorf(ErrUnknownTask, "checkpoint: %s for checkpoint %d from task %s, which is not a task of this job", verb, id, task)
	}
	p := c.lookup(id)
	if p == nil {
		return nil, c.notPending(verb, id, task)
	}
	if _, acked := p.states[task]; acked {
		return nil, errorf(ErrDuplicateAck, "checkpoint: %s for checkpoint %d from task %s, which already acknowledged it; ignored", verb, id, task)
	}
	if done {
		return nil, errorf(ErrTaskFinished, "checkpoint: %s for checkpoint %d from task %s, which has finished; ignored", verb, id, task)
	}
	return p, nil
}

func (c *Coordinator) lookup(id int64) *pending {
	i, ok := slices.BinarySearchFunc(c.pending, id, func(p *pending, id int64) int { return cmp.Compare(p.id, id) })
	if !ok {
		return nil
	}
	return c.pending[i]
}

// notPending explains a message for an id that is not pending: nil for a
// recently ended one (seeds/000 §2.4: "在则是正常的 late ack（忽略），不在则是
// 未知的 CheckpointID（报错）").
func (c *Coordinator) notPending(verb string, id int64, task TaskID) error {
	if slices.Contains(c.recent, id) {
		return nil
	}
	var why string
	switch {
	case id >= c.next:
		why = fmt.Sprintf("never triggered (the next id is %d)", c.next)
	case id < c.first:
		why = fmt.Sprintf("triggered before this coordinator started at id %d", c.first)
	default:
		why = fmt.Sprintf("it ended before the last %d checkpoints and is forgotten", RecentEnded)
	}
	return errorf(ErrUnknownCheckpoint, "checkpoint: %s for unknown checkpoint %d from task %s: %s", verb, id, task, why)
}

// TaskFinished records that task's input ended and it finished. Checkpoints
// triggered later no longer wait for it; pending ones count it as acked with
// empty state, so that checkpoints still complete after part of the job has
// finished. When every task has finished, periodic triggers stop. A task
// that is not one of the job's tasks, or already finished, is ignored.
func (c *Coordinator) TaskFinished(task TaskID) {
	if done, ok := c.finished[task]; !ok || done {
		return
	}
	c.finished[task] = true
	c.nDone++
	// finalize only queues: c.pending does not change in this loop.
	for _, p := range c.pending {
		if p.done != nil {
			continue
		}
		if _, waited := p.waiting[task]; waited {
			delete(p.waiting, task)
			if len(p.waiting) == 0 {
				c.finalize(p)
			}
		}
	}
}

// TriggerFailed aborts checkpoint id, whose trigger the driver could not
// send (seeds/003 lists the reasons a trigger fails; here: its id could not
// be recorded in the job's HA store, which must happen before any task sees
// it). No task took part in it, so it does not count as a failed checkpoint
// (an unreachable KV bucket is no failure of the job's checkpointing, and
// must not fail the job over); a savepoint's caller learns of it. An id
// that is not pending, or fully acknowledged, is ignored.
func (c *Coordinator) TriggerFailed(now int64, id int64, reason string) {
	c.advance(now)
	p := c.lookup(id)
	if p == nil || p.done != nil {
		return
	}
	c.abort(p, "trigger failed: "+reason, false)
}

// HoldTriggers ends triggering for good while letting what is pending
// finish: the job left RUNNING (it is failing, restarting or being
// cancelled), so no new checkpoint or savepoint is triggered, while one
// that the tasks acknowledged before may still complete and be restored.
func (c *Coordinator) HoldTriggers() { c.held = true }

// TaskEndedInput records that task's input ended (a source read all of
// its input): it has flushed its output and takes part in checkpoints by
// trigger until its final one completes, then it finishes (TaskFinished).
// Once every task's input has ended, the final checkpoint is triggered at
// once, without waiting for the interval (seeds: when every source has
// ended, the job takes one final checkpoint so that sinks commit their last
// transaction); when one has completed, no periodic checkpoint follows. A
// task unknown, finished or already reported is ignored.
func (c *Coordinator) TaskEndedInput(now int64, task TaskID) {
	c.advance(now)
	if done, ok := c.finished[task]; !ok || done || c.ended[task] {
		return
	}
	c.ended[task] = true
	c.maybeTrigger()
}

// allEnded reports whether every task's input has ended (or it finished).
func (c *Coordinator) allEnded() bool {
	for _, t := range c.tasks {
		if !c.ended[t] && !c.finished[t] {
			return false
		}
	}
	return true
}

// Persisted reports the outcome of the outstanding Persist of checkpoint
// id. On success the checkpoint completes: every subtask is notified, a
// periodic checkpoint joins the completed store and subsumes the older
// ones. On failure it is aborted and counts as a failed checkpoint. A
// report for any other id is ignored: only one Persist is outstanding.
func (c *Coordinator) Persisted(id int64, err error) {
	p := c.persisting
	if p == nil || p.id != id {
		return
	}
	c.persisting = nil
	if err != nil {
		c.abort(p, "persist failed: "+err.Error(), true)
	} else {
		c.complete(p)
	}
	c.persistNext()
}

// AbortPending aborts every pending checkpoint and savepoint that still
// waits for acknowledgements, for reason: the driver learned that triggers
// or acknowledgements may have been lost (a NATS connection was down), so
// they may never complete and should not be left to the timeout. These
// aborts do not count as failed checkpoints: the job's own checkpointing did
// not fail. Periodic triggering goes on as before.
func (c *Coordinator) AbortPending(now int64, reason string) {
	c.advance(now)
	c.abortWaiting(reason)
	c.maybeTrigger()
}

// Stop ends periodic triggers and savepoints, and aborts the pending
// checkpoints that still wait for acks ("job stopping"); those already
// fully acknowledged still persist and complete, so a driver stopping a job
// carries out Ready until Pending is empty.
func (c *Coordinator) Stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	c.abortWaiting("job stopping")
}

// advance moves the time forward (never back: an earlier now is taken as
// the latest time seen) and expires the checkpoints whose timeout passed.
// Every event that carries a time does this first, so it is judged against
// the state at its time: an ack that arrives after its checkpoint's
// deadline is late even if no Tick came in between.
func (c *Coordinator) advance(now int64) {
	if now > c.now {
		c.now = now
	}
	// seeds/000 §2.5: a checkpoint still pending Timeout after its trigger
	// is aborted and every operator is told to cancel it. One abort can end
	// others (FailJob), so look again after each.
	for {
		i := slices.IndexFunc(c.pending, func(p *pending) bool {
			return p.done == nil && c.now-p.trigger >= c.cfg.Timeout
		})
		if i < 0 {
			return
		}
		p := c.pending[i]
		c.abort(p, fmt.Sprintf("expired after %d ms waiting for %s", c.now-p.trigger, c.waitingFor(p)), true)
	}
}

// waitingFor names the tasks a pending checkpoint still waits for (seeds/000
// Q1: the last task to ack points at the slow operator).
func (c *Coordinator) waitingFor(p *pending) string {
	const most = 4
	var names []string
	for _, t := range c.tasks {
		if _, ok := p.waiting[t]; ok {
			names = append(names, t.String())
		}
	}
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}

// maybeTrigger triggers a periodic checkpoint when one is due and allowed
// (seeds/003, the reasons a trigger is refused: coordinator shut down,
// periodic scheduling off, too many pending, min pause not yet passed, not
// all sources running).
func (c *Coordinator) maybeTrigger() {
	if c.stopped || c.failed || c.held || c.cfg.Interval == 0 || c.allFinished() || c.finalDone {
		return
	}
	// The final checkpoint is due as soon as every input has ended.
	final := c.allEnded()
	if !final && c.now < c.nextTrigger {
		return
	}
	if c.pendingPeriodic() >= c.cfg.MaxConcurrent {
		return
	}
	// A pending savepoint pauses periodic triggers: a newer checkpoint's
	// barrier would reach the subtasks first where barriers overtake
	// (unaligned) or are not waited for (at-least-once), and make them drop
	// the savepoint as subsumed. Slots missed meanwhile are skipped.
	if c.pendingSavepoint() {
		if !final {
			c.nextTrigger += ((c.now-c.nextTrigger)/c.cfg.Interval + 1) * c.cfg.Interval
		}
		return
	}
	// seeds/001: after a checkpoint ends, wait at least MinPause before the
	// next, so that checkpoints slower than the interval leave the job time
	// to process.
	if c.hasEnded && c.now-c.lastEnd < c.cfg.MinPause {
		return
	}
	c.trigger(KindCheckpoint)
	if final {
		c.pending[len(c.pending)-1].final = true
		return
	}
	// seeds/002 §4, ScheduledTrigger: the next trigger is one interval after
	// the one that was due (fixed rate). Slots missed while the trigger was
	// held back are skipped, not caught up in a burst.
	missed := (c.now - c.nextTrigger) / c.cfg.Interval
	c.nextTrigger += (missed + 1) * c.cfg.Interval
}

func (c *Coordinator) pendingPeriodic() int {
	n := 0
	for _, p := range c.pending {
		if p.kind == KindCheckpoint {
			n++
		}
	}
	return n
}

func (c *Coordinator) pendingSavepoint() bool {
	return slices.ContainsFunc(c.pending, func(p *pending) bool { return p.kind == KindSavepoint })
}

func (c *Coordinator) allFinished() bool { return c.nDone == len(c.tasks) }

// trigger starts checkpoint c.next (seeds/000 §2.2: ids from a
// monotonically increasing counter, a PendingCheckpoint that tracks the
// acks, then the trigger to the sources).
func (c *Coordinator) trigger(kind Kind) int64 {
	p := &pending{
		id:      c.next,
		kind:    kind,
		trigger: c.now,
		waiting: make(map[TaskID]struct{}, len(c.tasks)-c.nDone),
		states:  make(map[TaskID]SubtaskState, len(c.tasks)-c.nDone),
		metrics: make(map[TaskID]Metrics, len(c.tasks)-c.nDone),
	}
	c.next++
	for _, t := range c.tasks {
		if !c.finished[t] {
			p.waiting[t] = struct{}{}
		}
	}
	c.pending = append(c.pending, p)
	c.emit(Trigger{ID: p.id, Kind: kind, Timestamp: c.now})
	return p.id
}

// finalize turns a fully acknowledged checkpoint into a Completed and
// queues it for Persist (seeds/000 §2.3: complete when every subtask acked).
func (c *Coordinator) finalize(p *pending) {
	tasks := make([]SubtaskState, len(c.tasks))
	for i, t := range c.tasks {
		if st, ok := p.states[t]; ok {
			tasks[i] = st
		} else {
			tasks[i] = SubtaskState{Task: t}
		}
	}
	p.done = &Completed{
		ID:      p.id,
		Kind:    p.kind,
		Trigger: p.trigger,
		Done:    c.now,
		Tasks:   tasks,
		Metrics: p.metrics,
	}
	c.queue = append(c.queue, p)
	c.persistNext()
}

// persistNext starts the Persist of the next queued checkpoint when none is
// outstanding. Persists run one at a time, in the order the checkpoints
// became fully acknowledged, so checkpoints complete in that order.
func (c *Coordinator) persistNext() {
	if c.persisting != nil || len(c.queue) == 0 {
		return
	}
	c.persisting = c.queue[0]
	c.queue = c.queue[1:]
	c.emit(Persist{Checkpoint: *c.persisting.done})
}

// complete finishes a checkpoint whose metadata is persisted (seeds/002
// §10: mark it completed, add it to the CompletedCheckpointStore, clean up
// the older ones, notify). NotifyComplete comes first among the actions, so
// that sinks commit as early as possible; the cleanup follows.
func (c *Coordinator) complete(p *pending) {
	c.end(p)
	// seeds/003, sendAcknowledgeMessages: every task learns that the
	// checkpoint completed; sinks commit (two-phase commit).
	c.emit(NotifyComplete{ID: p.id, Kind: p.kind})
	if p.kind != KindCheckpoint {
		// Savepoints belong to the user: not retained, never discarded,
		// and they subsume nothing (seeds/002 §5).
		return
	}
	c.failures = 0
	if p.final {
		c.finalDone = true
	}
	c.completed = append(c.completed, *p.done)
	// Pending checkpoints older than a completed one can never be restored
	// from: abort them (Flink's dropSubsumedCheckpoints). Savepoints are
	// not subsumed.
	for _, q := range slices.Clone(c.pending) {
		if q.kind == KindCheckpoint && q.id < p.id {
			c.abort(q, fmt.Sprintf("subsumed by checkpoint %d", p.id), false)
		}
	}
	c.retain(fmt.Sprintf("subsumed by checkpoint %d (retaining %d)", p.id, c.cfg.Retain))
}

// retain discards the oldest completed checkpoints beyond Config.Retain
// (seeds/001: the number of checkpoints kept).
func (c *Coordinator) retain(reason string) {
	for len(c.completed) > c.cfg.Retain {
		c.emit(Discard{ID: c.completed[0].ID, Reason: reason})
		c.completed = slices.Delete(c.completed, 0, 1)
	}
}

// abort ends a pending checkpoint that will not complete: every subtask
// drops it and its files are discarded (seeds/000 Q5: remove it, send
// CancelCheckpointMarker, count the failure).
func (c *Coordinator) abort(p *pending, reason string, countsAsFailure bool) {
	c.end(p)
	c.emit(NotifyAborted{ID: p.id, Reason: reason})
	c.emit(Discard{ID: p.id, Reason: reason})
	if countsAsFailure {
		c.failure(p, reason)
	}
}

// failure counts a failed periodic checkpoint and fails the job when more
// than TolerableFailures failed in a row (seeds/003,
// CheckpointFailureManager: continuousFailureCounter >
// tolerableCpFailureNumber). Savepoint failures are reported to whoever
// asked for the savepoint and do not count.
func (c *Coordinator) failure(p *pending, reason string) {
	if p.kind != KindCheckpoint {
		return
	}
	c.failures++
	if c.failed || c.cfg.TolerableFailures < 0 || c.failures <= c.cfg.TolerableFailures {
		return
	}
	c.failed = true
	failures := "failures"
	if c.failures == 1 {
		failures = "failure"
	}
	c.emit(FailJob{Reason: fmt.Sprintf("%d consecutive checkpoint %s, more than the %d tolerated; the last, checkpoint %d: %s",
		c.failures, failures, c.cfg.TolerableFailures, p.id, reason)})
	c.abortWaiting("job failed")
}

// abortWaiting aborts every pending checkpoint that still waits for acks,
// without counting failures.
func (c *Coordinator) abortWaiting(reason string) {
	for _, p := range slices.Clone(c.pending) {
		if p.done == nil {
			c.abort(p, reason, false)
		}
	}
}

// end removes a checkpoint from the pending list and the Persist queue,
// remembers its id for late messages, and starts the min pause.
func (c *Coordinator) end(p *pending) {
	c.pending = slices.DeleteFunc(c.pending, func(q *pending) bool { return q == p })
	c.queue = slices.DeleteFunc(c.queue, func(q *pending) bool { return q == p })
	c.recent = append(c.recent, p.id)
	if len(c.recent) > RecentEnded {
		c.recent = slices.Delete(c.recent, 0, 1)
	}
	c.lastEnd, c.hasEnded = c.now, true
}

func (c *Coordinator) emit(a CoordinatorAction) { c.actions = append(c.actions, a) }
