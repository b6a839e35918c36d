package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

func cacheKey(i int) []byte { return []byte(fmt.Sprintf("key-%d", i)) }

func TestHotCacheEvictsUnused(t *testing.T) {
	c := newHotCache(3)
	for i := range 3 {
		k := cacheKey(i)
		c.insert(k, c.hash(k))
	}
	k0 := cacheKey(0)
	c.touch(c.lookup(k0, c.hash(k0))) // 0 used since the hand passed: 1 goes first
	k3 := cacheKey(3)
	c.insert(k3, c.hash(k3))
	for i, want := range []bool{true, false, true, true} {
		k := cacheKey(i)
		if got := c.lookup(k, c.hash(k)) != noSlot; got != want {
			t.Errorf("after evicting: key %d cached = %t, want %t", i, got, want)
		}
	}
	if c.live != 3 {
		t.Fatalf("live = %d, want 3", c.live)
	}
}

func TestHotCacheKeepsDirtyEntriesUntilFlushed(t *testing.T) {
	c := newHotCache(2)
	for i := range 5 {
		k := cacheKey(i)
		idx := c.insert(k, c.hash(k))
		if !c.markDirty(idx) {
			t.Fatalf("key %d: markDirty on a clean entry reported already dirty", i)
		}
		if c.markDirty(idx) {
			t.Fatalf("key %d: second markDirty reported clean", i)
		}
	}
	if c.live != 5 || len(c.dirty) != 5 {
		t.Fatalf("live %d, dirty %d; want 5 and 5: dirty entries must not be evicted", c.live, len(c.dirty))
	}
	c.flushed()
	if c.live != 2 || len(c.dirty) != 0 {
		t.Fatalf("after flush: live %d, dirty %d; want 2 and 0", c.live, len(c.dirty))
	}
	// The two most recently dirtied keys survive.
	for i := range 5 {
		k := cacheKey(i)
		if got, want := c.lookup(k, c.hash(k)) != noSlot, i >= 3; got != want {
			t.Errorf("key %d cached = %t, want %t", i, got, want)
		}
	}
}

// A random workload against a map model exercises probing, backward-shift
// deletion, table growth and entry recycling.
func TestHotCacheAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, capacity := range []int{1, 7, 64, 300} {
		c := newHotCache(capacity)
		model := map[string]string{} // what the cache holds: key → value
		dirty := map[string]bool{}
		for step := range 20000 {
			k := cacheKey(r.IntN(4 * capacity))
			if len(k)%3 == 0 { // some keys too long to fit inline
				k = append(k, strings.Repeat("-", inlineRoom)...)
			}
			h := c.hash(k)
			idx := c.lookup(k, h)
			_, inModel := model[string(k)]
			if (idx != noSlot) != inModel {
				t.Fatalf("cap %d step %d: key %s cached=%t, model=%t", capacity, step, k, idx != noSlot, inModel)
			}
			if inModel && string(c.val(idx)) != model[string(k)] {
				t.Fatalf("cap %d step %d: key %s = %q, model %q", capacity, step, k, c.val(idx), model[string(k)])
			}
			switch op := r.IntN(10); {
			case op < 6: // write
				if idx == noSlot {
					idx = c.insert(k, h)
				}
				v := fmt.Sprint(step) + strings.Repeat("v", r.IntN(3)*inlineRoom/2)
				c.setVal(idx, []byte(v))
				c.markDirty(idx)
				model[string(k)] = v
				dirty[string(k)] = true
			case op < 9: // read
				if idx != noSlot {
					c.touch(idx)
				}
			default:
				c.flushed()
				clear(dirty)
			}
			// Whatever the model holds beyond the dirty keys may have been
			// evicted; drop from the model what the cache dropped, but a
			// dirty key must never go.
			for mk := range model {
				b := []byte(mk)
				if c.lookup(b, c.hash(b)) == noSlot {
					if dirty[mk] {
						t.Fatalf("cap %d step %d: dirty key %s evicted", capacity, step, mk)
					}
					delete(model, mk)
				}
			}
			if len(model) != c.live {
				t.Fatalf("cap %d step %d: live %d, model %d", capacity, step, c.live, len(model))
			}
			if c.live > capacity && c.live > len(dirty) {
				t.Fatalf("cap %d step %d: %d live entries with %d dirty exceed capacity", capacity, step, c.live, len(dirty))
			}
		}
	}
}

