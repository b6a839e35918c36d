package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
)

// The producer side of a JetStream channel (see exchange.go).

// outEntry is a message of a producer's window.
type outEntry struct {
	seq   uint64
	data  []byte // KindData only
	frame []byte // what was published, recycled once stored (KindData)
	fut   jetstream.PubAckFuture
	// stored: the stream acknowledged the publish, as its message sseq.
	stored bool
	sseq   uint64
}

// JetStreamOutput is the producer side of a channel to a subtask on another
// worker.
type JetStreamOutput struct {
	x                        *Exchange
	subject, flow, priority  string
	mu                       sync.Mutex
	seq                      uint64 // last sequence assigned
	taken                    uint64 // the consumer's position
	win                      []outEntry
	space                    chan struct{}
	sub                      *nats.Subscription
	closed                   bool
	published, publishedSize int64
	// pinned counts OvertakeRange calls in progress: while one waits for
	// the consumer, credits move taken but leave the window's entries,
	// whose stream sequences it needs.
	pinned int
	// failed is a publish error found on an entry pruned from the window:
	// TrySend returns it rather than forget the message.
	failed error
	// probe asks the consumer for its position while a send waits for
	// room (probing), in case credits were lost; probeGen tells a stopped
	// probe's late timer from the running one's.
	probe    *time.Timer
	probing  bool
	probeGen uint64
	// stopWake ends the wake-up of Room when the exchange closes.
	stopWake func() bool
}

// NewOutput returns the producer side of channel (edge, up, down).
func (x *Exchange) NewOutput(edge, up, down int) (*JetStreamOutput, error) {
	c := x.cfg
	o := &JetStreamOutput{
		x:        x,
		subject:  DataSubject(c.Job, c.Attempt, edge, up, down),
		flow:     FlowSubject(c.Job, c.Attempt, edge, up, down),
		priority: PrioritySubject(c.Job, c.Attempt, edge, up, down),
		space:    make(chan struct{}, 1),
	}
	sub, err := c.NATS.Subscribe(o.flow, o.onCredit)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", o.flow, err)
	}
	o.sub = sub
	o.stopWake = context.AfterFunc(x.ctx, o.wakeRoom)
	return o, nil
}

// onCredit takes a consumer's position.
func (o *JetStreamOutput) onCredit(m *nats.Msg) {
	if len(m.Data) < 8 {
		return
	}
	o.credit(binary.LittleEndian.Uint64(m.Data))
}

func (o *JetStreamOutput) credit(pos uint64) {
	o.mu.Lock()
	if pos > o.seq {
		// Not a position of this channel (a stale attempt cannot reach
		// this subject); ignore rather than corrupt the window.
		o.mu.Unlock()
		return
	}
	moved := pos > o.taken
	if moved {
		o.taken = pos
		o.pruneLocked()
	}
	o.mu.Unlock()
	if moved {
		select {
		case o.space <- struct{}{}:
		default:
		}
	}
}

// pruneLocked drops the window's entries the consumer has taken, unless an
// OvertakeRange needs them; o.mu is held.
func (o *JetStreamOutput) pruneLocked() {
	if o.pinned > 0 {
		return
	}
	k := 0
	for k < len(o.win) && o.win[k].seq <= o.taken {
		e := &o.win[k]
		if !o.stored(e) && e.fut != nil && o.failed == nil {
			// A credit can pass a message whose publish failed (a
			// consumer that skipped it): keep the error for TrySend.
			select {
			case err := <-e.fut.Err():
				o.failed = fmt.Errorf("publishing on %s (message %d): %w", o.subject, e.seq, err)
			default:
			}
		}
		k++
	}
	clear(o.win[:k])
	o.win = o.win[k:]
}

// Send is Send on o.
func (o *JetStreamOutput) Send(ctx context.Context, m Message) error { return Send(ctx, o, m) }

