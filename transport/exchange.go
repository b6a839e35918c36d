package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
