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
		_, m, err := g.nextMessage(ctx)
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
		_, m, err := g.nextMessage(ctx)
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
		_, m, _ := g.nextMessage(ctx)
		if m.Kind != KindCancel || m.Checkpoint != int64(i) {
			t.Fatalf("got %v %d, want cancel %d (last overtaker first)", m.Kind, m.Checkpoint, i)
		}
	}
	for _, w := range []string{"p", "q"} {
		_, m, _ := g.nextMessage(ctx)
		if string(m.Data) != w {
			t.Fatalf("got %q, want %q", m.Data, w)
		}
	}
	c.Close()
	if _, err := c.Overtake(Message{Kind: KindBarrier}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Overtake after Close = %v", err)
	}
}

func TestTrySendFullAndPriority(t *testing.T) {
	c := NewLocalChannel(1)
	g := NewInputGate([]InputChannel{c})
	prio := make(chan struct{}, 1)
	g.NotifyPriority(prio)
	ctx := context.Background()
	_ = c.Send(ctx, data("a"))
	// Full channel: TrySend enqueues nothing.
	if ok, err := c.TrySend(data("b")); ok || err != nil {
		t.Fatalf("TrySend on a full channel = %t, %v", ok, err)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d after a TrySend on a full channel", c.Len())
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
	if _, m, _ := g.nextMessage(ctx); string(m.Data) != "a" {
		t.Fatalf("after the barrier: %q", m.Data)
	}
}

// TrySend takes a message once the consumer made room, and Room wakes the
// producer that waits for it.
func TestTrySendAndRoom(t *testing.T) {
	c := NewLocalChannel(2)
	for _, s := range []string{"a", "b"} {
		if ok, err := c.TrySend(data(s)); !ok || err != nil {
			t.Fatalf("TrySend(%s) = %t, %v", s, ok, err)
		}
	}
	if ok, err := c.TrySend(data("c")); ok || err != nil {
		t.Fatalf("TrySend on a full channel = %t, %v", ok, err)
	}
	// Drain wake-ups left by nothing in particular: Room is a hint.
	select {
	case <-c.Room():
	default:
	}
	woke := make(chan struct{})
	go func() {
		<-c.Room()
		close(woke)
	}()
	if m, ok := c.TryRecv(); !ok || string(m.Data) != "a" {
		t.Fatalf("TryRecv = %q %t", m.Data, ok)
	}
	select {
	case <-woke:
	case <-time.After(time.Minute):
		t.Fatal("Room did not wake after the consumer took a message")
	}
	if ok, err := c.TrySend(data("c")); !ok || err != nil {
		t.Fatalf("TrySend after room appeared = %t, %v", ok, err)
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
}

// Closing a full channel wakes a producer waiting on Room, and its next
// TrySend fails: a waiter never sleeps forever.
func TestRoomWakesOnClose(t *testing.T) {
	c := NewLocalChannel(1)
	if ok, err := c.TrySend(data("a")); !ok || err != nil {
		t.Fatalf("TrySend = %t, %v", ok, err)
	}
	if ok, err := c.TrySend(data("b")); ok || err != nil {
		t.Fatalf("TrySend on a full channel = %t, %v", ok, err)
	}
	res := make(chan error, 1)
	go func() {
		<-c.Room()
		_, err := c.TrySend(data("b"))
		res <- err
	}()
	c.Close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("TrySend after Close = %v, want ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Room did not wake when the channel closed")
	}
	// Send, built on TrySend and Room, fails too.
	if err := c.Send(context.Background(), data("b")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	if err := c.WaitStored(context.Background()); err != nil {
		t.Fatalf("WaitStored = %v", err)
	}
}
