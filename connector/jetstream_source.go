package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
)

// jsSourceConfig is the configuration of the "jetstream" source.
type jsSourceConfig struct {
	jsConn
	Stream          string `json:"stream"`          // required
	Subject         string `json:"subject"`         // filter subject; "" = the whole stream
	Key             string `json:"key"`             // "header" (default), "subject" or "none"
	KeyHeader       string `json:"keyHeader"`       // default Wstream-Key
	Timestamp       string `json:"timestamp"`       // "stream" (default) or "header"
	TimestampHeader string `json:"timestampHeader"` // default Wstream-Timestamp
	WatermarkDelay  int64  `json:"watermarkDelay"`
	Bounded         bool   `json:"bounded"` // stop at the last matching message at open
}

// Timing of Next: it waits at most jsPollWait for the first message of a
// batch (so that checkpoint triggers reach an idle source promptly) and at
// most jsLinger for each further one.
const (
	jsPollWait = 100 * time.Millisecond
	jsLinger   = time.Millisecond
)

func parseJSSourceConfig(raw json.RawMessage) (jsSourceConfig, error) {
	const name = "jetstream"
	c := jsSourceConfig{Key: "header", KeyHeader: jsKeyHeader, Timestamp: "stream", TimestampHeader: jsTimestampHeader}
	if err := decodeConfig(name, raw, &c); err != nil {
		return c, err
	}
	if err := c.jsConn.check(name); err != nil {
		return c, err
	}
	if err := checkStreamName(name, "stream", c.Stream); err != nil {
		return c, err
	}
	if c.Subject != "" && !validSubject(c.Subject, true) {
		return c, &ConfigError{Connector: name, Field: "subject", Message: fmt.Sprintf("%q is not a subject filter", c.Subject)}
	}
	switch c.Key {
	case "header", "subject", "none":
	default:
		return c, &ConfigError{Connector: name, Field: "key", Message: fmt.Sprintf("%q must be \"header\", \"subject\" or \"none\"", c.Key)}
	}
	switch c.Timestamp {
	case "stream", "header":
	default:
		return c, &ConfigError{Connector: name, Field: "timestamp", Message: fmt.Sprintf("%q must be \"stream\" or \"header\"", c.Timestamp)}
	}
	if c.Key == "header" && c.KeyHeader == "" {
		return c, &ConfigError{Connector: name, Field: "keyHeader", Message: "must not be empty (use key \"none\" for records without keys)"}
	}
	if c.Timestamp == "header" && c.TimestampHeader == "" {
		return c, &ConfigError{Connector: name, Field: "timestampHeader", Message: "must not be empty"}
	}
	if err := checkRange(name, "watermarkDelay", c.WatermarkDelay, 0, maxGenSpan); err != nil {
		return c, err
	}
	return c, nil
}

// jsSource is the "jetstream" source. Subtask s of p reads the stream (or
// the messages matching the filter subject) in sequence order with an
// ordered consumer of its own and emits the messages whose stream sequence
// is ≡ s (mod p): the subtasks' shares are disjoint and together hold every
// message once. The position is the stream sequence, so the offset
// machinery of gen and file (layouts, rescale.go) applies with the
// sequence as the index; sequences without a matching message simply have
// nothing to emit.
type jsSource struct {
	cfg  jsSourceConfig
	dial Dialer // the cluster's server, when cfg names no url
	what string // error prefix: "connector jetstream: source STREAM"

	open          bool
	subtask, step int64
	pos           int64 // next stream sequence to handle: every one below is handled
	maxTs         int64
	// After a Seek to a rescaled offset: what the subtasks before the
	// rescaling emitted in this subtask's class, and its largest gap.
	prior  layout
	gapsHi int64
	// Bounded: the last sequence to read (0: an empty stream).
	hasEnd bool
	end    int64

	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	msgs   *msgPump
}

var _ Rewindable = (*jsSource)(nil)

func (c jsSourceConfig) Connector() string { return "jetstream" }

// Reach lists the connection fields set: a server and its credentials.
func (c jsSourceConfig) Reach() []Reach { return c.jsConn.reach() }

func (c jsSourceConfig) source() (Source, error) {
	return &jsSource{cfg: c, what: "connector jetstream: source " + c.Stream}, nil
}

