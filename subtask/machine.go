package subtask

import (
	"errors"
	"fmt"
)

// Config configures a Machine.
type Config struct {
	// Channels is the number of input channels; 0 for a source subtask,
	// which reads no input gate and takes its snapshots at triggers.
	Channels int
	// Mode is the job's checkpointing mode; 0: the job does not checkpoint.
	Mode Mode
	// AlignedTimeout (ms): see HandlerConfig.
	AlignedTimeout int64
	// DeadLetters: guest failures in a batch go to a dead-letter sink with
	// at most MaxDeadLetters records (-1: unlimited) instead of failing the
	// subtask.
	DeadLetters    bool
	MaxDeadLetters int64
	// DeadLettersPerCheckpoint: the budget counts the dead letters since
	// the subtask's last snapshot rather than over the job's life.
	DeadLettersPerCheckpoint bool
	// SinkCanAbort: the sink's failed pre-commit was taken back, its
	// records kept for a later checkpoint, so the checkpoint is declined;
	// otherwise what the transaction held is gone and only a restore
	// brings it back.
	SinkCanAbort bool
}

// Control is a checkpoint message from the coordinator.
type Control struct {
	Action    ControlAction
	ID        int64
	Kind      Kind
	Timestamp int64
	Reason    string
	// Stop: the job stops with this savepoint (stop-with-savepoint,
	// upgrades); Drain: event time ends before it.
	Stop  bool
	Drain bool
}

// ControlAction is what a Control asks.
type ControlAction uint8

const (
	Trigger ControlAction = iota + 1
	Complete
	Abort
	Stop
)

// Phase names the phase of a snapshot that SnapshotDone reports.
type Phase uint8

const (
	// PhaseSync is the synchronous phase (SnapshotSync).
	PhaseSync Phase = iota + 1
	// PhaseAsync is the asynchronous phase (Persist).
	PhaseAsync
)

// Outcome is how a snapshot phase ended.
type Outcome struct {
	// Err is "" when the phase succeeded.
	Err string
	// SinkPreCommit: Err is the sink's failed pre-commit.
	SinkPreCommit bool
}

// ErrFinished is returned for an event that reaches a finished Machine.
var ErrFinished = errors.New("subtask: the subtask has finished")

// snapState is a snapshot between SnapshotSync and Persist.
type snapState struct {
	id        int64
	unaligned bool
	synced    bool // SnapshotDone{PhaseSync} succeeded
	captured  bool // every capture ended (aligned: at once)
	persist   bool // Persist emitted
}

// Machine is one subtask's behaviour as a pure state machine: the driver
// (worker.task) feeds it what happens (input messages, control messages,
// time, guest failures, snapshot phases done) and carries out the Actions
// of Ready in their order. It reads no clock, runs no goroutines and does
// no IO. Not safe for concurrent use.
type Machine struct {
	cfg     Config
	h       *Handler // nil: no inputs, or no checkpoints
	open    int
	actions []Action

	snaps []*snapState // before Persist, oldest first
	// lastSnapshot is the newest checkpoint the subtask took its part of;
	// aborting, the checkpoint the coordinator aborted while the handler
	// drops it (no decline then).
	lastSnapshot int64
	aborting     int64
	// ended: every input ended; the subtask waits for its final checkpoint
	// finalID (the first it took after the end) to complete.
	ended    bool
	finalID  int64
	finished bool
	// failed: finished with an error. The dead-letter events report the
	// work of actions emitted before a Finish (EndOfInput fires the
	// timers into the guest), so a normal Finish does not refuse them.
	failed bool
	// idle: a source stopped emitting for the stop-with-savepoint stopID.
	idle   bool
	stopID int64

	dl deadLetterState
}

// NewMachine returns a machine for cfg.
func NewMachine(cfg Config) (*Machine, error) {
	if cfg.Channels < 0 {
		return nil, fmt.Errorf("%w: %d input channels", ErrInvalidHandlerConfig, cfg.Channels)
	}
	m := &Machine{cfg: cfg, open: cfg.Channels}
	if cfg.Channels > 0 && cfg.Mode != 0 {
		h, err := NewHandler(HandlerConfig{Channels: cfg.Channels, Mode: cfg.Mode, AlignedTimeout: cfg.AlignedTimeout})
		if err != nil {
			return nil, err
		}
		m.h = h
	}
	m.dl.max, m.dl.perCkpt = cfg.MaxDeadLetters, cfg.DeadLettersPerCheckpoint
	return m, nil
}

// Ready returns the actions gathered since the last call, in order.
func (m *Machine) Ready() []Action {
	a := m.actions
	m.actions = nil
	return a
}

