package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/transport"
)

// ckptDriver runs the checkpoint coordinator of one attempt of a job: one
// goroutine (loop) owns the pure state machine and everything below in, and
// steps it, on its own clock (ticks), with the inputs that come to it as
// messages (in: acks and declines, subtasks' ends, savepoint requests,
// holds, aborts, queries, and the outcomes of its I/O); it carries out the
// machine's actions, and starts the slow I/O (reserving an id in the
// counter, writing a checkpoint's metadata, exporting a savepoint) in
// goroutines of its own, which report back to it as messages. Nothing of it
// is guarded by a lock: whoever wants something of the driver sends the
// loop a message and waits until it has run (do). The loop never waits for
// c.mu, so c.mu may be held while sending it one. Once stopped, the loop
// runs only the outcomes of the I/O still under way, and ends with it.
type ckptDriver struct {
	c       *Coordinator
	j       *jobState
	attempt int
	// workers run the attempt's subtasks; set before start.
	workers []string
	// What the attempt runs, for its checkpoints' metadata.
	plan           json.RawMessage
	digest         string
	maxParallelism int
	// in carries the loop's messages; loopDone closes when the loop has
	// ended (stopped, and its I/O over), after which no message runs.
	in       chan func()
	loopDone chan struct{}
	// ticker gives the state machine the time once start has run.
	ticker *time.Ticker

	sm      *checkpoint.Coordinator
	storage *checkpoint.Storage
	sources []checkpoint.TaskID
	done    map[checkpoint.TaskID]bool
	// ended holds the tasks whose input ended: triggers reach them
	// directly, as they reach sources.
	ended   map[checkpoint.TaskID]bool
	pending map[int64]int64 // id → trigger time, for history of aborts
	kinds   map[int64]checkpoint.Kind
	sub     *nats.Subscription
	quit    chan struct{}
	stopped bool
	history *os.File
	wg      sync.WaitGroup
	// savepoints clients wait for, by id
	savepoints map[int64]*pendingSavepoint
	reg        *registry
	// toReserve holds, in id order, the triggered ids whose reservation in
	// the id counter (KV I/O, off the loop) has not been made; unsent has
	// them and the one being reserved: their triggers wait for it.
	// reserving says a reservation is under way.
	toReserve []int64
	unsent    map[int64]bool
	reserving bool
	// held: the job left RUNNING (hold); no trigger goes out any more.
	held bool
	// ctx ends the driver's I/O when it stops.
	ctx    context.Context
	cancel context.CancelFunc
	// outside holds the complete checkpoints that are neither restored
	// nor retained (older than the savepoint the job started from, or
	// newer than the one restored but unusable): their shared files stay
	// referenced, since a resume may still need them, until a checkpoint
	// of this attempt completes; then they go.
	outside []int64
}

// restoreRetries are the waits between reads of checkpoint storage for a
// restore while a checkpoint cannot be read now (ErrUnavailable); after
// the last the deployment fails, and the restart strategy decides.
var restoreRetries = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}