func (s *jsSource) Open(ctx context.Context, subtask, parallelism int) error {
	if err := checkSubtask(s.what, subtask, parallelism); err != nil {
		return err
	}
	if s.open {
		return fmt.Errorf("%s: open: already open", s.what)
	}
	nc, js, err := s.cfg.jsConn.connect(s.dial, s.what, fmt.Sprintf("wstream jetstream source %s %d/%d", s.cfg.Stream, subtask, parallelism))
	if err != nil {
		return err
	}
	actx, cancel := apiContext(ctx)
	defer cancel()
	st, err := js.Stream(actx, s.cfg.Stream)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%s: open: %w", s.what, err)
	}
	s.nc, s.js, s.stream = nc, js, st
	s.subtask, s.step = int64(subtask), int64(parallelism)
	s.pos, s.maxTs = 1, abi.MinWatermark
	s.prior, s.gapsHi = layout{}, 0
	s.hasEnd, s.end = false, 0
	s.cons, s.msgs = nil, nil
	if s.cfg.Bounded {
		end, err := s.lastMatching(ctx)
		if err != nil {
			nc.Close()
			return fmt.Errorf("%s: open: the last message: %w", s.what, err)
		}
		s.hasEnd, s.end = true, end
	}
	s.open = true
	return nil
}

// lastMatching is the stream sequence of the last message that matches the
// filter subject (the whole stream without one), 0 when there is none.
func (s *jsSource) lastMatching(ctx context.Context) (int64, error) {
	subject := s.cfg.Subject
	if subject == "" {
		subject = ">"
	}
	actx, cancel := apiContext(ctx)
	defer cancel()
	m, err := s.stream.GetLastMsgForSubject(actx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return int64(m.Sequence), nil
}

// finished reports whether a bounded source has handled its last sequence.
func (s *jsSource) finished() bool { return s.hasEnd && s.pos > s.end }

// subscribe starts the ordered consumer at the current position.
func (s *jsSource) subscribe(ctx context.Context) error {
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   uint64(max(s.pos, 1)),
	}
	if s.cfg.Subject != "" {
		cfg.FilterSubjects = []string{s.cfg.Subject}
	}
	actx, cancel := apiContext(ctx)
	defer cancel()
	cons, err := s.js.OrderedConsumer(actx, s.cfg.Stream, cfg)
	if err != nil {
		return fmt.Errorf("%s: consumer from sequence %d: %w", s.what, cfg.OptStartSeq, err)
	}
	msgs, err := cons.Messages(jetstream.PullHeartbeat(jsPullHeartbeat))
	if err != nil {
		return fmt.Errorf("%s: consumer from sequence %d: %w", s.what, cfg.OptStartSeq, err)
	}
	s.cons, s.msgs = cons, startPump(msgs)
	return nil
}

// unsubscribe stops the ordered consumer and deletes it on the server.
func (s *jsSource) unsubscribe() {
	if s.msgs == nil {
		return
	}
	s.msgs.stop()
	if info := s.cons.CachedInfo(); info != nil && s.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.js.DeleteConsumer(ctx, s.cfg.Stream, info.Name)
		cancel()
	}
	s.cons, s.msgs = nil, nil
}

// mine reports whether the message at seq is this subtask's to emit: its
// class, and not emitted before a rescaling.
func (s *jsSource) mine(seq int64) bool {
	if seq%s.step != s.subtask {
		return false
	}
	if seq < s.gapsHi && seq < s.prior.gaps[s.prior.gapIndex(seq)] {
		return false
	}
	return true
}

func (s *jsSource) watermark() int64 { return watermark(s.maxTs, s.cfg.WatermarkDelay) }

