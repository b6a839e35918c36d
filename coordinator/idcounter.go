package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// idCounter keeps the highest checkpoint id of each job in the bucket
// transport.CheckpointIDsBucket: Flink's CheckpointIDCounter in its HA
// store (seed 000 §2.2: ids increase across coordinator restarts). What
// checkpoint storage holds cannot serve: incomplete and exported
// checkpoints are deleted, so its highest id can drop.
type idCounter struct {
	kv jetstream.KeyValue
}

// openIDCounter opens (creating it on first use) the counter bucket.
func openIDCounter(ctx context.Context, nc *nats.Conn, replicas int) (*idCounter, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      transport.CheckpointIDsBucket,
		Description: "wstream: the highest checkpoint id each job has used",
		Storage:     jetstream.FileStorage,
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint id bucket %s: %w", transport.CheckpointIDsBucket, transport.ReplicasError(err, replicas))
	}
	return &idCounter{kv: kv}, nil
}

// current returns the highest id job has used, and its revision (0 and 0
// for a job that has used none).
func (c *idCounter) current(ctx context.Context, job string) (int64, uint64, error) {
	e, err := c.kv.Get(ctx, job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the checkpoint id counter of job %s: %w", job, err)
	}
	n, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("the checkpoint id counter of job %s in bucket %s holds %q, not an id", job, transport.CheckpointIDsBucket, e.Value())
	}
	return n, e.Revision(), nil
}

// errIDUsed marks an id that the counter says was used already: another
// coordinator (a stale one, after failover) triggered it.
var errIDUsed = errors.New("checkpoint id already used")

// reserve raises job's counter to id with compare-and-set, before id is
// triggered. It fails with errIDUsed when the counter is at id or beyond.
func (c *idCounter) reserve(ctx context.Context, job string, id int64) error {
	for {
		cur, rev, err := c.current(ctx, job)
		if err != nil {
			return err
		}
		if cur >= id {
			return fmt.Errorf("%w: job %s has used checkpoint ids up to %d, and %d is not above", errIDUsed, job, cur, id)
		}
		val := []byte(strconv.FormatInt(id, 10))
		if rev == 0 {
			_, err = c.kv.Create(ctx, job, val)
		} else {
			_, err = c.kv.Update(ctx, job, val, rev)
		}
		if err == nil {
			return nil
		}
		// Someone else moved the counter meanwhile: look again.
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return fmt.Errorf("raising the checkpoint id counter of job %s to %d: %w", job, id, err)
		}
	}
}

// isWrongSequence reports a compare-and-set that lost against another write.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
