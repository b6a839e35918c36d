package state

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCheckpointSync splits a checkpoint's synchronous phase
// (Store.Checkpoint) into its three steps, as the state grows and the
// changes per checkpoint stay the same: writing the cache's changed
// entries into Pebble (Flush), flushing the memtable into L0, and Pebble's
// checkpoint (hard links). Per size (WSTREAM_SYNC_KEYS=a,b,…, default
// 200000,2000000 keys of 100-byte values on the default memory budget),
// after the fill, 5 rounds each change 50,000 random keys and take the
// three steps; it reports the mean of each and the files linked.
func BenchmarkCheckpointSync(b *testing.B) {
	sizes := []int{200_000, 2_000_000}
	if s := os.Getenv("WSTREAM_SYNC_KEYS"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				b.Fatalf("WSTREAM_SYNC_KEYS=%q: want positive numbers, comma-separated", s)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { checkpointSyncRun(b, n) })
	}
}

func checkpointSyncRun(b *testing.B, n int) {
	const rounds, changes = 5, 50_000
	root := b.TempDir()
	budget := NewBudget(DefaultMemoryBudget)
	defer budget.Close()
	s, err := Open(Options{Dir: filepath.Join(root, "db"), KeyGroups: fullRange, Budget: budget})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Discard()
	v := s.Vertex("c", true)
	h := mustRegister(b, v, "n", 1)
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 100)
	var key []byte
	put := func(k int) {
		for i := range val {
			val[i] = byte(rng.Uint32())
		}
		key = strconv.AppendInt(append(key[:0], 'k'), int64(k), 10)
		if err := v.StatePut(h, key, nil, val); err != nil {
			b.Fatal(err)
		}
		// As a worker does between input messages (worker/task.go).
		if s.Pending() >= s.CacheEntries() || s.PendingBytes() >= 32<<20 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for k := range n {
		put(k)
	}
	var cache, memtable, links time.Duration
	files := 0
	for r := range rounds {
		for range changes {
			put(rng.IntN(n))
		}
		t0 := time.Now()
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		dir := filepath.Join(root, "snap"+strconv.Itoa(r))
		if err := s.db.Checkpoint(dir); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		cache += t1.Sub(t0)
		memtable += t2.Sub(t1)
		links += t3.Sub(t2)
		entries, err := os.ReadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		files += len(entries)
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(cache.Seconds()*1e3/rounds, "cache-flush-ms")
	b.ReportMetric(memtable.Seconds()*1e3/rounds, "memtable-flush-ms")
	b.ReportMetric(links.Seconds()*1e3/rounds, "pebble-checkpoint-ms")
	b.ReportMetric(float64(files)/rounds, "files")
}
