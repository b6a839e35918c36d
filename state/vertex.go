package state

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// VertexState is the keyed state and the timers of one operator (vertex) in
// one subtask. It implements the state and timer methods of
// operator.Services; the runtime embeds it in its Services value. Like its
// Store, it is not safe for concurrent use.
type VertexState struct {
	s        *Store
	id       string
	keyed    bool
	declared bool // Vertex was called: keyed is known
	states   []registeredState
	// timerMid is the timer key part between key group and domain.
	timerMid []byte
	timers   [2]timerQueue // by domain
}

type registeredState struct {
	name string
	kind int32
	mid  []byte // entry key part between key group and record key
}

func newVertexState(s *Store, id string) *VertexState {
	v := &VertexState{s: s, id: id}
	// appendTimerMid ends with the domain byte; keep everything before it.
	mid := appendTimerMid(nil, id, 0)
	v.timerMid = mid[:len(mid)-1]
	v.timers[0].partial, v.timers[1].partial = s.timersPartial, s.timersPartial
	return v
}

// ID is the vertex id.
func (v *VertexState) ID() string { return v.id }

// RegisterState declares a state by name and kind (abi.StateValue or
// abi.StateMap) and returns its handle. The same name again returns the same
// handle; the same name with another kind is operator.ErrBadArgument.
func (v *VertexState) RegisterState(name string, kind int32) (int32, error) {
	if err := v.usable(); err != nil {
		return -1, err
	}
	if kind != abi.StateValue && kind != abi.StateMap {
		return -1, fmt.Errorf("%w: vertex %q: state %q has kind %d, want %d (value) or %d (map)",
			operator.ErrBadArgument, v.id, name, kind, abi.StateValue, abi.StateMap)
	}
	if name == "" {
		return -1, fmt.Errorf("%w: vertex %q: empty state name", operator.ErrBadArgument, v.id)
	}
	if len(name) > operator.MaxNameSize {
		return -1, fmt.Errorf("%w: vertex %q: state name of %d bytes exceeds %d",
			operator.ErrLimit, v.id, len(name), operator.MaxNameSize)
	}
	for i := range v.states {
		if st := &v.states[i]; st.name == name {
			if st.kind != kind {
				return -1, fmt.Errorf("%w: vertex %q: state %q registered with kind %d, now %d",
					operator.ErrBadArgument, v.id, name, st.kind, kind)
			}
			return int32(i), nil
		}
	}
	v.states = append(v.states, registeredState{name: name, kind: kind, mid: appendEntryMid(nil, v.id, name)})
	return int32(len(v.states) - 1), nil
}

// StateGet appends the value of (key, ns) to dst[:0] and returns it, or
// operator.ErrNotFound. It does not allocate when dst has room.
func (v *VertexState) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	pk, err := v.entryKey(h, key, ns)
	if err != nil {
		return dst[:0], err
	}
	idx, err := v.s.get(pk, v.s.cache.hash(pk))
	if err == nil && !v.s.cache.entries[idx].present {
		err = operator.ErrNotFound
	}
	if err != nil {
		return dst[:0], err
	}
	c := v.s.cache
	dst = append(dst[:0], c.val(idx)...)
	c.gotten(idx)
	return dst, nil
}

// StateGetMany is operator.StateManyGetter: StateGet for n pairs. It takes
// them a chunk at a time: it builds every pair's Pebble key and hash first
// and reads the cache slots and entries they lead to (cache.warm), so that
// the cache misses of the chunk overlap; then it looks each pair up.
func (v *VertexState) StateGetMany(h int32, n int, pair func(j int) (key, ns []byte), fn func(j int, value []byte, ref operator.StateRef, err error) error) error {
	m := getManyGet()
	defer m.release()
	for from := 0; from < n; {
		var err error
		if from, err = v.getChunk(m, h, from, n, pair, fn); err != nil {
			return err
		}
	}
	return nil
}

