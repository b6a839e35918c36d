package wstream

import (
	"encoding/binary"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// Two host calls per record add up, so state does not cross the ABI per
// Get and Put (abi/ABI.md, "How the SDKs use them"). In Process and
// OnTimer, the first access to a state at a namespace reads it for the keys
// of the next chunk records from the current one on, in one
// state_get_many whose requests point at the keys in the batch; the host's
// results are the cache, which later accesses index by record, without
// hashing or comparing keys. Writes change the results and mark them
// dirty; dirty entries go back in state_write_batch calls before a map
// iteration and when the callback ends, whether it succeeds or fails. The
// build tag wstream_unbatched turns the cache off (batched.go).

const (
	maxStateKey   = 64 << 10 // the ABI's key and namespace limit
	maxStateValue = 16 << 20 // the ABI's value limit
	maxStateList  = 1 << 16  // entries of a state_get_many or state_write_batch
	maxGroups     = 8
	// chunk is how many records a group reads ahead. The host reads them
	// all, then writes back those written: a few at a time, its state
	// lookups stay in its caches.
	chunk      = 256
	firstChunk = 16 << 10
	// warmChunk is the state cache's memory made at open (module.warm):
	// a batch of 1,000 records reading one state needs about 44 KiB.
	warmChunk   = 64 << 10
	keepChunk   = 1 << 20 // a larger chunk is dropped after the callback
	firstRoom   = 16
	maxRoom     = 4096
	requestSize = 16
	resultSize  = 12
	writeSize   = 28
	dirtyBit    = 1 << 31
)

// A group caches state h at namespace ns for the keys of records [start,
// start+n) of the callback's batch: req holds the state_get_many requests,
// one per record, res the host's results (and the values after them). The
// result of record i's request names the request of the first record with
// the same key, whose result is that key's entry: the cache rewrites it on
// Put and Delete, with dirtyBit in its first field and the address of the
// value written.
type group struct {
	index   int // in stateCache.groups
	h       int32
	ns      []byte
	start   int
	n       int
	req     []byte
	res     []byte
	resBase uint32 // the address of res
	slow    bool   // reading it failed: (h, ns) goes to the host at once
}

// stateCache is the per-callback state cache of one operator.
type stateCache struct {
	groups []group // at most maxGroups; their buffers are kept for reuse
	ng     int
	last   int // the group of the last access, + 1; 0 for none
	dirty  []uint32
	// mem holds what the cache hands out and points the host at: carved,
	// never overwritten, during a callback; when it is full a new chunk
	// replaces it, and old keeps the full ones alive until the callback
	// ends.
	mem     []byte
	memBase uint32 // the address of mem
	used    int
	old     [][]byte
	list    []byte // write lists for the host
	room    int    // value bytes per request a group's results leave room for
	err     error  // a write-back that failed before the end of the callback

	// The callback's batch, its record count, and the current record's
	// (or timer's) offset and key length: what a group reads ahead, and
	// where the current key is (key). in is nil outside Process and
	// OnTimer. The current record's index is progress (curRec). The
	// per-record loop stores two integers here and progress: the key as a
	// slice (three words and a write barrier's check) and the index cost
	// the stateless pipeline's operators 5-8% of their time.
	in  []byte
	n   int
	off int
	kl  int
}

// key is the current record's (or timer's) key, read from its header in
// the batch; nil outside Process and OnTimer.
func (sc *stateCache) key() []byte {
	if sc.in == nil {
		return nil
	}
	k := sc.off + abi.RecordHeaderSize
	return sc.in[k : k+sc.kl : k+sc.kl]
}

// curRec is the index of the current record or timer in the callback's
// batch: progress, which the per-record loop stores for progress_at.
func curRec() int { return int(progress) }

// alloc returns n bytes of mem and their address.
func (sc *stateCache) alloc(n int) ([]byte, uint32) {
	if len(sc.mem)-sc.used < n {
		sc.grow(n)
	}
	at := sc.used
	sc.used += n
	return sc.mem[at : at+n : at+n], sc.memBase + uint32(at)
}

func (sc *stateCache) grow(n int) {
	if sc.mem != nil {
		sc.old = append(sc.old, sc.mem)
	}
	sc.mem = make([]byte, max(n, 2*len(sc.mem), firstChunk))
	sc.memBase = addr(sc.mem)
	sc.used = 0
}

// bytesAt returns the n bytes at address p, which the cache handed to the
// host: in g's results, or in its memory.
func (sc *stateCache) bytesAt(g *group, p uint32, n int) []byte {
	if off := int(p - g.resBase); off < len(g.res) {
		return g.res[off : off+n : off+n]
	}
	if off := int(p - sc.memBase); off < len(sc.mem) {
		return sc.mem[off : off+n : off+n]
	}
	for _, m := range sc.old {
		if off := int(p - addr(m)); off < len(m) {
			return m[off : off+n : off+n]
		}
	}
	return nil
}

// reset empties the cache after a callback, keeping its memory for the
// next one (but not a chunk over keepChunk).
func (sc *stateCache) reset() {
	for j := range sc.ng {
		g := &sc.groups[j]
		g.ns, g.req, g.res = nil, nil, nil
	}
	sc.ng, sc.last, sc.err = 0, 0, nil
	sc.dirty = sc.dirty[:0]
	clear(sc.old)
	sc.old = sc.old[:0]
	sc.used = 0
	if len(sc.mem) > keepChunk {
		sc.mem = nil
	}
	if cap(sc.list) > keepChunk {
		sc.list = nil
	}
	sc.in, sc.kl = nil, 0
	resetAddrs()
	if sc.mem != nil {
		sc.memBase = addr(sc.mem) // outside wasm, addresses last one callback
	}
}

// groupFor returns the group that caches (h, ns) for the current record,
// creating it when there is room; nil when the access must go to the host
// at once.
func (c *Context) groupFor(h int32, ns []byte) *group {
	sc := &c.sc
	if sc.last != 0 {
		g := &sc.groups[sc.last-1]
		if g.h == h && uint(curRec()-g.start) < uint(g.n) && string(g.ns) == string(ns) {
			return g
		}
	}
	if sc.in == nil {
		return nil
	}
	for j := range sc.ng {
		g := &sc.groups[j]
		if g.h != h || string(g.ns) != string(ns) {
			continue
		}
		if g.slow {
			return nil
		}
		if uint(curRec()-g.start) >= uint(g.n) {
			// Past its records: the group moves on to the next ones. Its
			// writes go back first, so that the host's answers include
			// them.
			if err := c.flushState(); err != nil && sc.err == nil {
				sc.err = err
			}
			if c.openGroup(g, h, ns); g.slow {
				sc.last = 0
				return nil
			}
		}
		sc.last = j + 1
		return g
	}
	if sc.ng == maxGroups {
		return nil
	}
	if sc.ng == len(sc.groups) {
		sc.groups = append(sc.groups, group{})
	}
	g := &sc.groups[sc.ng]
	g.index = sc.ng
	sc.ng++
	if c.openGroup(g, h, ns); g.slow {
		return nil
	}
	sc.last = sc.ng
	return g
}

// openGroup makes g the group of (h, ns) for the next chunk records from
// the current one on, read with one state_get_many. A group that cannot be
// read is slow: its accesses go to the host at once, which reports what
// went wrong.
func (c *Context) openGroup(g *group, h int32, ns []byte) {
	sc := &c.sc
	g.h, g.start, g.n, g.slow = h, curRec(), 0, true
	var nsAddr uint32
	g.ns, nsAddr = sc.alloc(len(ns))
	copy(g.ns, ns)
	nsLen := uint32(len(g.ns))
	n := min(sc.n-curRec(), chunk)
	req, _ := sc.alloc(requestSize * n)
	b := sc.in[sc.off:]
	base := addr(b)
	// No calls in the loop (not even copy or binary's methods that do not
	// inline): under a call deadline every Go call costs a termination
	// check in wasm.
	off, k := 0, 0
	for ; k < n; k++ {
		// Records past the current one are not checked yet: stop at a
		// malformed one, which the callback reports when it gets there.
		d := b[off:]
		if len(d) < abi.RecordHeaderSize {
			break
		}
		kl, vl := binary.LittleEndian.Uint32(d[12:]), binary.LittleEndian.Uint32(d[16:])
		if uint64(kl)+uint64(vl) > uint64(len(d)-abi.RecordHeaderSize) {
			break
		}
		r := req[requestSize*k : requestSize*k+requestSize]
		binary.LittleEndian.PutUint32(r, base+uint32(off+abi.RecordHeaderSize))
		binary.LittleEndian.PutUint32(r[4:], kl)
		binary.LittleEndian.PutUint32(r[8:], nsAddr)
		binary.LittleEndian.PutUint32(r[12:], nsLen)
		off += abi.RecordHeaderSize + int(kl) + int(vl)
	}
	if sc.room == 0 {
		sc.room = firstRoom
	}
	res, resBase := sc.alloc(k * (resultSize + sc.room))
	need := hostStateGetMany(h, req[:requestSize*k], res)
	if need < 0 {
		return
	}
	if int(need) > len(res) && k > 0 {
		// Values were left out, to be read one by one: leave more room
		// next time.
		sc.room = min((int(need)-resultSize*k)/k+1, maxRoom)
	}
	g.n, g.req, g.res, g.resBase, g.slow = k, req, res, resBase, false
}

// entry returns the result that is the current record's entry and the
// request index it is the result of.
func (g *group) entry(rec int) ([]byte, uint32) {
	f := binary.LittleEndian.Uint32(g.res[resultSize*(rec-g.start):]) &^ dirtyBit
	at := resultSize * int(f)
	return g.res[at : at+resultSize : at+resultSize], f
}

// What the cache knows of an entry (group.value).
const (
	entryFound   = iota // its value
	entryAbsent         // that there is none
	entryUnknown        // nothing: state_get must read it (a value the results had no room for, or a status)
)

// value returns the current record's entry in g.
func (sc *stateCache) value(g *group) ([]byte, int) {
	r, _ := g.entry(curRec())
	vlen := int32(binary.LittleEndian.Uint32(r[4:]))
	if vlen < 0 {
		if vlen == abi.StatusNotFound {
			return nil, entryAbsent
		}
		return nil, entryUnknown
	}
	if vptr := binary.LittleEndian.Uint32(r[8:]); vptr != 0 {
		if v := sc.bytesAt(g, vptr, int(vlen)); v != nil {
			return v, entryFound
		}
	}
	return nil, entryUnknown
}

// hit returns the group of the last access when it caches (h, ns) for the
// current record: the common case, answered without a call.
func (sc *stateCache) hit(h int32, ns []byte) *group {
	if sc.last == 0 {
		return nil
	}
	g := &sc.groups[sc.last-1]
	if g.h != h || uint(curRec()-g.start) >= uint(g.n) || len(g.ns) != len(ns) || len(ns) > 0 && string(g.ns) != string(ns) {
		return nil
	}
	return g
}

// get reads (current key, ns) of handle h: from the cache, or with
// state_get for what the cache lacks.
func (c *Context) get(h int32, name string, ns []byte) ([]byte, bool, error) {
	var g *group
	if batchedState {
		g = c.groupFor(h, ns)
	}
	if g == nil {
		return c.getDirect(h, name, ns)
	}
	switch v, st := c.sc.value(g); st {
	case entryFound:
		return v, true, nil
	case entryAbsent:
		return nil, false, nil
	}
	// A value left out of the results, or a status: state_get reads the
	// one, reports the other.
	v, ok, err := c.getDirect(h, name, ns)
	if !ok || err != nil {
		return v, ok, err
	}
	kept, at := c.sc.alloc(len(v))
	copy(kept, v)
	r, _ := g.entry(curRec())
	binary.LittleEndian.PutUint32(r[4:], uint32(len(v)))
	binary.LittleEndian.PutUint32(r[8:], at)
	return kept, true, nil
}

// write stores v (or deletes, when del) for (current key, ns) of handle h.
func (c *Context) write(h int32, what, name string, ns, v []byte, del bool) error {
	var g *group
	if batchedState {
		if c.sc.kl > maxStateKey || len(ns) > maxStateKey || (!del && len(v) > maxStateValue) {
			return callErr(what, name, abi.StatusLimit)
		}
		g = c.groupFor(h, ns)
	}
	if g == nil {
		var st int32
		if del {
			st = hostStateDelete(h, c.Key(), ns)
		} else {
			st = hostStatePut(h, c.Key(), ns, v)
		}
		if st < 0 {
			return callErr(what, name, st)
		}
		return nil
	}
	c.sc.put(g, v, del)
	return nil
}

// put records a write of the current record's entry in g: v, or a
// deletion when del.
func (sc *stateCache) put(g *group, v []byte, del bool) {
	r := sc.dirtyEntry(g)
	if del {
		binary.LittleEndian.PutUint32(r[4:], uint32(0xffffffff)) // NOT_FOUND
		binary.LittleEndian.PutUint32(r[8:], 0)
		return
	}
	kept, at := sc.alloc(len(v))
	copy(kept, v)
	binary.LittleEndian.PutUint32(r[4:], uint32(len(v)))
	binary.LittleEndian.PutUint32(r[8:], at)
}

// dirtyEntry returns the current record's entry in g, marked dirty.
func (sc *stateCache) dirtyEntry(g *group) []byte {
	r, f := g.entry(curRec())
	if first := binary.LittleEndian.Uint32(r); first&dirtyBit == 0 {
		binary.LittleEndian.PutUint32(r, first|dirtyBit)
		sc.dirty = append(sc.dirty, uint32(g.index)<<17|f)
	}
	return r
}

// flushState hands the cached writes to the host, in state_write_batch
// calls of at most maxStateList writes.
func (c *Context) flushState() error {
	sc := &c.sc
	if !batchedState || len(sc.dirty) == 0 {
		return nil // and a module built without the cache does not import state_write_batch
	}
	dirty := sc.dirty
	sc.dirty = sc.dirty[:0]
	h, one := sc.groups[dirty[0]>>17].h, true
	for _, e := range dirty {
		one = one && sc.groups[e>>17].h == h
	}
	for len(dirty) > 0 {
		n := min(len(dirty), maxStateList)
		if cap(sc.list) < writeSize*n {
			sc.list = make([]byte, writeSize*n)
		}
		w := sc.list[:writeSize*n]
		// No calls in the loop, as in openGroup.
		groups := sc.groups
		for i, e := range dirty[:n] {
			g := &groups[e>>17]
			f := int(e & 0x1ffff)
			r := g.res[resultSize*f : resultSize*f+resultSize]
			q := g.req[requestSize*f : requestSize*f+requestSize]
			o := w[writeSize*i : writeSize*i+writeSize]
			binary.LittleEndian.PutUint32(r, uint32(f)) // clean again
			binary.LittleEndian.PutUint32(o, uint32(g.h))
			binary.LittleEndian.PutUint64(o[4:], binary.LittleEndian.Uint64(q))      // key
			binary.LittleEndian.PutUint64(o[12:], binary.LittleEndian.Uint64(q[8:])) // namespace
			binary.LittleEndian.PutUint32(o[20:], binary.LittleEndian.Uint32(r[8:])) // vptr
			binary.LittleEndian.PutUint32(o[24:], binary.LittleEndian.Uint32(r[4:])) // vlen; -1 (NOT_FOUND) deletes
		}
		if err := c.writeBack(w, h, one); err != nil {
			return err
		}
		dirty = dirty[n:]
	}
	return nil
}

func (c *Context) writeBack(w []byte, h int32, one bool) error {
	if st := hostStateWriteBatch(w); st < 0 {
		name := ""
		if one {
			name = c.stateName(h)
		}
		return callErr("write back state", name, st)
	}
	return nil
}

// endState writes the cached writes back and empties the cache, at the end
// of a callback.
func (c *Context) endState() error {
	err := c.flushState()
	if err == nil {
		err = c.sc.err
	}
	c.sc.reset()
	return err
}

func (c *Context) stateName(h int32) string {
	for name, si := range c.states {
		if si.h == h {
			return name
		}
	}
	return fmt.Sprintf("#%d", h)
}
