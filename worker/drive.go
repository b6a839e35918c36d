package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// The subtask's checkpoint behaviour is a subtask.Machine; the task is its
// driver (see doc.go): it feeds the machine what the input gate, the
// mailbox and the clock bring, and carries out the machine's actions in
// their order (do).

// newMachine makes the subtask's machine, once its input gate, its
// checkpoint environment and its dead letters are known.
func (t *task) newMachine() error {
	var cfg subtask.Config
	if t.gate != nil {
		cfg.Channels = t.gate.Len()
	}
	if t.ckpt != nil {
		cfg.Mode = t.ckpt.mode
		if cfg.Channels > 0 {
			cfg.AlignedTimeout = t.ckpt.alignedTimeout
		}
	}
	if t.dl != nil {
		cfg.DeadLetters, cfg.MaxDeadLetters, cfg.DeadLettersPerCheckpoint = true, t.dl.max, t.dl.perCkpt
	}
	cfg.SinkCanAbort = t.sinksCanAbort()
	m, err := subtask.NewMachine(cfg)
	if err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	t.machine = m
	return nil
}

// sinksCanAbort reports whether every sink of the subtask that pre-commits
// in its snapshots can take back a failed pre-commit, so that the failure
// declines the checkpoint (connector.PreCommitAborter).
func (t *task) sinksCanAbort() bool {
	canAbort := func(s connector.Sink) bool {
		_, ok := s.(connector.PreCommitAborter)
		return ok
	}
	if _, ok := t.sink.(connector.Transactional); ok && t.sinkTxn && !canAbort(t.sink) {
		return false
	}
	if d := t.dl; d != nil && d.txn && d.sink != nil && !canAbort(d.sink) {
		return false
	}
	return true
}

// abortPreCommit takes back the failed pre-commit of checkpoint id by sink
// s (failed: why it failed), so that the machine declines the checkpoint
// (Config.SinkCanAbort). When the sink cannot keep the transaction's
// records, the subtask fails at once: a restore replays them.
func (t *task) abortPreCommit(s connector.Sink, id int64, failed error) error {
	a, ok := s.(connector.PreCommitAborter)
	if !ok {
		// What the transaction held is gone (Config.SinkCanAbort is false).
		return failed
	}
	if err := a.AbortPreCommit(id); err != nil {
		return fmt.Errorf("%w; the declined transaction cannot be kept: %w", failed, err)
	}
	return nil
}

// ensureMachine makes the machine of a subtask that has none yet (one
// whose input gate newTask did not make, or one a test builds).
func (t *task) ensureMachine() error {
	if t.machine != nil {
		return nil
	}
	return t.newMachine()
}

