package checkpoint

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestWithContextCutsPutShort: a put of a view whose context is cancelled
// while the put sends its chunks ends with the context's error, and stores
// nothing: no object under the name, no chunk left in the bucket's
// stream. The storage the view came from still writes.
func TestWithContextCutsPutShort(t *testing.T) {
	b := objStorage(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := b.s.WithContext(ctx)
	chunk := make([]byte, 128<<10)
	_, err := v.WriteFrom(3, "tasks/0-0/state/canonical", func(w io.Writer) error {
		for i := 0; ; i++ {
			if i == 3 {
				cancel() // some chunks are sent by now
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			if i > 1000 {
				return errors.New("the put went on reading after its context was cancelled")
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a put cut short = %v; want context.Canceled", err)
	}
	if names := b.names(); len(names) != 0 {
		t.Fatalf("a put cut short left %v", names)
	}
	js, _ := jetstream.New(b.nc)
	st, err := js.Stream(context.Background(), "OBJ_ckpt")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the stream holds %d messages after a put cut short (%v)", info.State.Msgs, err)
	}
	// Once done, the view writes nothing more, and says why.
	if _, err := v.WriteFile(3, "tasks/0-0/channels/in-0-0", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write of a cancelled view = %v; want context.Canceled", err)
	}
	writeTestCheckpoint(t, b.s, 4)
	if ids, err := b.s.Completed(); err != nil || len(ids) != 1 || ids[0] != 4 {
		t.Fatalf("Completed after the view's cancel = %v, %v; want [4]", ids, err)
	}
}

// TestWithContextDirectory: a directory's view writes until its context is
// done, then refuses, and leaves nothing.
func TestWithContextDirectory(t *testing.T) {
	b := dirStorage(t)
	ctx, cancel := context.WithCancel(context.Background())
	v := b.s.WithContext(ctx)
	if _, err := v.WriteFile(1, "tasks/0-0/channels/in-0-0", []byte("x")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := v.WriteFile(1, "tasks/0-0/channels/in-0-1", []byte("y")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write of a cancelled view = %v; want context.Canceled", err)
	}
	if names := b.names(); len(names) != 1 {
		t.Fatalf("files %v; want only the first write's", names)
	}
}

// TestWithContextUnreachableStore: against a store that cannot be reached,
// a put tries again for half a minute or more (6 tries, each waiting out
// a request's deadline); cancelling the view's context ends it within the
// try under way.
func TestWithContextUnreachableStore(t *testing.T) {
	nc, srv := startJetStreamServer(t)
	s, err := OpenStorageAt("nats-obj://ckpt/jobs/j1", nc)
	if err != nil {
		t.Fatal(err)
	}
	writeTestCheckpoint(t, s, 1)
	srv.Shutdown()
	srv.WaitForShutdown()
	// The context ends while the put waits for the store, in its first
	// try (a request's deadline is 5 s).
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v := s.WithContext(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := v.WriteFile(2, "tasks/0-0/channels/in-0-0", make([]byte, 300<<10))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a put into a store that is gone succeeded")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a put cut short = %v; want context.DeadlineExceeded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the put still waits %v after it began, its context done after 2 s", time.Since(start))
	}
}
