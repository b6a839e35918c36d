package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"

	"github.com/wstream/wstream/abi"
)

// genConfig is the configuration of the "gen" source. Pointer fields tell an
// explicit zero from an absent field where the default is not zero.
type genConfig struct {
	Count          int64   `json:"count"`          // records across all subtasks; 0 = unbounded
	Keys           *int64  `json:"keys"`           // distinct words; default 1000
	Words          *int64  `json:"words"`          // words per record; default 1
	Seed           *int64  `json:"seed"`           // default 1
	Rate           float64 `json:"rate"`           // records/s across the job; 0 = unlimited
	Interval       *int64  `json:"interval"`       // event ms between consecutive records; default 1
	Disorder       int64   `json:"disorder"`       // max ms of jitter added to ts
	WatermarkDelay *int64  `json:"watermarkDelay"` // default = disorder
	Start          int64   `json:"start"`          // ts of record 0
}

// Bounds on gen's configuration. maxGenSpan keeps start + i·interval + jitter
// far from int64 overflow for any realistic run (2^40 ms is about 35 years).
const (
	maxGenWords = 1024
	maxGenSpan  = 1 << 40
	maxGenStart = 1 << 62
)

// genParams is a resolved gen configuration.
type genParams struct {
	count    int64 // 0 = unbounded
	keys     uint64
	words    int
	seed     uint64 // mixed once, so that nearby seeds give unrelated streams
	rate     float64
	interval int64
	disorder int64
	delay    int64
	start    int64
}

func parseGenConfig(raw json.RawMessage) (genParams, error) {
	var c genConfig
	if err := decodeConfig("gen", raw, &c); err != nil {
		return genParams{}, err
	}
	p := genParams{count: c.Count, keys: 1000, words: 1, seed: mix64(1), rate: c.Rate,
		interval: 1, disorder: c.Disorder, start: c.Start}
	if err := checkMin("gen", "count", c.Count, 0); err != nil {
		return genParams{}, err
	}
	if c.Keys != nil {
		if err := checkMin("gen", "keys", *c.Keys, 1); err != nil {
			return genParams{}, err
		}
		p.keys = uint64(*c.Keys)
	}
	if c.Words != nil {
		if err := checkRange("gen", "words", *c.Words, 1, maxGenWords); err != nil {
			return genParams{}, err
		}
		p.words = int(*c.Words)
	}
	if c.Seed != nil {
		p.seed = mix64(uint64(*c.Seed))
	}
	if c.Rate < 0 {
		return genParams{}, &ConfigError{Connector: "gen", Field: "rate", Message: fmt.Sprintf("%g must be ≥ 0", c.Rate)}
	}
	if c.Interval != nil {
		if err := checkRange("gen", "interval", *c.Interval, 0, maxGenSpan); err != nil {
			return genParams{}, err
		}
		p.interval = *c.Interval
	}
	if err := checkRange("gen", "disorder", c.Disorder, 0, maxGenSpan); err != nil {
		return genParams{}, err
	}
	p.delay = c.Disorder
	if c.WatermarkDelay != nil {
		if err := checkRange("gen", "watermarkDelay", *c.WatermarkDelay, 0, maxGenSpan); err != nil {
			return genParams{}, err
		}
		p.delay = *c.WatermarkDelay
	}
	if err := checkRange("gen", "start", c.Start, -maxGenStart, maxGenStart); err != nil {
		return genParams{}, err
	}
	return p, nil
}

const golden = 0x9e3779b97f4a7c15 // 2^64/φ, splitmix64's increment

// mix64 is splitmix64's finaliser: a bijection on uint64 with good avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// jitterSalt separates the jitter stream from the word streams of a record.
const jitterSalt = 0x6a09e667f3bcc909

// genRecord appends the value of record i to buf[:0] and returns its
// timestamp, the value, and the length of its key (the value's first word).
// It is a pure function of (p, i): record i does not depend on earlier
// records, so any subtask can produce any record.
func genRecord(p *genParams, i int64, buf []byte) (ts int64, value []byte, keyLen int) {
	// splitmix64 evaluated at position i of the seeded stream, then once per
	// word (counter-based: no state carried between records).
	r := mix64(p.seed + uint64(i)*golden)
	buf = buf[:0]
	for j := range p.words {
		if j == 1 {
			keyLen = len(buf)
		}
		if j > 0 {
			buf = append(buf, ' ')
		}
		k, _ := bits.Mul64(mix64(r+uint64(j+1)*golden), p.keys) // uniform in [0, keys)
		buf = append(buf, 'w')
		buf = strconv.AppendUint(buf, k, 10)
	}
	if p.words == 1 {
		keyLen = len(buf)
	}
	ts = p.start + i*p.interval
	if p.disorder > 0 {
		jitter, _ := bits.Mul64(mix64(r^jitterSalt), uint64(p.disorder)+1)
		ts += int64(jitter)
	}
	return ts, buf, keyLen
}

