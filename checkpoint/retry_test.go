package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/objfault"
	"github.com/wstream/wstream/internal/transient"
)

// fastRetry is transient.Default's number of attempts with waits a test
// does not notice.
var fastRetry = transient.Policy{Attempts: transient.Default.Attempts, Base: time.Millisecond, Max: 5 * time.Millisecond}

// makeFlaky puts an objfault.Flaky under the object backend of s, with
// fastRetry.
func makeFlaky(t *testing.T, s *Storage) *objfault.Flaky {
	t.Helper()
	ob, ok := s.b.(*objBackend)
	if !ok {
		t.Fatalf("storage %s is not in an object store", s.Root())
	}
	f := objfault.NewFlaky(ob.obs)
	f.JS = ob.js
	ob.obs, ob.retry = f, fastRetry
	return f
}

// flakyObjStorage is objStorage whose every request first meets a fault
// of the moment, once per operation and object: whatever a storage does
// must come out as it does on a store that answers at once.
func flakyObjStorage(t *testing.T) backend {
	b := objStorage(t)
	makeFlaky(t, b.s).Once = true
	return b
}

// TestObjectPutRetried: a checkpoint file whose put is refused with 429
// (after its first chunk went to the server) fewer times than the limit is
// stored, intact, with nothing left of the refused attempts; refused as
// many times as the limit, the write fails saying what was refused, which
// object and where, and leaves nothing.
func TestObjectPutRetried(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // several chunks
	for _, refusals := range []int{1, fastRetry.Attempts - 1} {
		b := objStorage(t)
		f := makeFlaky(t, b.s)
		f.Fail(objfault.OpPut, refusals)
		h, err := b.s.WriteFile(1, "tasks/0-1/channels/in-0-0", data)
		if err != nil {
			t.Fatalf("WriteFile refused %d times: %v", refusals, err)
		}
		if f.Faulted(objfault.OpPut) != refusals {
			t.Fatalf("%d puts refused, want %d", f.Faulted(objfault.OpPut), refusals)
		}
		if got := b.read(DirName(1) + "/tasks/0-1/channels/in-0-0"); !bytes.Equal(got, data) {
			t.Fatalf("stored %d bytes after %d refusals, want the %d written", len(got), refusals, len(data))
		}
		if err := b.s.verifyFile(1, h); err != nil {
			t.Fatalf("verifying the file put after %d refusals: %v", refusals, err)
		}
		// Its three chunks and its info: the client purged the chunks
		// each refused attempt had sent.
		if n := streamMsgs(t, b.nc); n != 4 {
			t.Fatalf("the bucket's stream holds %d messages after %d refusals, want 4", n, refusals)
		}
	}

	b := objStorage(t)
	writeTestCheckpoint(t, b.s, 1)
	before := b.names()
	msgs := streamMsgs(t, b.nc)
	f := makeFlaky(t, b.s)
	f.Fail(objfault.OpPut, fastRetry.Attempts)
	_, err := b.s.WriteFile(2, "tasks/0-1/channels/in-0-0", data)
	var ex *transient.Exhausted
	if !errors.As(err, &ex) || ex.Attempts != fastRetry.Attempts || !errors.Is(err, objfault.TooManyRequests) {
		t.Fatalf("WriteFile refused every time = %v; want the 429 after %d attempts", err, fastRetry.Attempts)
	}
	for _, what := range []string{"too many requests", "gave up after", "chk-0000000002/tasks/0-1/channels/in-0-0", "bucket ckpt", "nats-obj://ckpt/jobs/j1"} {
		if !strings.Contains(err.Error(), what) {
			t.Errorf("error %q does not say %q", err, what)
		}
	}
	if errors.Is(err, ErrCorrupt) {
		t.Errorf("a refused put is reported as corruption: %v", err)
	}
	if after := b.names(); !slices.Equal(before, after) {
		t.Fatalf("refused puts changed the storage: %v → %v", before, after)
	}
	// The client purged the chunks each refused attempt had sent.
	if n := streamMsgs(t, b.nc); n != msgs {
		t.Fatalf("the bucket's stream holds %d messages after the refused puts, %d before", n, msgs)
	}
	if ids, err := b.s.Completed(); err != nil || !slices.Equal(ids, []int64{1}) {
		t.Fatalf("Completed = %v, %v; want [1]", ids, err)
	}
}

