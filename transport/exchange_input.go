package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
)

// The consumer side of a JetStream channel (see exchange.go).

// inEntry is a message the consumer has received and not handed out.
type inEntry struct {
	m    Message
	seq  uint64 // 0: a message that overtook the data
	sseq uint64 // the message's stream sequence
	// stored is when the stream stored the message (Unix nanoseconds; 0:
	// unknown, or a message that overtook the data), for Lag.
	stored int64
}

// JetStreamInput is the consumer side of a channel from a subtask on another
// worker.
type JetStreamInput struct {
	x                       *Exchange
	subject, flow, priority string
	consumer                string
	mu                      sync.Mutex
	q                       []inEntry
	received                uint64 // last sequence received from the stream
	pos                     uint64 // last sequence handed out
	posStream               uint64 // stream sequence of message pos
	credited                uint64
	creditEvery             uint64
	wake, prio              chan<- struct{}
	// overtook remembers the answers to priority requests, so that a
	// repeated request is answered again and not taken twice.
	overtook map[[2]int64]uint64
	// holds are the stream sequences from which the ranges of pending or
	// completed checkpoints (by id) start: the floor below which the
	// channel's messages are purged never passes them.
	holds map[int64]uint64
	// captures are the runs of messages handed out for the unaligned
	// checkpoints (by id) that capture this channel.
	captures map[int64]*checkpoint.ChannelRange
	purgeReq chan struct{}
	purgeMu  sync.Mutex // serializes purges
	purged   uint64     // the floor of the last purge
	cc       jetstream.ConsumeContext
	sub      *nats.Subscription
	closed   bool
	err      error
	broken   atomic.Bool // err is set
}

// NewInput returns the consumer side of channel (edge, up, down): it creates
// the channel's stream consumer and starts receiving. Messages that arrive
// before Notify wait in the queue.
func (x *Exchange) NewInput(edge, up, down int) (*JetStreamInput, error) {
	c := x.cfg
	in := &JetStreamInput{
		x:           x,
		subject:     DataSubject(c.Job, c.Attempt, edge, up, down),
		flow:        FlowSubject(c.Job, c.Attempt, edge, up, down),
		priority:    PrioritySubject(c.Job, c.Attempt, edge, up, down),
		consumer:    fmt.Sprintf("a%d-e%d-u%d-d%d", c.Attempt, edge, up, down),
		creditEvery: uint64(max(1, c.Window/4)),
		overtook:    map[[2]int64]uint64{},
		holds:       map[int64]uint64{},
		captures:    map[int64]*checkpoint.ChannelRange{},
		purgeReq:    make(chan struct{}, 1),
	}
	if err := in.start(); err != nil {
		return nil, err
	}
	go in.purgeLoop()
	return in, nil
}

func (in *JetStreamInput) start() error {
	x := in.x
	sub, err := x.cfg.NATS.Subscribe(in.priority, in.onPriority)
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", in.priority, err)
	}
	in.sub = sub
	ctx, cancel := context.WithTimeout(x.ctx, 30*time.Second)
	defer cancel()
	cons, err := x.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       in.consumer,
		FilterSubject: in.subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: 4 * x.cfg.Window,
		AckWait:       time.Minute,
		// The server removes a consumer that no one has pulled from
		// for this long: Close's delete may not reach a cluster that
		// cannot answer now, or a process may die before it.
		InactiveThreshold: consumerInactive,
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("creating consumer %s of %s: %w", in.consumer, DataStream(x.cfg.Job), err)
	}
	cc, err := cons.Consume(in.onData, jetstream.PullMaxMessages(2*x.cfg.Window), jetstream.PullHeartbeat(PullHeartbeat))
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("consuming %s: %w", in.subject, err)
	}
	in.cc = cc
	return x.cfg.NATS.Flush()
}

func (in *JetStreamInput) onData(msg jetstream.Msg) {
	_ = msg.Ack()
	m, seq, err := decodeFrame(msg.Data())
	var sseq uint64
	var stored int64
	if meta, merr := msg.Metadata(); merr == nil {
		sseq = meta.Sequence.Stream
		stored = meta.Timestamp.UnixNano()
	}
	in.mu.Lock()
	switch {
	case err != nil:
		if in.err == nil {
			in.failLocked(fmt.Errorf("channel %s: %w", in.subject, err))
		}
		wake := in.wake
		in.mu.Unlock()
		signal(wake)
		return
	case in.err != nil:
		// Broken: nothing after the break may reach the subtask.
		in.mu.Unlock()
		return
	case seq <= in.received:
		// Delivered again (an acknowledgement was lost).
		in.mu.Unlock()
		return
	case seq != in.received+1:
		// A message of the channel is lost (a stream that lost a write,
		// a publish that failed): carrying on would drop its records, so
		// the gate fails and the attempt restarts from its checkpoint.
		in.failLocked(fmt.Errorf("channel %s: message %d follows %d: messages %d-%d are missing", in.subject, seq, in.received, in.received+1, seq-1))
		wake := in.wake
		in.mu.Unlock()
		signal(wake)
		return
	}
	in.received = seq
	in.q = append(in.q, inEntry{m: m, seq: seq, sseq: sseq, stored: stored})
	wake := in.wake
	in.mu.Unlock()
	signal(wake)
}