// genSource is the "gen" source: a deterministic, optionally rate-limited
// stream of word records.
type genSource struct {
	p       genParams
	open    bool
	next    int64 // global index of this subtask's next record
	subtask int64
	step    int64 // parallelism
	maxTs   int64
	// After a Seek to a rescaled offset: what the subtasks before the
	// rescaling emitted in this subtask's class (see rescale.go), and the
	// largest of its gaps, above which nothing was emitted. gaps is nil
	// otherwise.
	prior  layout
	gapsHi int64
	val    []byte
	bucket *tokenBucket
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
}

func (p genParams) Connector() string { return "gen" }

// Reach is empty: gen makes its records up.
func (p genParams) Reach() []Reach { return nil }

func (p genParams) source() (Source, error) {
	return &genSource{p: p, now: time.Now, sleep: sleepCtx}, nil
}

func (g *genSource) Open(_ context.Context, subtask, parallelism int) error {
	if err := checkSubtask("connector gen", subtask, parallelism); err != nil {
		return err
	}
	g.open = true
	g.next = int64(subtask)
	g.subtask = int64(subtask)
	g.step = int64(parallelism)
	g.maxTs = abi.MinWatermark
	g.prior, g.gapsHi = layout{}, 0
	g.bucket = nil
	if g.p.rate > 0 {
		g.bucket = newTokenBucket(g.p.rate / float64(parallelism))
	}
	return nil
}

var errNotOpen = errors.New("not open")

func (g *genSource) Next(ctx context.Context, b *abi.Builder, limit int) (int64, bool, error) {
	if !g.open {
		return abi.MinWatermark, false, fmt.Errorf("connector gen: next: %w", errNotOpen)
	}
	if limit < 1 {
		return g.watermark(), false, fmt.Errorf("connector gen: next: max %d must be ≥ 1", limit)
	}
	if err := ctx.Err(); err != nil {
		return g.watermark(), false, err
	}
	n := int64(limit)
	if g.p.count > 0 {
		if g.next >= g.p.count {
			return g.watermark(), true, nil
		}
		n = min(n, (g.p.count-g.next+g.step-1)/g.step)
	}
	if g.bucket != nil {
		for {
			got, wait := g.bucket.take(g.now(), n)
			if got > 0 {
				n = got
				break
			}
			if err := g.sleep(ctx, wait); err != nil {
				return g.watermark(), false, err
			}
		}
	}
	maxTs := g.maxTs
	for range n {
		if g.p.count > 0 && g.next >= g.p.count {
			break // only after a rescale: skipped records made n too large
		}
		var ts int64
		var keyLen int
		ts, g.val, keyLen = genRecord(&g.p, g.next, g.val)
		b.Add(0, ts, g.val[:keyLen], g.val)
		maxTs = max(maxTs, ts)
		g.next += g.step
		if g.next < g.gapsHi {
			g.skipEmitted()
		}
	}
	g.maxTs = maxTs
	return g.watermark(), g.p.count > 0 && g.next >= g.p.count, nil
}

func (g *genSource) watermark() int64 { return watermark(g.maxTs, g.p.delay) }

// skipEmitted moves next past the indices that subtasks before a rescale
// already emitted: O(1) per index, and each skipped index is a record one
// of them emitted, so over the job the skips cost at most one step per
// record emitted before the rescale.
func (g *genSource) skipEmitted() {
	k := g.prior.gapIndex(g.next)
	for g.next < g.gapsHi && g.next < g.prior.gaps[k] {
		g.next += g.step
		if k++; k == len(g.prior.gaps) {
			k = 0
		}
	}
}

// genOffset is the "gen" source's offset: the global index of the
// subtask's next record and the largest timestamp emitted so far. A
// rescaled offset (RescaleOffsets) also has Period and Gaps: the layout of
// the records already emitted in the subtask's class (see rescale.go);
// Next is then its smallest gap.
type genOffset struct {
	offsetHeader
	Next   int64   `json:"next"`
	MaxTs  int64   `json:"maxTs"`
	Period int64   `json:"period,omitempty"`
	Gaps   []int64 `json:"gaps,omitempty"`
}

