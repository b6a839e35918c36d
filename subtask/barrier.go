package subtask

import (
	"errors"
	"fmt"
	"strconv"
)

// Mode is how a subtask with several inputs lines up the barriers of a
// checkpoint (seed 001, "Exactly_Once 和 At_least_Once"; seed 000 §1.4).
type Mode uint8

const (
	// ExactlyOnce aligns barriers: a channel that delivered barrier n is
	// not read again until every channel has delivered it, so the snapshot
	// holds exactly the data before barrier n (seed 000 §1.3).
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce never blocks: the snapshot is taken when every channel
	// has delivered barrier n, and it includes data that followed the
	// barrier on the early channels, which is replayed again on recovery
	// (duplicates, no loss; seed 001).
	AtLeastOnce
	// Unaligned snapshots at the first barrier and records as channel state
	// the data still to arrive before barrier n on the other channels (seed
	// 000 §1.4, seed 001 "Unaligned Checkpoint"). Savepoints stay aligned.
	Unaligned
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	case Unaligned:
		return "unaligned"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ErrInvalidMode is wrapped by ParseMode for a name it does not know.
var ErrInvalidMode = errors.New("subtask: unknown checkpointing mode")

// ParseMode reads a mode name: "exactly-once" (or "aligned"),
// "at-least-once", or "unaligned".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "exactly-once", "aligned":
		return ExactlyOnce, nil
	case "at-least-once":
		return AtLeastOnce, nil
	case "unaligned":
		return Unaligned, nil
	}
	return 0, fmt.Errorf("%w %q: use exactly-once (or aligned), at-least-once or unaligned", ErrInvalidMode, s)
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Channels is the number of input channels of the subtask (at least 1).
	Channels int
	// Mode is the checkpointing mode of the job.
	Mode Mode
	// AlignedTimeout, in ms, applies to ExactlyOnce only: when the
	// alignment of a checkpoint has lasted this long, measured from its
	// first barrier, Tick switches that checkpoint to unaligned. 0 never
	// switches. Savepoints never switch.
	AlignedTimeout int64
}

// ErrInvalidHandlerConfig is wrapped by NewHandler for an invalid HandlerConfig.
var ErrInvalidHandlerConfig = errors.New("subtask: invalid barrier handler config")

// HandlerAction is work that the Handler asks of its subtask, returned by Ready.
// The subtask carries the actions out in the order given. The concrete types
// are Block, Unblock, Snapshot, CaptureStart, CaptureEnd, ChannelStateDone
// and ForwardCancel.
type HandlerAction interface {
	fmt.Stringer
	action()
}

// Block asks the subtask to stop reading channel Ch until Unblock: Ch has
// delivered the barrier of an aligned checkpoint, and what follows it
// belongs to the next checkpoint (seed 001, alignment step 1).
type Block struct{ Ch int }

// Unblock asks the subtask to resume reading channel Ch.
type Unblock struct{ Ch int }

// Snapshot asks the subtask to take its snapshot of checkpoint ID now and to
// forward barrier ID downstream. For an unaligned snapshot the barrier goes
// ahead of the output still queued (which becomes output channel state), and
// the snapshot may be acknowledged only after ChannelStateDone{ID}.
type Snapshot struct {
	ID        int64
	Kind      Kind
	Unaligned bool
	// FirstBarrier is the time (ms) the first barrier of ID reached this
	// subtask; with the trigger time it gives the start delay.
	FirstBarrier int64
	// Alignment is the time (ms) from the first to the last barrier; for a
	// checkpoint switched to unaligned by the aligned timeout, the time
	// from the first barrier to the switch; 0 for an unaligned checkpoint.
	Alignment int64
	// AlignmentBytes counts the input bytes processed from channels that
	// were not blocked during the alignment.
	AlignmentBytes int64
}

// CaptureStart tells an unaligned checkpoint's subtask that, from now on,
// data arriving on channel Ch before its barrier ID is channel state of ID:
// it is processed as usual and also persisted with the snapshot, to be
// replayed before new input on restore (seed 001, unaligned step 3).
type CaptureStart struct {
	Ch int
	ID int64
}