func signal(c chan<- struct{}) {
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// onPriority takes a message that overtakes the queue, or answers a probe.
func (in *JetStreamInput) onPriority(msg *nats.Msg) {
	m, _, err := decodeFrame(msg.Data)
	if err != nil {
		return
	}
	in.mu.Lock()
	if m.Kind == kindProbe {
		pos := in.pos
		in.mu.Unlock()
		_ = msg.Respond(binary.LittleEndian.AppendUint64(nil, pos))
		return
	}
	key := [2]int64{int64(m.Kind), m.Checkpoint}
	pos, seen := in.overtook[key]
	if !seen {
		pos = in.pos
		in.overtook[key] = pos
		for k := range in.overtook {
			if k[1] < m.Checkpoint-64 {
				delete(in.overtook, k)
			}
		}
		in.q = append(in.q, inEntry{})
		copy(in.q[1:], in.q)
		in.q[0] = inEntry{m: m}
		switch m.Kind {
		case KindBarrier:
			// The producer records what this barrier overtakes as the
			// messages after pos: keep them.
			in.holdLocked(m.Checkpoint, in.posStream+1)
		case KindCancel:
			delete(in.holds, m.Checkpoint)
		}
	}
	wake, prio := in.wake, in.prio
	in.mu.Unlock()
	_ = msg.Respond(binary.LittleEndian.AppendUint64(nil, pos))
	if !seen {
		signal(wake)
		signal(prio)
	}
}

// pop removes the queue's head; in.mu is held. It returns the position to
// credit, 0 when no credit is due.
func (in *JetStreamInput) pop() (Message, uint64) {
	e := in.q[0]
	in.q[0] = inEntry{}
	in.q = in.q[1:]
	if e.seq > 0 {
		in.pos = e.seq
		in.posStream = e.sseq
		for _, c := range in.captures {
			if c.First == 0 {
				c.First = e.sseq
			}
			c.Last = e.sseq
			if e.m.Kind == KindData {
				c.Messages++
				c.Bytes += int64(len(e.m.Data))
			}
		}
	}
	if in.pos > in.credited && (in.pos-in.credited >= in.creditEvery || len(in.q) == 0) {
		in.credited = in.pos
		return e.m, in.pos
	}
	return e.m, 0
}

// Lag is the age of the oldest message the channel has received and the
// subtask has not taken yet, since the stream stored it (by the NATS
// server's clock against the worker's): how far the subtask's reading of
// the channel trails its producer. It is 0 when nothing waits. The flow
// control window keeps the producer at most a window ahead of the
// consumer, so what waits is mostly here rather than in the stream.
func (in *JetStreamInput) Lag() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, e := range in.q {
		if e.stored > 0 {
			return max(0, time.Duration(time.Now().UnixNano()-e.stored))
		}
	}
	return 0
}

func (in *JetStreamInput) sendCredit(pos uint64) {
	if pos > 0 {
		_ = in.x.cfg.NATS.Publish(in.flow, binary.LittleEndian.AppendUint64(nil, pos))
		// What was handed out can go: purged with the credits.
		signal(in.purgeReq)
	}
}

// holdLocked keeps the channel's messages from stream sequence from on
// for checkpoint id; in.mu is held.
func (in *JetStreamInput) holdLocked(id int64, from uint64) {
	if h, ok := in.holds[id]; !ok || from < h {
		in.holds[id] = from
	}
}

// StartCapture implements RangeCapturer: the messages handed out from now
// on are channel state of checkpoint id, kept in the stream.
func (in *JetStreamInput) StartCapture(id int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.holdLocked(id, in.posStream+1)
	in.captures[id] = &checkpoint.ChannelRange{Stream: DataStream(in.x.cfg.Job), Subject: in.subject}
}

// EndCapture implements RangeCapturer: it returns the range of the
// messages handed out since StartCapture(id), nil when there were none.
func (in *JetStreamInput) EndCapture(id int64) *checkpoint.ChannelRange {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.captures[id]
	delete(in.captures, id)
	if c == nil || c.Messages == 0 {
		return nil
	}
	return c
}