// The slot table starts small and grows with the entries, at most half
// full, so that a subtask with few keys holds little.
func TestHotCacheTableGrowsWithEntries(t *testing.T) {
	c := newHotCache(DefaultCacheEntries)
	if n := len(c.slots); n > 2*startEntries {
		t.Fatalf("a new cache has %d slots, want at most %d", n, 2*startEntries)
	}
	for i := range DefaultCacheEntries {
		k := cacheKey(i)
		c.insert(k, c.hash(k))
		if 2*c.live > len(c.slots) {
			t.Fatalf("%d entries in %d slots", c.live, len(c.slots))
		}
	}
	for i := range DefaultCacheEntries {
		k := cacheKey(i)
		if c.lookup(k, c.hash(k)) == noSlot {
			t.Fatalf("key %d lost as the table grew", i)
		}
	}
}

func TestHotCacheSteadyStateDoesNotAllocate(t *testing.T) {
	c := newHotCache(16)
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = cacheKey(i)
	}
	val := []byte("value")
	step := func(i int) {
		k := keys[i%len(keys)]
		h := c.hash(k)
		idx := c.lookup(k, h)
		if idx == noSlot {
			idx = c.insert(k, h)
		}
		c.setVal(idx, val)
		c.markDirty(idx)
		if i%8 == 7 {
			c.flushed()
		}
	}
	for i := range 1000 { // warm up: grow every buffer once
		step(i)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() { step(i); i++ }); n != 0 {
		t.Fatalf("%v allocations per operation, want 0", n)
	}
}

// Clean entries are bounded in bytes as well as in number: large values
// beyond maxCleanBytes go at the flush, the most recently used stay.
func TestHotCacheBoundsCleanBytes(t *testing.T) {
	c := newHotCache(4096)
	val := make([]byte, 60<<10)
	const n = 1000 // about 60 MB of values
	for i := range n {
		k := cacheKey(i)
		idx := c.insert(k, c.hash(k))
		c.setVal(idx, val)
		c.entries[idx].present = true
		c.markDirty(idx)
	}
	c.flushed()
	held := 0
	for idx := range c.entries {
		if e := &c.entries[idx]; e.used && !e.dirty {
			held += c.spillBytes(int32(idx))
		}
	}
	if held > maxCleanBytes || c.live == 0 {
		t.Fatalf("clean entries hold %d bytes in %d entries, want at most %d and some", held, c.live, maxCleanBytes)
	}
	last := cacheKey(n - 1)
	if c.lookup(last, c.hash(last)) == noSlot {
		t.Fatal("the most recently written entry was evicted")
	}
	retained := 0
	for _, idx := range c.free {
		retained += c.spillBytes(idx)
	}
	if retained > len(c.free)*maxRetainedValue {
		t.Fatalf("free entries retain %d bytes", retained)
	}
}

// An entry is one 64-byte cache line: the layout's point.
func TestHotCacheEntryIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(cacheEntry{}); n != 64 {
		t.Fatalf("cacheEntry is %d bytes, want 64", n)
	}
}

