// Package objfault wraps a real JetStream object store so that its
// requests meet faults of the moment (429, timeouts, no responders) as the
// real client meets them, deterministically: for tests of what retries
// them.
package objfault

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TooManyRequests is what the client makes of the answer of a JetStream
// server whose stream's inbound queue is full (a server that syncs every
// write, on a busy machine): a fault of the moment.
var TooManyRequests = &jetstream.APIError{Code: 429, ErrorCode: 10167, Description: "too many requests"}

// ObjectOp names a request of the object store that a Flaky
// faults.
type ObjectOp string

// The requests a Flaky faults, and how each fails.
const (
	// OpPut is refused with TooManyRequests after its first chunk went to
	// the server, which the client then purges (PutBytes and PutString
	// are puts too).
	OpPut ObjectOp = "put"
	// OpPutAfterInfo is refused with TooManyRequests after the object's
	// info was stored and its chunks purged: the name is left pointing at
	// chunks that are gone. nats.go leaves this when the server refuses a
	// chunk whose publish was not yet acknowledged when the info went out.
	// Only a Flaky with JS set injects it.
	OpPutAfterInfo ObjectOp = "put-after-info"
	// OpGet times out: the real client is called with a deadline that
	// passed.
	OpGet ObjectOp = "get"
	// OpInfo (GetInfo) is answered TooManyRequests.
	OpInfo ObjectOp = "info"
	// OpList times out as OpGet does.
	OpList ObjectOp = "list"
	// OpDelete finds no responders.
	OpDelete ObjectOp = "delete"
)

// Flaky is a real JetStream object store whose requests first
// meet faults of the moment, each as the real client meets it (see the
// ObjectOp constants). Fail says how many calls of an operation fail before
// one goes through; with Once set instead, exactly the first call of each
// operation on each object fails, however many callers there are, so that
// any caller that tries again once gets through.
type Flaky struct {
	jetstream.ObjectStore
	Once bool
	// JS is the JetStream of the store, through which OpPutAfterInfo
	// purges the chunks of the object it stored.
	JS jetstream.JetStream

	mu    sync.Mutex
	fail  map[ObjectOp]int
	seen  map[string]bool // with Once: op and object that failed already
	calls map[ObjectOp]int
}

// NewFlaky wraps obs; no request fails until Fail or Once says.
func NewFlaky(obs jetstream.ObjectStore) *Flaky {
	return &Flaky{ObjectStore: obs, fail: map[ObjectOp]int{}, seen: map[string]bool{}, calls: map[ObjectOp]int{}}
}

// Fail makes the next n calls of op fail.
func (f *Flaky) Fail(op ObjectOp, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = n
}

// Faulted returns how many calls of op met a fault.
func (f *Flaky) Faulted(op ObjectOp) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// hit says whether this call of op on name meets a fault, and counts it.
func (f *Flaky) hit(op ObjectOp, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.Once:
		key := string(op) + " " + name
		if f.seen[key] {
			return false
		}
		f.seen[key] = true
	case f.fail[op] > 0:
		f.fail[op]--
	default:
		return false
	}
	f.calls[op]++
	return true
}

// expired is a context whose deadline passed: the real client's request
// times out at once.
func expired(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, time.Now().Add(-time.Second))
}

func (f *Flaky) Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	if f.JS != nil && f.hit(OpPutAfterInfo, meta.Name) {
		return nil, f.putAfterInfo(ctx, meta, r)
	}
	if f.hit(OpPut, meta.Name) {
		r = &refusedAfter{r: r, n: 128 << 10}
	}
	return f.ObjectStore.Put(ctx, meta, r)
}

func (f *Flaky) PutBytes(ctx context.Context, name string, data []byte) (*jetstream.ObjectInfo, error) {
	return f.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data))
}

func (f *Flaky) PutString(ctx context.Context, name string, data string) (*jetstream.ObjectInfo, error) {
	return f.PutBytes(ctx, name, []byte(data))
}

// putAfterInfo stores the object, then purges its chunks, as the client
// does when a chunk's publish comes back refused after the info was
// stored, and returns that refusal.
func (f *Flaky) putAfterInfo(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) error {
	info, err := f.ObjectStore.Put(ctx, meta, r)
	if err != nil {
		return err
	}
	st, err := f.JS.Stream(ctx, "OBJ_"+info.Bucket)
	if err != nil {
		return err
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$O."+info.Bucket+".C."+info.NUID)); err != nil {
		return err
	}
	return TooManyRequests
}

// refusedAfter reads n bytes of r, then fails with TooManyRequests: the
// put has sent its first chunk when it meets the fault.
type refusedAfter struct {
	r io.Reader
	n int
}

func (a *refusedAfter) Read(p []byte) (int, error) {
	if a.n <= 0 {
		return 0, TooManyRequests
	}
	n, err := a.r.Read(p[:min(len(p), a.n)])
	a.n -= n
	if err == io.EOF {
		// Shorter than a chunk: refused all the same.
		return n, TooManyRequests
	}
	return n, err
}

func (f *Flaky) Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	if f.hit(OpGet, name) {
		ectx, cancel := expired(ctx)
		defer cancel()
		return f.ObjectStore.Get(ectx, name, opts...)
	}
	return f.ObjectStore.Get(ctx, name, opts...)
}

func (f *Flaky) GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	if f.hit(OpInfo, name) {
		return nil, TooManyRequests
	}
	return f.ObjectStore.GetInfo(ctx, name, opts...)
}

func (f *Flaky) List(ctx context.Context, opts ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error) {
	if f.hit(OpList, "") {
		ectx, cancel := expired(ctx)
		defer cancel()
		return f.ObjectStore.List(ectx, opts...)
	}
	return f.ObjectStore.List(ctx, opts...)
}

// Watch is how a list reads the bucket (internal/objlist): it meets the
// list's faults.
func (f *Flaky) Watch(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.ObjectWatcher, error) {
	if f.hit(OpList, "") {
		ectx, cancel := expired(ctx)
		defer cancel()
		return f.ObjectStore.Watch(ectx, opts...)
	}
	return f.ObjectStore.Watch(ctx, opts...)
}

func (f *Flaky) Delete(ctx context.Context, name string) error {
	if f.hit(OpDelete, name) {
		return nats.ErrNoResponders
	}
	return f.ObjectStore.Delete(ctx, name)
}

// PutIncomplete stores data as name in obs the way a put refused after its
// info was stored leaves it: the info stays, its chunks are purged. It
// fails the test unless the put was refused so.
func PutIncomplete(t testing.TB, ctx context.Context, obs jetstream.ObjectStore, js jetstream.JetStream, name string, data []byte) {
	t.Helper()
	f := NewFlaky(obs)
	f.JS = js
	f.Fail(OpPutAfterInfo, 1)
	if _, err := f.PutBytes(ctx, name, data); !errors.Is(err, TooManyRequests) {
		t.Fatalf("the put refused after its record = %v", err)
	}
}
