package connector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

// genRec is one decoded gen record, comparable for multiset checks.
type genRec struct {
	ts         int64
	key, value string
}

func openGen(t testing.TB, config string, subtask, parallelism int) *genSource {
	t.Helper()
	src, err := NewSource("gen", []byte(config))
	if err != nil {
		t.Fatalf("NewSource(gen, %s): %v", config, err)
	}
	if err := src.Open(context.Background(), subtask, parallelism); err != nil {
		t.Fatalf("Open(%d, %d): %v", subtask, parallelism, err)
	}
	return src.(*genSource)
}

// step is what one call to Next returned.
type step struct {
	recs      []genRec
	watermark int64
	done      bool
}

// drain calls Next with batches of max until done and returns every step.
func drain(t testing.TB, src Source, max int) []step {
	t.Helper()
	var steps []step
	var b abi.Builder
	for range 1 << 20 {
		b.Reset()
		wm, done, err := src.Next(context.Background(), &b, max)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatalf("Next produced a bad batch: %v", err)
		}
		if len(recs) > max {
			t.Fatalf("Next returned %d records, max %d", len(recs), max)
		}
		s := step{watermark: wm, done: done}
		for _, r := range recs {
			if r.Port != 0 {
				t.Fatalf("record on port %d, want 0", r.Port)
			}
			s.recs = append(s.recs, genRec{r.Timestamp, string(r.Key), string(r.Value)})
		}
		steps = append(steps, s)
		if done {
			return steps
		}
	}
	t.Fatal("source never reported done")
	return nil
}

func records(steps []step) []genRec {
	var all []genRec
	for _, s := range steps {
		all = append(all, s.recs...)
	}
	return all
}

func sortRecs(r []genRec) {
	slices.SortFunc(r, func(a, b genRec) int {
		if c := strings.Compare(a.value, b.value); c != 0 {
			return c
		}
		return int(a.ts - b.ts)
	})
}

// TestGenGolden pins records so that gen's output cannot drift: benchmarks
// and end-to-end expectations depend on it.
func TestGenGolden(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   []genRec
	}{
		{`{"words":3,"keys":50,"disorder":5}`, []genRec{
			{1, "w12", "w12 w4 w14"},
			{3, "w16", "w16 w49 w16"},
			{2, "w25", "w25 w4 w42"},
			{6, "w32", "w32 w31 w15"},
			{6, "w4", "w4 w18 w6"},
		}},
		{``, []genRec{{0, "w255", "w255"}, {1, "w335", "w335"}, {2, "w507", "w507"}}},
	} {
		p, err := parseGenConfig([]byte(tc.config))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range tc.want {
			ts, v, k := genRecord(&p, int64(i), nil)
			if got := (genRec{ts, string(v[:k]), string(v)}); got != want {
				t.Errorf("%s: record %d = %+v, want %+v", tc.config, i, got, want)
			}
		}
	}
}

func TestGenDeterministic(t *testing.T) {
	const cfg = `{"count":500,"keys":20,"words":3,"seed":42,"disorder":7}`
	a := records(drain(t, openGen(t, cfg, 0, 1), 64))
	b := records(drain(t, openGen(t, cfg, 0, 1), 7))
	if !slices.Equal(a, b) {
		t.Fatal("two runs of the same config differ")
	}
	c := records(drain(t, openGen(t, `{"count":500,"keys":20,"words":3,"seed":43,"disorder":7}`, 0, 1), 64))
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 produced the same records")
	}
	// Record i is a pure function of (seed, i): computing it alone gives
	// what the sequence gave.
	p, _ := parseGenConfig([]byte(cfg))
	for _, i := range []int{499, 0, 250} {
		ts, v, k := genRecord(&p, int64(i), nil)
		if got := (genRec{ts, string(v[:k]), string(v)}); got != a[i] {
			t.Errorf("record %d computed alone = %+v, in sequence %+v", i, got, a[i])
		}
	}
}

