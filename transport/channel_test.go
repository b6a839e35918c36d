package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

func data(s string) Message { return Message{Kind: KindData, Data: []byte(s)} }

func TestLocalChannelBackpressure(t *testing.T) {
	c := NewLocalChannel(2)
	g := NewInputGate([]InputChannel{c})
	ctx := context.Background()
	if err := c.Send(ctx, data("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, data("b")); err != nil {
		t.Fatal(err)
	}
	// Full: a third Send blocks until the consumer takes one.
	sent := make(chan error, 1)
	go func() { sent <- c.Send(ctx, data("c")) }()
	select {
	case err := <-sent:
		t.Fatalf("Send on a full channel returned %v without blocking", err)
	case <-time.After(20 * time.Millisecond):
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	for _, want := range []string{"a", "b", "c"} {
		_, m, err := g.Next(ctx, nil)
		if err != nil || string(m.Data) != want {
			t.Fatalf("Next = %q, %v; want %q", m.Data, err, want)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

func TestLocalChannelSendCancelAndClose(t *testing.T) {
	c := NewLocalChannel(1)
	_ = c.Send(context.Background(), data("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Send(ctx, data("y")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with cancelled ctx = %v", err)
	}
	c.Close()
	c.Close() // idempotent
	if err := c.Send(context.Background(), data("z")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
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
		ch, m, err := g.Next(ctx, nil)
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
	ch, m, err := g.Next(ctx, nil)
	if err != nil || ch != 1 || m.Kind != KindEnd {
		t.Fatalf("Next with 0 blocked = %d %v %v", ch, m.Kind, err)
	}
	if g.Open() != 1 {
		t.Fatalf("Open = %d after one end", g.Open())
	}
	// Nothing else is readable: a timer ends the wait.
	tm := time.NewTimer(10 * time.Millisecond)
	if _, _, err := g.Next(ctx, tm.C); !IsTimer(err) {
		t.Fatalf("Next on blocked gate = %v, want timer", err)
	}
	g.Unblock(0)
	ch, m, err = g.Next(ctx, nil)
	if err != nil || ch != 0 || string(m.Data) != "a3" {
		t.Fatalf("after Unblock: %d %q %v", ch, m.Data, err)
	}
	// An ended channel is never read again even if something follows.
	_ = b.Send(ctx, data("late"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := g.Next(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want ctx error (ended channel must not be read)", err)
	}
}

func TestGateWakesOnSend(t *testing.T) {
	a := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{a})
	done := make(chan Message, 1)
	go func() {
		_, m, _ := g.Next(context.Background(), nil)
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

func TestOvertakeJumpsTheQueueAndReportsOvertakenData(t *testing.T) {
	c := NewLocalChannel(2)
	g := NewInputGate([]InputChannel{c})
	ctx := context.Background()
	_ = c.Send(ctx, data("a"))
	_ = c.Send(ctx, Message{Kind: KindWatermark, Watermark: 5})
	// The queue is full, yet a barrier gets in at once, ahead of both.
	over, err := c.Overtake(Message{Kind: KindBarrier, Checkpoint: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(over) != 1 || string(over[0]) != "a" {
		t.Fatalf("overtaken = %q, want only the data batch a", over)
	}
	want := []Kind{KindBarrier, KindData, KindWatermark}
	for i, k := range want {
		_, m, err := g.Next(ctx, nil)
		if err != nil || m.Kind != k {
			t.Fatalf("message %d = %v %v, want %v", i, m.Kind, err, k)
		}
		if k == KindBarrier && m.Checkpoint != 7 {
			t.Fatalf("barrier id %d", m.Checkpoint)
		}
	}
	// Many overtakes beyond the capacity grow the ring without losing order.
	for i := 0; i < 2; i++ {
		_ = c.Send(ctx, data(string(rune('p'+i))))
	}
	for i := 0; i < 10; i++ {
		if _, err := c.Overtake(Message{Kind: KindCancel, Checkpoint: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 9; i >= 0; i-- {
		_, m, _ := g.Next(ctx, nil)
		if m.Kind != KindCancel || m.Checkpoint != int64(i) {
			t.Fatalf("got %v %d, want cancel %d (last overtaker first)", m.Kind, m.Checkpoint, i)
		}
	}
	for _, w := range []string{"p", "q"} {
		_, m, _ := g.Next(ctx, nil)
		if string(m.Data) != w {
			t.Fatalf("got %q, want %q", m.Data, w)
		}
	}
	c.Close()
	if _, err := c.Overtake(Message{Kind: KindBarrier}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Overtake after Close = %v", err)
	}
}

func TestGateInterrupt(t *testing.T) {
	a := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{a})
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Next(context.Background(), nil)
		done <- err
	}()
	g.Interrupt()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("Next = %v, want ErrInterrupted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Interrupt did not wake Next")
	}
	// The interrupt is consumed: the next call reads data.
	_ = a.Send(context.Background(), data("x"))
	if _, m, err := g.Next(context.Background(), nil); err != nil || string(m.Data) != "x" {
		t.Fatalf("after interrupt: %q %v", m.Data, err)
	}
}

func TestSendOrInterruptAndPriority(t *testing.T) {
	c := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{c})
	prio := make(chan struct{}, 1)
	g.NotifyPriority(prio)
	ctx := context.Background()
	_ = c.Send(ctx, data("a"))
	intr := make(chan struct{}, 1)
	intr <- struct{}{}
	// Full channel: SendOr gives up on the interrupt and enqueues nothing.
	if err := c.SendOr(ctx, data("b"), intr); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("SendOr = %v, want ErrInterrupted", err)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d after an interrupted send", c.Len())
	}
	isBarrier := func(m Message) bool { return m.Kind == KindBarrier }
	if _, _, ok := g.TakePriority(isBarrier); ok {
		t.Fatal("TakePriority took a data message")
	}
	if _, err := c.Overtake(Message{Kind: KindBarrier, Checkpoint: 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-prio:
	default:
		t.Fatal("Overtake did not signal the priority channel")
	}
	ch, m, ok := g.TakePriority(isBarrier)
	if !ok || ch != 0 || m.Checkpoint != 3 {
		t.Fatalf("TakePriority = %d %+v %t", ch, m, ok)
	}
	// The data behind it is still there.
	if _, m, _ := g.Next(ctx, nil); string(m.Data) != "a" {
		t.Fatalf("after the barrier: %q", m.Data)
	}
}
