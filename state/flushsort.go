package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// sortRef is a changed cache entry in Flush's sort: idx, and the first
// bytes of its key that tell keys apart (sortDirty), big-endian, so that
// most comparisons are of two integers in one array rather than of two
// keys behind two pointers into a cache of millions of entries (sorting
// the indexes by their keys took a third of a keyed count's time at 1M
// keys).
type sortRef struct {
	hi, lo uint64
	idx    int32
}

// maxKeptSortRefs bounds the scratch a store keeps between flushes.
const maxKeptSortRefs = 1 << 20

// sortDirty returns the cache's dirty entries in key order, in refs[:0].
//
// Every key starts with its key group (2 bytes), then the vertex and
// state, which the changed entries of a flush mostly share. The abbreviated
// key is the key group, then the bytes that follow the part all the keys
// share after it, zero-padded: it orders two keys as the keys do, or ties,
// so ties alone need the keys compared. A key that ends within its
// abbreviation is padded with zeros and ties with a longer one that has
// zeros there; bytes.Compare then orders them.
func sortDirty(c *hotCache, refs []sortRef) []sortRef {
	refs = refs[:0]
	if len(c.dirty) == 0 {
		return refs
	}
	first := c.entries[c.dirty[0]].key
	shared := max(len(first)-2, 0)
	for _, idx := range c.dirty[1:] {
		k := c.entries[idx].key
		if len(k) < 2 {
			shared = 0
			break
		}
		shared = min(shared, len(k)-2)
		shared = commonPrefix(first[2:2+shared], k[2:2+shared])
	}
	for _, idx := range c.dirty {
		k := c.entries[idx].key
		var buf [16]byte
		copy(buf[:2], k)
		if len(k) > 2+shared {
			copy(buf[2:], k[2+shared:])
		}
		refs = append(refs, sortRef{hi: binary.BigEndian.Uint64(buf[:8]), lo: binary.BigEndian.Uint64(buf[8:]), idx: idx})
	}
	slices.SortFunc(refs, func(a, b sortRef) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		return bytes.Compare(c.entries[a.idx].key, c.entries[b.idx].key)
	})
	return refs
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
			e := &c.entries[idx]
			s.dirtyBases[c.hash(e.key[:len(e.key)-int(e.nsLen)])] = struct{}{}
		}
		s.basesBuilt = true
	}
	return s.dirtyBases
}
