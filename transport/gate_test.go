package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// nextMessage is Next for tests that expect a message: a timer or an
// interrupt is an error.
func (g *InputGate) nextMessage(ctx context.Context) (int, Message, error) {
	ev, err := g.Next(ctx, nil)
	if err != nil {
		return -1, Message{}, err
	}
	if ev.Kind != GateMessage {
		return -1, Message{}, fmt.Errorf("gate: %s, want a message", ev.Kind)
	}
	return ev.Ch, ev.Msg, nil
}

func TestGateRoundRobinBlockAndEnd(t *testing.T) {
	a, b := NewLocalChannel(8), NewLocalChannel(8)
	g := NewInputGate([]InputChannel{a, b})
	ctx := context.Background()
	for _, s := range []string{"a1", "a2", "a3"} {
		_ = a.Send(ctx, data(s))
	}
	for _, s := range []string{"b1", "b2"} {
		_ = b.Send(ctx, data(s))
	}
	_ = b.Send(ctx, Message{Kind: KindEnd})
	var got []string
	for i := 0; i < 4; i++ {
		ch, m, err := g.nextMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Data)+"@"+string(rune('0'+ch)))
	}
	want := []string{"a1@0", "b1@1", "a2@0", "b2@1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order = %v, want %v (round robin)", got, want)
		}
	}
	// Block channel 0: only b's end comes through.
	g.Block(0)
	ch, m, err := g.nextMessage(ctx)
	if err != nil || ch != 1 || m.Kind != KindEnd {
		t.Fatalf("Next with 0 blocked = %d %v %v", ch, m.Kind, err)
	}
	if g.Open() != 1 {
		t.Fatalf("Open = %d after one end", g.Open())
	}
	// Nothing else is readable: a timer ends the wait.
	tm := time.NewTimer(10 * time.Millisecond)
	if ev, err := g.Next(ctx, tm.C); err != nil || ev.Kind != GateTimer {
		t.Fatalf("Next on blocked gate = %+v, %v, want the timer", ev, err)
	}
	g.Unblock(0)
	ch, m, err = g.nextMessage(ctx)
	if err != nil || ch != 0 || string(m.Data) != "a3" {
		t.Fatalf("after Unblock: %d %q %v", ch, m.Data, err)
	}
	// An ended channel is never read again even if something follows.
	_ = b.Send(ctx, data("late"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.Next(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want ctx error (ended channel must not be read)", err)
	}
}

func TestGateWakesOnSend(t *testing.T) {
	a := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{a})
	done := make(chan Message, 1)
	go func() {
		_, m, _ := g.nextMessage(context.Background())
		done <- m
	}()
	_ = a.Send(context.Background(), data("wake"))
	select {
	case m := <-done:
		if string(m.Data) != "wake" {
			t.Fatalf("got %q", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gate did not wake on Send")
	}
}

func TestGateInterrupt(t *testing.T) {
	a := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{a})
	done := make(chan GateEvent, 1)
	go func() {
		ev, err := g.Next(context.Background(), nil)
		if err != nil {
			t.Error(err)
		}
		done <- ev
	}()
	g.Interrupt()
	select {
	case ev := <-done:
		if ev.Kind != GateInterrupt {
			t.Fatalf("Next = %+v, want an interrupt", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Interrupt did not wake Next")
	}
	// The interrupt is consumed: the next call reads data.
	_ = a.Send(context.Background(), data("x"))
	if _, m, err := g.nextMessage(context.Background()); err != nil || string(m.Data) != "x" {
		t.Fatalf("after interrupt: %q %v", m.Data, err)
	}
}
