package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	if err := t.ensureMachine(); err != nil {
		return err
	}
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
	if t.gate == nil || !t.checkpointing() {
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
		if t.machine.Wait() == subtask.WaitDone {
			return nil // finished: what is left needs nothing more
		}
		if err := t.runControl(ctx, c); err != nil {
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
// completed: when commit, a transactional sink commits its output up to id.
// (A savepoint commits nothing unless the job stops with it: an
// intermediate savepoint has no side effects, since a failover restores the
// checkpoint before it, and the next checkpoint commits its data; the
// machine says so.)
func (t *task) notifyComplete(id int64, commit bool) error {
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
	// The local snapshot of id is now the newest completed one.
	t.localCompleted(id)
	// Stream ranges of older checkpoints are no longer needed.
	for _, o := range t.ckpt.observersOf(t.id) {
		o.CheckpointComplete(id)
	}
	return nil
}

// notifyAborted tells the operators that checkpoint id was aborted; the
// machine's actions that follow drop whatever the subtask holds of it.
func (t *task) notifyAborted(id int64) error {
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
