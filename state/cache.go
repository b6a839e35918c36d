package state

import (
	"bytes"
	"hash/maphash"
	"math"
	"unsafe"
)

// hotCache holds state entries by encoded Pebble key: the write-back buffer
// of entries changed since the last Flush (dirty) and a bounded set of
// recently used clean entries, including cached absences, evicted by a
// clock (second chance: an approximation of least recently used). Its
// storage is recycled (entries, their spills' buffers, slot table), so that
// steady-state gets and puts do not allocate. A hand-rolled open-addressing
// table is used instead of a Go map because a map[string] needs a new
// string per inserted key.
//
// Dirty entries are never evicted: they are the only copy of a write until
// Flush. The cache therefore grows past capacity when a batch dirties more
// keys than that, and evicts back down to capacity at the next flush; the
// evicted entries' buffers stay on the free list for the next such batch.
type hotCache struct {
	seed maphash.Seed
	// slots is the open-addressing table: per slot, the entry's index
	// plus one in the low 32 bits (0: empty) and the top 32 bits of its
	// hash in the high ones, so that a probe passes over another key's
	// slot without reading its entry (a memory miss in a large cache);
	// len is a power of two.
	slots   []uint64
	mask    uint64
	entries []cacheEntry
	free    []int32 // unused entries
	// spills holds the keys and values that do not fit in their
	// entries; spillFree the unused ones.
	spills    []cacheSpill
	spillFree []int32
	// hand is where the clock (evictOne) looks next: clean entries are
	// evicted in the order of their slots in entries, but for those used
	// since the hand last passed them (cacheEntry.ref). Unlike a list in
	// use order, a use or a change writes only its own entry: the links
	// to the entry's neighbours were two memory misses a read in a cache
	// of a million keys.
	hand     int32
	dirty    []int32 // dirty entries, in the order they became dirty
	capacity int
	live     int
	// warmSum is warm's result, kept so that its reads are not optimized
	// away.
	warmSum uint64
	// cleanBytes bounds what clean entries hold, their key and value
	// buffers and entryOverhead each, and the buffers free entries keep
	// for reuse (maxCleanBytes unless the store's memory bound or its
	// share of the worker's budget says otherwise). cleanHeld is what the
	// clean entries hold now: kept as they come and go, so that bounding
	// it costs what is evicted, not a walk of the cache.
	cleanBytes int
	cleanHeld  int
	// freeBare is how many entries at the start of free hold no buffers.
	freeBare int
	// lost: an entry has left the cache (evicted or dropped) since it
	// was made, so a key it does not hold may be in Pebble.
	lost bool
}

// cacheEntry is one entry of the cache. It holds no pointers and takes one
// 64-byte processor cache line: a key and value that fit in inline together
// (a counter under a short key) are read with the entry's flags in one
// memory miss after the slot's, where separate key and value buffers were a
// third. The table of entries is then no work for the garbage collector
// either. A key or value that does not fit lives in a cacheSpill.
type cacheEntry struct {
	hash uint64
	undo uint32 // epoch of the undo journal that recorded its old value
	// held is what the entry counts in cleanHeld while it is clean.
	held int32
	// nsLen is the length of the namespace that ends key, set when the
	// entry becomes dirty (Store.dirtyBasesFor needs it).
	nsLen int32
	// spill is the entry's cacheSpill's index in hotCache.spills plus
	// one, 0 when it has none.
	spill int32
	// klen and vlen are the lengths of the key and value in inline, or
	// spilled when they are in the spill. The key starts inline and the
	// value follows it (or starts inline when the key is spilled).
	klen, vlen uint8
	present    bool // false: the entry is known absent (deleted or never written)
	dirty      bool
	used       bool // false: the entry is on the free list
	// blind: written without a read since it came into the cache (a
	// write that needs no old value); flushed does not keep it cached.
	blind bool
	// ref: used since the clock hand last passed it.
	ref bool
	// filtered: the key is in the store's keyFilter (added at a flush,
	// or read from Pebble, where every key is).
	filtered bool
	inline   [inlineRoom]byte
}

