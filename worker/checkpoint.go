package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
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

// persist is the asynchronous phase: copy the state files and the channel
// state into storage, then acknowledge (or decline on failure).
func (t *task) persist(snap *snapshotInProgress) {
	start := time.Now()
	ack := transport.CheckpointAck{JobID: t.jobID, Attempt: t.attempt, Task: t.id, ID: snap.id}
	fail := func(err error) {
		ack.Decline = fmt.Sprintf("subtask %s: %v", t.label, err)
		ack.State = nil
		t.ckpt.publish(ack)
	}
	st := snap.state
	s := t.ckpt.storage
	base := s.TaskDir(snap.id, t.id)
	if snap.stateDir != "" {
		var files []checkpoint.FileHandle
		var err error
		switch {
		case snap.kind == checkpoint.KindSavepoint && t.ckpt.nativeSavepoints:
			// Self-contained copies of the Pebble files: never shared.
			files, err = s.CopyDir(snap.id, base+"/state", snap.stateDir)
		case snap.kind == checkpoint.KindSavepoint:
			files, err = t.exportCanonical(snap, base)
		case t.ckpt.incremental:
			files, err = t.uploadIncremental(snap, base)
		default:
			files, err = s.CopyDir(snap.id, base+"/state", snap.stateDir)
		}
		if err != nil {
			_ = os.RemoveAll(snap.stateDir)
			fail(err)
			return
		}
		st.State = files
		for _, f := range files {
			snap.metrics.StateSize += f.Size
		}
		if !t.ckpt.incremental || snap.kind == checkpoint.KindSavepoint {
			snap.metrics.Uploaded = snap.metrics.StateSize
		}
	}
	// The sync snapshot is removed, or kept as the local snapshot once the
	// checkpoint is persisted.
	keep := snap.stateDir != "" && snap.kind == checkpoint.KindCheckpoint && t.localDir() != ""
	if snap.stateDir != "" && !keep {
		_ = os.RemoveAll(snap.stateDir)
	}
	fail = func(err error) {
		if keep {
			_ = os.RemoveAll(snap.stateDir)
		}
		ack.Decline = fmt.Sprintf("subtask %s: %v", t.label, err)
		ack.State = nil
		t.ckpt.publish(ack)
	}
	chans := append(snap.out, snap.replay...)
	for _, c := range snap.in {
		if c != nil && (len(c.batches) > 0 || c.rng != nil) {
			chans = append(chans, *c)
		}
	}
	for _, c := range chans {
		side := "out"
		switch {
		case c.replay:
			// Its own file: the same channel may have a capture too,
			// which is replayed after it.
			side = "replay"
		case c.input:
			side = "in"
		}
		// A channel with a range has a file too, empty unless batches
		// follow the range: every channel state names a file.
		f, err := s.WriteFile(snap.id, fmt.Sprintf("%s/channels/%s-%d-%d", base, side, c.edge, c.peer), encodeChannel(c.batches))
		if err != nil {
			fail(err)
			return
		}
		st.Channels = append(st.Channels, checkpoint.ChannelState{Input: c.input, Edge: c.edge, Peer: c.peer, File: f, Bytes: c.bytes, Range: c.rng})
		// Only what was written counts as persisted; a range stays in the
		// stream.
		snap.metrics.InFlightBytes += c.bytes
		if c.rng != nil {
			snap.metrics.InFlightReferenced += c.rng.Bytes
		}
	}
	if keep {
		// Not keeping it only costs a restore from storage.
		if err := t.keepLocal(snap); err != nil {
			t.ckpt.log.Warn("keeping the local snapshot", "subtask", t.label, "err", err)
		}
	}
	snap.metrics.Async = time.Since(start)
	ack.State, ack.Metrics = st, snap.metrics
	t.ckpt.publish(ack)
}

