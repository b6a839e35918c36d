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
// quarter of it is Pebble's block cache, one for the worker; a quarter
// bounds the changes the stores' caches gather between flushes (a key
// written again before its flush costs Pebble one write), and half the
// clean entries they keep; both are split evenly among the stores open at
// each flush, and a store's changes may take what its clean entries leave
// of their share (Store.CacheEntries). Pebble's memtables (budgetMemTableSize a store, grown as
// writes come) are outside it.
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
	return int(min(b.bytes/2/n, 1<<40))
}

// changes is how many changed entries one store may gather between flushes
// now: its share of a quarter of the budget, at changeBytes an entry, and
// at least DefaultCacheEntries.
func (b *Budget) changes() int {
	n := max(b.stores.Load(), 1)
	return int(max(min(b.bytes/4/n/changeBytes, 1<<30), DefaultCacheEntries))
}

// changeBytes is what a changed entry of a small key and value is taken
// to cost: the entry, its buffers, its slot and its share of the sort and
// the batch at the flush.
const changeBytes = 256