// inlineRoom is what an entry holds of its key and value itself: the rest
// of its cache line. An encoded Pebble key of a short vertex id, state name
// and key (24 bytes for a word counted by vertex "count") and an 8-byte
// counter fit.
const inlineRoom = 32

// spilled is the length of a key or value that is in the entry's spill.
const spilled = math.MaxUint8

// cacheSpill holds what does not fit in an entry: its key, its value, or
// both. A free entry keeps its spill's buffers for reuse like the inline
// room (drop), within the clean budget (flushed).
type cacheSpill struct {
	key, val []byte
}

// entryOverhead is what a cached entry costs besides its spill's buffers:
// the entry itself and its share of the slot table (at most half full).
const entryOverhead = int(unsafe.Sizeof(cacheEntry{})) + 2*8

const noSlot = -1

// maxCachedValue bounds the values that stay cached once clean, so that the
// cache's memory is bounded by its capacity times this; larger values are
// read from Pebble each time. maxRetainedValue bounds the buffer a free
// entry keeps for reuse.
// maxCleanBytes bounds the key and value bytes of the clean entries a
// cache keeps after a flush: with large values, capacity times
// maxCachedValue would be a GiB per subtask, which a tenant's guest could
// make the host hold. maxRetainedValue bounds the buffer a free entry keeps.
const (
	maxCachedValue   = 64 << 10
	maxRetainedValue = 4 << 10
	maxCleanBytes    = 16 << 20
)

// startEntries is what the slot table is sized for at first. It doubles as
// entries arrive (insert), so a subtask that sees few keys does not hold a
// table for the whole capacity: 256 KiB per subtask at the default.
const startEntries = 64

func newHotCache(capacity int) *hotCache {
	if capacity < 1 {
		capacity = 1
	}
	c := &hotCache{seed: maphash.MakeSeed(), capacity: capacity, cleanBytes: maxCleanBytes}
	c.resize(tableSizeFor(min(capacity, startEntries)))
	return c
}

// tableSizeFor returns a power of two at least twice n, keeping the load
// factor of linear probing at or below one half.
func tableSizeFor(n int) int {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	return size
}

func (c *hotCache) hash(key []byte) uint64 { return maphash.Bytes(c.seed, key) }

// slotOf is the slot table's word for entry idx of hash h.
func slotOf(idx int32, h uint64) uint64 { return h&^(1<<32-1) | uint64(uint32(idx+1)) }

// slotEntry is the entry a non-empty slot word holds.
func slotEntry(s uint64) int32 { return int32(uint32(s)) - 1 }

// lookup returns the entry holding key (with hash h), or noSlot.
func (c *hotCache) lookup(key []byte, h uint64) int32 {
	tag := h &^ (1<<32 - 1)
	for i := h & c.mask; ; i = (i + 1) & c.mask {
		s := c.slots[i]
		if s == 0 {
			return noSlot
		}
		if s&^(1<<32-1) != tag {
			continue
		}
		idx := slotEntry(s)
		e := &c.entries[idx]
		if e.klen == spilled {
			if bytes.Equal(c.spills[e.spill-1].key, key) {
				return idx
			}
		} else if int(e.klen) == len(key) && string(e.inline[:len(key)]) == string(key) {
			return idx
		}
	}
}

// warm reads the slot each of hashes leads to, then the entry there (with
// its key and value when they are inline), so that the lookups of a batch that
// follow find them in the processor's cache: the reads of one loop do not
// depend on each other, and their misses overlap instead of following each
// other lookup after lookup. A slot that holds another key's entry costs a
// needless read, never a wrong answer.
// It returns scratch slots, reused, holding the slots read.
func (c *hotCache) warm(hashes []uint64, slots []int32) []int32 {
	slots = slots[:0]
	for _, h := range hashes {
		slots = append(slots, slotEntry(c.slots[h&c.mask]))
	}
	var sum uint64
	for _, s := range slots {
		if s == noSlot {
			continue
		}
		sum += c.entries[s].hash
	}
	c.warmSum = sum
	return slots
}

