package state

import (
	"sync/atomic"
	"time"
)

// ioClock sums the time a Store spends waiting on Pebble inside the calls
// of its owner (reads that miss the cache, commits that a full memtable
// stalls, timer reads, the lazy open). A guest's call deadline leaves that
// time out (operator.StorageWaiter): the deadline bounds the guest's own
// work, and a loaded disk is not the guest's doing. The owner's goroutine
// enters and leaves; any goroutine reads.
type ioClock struct {
	total atomic.Int64 // nanoseconds of waits that ended
	since atomic.Int64 // monotonic nanoseconds when the wait in progress began; 0: none
	depth int          // nesting of enter, owner goroutine only
}

// epoch makes monotonic readings of the process's clock into int64s.
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) + 1 }

func (c *ioClock) enter() {
	if c.depth == 0 {
		c.since.Store(monoNow())
	}
	c.depth++
}

func (c *ioClock) leave() {
	if c.depth--; c.depth > 0 {
		return
	}
	// Added before the wait in progress is cleared: a reader in between
	// counts the wait twice, which only grants a guest more time, never
	// less.
	c.total.Add(monoNow() - c.since.Load())
	c.since.Store(0)
}

// waited is the time spent waiting so far, a wait in progress included.
func (c *ioClock) waited() time.Duration {
	t := c.total.Load()
	if since := c.since.Load(); since != 0 {
		t += monoNow() - since
	}
	return time.Duration(t)
}

// StorageWait is the time the store has waited on Pebble in its owner's
// calls since it was opened, a wait in progress included. Safe for
// concurrent use.
func (s *Store) StorageWait() time.Duration { return s.io.waited() }

// StorageWait is the store's (operator.StorageWaiter).
func (v *VertexState) StorageWait() time.Duration { return v.s.StorageWait() }
