package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fillWindow sends window data messages on out, which must take them all.
func fillWindow(t *testing.T, out *JetStreamOutput, window int) {
	t.Helper()
	for i := 0; i < window; i++ {
		if ok, err := out.TrySend(Message{Kind: KindData, Data: batch(i)}); !ok || err != nil {
			t.Fatalf("TrySend %d = %t, %v", i, ok, err)
		}
	}
	if ok, err := out.TrySend(Message{Kind: KindData, Data: batch(window)}); ok || err != nil {
		t.Fatalf("TrySend on a full window = %t, %v", ok, err)
	}
}

// roomOrFail waits on out's Room until TrySend takes m, failing after a
// minute.
func roomOrFail(t *testing.T, out *JetStreamOutput, m Message) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case <-out.Room():
		case <-deadline.C:
			t.Fatalf("no room within a minute (in flight %d)", out.InFlight())
		}
		ok, err := out.TrySend(m)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
	}
}

// Credits travel on plain NATS and can be lost. A producer that only waits
// on Room still gets its window back: the output's own probe asks the
// consumer for its position while the window stays full.
func TestExchangeProbeRecoversLostCredits(t *testing.T) {
	const window = 4
	prod, cons, _ := exchangePair(t, "lostcredit", window)
	out, in := channelPair(t, prod, cons)
	fillWindow(t, out, window)
	waitLen(t, in, window)
	for i := 0; i < window; i++ {
		if _, ok := in.TryRecv(); !ok {
			t.Fatalf("message %d missing", i)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for out.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d after the consumer took everything", out.InFlight())
		}
		time.Sleep(time.Millisecond)
	}
	// Lose the credits: the producer believes the consumer took nothing.
	out.mu.Lock()
	out.taken = 0
	out.mu.Unlock()
	if out.InFlight() != window {
		t.Fatalf("in flight %d, want %d", out.InFlight(), window)
	}
	// The wake-ups of the credits that arrived are not the probe's.
	select {
	case <-out.Room():
	default:
	}
	next := Message{Kind: KindData, Data: batch(window)}
	if ok, err := out.TrySend(next); ok || err != nil {
		t.Fatalf("TrySend with the credits lost = %t, %v", ok, err)
	}
	roomOrFail(t, out, next)
	waitLen(t, in, 1)
	if m, _ := in.TryRecv(); string(m.Data) != string(batch(window)) {
		t.Fatalf("after the probe: %q", m.Data)
	}
}

// Closing a full output, or its exchange, wakes the producer waiting on
// Room, whose next TrySend fails.
func TestExchangeRoomWakesOnClose(t *testing.T) {
	const window = 2
	for _, tc := range []struct {
		name  string
		close func(out *JetStreamOutput, x *Exchange)
		want  error
	}{
		{"output", func(out *JetStreamOutput, _ *Exchange) { _ = out.Close() }, ErrClosed},
		{"exchange", func(_ *JetStreamOutput, x *Exchange) { x.Close() }, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prod, cons, _ := exchangePair(t, "roomclose"+tc.name, window)
			out, _ := channelPair(t, prod, cons)
			fillWindow(t, out, window)
			res := make(chan error, 1)
			go func() {
				for {
					<-out.Room()
					ok, err := out.TrySend(Message{Kind: KindData, Data: batch(window)})
					if ok || err != nil {
						res <- err
						return
					}
				}
			}()
			tc.close(out, prod)
			select {
			case err := <-res:
				if !errors.Is(err, tc.want) {
					t.Fatalf("TrySend after closing the %s = %v, want %v", tc.name, err, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatalf("Room did not wake when the %s closed", tc.name)
			}
		})
	}
}
