package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Data exchange between workers over NATS JetStream.
//
// Every job whose subtasks run on more than one worker has one stream,
// DataStream(job), created when an attempt is deployed and deleted when the
// job ends. A channel between subtask UP of one chain and subtask DOWN of the
// next, on plan edge EDGE of attempt ATT, uses three subjects:
//
//	wstream.data.JOB.ATT.EDGE.UP.DOWN  frames in the stream: data, watermarks,
//	                                   end, aligned barriers, in order
//	wstream.flow.JOB.ATT.EDGE.UP.DOWN  credits, consumer → producer (core NATS)
//	wstream.prio.JOB.ATT.EDGE.UP.DOWN  barriers and cancel markers that
//	                                   overtake the data, and credit probes,
//	                                   producer → consumer (core NATS requests)
//
// A frame is one kind byte, the channel sequence number (u64, little endian,
// 1 for the channel's first message) and the kind's payload: an abi batch,
// a watermark (i64), a barrier (id i64, kind u8, timestamp i64) or a cancel
// marker (id i64).
//
// Flow control: a producer has at most Window messages that the consumer has
// not taken yet (published or not acknowledged by the stream); a full window
// blocks Send. The consumer reports its position (the sequence of the last
// message it handed out) on the flow subject as it reads; a producer that
// waits asks for it again now and then, so a lost credit costs a delay, never
// a deadlock. The producer keeps the messages of its window: what a barrier
// overtakes is returned from Overtake from there.
//
// Overtaking (unaligned checkpoints): the producer sends the barrier as a
// request on the priority subject; the consumer puts it ahead of every
// message it has not handed out yet and answers with its position P. The
// producer's window holds every data message after P, and the consumer will
// deliver exactly those after the barrier: Overtake returns them, they are
// the channel's state, and the consumer does not capture them again.

// DataStream is the name of the stream that carries a job's data exchange.
func DataStream(job string) string { return "wstream-data-" + job }

// DataSubjects is the subject filter of a job's data stream.
func DataSubjects(job string) string { return "wstream.data." + job + ".>" }

func channelSuffix(job string, attempt, edge, up, down int) string {
	return job + "." + strconv.Itoa(attempt) + "." + strconv.Itoa(edge) + "." + strconv.Itoa(up) + "." + strconv.Itoa(down)
}

// DataSubject is the stream subject of one channel of one attempt.
func DataSubject(job string, attempt, edge, up, down int) string {
	return "wstream.data." + channelSuffix(job, attempt, edge, up, down)
}

// FlowSubject is where the consumer of a channel sends its credits.
func FlowSubject(job string, attempt, edge, up, down int) string {
	return "wstream.flow." + channelSuffix(job, attempt, edge, up, down)
}

// PrioritySubject is where a channel's producer sends what overtakes the
// data, and its credit probes.
func PrioritySubject(job string, attempt, edge, up, down int) string {
	return "wstream.prio." + channelSuffix(job, attempt, edge, up, down)
}

// CreateDataStream creates (or resets) the data stream of a job: a work
// queue in memory, so a message is gone once its consumer acknowledged it.
func CreateDataStream(ctx context.Context, js jetstream.JetStream, job string) error {
	name := DataStream(job)
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("removing data stream %s: %w", name, err)
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "wstream data exchange of job " + job,
		Subjects:    []string{DataSubjects(job)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.MemoryStorage,
		Discard:     jetstream.DiscardNew,
	})
	if err != nil {
		return fmt.Errorf("creating data stream %s: %w", name, err)
	}
	return nil
}

// DeleteDataStream removes a job's data stream; a stream that does not
// exist is no error.
func DeleteDataStream(ctx context.Context, js jetstream.JetStream, job string) error {
	if err := js.DeleteStream(ctx, DataStream(job)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("removing data stream %s: %w", DataStream(job), err)
	}
	return nil
}

// DefaultWindow is the number of messages a channel between workers holds
// before its producer blocks.
const DefaultWindow = 16

// ExchangeConfig configures an Exchange.
type ExchangeConfig struct {
	NATS    *nats.Conn
	Job     string
	Attempt int
	// Window is the most messages in flight per channel (DefaultWindow).
	Window int
	// Probe is how long a blocked producer waits for a credit before it
	// asks the consumer for its position (default 200ms).
	Probe time.Duration
	// OvertakeTimeout bounds how long Overtake waits for the consumer to
	// take a barrier, including a consumer that has not subscribed yet
	// (default 30s).
	OvertakeTimeout time.Duration
}

// Exchange makes the JetStream channels of one attempt of one job on one
// worker.
type Exchange struct {
	cfg    ExchangeConfig
	js     jetstream.JetStream
	stream jetstream.Stream
	ctx    context.Context
	cancel context.CancelFunc
}