// streamMsgs counts the messages of the ckpt bucket's stream.
func streamMsgs(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "OBJ_ckpt")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestObjectReadRetried: reads (an object's open, its info, the bucket's
// listing) that time out or are refused fewer times than the limit find
// the latest checkpoint; more, and the checkpoint is unavailable, never
// missing or corrupt, nothing is skipped or deleted, and it is found once
// the store answers.
func TestObjectReadRetried(t *testing.T) {
	for _, op := range []objfault.ObjectOp{objfault.OpGet, objfault.OpInfo, objfault.OpList} {
		t.Run(string(op), func(t *testing.T) {
			b := objStorage(t)
			writeTestCheckpoint(t, b.s, 1)
			writeTestCheckpoint(t, b.s, 2)
			f := makeFlaky(t, b.s)

			f.Fail(op, fastRetry.Attempts-1)
			m, skipped, err := b.s.LatestUsable()
			if err != nil || m.ID != 2 || len(skipped) != 0 {
				t.Fatalf("LatestUsable, %d faults = %v, %v, %v; want checkpoint 2", fastRetry.Attempts-1, m, skipped, err)
			}
			if f.Faulted(op) != fastRetry.Attempts-1 {
				t.Fatalf("%d calls met a fault, want %d", f.Faulted(op), fastRetry.Attempts-1)
			}

			f.Fail(op, 1000)
			m, skipped, err = b.s.LatestUsable()
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoCheckpoint) ||
				errors.Is(err, fs.ErrNotExist) || m != nil || len(skipped) != 0 {
				t.Fatalf("LatestUsable, every %s a fault = %v, %v, %v; want ErrUnavailable, nothing skipped", op, m, skipped, err)
			}
			var ex *transient.Exhausted
			if !errors.As(err, &ex) || ex.Attempts != fastRetry.Attempts || !strings.Contains(err.Error(), "gave up after") {
				t.Fatalf("error %q does not say the attempts were spent", err)
			}
			f.Fail(op, 0)
			if ids, err := b.s.Completed(); err != nil || !slices.Equal(ids, []int64{1, 2}) {
				t.Fatalf("Completed once the store answers = %v, %v; want both kept", ids, err)
			}
			if m, skipped, err := b.s.LatestUsable(); err != nil || m.ID != 2 || len(skipped) != 0 {
				t.Fatalf("LatestUsable once the store answers = %v, %v, %v; want checkpoint 2", m, skipped, err)
			}
		})
	}
}

// TestObjectAnswersNotRetried: not found and damaged bytes are answers:
// asked once, reported as missing and corrupt.
func TestObjectAnswersNotRetried(t *testing.T) {
	b := objStorage(t)
	writeTestCheckpoint(t, b.s, 1)
	f := makeFlaky(t, b.s)
	ob := b.s.b.(*objBackend)
	calls := 0
	ob.obs = &countingStore{ObjectStore: f, gets: &calls}
	if _, err := ob.Open("nothing/here"); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUnavailable) || calls != 1 {
		t.Fatalf("Open of a missing object = %v after %d gets; want fs.ErrNotExist after 1", err, calls)
	}
	m, err := b.s.ReadMetadata(1)
	if err != nil {
		t.Fatal(err)
	}
	calls = 0
	if err := b.s.Verify(m); err != nil {
		t.Fatal(err)
	}
	intact := calls
	b.flip(DirName(1)+"/tasks/0-1/state/000002.sst", 3)
	calls = 0
	if err := b.s.Verify(m); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) || calls > intact {
		t.Fatalf("Verify of a damaged file = %v after %d gets (%d when intact); want ErrCorrupt, no get again", err, calls, intact)
	}
	if n := f.Faulted(objfault.OpGet) + f.Faulted(objfault.OpInfo); n != 0 {
		t.Fatalf("%d faults injected; want none", n)
	}
}

// countingStore counts the gets of an object store: of an object's info
// or its contents.
type countingStore struct {
	jetstream.ObjectStore
	gets *int
}

func (c *countingStore) GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	*c.gets++
	return c.ObjectStore.GetInfo(ctx, name, opts...)
}

func (c *countingStore) Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	*c.gets++
	return c.ObjectStore.Get(ctx, name, opts...)
}

// TestObjectDeleteRetried: a discard whose deletes find no responders
// fewer times than the limit removes the checkpoint.
func TestObjectDeleteRetried(t *testing.T) {
	b := objStorage(t)
	writeTestCheckpoint(t, b.s, 1)
	writeTestCheckpoint(t, b.s, 2)
	f := makeFlaky(t, b.s)
	f.Fail(objfault.OpDelete, fastRetry.Attempts-1)
	if err := b.s.Discard(1); err != nil {
		t.Fatalf("Discard with %d deletes unanswered: %v", fastRetry.Attempts-1, err)
	}
	if ids, err := b.s.Completed(); err != nil || !slices.Equal(ids, []int64{2}) {
		t.Fatalf("Completed = %v, %v; want [2]", ids, err)
	}
	f.Fail(objfault.OpDelete, 1000)
	err := b.s.Discard(2)
	if err == nil || !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("Discard with every delete unanswered = %v; want no responders, attempts spent", err)
	}
}