// Wait says what the driver waits for next: Input (the gate, control
// messages, and the time NextWake), Control (a source that stopped for a
// savepoint, or a subtask waiting for its final checkpoint), or Done.
type Wait uint8

const (
	WaitInput Wait = iota + 1
	WaitControl
	WaitDone
)

func (w Wait) String() string {
	switch w {
	case WaitInput:
		return "input"
	case WaitControl:
		return "control"
	case WaitDone:
		return "done"
	}
	return fmt.Sprintf("wait(%d)", uint8(w))
}

// Wait returns what the driver waits for now.
func (m *Machine) Wait() Wait {
	switch {
	case m.finished:
		return WaitDone
	case m.ended || m.idle:
		return WaitControl
	}
	return WaitInput
}

// NextWake is when the driver must wake without input for the machine's
// sake: the pending alignment's timeout. (Processing-time timers are the
// driver's.)
func (m *Machine) NextWake() (int64, bool) {
	if m.h == nil || m.Wait() != WaitInput {
		return 0, false
	}
	return m.h.AlignDeadline()
}

func (m *Machine) emit(a Action) { m.actions = append(m.actions, a) }

func (m *Machine) check(op string, ch int) error {
	if m.finished {
		return ErrFinished
	}
	if ch < 0 || ch >= m.cfg.Channels {
		return fmt.Errorf("subtask: %s on channel %d: the subtask has %d input channels", op, ch, m.cfg.Channels)
	}
	if m.ended {
		return fmt.Errorf("subtask: %s on channel %d after the end of every input", op, ch)
	}
	return nil
}

// Data handles a data batch of size bytes read from channel ch.
func (m *Machine) Data(ch int, bytes int) error {
	if err := m.check("data", ch); err != nil {
		return err
	}
	m.emit(Hold{What: "its input"})
	d := Deliver{Ch: ch}
	if m.h != nil {
		d.Capture, _ = m.h.Capturing(ch)
		m.h.Data(ch, bytes)
	}
	m.emit(d)
	m.afterInput()
	return nil
}

// afterInput ends the work of one input message: the output goes out. (An
// alignment past its timeout switches in Tick: the driver ticks when
// NextWake has passed, between messages too.)
func (m *Machine) afterInput() { m.emit(Flush{}) }

// Barrier handles barrier id of kind read from channel ch at time now.
func (m *Machine) Barrier(now int64, ch int, id int64, kind Kind) error {
	if err := m.check("barrier", ch); err != nil {
		return err
	}
	if m.h == nil {
		return fmt.Errorf("subtask: a checkpoint barrier arrived on channel %d but the job does not checkpoint", ch)
	}
	m.emit(Hold{What: "its input"})
	if err := m.h.Barrier(now, ch, id, kind); err != nil {
		return err
	}
	m.runHandler()
	m.afterInput()
	return nil
}

// CancelMarker handles a cancel marker for id read from channel ch.
func (m *Machine) CancelMarker(now int64, ch int, id int64) error {
	if err := m.check("cancel marker", ch); err != nil {
		return err
	}
	if m.h == nil {
		return fmt.Errorf("subtask: a cancel marker arrived on channel %d but the job does not checkpoint", ch)
	}
	m.emit(Hold{What: "its input"})
	m.h.Cancel(now, ch, id)
	m.runHandler()
	m.afterInput()
	return nil
}

// EndOfInput handles the end of channel ch at time now (for a source, ch
// is 0 and the source has ended). When every input has ended the chain
// closes (EndOfInput); a job that checkpoints then waits for its final
// checkpoint (seed: DESIGN.md checkpoint path step 8), others finish.
func (m *Machine) EndOfInput(now int64, ch int) error {
	if m.finished {
		return ErrFinished
	}
	if m.cfg.Channels == 0 {
		if ch != 0 {
			return fmt.Errorf("subtask: end of input on channel %d of a source", ch)
		}
		if m.ended {
			return nil
		}
		m.open = 1 // a source's one input is the source itself
	} else if err := m.check("end of input", ch); err != nil {
		return err
	}
	m.emit(Hold{What: "its input"})
	if m.h != nil {
		m.h.End(now, ch)
		m.runHandler()
	}
	m.open--
	if m.open > 0 {
		m.afterInput()
		return nil
	}
	m.ended = true
	m.emit(EndOfInput{})
	if m.cfg.Mode == 0 {
		m.finish(Finish{})
	}
	return nil
}

