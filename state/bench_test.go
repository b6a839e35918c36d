package state

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/wstream/wstream/abi"
)

// benchBatch is the number of records between Flush calls: the runtime
// flushes once per input batch.
const benchBatch = 1000

// benchmarkGetPut runs the per-record state work of a counting operator:
// read the key's count, write it back incremented.
func benchmarkGetPut(b *testing.B, keySpace int, blockCache int64) {
	o := Options{Dir: b.TempDir(), KeyGroups: fullRange}
	if blockCache < 0 {
		o.Budget = NewBudget(DefaultMemoryBudget)
		defer o.Budget.Close()
	} else if blockCache > 0 {
		o.Cache = pebble.NewCache(blockCache)
		defer o.Cache.Unref()
	}
	s, v, h := openCount(b, o)
	defer s.Close()
	keys := make([][]byte, keySpace)
	for i := range keys {
		keys[i] = []byte("user-" + strconv.Itoa(i))
	}
	r := rand.New(rand.NewPCG(1, 1))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = r.IntN(keySpace)
	}
	buf := make([]byte, 0, 8)
	ns := []byte{}
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		key := keys[order[i&(len(order)-1)]]
		val, err := v.StateGet(h, key, ns, buf)
		var n uint64
		if err == nil {
			n = binary.LittleEndian.Uint64(val)
		}
		buf = binary.LittleEndian.AppendUint64(val[:0], n+1)
		if err := v.StatePut(h, key, ns, buf); err != nil {
			b.Fatal(err)
		}
		if i%benchBatch == benchBatch-1 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
}

// openCount opens a store with o and registers the value state "count"
// of the keyed vertex "count".
func openCount(b *testing.B, o Options) (*Store, *VertexState, int32) {
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	v := s.Vertex("count", true)
	h, err := v.RegisterState("count", abi.StateValue)
	if err != nil {
		_ = s.Close()
		b.Fatal(err)
	}
	return s, v, h
}

// Hot keys: a batch of 1000 records touches at most 100 keys, so the
// write-back cache turns ten puts into one Pebble write.
func BenchmarkGetPutHotKeys(b *testing.B) { benchmarkGetPut(b, 100, 0) }

// Cached keys: every key fits the hot-key cache, but most records of a batch
// have a different key, so nearly every put becomes a Pebble write.
func BenchmarkGetPutCachedKeys(b *testing.B) { benchmarkGetPut(b, 10_000, 0) }

// Uniform keys over a key space 60 times the hot-key cache: nearly every read
// goes to Pebble, with Pebble's default 8 MiB block cache...
func BenchmarkGetPutUniformKeys(b *testing.B) { benchmarkGetPut(b, 1_000_000, 0) }

// ... and with a worker-sized 256 MiB shared block cache that holds the data.
func BenchmarkGetPutUniformKeysBigBlockCache(b *testing.B) {
	benchmarkGetPut(b, 1_000_000, 256<<20)
}

// ... and with a worker's default state memory budget, which holds them.
func BenchmarkGetPutUniformKeysBudget(b *testing.B) { benchmarkGetPut(b, 1_000_000, -1) }

// BenchmarkFillNewKeys counts b.N keys each seen for the first time: every
// read misses the cache and asks Pebble for a key it does not hold, as a
// keyed count does while its state grows.
func BenchmarkFillNewKeys(b *testing.B) {
	budget := NewBudget(DefaultMemoryBudget)
	defer budget.Close()
	s, v, h := openCount(b, Options{Dir: b.TempDir(), KeyGroups: fullRange, Budget: budget})
	defer s.Close()
	buf := make([]byte, 0, 8)
	key := make([]byte, 0, 16)
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		key = strconv.AppendUint(append(key[:0], 'w'), uint64(i)*2654435761%(1<<40), 10)
		val, err := v.StateGet(h, key, nil, buf)
		if err == nil {
			b.Fatalf("key %s present", key)
		}
		buf = binary.LittleEndian.AppendUint64(val[:0], 1)
		if err := v.StatePut(h, key, nil, buf); err != nil {
			b.Fatal(err)
		}
		if s.Pending() >= s.CacheEntries() {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(s.Metrics().ReadAmp), "read-amp")
}

// processCPU is the CPU time of the process in nanoseconds, Pebble's
// background work included: on a shared machine it moves less than the
// wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