// gotten ends a get of entry idx once its value was read: a clean value too
// large to keep cached leaves the cache.
func (c *hotCache) gotten(idx int32) {
	if e := &c.entries[idx]; !e.dirty && e.vlen == spilled && len(c.spills[e.spill-1].val) > maxCachedValue {
		c.evict(idx)
	}
}

// insert adds a clean, absent entry for key, which must not be in the cache,
// and returns it. It evicts the least recently used clean entry when the
// cache is full; the caller sets the value.
func (c *hotCache) insert(key []byte, h uint64) int32 {
	if c.live >= c.capacity {
		c.evictOne()
	}
	for c.cleanHeld > c.cleanBytes && c.evictOne() {
	}
	if 2*(c.live+1) > len(c.slots) {
		c.resize(2 * len(c.slots))
	}
	var idx int32
	if n := len(c.free); n > 0 {
		idx = c.free[n-1]
		c.free = c.free[:n-1]
		c.freeBare = min(c.freeBare, n-1)
	} else {
		if len(c.entries) == cap(c.entries) {
			c.growEntries()
		}
		c.entries = c.entries[:len(c.entries)+1]
		idx = int32(len(c.entries) - 1)
	}
	e := &c.entries[idx]
	if len(key) <= inlineRoom {
		e.klen = uint8(copy(e.inline[:], key))
	} else {
		sp := c.spillOf(idx)
		sp.key = append(sp.key[:0], key...)
		e = &c.entries[idx]
		e.klen = spilled
	}
	e.vlen = 0
	e.hash = h
	e.present = false
	e.dirty = false
	e.used = true
	e.blind = false
	e.filtered = false
	e.undo = 0
	c.place(idx)
	c.live++
	c.clean(idx)
	return idx
}

// spillOf returns entry idx's spill, giving it one if it has none.
func (c *hotCache) spillOf(idx int32) *cacheSpill {
	e := &c.entries[idx]
	if e.spill == 0 {
		if n := len(c.spillFree); n > 0 {
			e.spill = c.spillFree[n-1] + 1
			c.spillFree = c.spillFree[:n-1]
		} else {
			c.spills = append(c.spills, cacheSpill{})
			e.spill = int32(len(c.spills))
		}
	}
	return &c.spills[e.spill-1]
}

// key returns entry idx's key. It is the entry's own memory: valid until
// the entry changes or leaves the cache.
func (c *hotCache) key(idx int32) []byte {
	e := &c.entries[idx]
	if e.klen == spilled {
		return c.spills[e.spill-1].key
	}
	return e.inline[:e.klen:e.klen]
}

// val returns entry idx's value, empty when it is absent, in the entry's
// own memory like key.
func (c *hotCache) val(idx int32) []byte {
	e := &c.entries[idx]
	if e.vlen == spilled {
		return c.spills[e.spill-1].val
	}
	at := c.valAt(e)
	end := at + int(e.vlen)
	return e.inline[at:end:end]
}

// valAt is where e's value starts in inline: after its key, or at the
// start when the key is spilled.
func (c *hotCache) valAt(e *cacheEntry) int {
	if e.klen == spilled {
		return 0
	}
	return int(e.klen)
}

// setVal copies v into entry idx's value, inline when it fits beside the
// key. It does not change what the entry counts in cleanHeld (recount).
func (c *hotCache) setVal(idx int32, v []byte) {
	e := &c.entries[idx]
	if at := c.valAt(e); at+len(v) <= inlineRoom {
		e.vlen = uint8(copy(e.inline[at:], v))
		return
	}
	sp := c.spillOf(idx)
	sp.val = append(sp.val[:0], v...)
	c.entries[idx].vlen = spilled
}

