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
// job's recovery, a checkpoint's cleanup) fails.
package objlist

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Attempts is how many times List tries.
const Attempts = 3

// Lister is the part of jetstream.ObjectStore that List needs.
type Lister interface {
	List(ctx context.Context, opts ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error)
}

// List returns the objects of obs, as obs.List does (an empty bucket is
// jetstream.ErrNoObjectsFound), giving each attempt timeout within ctx. It
// tries again, up to Attempts times, when an attempt's own deadline passed
// and ctx is still live.
func List(ctx context.Context, obs Lister, timeout time.Duration) ([]*jetstream.ObjectInfo, error) {
	var err error
	for range Attempts {
		actx, cancel := context.WithTimeout(ctx, timeout)
		var objs []*jetstream.ObjectInfo
		objs, err = obs.List(actx)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return objs, err
		}
	}
	return nil, err
}
