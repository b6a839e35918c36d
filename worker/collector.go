package worker

import (
	"fmt"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// stageCollector gathers a stage's output during one call. For a stage that
// feeds the next stage of its chain it keeps only the chained output and
// rewrites ports to input 0; the chain's last stage keeps every port for
// routing.
type stageCollector struct {
	b abi.Builder
	// spare is a drained batch's buffer, given back once the next stage
	// is done with it (hasSpare), so that draining allocates nothing.
	spare    abi.Builder
	hasSpare bool
	nOut     int
	keep     int // output index kept; -1 keeps all
	scratch  abi.Record
	// tail, set on the chain's last stage when it feeds output edges
	// (keep < 0), routes each record into the channel buffers as it is
	// emitted instead of collecting it first: a guest that emits a flood
	// of output then costs one copy of it, not three and a batch the size
	// of the flood. routed counts the records routed since the last drain,
	// routedBytes their encoded size.
	tail        *task
	routed      int
	routedBytes int
	// cp is the commit points of the guarded call in progress (nil
	// outside one): dead-letter mode keeps what a guest marked done.
	cp *commitPoints
}

var _ operator.Committer = (*stageCollector)(nil)

// CommitInterval asks the guest for commit points in a guarded call only.
func (c *stageCollector) CommitInterval() int {
	if c.cp == nil {
		return 0
	}
	return c.cp.every
}

// Commit keeps the output and state changes of the guarded call so far.
func (c *stageCollector) Commit(n int) error {
	if c.cp != nil {
		c.cp.commit(c, n)
	}
	return nil
}

func (c *stageCollector) Emit(port uint32, ts int64, key, value []byte) error {
	if int(port) >= c.nOut {
		return operator.ErrBadOutput
	}
	switch {
	case c.keep < 0 && c.tail != nil:
		c.scratch = abi.Record{Port: port, Timestamp: ts, Key: key, Value: value}
		c.tail.routeRecord(&c.scratch)
		c.scratch = abi.Record{}
		c.routed++
		c.routedBytes += abi.RecordHeaderSize + len(key) + len(value)
	case c.keep < 0:
		c.b.Add(port, ts, key, value)
	case int(port) == c.keep:
		c.b.Add(0, ts, key, value)
	}
	return nil
}

func (c *stageCollector) EmitBatch(batch []byte) error {
	unchanged, err := c.check(batch)
	if err != nil {
		return err
	}
	return c.emitChecked(batch, unchanged)
}

// EmitCheckedBatch takes a batch a guest emitted, which the host has
// checked: only its largest port is left to check.
func (c *stageCollector) EmitCheckedBatch(batch []byte, maxPort uint32) error {
	if uint64(maxPort) >= uint64(c.nOut) {
		return operator.ErrBadOutput
	}
	return c.emitChecked(batch, c.keep < 0 || (c.keep == 0 && maxPort == 0))
}

// emitChecked emits a batch that decodes and whose every port is below
// nOut; unchanged says it can be appended as it is (check).
func (c *stageCollector) emitChecked(batch []byte, unchanged bool) error {
	r := &c.scratch
	defer func() { *r = abi.Record{} }()
	if c.keep < 0 && c.tail != nil {
		// check found every port valid: nothing can fail from here on.
		c.routedBytes += len(batch)
		rd, _ := abi.NewReader(batch)
		for {
			ok, _ := rd.Next(r)
			if !ok {
				return nil
			}
			c.tail.routeRecord(r)
			c.routed++
		}
	}
	// Fast path: when every record keeps its port, the batch is appended
	// with one copy instead of record by record.
	if unchanged {
		c.b.AppendBatch(batch)
		return nil
	}
	rd, _ := abi.NewReader(batch)
	for {
		ok, _ := rd.Next(r)
		if !ok {
			return nil
		}
		if err := c.Emit(r.Port, r.Timestamp, r.Key, r.Value); err != nil {
			return err
		}
	}
}

// check validates batch in one pass before any of it is emitted: a
// malformed batch is ErrBadArgument, a port beyond the stage's outputs
// ErrBadOutput. unchanged reports whether the batch can be appended as it
// is: with keep < 0 every port is valid then; with keep == 0 every port
// must be 0.
func (c *stageCollector) check(batch []byte) (unchanged bool, err error) {
	rd, err := abi.NewReader(batch)
	if err != nil {
		return false, fmt.Errorf("%w: %v", operator.ErrBadArgument, err)
	}
	r := &c.scratch
	defer func() { *r = abi.Record{} }()
	unchanged = c.keep <= 0
	badPort := false
	for {
		ok, err := rd.Next(r)
		if err != nil {
			return false, fmt.Errorf("%w: %v", operator.ErrBadArgument, err)
		}
		if !ok {
			break
		}
		if int(r.Port) >= c.nOut {
			badPort = true
		}
		if c.keep == 0 && r.Port != 0 {
			unchanged = false
		}
	}
	if badPort {
		// The batch is well-formed, so the whole of it is checked before
		// the port is refused, as emit_batch does.
		return false, operator.ErrBadOutput
	}
	return unchanged, nil
}

// take returns the collected batch and leaves the collector empty with
// another buffer: while the batch is on its way down the chain the stage
// may collect again (a snapshot taken during a send blocked by backpressure
// runs PreBarrier and drains every stage), and neither must that output
// overwrite the batch nor the batch be drained twice.
func (c *stageCollector) take() abi.Builder {
	out := c.b
	c.b = abi.Builder{}
	if c.hasSpare {
		c.b, c.spare, c.hasSpare = c.spare, abi.Builder{}, false
	}
	return out
}

// give hands back a builder from take once its batch has been consumed.
// A builder grown past maxKeptOutput is dropped instead of kept.
func (c *stageCollector) give(b abi.Builder) {
	if !c.hasSpare && cap(b.Bytes()) <= maxKeptOutput {
		b.Reset()
		c.spare, c.hasSpare = b, true
	}
}
