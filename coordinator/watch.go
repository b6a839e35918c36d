package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// Watch is a client helper: it returns the result of a job, which must
// have been subscribed to with WatchJobs before the job was submitted.
type Watch struct {
	nc  *nats.Conn
	sub *nats.Subscription
	ch  chan *nats.Msg
	kv  jetstream.KeyValue
	// Poll is how often Wait also looks up the job's spec in the job
	// bucket (default 1s).
	Poll time.Duration
}

// WatchJobs subscribes to every job's done subject; call it before
// submitting on nc so that a short job's end is not missed. It does not
// wait for the server to confirm the subscription: the server takes a
// connection's messages in order, so it has the subscription before the
// submission that follows on nc, and Wait looks in the job bucket too.
func WatchJobs(nc *nats.Conn) (*Watch, error) {
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(transport.JobDoneSubject("*"), ch)
	if err != nil {
		return nil, err
	}
	return &Watch{nc: nc, sub: sub, ch: ch, Poll: time.Second}, nil
}

// Wait returns the result of job id, or ctx's error. The result comes on
// the job's done subject; since that message is lost when it is published
// while this client's connection is down (a NATS server restart), Wait also
// looks for the result in the job's spec in the job bucket now and then.
// It waits across coordinator and NATS server restarts.
func (w *Watch) Wait(ctx context.Context, id string) (*transport.JobResult, error) {
	poll := time.NewTicker(max(w.Poll, 10*time.Millisecond))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-w.ch:
			var r transport.JobResult
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return nil, fmt.Errorf("bad job result: %w", err)
			}
			if r.JobID == id {
				return &r, nil
			}
		case <-poll.C:
			if r := w.stored(ctx, id); r != nil {
				return r, nil
			}
		}
	}
}

// stored returns the result in the spec of job id, nil when it has none
// (yet) or cannot be read now.
func (w *Watch) stored(ctx context.Context, id string) *transport.JobResult {
	if w.nc == nil || !w.nc.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	if w.kv == nil {
		js, err := jetstream.New(w.nc)
		if err != nil {
			return nil
		}
		kv, err := js.KeyValue(ctx, transport.JobsBucket)
		if err != nil {
			return nil
		}
		w.kv = kv
	}
	s, err := getSpec(ctx, w.kv, id)
	if err != nil || s.State == transport.JobRunning || s.Result == nil {
		return nil
	}
	return s.Result
}

// Close unsubscribes.
func (w *Watch) Close() { _ = w.sub.Unsubscribe() }