// newCkptDriver prepares checkpointing for the job's current attempt and
// returns the id of the checkpoint it restores from (0: none). A checkpoint
// that cannot be read now is waited for (restoreRetries), never passed over
// for an older one or for empty state: sinks committed on it, and a file
// sink restored with no checkpoint deletes what it committed.
func (c *Coordinator) newCkptDriver(j *jobState) (*ckptDriver, int64, error) {
	if j.adopting {
		return c.newAdoptedCkptDriver(j)
	}
	nc, st, err := c.openCkptStorage(j)
	if err != nil {
		return nil, 0, err
	}
	var rp restorePlan
	if j.attempt > 0 {
		if rp, err = c.planRestore(j, nc, st); err != nil {
			return nil, 0, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		if err := c.purgeEndedAttempts(ctx, nc, j.info.JobID, j.attempt, rp.meta); err != nil {
			c.cfg.Log.Warn("purging the data of ended attempts", logging.Job, j.info.JobID, "err", err)
		}
		cancel()
	}
	d, err := c.startCkptDriver(j, st, rp)
	if err != nil {
		return nil, 0, err
	}
	return d, rp.id, nil
}

// startCkptDriver makes and starts the loop of the checkpoint driver of
// j's current attempt on storage st, with the completed checkpoints of rp
// known to its state machine and its registry of shared files.
func (c *Coordinator) startCkptDriver(j *jobState, st *checkpoint.Storage, rp restorePlan) (*ckptDriver, error) {
	next, err := c.lastCheckpointID(j, st)
	if err != nil {
		return nil, err
	}
	tasks, sources, err := ckptTasks(j.plan)
	if err != nil {
		return nil, err
	}
	sm, err := checkpoint.NewCoordinator(ckptConfig(j.plan.Checkpoint), tasks, next+1, time.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	if len(rp.retained) > 0 {
		if err := sm.Recover(rp.retained); err != nil {
			return nil, err
		}
	}
	hist, err := openHistory(c.cfg.DataDir, j.info.JobID)
	if err != nil {
		return nil, err
	}
	d := &ckptDriver{c: c, j: j, attempt: j.attempt, sm: sm, storage: st, sources: sources,
		done: map[checkpoint.TaskID]bool{}, ended: map[checkpoint.TaskID]bool{}, pending: map[int64]int64{},
		kinds: map[int64]checkpoint.Kind{}, quit: make(chan struct{}), history: hist,
		savepoints: map[int64]*pendingSavepoint{}, reg: newRegistry(), unsent: map[int64]bool{},
		in: make(chan func()), loopDone: make(chan struct{}),
		plan: j.plan.JSON(), digest: j.digest, maxParallelism: j.plan.MaxParallelism}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, cp := range slices.Concat(rp.retained, rp.outside) {
		for _, t := range cp.Tasks {
			d.reg.acked(cp.ID, t)
		}
		d.reg.completedCheckpoint(cp.ID)
	}
	for _, cp := range rp.outside {
		d.outside = append(d.outside, cp.ID)
	}
	if !j.adopting {
		// Nothing is pending yet: shared files that no retained checkpoint
		// references were left by aborted or crashed checkpoints. (The
		// workers of an adopted attempt may still be uploading for the
		// deposed leader's checkpoint: the sweep after the next discard
		// with nothing pending removes what that left.)
		d.sweep()
	}
	sub, err := c.cfg.NATS.Subscribe(transport.CheckpointAckSubject(j.info.JobID), c.tracked(d.onAck))
	if err != nil {
		hist.Close()
		return nil, err
	}
	d.sub = sub
	go d.loop()
	return d, nil
}

// tick is how often the driver gives the state machine the time.
const tick = 10 * time.Millisecond

// loop runs the driver's messages and ticks, one at a time, until stop;
// then the messages of the I/O still under way, until it is over.
func (d *ckptDriver) loop() {
	defer close(d.loopDone)
	for !d.stopped {
		var tickC <-chan time.Time
		if d.ticker != nil {
			tickC = d.ticker.C
		}
		select {
		case f := <-d.in:
			f()
		case <-tickC:
			d.sm.Tick(time.Now().UnixMilli())
			d.run()
		}
	}
	if d.ticker != nil {
		d.ticker.Stop()
	}
	// No I/O starts once stopped.
	ioDone := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(ioDone)
	}()
	for {
		select {
		case f := <-d.in:
			f()
		case <-ioDone:
			return
		}
	}
}

// do runs f on the loop and returns once it has run; false when the loop
// has ended (the driver stopped), and f did not run.
func (d *ckptDriver) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case d.in <- func() { f(); close(ran) }:
	case <-d.loopDone:
		return false
	}
	// The loop took f: it runs it before anything else.
	<-ran
	return true
}

// start gives the state machine the time from now on: it triggers.
func (d *ckptDriver) start() {
	d.do(func() {
		if d.ticker == nil {
			d.ticker = time.NewTicker(tick)
		}
	})
}

// stop ends the driver: pending checkpoints are aborted and forgotten (the
// attempt is over; its subtasks are gone). The first call returns once the
// driver's I/O is over.
func (d *ckptDriver) stop() {
	first := false
	d.do(func() {
		if d.stopped {
			return
		}
		first = true
		d.stopped = true
		d.sm.Stop()
		d.run()
	})
	if !first {
		return
	}
	close(d.quit)
	d.cancel()
	_ = d.sub.Unsubscribe()
	<-d.loopDone
	d.history.Close()
}

