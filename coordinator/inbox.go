package coordinator

import (
	"sync"

	"github.com/wstream/wstream/lifecycle"
)

// What a checkpoint driver learns that the job must hear (a stop's
// savepoint ended or is the restore point now, a checkpoint completed, the
// attempt must fail) goes into the job's inbox, in the order the driver learned it, and the
// coordinator hands the inbox to the lifecycle under c.mu before any other
// event of the job (drainLocked): a stop's savepoint that completed before
// the stop went out to the subtasks is heard before any of their ends, and
// an upgrade's first checkpoint before any failure after its sinks
// committed on it. The driver never waits for c.mu: it puts the report in
// and has a step of its own hand it over (report), in case no other event
// comes.

// driverReport is one report of a checkpoint driver to the lifecycle.
type driverReport interface {
	// apply hands the report to j's lifecycle at now; c.mu is held.
	apply(c *Coordinator, j *jobState, now int64)
}

// stopEnded: the stop-with-savepoint savepoint id of attempt completed
// (err nil: the job ends FINISHED, stopped, once its subtasks have
// stopped) or failed (the job goes on RUNNING).
type stopEnded struct {
	attempt int
	id      int64
	err     error
}

func (r stopEnded) apply(_ *Coordinator, j *jobState, now int64) {
	if r.err != nil {
		_ = j.lc.StopFailed(now, r.attempt, r.id, r.err.Error())
		return
	}
	_ = j.lc.StopCompleted(now, r.attempt, r.id)
}

// checkpointConfirmed: attempt completed a checkpoint, and its sinks are
// about to commit on it: the new module of an upgrade on probation can no
// longer roll back.
type checkpointConfirmed struct{ attempt int }

func (r checkpointConfirmed) apply(_ *Coordinator, j *jobState, now int64) {
	if j.probation == r.attempt+1 {
		_ = j.lc.UpgradeConfirmed(now, r.attempt)
	}
}

// checkpointWritten: checkpoint id is complete in storage; the job's spec
// names it as the latest.
type checkpointWritten struct{ id int64 }

func (r checkpointWritten) apply(c *Coordinator, j *jobState, _ int64) {
	if r.id > j.latestCheckpoint && !j.done {
		j.latestCheckpoint = r.id
		if c.store != nil {
			c.store.put(c.specLocked(j, j.info.State))
		}
	}
}

// restorePoint: the savepoint id in dir, of a stop or an upgrade, is what
// the job restores from; done closes once the job's spec says so (queued
// for the bucket). A driver stopped meanwhile (d is no longer the job's)
// changes nothing: its savepoint did not complete.
type restorePoint struct {
	d    *ckptDriver
	dir  string
	id   int64
	done chan struct{}
}

func (r restorePoint) apply(c *Coordinator, j *jobState, _ int64) {
	if j.ckpt != r.d {
		return
	}
	j.fromSavepoint, j.savepointID = r.dir, r.id
	if c.store != nil {
		c.store.put(c.specLocked(j, j.info.State))
	}
	close(r.done)
}

// attemptFailed: the attempt fails for a reason of the coordinator's own
// (too many failed checkpoints).
type attemptFailed struct {
	attempt int
	reason  string
}

func (r attemptFailed) apply(_ *Coordinator, j *jobState, now int64) {
	_ = j.lc.Fail(now, r.attempt, r.reason)
}

// inbox holds a job's driver reports until they are handed over. Its lock
// is held only to put a report in or take them out.
type inbox struct {
	mu      sync.Mutex
	reports []driverReport
}

func (b *inbox) put(r driverReport) {
	b.mu.Lock()
	b.reports = append(b.reports, r)
	b.mu.Unlock()
}

func (b *inbox) take() []driverReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.reports
	b.reports = nil
	return out
}

// report puts r into j's inbox, and has it handed to the lifecycle by a
// step of its own unless another event of the job comes first. It never
// waits for c.mu.
func (c *Coordinator) report(j *jobState, r driverReport) {
	j.inbox.put(r)
	go func() { _ = c.step(j, func(*lifecycle.Job, int64) error { return nil }) }()
}

// drainLocked hands j's lifecycle the reports of its inbox, in order; call
// it before any other event of the job. c.mu is held.
func (c *Coordinator) drainLocked(j *jobState) {
	for _, r := range j.inbox.take() {
		r.apply(c, j, c.nowMillis())
	}
}
