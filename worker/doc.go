// Package worker runs subtasks. A Worker registers with the coordinator over
// NATS, receives deployments, fetches the job's module from the JetStream
// object store (unless its runtime holds it compiled already), and runs each
// assigned subtask on its own goroutine: a chain of vertices (a source or an
// input gate, operators in wazero sandboxes or native Go, then a sink or
// output channels). A deployment builds its subtasks (module instances,
// keyed state stores) in parallel.
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
// With the plan's onGuestError in dead-letter mode, a guest failure in a
// batch or timer call is undone and the failing records are found and sent
// to a dead-letter sink instead of failing the subtask (deadletter.go,
// docs/dead-letters.md).
//
// Keyed state is written through one Pebble batch per input message: the
// subtask flushes its state store after each message. Output buffers are
// sent when they reach 32 KiB and after each message; sending blocks on a
// full channel, which is how backpressure reaches sources.
//
// Channels between two subtasks of this worker are in-memory rings
// (transport.LocalChannel); a channel to or from a subtask on another worker
// is a pair of JetStream channels on the job's data stream
// (transport.JetStreamOutput/JetStreamInput), with credits from the consumer
// bounding the data in flight, so backpressure crosses hosts the same way.
package worker