// hold ends triggering once the attempt is doomed (the job left RUNNING):
// pending checkpoints may still complete.
func (d *ckptDriver) hold() {
	d.do(func() {
		if !d.stopped {
			d.held = true
			d.sm.HoldTriggers()
		}
	})
}

func (d *ckptDriver) taskFinished(t checkpoint.TaskID) {
	d.do(func() {
		d.done[t] = true
		if !d.stopped {
			d.sm.TaskFinished(t)
			d.run()
		}
	})
}

func (d *ckptDriver) onAck(m *nats.Msg) {
	var a transport.CheckpointAck
	if err := json.Unmarshal(m.Data, &a); err != nil {
		d.c.cfg.Log.Warn("bad checkpoint acknowledgement", "err", err)
		return
	}
	if a.Attempt != d.attempt {
		return
	}
	d.do(func() {
		if !d.stopped {
			d.acked(a)
		}
	})
}

// acked steps the state machine with an acknowledgement; on the loop.
func (d *ckptDriver) acked(a transport.CheckpointAck) {
	now := time.Now().UnixMilli()
	var err error
	if a.EndOfInput {
		d.endedInput(now, a.Task)
		d.run()
		return
	}
	if a.Decline != "" {
		err = d.sm.Decline(now, a.ID, a.Task, a.Decline)
	} else {
		st := checkpoint.SubtaskState{Task: a.Task}
		if a.State != nil {
			st = *a.State
		}
		if err = d.sm.Ack(now, a.ID, a.Task, st, a.Metrics); err == nil {
			d.reg.acked(a.ID, st)
		}
	}
	if err != nil {
		d.c.cfg.Log.Warn("checkpoint acknowledgement", logging.Job, d.j.info.JobID, logging.Checkpoint, a.ID, "err", err)
	}
	d.run()
}

// endedInput records that task's input ended; on the loop. The triggers of
// the checkpoints still pending go to it directly: their barriers cannot
// reach it any more (a subtask ignores a trigger of a checkpoint it took its
// part of already).
func (d *ckptDriver) endedInput(now int64, task checkpoint.TaskID) {
	if d.done[task] || d.ended[task] {
		return
	}
	d.ended[task] = true
	for _, id := range d.sm.Pending() {
		if !d.unsent[id] {
			// (An unsent trigger will include it.)
			d.send(d.triggerFor(id, []checkpoint.TaskID{task}))
		}
	}
	d.sm.TaskEndedInput(now, task)
}

// triggerFor is the trigger of pending checkpoint id for tasks.
func (d *ckptDriver) triggerFor(id int64, tasks []checkpoint.TaskID) transport.CheckpointControl {
	ctl := transport.CheckpointControl{Action: transport.CheckpointTrigger, ID: id, Kind: d.kinds[id], Timestamp: d.pending[id], Tasks: tasks}
	if sp := d.savepoints[id]; sp != nil {
		ctl.Stop, ctl.Drain = sp.stop, sp.drain
	}
	return ctl
}

// run carries out the state machine's actions, and those that carrying
// them out produces; on the loop.
func (d *ckptDriver) run() {
	for acts := d.sm.Ready(); len(acts) > 0; acts = d.sm.Ready() {
		d.carryOut(acts)
	}
}