func TestGenParallelismIndependent(t *testing.T) {
	const cfg = `{"count":1001,"keys":30,"words":2,"seed":9,"disorder":4,"interval":3,"start":1000}`
	var want []genRec
	for _, p := range []int{1, 2, 4, 7} {
		var union []genRec
		for s := range p {
			recs := records(drain(t, openGen(t, cfg, s, p), 50))
			if n, min, max := len(recs), 1001/p, (1001+p-1)/p; n < min || n > max {
				t.Errorf("p=%d subtask %d produced %d records, want %d..%d", p, s, n, min, max)
			}
			union = append(union, recs...)
		}
		sortRecs(union)
		if len(union) != 1001 {
			t.Fatalf("p=%d: %d records in total, want 1001", p, len(union))
		}
		if want == nil {
			want = union
		} else if !slices.Equal(union, want) {
			t.Errorf("p=%d: union of subtasks differs from p=1", p)
		}
	}
}

func TestGenRecordShape(t *testing.T) {
	const keys, words = 13, 4
	recs := records(drain(t, openGen(t, fmt.Sprintf(`{"count":2000,"keys":%d,"words":%d}`, keys, words), 0, 1), 256))
	seen := map[string]bool{}
	for i, r := range recs {
		ws := strings.Split(r.value, " ")
		if len(ws) != words {
			t.Fatalf("record %d %q has %d words, want %d", i, r.value, len(ws), words)
		}
		if r.key != ws[0] {
			t.Fatalf("record %d: key %q is not the first word of %q", i, r.key, r.value)
		}
		for _, w := range ws {
			k, err := strconv.Atoi(strings.TrimPrefix(w, "w"))
			if !strings.HasPrefix(w, "w") || err != nil || k < 0 || k >= keys {
				t.Fatalf("record %d: word %q is not w<k> with k in [0, %d)", i, w, keys)
			}
			seen[w] = true
		}
		if r.ts != int64(i) {
			t.Fatalf("record %d: ts %d, want %d (start 0, interval 1, no disorder)", i, r.ts, i)
		}
	}
	if len(seen) != keys {
		t.Errorf("saw %d distinct words, want all %d", len(seen), keys)
	}
}

func TestGenDisorderBounds(t *testing.T) {
	const disorder, interval, start = 25, 10, 500
	recs := records(drain(t, openGen(t, fmt.Sprintf(`{"count":5000,"disorder":%d,"interval":%d,"start":%d}`, disorder, interval, start), 0, 1), 100))
	var minJ, maxJ int64 = disorder, 0
	outOfOrder := 0
	for i, r := range recs {
		j := r.ts - (start + int64(i)*interval)
		if j < 0 || j > disorder {
			t.Fatalf("record %d: ts %d has jitter %d outside [0, %d]", i, r.ts, j, disorder)
		}
		minJ, maxJ = min(minJ, j), max(maxJ, j)
		if i > 0 && r.ts < recs[i-1].ts {
			outOfOrder++
		}
	}
	if minJ != 0 || maxJ != disorder {
		t.Errorf("jitter spans [%d, %d], want the whole [0, %d] over 5000 records", minJ, maxJ, disorder)
	}
	if outOfOrder == 0 {
		t.Error("no record came out of order despite disorder > interval")
	}
}

func TestGenWatermark(t *testing.T) {
	for _, tc := range []struct {
		config string
		late   bool // watermarkDelay < disorder: some records may be late
	}{
		{`{"count":3000,"disorder":40,"interval":2}`, false},
		{`{"count":3000,"disorder":40,"watermarkDelay":100}`, false},
		{`{"count":3000,"disorder":0}`, false},
		{`{"count":3000,"disorder":40,"watermarkDelay":0}`, true},
	} {
		for _, p := range []int{1, 3} {
			for s := range p {
				steps := drain(t, openGen(t, tc.config, s, p), 17)
				if got := steps[0].watermark; len(steps[0].recs) == 0 && got != abi.MinWatermark {
					t.Errorf("%s: watermark %d before any record, want MinWatermark", tc.config, got)
				}
				gp, _ := parseGenConfig([]byte(tc.config))
				maxTs := abi.MinWatermark
				prev := abi.MinWatermark
				late := 0
				for i, st := range steps {
					for _, r := range st.recs {
						maxTs = max(maxTs, r.ts)
					}
					if want := maxTs - gp.delay - 1; st.watermark != want {
						t.Fatalf("%s p=%d s=%d step %d: watermark %d, want max ts %d − delay %d − 1", tc.config, p, s, i, st.watermark, maxTs, gp.delay)
					}
					if st.watermark < prev {
						t.Fatalf("%s: watermark went back from %d to %d", tc.config, prev, st.watermark)
					}
					prev = st.watermark
					for _, later := range steps[i+1:] {
						for _, r := range later.recs {
							if r.ts <= st.watermark {
								late++
							}
						}
					}
				}
				if tc.late != (late > 0) {
					t.Errorf("%s p=%d s=%d: %d records at or below an earlier watermark, want late=%v", tc.config, p, s, late, tc.late)
				}
			}
		}
	}
}