// valLen is the length of entry idx's value.
func (c *hotCache) valLen(idx int32) int {
	e := &c.entries[idx]
	if e.vlen == spilled {
		return len(c.spills[e.spill-1].val)
	}
	return int(e.vlen)
}

// bytes is what entry idx holds: itself and its spill's buffers.
func (c *hotCache) bytes(idx int32) int32 {
	n := entryOverhead
	if e := &c.entries[idx]; e.spill != 0 {
		sp := &c.spills[e.spill-1]
		n += cap(sp.key) + cap(sp.val)
	}
	return int32(n)
}

// spillBytes is what the buffers of entry idx's spill hold.
func (c *hotCache) spillBytes(idx int32) int {
	return int(c.bytes(idx)) - entryOverhead
}

// unspill frees entry idx's spill and its buffers.
func (c *hotCache) unspill(idx int32) {
	e := &c.entries[idx]
	if e.spill == 0 {
		return
	}
	c.spills[e.spill-1] = cacheSpill{}
	c.spillFree = append(c.spillFree, e.spill-1)
	e.spill = 0
}

// place puts entry idx into the slot table.
func (c *hotCache) place(idx int32) {
	h := c.entries[idx].hash
	i := h & c.mask
	for c.slots[i] != 0 {
		i = (i + 1) & c.mask
	}
	c.slots[i] = slotOf(idx, h)
}

// hugeFrom is the size from which the slot table and the entries are
// advised onto huge pages (adviseHuge): a cache that small fits the
// processor's page translation cache anyway.
const hugeFrom = 4 << 20

// growEntries makes room for more entries: twice as many while few, a
// quarter more once many, as append does, but advised onto huge pages.
func (c *hotCache) growEntries() {
	n := cap(c.entries)
	n += max(n/4, min(n, 1024), 16)
	grown := make([]cacheEntry, len(c.entries), n)
	if size := n * int(unsafe.Sizeof(cacheEntry{})); size >= hugeFrom {
		adviseHuge(unsafe.Pointer(unsafe.SliceData(grown)), size)
	}
	copy(grown, c.entries)
	c.entries = grown
}

func (c *hotCache) resize(size int) {
	c.slots = make([]uint64, size)
	if size*8 >= hugeFrom {
		adviseHuge(unsafe.Pointer(unsafe.SliceData(c.slots)), size*8)
	}
	c.mask = uint64(size - 1)
	for idx := range c.entries {
		if c.entries[idx].used {
			c.place(int32(idx))
		}
	}
}

// evict removes clean entry idx from the cache.
func (c *hotCache) evict(idx int32) {
	c.unclean(idx)
	c.drop(idx, maxRetainedValue)
}

// evictOne evicts the clean entry the clock hand comes to first that was
// not used since the hand last passed it, clearing the marks of those it
// passes. It reports false when the cache holds no clean entry.
func (c *hotCache) evictOne() bool {
	if c.live == len(c.dirty) {
		return false
	}
	// Two turns at most: the first clears every mark.
	for range 2*len(c.entries) + 1 {
		idx := c.hand
		if c.hand++; int(c.hand) >= len(c.entries) {
			c.hand = 0
		}
		e := &c.entries[idx]
		if !e.used || e.dirty {
			continue
		}
		if e.ref {
			e.ref = false
			continue
		}
		c.evict(idx)
		return true
	}
	return false
}

// evictAll evicts every clean entry.
func (c *hotCache) evictAll() {
	for idx := range c.entries {
		if e := &c.entries[idx]; e.used && !e.dirty {
			c.evict(int32(idx))
		}
	}
}

