package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// exchangePair starts an embedded JetStream server, creates job's data
// stream and returns two exchanges on separate connections, as two workers
// have.
func exchangePair(t *testing.T, job string, window int) (prod, cons *Exchange, js jetstream.JetStream) {
	t.Helper()
	s, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	conn := func(name string) *nats.Conn {
		nc, err := ConnectInProcess(s, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ncA, ncB := conn("a"), conn("b")
	js, err = jetstream.New(ncA)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateDataStream(ctx, js, job, 1); err != nil {
		t.Fatal(err)
	}
	mk := func(nc *nats.Conn) *Exchange {
		x, err := NewExchange(context.Background(), ExchangeConfig{NATS: nc, Job: job, Attempt: 1, Window: window, Probe: 20 * time.Millisecond, OvertakeTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(x.Close)
		return x
	}
	return mk(ncA), mk(ncB), js
}

func channelPair(t *testing.T, prod, cons *Exchange) (*JetStreamOutput, *JetStreamInput) {
	t.Helper()
	out, err := prod.NewOutput(3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	in, err := cons.NewInput(3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return out, in
}

func batch(i int) []byte {
	return []byte(fmt.Sprintf("batch-%04d-%s", i, bytes.Repeat([]byte{'x'}, i%50)))
}

// waitLen polls until in holds n received messages.
func waitLen(t *testing.T, in *JetStreamInput, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for in.Len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("consumer holds %d messages after 10s, want %d", in.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestExchangeOrderAndInBand(t *testing.T) {
	prod, cons, _ := exchangePair(t, "order", 8)
	out, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want []Message
	for i := 0; i < 300; i++ {
		want = append(want, Message{Kind: KindData, Data: batch(i)})
		switch {
		case i%37 == 5:
			want = append(want, Message{Kind: KindWatermark, Watermark: int64(i * 1000)})
		case i%91 == 7:
			want = append(want, Message{Kind: KindBarrier, Checkpoint: int64(i), CheckpointKind: 1, Timestamp: 1234567})
		case i == 150:
			want = append(want, Message{Kind: KindCancel, Checkpoint: 42})
		}
	}
	want = append(want, Message{Kind: KindEnd})
	sendErr := make(chan error, 1)
	go func() {
		for _, m := range want {
			if err := out.Send(ctx, m); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	g := NewInputGate([]InputChannel{in})
	var got []Message
	for g.Open() > 0 {
		_, m, err := g.nextMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("received %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.Kind != g.Kind || !bytes.Equal(w.Data, g.Data) || w.Watermark != g.Watermark ||
			w.Checkpoint != g.Checkpoint || w.CheckpointKind != g.CheckpointKind || w.Timestamp != g.Timestamp {
			t.Fatalf("message %d: got %+v, want %+v", i, g, w)
		}
	}
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	if n, b := out.Stats(); n != int64(len(want)) || b <= 0 {
		t.Fatalf("stats: %d messages, %d bytes", n, b)
	}
}

func TestExchangeBackpressure(t *testing.T) {
	const window = 4
	prod, cons, _ := exchangePair(t, "backpressure", window)
	out, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < window; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The window is full: TrySend enqueues nothing.
	if ok, err := out.TrySend(Message{Kind: KindData, Data: batch(99)}); ok || err != nil {
		t.Fatalf("TrySend on a full window = %t, %v", ok, err)
	}
	waitLen(t, in, window)
	// A blocked Send resumes when the consumer reads.
	sent := make(chan error, 1)
	go func() { sent <- out.Send(ctx, Message{Kind: KindData, Data: batch(window)}) }()
	select {
	case err := <-sent:
		t.Fatalf("Send returned %v while the consumer read nothing", err)
	case <-time.After(100 * time.Millisecond):
	}
	if in.Len() != window {
		t.Fatalf("consumer holds %d messages, more than the window of %d", in.Len(), window)
	}
	for i := 0; i < window; i++ {
		m, ok := in.TryRecv()
		if !ok || !bytes.Equal(m.Data, batch(i)) {
			t.Fatalf("message %d: %q %v", i, m.Data, ok)
		}
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Send still blocked 10s after the consumer read the window")
	}
	waitLen(t, in, 1)
	if m, _ := in.TryRecv(); !bytes.Equal(m.Data, batch(window)) {
		t.Fatalf("after the wait: %q", m.Data)
	}
	// The message TrySend refused was never sent.
	if in.Len() != 0 {
		t.Fatalf("%d unexpected messages", in.Len())
	}
	// A cancelled context ends a blocked send too.
	for i := 0; i < window; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := out.Send(cctx, Message{Kind: KindData, Data: batch(0)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context: %v", err)
	}
}

func TestExchangeOvertake(t *testing.T) {
	prod, cons, _ := exchangePair(t, "overtake", 16)
	out, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prio := make(chan struct{}, 1)
	g := NewInputGate([]InputChannel{in})
	g.NotifyPriority(prio)
	for i := 0; i < 6; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if err := out.Send(ctx, Message{Kind: KindWatermark, Watermark: 7}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitLen(t, in, 7)
	for i := 0; i < 2; i++ {
		if _, m, err := g.nextMessage(ctx); err != nil || !bytes.Equal(m.Data, batch(i)) {
			t.Fatalf("message %d: %q %v", i, m.Data, err)
		}
	}
	barrier := Message{Kind: KindBarrier, Checkpoint: 5, CheckpointKind: 0, Timestamp: 99}
	over, err := out.Overtake(barrier)
	if err != nil {
		t.Fatal(err)
	}
	if len(over) != 4 {
		t.Fatalf("overtook %d batches, want 4", len(over))
	}
	for k, b := range over {
		if !bytes.Equal(b, batch(2+k)) {
			t.Fatalf("overtaken batch %d: %q", k, b)
		}
	}
	select {
	case <-prio:
	case <-time.After(10 * time.Second):
		t.Fatal("no priority signal")
	}
	take := func(m Message) bool { return m.Kind == KindBarrier }
	if _, m, ok := g.TakePriority(take); !ok || m.Kind != KindBarrier || m.Checkpoint != 5 || m.Timestamp != 99 {
		t.Fatalf("priority message: %+v %v", m, ok)
	}
	// Sent after the barrier: delivered after what it overtook.
	if err := out.Send(ctx, Message{Kind: KindData, Data: batch(6)}); err != nil {
		t.Fatal(err)
	}
	var rest []Message
	for len(rest) < 6 {
		_, m, err := g.nextMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, m)
	}
	wantKinds := []Kind{KindData, KindData, KindWatermark, KindData, KindData, KindData}
	for k, m := range rest {
		if m.Kind != wantKinds[k] {
			t.Fatalf("after the barrier, message %d is %s, want %s", k, m.Kind, wantKinds[k])
		}
	}
	if !bytes.Equal(rest[5].Data, batch(6)) {
		t.Fatalf("last: %q", rest[5].Data)
	}
	// Everything is taken: nothing left to overtake.
	if over, err := out.Overtake(Message{Kind: KindBarrier, Checkpoint: 6}); err != nil || len(over) != 0 {
		t.Fatalf("second overtake: %d batches, %v", len(over), err)
	}
	if _, m, ok := g.TakePriority(take); !ok || m.Checkpoint != 6 {
		t.Fatalf("second barrier: %+v %v", m, ok)
	}
	// A cancel marker overtakes too and returns nothing.
	if over, err := out.Overtake(Message{Kind: KindCancel, Checkpoint: 6}); err != nil || over != nil {
		t.Fatalf("cancel: %v %v", over, err)
	}
	if _, m, ok := g.TakePriority(func(m Message) bool { return m.Kind == KindCancel }); !ok || m.Checkpoint != 6 {
		t.Fatalf("cancel marker: %+v %v", m, ok)
	}
}

// A producer blocked by a full window overtakes it for an unaligned
// checkpoint: the barrier reaches the consumer at once.
func TestExchangeOvertakeFullWindow(t *testing.T) {
	const window = 4
	prod, cons, _ := exchangePair(t, "overtakefull", window)
	out, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < window; i++ {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := out.TrySend(Message{Kind: KindData, Data: batch(window)}); ok || err != nil {
		t.Fatalf("TrySend on a full window = %t, %v", ok, err)
	}
	over, err := out.Overtake(Message{Kind: KindBarrier, Checkpoint: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(over) != window {
		t.Fatalf("overtook %d, want %d", len(over), window)
	}
	m, ok := in.TryRecvPriority(func(m Message) bool { return m.Kind == KindBarrier })
	if !ok || m.Checkpoint != 1 {
		t.Fatalf("barrier not at the head: %+v %v", m, ok)
	}
	waitLen(t, in, window)
	for i := 0; i < window; i++ {
		if m, _ := in.TryRecv(); !bytes.Equal(m.Data, batch(i)) {
			t.Fatalf("message %d after the barrier: %q", i, m.Data)
		}
	}
}

func TestDataStreamLifecycle(t *testing.T) {
	_, _, js := exchangePair(t, "life", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, DataStream("life")); err != nil {
		t.Fatal(err)
	}
	if err := DeleteDataStream(ctx, js, "life"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, DataStream("life")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream after delete: %v", err)
	}
	if err := DeleteDataStream(ctx, js, "life"); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	if _, err := NewExchange(ctx, ExchangeConfig{NATS: js.Conn(), Job: "life"}); err == nil {
		t.Fatal("an exchange opened without its stream")
	}
}

func TestFrameDecodeRejects(t *testing.T) {
	for _, b := range [][]byte{nil, {1, 2}, append([]byte{byte(KindWatermark)}, make([]byte, 8+3)...), append([]byte{99}, make([]byte, 8)...)} {
		if _, _, err := decodeFrame(b); err == nil {
			t.Fatalf("decoded %v", b)
		}
	}
}

// TestExchangeLagAndInFlight checks the figures the workers' metrics read:
// the producer's messages not taken yet, and the age of the oldest message
// waiting at the consumer, which is 0 once the consumer has taken all.
func TestExchangeLagAndInFlight(t *testing.T) {
	prod, cons, _ := exchangePair(t, "lag", 8)
	out, in := channelPair(t, prod, cons)
	if in.Lag() != 0 || out.InFlight() != 0 {
		t.Fatalf("before any message: lag %v, in flight %d", in.Lag(), out.InFlight())
	}
	ctx := context.Background()
	for i := range 3 {
		if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitLen(t, in, 3)
	if n := out.InFlight(); n != 3 {
		t.Errorf("in flight %d, want 3", n)
	}
	// The oldest waiting message ages while nobody takes it.
	deadline := time.Now().Add(10 * time.Second)
	for in.Lag() < 5*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("lag %v after 10s with three messages waiting", in.Lag())
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 3 {
		m, ok := in.TryRecv()
		if !ok || string(m.Data) != string(batch(i)) {
			t.Fatalf("message %d: %v %q", i, ok, m.Data)
		}
	}
	if l := in.Lag(); l != 0 {
		t.Errorf("lag %v with nothing waiting, want 0", l)
	}
	// Taking the last message credits the producer.
	deadline = time.Now().Add(10 * time.Second)
	for out.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d after the consumer took everything", out.InFlight())
		}
		time.Sleep(time.Millisecond)
	}
}