func TestGenDone(t *testing.T) {
	g := openGen(t, `{"count":10}`, 1, 3) // records 1, 4, 7
	var b abi.Builder
	ctx := context.Background()
	wm, done, err := g.Next(ctx, &b, 2)
	if err != nil || done || b.Len() != 2 || wm != 3 {
		t.Fatalf("first Next = (%d, %v, %v) with %d records, want (3, false, nil) with 2", wm, done, err, b.Len())
	}
	b.Reset()
	wm, done, err = g.Next(ctx, &b, 5)
	if err != nil || !done || b.Len() != 1 || wm != 6 {
		t.Fatalf("last Next = (%d, %v, %v) with %d records, want (6, true, nil) with 1", wm, done, err, b.Len())
	}
	b.Reset()
	wm, done, err = g.Next(ctx, &b, 5)
	if err != nil || !done || b.Len() != 0 || wm != 6 {
		t.Fatalf("Next after the end = (%d, %v, %v) with %d records, want (6, true, nil) with 0", wm, done, err, b.Len())
	}

	empty := openGen(t, `{"count":2}`, 3, 4)
	wm, done, err = empty.Next(ctx, &b, 5)
	if err != nil || !done || b.Len() != 0 || wm != abi.MinWatermark {
		t.Fatalf("subtask without records: Next = (%d, %v, %v) with %d records, want (MinWatermark, true, nil)", wm, done, err, b.Len())
	}
}

func TestGenUnbounded(t *testing.T) {
	g := openGen(t, `{"keys":5}`, 0, 2)
	var b abi.Builder
	for i := range 100 {
		b.Reset()
		_, done, err := g.Next(context.Background(), &b, 1000)
		if err != nil || done || b.Len() != 1000 {
			t.Fatalf("call %d: done=%v err=%v records=%d, want 1000 and not done", i, done, err, b.Len())
		}
	}
	if g.next != 2*100*1000 {
		t.Errorf("next index %d, want %d", g.next, 2*100*1000)
	}
}

