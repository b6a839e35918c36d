package host

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// The batched state functions of abi/ABI.md ("Batched state access"):
// optional imports that read or write many state entries in one host call.
// A module that does not import them sees no difference.
const (
	ImportStateGetMany    = "state_get_many"
	ImportStateWriteBatch = "state_write_batch"
)

// MaxStateBatchEntries bounds the requests of one state_get_many and the
// writes of one state_write_batch (LIMIT beyond). The host cannot stop a
// guest inside a host function, so one call must stay short whatever the
// guest passes.
const MaxStateBatchEntries = 1 << 16

// Encodings (abi/ABI.md): lists of fixed-size entries whose (ptr, len)
// pairs point into guest memory.
//
//	request := key_ptr:u32 key_len:u32 ns_ptr:u32 ns_len:u32
//	result  := first:u32 vlen:i32 vptr:u32
//	write   := h:i32 key_ptr:u32 key_len:u32 ns_ptr:u32 ns_len:u32 val_ptr:u32 val_len:i32
const (
	requestSize = 16
	resultSize  = 12
	writeSize   = 28
	writeDelete = -1
)

// getMany is what one state_get_many call builds before it writes the
// guest's out: the results, the values copied, and the table that finds
// repeated (key, namespace) pairs. Calls borrow one from getManyPool, so
// Instance needs no field for it.
type getMany struct {
	res    []byte
	vals   []byte
	slots  []uint32 // open addressing: request index + 1
	hashes []uint64 // per request
	ask    []int32  // the requests the store is asked for: not repeats, not too long
	one    []byte   // a value, without StateGetMany
	seed   maphash.Seed
}

var getManyPool = sync.Pool{New: func() any { return &getMany{seed: maphash.MakeSeed()} }}

// maxKeptGetMany bounds the buffers a pooled getMany keeps.
const maxKeptGetMany = 1 << 20

// hostStateGetMany is state_get_many(h i32, req_ptr i32, req_len i32,
// out_ptr i32, out_cap i32) -> i32: one result per request, in request
// order, then the values that fit, into out; it returns the size out needs
// to hold every value. Requests for a (key, namespace) already requested
// repeat the first one's result, with its index.
var hostStateGetMany = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateGetMany)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	req, ok := i.read(mem, ImportStateGetMany, "requests", stack[1], stack[2])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	out, ok := i.read(mem, ImportStateGetMany, "out", stack[3], stack[4])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	if len(req)%requestSize != 0 {
		setStatus(stack, abi.StatusBadArgument)
		return
	}
	n := len(req) / requestSize
	if n > MaxStateBatchEntries || resultSize*n > len(out) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	g := getManyPool.Get().(*getMany)
	defer g.release()
	st, need := g.run(i, s, mem, int32(uint32(stack[0])), req, uint32(stack[3]), len(out))
	if st != abi.StatusOK {
		setStatus(stack, st)
		return
	}
	// Every request and the bytes it points to were read: out may overlap
	// them.
	copy(out, g.res)
	copy(out[len(g.res):], g.vals)
	setStatus(stack, int32(min(need, math.MaxInt32)))
})

// collect checks the n requests of req, finds repeats (a result names the
// first request of its pair) and lists in g.ask those the store is asked.
// It reports false, having told the guest why, on a bad pair.
func (g *getMany) collect(i *Instance, mem api.Memory, all, req []byte, n int) bool {
	g.res = slices.Grow(g.res[:0], resultSize*n)[:resultSize*n]
	g.vals = g.vals[:0]
	g.hashes = g.hashes[:0]
	g.ask = g.ask[:0]
	size := 1
	for size < 2*n {
		size *= 2
	}
	if cap(g.slots) < size {
		g.slots = make([]uint32, size)
	}
	g.slots = g.slots[:size]
	clear(g.slots)
	mask := uint32(size - 1)
	for j := range n {
		r := req[j*requestSize:]
		key, ns, ok := pairIn(all, r)
		if !ok {
			i.badPair(mem, r, ImportStateGetMany, "request")
			return false
		}
		hash := g.hash(key, ns)
		g.hashes = append(g.hashes, hash)
		slot := uint32(hash) & mask
		first := -1
		for ; g.slots[slot] != 0; slot = (slot + 1) & mask {
			k := int(g.slots[slot] - 1)
			if g.hashes[k] != hash {
				continue
			}
			kk, kn, _ := pairIn(all, req[k*requestSize:])
			if string(kk) == string(key) && string(kn) == string(ns) {
				first = k
				break
			}
		}
		res := g.res[j*resultSize:]
		if first >= 0 {
			// Filled in once the first one's result is known.
			binary.LittleEndian.PutUint32(res, uint32(first))
			continue
		}
		g.slots[slot] = uint32(j + 1)
		binary.LittleEndian.PutUint32(res, uint32(j))
		if i.keyTooLong(key, ns) {
			limit := int32(abi.StatusLimit)
			binary.LittleEndian.PutUint32(res[4:], uint32(limit))
			binary.LittleEndian.PutUint32(res[8:], 0)
			continue
		}
		g.ask = append(g.ask, int32(j))
	}
	return true
}

