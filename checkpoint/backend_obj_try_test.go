package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/transient"
)

// TestObjectRequestTries: a request about an object that gets no answer is
// asked again with the next, longer deadline (regression: a delete sent to a stream
// leader as its NATS node died held the checkpoint driver for 30 s); an
// answer, an error included, ends it.
func TestObjectRequestTries(t *testing.T) {
	b := &objBackend{retry: transient.Policy{Attempts: 3, Base: time.Millisecond, Max: time.Millisecond}}
	saved := objectOpTries
	objectOpTries = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	defer func() { objectOpTries = saved }()
	for _, tc := range []struct {
		name      string
		lost      int   // tries that get no answer
		answer    error // then
		wantCalls int
		wantErr   error
	}{
		{"answered at once", 0, nil, 1, nil},
		{"a lost request asked again", 1, nil, 2, nil},
		{"two lost", 2, nil, 3, nil},
		{"never answered", 3, nil, 3, context.DeadlineExceeded},
		{"an error answer is not asked again", 0, jetstream.ErrObjectNotFound, 1, jetstream.ErrObjectNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var budgets []time.Duration
			err := b.request(func(ctx context.Context) error {
				calls++
				d, _ := ctx.Deadline()
				budgets = append(budgets, time.Until(d))
				if calls <= tc.lost {
					<-ctx.Done()
					return ctx.Err()
				}
				return tc.answer
			})
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("%d tries, want %d", calls, tc.wantCalls)
			}
			for i, d := range budgets {
				if d > objectOpTries[i] {
					t.Errorf("try %d had %s, more than its deadline of %s", i+1, d, objectOpTries[i])
				}
				if i > 0 && d <= objectOpTries[i-1]/2 {
					t.Errorf("try %d had %s: its deadline did not grow", i+1, d)
				}
			}
		})
	}
	// A stream that does not answer is asked again as well.
	calls := 0
	if err := b.request(func(context.Context) error {
		if calls++; calls == 1 {
			return jetstream.ErrNoStreamResponse
		}
		return nil
	}); err != nil || calls != 2 {
		t.Errorf("after no stream response: %v, %d tries", err, calls)
	}
}
