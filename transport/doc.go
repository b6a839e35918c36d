// Package transport moves batches, watermarks and end-of-input markers between
// subtasks, and carries the control plane between coordinator, workers and
// clients.
//
// Data path. A producer subtask owns one OutputChannel per downstream channel;
// a consumer subtask reads all of its input channels through one InputGate.
// Every channel is bounded: a full channel blocks the producer's Send until
// the consumer makes room, which is how backpressure travels upstream and why
// memory stays bounded whatever the speed of a sink. Order is FIFO per
// channel, and watermarks and end markers travel in-band with the data so that
// a watermark never overtakes the records before it.
//
// LocalChannel is the in-memory implementation for subtasks on one worker;
// JetStreamOutput and JetStreamInput (exchange.go), the channels between
// subtasks on different workers, implement the same OutputChannel and
// InputChannel interfaces over a per-job JetStream stream, with credits for
// flow control and a priority subject for barriers that overtake the data.
//
// Control plane. Coordinator, workers and clients talk over NATS subjects
// (subjects.go) with JSON messages (control.go), in the embedded default as in
// a cluster, so both modes share one code path.
package transport