// CaptureEnd says that barrier ID arrived on channel Ch (or Ch ended, or ID
// was dropped): stop capturing Ch for ID.
type CaptureEnd struct {
	Ch int
	ID int64
}

// ChannelStateDone says that every capture of unaligned checkpoint ID has
// ended: the subtask may finish and acknowledge its snapshot.
type ChannelStateDone struct{ ID int64 }

// ForwardCancel asks the subtask to drop checkpoint ID (any snapshot of it
// still in progress, any channel state captured for it) and to forward a
// cancel marker for ID downstream, so that downstream subtasks stop waiting
// for its barrier (seed 000 §10 Q5, CancelCheckpointMarker; seed 003,
// declineCheckpoint).
type ForwardCancel struct {
	ID     int64
	Reason string
}

func (Block) action()            {}
func (Unblock) action()          {}
func (Snapshot) action()         {}
func (CaptureStart) action()     {}
func (CaptureEnd) action()       {}
func (ChannelStateDone) action() {}
func (ForwardCancel) action()    {}

func (a Block) String() string   { return "block ch=" + strconv.Itoa(a.Ch) }
func (a Unblock) String() string { return "unblock ch=" + strconv.Itoa(a.Ch) }

func (a Snapshot) String() string {
	unaligned := ""
	if a.Unaligned {
		unaligned = " unaligned"
	}
	return fmt.Sprintf("snapshot id=%d kind=%s%s first-barrier=%d alignment=%d alignment-bytes=%d",
		a.ID, a.Kind, unaligned, a.FirstBarrier, a.Alignment, a.AlignmentBytes)
}

func (a CaptureStart) String() string {
	return fmt.Sprintf("capture-start ch=%d id=%d", a.Ch, a.ID)
}

func (a CaptureEnd) String() string {
	return fmt.Sprintf("capture-end ch=%d id=%d", a.Ch, a.ID)
}

func (a ChannelStateDone) String() string {
	return fmt.Sprintf("channel-state-done id=%d", a.ID)
}

func (a ForwardCancel) String() string {
	return fmt.Sprintf("forward-cancel id=%d reason=%q", a.ID, a.Reason)
}

// alignPhase is what the pending checkpoint is doing.
type alignPhase uint8

const (
	// phaseIdle: nothing pending.
	phaseIdle alignPhase = iota
	// aligning: channels that delivered the barrier are blocked until the
	// rest have delivered it (exactly-once; savepoints in unaligned mode).
	phaseAligning
	// tracking: waiting for the rest of the barriers without blocking
	// (at-least-once).
	phaseTracking
	// capturing: the unaligned snapshot is taken; the channels without the
	// barrier are captured until it arrives on them.
	phaseCapturing
)

// Handler is the barrier handler of one subtask with Channels input
// channels. It is a pure state machine: the subtask feeds it what it reads
// from its input gate (Barrier, Cancel, Data, End), the passing of time
// (Tick) and the coordinator's aborts (Abort), and carries out the actions
// returned by Ready in their order. It runs no goroutines, reads no clock and
// does no IO; time is an int64 in ms passed in by the caller.
//
// A Handler is not safe for concurrent use; the subtask's goroutine owns it.
//
// At most one checkpoint is pending at a time. Checkpoint ids increase: a
// barrier of a newer checkpoint subsumes the pending one, and barriers and
// cancel markers of a checkpoint that is done, dropped or older than the
// pending one are ignored.
//
// Methods taking a channel index panic if it is out of range, except
// Barrier, which returns an error: the index comes from the input gate, and
// a wrong one is a bug in the caller.
type Handler struct {
	cfg     HandlerConfig
	ended   []bool
	open    int // channels not ended
	actions []HandlerAction

	// last is the newest checkpoint this handler is done with: snapshotted
	// (and, when unaligned, captured), dropped, or cancelled before its
	// first barrier arrived. Barriers and cancels of ids <= last are stale.
	last int64

	// The pending checkpoint, when phase != phaseIdle.
	phase     alignPhase
	id        int64
	kind      Kind
	first     int64  // time of the first barrier
	arrived   []bool // channel delivered the barrier (or ended)
	missing   int    // channels neither ended nor arrived
	blocked   []bool
	capturing []bool
	bytes     int64 // alignment bytes
}