// NewExchange opens the job's data stream, which must exist. The exchange's
// channels stop waiting when ctx is done or the exchange is closed.
func NewExchange(ctx context.Context, cfg ExchangeConfig) (*Exchange, error) {
	if cfg.NATS == nil {
		return nil, errors.New("exchange: no NATS connection")
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Probe <= 0 {
		cfg.Probe = 200 * time.Millisecond
	}
	if cfg.OvertakeTimeout <= 0 {
		cfg.OvertakeTimeout = 30 * time.Second
	}
	js, err := jetstream.New(cfg.NATS,
		jetstream.WithPublishAsyncMaxPending(1<<16),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := js.Stream(octx, DataStream(cfg.Job))
	if err != nil {
		return nil, fmt.Errorf("job %s: opening data stream %s: %w", cfg.Job, DataStream(cfg.Job), err)
	}
	x := &Exchange{cfg: cfg, js: js, stream: st}
	x.ctx, x.cancel = context.WithCancel(ctx)
	return x, nil
}

// Close makes every wait of the exchange's channels end.
func (x *Exchange) Close() { x.cancel() }

// frame kinds reuse Kind; a probe asks a consumer for its position.
const kindProbe Kind = 0x50

const frameHeader = 9

// framePool recycles the frames of data messages once the stream has
// stored them: a channel moves tens of KiB per message.
var framePool sync.Pool

func encodeFrame(m Message, seq uint64) []byte {
	n := frameHeader
	switch m.Kind {
	case KindData:
		n += len(m.Data)
	case KindWatermark, KindCancel:
		n += 8
	case KindBarrier:
		n += 17
	}
	var b []byte
	if m.Kind == KindData {
		if p, ok := framePool.Get().(*[]byte); ok && cap(*p) >= n {
			b = (*p)[:frameHeader]
		}
	}
	if b == nil {
		b = make([]byte, frameHeader, n)
	}
	b[0] = byte(m.Kind)
	binary.LittleEndian.PutUint64(b[1:], seq)
	switch m.Kind {
	case KindData:
		b = append(b, m.Data...)
	case KindWatermark:
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Watermark))
	case KindCancel:
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Checkpoint))
	case KindBarrier:
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Checkpoint))
		b = append(b, m.CheckpointKind)
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Timestamp))
	}
	return b
}

// decodeFrame parses a frame; a data message's Data aliases b.
func decodeFrame(b []byte) (Message, uint64, error) {
	if len(b) < frameHeader {
		return Message{}, 0, fmt.Errorf("frame of %d bytes is shorter than its header", len(b))
	}
	m := Message{Kind: Kind(b[0])}
	seq := binary.LittleEndian.Uint64(b[1:])
	p := b[frameHeader:]
	need := func(n int) error {
		if len(p) != n {
			return fmt.Errorf("%s frame has %d payload bytes, want %d", m.Kind, len(p), n)
		}
		return nil
	}
	switch m.Kind {
	case KindData:
		m.Data = p
	case KindEnd:
		if err := need(0); err != nil {
			return m, 0, err
		}
	case KindWatermark:
		if err := need(8); err != nil {
			return m, 0, err
		}
		m.Watermark = int64(binary.LittleEndian.Uint64(p))
	case KindCancel:
		if err := need(8); err != nil {
			return m, 0, err
		}
		m.Checkpoint = int64(binary.LittleEndian.Uint64(p))
	case KindBarrier:
		if err := need(17); err != nil {
			return m, 0, err
		}
		m.Checkpoint = int64(binary.LittleEndian.Uint64(p))
		m.CheckpointKind = p[8]
		m.Timestamp = int64(binary.LittleEndian.Uint64(p[9:]))
	case kindProbe:
	default:
		return m, 0, fmt.Errorf("frame of unknown kind %d", b[0])
	}
	return m, seq, nil
}

// outEntry is a message of a producer's window.
type outEntry struct {
	seq   uint64
	data  []byte // KindData only
	frame []byte // what was published, recycled once stored (KindData)
	fut   jetstream.PubAckFuture
	// stored: the stream acknowledged the publish.
	stored bool
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
		k := 0
		for k < len(o.win) && o.win[k].seq <= pos {
			o.stored(&o.win[k])
			k++
		}
		clear(o.win[:k])
		o.win = o.win[k:]
	}
	o.mu.Unlock()
	if moved {
		select {
		case o.space <- struct{}{}:
		default:
		}
	}
}

// Send implements OutputChannel.
func (o *JetStreamOutput) Send(ctx context.Context, m Message) error { return o.SendOr(ctx, m, nil) }

