package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// ckptEnv is what a job's subtasks need to take part in checkpoints.
type ckptEnv struct {
	storage        *checkpoint.Storage
	mode           checkpoint.Mode
	alignedTimeout int64
	tmpDir         string // where sync snapshots wait for the async phase
	publish        func(transport.CheckpointAck)
	// restore is the checkpoint the attempt starts from (nil: fresh), and
	// restoreStorage where its files are: the job's own storage, or a
	// savepoint's directory.
	restore        *checkpoint.Metadata
	restoreStorage *checkpoint.Storage
	// fromSavepoint: restore is a savepoint, in canonical form, possibly of
	// another parallelism; oldGraph is the graph it was taken with.
	fromSavepoint bool
	oldGraph      *job.Graph
	// migrations are the states whose layout version the plan raised
	// above the savepoint's: their values pass through the module's
	// wstream_migrate as they are restored.
	migrations []job.Migration
	dataDir    string
	// incremental: checkpoints upload only SST files not stored yet.
	incremental bool
	// nativeSavepoints: savepoints hold the Pebble files, not the
	// canonical export.
	nativeSavepoints bool
	// localRoot is where subtasks keep their local snapshots
	// (DATA/jobs/JOB/local), "" when local recovery is off.
	localRoot string
	log       *slog.Logger
	// js reads the stream ranges of channel state back on restore.
	js jetstream.JetStream
	// observers are the input channels of each subtask that keep data for
	// checkpoints (JetStream channels hold the ranges checkpoints refer
	// to): they learn how checkpoints end.
	// capturers are those whose captures are ranges, by subtask, edge and
	// upstream subtask.
	obsMu     sync.Mutex
	observers map[checkpoint.TaskID][]transport.CheckpointObserver
	capturers map[capturerKey]transport.RangeCapturer
}

type capturerKey struct {
	task       checkpoint.TaskID
	edge, peer int
}

// observe registers input channel in of subtask id, from subtask peer on
// edge, when it keeps data for checkpoints.
func (e *ckptEnv) observe(id checkpoint.TaskID, edge, peer int, in transport.InputChannel) {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	if o, ok := in.(transport.CheckpointObserver); ok {
		if e.observers == nil {
			e.observers = map[checkpoint.TaskID][]transport.CheckpointObserver{}
		}
		e.observers[id] = append(e.observers[id], o)
	}
	if c, ok := in.(transport.RangeCapturer); ok {
		if e.capturers == nil {
			e.capturers = map[capturerKey]transport.RangeCapturer{}
		}
		e.capturers[capturerKey{id, edge, peer}] = c
	}
}

// capturer returns the input of subtask id from subtask peer on edge whose
// captures are ranges, nil if it is not one.
func (e *ckptEnv) capturer(id checkpoint.TaskID, edge, peer int) transport.RangeCapturer {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	return e.capturers[capturerKey{id, edge, peer}]
}

func (e *ckptEnv) observersOf(id checkpoint.TaskID) []transport.CheckpointObserver {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	return e.observers[id]
}

// errStopped ends a subtask stopped after a stop-with-savepoint.
var errStopped = errors.New("stopped with a savepoint")

// control is a checkpoint message for one subtask, queued by the worker and
// handled by the subtask's goroutine.
type control struct {
	action    transport.ControlAction
	id        int64
	kind      checkpoint.Kind
	timestamp int64
	reason    string
	stop      bool
	drain     bool
}

