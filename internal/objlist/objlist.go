// Package objlist lists a JetStream bucket, the objects of an object store
// or the keys of a key-value bucket, trying again an attempt that timed out
// or stalled.
//
// nats.go lists a bucket by watching it: the list ends when the server has
// delivered the latest entry of every object or key, which it tells by a
// count of pending messages, or at once when a first probe finds the
// bucket empty. On a loaded server an attempt can outlast its deadline,
// and when that probe fails for any other reason than "no message", a
// watch of an empty object store waits for a delivery that never comes.
// The same wait follows a NATS node that dies while the watch's consumer is
// being made on it (the stream's leader): nothing is delivered until the
// attempt's deadline (30 s for a checkpoint store; the 15 s of a take-over
// for the job bucket, after which the new leader gave up and exited),
// although a new leader serves the stream within seconds. A new attempt
// starts a new watch, so a list that timed out or stalled (nothing
// delivered for Stall) is tried again before its caller (a job's recovery,
// a checkpoint's cleanup, a coordinator's take-over) fails, as other faults
// of the moment are (internal/transient).
package objlist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/transient"
)

// Policy is transient.Default with fewer attempts, each of which may take
// its whole timeout: for a caller whose own deadline is short.
var Policy = transient.Policy{Attempts: 3, Base: transient.Default.Base, Max: transient.Default.Max}

// Stall is how long an attempt may go without a delivery before it is
// given up and a new watch started: the server delivers a watch's entries
// one after another, so a gap this long says the watch is lost, not that
// the bucket is large.
const Stall = 5 * time.Second

// Lister is the part of jetstream.ObjectStore that List needs.
type Lister interface {
	Watch(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.ObjectWatcher, error)
}

// KeyLister is the part of jetstream.KeyValue that Keys needs.
type KeyLister interface {
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

var errStalled = errors.New("objlist: nothing delivered")

// List returns the objects of obs, as obs.List does (an empty bucket is
// jetstream.ErrNoObjectsFound), giving each attempt timeout within ctx. It
// tries again as p says when an attempt met a fault of the moment (its own
// deadline passed, it stalled, the server answered 429) and ctx is still
// live.
func List(ctx context.Context, obs Lister, timeout time.Duration, p transient.Policy) ([]*jetstream.ObjectInfo, error) {
	return list(ctx, obs, timeout, Stall, p)
}

func list(ctx context.Context, obs Lister, timeout, stall time.Duration, p transient.Policy) ([]*jetstream.ObjectInfo, error) {
	watch := func(ctx context.Context) (<-chan *jetstream.ObjectInfo, func() error, error) {
		w, err := obs.Watch(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return nil, nil, err
		}
		return w.Updates(), w.Stop, nil
	}
	objs, err := collect(ctx, watch, timeout, stall, p)
	if err == nil && len(objs) == 0 {
		return nil, jetstream.ErrNoObjectsFound
	}
	return objs, err
}

// Keys returns the keys of kv, sorted and each once, as kv.Keys does (an
// empty bucket is jetstream.ErrNoKeysFound), giving each attempt timeout
// within ctx and trying again as List does. Unlike kv.ListKeys, a listing
// cut short is an error, never a shorter list.
func Keys(ctx context.Context, kv KeyLister, timeout time.Duration, p transient.Policy) ([]string, error) {
	return keys(ctx, kv, timeout, Stall, p)
}

func keys(ctx context.Context, kv KeyLister, timeout, stall time.Duration, p transient.Policy) ([]string, error) {
	watch := func(ctx context.Context) (<-chan jetstream.KeyValueEntry, func() error, error) {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
		if err != nil {
			return nil, nil, err
		}
		return w.Updates(), w.Stop, nil
	}
	entries, err := collect(ctx, watch, timeout, stall, p)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Key()
	}
	slices.Sort(out)
	// A key written while the watch runs can come twice.
	return slices.Compact(out), nil
}

// watchFunc starts a watch of a bucket's latest entries: their channel,
// which carries the zero T once all have come, and how to stop it.
type watchFunc[T comparable] func(ctx context.Context) (<-chan T, func() error, error)

// collect gathers the entries a watch delivers before its end marker,
// trying again as p says an attempt that timed out or stalled.
func collect[T comparable](ctx context.Context, watch watchFunc[T], timeout, stall time.Duration, p transient.Policy) ([]T, error) {
	var out []T
	err := transient.Do(ctx, p, func(ctx context.Context) error {
		var err error
		out, err = collectOnce(ctx, watch, timeout, stall)
		if errors.Is(err, errStalled) {
			// A stall is a timeout of its own: a fault of the moment.
			return fmt.Errorf("%w: %w", errStalled, context.DeadlineExceeded)
		}
		return err
	})
	return out, err
}

// collectOnce is one attempt: a watch, given up after timeout, or after
// stall without a delivery (errStalled).
func collectOnce[T comparable](ctx context.Context, watch watchFunc[T], timeout, stall time.Duration) ([]T, error) {
	tctx, cancelT := context.WithTimeout(ctx, timeout)
	defer cancelT()
	actx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	idle := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer idle.Stop()
	updates, stop, err := watch(actx)
	if err != nil {
		return nil, attemptErr(actx, err)
	}
	defer func() { _ = stop() }()
	var out []T
	var end T
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return nil, attemptErr(actx, errors.New("objlist: the watch ended"))
			}
			if e == end {
				return out, nil
			}
			out = append(out, e)
			idle.Reset(stall)
		case <-actx.Done():
			return nil, attemptErr(actx, actx.Err())
		}
	}
}

// attemptErr says why an attempt ended: it stalled, or its deadline
// passed, or err.
func attemptErr(actx context.Context, err error) error {
	if cause := context.Cause(actx); cause != nil && actx.Err() != nil {
		if errors.Is(cause, errStalled) {
			return errStalled
		}
		return cause
	}
	return err
}