// Tick tells the machine the time is now: an alignment past its timeout
// switches to unaligned, then due processing-time timers fire.
func (m *Machine) Tick(now int64) error {
	if m.finished {
		return ErrFinished
	}
	m.emit(Hold{What: "its timers"})
	if m.h != nil && !m.ended {
		m.h.Tick(now)
		m.runHandler()
	}
	if !m.ended {
		m.emit(FireTimers{})
		m.afterInput()
	}
	return nil
}

// Control handles a checkpoint message from the coordinator.
func (m *Machine) Control(c Control) error {
	if m.finished {
		return ErrFinished
	}
	if m.cfg.Mode == 0 {
		return fmt.Errorf("subtask: a checkpoint %d control message arrived but the job does not checkpoint", c.ID)
	}
	m.emit(Hold{What: "a control message"})
	switch c.Action {
	case Trigger:
		m.trigger(c)
	case Complete:
		m.complete(c)
	case Abort:
		m.abort(c.ID, c.Reason)
	case Stop:
		m.finish(Finish{Stopped: true})
	default:
		return fmt.Errorf("subtask: unknown control action %d", c.Action)
	}
	return nil
}

// trigger takes the part of a subtask without input to wait for: a source,
// or a subtask whose inputs have all ended (they have no barrier to wait
// for).
func (m *Machine) trigger(c Control) {
	if c.ID <= m.lastSnapshot {
		// Taken already: its barrier arrived before the input ended (the
		// coordinator re-sends pending triggers to a subtask that
		// reports the end of its input).
		return
	}
	if m.ended {
		m.snapshot(c.ID, c.Kind, false, true, SnapshotSync{})
		if c.Kind == KindCheckpoint && m.finalID == 0 {
			m.finalID = c.ID
		}
		return
	}
	if m.cfg.Channels > 0 {
		// A trigger reaches only sources and ended subtasks; the others
		// wait for the barriers.
		return
	}
	if c.Stop && c.Drain {
		m.emit(DrainEventTime{})
		m.emit(Flush{})
	}
	unaligned := m.cfg.Mode == Unaligned && c.Kind != KindSavepoint
	m.snapshot(c.ID, c.Kind, unaligned, false, SnapshotSync{})
	// No input can deliver data before this barrier: nothing to capture.
	m.captured(c.ID)
	if c.Stop {
		// Emit nothing after the savepoint unless it fails.
		m.idle, m.stopID = true, c.ID
	}
}

func (m *Machine) complete(c Control) {
	commit := c.Kind != KindSavepoint || c.Stop
	m.emit(NotifyComplete{ID: c.ID, Commit: commit})
	if m.ended && m.finalID > 0 && c.ID >= m.finalID && commit {
		m.finish(Finish{})
	}
}

func (m *Machine) abort(id int64, reason string) {
	if m.stopID == id {
		// The stop failed: the job goes on, and so do its sources.
		m.idle, m.stopID = false, 0
	}
	m.emit(NotifyAborted{ID: id})
	if m.ended {
		// Nothing is pending here but what Persist acknowledges.
		return
	}
	if m.h != nil {
		// The coordinator knows: the drop needs no decline.
		m.aborting = id
		m.h.Abort(id, reason)
		m.runHandler()
		m.aborting = 0
		return
	}
	if m.dropSnap(id) {
		m.emit(ForwardCancel{ID: id, Reason: reason})
	}
}

// snapshot asks for the snapshot of id. Seed 003 (steps 1–4) and the
// design's checkpoint path step 4: the pre-barrier hooks, then the barrier
// goes downstream, then the synchronous phase; the order of the actions
// is the contract, so a driver that runs them in order keeps it.
func (m *Machine) snapshot(id int64, kind Kind, unaligned, ended bool, figures SnapshotSync) {
	for len(m.snaps) > 0 && !m.snaps[len(m.snaps)-1].persist {
		// A newer checkpoint overtook one still capturing: only at a
		// trigger, the handler drops its own first.
		old := m.snaps[len(m.snaps)-1]
		m.snaps = m.snaps[:len(m.snaps)-1]
		m.emit(Decline{ID: old.id, Reason: SubsumedReason(id)})
	}
	m.lastSnapshot = max(m.lastSnapshot, id)
	if !ended {
		m.emit(PreBarrier{ID: id, SendBuffers: !unaligned})
		m.emit(ForwardBarrier{ID: id, Kind: kind, Unaligned: unaligned})
	}
	figures.ID, figures.Kind, figures.Unaligned, figures.Ended = id, kind, unaligned, ended
	m.emit(figures)
	m.snaps = append(m.snaps, &snapState{id: id, unaligned: unaligned, captured: !unaligned})
}

