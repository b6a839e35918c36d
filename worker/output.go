package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// outEdge routes the chain's output on one plan edge to its channels.
type outEdge struct {
	edge   *job.ChainEdge
	peers  []int  // the downstream subtask of each channel
	port   uint32 // output index of the tail vertex this edge carries
	inPort uint32 // input index at the downstream vertex
	chans  []transport.OutputChannel
	bufs   []abi.Builder
	// ready holds, per channel, batches cut from its buffer when it
	// reached flushBytes, in order, not sent yet: a call's output however
	// large travels in batches of tens of KiB, so that a channel's queue
	// of a few batches holds that little memory, and the buffer never
	// grows past one batch.
	ready  [][][]byte
	rr     int
	maxPar int
}

// routeRecord appends r to the buffers of the output edges of its port.
func (t *task) routeRecord(r *abi.Record) {
	for _, o := range t.outs {
		if o.port == r.Port {
			o.route(r)
		}
	}
}

// route appends r to the buffer of the channel its edge's partitioning
// picks. It never sends: a batch's output is routed whole before any of it
// is sent, so that at every point where a send can block, all not-yet-sent
// output sits in the buffers (what an unaligned checkpoint taken while
// blocked captures).
func (o *outEdge) route(r *abi.Record) {
	switch o.edge.Partition {
	case job.PartitionKey:
		kg := abi.KeyGroup(r.Key, o.maxPar)
		o.appendTo(abi.SubtaskForKeyGroup(kg, len(o.chans), o.maxPar), r)
	case job.PartitionRebalance:
		i := o.rr
		o.rr++
		if o.rr == len(o.chans) {
			o.rr = 0
		}
		o.appendTo(i, r)
	case job.PartitionBroadcast:
		for i := range o.chans {
			o.appendTo(i, r)
		}
	default: // forward: one channel
		o.appendTo(0, r)
	}
}

// appendTo adds r to the buffer of channel i, and cuts the buffer into a
// ready batch once it reaches flushBytes.
func (o *outEdge) appendTo(i int, r *abi.Record) {
	b := &o.bufs[i]
	b.Add(o.inPort, r.Timestamp, r.Key, r.Value)
	if b.Size() < flushBytes {
		return
	}
	if o.ready == nil {
		o.ready = make([][][]byte, len(o.bufs))
	}
	// The channel will own the batch: copied out of the reusable builder.
	o.ready[i] = append(o.ready[i], append(newBatch(b.Size()), b.Bytes()...))
	if cap(b.Bytes()) > maxKeptOutput {
		*b = abi.Builder{}
	} else {
		b.Reset()
	}
}

// hasReady reports whether channel i has batches cut and not sent.
func (o *outEdge) hasReady(i int) bool { return o.ready != nil && len(o.ready[i]) > 0 }

// sendFull sends the batches cut from the buffers (appendTo).
func (t *task) sendFull(ctx context.Context) error {
	if t.snapshotting {
		return nil
	}
	for _, o := range t.outs {
		for i := range o.bufs {
			if err := t.sendReady(ctx, o, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendReady sends the ready batches of channel i in order. Each leaves the
// queue before its send, so that while a send blocks, the batch is the
// pending one and the rest still queued (what an unaligned checkpoint
// captures, in that order).
func (t *task) sendReady(ctx context.Context, o *outEdge, i int) error {
	for o.hasReady(i) {
		q := o.ready[i]
		data := q[0]
		q[0] = nil
		if len(q) == 1 {
			o.ready[i] = q[:0]
		} else {
			o.ready[i] = q[1:]
		}
		if err := t.sendMsg(ctx, o, i, transport.Message{Kind: transport.KindData, Data: data}); err != nil {
			return err
		}
	}
	return nil
}

// send sends everything channel i holds: its ready batches, then its
// buffer.
func (t *task) send(ctx context.Context, o *outEdge, i int) error {
	if err := t.sendReady(ctx, o, i); err != nil {
		return err
	}
	b := &o.bufs[i]
	if b.Len() == 0 {
		return nil
	}
	// The channel owns what it is sent: copy out of the reusable builder.
	data := append(newBatch(b.Size()), b.Bytes()...)
	if cap(b.Bytes()) > maxKeptOutput {
		*b = abi.Builder{}
	} else {
		b.Reset()
	}
	return t.sendMsg(ctx, o, i, transport.Message{Kind: transport.KindData, Data: data})
}

// sendMsg sends m on channel i of o; after KindEnd it waits until the
// channel has stored everything. While the channel is full, a subtask that
// takes unaligned checkpoints still handles checkpoint triggers and barriers
// that overtook its input (handleBlocked), as Flink's mailbox does: this is
// the one place where a subtask waits for room.
func (t *task) sendMsg(ctx context.Context, o *outEdge, i int, m transport.Message) error {
	ch := o.chans[i]
	t.split.to(timeBackpressured)
	defer t.split.to(timeBusy)
	// A full channel waits for its consumer, which may need the slot.
	t.turn.yield()
	for {
		ok, err := ch.TrySend(m)
		if err != nil {
			return err
		}
		if ok {
			if m.Kind == transport.KindEnd {
				return ch.WaitStored(ctx)
			}
			return nil
		}
		select {
		case <-ch.Room():
			continue
		case <-t.prio:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.split.to(timeBusy)
		t.pending = &pendingSend{out: o, ch: i, msg: m}
		err = t.handleBlocked(ctx)
		t.pending = nil
		if err != nil {
			return err
		}
		t.split.to(timeBackpressured)
		t.turn.yield()
	}
}

// flush ends the processing of one input message: every non-empty output
// buffer is sent, and state changes go to Pebble in one batch once enough
// have gathered. Until then they live in the store's write-back cache, where
// repeated updates of a hot key cost nothing; nothing needs them in Pebble
// sooner (snapshots flush first).
func (t *task) flush(ctx context.Context) error {
	if t.store != nil {
		t.measureState(time.Now())
	}
	if err := t.flushState(); err != nil {
		return err
	}
	for _, o := range t.outs {
		for i := range o.bufs {
			if err := t.send(ctx, o, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushState writes the state changes to Pebble once enough have gathered.
func (t *task) flushState() error {
	if t.store != nil && (t.store.Pending() >= t.store.CacheEntries() || t.store.PendingBytes() >= stateFlushBytes) {
		// The tenant's work, even after a send gave the slot back.
		if err := t.turn.hold("writing state"); err != nil {
			return err
		}
		if err := t.store.Flush(); err != nil {
			return fmt.Errorf("subtask %s: writing state: %w", t.label, err)
		}
	}
	return nil
}

// broadcast sends m on every output channel, after the data before it.
func (t *task) broadcast(ctx context.Context, m transport.Message) error {
	if err := t.flush(ctx); err != nil {
		return err
	}
	for _, o := range t.outs {
		for i := range o.chans {
			if err := t.sendMsg(ctx, o, i, m); err != nil {
				return err
			}
		}
	}
	return nil
}