func (d *ckptDriver) carryOut(acts []checkpoint.CoordinatorAction) {
	for _, a := range acts {
		switch a := a.(type) {
		case checkpoint.Trigger:
			d.pending[a.ID] = a.Timestamp
			d.kinds[a.ID] = a.Kind
			d.c.cfg.Log.Info(a.Kind.String()+" triggered", logging.Job, d.j.info.JobID, logging.Attempt, d.attempt, logging.Checkpoint, a.ID)
			if d.c.ids == nil {
				d.sendTrigger(a.ID)
				continue
			}
			// The id goes to the counter first, off the loop: KV I/O on
			// it would stall acks, REST and the coordinator's other
			// paths while the bucket is slow.
			d.unsent[a.ID] = true
			d.toReserve = append(d.toReserve, a.ID)
			if !d.reserving {
				d.reserveNext()
			}
		case checkpoint.Persist:
			d.persist(a.Checkpoint)
		case checkpoint.NotifyComplete:
			delete(d.pending, a.ID)
			delete(d.kinds, a.ID)
			if a.Kind == checkpoint.KindCheckpoint {
				d.reg.completedCheckpoint(a.ID)
				d.releaseOutside()
				// Before the sinks commit on it: an upgrade on probation
				// can no longer roll back.
				d.c.report(d.j, checkpointConfirmed{attempt: d.attempt})
			} else {
				d.reg.release(a.ID) // savepoints reference no shared files
			}
			// Sinks commit on a checkpoint, or on the savepoint the job
			// stops with; an intermediate savepoint commits nothing.
			sp := d.savepoints[a.ID]
			d.send(transport.CheckpointControl{Action: transport.CheckpointComplete, ID: a.ID, Kind: a.Kind, Stop: sp != nil && sp.stop})
			if sp != nil {
				delete(d.savepoints, a.ID)
				if op := sp.upgrade; op != nil {
					d.c.report(d.j, upgradeBarrierDone{op: op, id: a.ID, dir: sp.dir})
				}
				if sp.stop {
					// After the completion on the same subject, so that
					// every subtask commits before it stops.
					d.c.stopSavepointEnded(d.j, d.attempt, a.ID, nil)
					d.send(transport.CheckpointControl{Action: transport.CheckpointStop, ID: a.ID})
				}
				sp.reply(transport.SavepointReply{ID: a.ID, Dir: sp.dir})
			}
		case checkpoint.NotifyAborted:
			if sp := d.savepoints[a.ID]; sp != nil {
				delete(d.savepoints, a.ID)
				if sp.stop {
					// The job goes on running; its sources resume on the
					// abort below.
					d.c.stopSavepointEnded(d.j, d.attempt, a.ID, errors.New(a.Reason))
				}
				sp.reply(transport.SavepointReply{Error: fmt.Sprintf("savepoint %d failed: %s", a.ID, a.Reason)})
			}
			d.record(HistoryEntry{ID: a.ID, Kind: d.kinds[a.ID], Status: "aborted", Reason: a.Reason, Trigger: d.pending[a.ID], Done: time.Now().UnixMilli()}, nil)
			delete(d.pending, a.ID)
			delete(d.kinds, a.ID)
			if !d.stopped {
				d.send(transport.CheckpointControl{Action: transport.CheckpointAbort, ID: a.ID, Reason: a.Reason})
			}
		case checkpoint.Discard:
			// Synchronously, before any later trigger: a checkpoint must not
			// reference a shared file that is being deleted.
			d.discard(a.ID)
			if len(d.sm.Pending()) == 0 {
				d.sweep()
			}
		case checkpoint.FailJob:
			d.c.report(d.j, attemptFailed{attempt: d.attempt, reason: a.Reason})
		}
	}
}

// releaseOutside lets go of the checkpoints that were neither restored nor
// retained, once a checkpoint of this attempt completed: a resume restores
// that one now. On the loop.
func (d *ckptDriver) releaseOutside() {
	for _, id := range d.outside {
		d.discard(id)
	}
	d.outside = nil
}

// discard deletes checkpoint id and the shared files only it referenced,
// unless a checkpoint is pending (registry.deletable); on the loop.
func (d *ckptDriver) discard(id int64) {
	free := d.reg.release(id)
	if !d.mayDelete("discarding a checkpoint", id) {
		return
	}
	if err := d.storage.Discard(id); err != nil {
		d.c.cfg.Log.Warn("discarding a checkpoint", logging.Job, d.j.info.JobID, logging.Checkpoint, id, "err", err)
	}
	for _, p := range d.reg.deletable(free, len(d.sm.Pending())) {
		if !d.mayDelete("removing a shared file", id) {
			return
		}
		if err := d.storage.RemoveShared(p); err != nil {
			d.c.cfg.Log.Warn("removing a shared file", logging.Job, d.j.info.JobID, "file", p, "err", err)
		}
	}
}

