package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// The coordinator drives each job's lifecycle (package lifecycle): NATS
// callbacks, the liveness monitor, timers and the checkpoint driver's
// reports (inbox.go) feed it events under c.mu; applyLocked carries out at
// once, still under c.mu, the actions that touch only the coordinator's
// memory or stop a checkpoint driver (whose loop never waits for c.mu), and
// carryOut the others, which wait on workers, NATS or files, after c.mu is
// released, in the order the lifecycle gave them.

// jobStep is what one event asked of a job, to carry out once c.mu is
// released.
type jobStep struct {
	j    *jobState
	acts []lifecycle.Action
}

func (c *Coordinator) nowMillis() int64 { return c.now().UnixMilli() }

// step feeds one event to j's lifecycle, at the current time, and carries
// out the actions it produces. c.mu must not be held. It returns the
// event's error, and the error of a deployment it carried out.
func (c *Coordinator) step(j *jobState, event func(lc *lifecycle.Job, now int64) error) error {
	c.mu.Lock()
	c.drainLocked(j)
	err := event(j.lc, c.nowMillis())
	acts := c.applyLocked(j)
	c.mu.Unlock()
	if derr := c.carryOut(j, acts); err == nil {
		err = derr
	}
	return err
}

// applyLocked takes the lifecycle's actions, carries out those that stay
// in memory, and returns the others for carryOut; c.mu is held.
func (c *Coordinator) applyLocked(j *jobState) []lifecycle.Action {
	var later []lifecycle.Action
	for _, a := range j.lc.Ready() {
		switch a := a.(type) {
		case lifecycle.StartCheckpoints:
			if d := j.ckpt; d != nil && d.attempt == a.Attempt {
				d.start()
			}
		case lifecycle.HoldCheckpoints:
			if d := j.ckpt; d != nil && d.attempt == a.Attempt {
				d.hold()
			}
		case lifecycle.StopCheckpoints:
			if d := j.ckpt; d != nil && d.attempt == a.Attempt {
				// Under c.mu, before anything else happens to the job: a
				// next attempt must not read the checkpoint storage while
				// this driver still writes to it.
				d.stop()
				j.ckpt = nil
			}
		case lifecycle.ReleaseSlots:
			c.releaseLocked(j.placement)
			j.placement = nil
		case lifecycle.PublishResult:
			c.endLocked(j, a.Result)
			later = append(later, a)
		default:
			later = append(later, a)
		}
	}
	c.syncLocked(j)
	return later
}

// syncLocked brings the fields that mirror the lifecycle up to date; c.mu
// is held.
func (c *Coordinator) syncLocked(j *jobState) {
	// Written only when they change: a deployment reads j.attempt without
	// c.mu, and the attempt does not change while it is being deployed.
	if n := j.lc.Attempt(); n != j.attempt {
		j.attempt = n
	}
	if done := j.lc.State().Terminal(); done != j.done {
		j.done = done
		if done {
			// Its series leave the metrics endpoint with it.
			c.board.drop(j.info.JobID)
		}
	}
	if log := j.lc.Log(); len(log) != len(j.restartLog) {
		j.restartLog = restartEntries(log)
	}
}

// carryOut carries out actions that wait on workers, NATS or files, in
// their order. c.mu must not be held. A Deploy runs in the caller's
// goroutine (whoever asked for the attempt: submit, resume, a restart's
// timer); carryOut returns its error.
func (c *Coordinator) carryOut(j *jobState, acts []lifecycle.Action) error {
	return c.carry(j, acts, false)
}

