package state

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// benchCacheKeys returns n Pebble keys shaped like a keyed count's: the
// key group, vertex "count", state "count" and a word "w<i>" (23 bytes or
// fewer).
func benchCacheKeys(n int) [][]byte {
	mid := appendEntryMid(nil, "count", "count")
	keys := make([][]byte, n)
	for i := range keys {
		k := append([]byte{0, byte(i % 128)}, mid...)
		w := strconv.AppendInt([]byte("w"), int64(i), 10)
		k = append(k, byte(len(w)))
		keys[i] = append(k, w...)
	}
	return keys
}

// BenchmarkHotCacheLookup is the cache alone, as a keyed count at n keys
// uses it: a lookup of a key read at random among n cached ones, the use
// recorded. Its cost is the memory misses of a lookup once n keys no
// longer fit the processor's caches.
func BenchmarkHotCacheLookup(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := benchCacheKeys(n)
			c := newHotCache(n)
			c.cleanBytes = 1 << 40 // as a store on a budget that fits them
			hashes := make([]uint64, n)
			for i, k := range keys {
				hashes[i] = c.hash(k)
				c.insert(k, hashes[i])
			}
			r := rand.New(rand.NewPCG(1, 2))
			order := make([]int32, 1<<20)
			for i := range order {
				order[i] = int32(r.IntN(n))
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				j := order[i&(len(order)-1)]
				idx := c.lookup(keys[j], hashes[j])
				if idx == noSlot {
					b.Fatalf("key %d not cached", j)
				}
				c.touch(idx)
				c.gotten(idx)
			}
			// Per CPU time as well: the machine may be shared.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