// mayDelete reports whether the driver may delete a checkpoint's files now,
// asked before every deletion: only while its coordinator holds the lease.
// A deposed leader's registry knows nothing of a later leader's
// checkpoints, which may reference the same shared files (they are named
// by their content): its deletes would leave them missing. On the loop.
func (d *ckptDriver) mayDelete(what string, id int64) bool {
	if _, err := d.c.fence(); err != nil {
		d.c.cfg.Log.Warn("not deleting checkpoint files: this coordinator does not hold the lease", logging.Job, d.j.info.JobID, "doing", what, logging.Checkpoint, id, "err", err)
		return false
	}
	return true
}

// sendTrigger sends the trigger of pending checkpoint id to the sources,
// and to the subtasks whose input ended (no barrier reaches them); on the
// loop.
func (d *ckptDriver) sendTrigger(id int64) {
	var roots []checkpoint.TaskID
	for _, s := range d.sources {
		if !d.done[s] && !d.ended[s] {
			roots = append(roots, s)
		}
	}
	for t := range d.ended {
		if !d.done[t] {
			roots = append(roots, t)
		}
	}
	d.send(d.triggerFor(id, roots))
}

// reserveNext reserves the first id of toReserve in the id counter, off
// the loop, which hears the outcome (reserved) and reserves the next: one at
// a time and in order (the counter only moves up). On the loop.
func (d *ckptDriver) reserveNext() {
	id := d.toReserve[0]
	d.toReserve = d.toReserve[1:]
	d.reserving = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		err := d.reserve(id)
		if errors.Is(err, errDeposed) {
			// A later leader wrote the counter.
			d.c.depose(err)
		}
		d.do(func() { d.reserved(id, err) })
	}()
}

// reserved sends the trigger of checkpoint id once its id is reserved; a
// reservation that failed (the bucket is unreachable) aborts its
// checkpoint, which no subtask saw, without counting as a failed
// checkpoint. On the loop.
func (d *ckptDriver) reserved(id int64, err error) {
	delete(d.unsent, id)
	d.reserving = false
	if d.stopped {
		d.toReserve = nil
		return
	}
	if err == nil && d.held {
		// No subtask saw it, and none may once the job left RUNNING.
		err = errors.New("the job left RUNNING before its trigger went out")
	}
	// Aborted meanwhile (a timeout, a reconnection): nothing to send.
	if _, pending := d.pending[id]; pending {
		if err != nil {
			d.c.cfg.Log.Warn("checkpoint not triggered", logging.Job, d.j.info.JobID, logging.Checkpoint, id, "err", err)
			d.sm.TriggerFailed(time.Now().UnixMilli(), id, err.Error())
		} else {
			d.sendTrigger(id)
		}
		d.run()
	}
	if len(d.toReserve) > 0 {
		d.reserveNext()
	}
}

// reserve records id as used in the job's id counter before its trigger
// goes out, so that no later attempt, coordinator or savepoint reuses it.
// Off the loop.
func (d *ckptDriver) reserve(id int64) error {
	if d.c.ids == nil {
		return nil
	}
	epoch, err := d.c.fence()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, kvTimeout)
	defer cancel()
	return d.c.ids.reserve(ctx, d.j.info.JobID, id, epoch)
}

func (d *ckptDriver) send(ctl transport.CheckpointControl) {
	ctl.JobID, ctl.Attempt = d.j.info.JobID, d.attempt
	epoch, err := d.c.fence()
	if err != nil {
		d.c.cfg.Log.Warn("not sending a checkpoint message", logging.Job, d.j.info.JobID, logging.Checkpoint, ctl.ID, "action", ctl.Action, "err", err)
		return
	}
	ctl.Epoch = epoch
	b, _ := json.Marshal(ctl)
	// Every worker of the attempt: each passes a trigger to the listed
	// subtasks it runs, and a notification to all of its subtasks.
	for _, w := range d.workers {
		if err := d.c.cfg.NATS.Publish(transport.WorkerCheckpointSubject(w), b); err != nil {
			d.c.cfg.Log.Warn("sending a checkpoint message", logging.Job, d.j.info.JobID, logging.Checkpoint, ctl.ID, "action", ctl.Action, logging.Worker, w, "err", err)
		}
	}
}