// TrySend implements OutputChannel. It returns once the stream has the
// message in flight (WaitStored waits for it to be stored). A full window
// arms the probe for lost credits.
func (o *JetStreamOutput) TrySend(m Message) (bool, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false, ErrClosed
	}
	if err := o.checkStoredLocked(); err != nil {
		o.mu.Unlock()
		return false, err
	}
	if err := o.x.connected(); err != nil {
		o.mu.Unlock()
		return false, err
	}
	if o.seq-o.taken >= uint64(o.x.cfg.Window) {
		if err := o.x.ctx.Err(); err != nil {
			o.mu.Unlock()
			return false, err
		}
		o.armProbeLocked()
		o.mu.Unlock()
		return false, nil
	}
	o.stopProbeLocked()
	o.seq++
	seq := o.seq
	e := outEntry{seq: seq}
	if m.Kind == KindData {
		e.data = m.Data
	}
	o.win = append(o.win, e)
	o.mu.Unlock()
	frame := encodeFrame(m, seq)
	fut, err := o.x.js.PublishAsync(o.subject, frame)
	if err != nil {
		return false, fmt.Errorf("publishing on %s: %w", o.subject, err)
	}
	o.mu.Lock()
	for k := len(o.win) - 1; k >= 0 && o.win[k].seq >= seq; k-- {
		if o.win[k].seq == seq {
			o.win[k].fut = fut
			if m.Kind == KindData {
				o.win[k].frame = frame
			}
		}
	}
	o.published++
	o.publishedSize += int64(len(frame))
	o.mu.Unlock()
	return true, nil
}

// Room implements OutputChannel. It receives on a credit, on every probe
// while the window is full (the producer then sees a failed publish or a
// lost connection), on Close and when the exchange closes.
func (o *JetStreamOutput) Room() <-chan struct{} { return o.space }

// wakeRoom tells a producer waiting on Room to try again.
func (o *JetStreamOutput) wakeRoom() {
	select {
	case o.space <- struct{}{}:
	default:
	}
}

// armProbeLocked starts the probe for lost credits unless it runs; o.mu is
// held. Credits travel on plain NATS and can be lost: a producer whose
// send has waited Probe for room asks the consumer for its position, and
// again every Probe while the window stays full.
func (o *JetStreamOutput) armProbeLocked() {
	if o.probing {
		return
	}
	o.probing = true
	o.probeGen++
	gen := o.probeGen
	o.probe = time.AfterFunc(o.x.cfg.Probe, func() { o.onProbe(gen) })
}

// stopProbeLocked ends the probe once a send found room: the next wait
// starts its own; o.mu is held.
func (o *JetStreamOutput) stopProbeLocked() {
	if o.probing {
		o.probe.Stop()
		o.probing = false
	}
}

// onProbe runs on the timer of probe gen: while the window is still full it
// asks for the consumer's position, whose answer comes on the flow subject,
// and wakes the producer to look at the channel again (a failed publish, a
// lost connection).
func (o *JetStreamOutput) onProbe(gen uint64) {
	o.mu.Lock()
	if !o.probing || gen != o.probeGen {
		o.mu.Unlock()
		return // stopped after the timer fired
	}
	if o.closed || o.x.ctx.Err() != nil || o.seq-o.taken < uint64(o.x.cfg.Window) {
		o.probing = false
		o.mu.Unlock()
		o.wakeRoom()
		return
	}
	o.probe.Reset(o.x.cfg.Probe)
	o.mu.Unlock()
	_ = o.x.cfg.NATS.PublishRequest(o.priority, o.flow, encodeFrame(Message{Kind: kindProbe}, 0))
	o.wakeRoom()
}

// stored reports whether the stream has acknowledged e, and recycles its
// frame once it has; o.mu is held. A publish error is left for
// checkStoredLocked.
func (o *JetStreamOutput) stored(e *outEntry) bool {
	if !e.stored && e.fut != nil {
		select {
		case ack := <-e.fut.Ok():
			e.stored = true
			if ack != nil {
				e.sseq = ack.Sequence
			}
		default:
			return false
		}
	}
	if e.stored && e.frame != nil {
		f := e.frame
		e.frame = nil
		framePool.Put(&f)
	}
	return e.stored
}

