package connector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/natsleaf"
)

// lostPullBound is how soon a record published once a lost pull's server
// is back must arrive. Two missed 500 ms heartbeats are a second; without
// the option the ordered consumer's pulls ask for nats.go's 5 s heartbeats
// and notice after 10 s, and a pull whose heartbeats nobody watches waits
// for its 30 s expiry.
const lostPullBound = 5 * time.Second

// TestJetStreamSourceLostPull: a source reading through a leaf node whose
// hub restarts has its pull lost without a word (its connection to the
// leaf stays up). Its pull heartbeat notices within about a second and the
// ordered consumer is made again, so a message published once the hub is
// back arrives within a few seconds.
func TestJetStreamSourceLostPull(t *testing.T) {
	srv := natsleaf.Start(t)
	js, err := jetstream.New(srv.Connect("test"))
	if err != nil {
		t.Fatal(err)
	}
	createStream(t, js, jetstream.StreamConfig{Name: "lost", Subjects: []string{"lost"}, Storage: jetstream.FileStorage})
	src := openJSSource(t, map[string]any{"url": srv.URL(), "stream": "lost"}, 0, 1)
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, "lost", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if got := nextValue(t, src, time.Minute); got != "a" {
		t.Fatalf("got %q, want a", got)
	}
	// The source waits in a pull on the hub, which then goes away.
	srv.RestartHub()
	if _, err := js.Publish(ctx, "lost", []byte("b")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := nextValue(t, src, time.Minute); got != "b" {
		t.Fatalf("got %q, want b", got)
	}
	gap := time.Since(start)
	t.Logf("the record published once the hub was back arrived after %v", gap)
	if gap > lostPullBound {
		t.Fatalf("the record published once the hub was back arrived after %v, want at most %v", gap, lostPullBound)
	}
}

// nextValue calls Next until it returns a record, within wait, and
// returns the record's value.
func nextValue(t *testing.T, s *jsSource, wait time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for ctx.Err() == nil {
		var b abi.Builder
		if _, _, err := s.Next(ctx, &b, 1); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatal(err)
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 0 {
			return string(recs[0].Value)
		}
	}
	t.Fatalf("no record in %v", wait)
	return ""
}