// encodeChannel frames batches as u32 length + bytes.
func encodeChannel(batches [][]byte) []byte {
	n := 0
	for _, b := range batches {
		n += 4 + len(b)
	}
	out := make([]byte, 0, n)
	for _, b := range batches {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// decodeChannel reverses encodeChannel, validating every batch.
func decodeChannel(r io.Reader, what string) ([][]byte, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("%s: truncated frame header", what)
		}
		n := int(binary.LittleEndian.Uint32(data))
		if n > len(data)-4 {
			return nil, fmt.Errorf("%s: frame of %d bytes overruns the file", what, n)
		}
		b := data[4 : 4+n]
		if _, err := abi.Validate(b); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, b)
		data = data[4+n:]
	}
	return out, nil
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

// restoreChannels replays the channel state of the checkpoint the attempt
// starts from: captured output is sent again ahead of new output, captured
// input is processed before the gate is read.
func (t *task) restoreChannels(ctx context.Context, st *checkpoint.SubtaskState) error {
	var replay []replayBatch
	var resend []resendBatch
	defer func() { t.replayRest, t.resendRest = nil, nil }()
	s := t.ckpt.storage
	for _, c := range st.Channels {
		var batches [][]byte
		if c.Range != nil {
			// Overtaken data left in the data stream.
			if t.ckpt.js == nil {
				return fmt.Errorf("subtask %s: checkpoint %d refers to %s in stream %s, and the worker has no JetStream to read it", t.label, t.ckpt.restore.ID, c.Range.Subject, c.Range.Stream)
			}
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			b, err := transport.ReadRange(rctx, t.ckpt.js, *c.Range)
			cancel()
			if err != nil {
				return fmt.Errorf("subtask %s: checkpoint %d is unusable: %w", t.label, t.ckpt.restore.ID, err)
			}
			batches = b
		}
		if c.File.Path != "" {
			r, err := s.Open(t.ckpt.restore.ID, c.File)
			if err != nil {
				return err
			}
			b, err := decodeChannel(r, c.File.Path)
			r.Close()
			if err != nil {
				return err
			}
			batches = append(batches, b...)
		}
		if !c.Input {
			out, idx := t.outChannel(c.Edge, c.Peer)
			if out == nil {
				return fmt.Errorf("subtask %s: channel state of edge %d names subtask %d, which this job does not have", t.label, c.Edge, c.Peer)
			}
			for _, b := range batches {
				resend = append(resend, resendBatch{out: out, ch: idx, data: b})
			}
			continue
		}
		for _, b := range batches {
			replay = append(replay, replayBatch{edge: c.Edge, peer: c.Peer, data: b})
		}
	}
	// Captured output goes out again first. The sends take checkpoints
	// while they wait for room, as any send does (a job that fails before
	// it could resend a large channel state would otherwise never checkpoint
	// again): such a checkpoint holds what was not resent yet as its output
	// channel state, after what its barrier overtook.
	for i, b := range resend {
		t.resendRest = resend[i+1:]
		if err := t.sendMsg(ctx, b.out, b.ch, transport.Message{Kind: transport.KindData, Data: b.data}); err != nil {
			return err
		}
	}
	t.resendRest = nil
	// Captured input goes through the chain after the captured output went
	// out. A checkpoint taken while a send of the replay blocks (unaligned)
	// holds the batches not replayed yet as its input channel state: they
	// are in no other part of it, and a restore from it replays them.
	for i, b := range replay {
		t.replayRest = replay[i+1:]
		if err := t.deliver(ctx, 0, b.data); err != nil {
			return err
		}
	}
	t.replayRest = nil
	return t.flush(ctx)
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

// replayState returns the restored input not replayed yet, as channel state
// by channel, in replay order.
func (t *task) replayState() []capturedChannel {
	var out []capturedChannel
	for _, b := range t.replayRest {
		if n := len(out); n == 0 || out[n-1].edge != b.edge || out[n-1].peer != b.peer {
			out = append(out, capturedChannel{input: true, replay: true, edge: b.edge, peer: b.peer})
		}
		c := &out[len(out)-1]
		c.batches = append(c.batches, b.data)
		c.bytes += int64(len(b.data))
	}
	return out
}

func (t *task) outChannel(edge, peer int) (*outEdge, int) {
	for _, o := range t.outs {
		if o.edge.Index != edge {
			continue
		}
		for i, p := range o.peers {
			if p == peer {
				return o, i
			}
		}
	}
	return nil, 0
}

// operatorState returns the restored operator state of vertex, if any.
func (t *task) operatorState(vertex string) []byte {
	if t.restored == nil {
		return nil
	}
	return t.restored.Operator[vertex]
}

// ackJSON is used by the worker to publish acks.
func ackJSON(a transport.CheckpointAck) []byte {
	b, _ := json.Marshal(a)
	return b
}

// canonicalFile is the name of a subtask's keyed state in a savepoint.
const canonicalFile = "canonical.zst"

// exportCanonical writes the keyed state of a savepoint's sync snapshot in
// the canonical, backend-independent format: it opens the snapshot's Pebble
// checkpoint as a store of its own and exports it, so processing went on
// meanwhile.
func (t *task) exportCanonical(snap *snapshotInProgress, base string) ([]checkpoint.FileHandle, error) {
	st, err := state.Open(state.Options{Dir: snap.stateDir, MaxParallelism: t.store.MaxParallelism(), KeyGroups: snap.state.KeyGroups})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot %d for export: %w", snap.id, err)
	}
	// The canonical format is zstd already: the storage stores it as it
	// is, whatever compression it applies to Pebble files.
	h, err := t.ckpt.storage.WriteFrom(snap.id, base+"/state/"+canonicalFile, func(w io.Writer) error {
		_, err := st.ExportCanonical(w, 0)
		return err
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("exporting savepoint %d: %w", snap.id, err)
	}
	return []checkpoint.FileHandle{h}, nil
}

// oldTasks returns the savepoint's subtask states of the chain whose head is
// vertex, ordered by subtask, and the parallelism they ran with.
func (e *ckptEnv) oldTasks(vertex string) ([]*checkpoint.SubtaskState, int) {
	var chain *job.Chain
	for _, c := range e.oldGraph.Chains {
		if c.Vertices[0].ID == vertex {
			chain = c
		}
	}
	if chain == nil {
		return nil, 0
	}
	out := make([]*checkpoint.SubtaskState, chain.Parallelism)
	for i := range e.restore.Tasks {
		st := &e.restore.Tasks[i]
		if st.Task.Chain == chain.Index && st.Task.Subtask < chain.Parallelism {
			out[st.Task.Subtask] = st
		}
	}
	return out, chain.Parallelism
}

// importSavepointState fills a new subtask's store with the keyed state of
// every old subtask of the same vertex whose key groups overlap its own:
// the import keeps only the key groups the store owns (rescaling). It
// returns the bytes of savepoint files it read.
func (t *task) importSavepointState(vertex string, migrate state.Migrate) (read int64, err error) {
	env := t.ckpt
	olds, _ := env.oldTasks(vertex)
	mine := t.store.KeyGroups()
	for _, st := range olds {
		if st == nil || len(st.State) == 0 || st.KeyGroups.End < mine.Start || st.KeyGroups.Start > mine.End {
			continue
		}
		if !isCanonical(st.State) {
			// A checkpoint's native Pebble files: restore them, then move
			// this subtask's key groups over in the canonical form.
			n, err := t.importNative(st, migrate)
			read += n
			if err != nil {
				return read, err
			}
			continue
		}
		for _, f := range st.State {
			r, err := env.restoreStorage.Open(env.restore.ID, f)
			if err != nil {
				return read, err
			}
			_, err = t.store.ImportCanonicalMigrating(r, migrate)
			r.Close()
			if err != nil {
				return read, fmt.Errorf("savepoint file %s: %w", f.Path, err)
			}
			read += f.Size
		}
	}
	return read, nil
}

// isCanonical reports whether a subtask's state is a canonical export.
func isCanonical(files []checkpoint.FileHandle) bool {
	return len(files) == 1 && !files[0].Shared && filepath.Base(files[0].Path) == canonicalFile
}

// importNative imports the key groups this subtask owns from an old
// subtask's native snapshot: the Pebble files are restored into a scratch
// directory, and the owned key groups' span of them is written into SST
// files that this subtask's store ingests (state.Store.ImportStore). With
// values to migrate, the scratch directory is opened as a store of the old
// range instead and streamed through the canonical format, migrate
// converting each value.
func (t *task) importNative(old *checkpoint.SubtaskState, migrate state.Migrate) (int64, error) {
	env := t.ckpt
	start := time.Now()
	tmp := filepath.Join(env.tmpDir, fmt.Sprintf("rescale-%d-%d-%d", old.Task.Chain, old.Task.Subtask, t.subtask))
	_ = os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	if err := env.restoreStorage.Restore(env.restore, old.Task, tmp); err != nil {
		return 0, err
	}
	var read int64
	for _, f := range old.State {
		read += f.Size
	}
	if migrate == nil {
		st, err := t.store.ImportStore(tmp, old.KeyGroups)
		if err != nil {
			return read, fmt.Errorf("moving the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
		}
		env.log.Info("rescaled keyed state", "subtask", t.label, "from", old.Task.String(), logging.Checkpoint, env.restore.ID,
			"read_bytes", read, "entries", st.Entries, "timers", st.Timers, "seconds", time.Since(start).Seconds())
		return read, nil
	}
	src, err := state.Open(state.Options{Dir: tmp, MaxParallelism: t.store.MaxParallelism(), KeyGroups: old.KeyGroups})
	if err != nil {
		return read, fmt.Errorf("opening the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := src.ExportCanonical(pw, 0)
		pw.CloseWithError(err)
	}()
	_, err = t.store.ImportCanonicalMigrating(pr, migrate)
	pr.Close()
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return read, fmt.Errorf("moving the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
	}
	return read, nil
}

// savepointOffset returns the position a new source subtask starts from:
// the old subtask's own offset when the parallelism is unchanged, else the
// old offsets redistributed.
func (t *task) savepointOffset(vertex, connectorName string) ([]byte, error) {
	olds, p := t.ckpt.oldTasks(vertex)
	if olds == nil {
		return nil, nil
	}
	offs := make([][]byte, p)
	for s, st := range olds {
		if st != nil {
			offs[s] = st.Operator[vertex]
		}
	}
	if p == t.chain.Parallelism {
		return offs[t.subtask], nil
	}
	return connector.RescaleOffsets(connectorName, offs, t.subtask, t.chain.Parallelism)
}

// uploadIncremental persists a keyed-state snapshot incrementally: Pebble's
// SST files are immutable, so each is stored once, shared, named by its
// content, and referenced by every later checkpoint that still has it (the
// coordinator's registry deletes it when none does); the small mutable files
// (MANIFEST, OPTIONS, WAL) are copied into the checkpoint itself.
func (t *task) uploadIncremental(snap *snapshotInProgress, base string) ([]checkpoint.FileHandle, error) {
	var paths []string
	err := filepath.WalkDir(snap.stateDir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// The files go up side by side: each is written, synced and renamed
	// (a shared table's directory synced too), and on a local disk the
	// syncs of several files share the filesystem's journal commits,
	// where one after the other each waits for its own (a checkpoint's
	// asynchronous phase was mostly that wait, and a job with checkpoints
	// ends with one).
	files := make([]checkpoint.FileHandle, len(paths))
	uploaded := make([]bool, len(paths))
	errs := make([]error, len(paths))
	sem := make(chan struct{}, uploadConcurrency)
	var wg sync.WaitGroup
	for i, p := range paths {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			files[i], uploaded[i], errs[i] = t.uploadStateFile(snap, base, p)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, h := range files {
		if uploaded[i] {
			snap.metrics.Uploaded += h.Size
		}
	}
	return files, nil
}

// uploadConcurrency bounds the files of one subtask's checkpoint that go
// to storage at once.
const uploadConcurrency = 4

// uploadStateFile puts one file of the snapshot's Pebble checkpoint into
// storage as a shared file, named by its content: it is written (and
// synced) once, by whichever checkpoint has it first. That holds for the
// tables, which Pebble never changes, and for most of the small files
// too: OPTIONS, the format marker and the empty log are the same in every
// checkpoint of the job, so only the MANIFEST and new tables cost a write
// and a sync, where a copy of each small file cost one per checkpoint.
// uploaded says whether its bytes were written now.
func (t *task) uploadStateFile(snap *snapshotInProgress, base, p string) (checkpoint.FileHandle, bool, error) {
	s := t.ckpt.storage
	rel, err := filepath.Rel(snap.stateDir, p)
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	name := base + "/state/" + filepath.ToSlash(rel)
	var sum string
	if filepath.Ext(p) == ".sst" {
		sum, err = t.sstDigest(p)
	} else {
		// Not cached: the MANIFEST keeps its name as it grows.
		sum, err = checkpoint.FileSHA256(p)
	}
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	h, uploaded, err := s.PutShared(p, sum)
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	h.Name = name
	return h, uploaded, nil
}

// sstDigest returns the SHA-256 of an SST file of the subtask's store.
// SST files never change and their numbers are not reused while the store
// lives, so each is hashed once.
func (t *task) sstDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s/%d", filepath.Base(path), fi.Size())
	t.digestMu.Lock()
	sum, ok := t.digests[key]
	t.digestMu.Unlock()
	if ok {
		return sum, nil
	}
	sum, err = checkpoint.FileSHA256(path)
	if err != nil {
		return "", err
	}
	t.digestMu.Lock()
	if t.digests == nil {
		t.digests = map[string]string{}
	}
	t.digests[key] = sum
	t.digestMu.Unlock()
	return sum, nil
}

// migrator returns what converts the restored values of the states of head
// whose layout version the plan raised (nil when there are none): each goes
// through the module's wstream_migrate, in the subtask's instance, which it
// makes for the purpose (*inst) before any operator opens.
func (w *Worker) migrator(j *jobRun, mod *host.Module, t *task, head *job.Vertex, inst **host.Instance) (state.Migrate, error) {
	versions := map[string]int{}
	for _, m := range j.ckpt.migrations {
		if m.Vertex == head.ID {
			versions[m.State] = m.From
		}
	}
	if len(versions) == 0 {
		return nil, nil
	}
	var names []string
	for s := range versions {
		names = append(names, s)
	}
	sort.Strings(names)
	if head.Kind != job.KindOperator || strings.HasPrefix(head.Operator, builtin.Prefix) || mod == nil {
		return nil, fmt.Errorf("the plan raises the layout version of state %s of vertex %s, whose operator is not the module's: nothing can migrate it", strings.Join(names, ", "), head.ID)
	}
	if !mod.CanMigrate() {
		return nil, fmt.Errorf("the plan raises the layout version of state %s of vertex %s, and module %s does not export wstream_migrate to convert its values", strings.Join(names, ", "), head.ID, mod.Name())
	}
	if *inst == nil {
		in, err := w.instance(j, mod, t.label)
		if err != nil {
			return nil, err
		}
		*inst = in
		t.closers = append(t.closers, func() error { return in.Close(context.Background()) })
	}
	in := *inst
	vertex := []byte(head.ID)
	return func(rec *state.CanonicalRecord) ([]byte, error) {
		if !bytes.Equal(rec.Vertex, vertex) {
			return rec.Value, nil
		}
		from, ok := versions[string(rec.State)]
		if !ok {
			return rec.Value, nil
		}
		v, err := in.Migrate(head.Operator, string(rec.State), from, rec.Key, rec.Namespace, rec.Value)
		if err != nil {
			return nil, fmt.Errorf("migrating state %q from layout version %d: %w", rec.State, from, err)
		}
		return v, nil
	}, nil
}