// persist writes a completed checkpoint's metadata off the loop, which
// then hears the outcome and reports it to the state machine. On the loop.
func (d *ckptDriver) persist(cp checkpoint.Completed) {
	meta := &checkpoint.Metadata{
		JobID: d.j.info.JobID, ID: cp.ID, Kind: cp.Kind, Trigger: cp.Trigger, Done: cp.Done,
		Plan: d.plan, ModuleDigest: d.digest, MaxParallelism: d.maxParallelism,
		Tasks: slices.Clone(cp.Tasks), Metrics: map[string]checkpoint.Metrics{},
	}
	e := HistoryEntry{ID: cp.ID, Kind: cp.Kind, Status: "completed", Trigger: cp.Trigger, Done: cp.Done,
		Duration: time.Duration(cp.Done-cp.Trigger) * time.Millisecond}
	for i := range meta.Tasks {
		// The state machine gives a task that finished before acknowledging
		// an empty state and no metrics.
		if _, acked := cp.Metrics[meta.Tasks[i].Task]; !acked {
			meta.Tasks[i].Finished = true
		}
	}
	for t, m := range cp.Metrics {
		meta.Metrics[t.String()] = m
		e.StateSize += m.StateSize
		e.Uploaded += m.Uploaded
		e.InFlightBytes += m.InFlightBytes
		e.DeadLetters += m.DeadLetters
		e.Alignment = max(e.Alignment, m.Alignment)
		e.Sync = max(e.Sync, m.Sync)
		e.Async = max(e.Async, m.Async)
		e.Unaligned = e.Unaligned || m.Unaligned
	}
	sp := d.savepoints[cp.ID]
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		// The completions record completes the checkpoint, by
		// compare-and-set at this leader's epoch: a deposed leader
		// completes none, even one paused after its lease check. The
		// metadata follows it, so a checkpoint whose record did not land
		// leaves no metadata that a restore could take (and nothing that
		// would have to be deleted again).
		epoch, err := d.c.fence()
		if err == nil {
			err = d.recordComplete(cp.ID, epoch)
		}
		if err == nil {
			err = d.storage.WriteMetadata(meta)
		}
		if err == nil && cp.Kind == checkpoint.KindSavepoint {
			if sp != nil {
				err = d.exportSavepoint(cp.ID, sp.dir)
			}
			if err == nil {
				// The savepoint lives in its own directory now; the copy in
				// the job's storage is not one of its checkpoints.
				err = d.storage.Discard(cp.ID)
			}
			if err == nil && sp != nil && sp.stop {
				err = d.restoreFrom(cp.ID, sp.dir)
			}
		}
		if err == nil && cp.Kind == checkpoint.KindCheckpoint {
			d.c.report(d.j, checkpointWritten{id: cp.ID})
		}
		d.do(func() {
			if err != nil {
				d.c.cfg.Log.Error("writing a checkpoint", logging.Job, d.j.info.JobID, logging.Checkpoint, cp.ID, "err", err)
			} else {
				d.record(e, cp.Metrics)
			}
			d.sm.Persisted(cp.ID, err)
			d.run()
		})
	}()
}

// recordComplete writes checkpoint id into the job's completions record
// (idCounter.complete). A deposed leader learns so here, and stops.
func (d *ckptDriver) recordComplete(id int64, epoch uint64) error {
	if d.c.ids == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	err := d.c.ids.complete(ctx, d.j.info.JobID, id, epoch)
	if errors.Is(err, errDeposed) {
		d.c.depose(err)
	}
	return err
}