// runActions carries out the machine's actions gathered so far, in order.
func (t *task) runActions(ctx context.Context) error {
	for _, a := range t.machine.Ready() {
		if err := t.do(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// do carries out one action of the machine.
func (t *task) do(ctx context.Context, a subtask.Action) error {
	switch a := a.(type) {
	case subtask.Hold:
		return t.turn.hold(a.What)
	case subtask.Deliver:
		return t.deliverInput(ctx, a)
	case subtask.Flush:
		return t.flush(ctx)
	case subtask.FireTimers:
		return t.fireProcessingTimers(ctx)
	case subtask.DrainEventTime:
		// stop --drain: event time ends before the savepoint, so every
		// event-time timer fires and its output is in the savepoint.
		return t.advanceWatermark(ctx, abi.MaxWatermark)
	case subtask.Block:
		t.gate.Block(a.Ch)
	case subtask.Unblock:
		t.gate.Unblock(a.Ch)
	case subtask.CaptureStart:
		t.startCapture(a.Ch, a.ID)
	case subtask.CaptureEnd:
		// The capture is kept until the snapshot is persisted; data after
		// the barrier is not added any more.
		if t.snap != nil && t.snap.id == a.ID {
			if c := t.snap.in[a.Ch]; c != nil {
				c.open = false
				c.endRange(a.ID)
			}
		}
	case subtask.PreBarrier:
		return t.preBarrier(ctx, a)
	case subtask.ForwardBarrier:
		return t.forwardBarrier(ctx, a)
	case subtask.SnapshotSync:
		return t.snapshotSync(ctx, a)
	case subtask.Persist:
		if t.snap != nil && t.snap.id == a.ID {
			t.finishSnapshot()
		}
	case subtask.Ack:
		// The asynchronous phase (persist) acknowledges from its own
		// goroutine; the machine hears of it only from drivers that run it
		// synchronously.
	case subtask.Decline:
		if t.snap != nil && t.snap.id == a.ID {
			t.abandonSnapshot()
		}
		t.decline(a.ID, a.Reason)
	case subtask.ForwardCancel:
		return t.dropSnapshot(ctx, a.ID, a.Reason)
	case subtask.NotifyComplete:
		return t.notifyComplete(a.ID, a.Commit)
	case subtask.NotifyAborted:
		return t.notifyAborted(a.ID)
	case subtask.EndOfInput:
		return t.endOfInput(ctx)
	case subtask.Finish:
		switch {
		case a.Err != "" && t.syncErr != nil:
			return t.syncErr
		case a.Err != "":
			return errors.New(a.Err)
		case a.Stopped:
			return errStopped
		}
	default:
		return fmt.Errorf("subtask %s: the worker cannot carry out %v", t.label, a)
	}
	return nil
}

// deliverInput puts the data batch of gate channel a.Ch that the machine
// was told of (t.input) through the chain, capturing it for an unaligned
// checkpoint.
func (t *task) deliverInput(ctx context.Context, a subtask.Deliver) error {
	data := t.input
	t.input = nil
	if a.Capture > 0 {
		t.capture(a.Ch, data)
	}
	t.curChan = a.Ch
	t.chanBatches[a.Ch]++
	// Upstream wrote this subtask's input index into every record.
	err := t.deliver(ctx, 0, data)
	t.curChan = -1
	if err != nil {
		return err
	}
	if t.recycle != nil && t.recycle[a.Ch] {
		recycleBatch(data)
	}
	return nil
}

func (t *task) startCapture(ch int, id int64) {
	if t.snap == nil || t.snap.id != id {
		return
	}
	in := t.inputs[ch]
	c := &capturedChannel{input: true, edge: in.edge, peer: in.peer, open: true}
	if rc := t.ckpt.capturer(t.id, in.edge, in.peer); rc != nil {
		// The captured messages stay in the data stream.
		rc.StartCapture(id)
		c.ranged = rc
	}
	t.snap.in[ch] = c
}

// onBarrier feeds a barrier or cancel marker from gate channel ch to the
// machine and carries out what it asks.
func (t *task) onBarrier(ctx context.Context, ch int, m transport.Message) error {
	now := time.Now().UnixMilli()
	var err error
	switch m.Kind {
	case transport.KindBarrier:
		t.noteTrigger(m.Checkpoint, m.Timestamp)
		err = t.machine.Barrier(now, ch, m.Checkpoint, checkpoint.Kind(m.CheckpointKind))
	case transport.KindCancel:
		err = t.machine.CancelMarker(now, ch, m.Checkpoint)
	}
	if err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	return t.runActions(ctx)
}

// noteTrigger keeps when checkpoint id was triggered, for its start delay.
func (t *task) noteTrigger(id, ts int64) {
	if _, seen := t.triggerTS[id]; seen {
		return
	}
	t.triggerTS[id] = ts
	// Forget old checkpoints' times.
	for old := range t.triggerTS {
		if old < id-16 {
			delete(t.triggerTS, old)
		}
	}
}

// runControl feeds a control message to the machine and carries out what
// it asks.
func (t *task) runControl(ctx context.Context, c control) error {
	mc := subtask.Control{ID: c.id, Kind: c.kind, Timestamp: c.timestamp, Reason: c.reason, Stop: c.stop, Drain: c.drain}
	switch c.action {
	case transport.CheckpointTrigger:
		mc.Action = subtask.Trigger
		t.noteTrigger(c.id, c.timestamp)
	case transport.CheckpointComplete:
		mc.Action = subtask.Complete
	case transport.CheckpointAbort:
		mc.Action = subtask.Abort
	case transport.CheckpointStop:
		mc.Action = subtask.Stop
	default:
		return nil
	}
	if c.drain && t.source == nil {
		// Only a source drains event time; downstream gets +∞ from it.
		mc.Drain = false
	}
	if err := t.machine.Control(mc); err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	return t.runActions(ctx)
}

// preBarrier starts the subtask's part of checkpoint a.ID: operators flush
// what they hold before the barrier, and, aligned, everything emitted
// before the barrier goes ahead of it.
func (t *task) preBarrier(ctx context.Context, a subtask.PreBarrier) error {
	if t.snap != nil {
		// A newer checkpoint overtook one still capturing: the machine
		// dropped the old one first, so this is only a safety net.
		t.abandonSnapshot()
	}
	t.snapStart = time.Now()
	t.snapshotting = true
	for k, s := range t.stages {
		if t.opsClosed {
			break
		}
		if err := s.op.PreBarrier(a.ID, &s.coll); err != nil {
			return t.stageError(s, fmt.Sprintf("failed before the barrier of checkpoint %d", a.ID), err)
		}
		if err := t.drain(ctx, k); err != nil {
			return err
		}
	}
	if a.SendBuffers {
		if err := t.sendBuffers(ctx); err != nil {
			return err
		}
	}
	t.snap = t.newSnapshot(a.ID)
	return nil
}

func (t *task) newSnapshot(id int64) *snapshotInProgress {
	st := &checkpoint.SubtaskState{Task: t.id, Operator: map[string][]byte{}, Finished: t.ended}
	return &snapshotInProgress{id: id, trigger: t.triggerTS[id], state: st, in: map[int]*capturedChannel{},
		replay: t.replayState()}
}

// forwardBarrier puts the barrier on every output. An unaligned barrier
// overtakes the output still queued, which becomes output channel state of
// the snapshot.
func (t *task) forwardBarrier(ctx context.Context, a subtask.ForwardBarrier) error {
	snap := t.snap
	// The wait to forward the barrier is not the snapshot's sync time.
	start := time.Now()
	defer func() { t.snapStart = t.snapStart.Add(time.Since(start)) }()
	barrier := transport.Message{Kind: transport.KindBarrier, Checkpoint: a.ID, CheckpointKind: uint8(a.Kind), Timestamp: snap.trigger}
	for _, o := range t.outs {
		if t.ended {
			break // the outputs have ended: downstream reads no barrier
		}
		for i, ch := range o.chans {
			if !a.Unaligned {
				t.turn.yield()
				if err := transport.Send(ctx, ch, barrier); err != nil && !errors.Is(err, transport.ErrClosed) {
					return err
				}
				continue
			}
			c, err := t.overtake(o, i, ch, barrier)
			if err != nil {
				return err
			}
			if c != nil {
				snap.out = append(snap.out, *c)
			}
		}
	}
	return nil
}

// overtake puts an unaligned barrier on channel i of o ahead of what is
// queued there, and returns what it overtook (nil: nothing).
func (t *task) overtake(o *outEdge, i int, ch transport.OutputChannel, barrier transport.Message) (*capturedChannel, error) {
	var over [][]byte
	var rng *checkpoint.ChannelRange
	var err error
	if ro, ok := ch.(transport.RangeOvertaker); ok {
		// The overtaken data stays in the stream: recorded as a range, not
		// copied.
		rng, err = ro.OvertakeRange(barrier)
	} else {
		over, err = ch.Overtake(barrier)
	}
	if errors.Is(err, transport.ErrClosed) {
		// The consumer finished (all its inputs ended, this one too): it
		// reads nothing more, and nothing is in flight.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// In channel order: what was queued, the message a blocked send holds,
	// then what is still buffered. All of it is sent after the barrier and
	// is channel state of this checkpoint.
	if p := t.pending; p != nil && p.out == o && p.ch == i && p.msg.Kind == transport.KindData {
		over = append(over, p.msg.Data)
	}
	for _, r := range t.resendRest {
		if r.out == o && r.ch == i {
			over = append(over, r.data)
		}
	}
	if o.hasReady(i) {
		over = append(over, o.ready[i]...)
	}
	if b := &o.bufs[i]; b.Len() > 0 {
		over = append(over, append([]byte(nil), b.Bytes()...))
	}
	if len(over) == 0 && rng == nil {
		return nil, nil
	}
	c := &capturedChannel{edge: o.edge.Index, peer: o.peers[i], batches: over, rng: rng}
	for _, b := range over {
		c.bytes += int64(len(b))
	}
	return c, nil
}

// snapshotSync is the synchronous phase of the snapshot: the keyed state is
// checkpointed (hard links), the source offset, the sink's transaction and
// the dead letters are recorded. The machine hears how it went: a failure
// declines the checkpoint instead of failing the subtask (seed 003: the
// task declines; the coordinator's failure count decides). A sink's failed
// pre-commit is taken back first (its records stay in the open
// transaction for a later checkpoint); one that cannot be taken back fails
// the subtask, and a restore replays what the transaction held.
func (t *task) snapshotSync(ctx context.Context, a subtask.SnapshotSync) error {
	if a.Ended {
		// No pre-barrier hooks and no barrier: the input has ended.
		t.snapStart = time.Now()
		t.snap = t.newSnapshot(a.ID)
	}
	snap := t.snap
	snap.kind, snap.unaligned = a.Kind, a.Unaligned
	out, err := t.syncState(snap)
	t.snapshotting = false
	if err != nil {
		return err
	}
	m := &snap.metrics
	if a.FirstBarrier > 0 {
		m.Alignment = time.Duration(a.Alignment) * time.Millisecond
		m.AlignmentBytes = a.AlignmentBytes
		if trig := snap.trigger; trig > 0 && a.FirstBarrier > trig {
			m.StartDelay = time.Duration(a.FirstBarrier-trig) * time.Millisecond
		}
	} else {
		m.StartDelay = sinceMillis(snap.trigger)
	}
	m.Sync = time.Since(t.snapStart)
	m.Unaligned = a.Unaligned
	if err := t.machine.SnapshotDone(a.ID, subtask.PhaseSync, out); err != nil {
		return err
	}
	return t.runActions(ctx)
}

// syncState records the snapshot's state. Failures the machine decides on
// are its Outcome; its error is one that fails the subtask at once.
func (t *task) syncState(snap *snapshotInProgress) (subtask.Outcome, error) {
	id, st := snap.id, snap.state
	t.syncErr = nil
	fail := func(err error, sink bool) (subtask.Outcome, error) {
		t.syncErr = err
		return subtask.Outcome{Err: err.Error(), SinkPreCommit: sink}, nil
	}
	if t.store != nil {
		snap.stateDir = filepath.Join(t.ckpt.tmpDir, checkpoint.SnapshotTempName(id, t.id))
		_ = os.RemoveAll(snap.stateDir)
		if err := t.store.Checkpoint(snap.stateDir); err != nil {
			return fail(fmt.Errorf("subtask %s: checkpoint %d: %w", t.label, id, err), false)
		}
		st.KeyGroups = t.store.KeyGroups()
	}
	if t.source != nil {
		r, ok := t.source.(connector.Rewindable)
		if !ok {
			return subtask.Outcome{}, fmt.Errorf("subtask %s: source %q cannot record its position for checkpoints", t.label, t.chain.Vertices[0].Connector)
		}
		off, err := r.Offset()
		if err != nil {
			return fail(fmt.Errorf("subtask %s: checkpoint %d: source offset: %w", t.label, id, err), false)
		}
		st.Operator[t.chain.Vertices[0].ID] = off
	}
	if tx, ok := t.sink.(connector.Transactional); ok && t.sinkTxn {
		state, err := tx.PreCommit(id)
		if err != nil {
			err = fmt.Errorf("subtask %s: checkpoint %d: sink pre-commit: %w", t.label, id, err)
			if aerr := t.abortPreCommit(t.sink, id, err); aerr != nil {
				return subtask.Outcome{}, aerr
			}
			return fail(err, true)
		}
		st.Operator[t.chain.Vertices[len(t.chain.Vertices)-1].ID] = state
	}
	if t.dl != nil {
		state, err := t.preCommitDeadLetters(id)
		if err != nil {
			if aerr := t.abortPreCommit(t.dl.sink, id, err); aerr != nil {
				return subtask.Outcome{}, aerr
			}
			return fail(err, true)
		}
		st.Operator[t.dl.key] = state
		snap.metrics.DeadLetters = t.dl.snapshotted(id)
	}
	return subtask.Outcome{}, nil
}

// abandonSnapshot drops the snapshot in progress: its files go, its
// capture is not persisted.
func (t *task) abandonSnapshot() {
	t.snap.aborted = true
	if t.snap.stateDir != "" {
		_ = os.RemoveAll(t.snap.stateDir)
	}
	t.snap = nil
}

// endOfInput runs when every input has ended: event time jumps to the end
// so all event-time timers fire, operators close in chain order (each may
// still emit into the next), the sink flushes, and downstream learns the
// end; a checkpointing subtask then tells the coordinator and takes part
// in checkpoints by trigger until its final one completes.
func (t *task) endOfInput(ctx context.Context) error {
	if err := t.advanceWatermark(ctx, abi.MaxWatermark); err != nil {
		return err
	}
	for k, s := range t.stages {
		if err := s.op.Close(&s.coll); err != nil {
			return t.stageError(s, "failed closing", err)
		}
		if err := t.drain(ctx, k); err != nil {
			return err
		}
	}
	// From here on checkpoints (taken while a send below blocks, or by
	// trigger once the input has ended) no longer call the operators.
	t.opsClosed = true
	// A transactional sink keeps its last transaction open for the final
	// checkpoint; any other sink is done.
	if t.sink != nil && !t.sinkTxn {
		if err := t.closeSink(); err != nil {
			return err
		}
	}
	if err := t.broadcast(ctx, transport.Message{Kind: transport.KindEnd}); err != nil {
		return err
	}
	if t.checkpointing() {
		t.ended = true
		t.inputEnded.Store(true)
		t.ckpt.publish(transport.CheckpointAck{JobID: t.jobID, Attempt: t.attempt, Task: t.id, EndOfInput: true})
	}
	return nil
}

// finish runs once the machine stopped waiting for input: a checkpointing
// subtask takes part in checkpoints by trigger until one that it took after
// the end completes (its final checkpoint), so that its sink commits the
// last transaction only once the job's state up to the end is
// checkpointed. A failure before that restores an older checkpoint, and
// the sink's uncommitted output is written again exactly once.
func (t *task) finish(ctx context.Context) error {
	for t.machine.Wait() == subtask.WaitControl {
		t.split.to(timeIdle)
		t.turn.yield()
		select {
		case <-t.mbox.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.split.to(timeBusy)
		if err := t.handleControl(ctx); err != nil {
			return err
		}
	}
	// Committed by the final checkpoint, or written out now without one.
	if err := t.closeDeadLetters(); err != nil {
		return err
	}
	if t.sink != nil {
		// Everything is committed by now: closing commits nothing new.
		return t.closeSink()
	}
	return nil
}
