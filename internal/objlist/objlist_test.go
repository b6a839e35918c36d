package objlist

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stalls is a Lister whose first n lists wait for their deadline.
type stalls struct {
	n, calls int
	err      error
}

func (s *stalls) List(ctx context.Context, _ ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error) {
	s.calls++
	if s.calls <= s.n {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	return []*jetstream.ObjectInfo{{ObjectMeta: jetstream.ObjectMeta{Name: "a"}}}, nil
}

func TestListRetriesTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lister    *stalls
		wantCalls int
		wantErr   error
	}{
		{"at once", &stalls{}, 1, nil},
		{"after one stall", &stalls{n: 1}, 2, nil},
		{"after two stalls", &stalls{n: 2}, 3, nil},
		{"every attempt stalls", &stalls{n: Policy.Attempts}, Policy.Attempts, context.DeadlineExceeded},
		{"other errors are not retried", &stalls{err: jetstream.ErrNoObjectsFound}, 1, jetstream.ErrNoObjectsFound},
	} {
		objs, err := List(context.Background(), tc.lister, time.Millisecond, Policy)
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.wantErr)
		}
		if tc.wantErr == nil && len(objs) != 1 {
			t.Errorf("%s: %d objects, want 1", tc.name, len(objs))
		}
		if tc.lister.calls != tc.wantCalls {
			t.Errorf("%s: %d lists, want %d", tc.name, tc.lister.calls, tc.wantCalls)
		}
	}
	// The caller's own deadline ends it without another attempt.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &stalls{n: Policy.Attempts}
	if _, err := List(ctx, s, time.Hour, Policy); !errors.Is(err, context.Canceled) || s.calls != 1 {
		t.Errorf("cancelled caller: %v after %d lists, want context.Canceled after 1", err, s.calls)
	}
}
