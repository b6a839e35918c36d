// Package subtask is a subtask's behaviour as pure state machines: the
// barrier handler (Handler) and, around it, the Machine of one subtask.
// Neither does IO, reads a clock or runs a goroutine: time is an int64 in
// ms passed in, and every ordering question is a unit test without sleeps
// (testdata/ holds the scenario files; machine_property_test.go checks the
// Machine against a model of its channels).
//
// # The driver
//
// The worker (package worker) drives one Machine per subtask from the
// subtask's goroutine. It turns what it waits for into events and carries
// out the actions of Ready in their order before it waits again:
//
//	input gate ──GateEvent──┐      coordinator ──control──┐
//	(message | timer |      │      (trigger, complete,    │
//	 interrupt)             ▼       abort, stop)          ▼
//	                 ┌───────────────────────────────────────────┐
//	guest call ─────▶│ Machine                                   │◀── snapshot phase done
//	(Call, Trap,     │   Data Barrier CancelMarker EndOfInput    │    (SnapshotDone sync/async)
//	 RangeDone)      │   Tick Control SnapshotDone               │
//	time ───────────▶│   Call Trap RangeDone                     │
//	                 │   ┌─────────────┐                         │
//	                 │   │ Handler     │ aligned / at-least-once │
//	                 │   │ (barriers)  │ unaligned / timeout     │
//	                 │   └─────────────┘                         │
//	                 └──────────────────────┬────────────────────┘
//	                                        │ Ready(): []Action, in order
//	                                        ▼
//	Hold Deliver Flush FireTimers DrainEventTime Block Unblock CaptureStart
//	CaptureEnd PreBarrier ForwardBarrier SnapshotSync Persist Ack Decline
//	ForwardCancel NotifyComplete NotifyAborted EndOfInput Undo RenewInstance
//	RunRange DeadLetter Finish
//	                                        │
//	                                        ▼
//	           the driver waits for Wait(): input (and NextWake), control, done
//
// # The barrier handler
//
// A Handler runs in every subtask that has input channels, between its
// input gate and its operator chain, one per subtask. The subtask reports
// what it reads from the gate (Barrier, Cancel for a cancel marker, Data,
// End), the time (Tick) and the coordinator's NotifyAborted (Abort), and
// carries out the HandlerActions of Ready in their order. Per mode (seed
// 000 §1.3–1.4, seed 001):
//
//   - ExactlyOnce (aligned): a channel that delivered barrier n is blocked;
//     when every channel has delivered it (an ended channel counts as
//     having delivered every barrier), Snapshot, then Unblock. With
//     HandlerConfig.AlignedTimeout, an alignment that lasted that long when
//     Tick looks switches to unaligned: Snapshot{Unaligned}, Unblock, then
//     CaptureStart for the channels still without the barrier.
//   - AtLeastOnce: nothing is blocked; Snapshot when every channel has
//     delivered barrier n. Data read after a barrier is in the snapshot and
//     replayed again on recovery.
//   - Unaligned: Snapshot{Unaligned} at the first barrier of n, CaptureStart
//     for every other open channel, CaptureEnd as each barrier arrives, then
//     ChannelStateDone. Savepoints are aligned in this mode; they never
//     switch to unaligned in any mode.
//
// The subtask's side of the contract:
//
//  1. Snapshot n: run the operators' pre-barrier hooks, forward barrier n on
//     every output (an unaligned barrier goes ahead of the output still
//     queued, which becomes output channel state), take the sync phase of
//     the snapshot, then let the async phase run (seed 003, steps 1–4).
//  2. The Unblocks that follow a Snapshot in one Ready come after it, so
//     nothing read after a barrier reaches an aligned snapshot.
//  3. Between CaptureStart{ch, n} and CaptureEnd{ch, n} every data message
//     read from ch is processed as usual and also persisted as input channel
//     state of n, to be replayed before new input on restore.
//  4. Ack n to the coordinator when its async phase is done and, for an
//     unaligned snapshot, after ChannelStateDone{n}.
//  5. ForwardCancel n: drop whatever is in progress for n (async phase,
//     captured channel state), forward a cancel marker for n on every
//     output, and decline n to the coordinator unless the coordinator
//     aborted it.
//
// At most one checkpoint is pending per handler, and ids only increase: a
// barrier of a newer checkpoint drops the pending one (ForwardCancel
// "subsumed by checkpoint m"); a cancel marker or Abort drops the pending
// checkpoint, or, for a newer id, is remembered and forwarded so that its
// barriers still on their way block nothing; barriers and cancels of ids
// already done, dropped or older than the pending one are ignored.
//
// # Contract of the Machine (a checkpoint n, in order)
//
//  1. PreBarrier n: the operators' pre-barrier hooks run and their output
//     goes through the chain; an aligned snapshot sends every buffer, so
//     that it goes ahead of the barrier (seed 003 step 1).
//  2. ForwardBarrier n: the barrier goes on every output; an unaligned one
//     overtakes the output still queued, which becomes output channel state
//     of n (seed 003 step 2; seed 001 unaligned steps 1–2).
//  3. SnapshotSync n: keyed state, source position, sink pre-commit, dead
//     letters; the driver reports it with SnapshotDone(n, PhaseSync). A
//     failure declines n (ForwardCancel, then Decline) without failing the
//     subtask, unless a sink's failed pre-commit left a transaction it
//     cannot abort (seed 003 step 4; decline reasons).
//  4. Between CaptureStart{ch, n} and CaptureEnd{ch, n}, each Deliver from
//     ch carries Capture n: the batch is processed and also kept as input
//     channel state of n (seed 001 unaligned step 3).
//  5. Persist n once its synchronous phase and every capture are done;
//     the driver reports it with SnapshotDone(n, PhaseAsync); then Ack n.
//  6. NotifyComplete n commits the sink (not for an intermediate
//     savepoint); once every input has ended, the first checkpoint taken
//     after the end completing is the subtask's Finish (DESIGN.md checkpoint
//     path step 8).
//
// Dead letters (deadletter.go): in dead-letter mode the driver guards each
// guest call of a stage on a batch or its timers (Call); the machine asks
// for the ranges to run (RunRange: the batch whole, or in pieces while
// failures are frequent), and for each that failed (Trap) to undo it
// (Undo, RenewInstance), which records to run again and which to
// dead-letter (DeadLetter), within the budget it counts.
// The worker sets Config.SinkCanAbort when every sink that pre-commits in
// its snapshots can take back a failed pre-commit (the file and JetStream
// sinks: connector.PreCommitAborter): it does so before it reports the
// SnapshotDone, the records stay in the sink's open transaction, and the
// next checkpoint commits them. A sink that cannot keep them (a failed
// fsync leaves a file nobody can vouch for) fails the subtask there, and a
// restore replays them.
//
// Actions the driver carries out may lead to further events (SnapshotDone
// after SnapshotSync; Call while Deliver, FireTimers or EndOfInput runs a
// guest, then RangeDone or Trap after each RunRange); it feeds them, and
// carries out what they ask, before taking the next GateEvent. A machine
// that finished normally still takes the dead-letter events of the actions
// before its Finish (EndOfInput fires every timer).
package subtask
