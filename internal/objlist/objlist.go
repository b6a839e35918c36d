// Package objlist lists the objects of a JetStream object store bucket,
// retrying an attempt that timed out.
//
// nats.go lists a bucket by watching it: the list ends when the server has
// delivered the latest info of every object, which it tells by a count of
// pending messages, or at once when a first probe finds the bucket empty.
// On a loaded server an attempt can outlast its deadline, and when that
// probe fails for any other reason than "no message", a watch of an empty
// bucket waits for a delivery that never comes. A new attempt starts a new
// watch, so a list that timed out is tried again before its caller (a
// job's recovery, a checkpoint's cleanup) fails, as other faults of the
// moment are (internal/transient).
package objlist

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/transient"
)

// Lister is the part of jetstream.ObjectStore that List needs.
type Lister interface {
	List(ctx context.Context, opts ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error)
}

// Policy is transient.Default with fewer attempts, each of which may take
// its whole timeout: for a caller whose own deadline is short.
var Policy = transient.Policy{Attempts: 3, Base: transient.Default.Base, Max: transient.Default.Max}

// List returns the objects of obs, as obs.List does (an empty bucket is
// jetstream.ErrNoObjectsFound), giving each attempt timeout within ctx. It
// tries again as p says when an attempt met a fault of the moment (its own
// deadline passed, the server answered 429) and ctx is still live.
func List(ctx context.Context, obs Lister, timeout time.Duration, p transient.Policy) ([]*jetstream.ObjectInfo, error) {
	var objs []*jetstream.ObjectInfo
	err := transient.Do(ctx, p, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		objs, err = obs.List(actx)
		return err
	})
	return objs, err
}