func (s *jsSource) Next(ctx context.Context, b *abi.Builder, limit int) (int64, bool, error) {
	if !s.open {
		return abi.MinWatermark, false, fmt.Errorf("%s: next: %w", s.what, errNotOpen)
	}
	if limit < 1 {
		return s.watermark(), false, fmt.Errorf("%s: next: max %d must be ≥ 1", s.what, limit)
	}
	if err := ctx.Err(); err != nil {
		return s.watermark(), false, err
	}
	if s.finished() {
		return s.watermark(), true, nil
	}
	if s.msgs == nil {
		if err := s.subscribe(ctx); err != nil {
			return s.watermark(), false, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, jsPollWait)
	defer cancel()
	maxTs := s.maxTs
	defer func() { s.maxTs = maxTs }()
	delivered := false
	for n := 0; n < limit; {
		var (
			m   jetstream.Msg
			err error
		)
		if !delivered {
			m, err = s.msgs.next(wctx, 0)
		} else {
			m, err = s.msgs.next(ctx, jsLinger)
		}
		if err != nil {
			if ctx.Err() != nil {
				return watermark(maxTs, s.cfg.WatermarkDelay), false, ctx.Err()
			}
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return watermark(maxTs, s.cfg.WatermarkDelay), false, fmt.Errorf("%s: next: %w", s.what, err)
		}
		delivered = true
		meta, err := m.Metadata()
		if err != nil {
			return watermark(maxTs, s.cfg.WatermarkDelay), false, fmt.Errorf("%s: next: %w", s.what, err)
		}
		seq := int64(meta.Sequence.Stream)
		if seq < s.pos {
			continue // delivered again after a consumer reset
		}
		if s.hasEnd && seq > s.end {
			s.pos = s.end + 1
			break
		}
		s.pos = seq + 1
		if s.mine(seq) {
			ts, err := s.timestamp(m, meta)
			if err != nil {
				return watermark(maxTs, s.cfg.WatermarkDelay), false, err
			}
			b.Add(0, ts, s.key(m), m.Data())
			maxTs = max(maxTs, ts)
			n++
		}
		if s.hasEnd && meta.NumPending == 0 {
			// Nothing matches after seq now, so nothing up to the end
			// (older than the open) is left either.
			s.pos = max(s.pos, s.end+1)
		}
		if s.finished() {
			break
		}
	}
	if !delivered && s.hasEnd && !s.finished() {
		// Nothing came: the messages up to the end may have been deleted
		// or expired since the open.
		last, err := s.lastMatching(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return watermark(maxTs, s.cfg.WatermarkDelay), false, ctx.Err()
			}
			return watermark(maxTs, s.cfg.WatermarkDelay), false, fmt.Errorf("%s: next: the last message: %w", s.what, err)
		}
		if last < s.pos {
			s.pos = s.end + 1
		}
	}
	return watermark(maxTs, s.cfg.WatermarkDelay), s.finished(), nil
}

// key is a message's record key by the configured rule.
func (s *jsSource) key(m jetstream.Msg) []byte {
	switch s.cfg.Key {
	case "header":
		if h := m.Headers(); h != nil {
			return []byte(h.Get(s.cfg.KeyHeader))
		}
		return nil
	case "subject":
		subj := m.Subject()
		return []byte(subj[strings.LastIndexByte(subj, '.')+1:])
	}
	return nil
}

// timestamp is a message's record timestamp: the header's decimal
// milliseconds, or the time the stream stored it.
func (s *jsSource) timestamp(m jetstream.Msg, meta *jetstream.MsgMetadata) (int64, error) {
	if s.cfg.Timestamp == "header" {
		if h := m.Headers(); h != nil {
			if v := h.Get(s.cfg.TimestampHeader); v != "" {
				ts, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: message %d (subject %s): header %s: %q is not an integer of milliseconds",
						s.what, meta.Sequence.Stream, m.Subject(), s.cfg.TimestampHeader, v)
				}
				return ts, nil
			}
		}
	}
	return meta.Timestamp.UnixMilli(), nil
}

// jsOffset is the "jetstream" source's offset: the first stream sequence
// of the subtask's class not handled yet, the largest timestamp emitted,
// the stream, and for a bounded source its last sequence. A rescaled
// offset also has Period and Gaps, as gen's (see rescale.go).
type jsOffset struct {
	offsetHeader
	Stream string  `json:"stream"`
	Next   int64   `json:"next"`
	MaxTs  int64   `json:"maxTs"`
	End    *int64  `json:"end,omitempty"`
	Period int64   `json:"period,omitempty"`
	Gaps   []int64 `json:"gaps,omitempty"`
}

// layout checks the offset and returns what its subtask has handled.
func (o *jsOffset) layout() (layout, error) {
	if o.End != nil && *o.End < 0 {
		return layout{}, fmt.Errorf("end sequence %d is negative", *o.End)
	}
	return offsetLayout(o.offsetHeader, o.Next, o.Period, o.Gaps, "sequence", "sequence")
}

