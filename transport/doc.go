// Package transport moves batches, watermarks and end-of-input markers between
// subtasks, and carries the control plane between coordinator, workers and
// clients.
//
// Data path. A producer subtask owns one OutputChannel per downstream channel;
// a consumer subtask reads all of its input channels through one InputGate.
// Every channel is bounded: a full channel refuses the producer's TrySend
// until the consumer makes room, and the producer waits on the channel's Room
// (the package function Send does both for a producer with nothing else to
// wait for), which is how backpressure travels upstream and why memory stays
// bounded whatever the speed of a sink. Order is FIFO per
// channel, and watermarks and end markers travel in-band with the data so that
// a watermark never overtakes the records before it.
//
// LocalChannel is the in-memory implementation for subtasks on one worker;
// JetStreamOutput and JetStreamInput (exchange.go), the channels between
// subtasks on different workers, implement the same OutputChannel and
// InputChannel interfaces over a per-job JetStream stream, with credits for
// flow control (a producer whose window stays full probes for lost credits
// by itself: its caller only waits on Room) and a priority subject for
// barriers that overtake the data. A producer that sent its end calls
// WaitStored: then the stream holds all of its output.
//
// Control plane. Coordinator, workers and clients talk over NATS subjects
// (subjects.go) with JSON messages (control.go), in the embedded default as in
// a cluster, so both modes share one code path.
package transport