// carry is carryOut. With first, the submission of a new job, a record
// followed by the deployment of the first attempt is written once the
// workers have built the attempt's subtasks, while they start them: its
// three syncs (about a millisecond, most of it CPU in the kernel) are no
// longer on the path to the job's first record. The client's answer still
// waits for the record, so a job whose submission succeeded is one a restarted
// coordinator finds; a job deployed by a coordinator that failed before
// its record was written was never accepted, and the workers' heartbeats
// have its subtasks cancelled by the next coordinator, which does not
// know it (reconcileLocked). A later attempt's record is written first: a
// coordinator that recovered the attempt before would deploy one that
// runs already.
func (c *Coordinator) carry(j *jobState, acts []lifecycle.Action, first bool) error {
	id := j.info.JobID
	var deployErr error
	record := false // a record is due after the deployment
	for i, a := range acts {
		switch a := a.(type) {
		case lifecycle.CancelAttempt:
			c.learnAttemptCreds(j, a.Attempt, a.Workers)
			go c.cancelAll(a.Workers, id, a.Attempt, a.Failed)
		case lifecycle.Deploy:
			if a.Module != lifecycle.ModuleCurrent {
				// An upgrade's attempt, asked for by the end of the one
				// before (a NATS callback): deployed in its own goroutine.
				c.mu.Lock()
				op := j.upgrade
				err := c.switchLocked(j, a.Module)
				c.mu.Unlock()
				go func() {
					if err == nil {
						err = c.resolveUpgradeSavepoint(j, op, a.Module)
					}
					if err != nil {
						c.deployFailed(j, a, err)
						return
					}
					if c.deploy(j, a) == nil {
						// The record names what the job runs now (after the
						// deployment: it is on the downtime's path).
						c.writeRecord(j)
					}
				}()
				continue
			}
			if err := c.deploy(j, a); err != nil {
				deployErr = err
			}
			if record {
				// It says what the job is now: a job that ended or failed
				// meanwhile wrote its record already, and this one is
				// the same.
				record = false
				if err := c.writeRecord(j); err != nil && deployErr == nil {
					// A job a restarted coordinator would not find is
					// not accepted: its attempt is cancelled, and the
					// submission fails with the reason.
					deployErr = fmt.Errorf("job %s not accepted: %w", id, err)
					c.mu.Lock()
					_ = j.lc.Cancel(c.nowMillis())
					more := c.applyLocked(j)
					c.mu.Unlock()
					c.carryOut(j, more)
				}
			}
		case lifecycle.UpgradeEnded:
			c.upgradeEnded(j, a)
		case lifecycle.ScheduleRestart:
			go c.restartAfter(j, a)
		case lifecycle.DropDataStream:
			c.dropDataStream(j)
		case lifecycle.PersistSpec:
			if next, ok := nextAction(acts, i).(lifecycle.Deploy); first && ok && next.Module == lifecycle.ModuleCurrent {
				record = true
				continue
			}
			c.writeRecord(j)
		case lifecycle.PublishResult:
			// The spec with the result (PersistSpec, just before) reaches
			// the bucket first, unless the bucket cannot be written for
			// long: a client that heard of the end and then lists the
			// jobs sees it ended.
			if c.store != nil && !c.store.wait(id, kvTimeout) {
				c.cfg.Log.Warn("publishing the job's result before its spec is stored", logging.Job, id, "bucket", transport.JobsBucket)
			}
			if _, err := c.fence(); err != nil {
				// A deposed coordinator's view of the job's end is not
				// the job's: its clients wait for the leader's.
				c.cfg.Log.Warn("not publishing the job's result", logging.Job, id, "err", err)
				continue
			}
			c.mu.Lock()
			b, _ := json.Marshal(j.result)
			tb := b
			if j.result != nil && j.info.Tenant != "" {
				r := *j.result
				r.Error = c.tenantText(caller{tenant: j.info.Tenant}, r.Error)
				tb, _ = json.Marshal(r)
			}
			c.mu.Unlock()
			_ = c.cfg.NATS.Publish(transport.JobDoneSubject(id), b)
			if t := j.info.Tenant; t != "" {
				// What the tenant's clients hear as JobDoneSubject.
				c.publishToTenant(t, strings.TrimPrefix(transport.JobDoneSubject(id), "wstream."), tb)
			}
		}
	}
	return deployErr
}

// errNotWanted: the attempt is no longer wanted (the job was cancelled,
// or the coordinator is closing) while its placement waited.
var errNotWanted = errors.New("coordinator: attempt no longer wanted")