// run answers the n requests of req into g.res and g.vals, for an out
// buffer at outPtr of outCap bytes. It returns the call's status and the
// size out needs for every value. Every pair is checked, and repeats found,
// before the store is asked for the others in one StateGetMany when it
// can (operator.StateManyGetter), which overlaps their cache misses.
func (g *getMany) run(i *Instance, s *slot, mem api.Memory, h int32, req []byte, outPtr uint32, outCap int) (int32, int) {
	n := len(req) / requestSize
	all := memBytes(mem)
	if !g.collect(i, mem, all, req, n) {
		return abi.StatusBadPointer, 0
	}
	base := resultSize * n // values start after the results
	need := base
	pair := func(u int) (key, ns []byte) {
		key, ns, _ = pairIn(all, req[int(g.ask[u])*requestSize:])
		return key, ns
	}
	var callErr error
	var refs *stateRefs
	answer := func(u int, v []byte, ref operator.StateRef, err error) error {
		if ref != 0 {
			r := req[int(g.ask[u])*requestSize:]
			refs.put(h, binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[8:]), ref)
		}
		res := g.res[int(g.ask[u])*resultSize:]
		vlen, vptr := int32(0), uint32(0)
		switch {
		case err == nil:
			vlen = int32(len(v))
			// Values are packed in request order; one that does not fit
			// is left out (only its size is told), a later one may fit.
			if start := len(g.vals); base+start+len(v) <= outCap {
				vptr = outPtr + uint32(base+start)
				g.vals = append(g.vals, v...)
			}
			need += len(v)
		default:
			st := operator.Status(err)
			if st != abi.StatusNotFound && st != abi.StatusKeyGroup && st != abi.StatusLimit {
				// The same for every request: the call's status.
				callErr = err
				return err
			}
			vlen = st
		}
		binary.LittleEndian.PutUint32(res[4:], uint32(vlen))
		binary.LittleEndian.PutUint32(res[8:], vptr)
		return nil
	}
	if many, ok := s.svc.(operator.StateManyGetter); ok {
		refs = i.stateRefs()
		refs.begin(len(g.ask))
		if err := many.StateGetMany(h, len(g.ask), pair, answer); err != nil && callErr == nil {
			callErr = err
		}
	} else {
		for u := range g.ask {
			key, ns := pair(u)
			v, err := s.svc.StateGet(h, key, ns, g.one[:0])
			g.one = v[:0]
			if answer(u, v, 0, err) != nil {
				break
			}
		}
	}
	if callErr != nil {
		return i.status(callErr), 0
	}
	// Repeats take their first request's result (the first comes before).
	for j := range n {
		res := g.res[j*resultSize:]
		if first := int(binary.LittleEndian.Uint32(res)); first != j {
			copy(res[4:resultSize], g.res[first*resultSize+4:first*resultSize+resultSize])
		}
	}
	return abi.StatusOK, need
}

func (g *getMany) release() {
	if cap(g.vals) > maxKeptGetMany || cap(g.res) > maxKeptGetMany || cap(g.slots) > maxKeptGetMany ||
		cap(g.ask) > maxKeptGetMany || cap(g.one) > maxKeptGetMany {
		return
	}
	getManyPool.Put(g)
}

// hash hashes a (key, namespace) pair to find repeated requests: short
// keys, the common case, without maphash's call.
func (g *getMany) hash(key, ns []byte) uint64 {
	h := uint64(len(key))<<32 | uint64(len(ns))
	if len(key) <= 16 && len(ns) <= 16 {
		return mix(mix(mix(mix(h, word(key)), word2(key)), word(ns)), word2(ns))
	}
	return mix(h, maphash.Bytes(g.seed, key)) ^ maphash.Bytes(g.seed, ns)
}

func mix(h, w uint64) uint64 {
	h = (h ^ w) * 0x9E3779B97F4A7C15
	return h ^ h>>29
}

// word and word2 read up to 16 bytes as two words, some bytes twice; with
// the length mixed in, they tell different strings apart as well as a
// full hash.
func word(b []byte) uint64 {
	switch n := len(b); {
	case n >= 8:
		return binary.LittleEndian.Uint64(b)
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32
	case n > 0:
		return uint64(b[0]) | uint64(b[n/2])<<8 | uint64(b[n-1])<<16
	}
	return 0
}

func word2(b []byte) uint64 {
	if n := len(b); n > 8 {
		return binary.LittleEndian.Uint64(b[n-8:])
	}
	return 0
}

