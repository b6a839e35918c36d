package state

import (
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// DefaultMemoryBudget is a worker's state memory budget when none is given
// (wstream worker --state-memory): 1M keys of a keyed count stay cached.
const DefaultMemoryBudget = 512 << 20

// minMemoryBudget is the smallest budget NewBudget takes: below it the
// block cache could not hold the index and filter blocks of a modest store.
const minMemoryBudget = 16 << 20

// Budget is a worker's state memory budget, shared by all its stores: a
// quarter of it is Pebble's block cache, one for the worker, and the rest
// bounds the clean entries that the stores' hot-key caches keep, split
// evenly among the stores open at each flush. Pebble's memtables (about
// 12 MiB a store, memTableSize) and the changes written since a store's
// last flush are outside it: the worker flushes those at a fixed bound.
// A Budget is safe for concurrent use.
type Budget struct {
	bytes  int64
	cache  *pebble.Cache
	stores atomic.Int64
}

// NewBudget returns a budget of bytes (DefaultMemoryBudget when 0). The
// caller releases it with Close once its stores are closed.
func NewBudget(bytes int64) *Budget {
	if bytes == 0 {
		bytes = DefaultMemoryBudget
	}
	bytes = max(bytes, minMemoryBudget)
	return &Budget{bytes: bytes, cache: pebble.NewCache(bytes / 4)}
}

// CheckBudget says what is wrong with a budget given on a command line.
func CheckBudget(bytes int64) error {
	if bytes < 0 || bytes != 0 && bytes < minMemoryBudget {
		return fmt.Errorf("state memory budget of %d bytes is below the least of %d bytes (16 MiB)", bytes, minMemoryBudget)
	}
	return nil
}

// Bytes is the budget.
func (b *Budget) Bytes() int64 { return b.bytes }

// Cache is the worker's block cache: the stores' Options.Cache.
func (b *Budget) Cache() *pebble.Cache { return b.cache }

// Close releases the block cache; Pebble keeps it alive for stores still
// open.
func (b *Budget) Close() { b.cache.Unref() }

// join counts a store opened on the budget; leave counts it closed.
func (b *Budget) join()  { b.stores.Add(1) }
func (b *Budget) leave() { b.stores.Add(-1) }

// share is what one store's clean cached entries may hold now.
func (b *Budget) share() int {
	n := max(b.stores.Load(), 1)
	return int(min((b.bytes-b.bytes/4)/n, 1<<40))
}