// drop removes entry idx, not counted clean, from the cache. Its
// buffers stay with it for the next insert to reuse, its value buffer only
// up to keepVal bytes.
func (c *hotCache) drop(idx int32, keepVal int) {
	c.removeSlot(idx)
	c.lost = true
	e := &c.entries[idx]
	e.used = false
	if e.spill != 0 {
		sp := &c.spills[e.spill-1]
		sp.key = sp.key[:0]
		if cap(sp.val) > keepVal {
			sp.val = nil
		}
		if sp.key == nil && sp.val == nil {
			c.unspill(idx)
		}
	}
	c.free = append(c.free, idx)
	c.live--
}

// removeSlot deletes entry idx from the slot table by backward-shift
// deletion, which keeps every probe sequence intact without tombstones.
func (c *hotCache) removeSlot(idx int32) {
	i := c.entries[idx].hash & c.mask
	for slotEntry(c.slots[i]) != idx {
		i = (i + 1) & c.mask
	}
	for j := (i + 1) & c.mask; c.slots[j] != 0; j = (j + 1) & c.mask {
		home := c.entries[slotEntry(c.slots[j])].hash & c.mask
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			c.slots[i] = c.slots[j]
			i = j
		}
	}
	c.slots[i] = 0
}

// touch records a use of entry idx.
func (c *hotCache) touch(idx int32) {
	e := &c.entries[idx]
	e.blind = false
	e.ref = true
}

// markDirty makes entry idx part of the next flush. It reports whether the
// entry was clean before.
func (c *hotCache) markDirty(idx int32) bool {
	e := &c.entries[idx]
	if e.dirty {
		return false
	}
	c.unclean(idx)
	e.dirty = true
	c.dirty = append(c.dirty, idx)
	return true
}

// flushed marks every dirty entry clean after its write reached Pebble and
// evicts the least recently used entries beyond capacity.
//
// An entry written blind (never read while cached) leaves the cache, and
// its buffers are kept for the inserts to come: a job that writes without
// reading (a state flood, a sink into state) writes other keys next more
// likely than it reads these, and reusing its buffers spares an
// allocation per write. A 16 KiB value per write allocated 745 MB in a
// 3 s run, and the garbage collector ran 13 times as often as beside a
// job that reads what it writes.
func (c *hotCache) flushed() {
	for _, idx := range c.dirty {
		e := &c.entries[idx]
		e.dirty = false
		if e.blind {
			c.drop(idx, maxCachedValue)
			continue
		}
		c.clean(idx)
		e.ref = true
		if c.valLen(idx) > maxCachedValue {
			c.evict(idx)
		}
	}
	c.dirty = c.dirty[:0]
	for (c.live > c.capacity || c.cleanHeld > c.cleanBytes) && c.evictOne() {
	}
	n := c.cleanHeld
	// What is left of the budget bounds the buffers that free entries
	// keep for reuse: a flood of small values leaves as many free
	// entries as it dirtied. Inserts take free entries from the end, so
	// the budget goes to those first.
	// Below freeBare, free entries hold no buffers already: the walk
	// stops there, so that it costs what was freed since the last flush.
	k := len(c.free) - 1
	for ; k >= c.freeBare; k-- {
		if n += c.spillBytes(c.free[k]); n > c.cleanBytes {
			break
		}
	}
	if k >= c.freeBare {
		for i := k; i >= c.freeBare; i-- {
			c.unspill(c.free[i])
		}
		c.freeBare = k + 1
	}
}

// clean counts entry idx, clean now, in cleanHeld.
func (c *hotCache) clean(idx int32) {
	e := &c.entries[idx]
	e.held = c.bytes(idx)
	c.cleanHeld += int(e.held)
}

// unclean takes entry idx, clean until now, out of cleanHeld.
func (c *hotCache) unclean(idx int32) {
	e := &c.entries[idx]
	c.cleanHeld -= int(e.held)
	e.held = 0
}

// recount updates what clean entry idx counts in cleanHeld after its value
// was set (a load).
func (c *hotCache) recount(idx int32) {
	e := &c.entries[idx]
	if e.dirty || !e.used {
		return
	}
	b := c.bytes(idx)
	c.cleanHeld += int(b - e.held)
	e.held = b
}
