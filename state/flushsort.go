package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"
)

// sortRef is a changed cache entry in Flush's sort: where its key and value
// are in Store.staged, and the first bytes of its key that tell keys apart
// (stageDirty), big-endian, so that most comparisons are of two integers
// in one array rather than of two keys behind two pointers into a cache
// of millions of entries (sorting the entries by their keys took a third
// of a keyed count's time at 1M keys).
type sortRef struct {
	hi, lo uint64
	off    int // the key, then the value; notStaged: in the entry
	idx    int32
	klen   uint16
	vlen   uint16 // absentLen: a deletion
}

// An entry whose key and value together are over maxStaged bytes is not
// copied: staging is for the many small entries whose misses it saves,
// and a flush of large values must not hold them twice.
const (
	maxStaged = 256
	notStaged = -1
	absentLen = math.MaxUint16
)

// kv returns r's key and value, and whether it is present.
func (r *sortRef) kv(c *hotCache, staged []byte) (key, val []byte, present bool) {
	if r.off == notStaged {
		return c.key(r.idx), c.val(r.idx), c.entries[r.idx].present
	}
	end := r.off + int(r.klen)
	key = staged[r.off:end:end]
	if r.vlen == absentLen {
		return key, nil, false
	}
	return key, staged[end : end+int(r.vlen) : end+int(r.vlen)], true
}

// maxKeptSortRefs and maxKeptStaged bound the scratch a store keeps
// between flushes.
const (
	maxKeptSortRefs = 1 << 20
	maxKeptStaged   = 64 << 20
)

// stageDirty copies the keys and values of the cache's dirty entries into
// s.staged, in one pass over the entries (each a memory miss or two in a
// large cache: the sort and the batch then read the copies, close
// together), adds the keys written to the store's filter, and leaves
// s.sortRefs in key order.
//
// Every key starts with its key group (2 bytes), then the vertex and
// state, which the changed entries of a flush mostly share. The abbreviated
// key is the key group, then the bytes that follow the part all the keys
// share after it, zero-padded: it orders two keys as the keys do, or ties,
// so ties alone need the keys compared. A key that ends within its
// abbreviation is padded with zeros and ties with a longer one that has
// zeros there; bytes.Compare then orders them.
func (s *Store) stageDirty() {
	c := s.cache
	refs, staged := s.sortRefs[:0], s.staged[:0]
	for _, idx := range c.dirty {
		e := &c.entries[idx]
		key, val := c.key(idx), c.val(idx)
		r := sortRef{off: notStaged, idx: idx}
		if n := len(key) + len(val); n <= maxStaged {
			r.off, r.klen, r.vlen = len(staged), uint16(len(key)), absentLen
			staged = append(staged, key...)
			if e.present {
				r.vlen = uint16(len(val))
				staged = append(staged, val...)
			}
		}
		if e.present {
			if s.whole && !e.filtered {
				s.filter.add(e.hash)
				e.filtered = true
			}
		}
		refs = append(refs, r)
	}
	s.sortRefs, s.staged = refs, staged
	if len(refs) == 0 {
		return
	}
	first, _, _ := refs[0].kv(c, staged)
	shared := max(len(first)-2, 0)
	for i := 1; i < len(refs) && shared > 0; i++ {
		k, _, _ := refs[i].kv(c, staged)
		if len(k) < 2 {
			shared = 0
			break
		}
		shared = min(shared, len(k)-2)
		shared = commonPrefix(first[2:2+shared], k[2:2+shared])
	}
	for i := range refs {
		r := &refs[i]
		k, _, _ := r.kv(c, staged)
		var buf [16]byte
		copy(buf[:2], k)
		if len(k) > 2+shared {
			copy(buf[2:], k[2+shared:])
		}
		r.hi, r.lo = binary.BigEndian.Uint64(buf[:8]), binary.BigEndian.Uint64(buf[8:])
	}
	slices.SortFunc(refs, func(a, b sortRef) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		ka, _, _ := a.kv(c, staged)
		kb, _, _ := b.kv(c, staged)
		return bytes.Compare(ka, kb)
	})
}

// commonPrefix is the length of the longest common prefix of a and b,
// which have the same length.
func commonPrefix(a, b []byte) int {
	n := 0
	for n+8 <= len(a) && binary.LittleEndian.Uint64(a[n:]) == binary.LittleEndian.Uint64(b[n:]) {
		n += 8
	}
	for n < len(a) && a[n] == b[n] {
		n++
	}
	return n
}

// markDirty makes cache entry idx, whose Pebble key is pk and namespace
// pk's last nsLen bytes, part of the next flush.
func (s *Store) markDirty(idx int32, pk []byte, nsLen int) {
	c := s.cache
	if c.markDirty(idx) {
		c.entries[idx].nsLen = int32(nsLen)
		if s.basesBuilt {
			s.dirtyBases[c.hash(pk[:len(pk)-nsLen])] = struct{}{}
		}
	}
}

// dirtyBasesNow returns dirtyBases, built from the dirty entries if it is
// not yet.
func (s *Store) dirtyBasesNow() map[uint64]struct{} {
	if !s.basesBuilt {
		c := s.cache
		for _, idx := range c.dirty {
			key := c.key(idx)
			s.dirtyBases[c.hash(key[:len(key)-int(c.entries[idx].nsLen)])] = struct{}{}
		}
		s.basesBuilt = true
	}
	return s.dirtyBases
}