// Offset returns the subtask's position: what it has handled of its class,
// as a layout, the largest timestamp it emitted and its end.
func (s *jsSource) Offset() ([]byte, error) {
	if !s.open {
		return nil, fmt.Errorf("%s: offset: %w", s.what, errNotOpen)
	}
	l := s.prior
	if l.gaps == nil {
		l = layout{subtask: s.subtask, parallelism: s.step, period: s.step, gaps: []int64{s.subtask}}
	}
	l = l.advance(s.pos).reduce()
	o := jsOffset{
		offsetHeader: offsetHeader{Version: offsetVersion, Kind: "jetstream", Subtask: int(s.subtask), Parallelism: int(s.step)},
		Stream:       s.cfg.Stream,
		Next:         l.minGap(),
		MaxTs:        s.maxTs,
	}
	if s.hasEnd {
		end := s.end
		o.End = &end
	}
	if len(l.gaps) > 1 {
		o.Period, o.Gaps = l.period, l.gaps
	}
	return json.Marshal(o)
}

// Seek continues after the position of offset: the ordered consumer
// restarts at its first unhandled sequence. A bounded source keeps the end
// the offset carries, so a restored run reads the same messages as one
// without a failure.
func (s *jsSource) Seek(offset []byte) error {
	if !s.open {
		return fmt.Errorf("%s: seek: %w", s.what, errNotOpen)
	}
	var o jsOffset
	if err := decodeOffset(s.what, "jetstream", int(s.subtask), int(s.step), offset, &o); err != nil {
		return err
	}
	if o.Stream != s.cfg.Stream {
		return fmt.Errorf("%s: seek: the offset is of stream %s: restore with the stream the offset was taken from", s.what, o.Stream)
	}
	l, err := o.layout()
	if err != nil {
		return fmt.Errorf("%s: seek: %v", s.what, err)
	}
	s.unsubscribe()
	s.maxTs = o.MaxTs
	if len(l.gaps) > 1 {
		s.prior, s.gapsHi = l, l.maxGap()
	} else {
		s.prior, s.gapsHi = layout{}, 0
	}
	s.pos = max(l.minGap(), 1)
	if s.cfg.Bounded && o.End != nil {
		s.hasEnd, s.end = true, *o.End
	}
	return nil
}

func (s *jsSource) Close() error {
	if !s.open {
		return nil
	}
	s.open = false
	s.unsubscribe()
	s.nc.Close()
	return nil
}

// rescaleJSOffsets is RescaleOffsets for the "jetstream" source: the same
// contract, with stream sequences as the indices. The new subtasks keep
// the largest end of the old offsets, so a bounded source still ends.
func rescaleJSOffsets(old [][]byte, newSubtask, newParallelism int) ([]byte, error) {
	const what = "connector jetstream: rescale"
	p := len(old)
	if err := checkRescaleTarget(what, p, newSubtask, newParallelism); err != nil {
		return nil, err
	}
	layouts := make([]layout, p)
	maxTs := int64(abi.MinWatermark)
	var (
		stream string
		end    *int64
	)
	for s, raw := range old {
		if err := checkOldOffset(what, "jetstream", raw, s, p); err != nil {
			return nil, err
		}
		var o jsOffset
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("%s: malformed jetstream offset of subtask %d %q: %v", what, s, truncate(raw), err)
		}
		if s == 0 {
			stream = o.Stream
		} else if o.Stream != stream {
			return nil, fmt.Errorf("%s: the offsets are of different streams: %s (subtask 0) and %s (subtask %d)", what, stream, o.Stream, s)
		}
		l, err := o.layout()
		if err != nil {
			return nil, fmt.Errorf("%s: offset of subtask %d: %v", what, s, err)
		}
		layouts[s] = l
		maxTs = max(maxTs, o.MaxTs)
		if o.End != nil && (end == nil || *o.End > *end) {
			e := *o.End
			end = &e
		}
	}
	l, err := combine(layouts, int64(newSubtask), int64(newParallelism))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	o := jsOffset{
		offsetHeader: offsetHeader{Version: offsetVersion, Kind: "jetstream", Subtask: newSubtask, Parallelism: newParallelism},
		Stream:       stream, Next: l.minGap(), MaxTs: maxTs, End: end,
	}
	if len(l.gaps) > 1 {
		o.Period, o.Gaps = l.period, l.gaps
	}
	return json.Marshal(o)
}

// SetDialer gives the source the cluster's own NATS server, which it uses when
// its configuration names no url.
func (s *jsSource) SetDialer(d Dialer) { s.dial = d }