// NewHandler returns a handler for cfg, or an error wrapping ErrInvalidHandlerConfig.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	switch {
	case cfg.Channels < 1:
		return nil, fmt.Errorf("%w: %d input channels: a barrier handler needs at least 1", ErrInvalidHandlerConfig, cfg.Channels)
	case cfg.Mode < ExactlyOnce || cfg.Mode > Unaligned:
		return nil, fmt.Errorf("%w: %s: use exactly-once, at-least-once or unaligned", ErrInvalidHandlerConfig, cfg.Mode)
	case cfg.AlignedTimeout < 0:
		return nil, fmt.Errorf("%w: aligned timeout %dms is negative: use 0 to never switch to unaligned", ErrInvalidHandlerConfig, cfg.AlignedTimeout)
	case cfg.AlignedTimeout > 0 && cfg.Mode != ExactlyOnce:
		return nil, fmt.Errorf("%w: an aligned timeout (%dms) applies to exactly-once only, not %s", ErrInvalidHandlerConfig, cfg.AlignedTimeout, cfg.Mode)
	}
	n := cfg.Channels
	return &Handler{
		cfg:       cfg,
		ended:     make([]bool, n),
		open:      n,
		arrived:   make([]bool, n),
		blocked:   make([]bool, n),
		capturing: make([]bool, n),
	}, nil
}

// Ready returns the actions gathered since the last call, in the order the
// subtask must carry them out, and forgets them. The caller owns the slice.
func (h *Handler) Ready() []HandlerAction {
	a := h.actions
	h.actions = nil
	return a
}

// Pending returns the checkpoint being aligned or captured, if any.
func (h *Handler) Pending() (id int64, ok bool) {
	if h.phase == phaseIdle {
		return 0, false
	}
	return h.id, true
}

// Barrier handles barrier id of the given kind read from channel ch at time
// now. It returns an error for a channel out of range, a channel that has
// ended, a non-positive id, an unknown kind, a second barrier of the pending
// checkpoint on one channel, or a barrier whose kind differs from the kind
// the pending checkpoint's first barrier had; the handler is unchanged then.
func (h *Handler) Barrier(now int64, ch int, id int64, kind Kind) error {
	switch {
	case ch < 0 || ch >= len(h.ended):
		return fmt.Errorf("subtask: barrier %d on channel %d: the subtask has channels 0 to %d", id, ch, len(h.ended)-1)
	case h.ended[ch]:
		return fmt.Errorf("subtask: barrier %d on channel %d, which has ended", id, ch)
	case id <= 0:
		return fmt.Errorf("subtask: barrier on channel %d has id %d: checkpoint ids start at 1", ch, id)
	case kind != KindCheckpoint && kind != KindSavepoint:
		return fmt.Errorf("subtask: barrier %d on channel %d has unknown kind %s", id, ch, kind)
	}
	if id <= h.last || (h.phase != phaseIdle && id < h.id) {
		// Stale: done with, dropped, or older than the pending one.
		return nil
	}
	if h.phase != phaseIdle && id == h.id {
		if h.arrived[ch] {
			return fmt.Errorf("subtask: second barrier %d on channel %d", id, ch)
		}
		if kind != h.kind {
			return fmt.Errorf("subtask: barrier %d on channel %d is a %s, but it was a %s on the channels before", id, ch, kind, h.kind)
		}
		h.arrive(now, ch)
		return nil
	}
	if h.phase != phaseIdle {
		// A newer checkpoint subsumes the pending one, which can no
		// longer complete here: its barrier would never be forwarded.
		h.drop(SubsumedReason(id))
	}
	h.start(now, ch, id, kind)
	return nil
}