// layout checks the offset and returns what its subtask has emitted.
func (o *genOffset) layout() (layout, error) {
	return offsetLayout(o.offsetHeader, o.Next, o.Period, o.Gaps, "record", "index")
}

// Offset returns the index of the next record this subtask would produce
// and the largest timestamp it has produced.
func (g *genSource) Offset() ([]byte, error) {
	if !g.open {
		return nil, fmt.Errorf("connector gen: offset: %w", errNotOpen)
	}
	o := genOffset{
		offsetHeader: offsetHeader{Version: offsetVersion, Kind: "gen", Subtask: int(g.subtask), Parallelism: int(g.step)},
		Next:         g.next,
		MaxTs:        g.maxTs,
	}
	if g.prior.gaps != nil {
		// Every index of the class below next is emitted (by this subtask
		// or before the rescale), and next is the smallest gap.
		l := g.prior.advance(g.next).reduce()
		if len(l.gaps) > 1 || (g.next == g.subtask && g.maxTs != abi.MinWatermark) {
			o.Period, o.Gaps = l.period, l.gaps
		}
	}
	return json.Marshal(o)
}

// Seek continues after the record before offset's index. Records are pure
// functions of their index, so nothing is replayed to get there. After a
// rescaled offset, Next also skips the records the subtasks before the
// rescale had emitted.
func (g *genSource) Seek(offset []byte) error {
	if !g.open {
		return fmt.Errorf("connector gen: seek: %w", errNotOpen)
	}
	var o genOffset
	if err := decodeOffset("connector gen", "gen", int(g.subtask), int(g.step), offset, &o); err != nil {
		return err
	}
	if o.Period != 0 || o.Gaps != nil {
		l, err := o.layout()
		if err != nil {
			return fmt.Errorf("connector gen: seek: rescaled offset: %v", err)
		}
		g.next, g.maxTs = o.Next, o.MaxTs
		g.prior, g.gapsHi = l, l.maxGap()
		return nil
	}
	if o.Next < g.subtask || (o.Next-g.subtask)%g.step != 0 {
		return fmt.Errorf("connector gen: seek: next record %d is not one of subtask %d of parallelism %d (index mod %d must be %d)",
			o.Next, g.subtask, g.step, g.step, g.subtask)
	}
	// As for a rescaled offset: Next would overflow past the last index.
	if o.Next > maxRescaleIndex {
		return fmt.Errorf("connector gen: seek: next record %d is beyond the last index an offset may name (2^62)", o.Next)
	}
	if o.Next == g.subtask && o.MaxTs != abi.MinWatermark {
		return fmt.Errorf("connector gen: seek: the offset is before the first record but has maximum timestamp %d", o.MaxTs)
	}
	g.next, g.maxTs = o.Next, o.MaxTs
	g.prior, g.gapsHi = layout{}, 0
	return nil
}

func (g *genSource) Close() error {
	g.open = false
	return nil
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tokenBucket paces a source to rate records per second. It holds at most
// burst tokens (a tenth of a second's worth, at least one) so that a source
// stalled by backpressure does not flood its consumers when it resumes. It
// starts with one token: the first record goes out at once.
type tokenBucket struct {
	rate    float64
	burst   float64
	tokens  float64
	last    time.Time
	started bool
}

func newTokenBucket(rate float64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: max(1, rate/10), tokens: 1}
}

// maxWait bounds one wait so that tiny rates do not overflow a Duration; the
// caller simply waits again.
const maxWait = time.Hour

// take refills the bucket up to now and takes up to want tokens. It returns
// the number taken, or 0 and how long to wait for the next token.
func (t *tokenBucket) take(now time.Time, want int64) (int64, time.Duration) {
	if !t.started {
		t.started = true
		t.last = now
	} else if elapsed := now.Sub(t.last); elapsed > 0 {
		t.tokens = min(t.burst, t.tokens+elapsed.Seconds()*t.rate)
		t.last = now
	}
	if t.tokens >= 1 {
		n := min(want, int64(t.tokens))
		t.tokens -= float64(n)
		return n, 0
	}
	wait := math.Ceil((1 - t.tokens) / t.rate * float64(time.Second))
	if wait > float64(maxWait) {
		return 0, maxWait
	}
	return 0, max(time.Duration(wait), 1)
}