func TestGenMisuse(t *testing.T) {
	src, err := NewSource("gen", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b abi.Builder
	if _, _, err := src.Next(context.Background(), &b, 1); err == nil || err.Error() != "connector gen: next: not open" {
		t.Errorf("Next before Open: %v", err)
	}
	for _, tc := range [][2]int{{0, 0}, {-1, 2}, {2, 2}} {
		want := fmt.Sprintf("connector gen: open: subtask %d of parallelism %d is out of range", tc[0], tc[1])
		if err := src.Open(context.Background(), tc[0], tc[1]); err == nil || err.Error() != want {
			t.Errorf("Open(%d, %d) = %v, want %s", tc[0], tc[1], err, want)
		}
	}
	if err := src.Open(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Next(context.Background(), &b, 0); err == nil || err.Error() != "connector gen: next: max 0 must be ≥ 1" {
		t.Errorf("Next(max 0): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := src.Next(ctx, &b, 1); !errors.Is(err, context.Canceled) || b.Len() != 0 {
		t.Errorf("Next on a done ctx = %v with %d records, want context.Canceled and none", err, b.Len())
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
}

// fakeClock drives the rate limiter without wall-clock time: sleeping
// advances the clock.
type fakeClock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func TestGenRatePacing(t *testing.T) {
	// 40 records/s across 2 subtasks: each subtask's share is 20/s, one
	// record per 50 ms, with a burst of at most 2 (a tenth of a second).
	g := openGen(t, `{"rate":40}`, 1, 2)
	clock := &fakeClock{now: time.Unix(1000, 0)}
	g.now, g.sleep = clock.Now, clock.Sleep
	var b abi.Builder
	ctx := context.Background()

	next := func(max int) int {
		t.Helper()
		b.Reset()
		if _, _, err := g.Next(ctx, &b, max); err != nil {
			t.Fatal(err)
		}
		return b.Len()
	}
	if n := next(100); n != 1 || len(clock.sleeps) != 0 {
		t.Fatalf("first call: %d records after sleeps %v, want 1 at once", n, clock.sleeps)
	}
	if n := next(100); n != 1 || !slices.Equal(clock.sleeps, []time.Duration{50 * time.Millisecond}) {
		t.Fatalf("second call: %d records after sleeps %v, want 1 after 50ms", n, clock.sleeps)
	}
	// A long stall accrues at most the burst.
	clock.now = clock.now.Add(time.Minute)
	if n := next(100); n != 2 {
		t.Fatalf("after a minute's stall: %d records, want the burst of 2", n)
	}
	// Over a simulated 10 s the subtask emits its share.
	start := clock.now
	total := 0
	for clock.now.Sub(start) < 10*time.Second {
		total += next(100)
	}
	if total < 199 || total > 201 {
		t.Errorf("%d records in %v of simulated time, want about 200 at 20/s", total, clock.now.Sub(start))
	}
}

func TestGenRateWaitsForCtx(t *testing.T) {
	// One record per 1000 s: after the first, Next can only end by its ctx.
	g := openGen(t, `{"rate":0.001}`, 0, 1)
	var b abi.Builder
	if _, _, err := g.Next(context.Background(), &b, 10); err != nil || b.Len() != 1 {
		t.Fatalf("first Next: %v with %d records, want 1", err, b.Len())
	}
	b.Reset()
	// Cancel only once Next waits for a token, so the test sees the limiter
	// block and the ctx end the wait.
	waiting := make(chan time.Duration, 1)
	g.sleep = func(ctx context.Context, d time.Duration) error {
		waiting <- d
		return sleepCtx(ctx, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		if d := <-waiting; d < 999*time.Second {
			t.Errorf("limiter waits %v, want about 1000s", d)
		}
		cancel()
	}()
	wm, done, err := g.Next(ctx, &b, 10)
	if !errors.Is(err, context.Canceled) || done || b.Len() != 0 {
		t.Fatalf("rate-limited Next = (%v, %v) with %d records, want context.Canceled with none", done, err, b.Len())
	}
	if wm != -1 {
		t.Errorf("watermark after the cancelled call = %d, want -1 (record 0 at ts 0)", wm)
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tb := newTokenBucket(100) // burst 10
	for _, tc := range []struct {
		ms       int
		want     int64
		gotN     int64
		gotWait  time.Duration
		describe string
	}{
		{0, 5, 1, 0, "starts with one token"},
		{0, 5, 0, 10 * time.Millisecond, "then waits one interval"},
		{10, 5, 1, 0, "one token after 10ms"},
		{35, 5, 2, 0, "2.5 tokens accrued, 2 taken"},
		{36, 5, 0, 4 * time.Millisecond, "0.6 tokens, wait 4ms for the next"},
		{1000, 50, 10, 0, "capped at the burst"},
		{1000, 1, 0, 10 * time.Millisecond, "empty again"},
		{900, 1, 0, 10 * time.Millisecond, "a clock going back adds nothing"},
	} {
		n, wait := tb.take(at(tc.ms), tc.want)
		// Token arithmetic is floating point: allow a microsecond.
		if d := wait - tc.gotWait; n != tc.gotN || d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: take(%dms, %d) = (%d, %v), want (%d, %v)", tc.describe, tc.ms, tc.want, n, wait, tc.gotN, tc.gotWait)
		}
	}
	slow := newTokenBucket(1e-9)
	slow.take(t0, 1)
	if _, wait := slow.take(t0, 1); wait != maxWait {
		t.Errorf("wait at a tiny rate = %v, want the cap %v", wait, maxWait)
	}
}

func TestGenNextDoesNotAllocate(t *testing.T) {
	g := openGen(t, `{"words":4,"keys":100000,"disorder":10}`, 0, 1)
	var b abi.Builder
	ctx := context.Background()
	g.Next(ctx, &b, 1024) // grow the builder and the value buffer
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		if _, _, err := g.Next(ctx, &b, 1024); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocated %.1f times per call of 1024 records, want 0", allocs)
	}
}

func BenchmarkGenNext(b *testing.B) {
	for _, words := range []int{1, 4} {
		b.Run(fmt.Sprintf("words=%d", words), func(b *testing.B) {
			g := openGen(b, fmt.Sprintf(`{"words":%d,"keys":1000,"disorder":5}`, words), 0, 1)
			const batch = 1024
			var bld abi.Builder
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				bld.Reset()
				if _, _, err := g.Next(ctx, &bld, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "records/s")
		})
	}
}
