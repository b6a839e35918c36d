package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
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

// lostWatchKV is a bucket whose first watch (a listing's) is lost, as one
// made on a NATS node that dies as it is made: it delivers nothing. Later
// watches, and every other call, reach the bucket bucket.
type lostWatchKV struct {
	jetstream.KeyValue
	mu      sync.Mutex
	watches int
}

type lostWatch struct{ ch chan jetstream.KeyValueEntry }

func (w lostWatch) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w lostWatch) Stop() error                             { return nil }

// lost counts a watch and reports whether it is the first.
func (kv *lostWatchKV) lost() bool {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.watches++
	return kv.watches == 1
}

func (kv *lostWatchKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if kv.lost() {
		return lostWatch{make(chan jetstream.KeyValueEntry)}, nil
	}
	return kv.KeyValue.WatchAll(ctx, opts...)
}

func (kv *lostWatchKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	if kv.lost() {
		return lostLister{ctx}, nil
	}
	return kv.KeyValue.ListKeys(ctx, opts...)
}

// lostLister is kv.ListKeys over a lost watch: its keys end, none given,
// when its context does.
type lostLister struct{ ctx context.Context }

func (l lostLister) Keys() <-chan string {
	ch := make(chan string)
	go func() {
		<-l.ctx.Done()
		close(ch)
	}()
	return ch
}

func (lostLister) Stop() error { return nil }

// TestRunningSpecsLostWatch: a take-over whose listing of the job bucket
// is lost (its NATS node died) gives that listing up after objlist.Stall
// and lists again, finding every running job within the take-over's 15 s.
// Before, it waited for the whole 15 s and then found no job at all.
func TestRunningSpecsLostWatch(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "specs"})
	if err != nil {
		t.Fatal(err)
	}
	for id, state := range map[string]string{"a": transport.JobRunning, "b": transport.JobFinished, "c": transport.JobRunning} {
		b, _ := json.Marshal(&JobSpec{JobID: id, State: state})
		if _, err := bucket.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	kv := &lostWatchKV{KeyValue: bucket}
	tctx, tcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer tcancel()
	start := time.Now()
	specs, err := runningSpecs(tctx, kv)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("runningSpecs: %v", err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.JobID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "c"}) {
		t.Fatalf("running jobs %q after %s, want [a c]", ids, took)
	}
	if kv.watches < 2 {
		t.Fatalf("%d watches: the lost one was not given up", kv.watches)
	}
	if took > 12*time.Second {
		t.Fatalf("took %s: the lost watch held the take-over", took)
	}

	// A record that does not decode is no fault of the moment: an error
	// at once, not a listing tried again.
	if _, err := bucket.Put(ctx, "d", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	kv = &lostWatchKV{KeyValue: bucket, watches: 1}
	_, err = runningSpecs(tctx, kv)
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || transient.Is(err) || kv.watches != 2 {
		t.Fatalf("a corrupt record: %v after %d watches; want a JSON error, not a fault of the moment, after one", err, kv.watches-1)
	}
}