// floorLocked is the stream sequence below which the channel's messages
// are no longer needed: those handed out, except from where a hold starts;
// in.mu is held.
func (in *JetStreamInput) floorLocked() uint64 {
	f := in.posStream + 1
	for _, h := range in.holds {
		f = min(f, h)
	}
	return f
}

// purgeLoop purges in the background: requests that arrive while a purge
// runs are served by the next one.
func (in *JetStreamInput) purgeLoop() {
	for {
		select {
		case <-in.purgeReq:
		case <-in.x.ctx.Done():
			return
		}
		in.mu.Lock()
		closed := in.closed
		in.mu.Unlock()
		if closed {
			return
		}
		_ = in.Purge(in.x.ctx)
	}
}

// Purge removes the channel's messages below its floor from the stream.
func (in *JetStreamInput) Purge(ctx context.Context) error {
	in.purgeMu.Lock()
	defer in.purgeMu.Unlock()
	in.mu.Lock()
	floor := in.floorLocked()
	in.mu.Unlock()
	if floor <= in.purged+1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := in.x.stream.Purge(ctx, jetstream.WithPurgeSubject(in.subject), jetstream.WithPurgeSequence(floor)); err != nil {
		return fmt.Errorf("channel %s: purging below %d: %w", in.subject, floor, err)
	}
	in.purged = floor - 1
	return nil
}

// Floor returns the stream sequence below which the channel's messages
// are purged (or are to be purged).
func (in *JetStreamInput) Floor() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.floorLocked()
}

// CheckpointComplete implements CheckpointObserver: the ranges of
// checkpoint id are kept (it is now the one a restore starts from), those
// of older checkpoints are released.
func (in *JetStreamInput) CheckpointComplete(id int64) {
	in.mu.Lock()
	for k := range in.holds {
		if k < id {
			delete(in.holds, k)
		}
	}
	for k := range in.captures {
		if k < id {
			delete(in.captures, k)
		}
	}
	in.mu.Unlock()
	signal(in.purgeReq)
}

// CheckpointAborted implements CheckpointObserver: the ranges of
// checkpoint id are released.
func (in *JetStreamInput) CheckpointAborted(id int64) {
	in.mu.Lock()
	delete(in.holds, id)
	delete(in.captures, id)
	in.mu.Unlock()
	signal(in.purgeReq)
}

// CheckpointObserver is an input channel that keeps data for checkpoints
// (the consumer side of a JetStream channel holds the ranges that
// checkpoints refer to): the subtask tells it how they end.
type CheckpointObserver interface {
	CheckpointComplete(id int64)
	CheckpointAborted(id int64)
}

// RangeOvertaker is an output channel whose overtaken data stays in a
// stream: an unaligned checkpoint records it as a range (see
// JetStreamOutput.OvertakeRange) rather than copying it (Overtake).
type RangeOvertaker interface {
	OvertakeRange(m Message) (*checkpoint.ChannelRange, error)
}

// RangeCapturer is an input channel whose messages stay in a stream: an
// unaligned checkpoint that captures it records what it hands out between
// StartCapture and EndCapture as a range instead of copying it.
type RangeCapturer interface {
	StartCapture(id int64)
	EndCapture(id int64) *checkpoint.ChannelRange
}

// CheckRange reports whether the messages of r are still in their stream:
// its first and last messages are there, on r's subject. It reads two
// messages, not the range: a restore that chooses a checkpoint checks each
// of its ranges, and ReadRange checks every message when it replays them.
func CheckRange(ctx context.Context, js jetstream.JetStream, r checkpoint.ChannelRange) error {
	what := fmt.Sprintf("messages %d-%d of %s in stream %s", r.First, r.Last, r.Subject, r.Stream)
	if r.First == 0 || r.Last < r.First {
		return fmt.Errorf("channel state: bad range: %s", what)
	}
	st, err := js.Stream(ctx, r.Stream)
	if err != nil {
		return fmt.Errorf("channel state: %s are lost: %w", what, err)
	}
	for _, seq := range []uint64{r.First, r.Last} {
		raw, err := st.GetMsg(ctx, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("channel state: %s are lost: message %d is gone", what, seq)
		case err != nil:
			return fmt.Errorf("channel state: reading %s: %w", what, err)
		case raw.Subject != r.Subject:
			return fmt.Errorf("channel state: %s are lost: message %d is on %s", what, seq, raw.Subject)
		}
	}
	return nil
}