func (m *Machine) snap(id int64) *snapState {
	for _, s := range m.snaps {
		if s.id == id {
			return s
		}
	}
	return nil
}

// dropSnap forgets the snapshot of id, if the machine still holds it.
func (m *Machine) dropSnap(id int64) bool {
	for i, s := range m.snaps {
		if s.id == id {
			m.snaps = append(m.snaps[:i], m.snaps[i+1:]...)
			return true
		}
	}
	return false
}

func (m *Machine) removeSnap(id int64) {
	for i, s := range m.snaps {
		if s.id == id {
			m.snaps = append(m.snaps[:i], m.snaps[i+1:]...)
			return
		}
	}
}

// captured: every capture of id ended (or it has none).
func (m *Machine) captured(id int64) {
	if s := m.snap(id); s != nil {
		s.captured = true
		m.maybePersist(s)
	}
}

// maybePersist hands the snapshot to its asynchronous phase once its
// synchronous phase and its captures are done; the machine is done with it
// then: the asynchronous phase reports its outcome (SnapshotDone), and an
// abort no longer drops it (its ack of an aborted checkpoint is one the
// coordinator ignores).
func (m *Machine) maybePersist(s *snapState) {
	if s.synced && s.captured && !s.persist {
		s.persist = true
		m.removeSnap(s.id)
		m.emit(Persist{ID: s.id})
	}
}

// SnapshotDone reports how a phase of the snapshot of id ended. A failed
// synchronous phase declines the checkpoint (seed 003: the task declines,
// the coordinator's failure count decides) and forwards a cancel marker,
// so downstream stops waiting; only a sink pre-commit failure whose
// transaction cannot be aborted fails the subtask. The asynchronous phase
// ends in Ack, or in Decline when it failed. (A driver whose asynchronous
// phase runs on a goroutine of its own, as the worker's does, acknowledges
// from there and need not report it.) A synchronous phase of a snapshot
// dropped meanwhile is ignored.
func (m *Machine) SnapshotDone(id int64, phase Phase, out Outcome) error {
	if m.finished {
		return ErrFinished
	}
	if phase == PhaseAsync {
		// The machine handed the snapshot off at Persist.
		if out.Err != "" {
			m.emit(Decline{ID: id, Reason: out.Err})
		} else {
			m.emit(Ack{ID: id})
		}
		return nil
	}
	if out.Err == "" {
		// The dead letters went into the snapshot, dropped meanwhile or
		// not: their transaction ended in it.
		m.dl.snapshotted()
	}
	s := m.snap(id)
	if s == nil || s.synced {
		return nil
	}
	if out.Err == "" {
		s.synced = true
		m.maybePersist(s)
		return nil
	}
	if out.SinkPreCommit && !m.cfg.SinkCanAbort {
		m.finish(Finish{Err: out.Err})
		return nil
	}
	m.removeSnap(id)
	m.decline(id, out.Err)
	return nil
}

// decline drops id here: the handler ends its captures and forwards the
// cancel marker (or, with nothing pending there, the machine does), then
// the coordinator hears of it.
func (m *Machine) decline(id int64, reason string) {
	if p, ok := m.pending(); ok && p == id {
		m.aborting = id
		m.h.Abort(id, reason)
		m.runHandler()
		m.aborting = 0
	} else if !m.ended {
		m.emit(ForwardCancel{ID: id, Reason: reason})
	}
	m.emit(Decline{ID: id, Reason: reason})
}

func (m *Machine) pending() (int64, bool) {
	if m.h == nil {
		return 0, false
	}
	return m.h.Pending()
}

// runHandler turns the barrier handler's actions into the machine's.
func (m *Machine) runHandler() {
	for _, a := range m.h.Ready() {
		switch a := a.(type) {
		case Snapshot:
			m.snapshot(a.ID, a.Kind, a.Unaligned, false, SnapshotSync{
				FirstBarrier: a.FirstBarrier, Alignment: a.Alignment, AlignmentBytes: a.AlignmentBytes})
		case ChannelStateDone:
			m.captured(a.ID)
		case ForwardCancel:
			m.dropSnap(a.ID)
			m.emit(a)
			if a.ID != m.aborting {
				// Decline at once: the coordinator would otherwise learn
				// only at the checkpoint's timeout.
				m.emit(Decline{ID: a.ID, Reason: a.Reason})
			}
		case Block:
			m.emit(a)
		case Unblock:
			m.emit(a)
		case CaptureStart:
			m.emit(a)
		case CaptureEnd:
			m.emit(a)
		}
	}
}

func (m *Machine) finish(f Finish) {
	m.finished = true
	m.failed = m.failed || f.Err != ""
	m.emit(f)
}