// checkStoredLocked notes the stream's acknowledgements of the window's
// messages and returns the first publish error; o.mu is held.
func (o *JetStreamOutput) checkStoredLocked() error {
	if o.failed != nil {
		return o.failed
	}
	for k := range o.win {
		e := &o.win[k]
		if e.fut == nil || o.stored(e) {
			continue
		}
		select {
		case err := <-e.fut.Err():
			return fmt.Errorf("publishing on %s (message %d): %w", o.subject, e.seq, err)
		default:
			return nil
		}
	}
	return nil
}

// WaitStored implements OutputChannel: it waits until the stream
// acknowledged every message of the window that the consumer has not taken.
func (o *JetStreamOutput) WaitStored(ctx context.Context) error {
	for {
		o.mu.Lock()
		var fut jetstream.PubAckFuture
		var seq uint64
		for k := range o.win {
			if e := &o.win[k]; !e.stored && e.fut != nil {
				fut, seq = e.fut, e.seq
				break
			}
		}
		o.mu.Unlock()
		if fut == nil {
			return nil
		}
		var ack *jetstream.PubAck
		select {
		case ack = <-fut.Ok():
		case err := <-fut.Err():
			return fmt.Errorf("publishing on %s (message %d): %w", o.subject, seq, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-o.x.ctx.Done():
			return o.x.ctx.Err()
		}
		o.setStored(seq, ack)
	}
}

// setStored records the stream's acknowledgement of message seq.
func (o *JetStreamOutput) setStored(seq uint64, ack *jetstream.PubAck) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.win {
		if e := &o.win[k]; e.seq == seq {
			e.stored = true
			if ack != nil {
				e.sseq = ack.Sequence
			}
			o.stored(e)
		}
	}
}

// Overtake implements OutputChannel. The consumer puts m ahead of what it has
// not handed out and answers with its position; the data after it, which the
// window still holds, is returned. It waits for the consumer's answer (a
// round trip), up to the exchange's OvertakeTimeout.
func (o *JetStreamOutput) Overtake(m Message) ([][]byte, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, ErrClosed
	}
	last := o.seq
	// The window's data now: credits that arrive before the consumer's
	// answer may already count messages delivered after the barrier, and
	// prune them from the window.
	type held struct {
		seq  uint64
		data []byte
	}
	var window []held
	first := last + 1 // the window's first message
	if len(o.win) > 0 {
		first = o.win[0].seq
	}
	if m.Kind == KindBarrier {
		for _, e := range o.win {
			if e.data != nil {
				window = append(window, held{e.seq, e.data})
			}
		}
	}
	o.mu.Unlock()
	pos, err := o.request(m, last)
	if err != nil {
		return nil, err
	}
	if m.Kind != KindBarrier {
		return nil, nil
	}
	if first > pos+1 {
		return nil, fmt.Errorf("channel %s: the consumer is at message %d, but the window starts at %d", o.subject, pos, first)
	}
	var over [][]byte
	for _, e := range window {
		if e.seq > pos {
			over = append(over, e.data)
		}
	}
	return over, nil
}

// request sends m on the priority subject, naming last as the producer's
// last message, and returns the consumer's position, which it credits.
func (o *JetStreamOutput) request(m Message, last uint64) (uint64, error) {
	if err := o.x.connected(); err != nil {
		return 0, err
	}
	req := encodeFrame(m, last)
	deadline := time.Now().Add(o.x.cfg.OvertakeTimeout)
	var reply *nats.Msg
	for {
		rctx, cancel := context.WithTimeout(o.x.ctx, 5*time.Second)
		r, err := o.x.cfg.NATS.RequestWithContext(rctx, o.priority, req)
		cancel()
		if err == nil {
			reply = r
			break
		}
		if o.x.ctx.Err() != nil {
			return 0, o.x.ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("channel %s: the consumer did not take %s %d within %s: %w", o.subject, m.Kind, m.Checkpoint, o.x.cfg.OvertakeTimeout, err)
		}
		// No consumer yet (it is still being deployed), or a lost reply:
		// the consumer takes a repeated request only once.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-o.x.ctx.Done():
			return 0, o.x.ctx.Err()
		}
	}
	if len(reply.Data) < 8 {
		return 0, fmt.Errorf("channel %s: bad answer to %s %d", o.subject, m.Kind, m.Checkpoint)
	}
	pos := binary.LittleEndian.Uint64(reply.Data)
	if pos > last {
		return 0, fmt.Errorf("channel %s: the consumer is at message %d, past the %d sent", o.subject, pos, last)
	}
	o.credit(pos)
	return pos, nil
}

