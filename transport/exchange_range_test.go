package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
)

// readBack reads r and compares it with want.
func readBack(t *testing.T, js jetstream.JetStream, r *checkpoint.ChannelRange, want [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckRange(ctx, js, *r); err != nil {
		t.Fatalf("CheckRange of a readable range: %v", err)
	}
	got, err := ReadRange(ctx, js, *r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("range holds %d batches, want %d", len(got), len(want))
	}
	for k := range got {
		if !bytes.Equal(got[k], want[k]) {
			t.Fatalf("batch %d of the range: %q, want %q", k, got[k], want[k])
		}
	}
}

// lost fails unless reading r fails with an error naming its stream,
// subject and sequences.
func lost(t *testing.T, js jetstream.JetStream, r *checkpoint.ChannelRange) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ReadRange(ctx, js, *r)
	if err == nil {
		t.Fatalf("range %d-%d still readable", r.First, r.Last)
	}
	// CheckRange, which a restore uses to choose its checkpoint, sees it too.
	cerr := CheckRange(ctx, js, *r)
	if cerr == nil {
		t.Fatalf("CheckRange: range %d-%d still there", r.First, r.Last)
	}
	for _, e := range []error{err, cerr} {
		for _, s := range []string{r.Stream, r.Subject, "lost"} {
			if !strings.Contains(e.Error(), s) {
				t.Fatalf("error %q does not name %q", e, s)
			}
		}
	}
}

func TestExchangeOvertakeRange(t *testing.T) {
	prod, cons, js := exchangePair(t, "ranges", 16)
	out, in := channelPair(t, prod, cons)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := NewInputGate([]InputChannel{in})
	take := func(m Message) bool { return m.Kind == KindBarrier }
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := out.Send(ctx, Message{Kind: KindData, Data: batch(i)}); err != nil {
				t.Fatal(err)
			}
			if i == 3 {
				if err := out.Send(ctx, Message{Kind: KindWatermark, Watermark: 7}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	recv := func(from, to int) {
		t.Helper()
		for i := from; i < to; {
			_, m, err := g.nextMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind != KindData {
				continue
			}
			if !bytes.Equal(m.Data, batch(i)) {
				t.Fatalf("batch %d: %q", i, m.Data)
			}
			i++
		}
	}
	barrier := func(id int64) *checkpoint.ChannelRange {
		t.Helper()
		r, err := out.OvertakeRange(Message{Kind: KindBarrier, Checkpoint: id})
		if err != nil {
			t.Fatal(err)
		}
		waitPriority(t, in, id)
		if _, m, ok := g.TakePriority(take); !ok || m.Checkpoint != id {
			t.Fatalf("barrier %d not at the head: %+v %v", id, m, ok)
		}
		return r
	}
	batches := func(from, to int) [][]byte {
		var out [][]byte
		for i := from; i < to; i++ {
			out = append(out, batch(i))
		}
		return out
	}
	purge := func() {
		t.Helper()
		if err := in.Purge(ctx); err != nil {
			t.Fatal(err)
		}
	}

	send(0, 6)
	recv(0, 2)
	r5 := barrier(5)
	if r5 == nil || r5.Messages != 4 || r5.Subject != out.subject || r5.Stream != DataStream("ranges") {
		t.Fatalf("range of checkpoint 5: %+v, want 4 batches of %s", r5, out.subject)
	}
	var size int64
	for _, b := range batches(2, 6) {
		size += int64(len(b))
	}
	if r5.Bytes != size || r5.Last <= r5.First {
		t.Fatalf("range of checkpoint 5: %+v, want %d bytes", r5, size)
	}
	if f := in.Floor(); f > r5.First {
		t.Fatalf("floor %d passes the range's first message %d", f, r5.First)
	}
	// The overtaken data is still delivered after the barrier; handing it
	// out does not purge it while checkpoint 5 holds it.
	recv(2, 6)
	purge()
	readBack(t, js, r5, batches(2, 6))
	st, err := js.Stream(ctx, DataStream("ranges"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, 1); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the first message, handed out before the barrier, was not purged: %v", err)
	}
	// Aborting checkpoint 5 releases its range.
	in.CheckpointAborted(5)
	if f := in.Floor(); f <= r5.Last {
		t.Fatalf("floor %d after the abort still holds the range %d-%d", f, r5.First, r5.Last)
	}
	purge()
	lost(t, js, r5)

	// A completed checkpoint's range is kept until a later one completes.
	send(6, 9)
	r6 := barrier(6)
	if r6 == nil || r6.Messages != 3 {
		t.Fatalf("range of checkpoint 6: %+v, want 3 batches", r6)
	}
	recv(6, 9)
	in.CheckpointComplete(6)
	purge()
	readBack(t, js, r6, batches(6, 9))
	if r7 := barrier(7); r7 != nil {
		t.Fatalf("a barrier that overtook nothing has range %+v", r7)
	}
	in.CheckpointComplete(7)
	purge()
	lost(t, js, r6)
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
}

// waitPriority polls until in has taken barrier id ahead of its queue.
func waitPriority(t *testing.T, in *JetStreamInput, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in.mu.Lock()
		ok := len(in.q) > 0 && in.q[0].m.Kind == KindBarrier && in.q[0].m.Checkpoint == id
		in.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("barrier %d not taken within 10s", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// A range survives a restart of the server: the data stream is in files.
func TestDataStreamRangeSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := StartEmbedded(EmbeddedOptions{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ConnectInProcess(s, "a")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateDataStream(ctx, js, "restart", 1); err != nil {
		t.Fatal(err)
	}
	subject := DataSubject("restart", 1, 0, 0, 0)
	r := checkpoint.ChannelRange{Stream: DataStream("restart"), Subject: subject}
	for i := 0; i < 3; i++ {
		ack, err := js.Publish(ctx, subject, encodeFrame(Message{Kind: KindData, Data: batch(i)}, uint64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if r.First == 0 {
			r.First = ack.Sequence
		}
		r.Last = ack.Sequence
		r.Messages++
		r.Bytes += int64(len(batch(i)))
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	s, err = StartEmbedded(EmbeddedOptions{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err = ConnectInProcess(s, "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// Creating the stream again (a new attempt) keeps what it holds.
	if err := CreateDataStream(ctx, js, "restart", 1); err != nil {
		t.Fatal(err)
	}
	readBack(t, js, &r, [][]byte{batch(0), batch(1), batch(2)})
	bad := r
	bad.Messages++
	if _, err := ReadRange(ctx, js, bad); err == nil {
		t.Fatal("a range read back with fewer batches than recorded")
	}
	if err := DeleteDataStream(ctx, js, "restart"); err != nil {
		t.Fatal(err)
	}
	lost(t, js, &r)
}
