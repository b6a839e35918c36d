package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
)

// Data exchange between workers over NATS JetStream.
//
// Every job whose subtasks run on more than one worker has one stream,
// DataStream(job), created when the first attempt that needs it is deployed,
// kept across attempts and deleted when the job ends. A channel between subtask UP of one chain and subtask DOWN of the
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
// marker (id i64). The consumer drops a repeated sequence (a redelivery) but
// fails its gate on a gap (a lost write or a failed publish), and the
// producer's Send returns any failed publish of its window: the attempt
// restarts from its latest checkpoint rather than lose records.
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
//
// Retention: the stream keeps a message until the consumer of its channel
// purges it (Limits retention, in files, so that it survives a restart of
// the server). The consumer purges its channel's subject below a floor as
// it hands messages out, in the background. Instead of copying what a
// barrier overtook, OvertakeRange returns it as a range of the stream's
// sequences: the consumer learns from the barrier's request where that
// range starts and holds the floor there, under the checkpoint's id, until a
// later checkpoint completes (CheckpointComplete) or the checkpoint is
// aborted (CheckpointAborted). ReadRange reads a range back on restore.

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

// DataStreamConfig is the configuration of a job's data stream: Limits
// retention (a message stays until its channel's consumer purges it, so
// that checkpoints can refer to ranges of it) in files (ranges survive a
// restart of the server), with replicas copies on a cluster.
func DataStreamConfig(job string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Replicas:    replicas,
		Name:        DataStream(job),
		Description: "wstream data exchange of job " + job,
		Subjects:    []string{DataSubjects(job)},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
	}
}

// CreateDataStream creates the data stream of a job unless it exists: the
// stream lives as long as the job, across its attempts, and holds the
// ranges its checkpoints refer to. A stream of another configuration (it
// cannot hold ranges) is replaced.
func CreateDataStream(ctx context.Context, js jetstream.JetStream, job string, replicas int) error {
	cfg := DataStreamConfig(job, replicas)
	st, err := js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		have := st.CachedInfo().Config
		if have.Retention == cfg.Retention && have.Storage == cfg.Storage && slices.Equal(have.Subjects, cfg.Subjects) {
			if max(have.Replicas, 1) == max(cfg.Replicas, 1) {
				return nil
			}
			// Its ranges stay: the stream changes its replica count in place.
			have.Replicas = cfg.Replicas
			if _, err := js.UpdateStream(ctx, have); err != nil {
				return fmt.Errorf("data stream %s: %w", cfg.Name, ReplicasError(err, cfg.Replicas))
			}
			return nil
		}
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("replacing data stream %s: %w", cfg.Name, err)
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("looking up data stream %s: %w", cfg.Name, err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("creating data stream %s: %w", cfg.Name, ReplicasError(err, cfg.Replicas))
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

// PullHeartbeat is the idle heartbeat a channel's consumer asks the server
// for with each pull request. A pull request parked on a server that was
// lost or paused (or on a consumer leader that moved) is noticed after two
// missed heartbeats, about a second, and pulled again, instead of at the
// request's 30 s expiry. nats.go accepts 500 ms at the least.
const PullHeartbeat = 500 * time.Millisecond

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
	// reconnects is the connection's reconnect count when the exchange
	// was made.
	reconnects uint64
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
	x := &Exchange{cfg: cfg, js: js, stream: st, reconnects: cfg.NATS.Stats().Reconnects}
	x.ctx, x.cancel = context.WithCancel(ctx)
	return x, nil
}

// Close makes every wait of the exchange's channels end.
func (x *Exchange) Close() { x.cancel() }

// ErrDisconnected is returned by the producer side of a channel once the
// connection to NATS was lost since the exchange was made: credits and
// priority requests of the outage are lost, publishes may have been
// repeated, and the server may have lost what it had not written out.
// The attempt restarts from its latest checkpoint instead.
var ErrDisconnected = errors.New("transport: the connection to NATS was lost during the attempt")

// connected returns ErrDisconnected once the connection has reconnected.
func (x *Exchange) connected() error {
	if x.cfg.NATS.Stats().Reconnects != x.reconnects {
		return fmt.Errorf("job %s attempt %d: %w", x.cfg.Job, x.cfg.Attempt, ErrDisconnected)
	}
	return nil
}

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
	// Send returns it rather than forget the message.
	failed error
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
			// consumer that skipped it): keep the error for Send.
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
		if err := o.x.connected(); err != nil {
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

// InFlight is the number of messages published on the channel that its
// consumer has not taken yet (at most the window).
func (o *JetStreamOutput) InFlight() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int64(o.seq - o.taken)
}

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
	signal(in.purgeReq)
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