// A chunk of StateGetMany is manyGetChunk pairs, or fewer when their keys
// reach manyGetKeyBytes: enough for the processor to have as many misses in
// flight as it can, few enough that the chunk's entries stay in its caches
// until they are read, and that a guest listing keys of the largest size
// allowed does not make the host copy many of them at once.
const (
	manyGetChunk    = 128
	manyGetKeyBytes = 64 << 10
)

// getChunk is StateGetMany for the pairs from from on, below n, that make
// one chunk, with scratch m. It returns where the next chunk starts.
func (v *VertexState) getChunk(m *manyGet, h int32, from, n int, pair func(j int) (key, ns []byte), fn func(j int, value []byte, ref operator.StateRef, err error) error) (int, error) {
	s := v.s
	m.keys, m.ends, m.hashes, m.errs = m.keys[:0], m.ends[:0], m.hashes[:0], m.errs[:0]
	to := from
	for ; to < n && to-from < manyGetChunk && len(m.keys) < manyGetKeyBytes; to++ {
		key, ns := pair(to)
		start := len(m.keys)
		var err error
		if m.keys, err = v.appendEntryKey(m.keys, h, key, ns); err != nil {
			m.keys = m.keys[:start]
		}
		m.errs = append(m.errs, err)
		m.ends = append(m.ends, len(m.keys))
		m.hashes = append(m.hashes, s.cache.hash(m.keys[start:]))
	}
	m.slots = s.cache.warm(m.hashes, m.slots)
	start := 0
	for c, end := range m.ends {
		pk := m.keys[start:end:end]
		start = end
		idx, err := int32(noSlot), m.errs[c]
		if err == nil {
			idx, err = s.get(pk, m.hashes[c])
		}
		var val []byte
		var ref operator.StateRef
		if err == nil {
			ref = operator.StateRef(idx + 1)
			if s.cache.entries[idx].present {
				val = s.cache.val(idx)
			} else {
				err, idx = operator.ErrNotFound, noSlot
			}
		}
		if err := fn(from+c, val, ref, err); err != nil {
			return to, err
		}
		if idx != noSlot {
			s.cache.gotten(idx)
		}
	}
	return to, nil
}

// StatePut stores value for (key, ns). It is visible to StateGet and
// StateIter at once and reaches Pebble at the next Flush.
func (v *VertexState) StatePut(h int32, key, ns, value []byte) error {
	if len(value) > operator.MaxValueSize {
		return fmt.Errorf("%w: vertex %q: value of %d bytes exceeds %d",
			operator.ErrLimit, v.id, len(value), operator.MaxValueSize)
	}
	idx, err := v.dirtyEntry(h, key, ns)
	if err != nil {
		return err
	}
	return v.setValue(idx, value)
}

// setValue stores value in dirty cache entry idx.
func (v *VertexState) setValue(idx int32, value []byte) error {
	v.s.cache.setVal(idx, value)
	v.s.cache.entries[idx].present = true
	v.s.pendingBytes += len(value)
	return v.s.written()
}

// StatePutRef is operator.StateRefPutter: StatePut, applied to the cache
// entry ref leads to when that entry still holds (h, key, ns) (refEntry),
// without building the pair's Pebble key, hashing it and looking it up.
func (v *VertexState) StatePutRef(h int32, key, ns, value []byte, ref operator.StateRef) error {
	idx := int32(noSlot)
	if len(value) <= operator.MaxValueSize {
		idx = v.refEntry(h, key, ns, ref)
	}
	if idx == noSlot {
		return v.StatePut(h, key, ns, value)
	}
	if err := v.dirtyAt(idx, v.s.cache.key(idx), len(ns)); err != nil {
		return err
	}
	return v.setValue(idx, value)
}

