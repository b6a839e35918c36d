package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// The value of a job's key is the highest id it has used, followed by
// "@" and the leadership epoch of the coordinator that wrote it (a value
// without one predates leases). A coordinator writes the key only by
// compare-and-set on the revision it read, and never over a later epoch's
// value; a new leader stamps the key with its epoch when it takes a job
// over (stamp), so that a write of a deposed leader, prepared on an
// earlier revision or epoch, does not land.

// current returns the highest id job has used, and its revision (0 and 0
// for a job that has used none).
func (c *idCounter) current(ctx context.Context, job string) (int64, uint64, error) {
	n, _, rev, err := c.read(ctx, job)
	return n, rev, err
}

// completedKey is the key of job's completions record: the highest
// checkpoint id it completed and the epoch of the leader that completed
// it, in the counter's format. A checkpoint is complete once this record
// says so (complete): the leader writes it by compare-and-set, with its
// epoch, after every acknowledgement and before the metadata, so a deposed
// leader completes nothing, even one paused between its lease check and
// the write. Job ids hold no '.', so the key is no job's counter.
func completedKey(job string) string { return job + ".completed" }

// read returns the highest id job has used, the epoch that wrote it, and
// the key's revision (all 0 for a job that has used none).
func (c *idCounter) read(ctx context.Context, key string) (int64, uint64, uint64, error) {
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("reading %s of bucket %s: %w", key, transport.CheckpointIDsBucket, err)
	}
	id, ep, hasEpoch := strings.Cut(string(e.Value()), "@")
	n, err := strconv.ParseInt(id, 10, 64)
	var epoch uint64
	if err == nil && hasEpoch {
		epoch, err = strconv.ParseUint(ep, 10, 64)
	}
	if err != nil || n < 0 {
		return 0, 0, 0, fmt.Errorf("%s in bucket %s holds %q, not an id", key, transport.CheckpointIDsBucket, e.Value())
	}
	return n, epoch, e.Revision(), nil
}

// errIDUsed marks an id that the counter says was used already: another
// coordinator (a stale one, after failover) triggered it.
var errIDUsed = errors.New("checkpoint id already used")

// write sets job's counter to id at epoch by compare-and-set on revision
// rev (0: the key is absent).
func (c *idCounter) write(ctx context.Context, job string, id int64, epoch, rev uint64) error {
	val := []byte(strconv.FormatInt(id, 10))
	if epoch != 0 {
		val = fmt.Appendf(val, "@%d", epoch)
	}
	var err error
	if rev == 0 {
		_, err = c.kv.Create(ctx, job, val)
	} else {
		_, err = c.kv.Update(ctx, job, val, rev)
	}
	return err
}

// reserve raises job's counter to id with compare-and-set, before id is
// triggered by the leader of epoch. It fails with errIDUsed when the
// counter is at id or beyond, and with errDeposed when a later leader
// wrote it.
func (c *idCounter) reserve(ctx context.Context, job string, id int64, epoch uint64) error {
	for {
		cur, stored, rev, err := c.read(ctx, job)
		if err != nil {
			return err
		}
		if fenced(stored, epoch) {
			return fmt.Errorf("%w: the checkpoint id counter of job %s was written at epoch %d, this coordinator's is %d", errDeposed, job, stored, epoch)
		}
		if cur >= id {
			return fmt.Errorf("%w: job %s has used checkpoint ids up to %d, and %d is not above", errIDUsed, job, cur, id)
		}
		err = c.write(ctx, job, id, epoch, rev)
		if err == nil {
			return nil
		}
		// Someone else moved the counter meanwhile: look again.
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return fmt.Errorf("raising the checkpoint id counter of job %s to %d: %w", job, id, err)
		}
	}
}

// stamp writes job's counter, unchanged, at epoch: a deposed leader's
// reservation, read before, fails its compare-and-set, and one read after
// finds the later epoch. It returns the counter.
// The completions record is stamped too: a deposed leader's completion
// fails the same way.
func (c *idCounter) stamp(ctx context.Context, job string, epoch uint64) (int64, error) {
	cur, err := c.stampKey(ctx, job, epoch)
	if err != nil {
		return 0, err
	}
	if _, err := c.stampKey(ctx, completedKey(job), epoch); err != nil {
		return 0, err
	}
	return cur, nil
}

// stampKey writes key's value, unchanged, at epoch.
func (c *idCounter) stampKey(ctx context.Context, key string, epoch uint64) (int64, error) {
	for {
		cur, stored, rev, err := c.read(ctx, key)
		if err != nil {
			return 0, err
		}
		if fenced(stored, epoch) {
			return 0, fmt.Errorf("%w: %s of bucket %s was written at epoch %d, this coordinator's is %d", errDeposed, key, transport.CheckpointIDsBucket, stored, epoch)
		}
		if stored == epoch && rev != 0 {
			return cur, nil
		}
		err = c.write(ctx, key, cur, epoch, rev)
		if err == nil {
			return cur, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return 0, fmt.Errorf("writing the epoch into %s of bucket %s: %w", key, transport.CheckpointIDsBucket, err)
		}
	}
}

// complete records checkpoint id of job as complete by the leader of
// epoch, by compare-and-set: it fails with errDeposed when a later leader
// wrote or stamped the record, whenever this one checked its lease. The
// record keeps the highest id completed (a savepoint may complete after a
// later checkpoint).
func (c *idCounter) complete(ctx context.Context, job string, id int64, epoch uint64) error {
	key := completedKey(job)
	for {
		cur, stored, rev, err := c.read(ctx, key)
		if err != nil {
			return err
		}
		if fenced(stored, epoch) {
			return fmt.Errorf("%w: checkpoint %d of job %s: the completions record was written at epoch %d, this coordinator's is %d", errDeposed, id, job, stored, epoch)
		}
		err = c.write(ctx, key, max(cur, id), epoch, rev)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return fmt.Errorf("recording checkpoint %d of job %s as complete: %w", id, job, err)
		}
	}
}

// isWrongSequence reports a compare-and-set that lost against another write.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