// memBytes is the whole of guest memory: host functions slice lists of
// (ptr, len) pairs out of it without a call per pair. The guest does not
// run, so memory cannot grow, while a host function uses it.
func memBytes(mem api.Memory) []byte {
	b, _ := mem.Read(0, mem.Size())
	return b
}

// span is view on memBytes.
func span(all []byte, p, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if uint64(p)+uint64(n) > uint64(len(all)) || int32(n) < 0 {
		return nil, false
	}
	return all[p : p+n : p+n], true
}

// pairIn reads the (key, namespace) pairs at b[:16] of a list entry.
func pairIn(all, b []byte) (key, ns []byte, ok bool) {
	key, ok1 := span(all, binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]))
	ns, ok2 := span(all, binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:]))
	return key, ns, ok1 && ok2
}

// badPair logs the warning about the pair of b[:16] that lies outside
// guest memory, naming function fn and the list entry what.
func (i *Instance) badPair(mem api.Memory, b []byte, fn, what string) {
	if _, ok := i.read(mem, fn, what+" key", uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[4:]))); ok {
		i.read(mem, fn, what+" namespace", uint64(binary.LittleEndian.Uint32(b[8:])), uint64(binary.LittleEndian.Uint32(b[12:])))
	}
}

// hostStateWriteBatch is state_write_batch(batch_ptr i32, batch_len i32) ->
// i32: a list of puts and deletes, applied in order as state_put and
// state_delete would apply them. A list that is malformed, too long or
// points outside guest memory applies nothing; otherwise the first write
// that fails stops the call with its status, the writes before it applied.
var hostStateWriteBatch = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateWriteBatch)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	b, ok := i.read(mem, ImportStateWriteBatch, "batch", stack[0], stack[1])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	all := memBytes(mem)
	if st := i.checkWriteBatch(mem, all, b); st != abi.StatusOK {
		setStatus(stack, st)
		return
	}
	// A put of a pair a state_get_many read takes the store's ref to it
	// (stateRefs).
	rp, _ := s.svc.(operator.StateRefPutter)
	refs := i.refs
	if rp == nil {
		refs = nil
	}
	for ; len(b) > 0; b = b[writeSize:] {
		h := int32(binary.LittleEndian.Uint32(b))
		key, ns, _ := pairIn(all, b[4:])
		vp, vl := binary.LittleEndian.Uint32(b[20:]), int32(binary.LittleEndian.Uint32(b[24:]))
		var err error
		if vl == writeDelete {
			if i.keyTooLong(key, ns) {
				setStatus(stack, abi.StatusLimit)
				return
			}
			i.chargeState(len(key) + len(ns))
			err = s.svc.StateDelete(h, key, ns)
		} else {
			val, _ := span(all, vp, uint32(vl))
			if len(val) > i.q.valueBytes || i.keyTooLong(key, ns) {
				setStatus(stack, abi.StatusLimit)
				return
			}
			i.chargeState(len(key) + len(ns) + len(val))
			var ref operator.StateRef
			if refs != nil {
				ref = refs.get(h, binary.LittleEndian.Uint64(b[4:]), binary.LittleEndian.Uint64(b[12:]))
			}
			if ref != 0 {
				err = rp.StatePutRef(h, key, ns, val, ref)
			} else {
				err = s.svc.StatePut(h, key, ns, val)
			}
		}
		if err != nil {
			setStatus(stack, i.status(err))
			return
		}
	}
	setStatus(stack, abi.StatusOK)
})

// stateRefs remembers the operator.StateRef the store gave for each pair
// of recent state_get_many calls, by where the guest's request put the
// pair: (h, key_ptr, key_len, ns_ptr, ns_len). The SDKs write a pair back
// through the pointers they read it by, so state_write_batch finds its
// puts' refs here, and the store skips finding their entries again. A ref
// is a hint, which the store checks against the pair's bytes: a stale or
// wrong one costs a lookup, never a wrong write.
//
// The refs are a log in request order, and a put looks first at the entry
// after the one the previous put found: the SDKs write their dirty pairs
// back in the order they first read them, so a put costs one comparison,
// and a state_get_many an append, where a hash table cost a random access
// (a cache miss at 256 pairs a call) in each. A put the log's next entry
// does not match is looked up in an index of the log, built on the first
// such put, and the log goes on from there.
type stateRefs struct {
	log     []stateRef
	next    int      // the log entry the next put is expected at
	index   []uint16 // open addressing over log: entry + 1
	indexed int      // log[:indexed] is in index
}

// stateRefKeep bounds the log: a few state_get_many calls of the SDKs' 256
// pairs, 64 KiB an instance allocates at its first state_get_many. When a
// call would pass it, the older half of the log goes.
const (
	stateRefKeep      = 2048
	stateRefIndexBits = 12 // twice stateRefKeep slots
)

