package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// brokenChannel is a local channel that breaks on demand.
type brokenChannel struct {
	*LocalChannel
	err error
}

func (c *brokenChannel) Err() error { return c.err }

func TestGateFailsOnABrokenChannel(t *testing.T) {
	a, b := NewLocalChannel(4), &brokenChannel{LocalChannel: NewLocalChannel(4)}
	g := NewInputGate([]InputChannel{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Send(ctx, data("a1")); err != nil {
		t.Fatal(err)
	}
	if ev, err := g.Next(ctx, nil); err != nil || string(ev.Msg.Data) != "a1" {
		t.Fatalf("whole channels: %q %v", ev.Msg.Data, err)
	}
	// A broken channel fails the gate even while it is blocked (aligning)
	// and another channel has data.
	g.Block(1)
	if err := a.Send(ctx, data("a2")); err != nil {
		t.Fatal(err)
	}
	broken := errors.New("channel x: message 4 follows 2")
	b.err = broken
	if ev, err := g.Next(ctx, nil); !errors.Is(err, broken) {
		t.Fatalf("Next on a broken channel: %q %v, want %v", ev.Msg.Data, err, broken)
	}
}

// TestExchangeMissingMessageFailsTheGate removes a message from the
// channel's stream: the consumer must fail the gate, naming the channel and
// the missing sequences, and hand out nothing that follows the gap (a gap
// skipped lost the records of a paused NATS node's missing write).
func TestExchangeMissingMessageFailsTheGate(t *testing.T) {
	prod, cons, js := exchangePair(t, "gap", 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := prod.NewOutput(3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	// No consumer yet: the messages wait in the stream (seqs 1-6).
	for i := 1; i <= 5; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Send(ctx, Message{Kind: KindEnd}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, DataStream("gap"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	in, err := cons.NewInput(3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	g := NewInputGate([]InputChannel{in})
	var got [][]byte
	for {
		ev, err := g.Next(ctx, nil)
		m := ev.Msg
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the gate did not fail within a minute: %v", err)
			}
			for _, want := range []string{DataSubject("gap", 1, 3, 0, 1), "message 4 follows 2", "messages 3-3 are missing"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("gate error %q does not name %q", err, want)
				}
			}
			break
		}
		if m.Kind == KindEnd {
			t.Fatalf("the gate delivered the channel's end past the gap, after %d batches", len(got))
		}
		got = append(got, m.Data)
	}
	// What came before the gap may have been handed out; nothing after it.
	for i, d := range got {
		if i >= 2 || !bytes.Equal(d, batch(i+1)) {
			t.Fatalf("batch %d handed out: %q", i, d)
		}
	}
	// The gate stays failed.
	if _, err := g.Next(ctx, nil); err == nil || in.Err() == nil {
		t.Fatalf("a second Next: %v (channel error %v)", err, in.Err())
	}
}

// TestExchangeFailedPublishFailsTheProducer: a message whose publish failed
// must fail the producer's next Send, even once a consumer's credit passed
// it (a consumer that skipped it), rather than leave the window unseen.
func TestExchangeFailedPublishFailsTheProducer(t *testing.T) {
	prod, _, js := exchangePair(t, "pubfail", 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := prod.NewOutput(3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	if err := DeleteDataStream(ctx, js, "pubfail"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the stream-less publishes have failed.
	for prod.js.PublishAsyncPending() > 0 {
		if ctx.Err() != nil {
			t.Fatal("publishes still pending after a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	out.credit(3)
	err = out.Send(ctx, Message{Kind: KindData, Data: batch(4)})
	if err == nil || !strings.Contains(err.Error(), "message 1") {
		t.Fatalf("Send after failed publishes: %v, want the error of message 1", err)
	}
}

// TestExchangeConsumerPullsWithHeartbeat: every pull request of a channel's
// consumer asks for an idle heartbeat of at most a second, so that a pull
// parked on a lost or paused server is noticed and pulled again within
// about a second rather than at its expiry.
func TestExchangeConsumerPullsWithHeartbeat(t *testing.T) {
	prod, cons, _ := exchangePair(t, "pullhb", 8)
	pulls := make(chan *nats.Msg, 16)
	sub, err := prod.cfg.NATS.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT."+DataStream("pullhb")+".>", pulls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := prod.cfg.NATS.Flush(); err != nil {
		t.Fatal(err)
	}
	channelPair(t, prod, cons)
	select {
	case m := <-pulls:
		var req struct {
			Expires   time.Duration `json:"expires"`
			Heartbeat time.Duration `json:"idle_heartbeat"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %q: %v", m.Data, err)
		}
		if req.Heartbeat <= 0 || req.Heartbeat > time.Second {
			t.Fatalf("pull request %s: idle heartbeat %s, want at most 1s", m.Data, req.Heartbeat)
		}
	case <-time.After(time.Minute):
		t.Fatal("no pull request within a minute")
	}
}
