package builtin

import (
	"hash/maphash"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// countChunk is the records whose distinct keys the count reads in one
// StateGetMany and writes back before the next chunk: the 256 records of
// the guest SDKs' state caches (one state_get_many, then one
// state_write_batch; abi/ABI.md, "How the SDKs use them"), so that the
// keyed count's guest / native ratios compare the same algorithm.
const countChunk = 256

// countBatch is the batched count's scratch, kept across batches.
type countBatch struct {
	keys  [][]byte            // the batch's keys, by record
	uniq  []int32             // a chunk's distinct keys: the index of each one's first record
	of    []int32             // per record of the chunk: the index in uniq of its key
	n     []uint64            // per distinct key: its count
	refs  []operator.StateRef // per distinct key: StateGetMany's ref
	slots []int32             // open addressing over the chunk's keys: index in uniq + 1
	seed  maphash.Seed
}

// processBatched counts batch a chunk at a time: the state of the chunk's
// distinct keys in one StateGetMany, which overlaps their cache misses,
// then the chunk's records added up, then one StatePutRef per distinct
// key. A key several times in a chunk is read and written once, with all
// its records counted.
func (c *count) processBatched(batch []byte) error {
	b := &c.b
	b.keys = b.keys[:0]
	defer func() { clear(b.keys) }() // the batch's memory is the caller's
	if err := each(batch, func(r *abi.Record) error {
		b.keys = append(b.keys, r.Key)
		return nil
	}); err != nil {
		return err
	}
	for from := 0; from < len(b.keys); from += countChunk {
		if err := c.countChunk(b.keys[from:min(from+countChunk, len(b.keys))]); err != nil {
			return err
		}
	}
	return nil
}

func (c *count) countChunk(keys [][]byte) error {
	b := &c.b
	b.distinct(keys)
	u := len(b.uniq)
	b.n, b.refs = grow(b.n, u), grow(b.refs, u)
	err := c.many.StateGetMany(c.h, u, func(i int) ([]byte, []byte) { return keys[b.uniq[i]], nil },
		func(i int, v []byte, ref operator.StateRef, err error) error {
			n, err := c.stored(keys[b.uniq[i]], v, err)
			b.n[i], b.refs[i] = n, ref
			return err
		})
	if err != nil {
		return err
	}
	for _, i := range b.of {
		b.n[i]++
	}
	for i, j := range b.uniq {
		c.buf = putLEUint64(c.buf[:0], b.n[i])
		if err := c.ref.StatePutRef(c.h, keys[j], nil, c.buf, b.refs[i]); err != nil {
			return err
		}
	}
	return nil
}

// distinct fills uniq and of for keys, at most countChunk of them.
func (b *countBatch) distinct(keys [][]byte) {
	if b.slots == nil {
		b.slots = make([]int32, 2*countChunk) // a power of two, half full at most
		b.seed = maphash.MakeSeed()
	}
	clear(b.slots)
	mask := len(b.slots) - 1
	b.uniq, b.of = b.uniq[:0], b.of[:0]
	for j, k := range keys {
		s := int(maphash.Bytes(b.seed, k)) & mask
		for {
			i := b.slots[s] - 1
			if i < 0 {
				b.slots[s] = int32(len(b.uniq)) + 1
				b.of = append(b.of, int32(len(b.uniq)))
				b.uniq = append(b.uniq, int32(j))
				break
			}
			if string(keys[b.uniq[i]]) == string(k) {
				b.of = append(b.of, i)
				break
			}
			s = (s + 1) & mask
		}
	}
}

// grow returns s with length n, its elements not cleared.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