// refEntry returns the cache entry ref leads to when it still holds the
// pair (h, key, ns), or noSlot. The entry is the pair's when its Pebble
// key is the pair's but for the key group, which comes from the key. An
// entry in the cache is one the store checked when it came in (the key's
// group is the subtask's, the sizes are within the limits), and the cache
// holds at most one entry a key.
func (v *VertexState) refEntry(h int32, key, ns []byte, ref operator.StateRef) int32 {
	c := v.s.cache
	idx := int32(ref) - 1
	if idx < 0 || int(idx) >= len(c.entries) || h < 0 || int(h) >= len(v.states) || v.usable() != nil {
		return noSlot
	}
	if !c.entries[idx].used {
		return noSlot
	}
	mid := v.states[h].mid
	var lb [binary.MaxVarintLen64]byte
	ln := binary.PutUvarint(lb[:], uint64(len(key)))
	k := c.key(idx)
	if len(k) != 2+len(mid)+ln+len(key)+len(ns) {
		return noSlot
	}
	k = k[2:]
	if string(k[:len(mid)]) != string(mid) || string(k[len(mid):len(mid)+ln]) != string(lb[:ln]) {
		return noSlot
	}
	k = k[len(mid)+ln:]
	if string(k[:len(key)]) != string(key) || string(k[len(key):]) != string(ns) {
		return noSlot
	}
	return idx
}

// StateDelete removes (key, ns); removing an absent entry is not an error.
func (v *VertexState) StateDelete(h int32, key, ns []byte) error {
	idx, err := v.dirtyEntry(h, key, ns)
	if err != nil {
		return err
	}
	v.s.cache.setVal(idx, nil)
	v.s.cache.entries[idx].present = false
	return nil
}

// dirtyEntry returns the cache entry of (h, key, ns), marked dirty.
func (v *VertexState) dirtyEntry(h int32, key, ns []byte) (int32, error) {
	pk, err := v.entryKey(h, key, ns)
	if err != nil {
		return noSlot, err
	}
	c := v.s.cache
	hash := c.hash(pk)
	idx := c.lookup(pk, hash)
	switch {
	case idx == noSlot && v.s.undo.open:
		// The journal needs the old value.
		if idx, err = v.s.load(pk, hash); err != nil {
			return noSlot, err
		}
	case idx == noSlot:
		// A blind write: the old value does not matter.
		idx = c.insert(pk, hash)
		c.entries[idx].blind = true
	}
	if err := v.dirtyAt(idx, pk, len(ns)); err != nil {
		return noSlot, err
	}
	return idx, nil
}

// dirtyAt marks cache entry idx, whose Pebble key is pk, dirty; its
// namespace is pk's last nsLen bytes.
func (v *VertexState) dirtyAt(idx int32, pk []byte, nsLen int) error {
	if v.s.undo.open {
		v.s.journalEntry(idx, pk, nsLen)
		if err := v.s.journalBound(); err != nil {
			return err
		}
	}
	v.s.markDirty(idx, pk, nsLen)
	return nil
}

// StateIter calls fn for each entry of key whose namespace starts with
// prefix and, when after is not nil, sorts strictly after after, in
// namespace order, until fn returns false. The slices passed to fn are
// valid only during the call. fn may call other state methods; the entries
// it sees are those as of the start of the iteration.
func (v *VertexState) StateIter(h int32, key, prefix, after []byte, fn func(ns, value []byte) bool) error {
	if len(prefix) > operator.MaxKeySize || len(after) > operator.MaxKeySize {
		return fmt.Errorf("%w: vertex %q: iteration prefix of %d or start of %d bytes exceeds %d",
			operator.ErrLimit, v.id, len(prefix), len(after), operator.MaxKeySize)
	}
	base, err := v.entryKey(h, key, nil)
	if err != nil {
		return err
	}
	s := v.s
	if len(s.cache.dirty) > 0 {
		if _, dirty := s.dirtyBasesNow()[s.cache.hash(base)]; dirty {
			// Iterating Pebble after a flush is simpler and cheaper than
			// merging the write-back cache into the iterator.
			if err := s.Flush(); err != nil {
				return err
			}
		}
	}
	// Pebble keeps the bounds during iteration and fn may reuse keyBuf, so
	// the bounds get their own memory.
	n := len(base)
	bounds := make([]byte, 0, 3*n+2*len(prefix)+len(after)+1)
	lower := append(append(bounds, base...), prefix...)
	upper := prefixSuccessor(lower[len(lower):], lower)
	if err := s.ready(); err != nil {
		return err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("state: vertex %q: iterate in %s: %w", v.id, s.dir, err)
	}
	var ok bool
	if after != nil && bytes.Compare(after, prefix) >= 0 {
		seek := append(append(upper[len(upper):], lower[:n]...), after...)
		ok = it.SeekGE(append(seek, 0))
	} else {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("state: vertex %q: iterate in %s: %w", v.id, s.dir, err)
		}
		if !fn(it.Key()[n:], val) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: vertex %q: iterate in %s: %w", v.id, s.dir, err)
	}
	return nil
}

