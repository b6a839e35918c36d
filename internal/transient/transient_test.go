package transient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tooMany is the answer of a JetStream server whose stream's inbound queue
// is full, as the client decodes it.
var tooMany = &jetstream.APIError{Code: 429, ErrorCode: 10167, Description: "too many requests"}

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{tooMany, true},
		{fmt.Errorf("put object x: %w", tooMany), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("get: %w", nats.ErrTimeout), true},
		{jetstream.ErrAsyncPublishTimeout, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrConnectionReconnecting, true},
		{nil, false},
		{jetstream.ErrObjectNotFound, false},
		{jetstream.ErrDigestMismatch, false},
		{jetstream.ErrBadObjectMeta, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}, false},
		{jetstream.ErrJetStreamNotEnabled, false},
		{fs.ErrNotExist, false},
		{nats.ErrConnectionClosed, false},
		{context.Canceled, false},
		{Permanent(fmt.Errorf("reading the source: %w", context.DeadlineExceeded)), false},
	} {
		if got := Is(tc.err); got != tc.want {
			t.Errorf("Is(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// fast is a policy whose waits a test does not notice.
var fast = Policy{Attempts: 4, Base: time.Millisecond, Max: 4 * time.Millisecond}

// failing returns an operation whose first n calls fail with err, and the
// count of its calls.
func failing(n int, err error) (func(context.Context) error, *int) {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= n {
			return err
		}
		return nil
	}, &calls
}

func TestDo(t *testing.T) {
	permanent := errors.New("not found")
	marked := Permanent(tooMany)
	for _, tc := range []struct {
		name      string
		fails     int
		err       error
		wantCalls int
		wantErr   error
	}{
		{"at once", 0, tooMany, 1, nil},
		{"after one fault", 1, tooMany, 2, nil},
		{"after attempts-1 faults", fast.Attempts - 1, nats.ErrTimeout, fast.Attempts, nil},
		{"every attempt a fault", fast.Attempts, tooMany, fast.Attempts, tooMany},
		{"an answer is not tried again", 1, permanent, 1, permanent},
		{"a fault marked permanent is not tried again", 1, marked, 1, tooMany},
	} {
		op, calls := failing(tc.fails, tc.err)
		err := Do(context.Background(), fast, op)
		if *calls != tc.wantCalls {
			t.Errorf("%s: %d calls, want %d", tc.name, *calls, tc.wantCalls)
		}
		if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.wantErr)
		}
		var ex *Exhausted
		if gave := errors.As(err, &ex); gave != (tc.name == "every attempt a fault") {
			t.Errorf("%s: error %v: exhausted %v", tc.name, err, gave)
		} else if gave && (ex.Attempts != fast.Attempts || !strings.Contains(err.Error(), "too many requests") ||
			!strings.Contains(err.Error(), fmt.Sprintf("gave up after %d attempts", fast.Attempts))) {
			t.Errorf("%s: error %q does not say what and how often", tc.name, err)
		}
	}
}

// TestDoBacksOff: the waits between attempts grow from Base to Max, each
// between half its backoff and the whole of it.
func TestDoBacksOff(t *testing.T) {
	p := Policy{Attempts: 5, Base: 20 * time.Millisecond, Max: 60 * time.Millisecond}
	var at []time.Time
	err := Do(context.Background(), p, func(context.Context) error {
		at = append(at, time.Now())
		return tooMany
	})
	if !errors.Is(err, tooMany) || len(at) != 5 {
		t.Fatalf("Do = %v after %d calls", err, len(at))
	}
	// Backoffs 20, 40, 60, 60 ms: each wait is at least half of it (a
	// busy machine only makes them longer).
	for i, least := range []time.Duration{10, 20, 30, 30} {
		if gap := at[i+1].Sub(at[i]); gap < least*time.Millisecond {
			t.Errorf("wait %d was %v, want at least %v", i, gap, least*time.Millisecond)
		}
	}
}

// TestDoStopsWithItsContext: a cancelled caller gets no more attempts,
// and its own deadline is not a fault of the moment to ride out.
func TestDoStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Do(ctx, Policy{Attempts: 10, Base: time.Hour, Max: time.Hour}, func(context.Context) error {
		calls++
		cancel()
		return tooMany
	})
	if calls != 1 || !errors.Is(err, tooMany) {
		t.Fatalf("cancelled during the first attempt: %d calls, %v", calls, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	calls = 0
	err = Do(ctx, Policy{Attempts: 10, Base: time.Millisecond, Max: time.Millisecond}, func(ctx context.Context) error {
		calls++
		<-ctx.Done()
		return ctx.Err()
	})
	if calls != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline passed: %d calls, %v", calls, err)
	}
}