// SendOr implements OutputChannel. It returns once the stream has the
// message in flight; KindEnd also waits until the stream has stored every
// message of the channel.
func (o *JetStreamOutput) SendOr(ctx context.Context, m Message, intr <-chan struct{}) error {
	var probe *time.Timer
	defer func() {
		if probe != nil {
			probe.Stop()
		}
	}()
	for {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return ErrClosed
		}
		if err := o.checkStoredLocked(); err != nil {
			o.mu.Unlock()
			return err
		}
		if o.seq-o.taken < uint64(o.x.cfg.Window) {
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
				return fmt.Errorf("publishing on %s: %w", o.subject, err)
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
			if m.Kind == KindEnd {
				return o.waitStored(ctx)
			}
			return nil
		}
		o.mu.Unlock()
		if probe == nil {
			probe = time.NewTimer(o.x.cfg.Probe)
		}
		select {
		case <-o.space:
		case <-intr:
			return ErrInterrupted
		case <-ctx.Done():
			return ctx.Err()
		case <-o.x.ctx.Done():
			return o.x.ctx.Err()
		case <-probe.C:
			// The credits may have been lost: ask for the position; the
			// answer comes on the flow subject.
			_ = o.x.cfg.NATS.PublishRequest(o.priority, o.flow, encodeFrame(Message{Kind: kindProbe}, 0))
			probe.Reset(o.x.cfg.Probe)
		}
	}
}

// stored reports whether the stream has acknowledged e, and recycles its
// frame once it has; o.mu is held. A publish error is left for
// checkStoredLocked.
func (o *JetStreamOutput) stored(e *outEntry) bool {
	if !e.stored && e.fut != nil {
		select {
		case <-e.fut.Ok():
			e.stored = true
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

// waitStored waits until the stream acknowledged every message of the
// window that the consumer has not taken.
func (o *JetStreamOutput) waitStored(ctx context.Context) error {
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
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			return fmt.Errorf("publishing on %s (message %d): %w", o.subject, seq, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-o.x.ctx.Done():
			return o.x.ctx.Err()
		}
		o.mu.Lock()
		for k := range o.win {
			if o.win[k].seq == seq {
				o.win[k].stored = true
			}
		}
		o.mu.Unlock()
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
			return nil, o.x.ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("channel %s: the consumer did not take %s %d within %s: %w", o.subject, m.Kind, m.Checkpoint, o.x.cfg.OvertakeTimeout, err)
		}
		// No consumer yet (it is still being deployed), or a lost reply:
		// the consumer takes a repeated request only once.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-o.x.ctx.Done():
			return nil, o.x.ctx.Err()
		}
	}
	if len(reply.Data) < 8 {
		return nil, fmt.Errorf("channel %s: bad answer to %s %d", o.subject, m.Kind, m.Checkpoint)
	}
	pos := binary.LittleEndian.Uint64(reply.Data)
	if pos > last {
		return nil, fmt.Errorf("channel %s: the consumer is at message %d, past the %d sent", o.subject, pos, last)
	}
	o.credit(pos)
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

// Close releases the channel; a Send after it returns ErrClosed.
func (o *JetStreamOutput) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.win = nil
	o.mu.Unlock()
	return o.sub.Unsubscribe()
}

// Stats returns the messages and bytes (frames) published so far.
func (o *JetStreamOutput) Stats() (messages, bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.published, o.publishedSize
}

// inEntry is a message the consumer has received and not handed out.
type inEntry struct {
	m   Message
	seq uint64 // 0: a message that overtook the data
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
	credited                uint64
	creditEvery             uint64
	wake, prio              chan<- struct{}
	// overtook remembers the answers to priority requests, so that a
	// repeated request is answered again and not taken twice.
	overtook map[[2]int64]uint64
	cc       jetstream.ConsumeContext
	sub      *nats.Subscription
	closed   bool
	err      error
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
	}
	if err := in.start(); err != nil {
		return nil, err
	}
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
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("creating consumer %s of %s: %w", in.consumer, DataStream(x.cfg.Job), err)
	}
	cc, err := cons.Consume(in.onData, jetstream.PullMaxMessages(2*x.cfg.Window))
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
	in.mu.Lock()
	switch {
	case err != nil:
		if in.err == nil {
			in.err = fmt.Errorf("channel %s: %w", in.subject, err)
		}
		in.mu.Unlock()
		return
	case seq <= in.received:
		// Delivered again (an acknowledgement was lost).
		in.mu.Unlock()
		return
	case seq != in.received+1 && in.err == nil:
		in.err = fmt.Errorf("channel %s: message %d follows %d", in.subject, seq, in.received)
	}
	in.received = seq
	in.q = append(in.q, inEntry{m: m, seq: seq})
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
	}
	if in.pos > in.credited && (in.pos-in.credited >= in.creditEvery || len(in.q) == 0) {
		in.credited = in.pos
		return e.m, in.pos
	}
	return e.m, 0
}

func (in *JetStreamInput) sendCredit(pos uint64) {
	if pos > 0 {
		_ = in.x.cfg.NATS.Publish(in.flow, binary.LittleEndian.AppendUint64(nil, pos))
	}
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

// Err returns the first broken frame or gap in the channel's sequence.
func (in *JetStreamInput) Err() error {
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

// Close implements InputChannel: it stops receiving and removes the
// channel's stream consumer.
func (in *JetStreamInput) Close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	in.q = nil
	in.mu.Unlock()
	if in.cc != nil {
		in.cc.Stop()
	}
	if in.sub != nil {
		_ = in.sub.Unsubscribe()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = in.x.stream.DeleteConsumer(ctx, in.consumer)
}