// usable checks what every state and timer call needs: an open store and a
// keyed vertex.
func (v *VertexState) usable() error {
	if err := v.s.err; err != nil {
		return err
	}
	if !v.keyed {
		return fmt.Errorf("%w: vertex %q", operator.ErrNoKeyedState, v.id)
	}
	return nil
}

// checkKey checks the sizes of key and ns and the key's group, which it
// returns.
func (v *VertexState) checkKey(key, ns []byte) (int, error) {
	if len(key) > operator.MaxKeySize || len(ns) > operator.MaxKeySize {
		return 0, fmt.Errorf("%w: vertex %q: key of %d or namespace of %d bytes exceeds %d",
			operator.ErrLimit, v.id, len(key), len(ns), operator.MaxKeySize)
	}
	kg, owned := v.s.keyGroup(key)
	if !owned {
		return 0, fmt.Errorf("%w: vertex %q: key %q is in key group %d, subtask owns [%d, %d]",
			operator.ErrKeyGroup, v.id, truncate(key), kg, v.s.groups.Start, v.s.groups.End)
	}
	return kg, nil
}

// entryKey checks a state call and builds the Pebble key of (h, key, ns) in
// the store's scratch buffer.
func (v *VertexState) entryKey(h int32, key, ns []byte) ([]byte, error) {
	b, err := v.appendEntryKey(v.s.keyBuf[:0], h, key, ns)
	if err != nil {
		return nil, err
	}
	v.s.keyBuf = b
	return b, nil
}

// appendEntryKey is entryKey appending to dst.
func (v *VertexState) appendEntryKey(dst []byte, h int32, key, ns []byte) ([]byte, error) {
	if err := v.usable(); err != nil {
		return dst, err
	}
	if h < 0 || int(h) >= len(v.states) {
		return dst, fmt.Errorf("%w: vertex %q: handle %d (%d states registered)",
			operator.ErrBadHandle, v.id, h, len(v.states))
	}
	kg, err := v.checkKey(key, ns)
	if err != nil {
		return dst, err
	}
	b := binary.BigEndian.AppendUint16(dst, uint16(kg))
	b = append(b, v.states[h].mid...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, ns...)
	return b, nil
}

// timerKey checks a timer call and builds the timer's Pebble key in the
// store's scratch buffer.
func (v *VertexState) timerKey(domain int32, key, ns []byte, ts int64) ([]byte, error) {
	if err := v.usable(); err != nil {
		return nil, err
	}
	if domain != abi.TimeEvent && domain != abi.TimeProcessing {
		return nil, v.badDomain(domain)
	}
	kg, err := v.checkKey(key, ns)
	if err != nil {
		return nil, err
	}
	b := binary.BigEndian.AppendUint16(v.s.keyBuf[:0], uint16(kg))
	b = append(b, v.timerMid...)
	b = append(b, byte(domain))
	b = binary.BigEndian.AppendUint64(b, uint64(ts)^timeBias)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, ns...)
	v.s.keyBuf = b
	return b, nil
}

func (v *VertexState) badDomain(domain int32) error {
	return fmt.Errorf("%w: vertex %q: time domain %d, want %d (event) or %d (processing)",
		operator.ErrBadArgument, v.id, domain, abi.TimeEvent, abi.TimeProcessing)
}

// truncate shortens a key for an error message.
func truncate(key []byte) []byte {
	const limit = 64
	if len(key) > limit {
		return key[:limit]
	}
	return key
}