type stateRef struct {
	key, ns uint64 // pointer | length<<32, as in the request
	h       int32
	ref     operator.StateRef
}

func (i *Instance) stateRefs() *stateRefs {
	if i.refs == nil {
		i.refs = &stateRefs{log: make([]stateRef, 0, stateRefKeep)}
	}
	return i.refs
}

// begin starts the refs of a new state_get_many call of n pairs: the next
// put is expected at its first.
func (t *stateRefs) begin(n int) {
	if len(t.log)+min(n, stateRefKeep) > stateRefKeep {
		keep := t.log[len(t.log)-min(len(t.log), stateRefKeep/2):]
		t.log = t.log[:copy(t.log, keep)]
		t.indexed = 0
	}
	t.next = len(t.log)
}

func (t *stateRefs) put(h int32, key, ns uint64, ref operator.StateRef) {
	if len(t.log) == stateRefKeep {
		return // a call of more pairs than the log holds: the rest go without
	}
	t.log = append(t.log, stateRef{key: key, ns: ns, h: h, ref: ref})
}

func (t *stateRefs) get(h int32, key, ns uint64) operator.StateRef {
	if t.next < len(t.log) {
		if r := &t.log[t.next]; r.key == key && r.ns == ns && r.h == h {
			t.next++
			return r.ref
		}
	}
	j := t.find(h, key, ns)
	if j < 0 {
		return 0
	}
	t.next = j + 1
	return t.log[j].ref
}

// find returns the newest log entry of the pair, or -1, indexing what the
// index lacks first.
func (t *stateRefs) find(h int32, key, ns uint64) int {
	const mask = 1<<stateRefIndexBits - 1
	if len(t.log) == 0 {
		return -1
	}
	if t.indexed > len(t.log) || t.indexed == 0 {
		if t.index == nil {
			t.index = make([]uint16, 1<<stateRefIndexBits)
		}
		clear(t.index)
		t.indexed = 0
	}
	for ; t.indexed < len(t.log); t.indexed++ {
		r := &t.log[t.indexed]
		slot := refSlot(r.h, r.key, r.ns) & mask
		for t.index[slot] != 0 {
			if o := &t.log[t.index[slot]-1]; o.key == r.key && o.ns == r.ns && o.h == r.h {
				break // the newer entry takes the older one's slot
			}
			slot = (slot + 1) & mask
		}
		t.index[slot] = uint16(t.indexed + 1)
	}
	for slot := refSlot(h, key, ns) & mask; t.index[slot] != 0; slot = (slot + 1) & mask {
		if j := int(t.index[slot]) - 1; t.log[j].key == key && t.log[j].ns == ns && t.log[j].h == h {
			return j
		}
	}
	return -1
}

func refSlot(h int32, key, ns uint64) uint64 {
	x := (key ^ ns*0x9e3779b97f4a7c15 ^ uint64(uint32(h))<<40) * 0xff51afd7ed558ccd
	return x >> (64 - stateRefIndexBits)
}

// checkWriteBatch checks a state_write_batch list before anything is
// written: BAD_ARGUMENT for a length that is not a whole number of writes
// or a val_len below -1, LIMIT past MaxStateBatchEntries writes,
// BAD_POINTER for a pair outside guest memory.
func (i *Instance) checkWriteBatch(mem api.Memory, all, b []byte) int32 {
	if len(b)%writeSize != 0 {
		return abi.StatusBadArgument
	}
	if len(b)/writeSize > MaxStateBatchEntries {
		return abi.StatusLimit
	}
	// BAD_ARGUMENT before BAD_POINTER, whichever write has which: the first
	// BAD_POINTER is logged only once the list is known to be well formed.
	bad := -1
	for w, j := b, 0; len(w) > 0; w, j = w[writeSize:], j+1 {
		vp, vl := binary.LittleEndian.Uint32(w[20:]), int32(binary.LittleEndian.Uint32(w[24:]))
		if vl < writeDelete {
			return abi.StatusBadArgument
		}
		if bad >= 0 {
			continue
		}
		if _, _, ok := pairIn(all, w[4:]); !ok {
			bad = j
		} else if _, ok := span(all, vp, uint32(vl)); vl != writeDelete && !ok {
			bad = j
		}
	}
	if bad >= 0 {
		w := b[writeSize*bad:]
		if _, _, ok := pairIn(all, w[4:]); !ok {
			i.badPair(mem, w[4:], ImportStateWriteBatch, "write")
		} else {
			i.read(mem, ImportStateWriteBatch, "write value", uint64(binary.LittleEndian.Uint32(w[20:])), uint64(binary.LittleEndian.Uint32(w[24:])))
		}
		return abi.StatusBadPointer
	}
	return abi.StatusOK
}
