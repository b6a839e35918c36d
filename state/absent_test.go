package state

import (
	"hash/maphash"
	"strconv"
	"testing"
)

// The filter has every key added (across the growth of its parts) and
// few of the keys not added.
func TestKeyFilter(t *testing.T) {
	var f keyFilter
	seed := maphash.MakeSeed()
	h := func(i int) uint64 { return maphash.String(seed, "k"+strconv.Itoa(i)) }
	const n = 300_000
	for i := range n {
		f.add(h(i))
	}
	if len(f.parts) < 3 {
		t.Fatalf("%d keys in %d parts, want the filter to have grown to 3 or more", n, len(f.parts))
	}
	for i := range n {
		if !f.mayHave(h(i)) {
			t.Fatalf("key %d was added and is missing", i)
		}
	}
	fp := 0
	for i := n; i < 2*n; i++ {
		if f.mayHave(h(i)) {
			fp++
		}
	}
	// About 2% a part; a key is looked for in each of the parts.
	if rate := float64(fp) / n; rate > 0.1 {
		t.Fatalf("false positive rate %.3f, want at most 0.1", rate)
	} else {
		t.Logf("false positive rate %.4f over %d parts, %d bytes", rate, len(f.parts), f.bytes())
	}
}