// deploy carries out a Deploy: it places the attempt's subtasks, reports
// the placement, sends every worker its part, and reports the outcome. It
// returns the deployment's error.
func (c *Coordinator) deploy(j *jobState, a lifecycle.Deploy) error {
	id := j.info.JobID
	pl, err := c.placeFor(j, a.Attempt)
	if errors.Is(err, errNotWanted) {
		return nil
	}
	c.mu.Lock()
	now := c.nowMillis()
	if err == nil && !c.liveLocked(pl) {
		// A worker was lost while the placement waited: place again on
		// the live ones.
		c.releaseLocked(pl)
		pl, err = c.placeLocked(j.info.Name, j.refs)
	}
	if err == nil && len(pl) == 0 {
		// Placed refuses it too, but that would read as a cancellation
		// below and leave the attempt waiting for ever.
		err = fmt.Errorf("job %s: attempt %d has an empty placement: no worker would run any of its %d subtasks", id, a.Attempt, len(j.refs))
	}
	if err != nil {
		c.mu.Unlock()
		c.deployFailed(j, a, err)
		return err
	}
	if perr := j.lc.Placed(now, a.Attempt, pl.counts()); perr != nil {
		// Cancelled meanwhile: nothing is deployed.
		c.releaseLocked(pl)
		c.mu.Unlock()
		return nil
	}
	// The job's own copy: the liveness monitor takes a lost worker out of
	// it (its slots went with it) while this deployment still sends to,
	// and reports, the whole of pl.
	j.placement = maps.Clone(pl)
	j.metrics = map[string]*transport.VertexMetrics{}
	c.syncLocked(j)
	c.mu.Unlock()

	took, restore, err := c.deployOrAdopt(j, a, pl)
	c.mu.Lock()
	now = c.nowMillis()
	var serr error
	if err != nil {
		serr = j.lc.DeployFailed(now, a.Attempt, err.Error(), took)
	} else {
		serr = j.lc.Deployed(now, a.Attempt)
	}
	if serr != nil && j.ckpt != nil && j.ckpt.attempt == a.Attempt {
		// The job was let go of meanwhile (the coordinator is closing):
		// no one else stops what the deployment made.
		j.ckpt.stop()
		j.ckpt = nil
	}
	acts := c.applyLocked(j)
	c.mu.Unlock()
	if err == nil {
		attrs := []any{logging.Job, id, logging.Attempt, a.Attempt, "workers", strings.Join(pl.workers(), ","), "subtasks", len(j.refs)}
		switch {
		case j.restored.ID != 0 && j.restored.Kind == checkpoint.KindSavepoint.String():
			attrs = append(attrs, "fromSavepoint", j.restored.Location)
		case restore != 0:
			attrs = append(attrs, "fromCheckpoint", restore)
		}
		c.cfg.Log.Info("attempt deployed", attrs...)
	}
	c.carryOut(j, acts)
	return err
}

// nextAction is the action after acts[i], or nil.
func nextAction(acts []lifecycle.Action, i int) lifecycle.Action {
	if i+1 < len(acts) {
		return acts[i+1]
	}
	return nil
}

// deployFailed tells the lifecycle that attempt a could not be placed or
// prepared (nothing was sent to a worker), and carries out what follows.
func (c *Coordinator) deployFailed(j *jobState, a lifecycle.Deploy, err error) {
	c.mu.Lock()
	_ = j.lc.DeployFailed(c.nowMillis(), a.Attempt, err.Error(), nil)
	acts := c.applyLocked(j)
	c.mu.Unlock()
	c.carryOut(j, acts)
}

// placeFor places attempt n of j: on the placement submit made, after the
// workers have spoken for a job resumed from the job bucket, or on the
// live workers now.
func (c *Coordinator) placeFor(j *jobState, n int) (placement, error) {
	c.mu.Lock()
	pick, resuming := j.pick, j.resuming
	j.pick, j.resuming = nil, nil
	c.mu.Unlock()
	switch {
	case pick != nil:
		return pick, nil
	case resuming != nil:
		return c.awaitWorkers(j, n, resuming)
	}
	return c.place(j.info.Name, j.refs)
}

// liveLocked reports whether every worker of p is alive; c.mu is held.
func (c *Coordinator) liveLocked(p placement) bool {
	for w := range p {
		if _, ok := c.workers[w]; !ok {
			return false
		}
	}
	return true
}

// counts gives the number of subtasks per worker.
func (p placement) counts() map[string]int {
	out := make(map[string]int, len(p))
	for w, refs := range p {
		out[w] = len(refs)
	}
	return out
}

