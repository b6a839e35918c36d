package state

// keyFilter is a Bloom filter over the hashes (hotCache.hash) of the state
// keys a store that started empty (Store.whole) has written to Pebble. Once
// its cache has evicted an entry, a key the cache does not hold may be in
// Pebble; a key the filter has never seen is not, and its read costs no
// Pebble lookup. Most reads of a keyed count's first-time keys are such.
// A false positive costs the Pebble read the filter would have saved.
//
// One 64-bit word a key with four of its bits set (a register-blocked
// filter): a probe is one memory access. The filter is a list of parts,
// each twice the keys of the one before, since the number of keys is not
// known ahead: a part takes keys until it holds its share, at about 10
// bits a key (a false positive rate near 2%), and a probe looks in each.
type keyFilter struct {
	parts []filterPart
}

type filterPart struct {
	words []uint64
	shift uint // 64 - log2(len(words))
	keys  int
	most  int
}

// firstFilterKeys is what the first part holds: 80 KiB.
const firstFilterKeys = 1 << 16

// filterBitsPerKey sizes the parts.
const filterBitsPerKey = 10

func newFilterPart(keys int) filterPart {
	words := 1
	for words*64 < keys*filterBitsPerKey {
		words <<= 1
	}
	shift := uint(64)
	for w := words; w > 1; w >>= 1 {
		shift--
	}
	return filterPart{words: make([]uint64, words), shift: shift, most: keys}
}

// filterWord is the word of h in a part of 64-shift bits of words, and the
// bits of h in it. The word comes from the product's top bits, the bits
// from h's low ones, which the product's top does not determine.
func filterWord(h uint64, shift uint) (uint64, uint64) {
	w := (h * 0x9e3779b97f4a7c15) >> shift
	if shift == 64 {
		w = 0
	}
	bits := uint64(1)<<(h&63) | uint64(1)<<(h>>6&63) | uint64(1)<<(h>>12&63) | uint64(1)<<(h>>18&63)
	return w, bits
}

// add records hash h.
func (f *keyFilter) add(h uint64) {
	n := len(f.parts)
	if n == 0 || f.parts[n-1].keys >= f.parts[n-1].most {
		keys := firstFilterKeys
		if n > 0 {
			keys = 2 * f.parts[n-1].most
		}
		f.parts = append(f.parts, newFilterPart(keys))
		n++
	}
	p := &f.parts[n-1]
	w, bits := filterWord(h, p.shift)
	p.words[w] |= bits
	p.keys++
}

// mayHave reports whether h may have been added.
func (f *keyFilter) mayHave(h uint64) bool {
	for i := range f.parts {
		p := &f.parts[i]
		w, bits := filterWord(h, p.shift)
		if p.words[w]&bits == bits {
			return true
		}
	}
	return false
}

// bytes is the memory the filter holds.
func (f *keyFilter) bytes() int {
	n := 0
	for _, p := range f.parts {
		n += 8 * len(p.words)
	}
	return n
}