// start begins checkpoint id at its first barrier, read from ch.
func (h *Handler) start(now int64, ch int, id int64, kind Kind) {
	h.id, h.kind, h.first, h.bytes = id, kind, now, 0
	clear(h.arrived)
	clear(h.blocked)
	clear(h.capturing)
	h.arrived[ch] = true
	h.missing = h.open - 1
	switch {
	case h.cfg.Mode == Unaligned && kind == KindCheckpoint:
		// Seed 001, unaligned steps 1, 2 and 4: the first barrier triggers
		// the snapshot, and the barrier goes out ahead of queued output.
		h.emit(Snapshot{ID: id, Kind: kind, Unaligned: true, FirstBarrier: now})
		h.phase = phaseCapturing
		h.startCaptures()
		h.maybeChannelStateDone()
	case h.missing == 0:
		// A single open input is aligned as soon as its barrier arrives
		// (seed 001: the operator forwards barrier n once it has it from
		// all its inputs).
		h.phase = phaseTracking
		h.complete(now)
	case h.cfg.Mode == AtLeastOnce:
		h.phase = phaseTracking
	default:
		// Exactly-once, and savepoints in unaligned mode (seed 000 §1.3
		// step 1): block the channel that delivered the barrier.
		h.phase = phaseAligning
		h.block(ch)
	}
}

// arrive handles the barrier of the pending checkpoint on ch, not its first,
// or the end of ch, which counts as its barrier.
func (h *Handler) arrive(now int64, ch int) {
	h.arrived[ch] = true
	h.missing--
	switch h.phase {
	case phaseAligning:
		if h.missing == 0 {
			h.complete(now)
			return
		}
		// Seed 000 §1.3 step 2: later barriers block their channels too
		// (an ended channel has nothing left to read).
		if !h.ended[ch] {
			h.block(ch)
		}
	case phaseTracking:
		if h.missing == 0 {
			h.complete(now)
		}
	case phaseCapturing:
		// Seed 001, unaligned step 3: capture on a channel runs until its
		// barrier arrives.
		h.endCapture(ch)
		h.maybeChannelStateDone()
	}
}

// complete takes the aligned (or at-least-once) snapshot: every open channel
// has delivered the barrier. Seed 000 §1.3 steps 4–5 and seed 001 alignment
// steps 3–4: snapshot and forward the barrier first, then resume the blocked
// channels, so that nothing read after a barrier reaches the snapshot.
func (h *Handler) complete(now int64) {
	h.emit(Snapshot{
		ID:             h.id,
		Kind:           h.kind,
		FirstBarrier:   h.first,
		Alignment:      max(0, now-h.first),
		AlignmentBytes: h.bytes,
	})
	h.unblockAll()
	h.finish()
}

// Cancel handles a cancel marker for checkpoint id read from channel ch: an
// upstream subtask dropped id (seed 000 §10 Q5). For the pending checkpoint
// it is dropped: ForwardCancel, then every blocked channel is unblocked and
// every capture ends. A marker for a checkpoint newer than any seen drops
// the pending one (subsumed) and is remembered, so that the barriers of id
// that still arrive on other channels are ignored, and forwarded. A marker
// for an older checkpoint is ignored: it was dropped or done already.
func (h *Handler) Cancel(now int64, ch int, id int64) {
	h.checkChannel("Cancel", ch)
	h.cancel(id, fmt.Sprintf("cancel marker on channel %d", ch))
}

// Abort handles the coordinator's notice that checkpoint id was aborted
// (NotifyAborted; seed 000 §2.5, timeouts and declines). It is handled as
// Cancel is, with reason as the ForwardCancel's reason.
func (h *Handler) Abort(id int64, reason string) {
	h.cancel(id, reason)
}

func (h *Handler) cancel(id int64, reason string) {
	if id <= h.last || (h.phase != phaseIdle && id < h.id) {
		return
	}
	if h.phase != phaseIdle && id == h.id {
		h.drop(reason)
		return
	}
	if h.phase != phaseIdle {
		h.drop(SubsumedByCancelReason(id))
	}
	h.last = id
	h.emit(ForwardCancel{ID: id, Reason: reason})
}

// drop abandons the pending checkpoint: ForwardCancel, then resume blocked
// channels and end captures, in channel order.
func (h *Handler) drop(reason string) {
	h.emit(ForwardCancel{ID: h.id, Reason: reason})
	h.unblockAll()
	for ch, c := range h.capturing {
		if c {
			h.endCapture(ch)
		}
	}
	h.finish()
}