// sendDeployment makes what attempt a needs (the data stream, the
// checkpoint driver, which picks the checkpoint to restore) and sends every
// worker its part at once; the channels between them wait for each other
// through the data stream. It returns the workers that took their part and
// the checkpoint the attempt restores.
func (c *Coordinator) sendDeployment(j *jobState, a lifecycle.Deploy, pl placement) ([]string, int64, error) {
	id := j.info.JobID
	d := transport.Deployment{
		JobID: id, Attempt: a.Attempt, Plan: j.plan.JSON(),
		ModuleDigest: j.digest, ModuleName: j.module, Tasks: j.refs, Restartable: a.Restartable,
		// The downtime of an upgrade ends with the new module's first record.
		ReportFirstRecord: a.Module == lifecycle.ModuleNew,
		Replicas:          c.replicas(),
	}
	if err := c.tenantDeployment(j, &d); err != nil {
		return nil, 0, err
	}
	d.ModuleBytes = c.moduleLimit(j.info.Tenant)
	stream, err := c.dataStream(j, pl)
	if err != nil {
		return nil, 0, err
	}
	d.DataStream = stream
	if j.plan.Checkpoint.Enabled() {
		drv, restore, err := c.newCkptDriver(j)
		if err != nil {
			return nil, 0, fmt.Errorf("job %s: %w", id, err)
		}
		drv.workers = pl.workers()
		d.CheckpointRoot = drv.storage.Root()
		d.RestoreID = restore
		if restore == 0 && a.Restore != lifecycle.RestoreNone && j.fromSavepoint != "" {
			// No checkpoint of its own yet: start (again) from the savepoint.
			d.SavepointRoot, d.RestoreID = j.fromSavepoint, j.savepointID
		}
		// Every later restart can fall back on a checkpoint.
		d.Restartable = d.Restartable || j.plan.Restart != nil
		c.mu.Lock()
		if j.ckpt != nil {
			j.ckpt.stop()
		}
		j.ckpt = drv
		j.restored = RestoredCheckpoint{}
		if d.RestoreID != 0 {
			j.restored = RestoredCheckpoint{ID: d.RestoreID, Kind: checkpoint.KindCheckpoint.String(), Location: drv.storage.Root(),
				Attempt: a.Attempt, Time: c.nowMillis()}
			if d.SavepointRoot != "" {
				j.restored.Kind, j.restored.Location = checkpoint.KindSavepoint.String(), d.SavepointRoot
			}
			j.stats.restored()
		}
		c.mu.Unlock()
	}
	workers := pl.workers()
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dw := d
			dw.Tasks = pl[w]
			errs[i] = c.deployOn(w, dw)
		}()
	}
	wg.Wait()
	var took []string
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			took = append(took, workers[i])
		case failed == nil:
			failed = fmt.Errorf("deploying job %s on worker %s: %w", id, workers[i], err)
		}
	}
	return took, d.RestoreID, failed
}

// restartAfter waits for a restart's time and tells the lifecycle, which
// deploys the next attempt then (unless the job was cancelled meanwhile).
func (c *Coordinator) restartAfter(j *jobState, a lifecycle.ScheduleRestart) {
	c.cfg.Log.Warn("job failed; restarting", logging.Job, j.info.JobID, "cause", a.Cause, "restart", a.Restart,
		"delay", time.Duration(max(0, a.At-c.nowMillis()))*time.Millisecond)
	for {
		if wait := a.At - c.nowMillis(); wait > 0 {
			time.Sleep(time.Duration(wait) * time.Millisecond)
		}
		c.mu.Lock()
		j.lc.Tick(c.nowMillis())
		_, waiting := j.lc.RestartDue()
		acts := c.applyLocked(j)
		c.mu.Unlock()
		if !waiting {
			c.carryOut(j, acts)
			return
		}
		// The clock is behind the restart's time still.
		time.Sleep(time.Millisecond)
	}
}

// The job's state has two vocabularies: lifecycle.State inside the
// coordinator (and its status rows, by name), and transport's Job* in the
// job's result and record. These two functions are the one mapping.

// ResultState is the transport.Job* state that announces a job's ended
// lifecycle.
func ResultState(res lifecycle.Result) string {
	switch {
	case res.State == lifecycle.Failed:
		return transport.JobFailed
	case res.State == lifecycle.Finished && res.Stopped:
		return transport.JobStopped
	case res.State == lifecycle.Finished:
		return transport.JobFinished
	default:
		return transport.JobCanceled
	}
}

// StatusResultState is the transport.Job* state of a job whose status row
// shows the lifecycle state named name (State.String), "" for a job
// that has not ended. SUSPENDED counts as stopped: the job ended for
// this coordinator, not for good.
func StatusResultState(name string) string {
	switch name {
	case lifecycle.Finished.String():
		return transport.JobFinished
	case lifecycle.Failed.String():
		return transport.JobFailed
	case lifecycle.Canceled.String():
		return transport.JobCanceled
	case lifecycle.Suspended.String():
		return transport.JobStopped
	}
	return ""
}

// endLocked records a job's end; c.mu is held.
func (c *Coordinator) endLocked(j *jobState, res lifecycle.Result) {
	if j.sub != nil {
		_ = j.sub.Unsubscribe()
		j.sub = nil
	}
	r := &transport.JobResult{JobID: j.info.JobID, Name: j.info.Name, Duration: c.now().Sub(j.started), Restarts: res.Restarts}
	r.State = ResultState(res)
	if res.State == lifecycle.Failed {
		r.Error = res.Error
	}
	for _, v := range j.plan.Vertices {
		if m, ok := j.metrics[v.ID]; ok {
			r.Metrics = append(r.Metrics, *m)
		}
	}
	j.result = r
	j.info.State, j.info.Error = r.State, r.Error
	level, attrs := slog.LevelInfo, []any{logging.Job, r.JobID, "state", r.State, "duration", r.Duration.Round(time.Millisecond)}
	if r.Error != "" {
		level, attrs = slog.LevelWarn, append(attrs, "err", r.Error)
	}
	c.cfg.Log.Log(context.Background(), level, "job ended", attrs...)
}