// mailbox queues control messages for a subtask without ever blocking the
// worker's NATS handler.
type mailbox struct {
	mu    sync.Mutex
	msgs  []control
	poke  func() // wakes the subtask (gate interrupt)
	ready chan struct{}
	prio  chan struct{} // wakes a send blocked by backpressure
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

func (m *mailbox) put(c control) {
	m.mu.Lock()
	m.msgs = append(m.msgs, c)
	poke := m.poke
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
	if m.prio != nil {
		select {
		case m.prio <- struct{}{}:
		default:
		}
	}
	if poke != nil {
		poke()
	}
}

// putQuiet queues c without waking the subtask.
func (m *mailbox) putQuiet(c control) {
	m.mu.Lock()
	m.msgs = append(m.msgs, c)
	m.mu.Unlock()
}

func (m *mailbox) take() []control {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.msgs
	m.msgs = nil
	return out
}

// pendingSend is a message that a send blocked by backpressure has not
// enqueued yet.
type pendingSend struct {
	out *outEdge
	ch  int
	msg transport.Message
}

// handleBlocked runs while a send waits for room in a full channel: an
// unaligned checkpoint does not wait for backpressure. Triggers (sources)
// and barriers that overtook the input queues are handled at once; the
// snapshot captures the output not yet sent, which is then sent after the
// barrier. Everything else waits for the send to complete.
func (t *task) handleBlocked(ctx context.Context) error {
	if t.handling || t.snapshotting {
		return nil
	}
	t.handling = true
	defer func() { t.handling = false }()
	for _, c := range t.mbox.take() {
		if c.action == transport.CheckpointTrigger && c.kind == checkpoint.KindSavepoint {
			// Savepoints are aligned: taken between batches.
			t.mbox.putQuiet(c)
			continue
		}
		if err := t.runControl(ctx, c); err != nil {
			return err
		}
	}
	if t.gate == nil || t.handler == nil {
		return nil
	}
	for {
		ch, m, ok := t.gate.TakePriority(overtaking)
		if !ok {
			return nil
		}
		if err := t.onBarrier(ctx, ch, m); err != nil {
			return err
		}
	}
}

// overtaking accepts what an unaligned barrier puts at a queue's head: a
// checkpoint's barrier or a cancel marker (savepoint barriers are aligned
// and wait their turn).
func overtaking(m transport.Message) bool {
	return m.Kind == transport.KindCancel ||
		m.Kind == transport.KindBarrier && checkpoint.Kind(m.CheckpointKind) != checkpoint.KindSavepoint
}

// inputRef names the channel behind a gate index: the chain edge and the
// upstream subtask.
type inputRef struct{ edge, peer int }

// snapshotInProgress is a subtask's snapshot between its sync phase and its
// acknowledgement.
type snapshotInProgress struct {
	id        int64
	kind      checkpoint.Kind
	trigger   int64
	unaligned bool
	state     *checkpoint.SubtaskState
	stateDir  string // sync snapshot of the keyed state, "" when none
	out       []capturedChannel
	// replay is restored input not replayed yet when the snapshot was
	// taken: it goes before what the input gate delivers.
	replay  []capturedChannel
	in      map[int]*capturedChannel // gate index → input capture
	metrics checkpoint.Metrics
	aborted bool
}

// capturedChannel is the in-flight data of one channel.
type capturedChannel struct {
	open    bool // input capture still recording
	input   bool
	replay  bool // restored input not replayed yet
	edge    int
	peer    int
	batches [][]byte
	bytes   int64
	// rng is channel state left in the job's data stream, ahead of
	// batches: what a barrier overtook (output side of a JetStream
	// channel), or what was captured (input side; then ranged).
	rng *checkpoint.ChannelRange
	// ranged: an input capture kept by the channel as a range, not copied.
	ranged capturer
}

// capturer is the channel of a ranged input capture.
type capturer = transport.RangeCapturer

// endRange ends a ranged capture of checkpoint id.
func (c *capturedChannel) endRange(id int64) {
	if c.ranged != nil {
		c.rng = c.ranged.EndCapture(id)
		c.ranged = nil
	}
}

// checkpointing reports whether the subtask takes part in checkpoints.
func (t *task) checkpointing() bool { return t.ckpt != nil }

// handleControl runs the queued control messages.
func (t *task) handleControl(ctx context.Context) error {
	for _, c := range t.mbox.take() {
		if err := t.runControl(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *task) runControl(ctx context.Context, c control) error {
	switch c.action {
	case transport.CheckpointTrigger:
		// A trigger reaches sources, and subtasks whose inputs have all
		// ended: they have no barrier to wait for.
		if c.id <= t.lastSnapshot {
			// Taken already: its barrier arrived before the input ended
			// (the coordinator re-sends pending triggers to a subtask
			// that reports the end of its input).
			return nil
		}
		if t.ended {
			return t.snapshotEnded(ctx, c.id, c.kind, c.timestamp)
		}
		if c.stop && c.drain && t.source != nil {
			// stop --drain: event time ends before the savepoint, so every
			// event-time timer fires and its output is in the savepoint.
			if err := t.advanceWatermark(ctx, abi.MaxWatermark); err != nil {
				return err
			}
			if err := t.flush(ctx); err != nil {
				return err
			}
		}
		unaligned := t.ckpt.mode == checkpoint.Unaligned && c.kind != checkpoint.KindSavepoint
		m := checkpoint.Metrics{StartDelay: sinceMillis(c.timestamp)}
		if err := t.snapshot(ctx, c.id, c.kind, c.timestamp, unaligned, m); err != nil {
			return err
		}
		// No input can still deliver data before this barrier: there is
		// nothing to capture, so the snapshot can be persisted at once.
		t.finishSnapshot()
		if c.stop && t.source != nil {
			// The job stops with this savepoint: emit nothing after it,
			// unless the savepoint fails (CheckpointAbort resumes).
			t.idle = true
			t.stopID = c.id
		}
	case transport.CheckpointStop:
		return errStopped
	case transport.CheckpointComplete:
		return t.notifyComplete(c.id, c.kind, c.stop)
	case transport.CheckpointAbort:
		if t.stopID == c.id {
			// The stop failed: the job goes on, and so do its sources.
			t.idle, t.stopID = false, 0
		}
		return t.notifyAborted(ctx, c.id, c.reason)
	}
	return nil
}

// snapshotEnded takes the part of checkpoint id of a subtask whose input
// has ended: its operators are closed and everything it emitted is
// downstream, so no barrier goes out; its keyed state and its sink's pending
// transaction are recorded, and it is marked finished. The first such
// checkpoint is its final one: once a checkpoint at or after it completes,
// the sink commits and the subtask finishes.
func (t *task) snapshotEnded(ctx context.Context, id int64, kind checkpoint.Kind, trigger int64) error {
	if err := t.snapshot(ctx, id, kind, trigger, false, checkpoint.Metrics{StartDelay: sinceMillis(trigger)}); err != nil {
		return err
	}
	if kind == checkpoint.KindCheckpoint && t.finalID == 0 {
		t.finalID = id
	}
	t.finishSnapshot()
	return nil
}

// awaitFinalCheckpoint runs once the subtask's input has ended and its
// output is flushed downstream: it tells the coordinator, then takes part in
// checkpoints by trigger until one that it took after the end completes
// (its final checkpoint), so that its sink commits the last transaction only
// once the job's state up to the end is checkpointed. A failure before that
// restores an older checkpoint, and the sink's uncommitted output is
// written again exactly once.
func (t *task) awaitFinalCheckpoint(ctx context.Context) error {
	t.ended = true
	t.inputEnded.Store(true)
	t.ckpt.publish(transport.CheckpointAck{JobID: t.jobID, Attempt: t.attempt, Task: t.id, EndOfInput: true})
	for !t.finalDone {
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
	return nil
}

func sinceMillis(ts int64) time.Duration {
	if ts <= 0 {
		return 0
	}
	d := time.Since(time.UnixMilli(ts))
	if d < 0 {
		return 0
	}
	return d
}

// onBarrier feeds a barrier or cancel marker from gate channel ch to the
// barrier handler and carries out what it asks.
func (t *task) onBarrier(ctx context.Context, ch int, m transport.Message) error {
	now := time.Now().UnixMilli()
	switch m.Kind {
	case transport.KindBarrier:
		if _, seen := t.triggerTS[m.Checkpoint]; !seen {
			t.triggerTS[m.Checkpoint] = m.Timestamp
			t.alignStart[m.Checkpoint] = now
			// Forget old checkpoints' times.
			for id := range t.triggerTS {
				if id < m.Checkpoint-16 {
					delete(t.triggerTS, id)
					delete(t.alignStart, id)
				}
			}
		}
		if err := t.handler.Barrier(now, ch, m.Checkpoint, checkpoint.Kind(m.CheckpointKind)); err != nil {
			return fmt.Errorf("subtask %s: %w", t.label, err)
		}
	case transport.KindCancel:
		t.handler.Cancel(now, ch, m.Checkpoint)
	}
	return t.runHandler(ctx)
}

// runHandler carries out the barrier handler's actions in order.
func (t *task) runHandler(ctx context.Context) error {
	for _, a := range t.handler.Ready() {
		switch a := a.(type) {
		case subtask.Block:
			t.gate.Block(a.Ch)
		case subtask.Unblock:
			t.gate.Unblock(a.Ch)
		case subtask.Snapshot:
			trig := t.triggerTS[a.ID]
			m := checkpoint.Metrics{
				Alignment:      time.Duration(a.Alignment) * time.Millisecond,
				AlignmentBytes: a.AlignmentBytes,
			}
			if trig > 0 && a.FirstBarrier > trig {
				m.StartDelay = time.Duration(a.FirstBarrier-trig) * time.Millisecond
			}
			if err := t.snapshot(ctx, a.ID, a.Kind, trig, a.Unaligned, m); err != nil {
				return err
			}
			if !a.Unaligned {
				t.finishSnapshot()
			}
		case subtask.CaptureStart:
			if t.snap != nil && t.snap.id == a.ID {
				in := t.inputs[a.Ch]
				c := &capturedChannel{input: true, edge: in.edge, peer: in.peer, open: true}
				if rc := t.ckpt.capturer(t.id, in.edge, in.peer); rc != nil {
					// The captured messages stay in the data stream.
					rc.StartCapture(a.ID)
					c.ranged = rc
				}
				t.snap.in[a.Ch] = c
			}
		case subtask.CaptureEnd:
			// The capture is kept until ChannelStateDone; data after the
			// barrier is not added any more.
			if t.snap != nil && t.snap.id == a.ID {
				if c := t.snap.in[a.Ch]; c != nil {
					c.open = false
					c.endRange(a.ID)
				}
			}
		case subtask.ChannelStateDone:
			if t.snap != nil && t.snap.id == a.ID {
				t.finishSnapshot()
			}
		case subtask.ForwardCancel:
			if err := t.dropSnapshot(ctx, a.ID, a.Reason); err != nil {
				return err
			}
			if a.ID != t.aborting {
				// Decline at once: the coordinator would otherwise learn
				// only at the checkpoint's timeout.
				t.decline(a.ID, a.Reason)
			}
		}
	}
	return nil
}

// capture records a data batch from gate channel ch when an unaligned
// checkpoint captures that channel. Channel buffers are never reused, so the
// batch is kept without a copy.
func (t *task) capture(ch int, data []byte) {
	if t.snap == nil {
		return
	}
	c := t.snap.in[ch]
	if c == nil || !c.open || c.ranged != nil {
		return
	}
	c.batches = append(c.batches, data)
	c.bytes += int64(len(data))
}

// snapshot is the synchronous phase of the subtask's part of checkpoint id:
// operators flush what they hold, the data before the barrier leaves, the
// keyed state is checkpointed (hard links), the source offset and the sink's
// transaction are recorded, and the barrier is forwarded. The asynchronous
// phase (finishSnapshot) persists the files and acknowledges.
func (t *task) snapshot(ctx context.Context, id int64, kind checkpoint.Kind, trigger int64, unaligned bool, m checkpoint.Metrics) error {
	if t.snap != nil {
		// A newer checkpoint overtook one still capturing: the handler
		// dropped the old one first, so this only happens at a trigger.
		t.snap.aborted = true
		t.decline(t.snap.id, checkpoint.SubsumedReason(id))
		t.snap = nil
	}
	start := time.Now()
	t.lastSnapshot = max(t.lastSnapshot, id)
	t.snapshotting = true
	defer func() { t.snapshotting = false }()
	for k, s := range t.stages {
		if t.opsClosed {
			break
		}
		if err := s.op.PreBarrier(id, &s.coll); err != nil {
			return t.stageError(s, fmt.Sprintf("failed before the barrier of checkpoint %d", id), err)
		}
		if err := t.drain(ctx, k); err != nil {
			return err
		}
	}
	if !unaligned {
		// Aligned: everything emitted before the barrier goes ahead of it.
		if err := t.sendBuffers(ctx); err != nil {
			return err
		}
	}
	st := &checkpoint.SubtaskState{Task: t.id, Operator: map[string][]byte{}, Finished: t.ended}
	snap := &snapshotInProgress{id: id, kind: kind, trigger: trigger, unaligned: unaligned, state: st, in: map[int]*capturedChannel{},
		replay: t.replayState()}
	// A failure to record the state or the source's position (the
	// synchronous phase) declines the checkpoint instead of failing the
	// subtask (seeds/003: the task declines; the coordinator's failure
	// count decides): downstream drops it on the cancel marker instead of
	// waiting for the barrier. A sink's failed pre-commit still fails the
	// subtask: its open transaction is gone, and only a restore brings
	// back what it held.
	decline := func(err error) error {
		if snap.stateDir != "" {
			_ = os.RemoveAll(snap.stateDir)
		}
		if derr := t.dropSnapshot(ctx, id, err.Error()); derr != nil {
			return derr
		}
		t.decline(id, err.Error())
		return nil
	}
	if t.store != nil {
		snap.stateDir = filepath.Join(t.ckpt.tmpDir, checkpoint.SnapshotTempName(id, t.id))
		_ = os.RemoveAll(snap.stateDir)
		if err := t.store.Checkpoint(snap.stateDir); err != nil {
			return decline(fmt.Errorf("subtask %s: checkpoint %d: %w", t.label, id, err))
		}
		st.KeyGroups = t.store.KeyGroups()
	}
	if t.source != nil {
		r, ok := t.source.(connector.Rewindable)
		if !ok {
			return fmt.Errorf("subtask %s: source %q cannot record its position for checkpoints", t.label, t.chain.Vertices[0].Connector)
		}
		off, err := r.Offset()
		if err != nil {
			return decline(fmt.Errorf("subtask %s: checkpoint %d: source offset: %w", t.label, id, err))
		}
		st.Operator[t.chain.Vertices[0].ID] = off
	}
	if tx, ok := t.sink.(connector.Transactional); ok && t.sinkTxn {
		state, err := tx.PreCommit(id)
		if err != nil {
			return fmt.Errorf("subtask %s: checkpoint %d: sink pre-commit: %w", t.label, id, err)
		}
		st.Operator[t.chain.Vertices[len(t.chain.Vertices)-1].ID] = state
	}
	if t.dl != nil {
		state, err := t.preCommitDeadLetters(id)
		if err != nil {
			return err
		}
		st.Operator[t.dl.key] = state
		m.DeadLetters = t.dl.snapshotted(id)
	}
	m.Sync = time.Since(start)
	m.Unaligned = unaligned
	snap.metrics = m
	barrier := transport.Message{Kind: transport.KindBarrier, Checkpoint: id, CheckpointKind: uint8(kind), Timestamp: trigger}
	for _, o := range t.outs {
		if t.ended {
			break // the outputs have ended: downstream reads no barrier
		}
		for i, ch := range o.chans {
			if !unaligned {
				t.turn.yield()
				if err := ch.Send(ctx, barrier); err != nil && !errors.Is(err, transport.ErrClosed) {
					return err
				}
				continue
			}
			var over [][]byte
			var rng *checkpoint.ChannelRange
			var err error
			if ro, ok := ch.(transport.RangeOvertaker); ok {
				// The overtaken data stays in the stream: recorded as a
				// range, not copied.
				rng, err = ro.OvertakeRange(barrier)
			} else {
				over, err = ch.Overtake(barrier)
			}
			if errors.Is(err, transport.ErrClosed) {
				// The consumer finished (all its inputs ended, this one
				// too): it reads nothing more, and nothing is in flight.
				continue
			}
			if err != nil {
				return err
			}
			// In channel order: what was queued, the message a blocked send
			// holds, then what is still buffered. All of it is sent after the
			// barrier and is channel state of this checkpoint.
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
			if len(over) > 0 || rng != nil {
				c := capturedChannel{edge: o.edge.Index, peer: o.peers[i], batches: over, rng: rng}
				for _, b := range over {
					c.bytes += int64(len(b))
				}
				snap.out = append(snap.out, c)
			}
		}
	}
	t.snap = snap
	return nil
}

// sendBuffers sends every non-empty output buffer.
func (t *task) sendBuffers(ctx context.Context) error {
	for _, o := range t.outs {
		for i := range o.bufs {
			if err := t.send(ctx, o, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishSnapshot hands the snapshot to the asynchronous phase.
func (t *task) finishSnapshot() {
	snap := t.snap
	t.snap = nil
	if snap == nil || snap.aborted {
		return
	}
	for _, c := range snap.in {
		if c != nil {
			c.open = false
			c.endRange(snap.id)
		}
	}
	t.asyncWG.Add(1)
	go func() {
		defer t.asyncWG.Done()
		t.persist(snap)
	}()
}

// decline tells the coordinator that the subtask dropped its part of
// checkpoint id, and why: the coordinator aborts it at once.
func (t *task) decline(id int64, reason string) {
	t.ckpt.publish(transport.CheckpointAck{JobID: t.jobID, Attempt: t.attempt, Task: t.id, ID: id,
		Decline: fmt.Sprintf("subtask %s dropped it: %s", t.label, reason)})
}

// dropSnapshot abandons checkpoint id and forwards a cancel marker.
func (t *task) dropSnapshot(ctx context.Context, id int64, reason string) error {
	if t.snap != nil && t.snap.id == id {
		t.snap.aborted = true
		if t.snap.stateDir != "" {
			_ = os.RemoveAll(t.snap.stateDir)
		}
		t.snap = nil
	}
	cancel := transport.Message{Kind: transport.KindCancel, Checkpoint: id}
	for _, o := range t.outs {
		for _, ch := range o.chans {
			if _, err := ch.Overtake(cancel); err != nil && !errors.Is(err, transport.ErrClosed) {
				return err
			}
		}
	}
	return nil
}

// notifyComplete tells the operators and the sink that checkpoint id
// completed: a transactional sink commits its output up to id. A savepoint
// commits nothing unless the job stops with it: an intermediate savepoint
// has no side effects (a failover restores the checkpoint before it), and
// the next checkpoint commits its data.
func (t *task) notifyComplete(id int64, kind checkpoint.Kind, stop bool) error {
	if t.dl != nil {
		t.dl.settled(id, true)
	}
	if !t.opsClosed {
		for _, s := range t.stages {
			if err := s.op.CheckpointComplete(id); err != nil {
				return t.stageError(s, fmt.Sprintf("failed on completion of checkpoint %d", id), err)
			}
		}
	}
	commit := kind != checkpoint.KindSavepoint || stop
	if tx, ok := t.sink.(connector.Transactional); ok && t.sinkTxn && commit {
		if err := tx.Commit(id); err != nil {
			return fmt.Errorf("subtask %s: committing checkpoint %d: %w", t.label, id, err)
		}
	}
	if d := t.dl; d != nil && d.txn && d.sink != nil && commit {
		if err := d.sink.(connector.Transactional).Commit(id); err != nil {
			return fmt.Errorf("subtask %s: committing the dead letters of checkpoint %d: %w", t.label, id, err)
		}
	}
	if t.ended && t.finalID > 0 && id >= t.finalID && commit {
		t.finalDone = true
	}
	// The local snapshot of id is now the newest completed one.
	t.localCompleted(id)
	// Stream ranges of older checkpoints are no longer needed.
	for _, o := range t.ckpt.observersOf(t.id) {
		o.CheckpointComplete(id)
	}
	return nil
}

// notifyAborted tells the operators that checkpoint id was aborted and
// drops whatever the subtask holds of it.
func (t *task) notifyAborted(ctx context.Context, id int64, reason string) error {
	if t.dl != nil {
		t.dl.settled(id, false)
	}
	t.localAbortedID(id)
	for _, o := range t.ckpt.observersOf(t.id) {
		o.CheckpointAborted(id)
	}
	if t.ended {
		// Nothing is pending here but what persist sends.
		return nil
	}
	for _, s := range t.stages {
		if t.opsClosed {
			break
		}
		if err := s.op.CheckpointAborted(id); err != nil {
			return t.stageError(s, fmt.Sprintf("failed on abort of checkpoint %d", id), err)
		}
	}
	if t.handler != nil {
		// The coordinator knows: the drop needs no decline.
		t.aborting = id
		defer func() { t.aborting = 0 }()
		t.handler.Abort(id, reason)
		return t.runHandler(ctx)
	}
	if t.snap != nil && t.snap.id == id {
		return t.dropSnapshot(ctx, id, reason)
	}
	return nil
}

// resendBatch is a batch of restored output channel state, with its channel.
type resendBatch struct {
	out  *outEdge
	ch   int
	data []byte
}

// replayBatch is a batch of restored input channel state, with its channel.
type replayBatch struct {
	edge, peer int
	data       []byte
}

// canonicalFile is the name of a subtask's keyed state in a savepoint.
const canonicalFile = "canonical.zst"

// uploadConcurrency bounds the files of one subtask's checkpoint that go
// to storage at once.
const uploadConcurrency = 4