// Data records that a data message of the given size was processed from
// channel ch. It only feeds the alignment-bytes metric: bytes count while a
// checkpoint is aligning (or, at-least-once, waiting for barriers) and ch is
// not blocked. In an unaligned checkpoint it tells nothing new: the capture
// is driven by CaptureStart and CaptureEnd.
func (h *Handler) Data(ch int, bytes int) {
	h.checkChannel("Data", ch)
	if bytes < 0 {
		panic(fmt.Sprintf("subtask: Data on channel %d with %d bytes", ch, bytes))
	}
	if (h.phase == phaseAligning || h.phase == phaseTracking) && !h.blocked[ch] {
		h.bytes += int64(bytes)
	}
}

// End records that channel ch ended at time now: its upstream finished. An
// ended channel counts as having delivered every barrier, so its end can
// complete an alignment or the capture of an unaligned checkpoint. Ending a
// channel twice is a no-op. Once every channel has ended nothing is pending.
func (h *Handler) End(now int64, ch int) {
	h.checkChannel("End", ch)
	if h.ended[ch] {
		return
	}
	h.ended[ch] = true
	h.open--
	if h.phase == phaseIdle || h.arrived[ch] {
		return
	}
	h.arrive(now, ch)
}

// Tick tells the handler the time is now. An exactly-once checkpoint (not a
// savepoint) whose alignment has lasted AlignedTimeout ms since its first
// barrier switches to unaligned: Snapshot{Unaligned} with the alignment so
// far, then Unblock of the blocked channels, then CaptureStart for the
// channels still without the barrier; it then completes as an unaligned
// checkpoint. The switch happens in Tick only.
func (h *Handler) Tick(now int64) {
	if h.phase != phaseAligning || h.kind != KindCheckpoint || h.cfg.AlignedTimeout == 0 {
		return
	}
	if now-h.first < h.cfg.AlignedTimeout {
		return
	}
	h.emit(Snapshot{
		ID:             h.id,
		Kind:           h.kind,
		Unaligned:      true,
		FirstBarrier:   h.first,
		Alignment:      now - h.first,
		AlignmentBytes: h.bytes,
	})
	h.unblockAll()
	h.phase = phaseCapturing
	h.startCaptures()
	h.maybeChannelStateDone()
}

func (h *Handler) startCaptures() {
	for ch := range h.capturing {
		if !h.ended[ch] && !h.arrived[ch] {
			h.capturing[ch] = true
			h.emit(CaptureStart{Ch: ch, ID: h.id})
		}
	}
}

func (h *Handler) endCapture(ch int) {
	if h.capturing[ch] {
		h.capturing[ch] = false
		h.emit(CaptureEnd{Ch: ch, ID: h.id})
	}
}

func (h *Handler) maybeChannelStateDone() {
	if h.missing == 0 {
		h.emit(ChannelStateDone{ID: h.id})
		h.finish()
	}
}

func (h *Handler) block(ch int) {
	h.blocked[ch] = true
	h.emit(Block{Ch: ch})
}

func (h *Handler) unblockAll() {
	for ch, b := range h.blocked {
		if b {
			h.blocked[ch] = false
			h.emit(Unblock{Ch: ch})
		}
	}
}

// finish closes the pending checkpoint.
func (h *Handler) finish() {
	h.last = h.id
	h.phase = phaseIdle
}

func (h *Handler) emit(a HandlerAction) { h.actions = append(h.actions, a) }

func (h *Handler) checkChannel(op string, ch int) {
	if ch < 0 || ch >= len(h.ended) {
		panic(fmt.Sprintf("subtask: %s on channel %d: the subtask has channels 0 to %d", op, ch, len(h.ended)-1))
	}
}

// Capturing reports whether data read from channel ch now is channel state
// of an unaligned checkpoint, and which.
func (h *Handler) Capturing(ch int) (id int64, ok bool) {
	h.checkChannel("Capturing", ch)
	if h.phase == phaseCapturing && h.capturing[ch] {
		return h.id, true
	}
	return 0, false
}

// AlignDeadline is when the pending aligned checkpoint switches to
// unaligned (Tick), if one is aligning and the handler has a timeout.
func (h *Handler) AlignDeadline() (at int64, ok bool) {
	if h.phase != phaseAligning || h.kind != KindCheckpoint || h.cfg.AlignedTimeout == 0 {
		return 0, false
	}
	return h.first + h.cfg.AlignedTimeout, true
}
