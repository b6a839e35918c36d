package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
)

// fillInput creates stream "in" (subjects in.> and other.>) and publishes n
// messages: message i (sequence i+1) goes to in.k<i%5> with key header
// "k<i%5>", timestamp header 1000+i and data "m<i>", except every seventh,
// which goes to other.x and does not match the filter in.>.
func fillInput(t *testing.T, js jetstream.JetStream, n int) (matching []string) {
	t.Helper()
	createStream(t, js, jetstream.StreamConfig{Name: "in", Subjects: []string{"in.>", "other.>"}})
	ctx := testCtx(t)
	for i := range n {
		m := &nats.Msg{Subject: fmt.Sprintf("in.k%d", i%5), Data: []byte("m" + strconv.Itoa(i)), Header: nats.Header{}}
		if i%7 == 3 {
			m.Subject = "other.x"
		} else {
			matching = append(matching, string(m.Data))
		}
		m.Header.Set(jsKeyHeader, fmt.Sprintf("k%d", i%5))
		m.Header.Set(jsTimestampHeader, strconv.Itoa(1000+i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return matching
}

func openJSSource(t *testing.T, cfg map[string]any, subtask, parallelism int) *jsSource {
	t.Helper()
	s, err := NewSource("jetstream", jsonConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t), subtask, parallelism); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*jsSource)
}

// readJS calls Next until the source is done (or, with max > 0, until it
// has returned max records, asking for no more) and returns the records and
// the last watermark. It fails the test if that takes longer than a
// minute.
func readJS(t *testing.T, s *jsSource, max, batch int) (recs []abi.Record, wm int64, done bool) {
	t.Helper()
	ctx := testCtx(t)
	wm = abi.MinWatermark
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var b abi.Builder
		n := batch
		if max > 0 {
			// Never past max: a fetch that returned fewer records than
			// asked (a busy machine) must not make the next one overshoot.
			n = min(n, max-len(recs))
		}
		w, d, err := s.Next(ctx, &b, n)
		if err != nil {
			t.Fatal(err)
		}
		if w < wm {
			t.Fatalf("watermark went back from %d to %d", wm, w)
		}
		wm = w
		got, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, got...)
		if d || (max > 0 && len(recs) >= max) {
			return recs, wm, d
		}
	}
	t.Fatalf("the source did not end within a minute (%d records)", len(recs))
	return
}