// Keys and values on either side of what fits inline, and values that move
// between inline and spilled, read back as written; a free entry reused
// for another key shows nothing of the one before; cleanHeld stays what
// the clean entries hold.
func TestHotCacheInlineAndSpilledKeysAndValues(t *testing.T) {
	c := newHotCache(8)
	key := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	vals := [][]byte{nil, []byte("v"), key(8, 'v'), key(inlineRoom-1, 'w'), key(inlineRoom, 'x'),
		key(inlineRoom+1, 'y'), key(300, 'z'), []byte("short again")}
	check := func(what string, idx int32, k, v []byte) {
		t.Helper()
		if got := c.lookup(k, c.hash(k)); got != idx {
			t.Fatalf("%s: key of %d bytes found at %d, want %d", what, len(k), got, idx)
		}
		if !bytes.Equal(c.key(idx), k) || !bytes.Equal(c.val(idx), v) || c.valLen(idx) != len(v) {
			t.Fatalf("%s: entry holds key %q value %q, want %q and %q", what, c.key(idx), c.val(idx), k, v)
		}
	}
	heldMatches := func(what string) {
		t.Helper()
		sum := 0
		for idx := range c.entries {
			if e := &c.entries[idx]; e.used && !e.dirty {
				sum += int(c.bytes(int32(idx)))
			}
		}
		if sum != c.cleanHeld {
			t.Fatalf("%s: clean entries hold %d bytes, the cache counts %d", what, sum, c.cleanHeld)
		}
	}
	for round, klen := range []int{1, inlineRoom - 8, inlineRoom - 1, inlineRoom, inlineRoom + 1, 200} {
		k := key(klen, byte('a'+round))
		h := c.hash(k)
		idx := c.insert(k, h)
		check("inserted", idx, k, nil)
		for _, v := range vals {
			c.setVal(idx, v)
			c.recount(idx)
			check("set", idx, k, v)
			heldMatches("set")
		}
		// A value that fits beside the key stays inline; one that does
		// not is spilled.
		c.setVal(idx, vals[5])
		if fits, e := klen <= inlineRoom && klen+len(vals[5]) <= inlineRoom, &c.entries[idx]; (e.vlen != spilled) != fits {
			t.Fatalf("key of %d bytes with a value of %d: value inline %t, want %t", klen, len(vals[5]), e.vlen != spilled, fits)
		}
		c.markDirty(idx)
		c.flushed()
		check("flushed", idx, k, vals[5])
		c.evict(idx)
		heldMatches("evicted")
		if c.lookup(k, h) != noSlot {
			t.Fatalf("key of %d bytes still found after its eviction", klen)
		}
		// The next insert takes the entry evicted just now, spill and all.
		k2 := key(klen/2+1, byte('A'+round))
		idx2 := c.insert(k2, c.hash(k2))
		if idx2 != idx {
			t.Fatalf("insert took entry %d, want the free entry %d", idx2, idx)
		}
		check("reused", idx2, k2, nil)
		heldMatches("reused")
		c.evict(idx2)
	}
}

// The entries move when their table grows: keys and values, inline and
// spilled, move with them, and the entries a full table grew through keep
// counting what they hold.
func TestHotCacheGrowthKeepsEntries(t *testing.T) {
	c := newHotCache(5000)
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, i%70) }
	key := func(i int) []byte { return []byte(fmt.Sprintf("%0*d", 1+i%50, i)) }
	for i := range 5000 {
		k := key(i)
		idx := c.insert(k, c.hash(k))
		c.setVal(idx, val(i))
		c.recount(idx)
	}
	for i := range 5000 {
		k := key(i)
		idx := c.lookup(k, c.hash(k))
		if idx == noSlot || !bytes.Equal(c.val(idx), val(i)) {
			t.Fatalf("key %d: entry %d after growth, want value of %d bytes", i, idx, len(val(i)))
		}
	}
	if len(c.spills) == 0 || len(c.spills) == 5000 {
		t.Fatalf("%d spills for 5000 entries: the test covers both layouts only with some", len(c.spills))
	}
}

// The spills of free entries go within the clean budget at a flush, back to
// the spills' free list, and new entries take them from there.
func TestHotCacheReleasesAndReusesSpills(t *testing.T) {
	c := newHotCache(4)
	c.cleanBytes = 4 << 10
	big := bytes.Repeat([]byte("b"), 2<<10)
	for i := range 16 {
		k := cacheKey(i)
		idx := c.insert(k, c.hash(k))
		c.setVal(idx, big)
		c.entries[idx].present = true
		c.entries[idx].blind = true
		c.markDirty(idx)
	}
	c.flushed() // blind: every entry leaves, keeping its buffer within the budget
	kept := 0
	for _, idx := range c.free {
		kept += c.spillBytes(idx)
	}
	if kept > c.cleanBytes || len(c.spillFree) == 0 {
		t.Fatalf("free entries keep %d bytes over a budget of %d, %d spills free", kept, c.cleanBytes, len(c.spillFree))
	}
	spills := len(c.spills)
	for i := range 16 {
		k := cacheKey(100 + i)
		idx := c.insert(k, c.hash(k))
		c.setVal(idx, big)
		c.markDirty(idx)
	}
	if len(c.spills) != spills {
		t.Fatalf("%d spills after as many entries spilled again, want the %d there were", len(c.spills), spills)
	}
}
