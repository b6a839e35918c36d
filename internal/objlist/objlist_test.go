package objlist

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/transient"
)

// watches is a bucket whose first n watches deliver nothing (until their
// context ends), and whose next ones deliver objs, every, one by one, then
// the end marker; or fail with err.
type watches struct {
	n, calls int
	objs     int
	every    time.Duration
	err      error
}

type watcher struct{ ch chan *jetstream.ObjectInfo }

func (w watcher) Updates() <-chan *jetstream.ObjectInfo { return w.ch }
func (w watcher) Stop() error                           { return nil }

func (s *watches) Watch(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.ObjectWatcher, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	w := watcher{make(chan *jetstream.ObjectInfo)}
	if s.calls <= s.n {
		return w, nil // a lost watch: nothing comes
	}
	go func() {
		for range s.objs {
			select {
			case <-time.After(s.every):
			case <-ctx.Done():
				return
			}
			select {
			case w.ch <- &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: "a"}}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case w.ch <- nil:
		case <-ctx.Done():
		}
	}()
	return w, nil
}

func TestListRetries(t *testing.T) {
	for _, tc := range []struct {
		name             string
		watches          *watches
		timeout, stall   time.Duration
		wantCalls, wantN int
		wantErr          error
		within           time.Duration // 0: any time
	}{
		{"at once", &watches{objs: 2}, time.Hour, time.Hour, 1, 2, nil, 0},
		{"an empty bucket", &watches{}, time.Hour, time.Hour, 1, 0, jetstream.ErrNoObjectsFound, 0},
		{"after one timeout", &watches{n: 1, objs: 1}, 20 * time.Millisecond, time.Hour, 2, 1, nil, 0},
		{"after two timeouts", &watches{n: 2, objs: 1}, 20 * time.Millisecond, time.Hour, 3, 1, nil, 0},
		{"every attempt times out", &watches{n: Policy.Attempts}, 20 * time.Millisecond, time.Hour, Policy.Attempts, 0, context.DeadlineExceeded, 0},
		{"other errors are not retried", &watches{err: jetstream.ErrBucketNotFound}, time.Hour, time.Hour, 1, 0, jetstream.ErrBucketNotFound, 0},
		// Regression: a watch lost with a NATS node held the checkpoint
		// driver for a whole attempt's timeout (30 s).
		{"a stalled watch is given up at once", &watches{n: 1, objs: 3}, time.Hour, 20 * time.Millisecond, 2, 3, nil, 10 * time.Second},
		{"slow deliveries are no stall", &watches{objs: 6, every: 15 * time.Millisecond}, time.Hour, 40 * time.Millisecond, 1, 6, nil, 0},
		{"every attempt stalls", &watches{n: 1 << 30}, time.Hour, 5 * time.Millisecond, Policy.Attempts, 0, errStalled, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			objs, err := list(context.Background(), tc.watches, tc.timeout, tc.stall, Policy)
			took := time.Since(start)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if len(objs) != tc.wantN {
				t.Errorf("%d objects, want %d", len(objs), tc.wantN)
			}
			if tc.wantCalls >= 0 && tc.watches.calls != tc.wantCalls {
				t.Errorf("%d watches, want %d", tc.watches.calls, tc.wantCalls)
			}
			if tc.wantCalls < 0 && tc.watches.calls < 2 {
				t.Errorf("%d watches: a stalled one was not tried again", tc.watches.calls)
			}
			if tc.within > 0 && took > tc.within {
				t.Errorf("took %s", took)
			}
		})
	}
	// The caller's own deadline ends it without another attempt.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &watches{n: Policy.Attempts}
	if _, err := List(ctx, s, time.Hour, Policy); !errors.Is(err, context.Canceled) || s.calls != 1 {
		t.Errorf("cancelled caller: %v after %d watches, want context.Canceled after 1", err, s.calls)
	}
}

// keyWatches is a key-value bucket whose first n watches deliver nothing
// (until their context ends), and whose next ones deliver keys, one by
// one, then the end marker; or fail with err.
type keyWatches struct {
	n, calls int
	keys     []string
	err      error
}

type entry struct {
	jetstream.KeyValueEntry
	key string
}

func (e entry) Key() string { return e.key }

type keyWatcher struct{ ch chan jetstream.KeyValueEntry }

func (w keyWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w keyWatcher) Stop() error                             { return nil }

func (s *keyWatches) WatchAll(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	w := keyWatcher{make(chan jetstream.KeyValueEntry)}
	if s.calls <= s.n {
		return w, nil // a lost watch: nothing comes
	}
	go func() {
		for _, k := range s.keys {
			select {
			case w.ch <- entry{key: k}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case w.ch <- nil:
		case <-ctx.Done():
		}
	}()
	return w, nil
}

func TestKeysRetries(t *testing.T) {
	for _, tc := range []struct {
		name           string
		watches        *keyWatches
		timeout, stall time.Duration
		wantCalls      int
		want           []string
		wantErr        error
		within         time.Duration // 0: any time
	}{
		{"at once, sorted, each once", &keyWatches{keys: []string{"b", "a", "b"}}, time.Hour, time.Hour, 1, []string{"a", "b"}, nil, 0},
		{"an empty bucket", &keyWatches{}, time.Hour, time.Hour, 1, nil, jetstream.ErrNoKeysFound, 0},
		{"after one timeout", &keyWatches{n: 1, keys: []string{"a"}}, 20 * time.Millisecond, time.Hour, 2, []string{"a"}, nil, 0},
		{"other errors are not retried", &keyWatches{err: jetstream.ErrBucketNotFound}, time.Hour, time.Hour, 1, nil, jetstream.ErrBucketNotFound, 0},
		// Regression: a watch of the job bucket lost with a NATS node held
		// a coordinator's take-over for its whole 15 s; the coordinator
		// then gave up leading and exited.
		{"a stalled watch is given up at once", &keyWatches{n: 2, keys: []string{"j1", "j2"}}, time.Hour, 20 * time.Millisecond, 3, []string{"j1", "j2"}, nil, 10 * time.Second},
		{"every attempt stalls", &keyWatches{n: 1 << 30}, time.Hour, 5 * time.Millisecond, Policy.Attempts, nil, errStalled, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got, err := keys(context.Background(), tc.watches, tc.timeout, tc.stall, Policy)
			took := time.Since(start)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("keys %q, want %q", got, tc.want)
			}
			if tc.watches.calls != tc.wantCalls {
				t.Errorf("%d watches, want %d", tc.watches.calls, tc.wantCalls)
			}
			if tc.within > 0 && took > tc.within {
				t.Errorf("took %s", took)
			}
		})
	}
	// A stall is a fault of the moment to the caller too, never a short
	// list: the caller tells it from a record it cannot decode.
	_, err := keys(context.Background(), &keyWatches{n: 1 << 30}, time.Hour, 5*time.Millisecond, Policy)
	var ex *transient.Exhausted
	if !errors.As(err, &ex) || !transient.Is(ex.Err) {
		t.Errorf("every attempt stalled: %v, want transient.Exhausted over a fault of the moment", err)
	}
	// The caller's own deadline ends it without another attempt.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &keyWatches{n: Policy.Attempts}
	if _, err := Keys(ctx, s, time.Hour, Policy); !errors.Is(err, context.Canceled) || s.calls != 1 {
		t.Errorf("cancelled caller: %v after %d watches, want context.Canceled after 1", err, s.calls)
	}
}
