package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestExchangeInputConsumerRemoved: a channel's consumer carries an
// inactivity threshold, so the server removes it should Close's delete not
// reach it, and Close's delete (not waited for) removes it.
func TestExchangeInputConsumerRemoved(t *testing.T) {
	prod, cons, js := exchangePair(t, "closejob", 8)
	_, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := js.Stream(ctx, DataStream("closejob"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := stream.Consumer(ctx, in.consumer)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.InactiveThreshold; got != consumerInactive {
		t.Fatalf("consumer %s: inactive threshold %v, want %v", in.consumer, got, consumerInactive)
	}
	in.Close()
	for {
		_, err := stream.Consumer(ctx, in.consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("consumer %s still there a minute after Close: %v", in.consumer, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}
