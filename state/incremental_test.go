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

	"github.com/cockroachdb/pebble/v2"
	"github.com/wstream/wstream/abi"
)

// incrementalWorkload is a keyed state of keys entries of valueSize random
// (incompressible) bytes, then rounds of updates random entries each (a new
// random value for a uniformly chosen key), every round followed by a
// checkpoint: the job of bench/testdata/incremental-200mb-plan.json without
// the runtime around the store.
type incrementalWorkload struct {
	keys, valueSize, rounds, updates int
}

// incrementalResult is what an incremental checkpoint would upload per round:
// the files of the checkpoint that the previous one did not have (the new SST
// files, and the MANIFEST and OPTIONS, which every checkpoint copies).
type incrementalResult struct {
	dataBytes    int64   // keys × value size: the live state
	uploaded     []int64 // per round
	stateBytes   []int64 // per round: all files of the checkpoint
	maxSublevels int32   // most L0 sublevels seen after a round
	compactions  int64   // compactions during the rounds
}

// meanFraction is the mean upload per round as a fraction of the live state.
func (r incrementalResult) meanFraction() float64 {
	var sum int64
	for _, u := range r.uploaded {
		sum += u
	}
	return float64(sum) / float64(len(r.uploaded)) / float64(r.dataBytes)
}

// maxFraction is the largest upload of one round as a fraction of the live
// state.
func (r incrementalResult) maxFraction() float64 {
	var m int64
	for _, u := range r.uploaded {
		m = max(m, u)
	}
	return float64(m) / float64(r.dataBytes)
}

// maxStateBytes is the largest checkpoint.
func (r incrementalResult) maxStateBytes() int64 {
	var m int64
	for _, s := range r.stateBytes {
		m = max(m, s)
	}
	return m
}