// restoreFrom makes the savepoint id in dir, of a stop or an upgrade, what
// the job restores from, durably, before it completes: its sinks commit on
// it, so a failure after that (of the stopping subtasks, of the upgrade,
// of the coordinator) must restore it and not the checkpoint before it
// (Flink's FLIP-193). The spec in the job bucket says so first, for a
// coordinator that resumes the job; a savepoint whose spec cannot be
// stored fails, and the job goes on. Called off the loop by the persist
// goroutine, which whoever stops the driver waits for under c.mu: the job
// takes the restore point through its inbox (restorePoint), and the wait
// for it ends when the driver stops.
func (d *ckptDriver) restoreFrom(id int64, dir string) error {
	c, j := d.c, d.j
	done := make(chan struct{})
	c.report(j, restorePoint{d: d, dir: dir, id: id, done: done})
	select {
	case <-done:
	case <-d.quit:
		return fmt.Errorf("the attempt ended before savepoint %d became the job's restore point", id)
	}
	if c.store != nil && !c.store.wait(j.info.JobID, kvTimeout) {
		return fmt.Errorf("savepoint %d could not be recorded as the job's restore point in bucket %s within %s", id, transport.JobsBucket, kvTimeout)
	}
	c.writeRestorePoint(j.info.JobID, dir, id)
	return nil
}

// sweep deletes shared files that nothing references: uploads of
// checkpoints that were aborted before their acknowledgement arrived. It
// runs only while no checkpoint is pending, so no upload it could race with
// belongs to a live checkpoint.
func (d *ckptDriver) sweep() {
	if !d.mayDelete("sweeping shared files", 0) {
		return
	}
	files, err := d.storage.SharedFiles()
	if err != nil {
		d.c.cfg.Log.Warn("listing shared files", logging.Job, d.j.info.JobID, "err", err)
		return
	}
	for p := range files {
		if d.reg.refs[p] == 0 {
			if !d.mayDelete("removing an unreferenced shared file", 0) {
				return
			}
			if err := d.storage.RemoveShared(p); err != nil {
				d.c.cfg.Log.Warn("removing an unreferenced shared file", logging.Job, d.j.info.JobID, "file", p, "err", err)
			}
		}
	}
}

// record appends a history line, and adds the checkpoint to the job's
// statistics with its subtasks' figures (nil for an aborted one); on the
// loop.
func (d *ckptDriver) record(e HistoryEntry, tasks map[checkpoint.TaskID]checkpoint.Metrics) {
	e.Attempt = d.attempt
	if e.Status == "completed" {
		d.c.cfg.Log.Info(e.Kind.String()+" completed", logging.Job, d.j.info.JobID, logging.Attempt, e.Attempt, logging.Checkpoint, e.ID,
			"duration", e.Duration, "stateSize", e.StateSize, "uploaded", e.Uploaded, "inFlightBytes", e.InFlightBytes,
			"alignment", e.Alignment, "unaligned", e.Unaligned)
	} else {
		d.c.cfg.Log.Warn(e.Kind.String()+" "+e.Status, logging.Job, d.j.info.JobID, logging.Attempt, e.Attempt, logging.Checkpoint, e.ID, "reason", e.Reason)
	}
	d.c.board.checkpoint(d.j.info.JobID, e)
	b, _ := json.Marshal(e)
	d.j.stats.record(d.c, d.j.info.JobID, e, tasks, func() { _, _ = d.history.Write(append(b, '\n')) })
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// rangeVerdict tells a range that is gone (its stream deleted, a message
// not found or on another subject: CheckRange's errors that wrap nothing
// else) from a check that could not answer now (a timeout, NATS
// unreachable), which must not pass the checkpoint over: it is marked
// checkpoint.ErrUnavailable.
func rangeVerdict(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Unwrap(err) == nil {
		return err
	}
	return checkpoint.MarkUnavailable(err)
}

// rangesPresent refuses a checkpoint whose in-flight data left in the job's
// data stream (stream ranges of unaligned checkpoints across workers) is no
// longer there, so that a restore falls back to an older checkpoint, or to
// the beginning, instead of failing on it at every attempt.
func (c *Coordinator) rangesPresent(nc *nats.Conn, m *checkpoint.Metadata) error {
	var js jetstream.JetStream
	for _, t := range m.Tasks {
		for _, ch := range t.Channels {
			if ch.Range == nil {
				continue
			}
			if js == nil {
				var err error
				if js, err = jetstream.New(nc); err != nil {
					return checkpoint.MarkUnavailable(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
			err := transport.CheckRange(ctx, js, *ch.Range)
			cancel()
			if err != nil {
				return fmt.Errorf("subtask %s: %w", t.Task, rangeVerdict(err))
			}
		}
	}
	return nil
}