// ReadRange reads the data batches of a range back from its stream, in
// channel order. A range the stream no longer holds in full (purged, or
// the stream is gone) is an error that names it.
func ReadRange(ctx context.Context, js jetstream.JetStream, r checkpoint.ChannelRange) ([][]byte, error) {
	what := fmt.Sprintf("messages %d-%d of %s in stream %s", r.First, r.Last, r.Subject, r.Stream)
	if r.First == 0 || r.Last < r.First {
		return nil, fmt.Errorf("channel state: bad range: %s", what)
	}
	st, err := js.Stream(ctx, r.Stream)
	if err != nil {
		return nil, fmt.Errorf("channel state: %s are lost: %w", what, err)
	}
	var out [][]byte
	var bytes int64
	var chanSeq uint64
	for seq := r.First; ; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(r.Subject))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil, fmt.Errorf("channel state: %s are lost: the stream has none from %d on", what, seq)
			}
			return nil, fmt.Errorf("channel state: reading %s: %w", what, err)
		}
		if seq == r.First && raw.Sequence != r.First || raw.Sequence > r.Last {
			return nil, fmt.Errorf("channel state: %s are lost: message %d is gone", what, seq)
		}
		m, cs, err := decodeFrame(raw.Data)
		if err != nil {
			return nil, fmt.Errorf("channel state: %s: message %d: %w", what, raw.Sequence, err)
		}
		if chanSeq != 0 && cs != chanSeq+1 {
			return nil, fmt.Errorf("channel state: %s: message %d of the channel follows %d", what, cs, chanSeq)
		}
		chanSeq = cs
		if m.Kind == KindData {
			out = append(out, m.Data)
			bytes += int64(len(m.Data))
		}
		if raw.Sequence == r.Last {
			break
		}
		seq = raw.Sequence + 1
	}
	if len(out) != r.Messages || bytes != r.Bytes {
		return nil, fmt.Errorf("channel state: %s hold %d batches of %d bytes, want %d of %d", what, len(out), bytes, r.Messages, r.Bytes)
	}
	return out, nil
}

// TryRecv implements InputChannel.
func (in *JetStreamInput) TryRecv() (Message, bool) {
	in.mu.Lock()
	if len(in.q) == 0 {
		in.mu.Unlock()
		return Message{}, false
	}
	m, credit := in.pop()
	in.mu.Unlock()
	in.sendCredit(credit)
	return m, true
}

// TryRecvPriority implements InputChannel.
func (in *JetStreamInput) TryRecvPriority(take func(Message) bool) (Message, bool) {
	in.mu.Lock()
	if len(in.q) == 0 || !take(in.q[0].m) {
		in.mu.Unlock()
		return Message{}, false
	}
	m, credit := in.pop()
	in.mu.Unlock()
	in.sendCredit(credit)
	return m, true
}

// Notify implements InputChannel.
func (in *JetStreamInput) Notify(wake chan<- struct{}) {
	in.mu.Lock()
	in.wake = wake
	in.mu.Unlock()
}

// NotifyPriority implements InputChannel.
func (in *JetStreamInput) NotifyPriority(prio chan<- struct{}) {
	in.mu.Lock()
	in.prio = prio
	in.mu.Unlock()
}

// failLocked breaks the channel with err; in.mu is held.
func (in *JetStreamInput) failLocked(err error) {
	in.err = err
	in.broken.Store(true)
}

// Err implements FailingChannel: the first broken frame or gap in the
// channel's sequence. It costs one atomic load while the channel is whole,
// since the gate asks on every message.
func (in *JetStreamInput) Err() error {
	if !in.broken.Load() {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

// Len is the number of received messages not handed out yet.
func (in *JetStreamInput) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.q)
}

// consumerInactive is how long a channel's consumer may go without a pull
// before the server removes it: far longer than any pause of a live
// subtask (a worker not heard from for seconds is declared lost and its
// attempt restarted under new consumer names).
const consumerInactive = 10 * time.Minute

// Close implements InputChannel: it stops receiving and removes the
// channel's stream consumer. The removal is not waited for: when the
// cluster cannot answer now (a NATS node lost), waiting would hold the
// attempt's teardown, and with it the restart, for the request's timeout
// per channel; a consumer the removal misses goes after consumerInactive.
func (in *JetStreamInput) Close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	in.q = nil
	in.mu.Unlock()
	signal(in.purgeReq)
	if in.cc != nil {
		in.cc.Stop()
	}
	if in.sub != nil {
		_ = in.sub.Unsubscribe()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = in.x.stream.DeleteConsumer(ctx, in.consumer)
	}()
}
