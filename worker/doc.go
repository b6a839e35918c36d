// Package worker runs subtasks. A Worker registers with the coordinator over
// NATS, receives deployments, fetches the job's module from the JetStream
// object store (unless it holds it compiled for the job's tenant already:
// at most the deployment's module size limit, and only bytes that hash to
// the module's digest), and runs each
// assigned subtask on its own goroutine: a chain of vertices (a source or an
// input gate, operators in wazero sandboxes or native Go, then a sink or
// output channels). A deployment builds its subtasks (module instances,
// keyed state stores) in parallel, each in three steps (newtask.go): open
// (channels, and the keyed store on the restored checkpoint's files),
// restore (a savepoint's keyed state, rescaled or migrated, and source
// positions), wire (sources, sinks, operators, fair share, dead letters,
// then the subtask machine).
//
// A subtask's loop, per input message:
//
//  1. data: the batch goes through the chain's operators, one call per
//     operator per batch; the chain's output is partitioned (forward, key
//     group, round robin, broadcast) into per-channel buffers;
//  2. watermark: the subtask's watermark is the minimum over its inputs;
//     when it advances, event-time timers fire stage by stage in chain
//     order, then the watermark is sent downstream behind the data;
//  3. end: an ended input counts as watermark +∞; when all have ended every
//     timer fires, operators close in chain order, the sink flushes, and the
//     end is sent downstream.
//
// What a subtask does about checkpoints (barriers, alignment, unaligned
// capture, snapshots, declines, the final checkpoint, stop-with-savepoint)
// is a subtask.Machine; the task is its driver (drive.go). One goroutine
// per subtask feeds the machine and carries out its actions in order:
//
//	        ┌──────────── task goroutine ─────────────────────────────┐
//	        │                                                         │
//	gate ───┼─▶ InputGate.Next ─▶ GateEvent                           │
//	        │     message: data ──────▶ Machine.Data ─────────┐       │
//	        │              barrier ───▶ Machine.Barrier ──────┤       │
//	        │              cancel ────▶ Machine.CancelMarker ─┤       │
//	        │              end ───────▶ Machine.EndOfInput ───┤       │
//	        │              watermark ─▶ (the task: timers)    │       │
//	        │     timer ──────────────▶ Machine.Tick ─────────┤       │
//	        │     interrupt ─▶ mailbox ▶ Machine.Control ─────┤       │
//	        │                                                 ▼       │
//	        │   runActions: for a in Ready(): do(a)  ◀── SnapshotDone │
//	        │     Deliver → operators → output buffers        (sync)  │
//	        │     Block/Unblock → gate   CaptureStart/End → snapshot  │
//	        │     PreBarrier → ForwardBarrier → SnapshotSync ─────────┘
//	        │     Persist ──▶ goroutine: upload, then ack or decline  │
//	        │     ForwardCancel, Decline, NotifyComplete/Aborted,     │
//	        │     EndOfInput, Finish                                  │
//	        │                                                         │
//	        │   a guest stage in dead-letter mode, per batch or timers│
//	        │   (processGuarded, inside Deliver, FireTimers, ...):    │
//	        │     Machine.Call ─▶ settle: for a in Ready(): ◀─────┐   │
//	        │       RunRange → guest call ─▶ RangeDone | Trap ────┤   │
//	        │       Undo → state and output rolled back           │   │
//	        │       RenewInstance → instance reset or replaced    │   │
//	        │       DeadLetter → dead-letter sink ────────────────┘   │
//	        └─────────────────────────────────────────────────────────┘
//
// A source subtask has no gate: it feeds Control (triggers) and, when its
// source ends, EndOfInput. While a send waits for room in a full channel,
// an unaligned subtask still feeds the machine its control messages and
// the barriers that overtook its input (handleBlocked). A subtask waits for
// room in one place (sendMsg): TrySend, and while the channel is full one
// wait on its Room, the priority wake-up (t.prio) or cancellation.
//
// With the plan's onGuestError in dead-letter mode, a guest failure in a
// batch or timer call is undone and the failing records are found and sent
// to a dead-letter sink instead of failing the subtask: the machine says
// which ranges to run and which records to dead-letter, the task runs them
// (deadletter.go, docs/dead-letters.md).
//
// Keyed state changes gather in the state store's write-back cache and
// reach Pebble when enough have gathered (for a tenant's job, as soon as
// they come to half of the tenant's memory quota, within a call too).
// Output is cut into batches of 32 KiB per channel as it is routed, and
// sent after each call and after each message; sending blocks on a full
// channel, which is how backpressure reaches sources.
//
// A tenant's subtask works holding a slot of the fair-share gate (package
// fairshare) for its tenant: its guest calls and the host work around them
// (routing output, sinks, state flushes, timers), from taking up an input
// message until it next waits for input, for room in a channel or for a
// control message. So the host work a guest causes counts against its
// tenant's share of the cores, and no subtask ever waits for another while
// holding a slot.
//
// Channels between two subtasks of this worker are in-memory rings
// (transport.LocalChannel); a channel to or from a subtask on another worker
// is a pair of JetStream channels on the job's data stream
// (transport.JetStreamOutput/JetStreamInput), with credits from the consumer
// bounding the data in flight, so backpressure crosses hosts the same way.
//
// Every subtask keeps live figures for metrics (metrics.go): records and
// bytes in and out per vertex as atomic counters added per batch, its time
// split into busy, backpressured and idle (switched where it starts and
// stops waiting, never per record), its watermark, its keyed state's size
// (measured on its own goroutine about once a second) and its exchange
// channels' lag. Worker.SubtaskMetrics, GuestCalls and StateStats read
// them for the metrics endpoint; with each heartbeat the worker also sends
// the coordinator its subtasks' samples (transport.SubjectMetrics), which
// the REST API serves.
package worker