// OvertakeRange is Overtake for a barrier that records what it overtook
// as a range of the data stream instead of copying it: the messages of the
// channel after the consumer's position, up to the last one sent, which
// the stream holds since the consumer keeps its floor below them until
// the checkpoint is subsumed or aborted. It waits for the stream to
// acknowledge them. The range is nil when the barrier overtook no data.
func (o *JetStreamOutput) OvertakeRange(m Message) (*checkpoint.ChannelRange, error) {
	if m.Kind != KindBarrier {
		return nil, fmt.Errorf("channel %s: OvertakeRange takes a barrier, not a %s", o.subject, m.Kind)
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, ErrClosed
	}
	last := o.seq
	first := last + 1
	if len(o.win) > 0 {
		first = o.win[0].seq
	}
	o.pinned++
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.pinned--
		o.pruneLocked()
		o.mu.Unlock()
	}()
	pos, err := o.request(m, last)
	if err != nil {
		return nil, err
	}
	if first > pos+1 {
		return nil, fmt.Errorf("channel %s: the consumer is at message %d, but the window starts at %d", o.subject, pos, first)
	}
	deadline := time.NewTimer(o.x.cfg.OvertakeTimeout)
	defer deadline.Stop()
	for {
		r := checkpoint.ChannelRange{Stream: DataStream(o.x.cfg.Job), Subject: o.subject}
		var fut jetstream.PubAckFuture
		var wait uint64
		o.mu.Lock()
		for k := range o.win {
			e := &o.win[k]
			if e.seq <= pos || e.seq > last {
				continue
			}
			if !o.stored(e) {
				if e.fut == nil {
					o.mu.Unlock()
					return nil, fmt.Errorf("channel %s: message %d was never published", o.subject, e.seq)
				}
				fut, wait = e.fut, e.seq
				break
			}
			if r.First == 0 {
				r.First = e.sseq
			}
			r.Last = e.sseq
			if e.data != nil {
				r.Messages++
				r.Bytes += int64(len(e.data))
			}
		}
		o.mu.Unlock()
		if fut == nil {
			if r.Messages == 0 {
				return nil, nil
			}
			return &r, nil
		}
		select {
		case ack := <-fut.Ok():
			o.setStored(wait, ack)
		case err := <-fut.Err():
			return nil, fmt.Errorf("publishing on %s (message %d): %w", o.subject, wait, err)
		case <-deadline.C:
			return nil, fmt.Errorf("channel %s: the stream did not store message %d within %s", o.subject, wait, o.x.cfg.OvertakeTimeout)
		case <-o.x.ctx.Done():
			return nil, o.x.ctx.Err()
		}
	}
}

// Close releases the channel; a TrySend after it returns ErrClosed.
func (o *JetStreamOutput) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.win = nil
	o.stopProbeLocked()
	o.mu.Unlock()
	o.stopWake()
	o.wakeRoom()
	return o.sub.Unsubscribe()
}

// Stats returns the messages and bytes (frames) published so far.
func (o *JetStreamOutput) Stats() (messages, bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.published, o.publishedSize
}

// InFlight is the number of messages published on the channel that its
// consumer has not taken yet (at most the window).
func (o *JetStreamOutput) InFlight() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int64(o.seq - o.taken)
}
