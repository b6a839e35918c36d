package subtask

import (
	"fmt"
	"strconv"
)

// Action is work that the Machine asks of its driver, returned by Ready in
// the order the driver must carry it out. Block, Unblock, CaptureStart,
// CaptureEnd and ForwardCancel of the barrier handler are Actions too.
type Action interface {
	fmt.Stringer
	action()
}

// Hold: the work that follows is the subtask's tenant's; hold its slot of
// the fair-share gate (a no-op without one). The driver yields the slot
// whenever it waits (Machine.Wait) and before each aligned barrier send.
type Hold struct{ What string }

// Deliver: put the data batch just read from channel Ch through the
// operator chain. Capture is the unaligned checkpoint whose input channel
// state the batch also is (0: none).
type Deliver struct {
	Ch      int
	Capture int64
}

// Flush: send the output gathered so far (after each input message).
type Flush struct{}

// FireTimers: fire the due processing-time timers (after Tick).
type FireTimers struct{}

// DrainEventTime: advance event time to the end before a stop-with-drain
// savepoint, so every event-time timer fires into the savepoint.
type DrainEventTime struct{}

// PreBarrier: run every operator's pre-barrier hook for checkpoint ID and
// let its output through the chain; SendBuffers (aligned snapshots) sends
// everything buffered, so that it goes ahead of the barrier.
type PreBarrier struct {
	ID          int64
	SendBuffers bool
}

// ForwardBarrier: put barrier ID on every output channel; an unaligned
// barrier overtakes the output still queued, which becomes output channel
// state of ID. It comes before SnapshotSync (seed 003, steps 2 and 4).
type ForwardBarrier struct {
	ID        int64
	Kind      Kind
	Unaligned bool
}

// SnapshotSync: take the synchronous phase of the snapshot of ID (keyed
// state checkpoint, source position, sink pre-commit, dead letters) and
// report it with SnapshotDone{Phase: PhaseSync}. Ended: the input had
// ended; the snapshot marks the subtask finished.
type SnapshotSync struct {
	ID        int64
	Kind      Kind
	Unaligned bool
	Ended     bool
	// FirstBarrier and Alignment (ms) and AlignmentBytes are the
	// handler's figures (0 for a trigger).
	FirstBarrier   int64
	Alignment      int64
	AlignmentBytes int64
}

// Persist: run the asynchronous phase of ID (upload, channel state) and
// report it with SnapshotDone{Phase: PhaseAsync}.
type Persist struct{ ID int64 }

// Ack: acknowledge ID to the coordinator with its state handles.
type Ack struct{ ID int64 }

// Decline: tell the coordinator that the subtask dropped ID, and why.
type Decline struct {
	ID     int64
	Reason string
}

// NotifyComplete: tell the operators (and, when Commit, the sink and the
// dead-letter sink) that ID completed.
type NotifyComplete struct {
	ID     int64
	Commit bool
}

// NotifyAborted: tell the operators that ID was aborted.
type NotifyAborted struct{ ID int64 }

// EndOfInput: every input has ended: fire every timer, close the operators,
// flush the sink, send the end downstream and report it to the
// coordinator.
type EndOfInput struct{}

// Undo: roll back the failed guest call at Stage (keyed state, timers,
// output) to where it started.
type Undo struct{ Stage int }

// RenewInstance: the trap left the guest instance unusable; replace it and
// open every guest stage again.
type RenewInstance struct{}

// RunRange: run records [Lo, Hi) of the batch of the Call at Stage (all of
// them, or a piece, or a part of a failed range), and report with
// RangeDone or Trap. CommitPoints: ask the guest to mark commit points (a
// call failed lately).
type RunRange struct {
	Stage, Lo, Hi int
	CommitPoints  bool
}

// DeadLetter: send record Record of the batch of the Call at Stage to the
// dead-letter sink. Cause numbers the call's Trap (from 0) whose failure
// it is; Over: it is one past the budget, and Finish follows.
type DeadLetter struct {
	Stage, Record, Cause int
	Over                 bool
}

// Finish: the subtask is done; Err is why it failed ("" for a normal end),
// Stopped that it stopped with a savepoint.
type Finish struct {
	Stopped bool
	Err     string
}

func (Hold) action()           {}
func (Deliver) action()        {}
func (Flush) action()          {}
func (FireTimers) action()     {}
func (DrainEventTime) action() {}
func (PreBarrier) action()     {}
func (ForwardBarrier) action() {}
func (SnapshotSync) action()   {}
func (Persist) action()        {}
func (Ack) action()            {}
func (Decline) action()        {}
func (NotifyComplete) action() {}
func (NotifyAborted) action()  {}
func (EndOfInput) action()     {}
func (Undo) action()           {}
func (RenewInstance) action()  {}
func (RunRange) action()       {}
func (DeadLetter) action()     {}
func (Finish) action()         {}

func (a Hold) String() string { return "hold " + strconv.Quote(a.What) }
func (a Deliver) String() string {
	s := "deliver ch=" + strconv.Itoa(a.Ch)
	if a.Capture > 0 {
		s += " capture=" + strconv.FormatInt(a.Capture, 10)
	}
	return s
}
func (Flush) String() string          { return "flush" }
func (FireTimers) String() string     { return "fire-timers" }
func (DrainEventTime) String() string { return "drain-event-time" }
func (a PreBarrier) String() string {
	return fmt.Sprintf("pre-barrier id=%d send-buffers=%t", a.ID, a.SendBuffers)
}
func (a ForwardBarrier) String() string {
	return fmt.Sprintf("forward-barrier id=%d kind=%s%s", a.ID, a.Kind, flag(a.Unaligned, " unaligned"))
}
func (a SnapshotSync) String() string {
	return fmt.Sprintf("snapshot-sync id=%d kind=%s%s%s first-barrier=%d alignment=%d alignment-bytes=%d",
		a.ID, a.Kind, flag(a.Unaligned, " unaligned"), flag(a.Ended, " ended"), a.FirstBarrier, a.Alignment, a.AlignmentBytes)
}
func (a Persist) String() string { return "persist id=" + strconv.FormatInt(a.ID, 10) }
func (a Ack) String() string     { return "ack id=" + strconv.FormatInt(a.ID, 10) }
func (a Decline) String() string { return fmt.Sprintf("decline id=%d reason=%q", a.ID, a.Reason) }
func (a NotifyComplete) String() string {
	return fmt.Sprintf("notify-complete id=%d commit=%t", a.ID, a.Commit)
}
func (a NotifyAborted) String() string { return "notify-aborted id=" + strconv.FormatInt(a.ID, 10) }
func (EndOfInput) String() string      { return "end-of-input" }
func (a Undo) String() string          { return "undo stage=" + strconv.Itoa(a.Stage) }
func (RenewInstance) String() string   { return "renew-instance" }
func (a RunRange) String() string {
	return fmt.Sprintf("run-range stage=%d records=[%d,%d)%s", a.Stage, a.Lo, a.Hi, flag(a.CommitPoints, " commit-points"))
}
func (a DeadLetter) String() string {
	return fmt.Sprintf("dead-letter stage=%d record=%d cause=%d%s", a.Stage, a.Record, a.Cause, flag(a.Over, " over"))
}
func (a Finish) String() string {
	switch {
	case a.Err != "":
		return "finish err=" + strconv.Quote(a.Err)
	case a.Stopped:
		return "finish stopped"
	}
	return "finish"
}

func flag(on bool, s string) string {
	if on {
		return s
	}
	return ""
}