func values(recs []abi.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// TestJetStreamSourceShares: subtask s of p emits the matching messages
// whose stream sequence is ≡ s (mod p), in order, with key and timestamp
// from the headers; the union over subtasks is every matching message
// once, and a bounded source ends.
func TestJetStreamSourceShares(t *testing.T) {
	url, js := startJetStream(t)
	want := fillInput(t, js, 200)
	for _, p := range []int{1, 3} {
		var all []string
		for s := range p {
			src := openJSSource(t, map[string]any{"url": url, "stream": "in", "subject": "in.>", "bounded": true,
				"timestamp": "header", "watermarkDelay": 10}, s, p)
			recs, wm, done := readJS(t, src, 0, 16)
			if !done {
				t.Fatal("not done")
			}
			var prev int
			for _, r := range recs {
				i, err := strconv.Atoi(strings.TrimPrefix(string(r.Value), "m"))
				if err != nil {
					t.Fatal(err)
				}
				if seq := i + 1; seq%p != s {
					t.Errorf("p %d subtask %d emitted sequence %d", p, s, seq)
				}
				if i < prev {
					t.Errorf("out of order: %d after %d", i, prev)
				}
				prev = i
				if string(r.Key) != fmt.Sprintf("k%d", i%5) || r.Timestamp != int64(1000+i) {
					t.Errorf("record %s: key %q ts %d", r.Value, r.Key, r.Timestamp)
				}
			}
			if last := recs[len(recs)-1]; wm != last.Timestamp-10-1 {
				t.Errorf("watermark %d after a last timestamp of %d with delay 10", wm, last.Timestamp)
			}
			// Done is sticky and an offset can still be taken.
			var b abi.Builder
			if _, d, err := src.Next(testCtx(t), &b, 10); err != nil || !d || b.Len() != 0 {
				t.Errorf("Next after done: %v %v %d", d, err, b.Len())
			}
			if _, err := src.Offset(); err != nil {
				t.Error(err)
			}
			all = append(all, values(recs)...)
		}
		slices.Sort(all)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(all, w) {
			t.Errorf("p %d: union of %d records, want the %d matching messages once each", p, len(all), len(w))
		}
	}
}

// TestJetStreamSourceKeyAndTime: the key from the subject's last token or
// none, the timestamp from the stream, and a malformed timestamp header.
func TestJetStreamSourceKeyAndTime(t *testing.T) {
	url, js := startJetStream(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ev", Subjects: []string{"ev.>"}})
	ctx := testCtx(t)
	before := time.Now().UnixMilli()
	if _, err := js.Publish(ctx, "ev.a.sensor-7", []byte("v")); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	src := openJSSource(t, map[string]any{"url": url, "stream": "ev", "key": "subject", "bounded": true}, 0, 1)
	recs, _, _ := readJS(t, src, 0, 10)
	if len(recs) != 1 || string(recs[0].Key) != "sensor-7" || recs[0].Timestamp < before-1 || recs[0].Timestamp > after+1 {
		t.Fatalf("got %+v, want key sensor-7 and a timestamp in [%d, %d]", recs, before, after)
	}
	src = openJSSource(t, map[string]any{"url": url, "stream": "ev", "key": "none", "bounded": true}, 0, 1)
	if recs, _, _ := readJS(t, src, 0, 10); len(recs) != 1 || len(recs[0].Key) != 0 {
		t.Fatalf("key none: %+v", recs)
	}
	m := &nats.Msg{Subject: "ev.b", Data: []byte("x"), Header: nats.Header{jsTimestampHeader: []string{"soon"}}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	src = openJSSource(t, map[string]any{"url": url, "stream": "ev", "timestamp": "header", "bounded": true}, 0, 1)
	var b abi.Builder
	var err error
	for deadline := time.Now().Add(time.Minute); err == nil && time.Now().Before(deadline); {
		_, _, err = src.Next(ctx, &b, 10)
	}
	if err == nil || !strings.Contains(err.Error(), `connector jetstream: source ev: message 2 (subject ev.b): header Wstream-Timestamp: "soon" is not an integer of milliseconds`) {
		t.Errorf("malformed timestamp header: %v", err)
	}
}

// TestJetStreamSourceUnbounded: an unbounded source returns promptly when
// there is nothing to read, and reads what is published later.
func TestJetStreamSourceUnbounded(t *testing.T) {
	url, js := startJetStream(t)
	createStream(t, js, jetstream.StreamConfig{Name: "live", Subjects: []string{"live"}})
	src := openJSSource(t, map[string]any{"url": url, "stream": "live"}, 0, 1)
	ctx := testCtx(t)
	var b abi.Builder
	start := time.Now()
	wm, done, err := src.Next(ctx, &b, 10)
	if err != nil || done || b.Len() != 0 || wm != abi.MinWatermark {
		t.Fatalf("empty stream: %d %v %v %d", wm, done, err, b.Len())
	}
	if d := time.Since(start); d > 20*jsPollWait {
		t.Errorf("Next on an empty stream took %s", d)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "live", []byte{'a' + byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, done := readJS(t, src, 3, 10)
	if done || !slices.Equal(values(recs), []string{"a", "b", "c"}) {
		t.Fatalf("got %q done %v", values(recs), done)
	}
	// A cancelled context ends a waiting Next with its error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := src.Next(cctx, &b, 10); err != context.Canceled {
		t.Errorf("Next with a cancelled context: %v", err)
	}
}

// TestJetStreamSourceBoundedEnd: a bounded source stops at the last
// message at open; the offset keeps that end, so a restored source stops
// there too although more messages arrived. An empty stream ends at once.
func TestJetStreamSourceBoundedEnd(t *testing.T) {
	url, js := startJetStream(t)
	createStream(t, js, jetstream.StreamConfig{Name: "b", Subjects: []string{"b.>"}})
	cfg := map[string]any{"url": url, "stream": "b", "bounded": true}
	empty := openJSSource(t, cfg, 0, 1)
	if recs, _, done := readJS(t, empty, 0, 10); !done || len(recs) != 0 {
		t.Fatalf("empty stream: %d records, done %v", len(recs), done)
	}
	ctx := testCtx(t)
	pub := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "b.x", []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub(0, 10)
	src := openJSSource(t, cfg, 0, 1)
	pub(10, 20)
	recs, _, _ := readJS(t, src, 4, 4)
	off, err := src.Offset()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(off), `"end":10`) || !strings.Contains(string(off), `"next":5`) {
		t.Errorf("offset %s, want next 5 and end 10", off)
	}
	src.Close()
	pub(20, 30)
	restored := openJSSource(t, cfg, 0, 1)
	if err := restored.Seek(off); err != nil {
		t.Fatal(err)
	}
	rest, _, done := readJS(t, restored, 0, 3)
	if got := append(values(recs), values(rest)...); !done || !slices.Equal(got, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}) {
		t.Errorf("got %q done %v, want messages 0–9", got, done)
	}
	// Messages up to the end deleted after the open: the source still ends.
	st, err := js.Stream(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	src = openJSSource(t, cfg, 0, 1) // end 30
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, _, done := readJS(t, src, 0, 10); !done || len(recs) != 0 {
		t.Errorf("purged stream: %d records, done %v", len(recs), done)
	}
}

// TestJetStreamSourceSeek: a source restored from an offset continues
// exactly after it; Seek refuses offsets of other streams, subtasks or
// kinds.
func TestJetStreamSourceSeek(t *testing.T) {
	url, js := startJetStream(t)
	want := fillInput(t, js, 120)
	cfg := map[string]any{"url": url, "stream": "in", "subject": "in.>", "bounded": true}
	var got []string
	for s := range 2 {
		src := openJSSource(t, cfg, s, 2)
		first, _, _ := readJS(t, src, 7, 3)
		off, err := src.Offset()
		if err != nil {
			t.Fatal(err)
		}
		src.Close()
		if _, err := src.Offset(); err == nil || !strings.HasSuffix(err.Error(), "offset: not open") {
			t.Errorf("Offset after Close: %v", err)
		}
		again := openJSSource(t, cfg, s, 2)
		if err := again.Seek(off); err != nil {
			t.Fatal(err)
		}
		rest, _, _ := readJS(t, again, 0, 5)
		got = append(got, values(first)...)
		got = append(got, values(rest)...)
		var o jsOffset
		if err := json.Unmarshal(off, &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "jetstream" || o.Stream != "in" || o.Subtask != s || o.Parallelism != 2 || o.MaxTs == abi.MinWatermark {
			t.Errorf("offset %s", off)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("read %d records across a restore, want the %d matching messages once each", len(got), len(want))
	}

	src := openJSSource(t, cfg, 0, 2)
	off, _ := src.Offset()
	other := openJSSource(t, cfg, 1, 2)
	own, _ := other.Offset()
	for _, c := range []struct{ off, want string }{
		{string(off), "connector jetstream: source in: seek: the offset belongs to subtask 0 of parallelism 2, not subtask 1 of parallelism 2"},
		{strings.Replace(string(own), `"stream":"in"`, `"stream":"out"`, 1), "connector jetstream: source in: seek: the offset is of stream out"},
		{`{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":0}`, `seek: the offset belongs to a "gen" source, not a "jetstream" source`},
		{`{"version":1,"kind":"jetstream","subtask":1,"parallelism":2,"stream":"in","next":4,"maxTs":0}`, "seek: next sequence 4 is not one of subtask 1 of parallelism 2"},
	} {
		if err := other.Seek([]byte(c.off)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Seek(%s): %v, want %q", c.off, err, c.want)
		}
	}
}

// TestJetStreamSourceRescale: offsets taken at parallelism 2 with the
// subtasks at different positions, rescaled to 3 and later to 2 again,
// still give every matching message exactly once.
func TestJetStreamSourceRescale(t *testing.T) {
	url, js := startJetStream(t)
	want := fillInput(t, js, 300)
	cfg := map[string]any{"url": url, "stream": "in", "subject": "in.>", "bounded": true, "timestamp": "header"}
	var got []string
	// run opens subtask s of p at offset (nil: the start), reads at least
	// n records (0: to the end) and returns the offset after them.
	run := func(s, p int, off []byte, n int) []byte {
		src := openJSSource(t, cfg, s, p)
		if off != nil {
			if err := src.Seek(off); err != nil {
				t.Fatal(err)
			}
		}
		recs, _, _ := readJS(t, src, n, 4)
		got = append(got, values(recs)...)
		o, err := src.Offset()
		if err != nil {
			t.Fatal(err)
		}
		src.Close()
		return o
	}
	old := [][]byte{run(0, 2, nil, 9), run(1, 2, nil, 40)}
	var mid [][]byte
	for s := range 3 {
		off, err := rescaleJSOffsets(old, s, 3)
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 && !strings.Contains(string(off), `"gaps"`) {
			t.Errorf("rescaled offset %s has no gaps although the old subtasks were at different positions", off)
		}
		mid = append(mid, run(s, 3, off, 10*(s+1)))
	}
	for s := range 2 {
		off, err := rescaleJSOffsets(mid, s, 2)
		if err != nil {
			t.Fatal(err)
		}
		var o jsOffset
		if err := json.Unmarshal(off, &o); err != nil {
			t.Fatal(err)
		}
		if o.End == nil || *o.End != 300 || o.MaxTs < 1000 {
			t.Errorf("rescaled offset %s: want end 300 and the largest timestamp", off)
		}
		run(s, 2, off, 0)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("read %d records across 2→3→2, want the %d matching messages once each", len(got), len(want))
	}

	for _, c := range []struct {
		old  [][]byte
		want string
	}{
		{[][]byte{old[0], nil}, "the offset of subtask 1 of 2 is missing"},
		{[][]byte{old[1], old[0]}, "offset 0 of 2 belongs to subtask 1"},
		{[][]byte{old[0]}, "was taken at parallelism 2, but 1 offsets were given"},
		{[][]byte{old[0], []byte(strings.Replace(string(old[1]), `"stream":"in"`, `"stream":"x"`, 1))}, "the offsets are of different streams: in (subtask 0) and x (subtask 1)"},
		{[][]byte{[]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":0,"maxTs":0}`)}, `belongs to a "gen" source, not a "jetstream" source`},
	} {
		if _, err := rescaleJSOffsets(c.old, 0, 3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rescale: %v, want %q", err, c.want)
		}
	}
}

// TestJetStreamSourcePullsWithHeartbeat: the source's pulls ask for an idle
// heartbeat of at most a second, and the source reads through a pump whose
// calls of Next block (nats.go watches heartbeats only while one waits), so
// that a pull parked on a lost or paused server is noticed in about a
// second.
func TestJetStreamSourcePullsWithHeartbeat(t *testing.T) {
	url, js := startJetStream(t)
	createStream(t, js, jetstream.StreamConfig{Name: "hb", Subjects: []string{"hb"}})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pulls := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT.hb.>", pulls); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	src := openJSSource(t, map[string]any{"url": url, "stream": "hb"}, 0, 1)
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, "hb", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := readJS(t, src, 1, 10); !slices.Equal(values(recs), []string{"a"}) {
		t.Fatalf("got %q", values(recs))
	}
	select {
	case m := <-pulls:
		var req struct {
			Heartbeat time.Duration `json:"idle_heartbeat"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %q: %v", m.Data, err)
		}
		if req.Heartbeat <= 0 || req.Heartbeat > time.Second {
			t.Fatalf("pull request %s: idle heartbeat %s, want at most 1s", m.Data, req.Heartbeat)
		}
	case <-ctx.Done():
		t.Fatal("no pull request seen")
	}
}
