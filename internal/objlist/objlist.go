// Package objlist lists the objects of a JetStream object store bucket,
// trying again an attempt that timed out or stalled.
//
// nats.go lists a bucket by watching it: the list ends when the server has
// delivered the latest info of every object, which it tells by a count of
// pending messages, or at once when a first probe finds the bucket empty.
// On a loaded server an attempt can outlast its deadline, and when that
// probe fails for any other reason than "no message", a watch of an empty
// bucket waits for a delivery that never comes. The same wait follows a
// NATS node that dies while the watch's consumer is being made on it (the
// stream's leader): nothing is delivered until the attempt's deadline,
// 30 s for a checkpoint store, while the checkpoint driver that discards a
// checkpoint waits, although a new leader serves the stream within
// seconds. A new attempt starts a new watch, so a list that timed out or
// stalled (nothing delivered for Stall) is tried again before its caller
// (a job's recovery, a checkpoint's cleanup) fails, as other faults of the
// moment are (internal/transient).
package objlist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/transient"
)

// Policy is transient.Default with fewer attempts, each of which may take
// its whole timeout: for a caller whose own deadline is short.
var Policy = transient.Policy{Attempts: 3, Base: transient.Default.Base, Max: transient.Default.Max}

// Stall is how long an attempt may go without a delivery before it is
// given up and a new watch started: the server delivers a watch's infos
// one after another, so a gap this long says the watch is lost, not that
// the bucket is large.
const Stall = 5 * time.Second

// Lister is the part of jetstream.ObjectStore that List needs.
type Lister interface {
	Watch(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.ObjectWatcher, error)
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
	var objs []*jetstream.ObjectInfo
	err := transient.Do(ctx, p, func(ctx context.Context) error {
		var err error
		objs, err = listOnce(ctx, obs, timeout, stall)
		if errors.Is(err, errStalled) {
			// A stall is a timeout of its own: a fault of the moment.
			return fmt.Errorf("%w: %w", errStalled, context.DeadlineExceeded)
		}
		return err
	})
	return objs, err
}

// listOnce is one attempt: a watch of the bucket's latest infos, given up
// after timeout, or after stall without a delivery (errStalled).
func listOnce(ctx context.Context, obs Lister, timeout, stall time.Duration) ([]*jetstream.ObjectInfo, error) {
	tctx, cancelT := context.WithTimeout(ctx, timeout)
	defer cancelT()
	actx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	idle := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer idle.Stop()
	w, err := obs.Watch(actx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, attemptErr(actx, err)
	}
	defer func() { _ = w.Stop() }()
	var objs []*jetstream.ObjectInfo
	updates := w.Updates()
	for {
		select {
		case oi, ok := <-updates:
			if !ok {
				return nil, attemptErr(actx, errors.New("objlist: the watch ended"))
			}
			if oi == nil {
				if len(objs) == 0 {
					return nil, jetstream.ErrNoObjectsFound
				}
				return objs, nil
			}
			objs = append(objs, oi)
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
