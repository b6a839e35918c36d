package transport

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natsleaf"
)

// TestExchangeConsumerLostPull: a channel whose consumer reads through a
// leaf node whose hub restarts has its pull lost without a word (the
// connections to the leaf stay up). The pull heartbeat notices within
// about a second and the consumer pulls again, so a message sent once the
// hub is back arrives within a few seconds: two missed 500 ms heartbeats
// are a second, where without the option the pull waits for its 30 s
// expiry.
func TestExchangeConsumerLostPull(t *testing.T) {
	srv := natsleaf.Start(t)
	ncA, ncB := srv.Connect("a"), srv.Connect("b")
	js, err := jetstream.New(ncA)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := CreateDataStream(ctx, js, "lostpull", 1); err != nil {
		t.Fatal(err)
	}
	mk := func(nc *nats.Conn) *Exchange {
		x, err := NewExchange(context.Background(), ExchangeConfig{NATS: nc, Job: "lostpull", Attempt: 1, Window: 8, Probe: 20 * time.Millisecond, OvertakeTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(x.Close)
		return x
	}
	out, in := channelPair(t, mk(ncA), mk(ncB))
	recv := func(want []byte) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			if m, ok := in.TryRecv(); ok {
				if m.Kind != KindData || !bytes.Equal(m.Data, want) {
					t.Fatalf("received %v %q, want %q", m.Kind, m.Data, want)
				}
				return time.Since(start)
			}
			if err := in.Err(); err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatalf("no message in %v", time.Since(start))
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := out.Send(ctx, Message{Kind: KindData, Data: batch(1)}); err != nil {
		t.Fatal(err)
	}
	recv(batch(1))
	// The consumer waits in a pull on the hub, which then goes away.
	srv.RestartHub()
	if err := out.Send(ctx, Message{Kind: KindData, Data: batch(2)}); err != nil {
		t.Fatal(err)
	}
	gap := recv(batch(2))
	t.Logf("the message sent once the hub was back arrived after %v", gap)
	if bound := 5 * time.Second; gap > bound {
		t.Fatalf("the message sent once the hub was back arrived after %v, want at most %v", gap, bound)
	}
}