func (c *Coordinator) onTaskStatus(m *nats.Msg) {
	var st transport.TaskStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		c.cfg.Log.Warn("bad task status", "subject", m.Subject, "err", err)
		return
	}
	if st.State == transport.TaskFirstRecord {
		c.mu.Lock()
		if j, ok := c.jobs[st.JobID]; ok {
			c.firstRecordLocked(j, st, j.upgrade)
			c.firstRecordLocked(j, st, j.lastUpgrade)
		}
		c.mu.Unlock()
		return
	}
	var end lifecycle.TaskEnd
	switch st.State {
	case transport.TaskFinished:
		end = lifecycle.TaskFinished
	case transport.TaskFailed:
		end = lifecycle.TaskFailed
		if st.AfterPeer {
			end = lifecycle.TaskFailedAfterPeer
		}
	case transport.TaskCanceled:
		end = lifecycle.TaskCanceled
	default:
		return
	}
	c.mu.Lock()
	j, ok := c.jobs[st.JobID]
	if !ok {
		c.mu.Unlock()
		return
	}
	// A stop's savepoint that completed before the stop went out to the
	// subtasks is heard before any of their ends.
	c.drainLocked(j)
	now := c.nowMillis()
	// Stale reports (an older attempt, a lost worker's) are not counted.
	if j.lc.TaskEnded(now, st.Attempt, st.Worker, end, st.Error) == nil {
		if end == lifecycle.TaskFailed || end == lifecycle.TaskFailedAfterPeer {
			c.taskFailedLocked(j, st, end)
		}
		for _, vm := range st.Metrics {
			agg, ok := j.metrics[vm.Vertex]
			if !ok {
				agg = &transport.VertexMetrics{Vertex: vm.Vertex}
				j.metrics[vm.Vertex] = agg
			}
			agg.RecordsIn += vm.RecordsIn
			agg.RecordsOut += vm.RecordsOut
			agg.DeadLetters += vm.DeadLetters
		}
		if end == lifecycle.TaskFinished && j.ckpt != nil && j.ckpt.attempt == st.Attempt {
			j.ckpt.taskFinished(checkpoint.TaskID{Chain: st.Task.Chain, Subtask: st.Task.Subtask})
		}
	}
	acts := c.applyLocked(j)
	c.mu.Unlock()
	c.carryOut(j, acts)
}

// failJob fails attempt of a job for a reason of the coordinator's own (a
// lost data stream); c.mu must not be held.
func (c *Coordinator) failJob(j *jobState, attempt int, reason string) {
	_ = c.step(j, func(lc *lifecycle.Job, now int64) error { return lc.Fail(now, attempt, reason) })
}

// stopSavepointRequested asks j's lifecycle whether a stop with savepoint
// may go out, and records it: only a RUNNING job can be stopped (a
// restarting one is told to try again). c.mu must not be held.
func (c *Coordinator) stopSavepointRequested(j *jobState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return j.lc.StopRequested(c.nowMillis())
}

// stopSavepointEnded tells j's lifecycle how the stop-with-savepoint
// savepoint id of attempt ended: err is nil when it completed (the job
// then ends FINISHED, stopped, once its subtasks have stopped), the reason
// it failed otherwise (the job goes on RUNNING). It never waits for c.mu
// (report). On completion call it before CheckpointStop goes out, so that
// the lifecycle hears of the stop before any subtask's end.
func (c *Coordinator) stopSavepointEnded(j *jobState, attempt int, id int64, err error) {
	c.report(j, stopEnded{attempt: attempt, id: id, err: err})
}

// restartEntries turns the lifecycle's restart log into the record's.
func restartEntries(log []lifecycle.Restart) []RestartEntry {
	out := make([]RestartEntry, len(log))
	for i, r := range log {
		out[i] = RestartEntry{Attempt: r.Attempt, Reason: r.Cause, Time: time.UnixMilli(r.At)}
	}
	return out
}

// lifecycleLog turns a record's restart log into the lifecycle's.
func lifecycleLog(log []RestartEntry) []lifecycle.Restart {
	out := make([]lifecycle.Restart, len(log))
	for i, r := range log {
		out[i] = lifecycle.Restart{Attempt: r.Attempt, Cause: r.Reason, At: r.Time.UnixMilli()}
	}
	return slices.Clip(out)
}