// runIncremental fills a store, then runs the rounds. After every checkpoint
// it waits until Pebble has no compaction in progress, so each round sees
// the outcome of the compactions its flush started, however fast the machine
// is: the figures do not depend on timing.
func runIncremental(tb testing.TB, w incrementalWorkload, logf func(string, ...any)) incrementalResult {
	tb.Helper()
	root := tb.TempDir()
	ended := make(chan struct{}, 1)
	s, err := Open(Options{
		Dir:       filepath.Join(root, "db"),
		KeyGroups: fullRange,
		eventListener: &pebble.EventListener{CompactionEnd: func(pebble.CompactionInfo) {
			select {
			case ended <- struct{}{}:
			default:
			}
		}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer closeStore(tb, s)
	// Pebble lowers its count of compactions in progress just after it
	// signals the end of one: re-check on every signal, and now and then in
	// case the signal came before the count changed.
	idle := func() {
		for s.db.Metrics().Compact.NumInProgress > 0 {
			select {
			case <-ended:
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	v := s.Vertex("fill", true)
	h := mustRegister(tb, v, "v", abi.StateValue)
	r := rand.New(rand.NewPCG(7, 11))
	val := make([]byte, w.valueSize)
	key := make([]byte, 0, 16)
	put := func(i int) {
		for j := 0; j < len(val); j += 8 {
			x := r.Uint64()
			for k := j; k < min(j+8, len(val)); k++ {
				val[k] = byte(x)
				x >>= 8
			}
		}
		key = strconv.AppendInt(append(key[:0], "key-"...), int64(i), 10)
		if err := v.StatePut(h, key, nil, val); err != nil {
			tb.Fatal(err)
		}
		// The runtime's rule (worker/task.go): flush when the write-back
		// cache is full or holds 32 MB of values.
		if s.Pending() >= s.CacheEntries() || s.PendingBytes() >= 32<<20 {
			if err := s.Flush(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	prev := map[string]bool{}
	checkpoint := func(n int) (uploaded, size int64) {
		dir := filepath.Join(root, fmt.Sprintf("chk-%d", n))
		if err := s.Checkpoint(dir); err != nil {
			tb.Fatal(err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			tb.Fatal(err)
		}
		cur := map[string]bool{}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				tb.Fatal(err)
			}
			size += fi.Size()
			// SST files are immutable and never reuse a name: a name
			// the previous checkpoint had is a file it uploaded.
			if strings.HasSuffix(e.Name(), ".sst") && prev[e.Name()] {
				cur[e.Name()] = true
				continue
			}
			cur[e.Name()] = true
			uploaded += fi.Size()
		}
		prev = cur
		if err := os.RemoveAll(filepath.Join(root, fmt.Sprintf("chk-%d", n-1))); err != nil {
			tb.Fatal(err)
		}
		return uploaded, size
	}

	for i := range w.keys {
		put(i)
	}
	checkpoint(0)
	idle()
	res := incrementalResult{dataBytes: int64(w.keys) * int64(w.valueSize)}
	before := s.db.Metrics().Compact.Count
	for n := 1; n <= w.rounds; n++ {
		for range w.updates {
			put(r.IntN(w.keys))
		}
		up, size := checkpoint(n)
		res.uploaded = append(res.uploaded, up)
		res.stateBytes = append(res.stateBytes, size)
		m := s.db.Metrics()
		res.maxSublevels = max(res.maxSublevels, m.Levels[0].Sublevels)
		if logf != nil {
			var levels []string
			for l, lm := range m.Levels {
				if lm.TablesCount > 0 {
					levels = append(levels, fmt.Sprintf("L%d %d files %.1f MB %d sublevels", l, lm.TablesCount, float64(lm.TablesSize)/1e6, lm.Sublevels))
				}
			}
			logf("round %d: uploaded %.2f MB (%.1f%% of the state), checkpoint %.1f MB, compactions %d: %s",
				n, float64(up)/1e6, 100*float64(up)/float64(res.dataBytes), float64(size)/1e6, m.Compact.Count-before, strings.Join(levels, ", "))
		}
		idle()
	}
	res.compactions = s.db.Metrics().Compact.Count - before
	return res
}

// With 1% of the keys changing between checkpoints, an incremental checkpoint
// uploads at most 5% of the state on average, and L0 and the disk usage stay
// bounded. 20 MB of state and 100 rounds: two and a half compaction cycles.
func TestIncrementalCheckpointUploads(t *testing.T) {
	w := incrementalWorkload{keys: 20_000, valueSize: 1000, rounds: 100, updates: 200}
	if testing.Short() {
		w.rounds = 50
	}
	res := runIncremental(t, w, nil)
	mean, most := res.meanFraction(), res.maxFraction()
	t.Logf("mean upload %.2f%% of the state, largest %.1f%%, %d compactions, at most %d L0 sublevels, largest checkpoint %.1f MB",
		100*mean, 100*most, res.compactions, res.maxSublevels, float64(res.maxStateBytes())/1e6)
	if res.compactions == 0 {
		t.Fatalf("no compaction in %d rounds: the run does not cover a compaction cycle", w.rounds)
	}
	if mean > 0.05 {
		t.Errorf("mean upload per checkpoint %.2f%% of the state, want ≤ 5%%", 100*mean)
	}
	// Every round uploads at least its changes.
	if min := float64(w.updates*w.valueSize) / float64(res.dataBytes); mean < min {
		t.Errorf("mean upload %.2f%% is below the changed data (%.2f%%): the measurement misses files", 100*mean, 100*min)
	}
	if res.maxSublevels > l0CompactionDepth+1 {
		t.Errorf("L0 reached %d sublevels, want at most %d", res.maxSublevels, l0CompactionDepth+1)
	}
	// L0 holds at most l0CompactionDepth rounds of changes besides the
	// compacted state: 40% of it here, plus file overheads.
	if limit := res.dataBytes * 2; res.maxStateBytes() > limit {
		t.Errorf("a checkpoint holds %d bytes, more than twice the live state (%d)", res.maxStateBytes(), res.dataBytes)
	}
}

// BenchmarkIncrementalCheckpoint is the workload of
// bench/testdata/incremental-200mb-plan.json: 200,000 entries of 1 KB, then
// 120 checkpoints (three compaction cycles) with 2,000 random entries (1%)
// changed before each. It reports the upload per checkpoint as a
// percentage of the live state (mean and largest) and in MB.
//
//	go test -run '^$' -bench IncrementalCheckpoint -benchtime 1x ./state/
func BenchmarkIncrementalCheckpoint(b *testing.B) {
	w := incrementalWorkload{keys: 200_000, valueSize: 1000, rounds: 120, updates: 2_000}
	var mean, most, mb float64
	for range b.N {
		res := runIncremental(b, w, nil)
		mean += res.meanFraction()
		most = max(most, res.maxFraction())
		mb += res.meanFraction() * float64(res.dataBytes) / 1e6
	}
	b.ReportMetric(100*mean/float64(b.N), "mean-upload-%")
	b.ReportMetric(100*most, "max-upload-%")
	b.ReportMetric(mb/float64(b.N), "mean-upload-MB")
}
