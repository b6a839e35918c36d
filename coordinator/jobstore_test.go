package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
)

// failingKV is a bucket whose writes fail, as when the NATS server is away.
type failingKV struct{ jetstream.KeyValue }

func (failingKV) Put(context.Context, string, []byte) (uint64, error) {
	return 0, errors.New("no NATS server")
}

// TestJobStoreWait: wait returns once the job's newest spec is in the
// bucket, and gives up after its bound when the bucket cannot be written.
func TestJobStoreWait(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "specs"})
	if err != nil {
		t.Fatal(err)
	}
	s := newJobStore(kv, slog.New(slog.DiscardHandler))
	defer s.close(time.Second)
	for _, state := range []string{"running", "finished"} {
		s.put(&JobSpec{JobID: "j", State: state})
		if !s.wait("j", time.Minute) {
			t.Fatalf("%s: the spec was not stored", state)
		}
		got, err := getSpec(ctx, kv, "j")
		if err != nil || got.State != state {
			t.Fatalf("bucket holds %+v, %v once wait returned; want state %s", got, err, state)
		}
	}
	if !s.wait("other", time.Minute) {
		t.Fatal("wait for a job with nothing pending did not return at once")
	}

	f := newJobStore(failingKV{kv}, slog.New(slog.DiscardHandler))
	f.put(&JobSpec{JobID: "j", State: "finished"})
	start := time.Now()
	if f.wait("j", 100*time.Millisecond) {
		t.Fatal("wait reported a spec stored in a bucket that cannot be written")
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("wait gave up after %v, before its bound", el)
	}
	f.close(0)
	if f.wait("j", time.Minute) {
		t.Fatal("wait on a closed store reported the spec stored")
	}
}
