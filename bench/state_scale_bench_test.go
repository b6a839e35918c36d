package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
)

// BenchmarkStateScale measures a keyed count as the number of distinct keys
// grows from what the caches hold to far beyond the state memory budget:
// 10K and 1M keys, and 10M with WSTREAM_STATE_10M=1, whose fill alone takes
// many minutes (WSTREAM_STATE_KEYS=a,b,… for other sizes). Per size, a
// fill pass counts every key once (untimed: the state then holds every
// key and its end-of-input timer), then stateScaleRecords records drawn
// uniformly from the keys are counted and timed, native and with the C
// wordcount module, on one keyed subtask over one store that takes the
// default worker state memory budget (state.DefaultMemoryBudget) and
// flushes as a worker does. Beside them, the physical reference:
// Pebble's own point read and write of the same keys (one Get and one Set
// per record, committed per input batch, no WAL) in a store of the same
// keys. It reports records/s and the process's RSS after each run, and
// the ratios 1M/10K (target ≥ 0.5) and 10M/10K (≥ 0.2) of each kind.
// The C module runs with its timer limits lifted: pending timers are
// held in memory (issue 36 has timers in Pebble as its next step).
func BenchmarkStateScale(b *testing.B) {
	sizes := []int{10_000, 1_000_000}
	if os.Getenv("WSTREAM_STATE_10M") == "1" {
		sizes = append(sizes, 10_000_000)
	}
	if s := os.Getenv("WSTREAM_STATE_KEYS"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				b.Fatalf("WSTREAM_STATE_KEYS=%q: want positive numbers of keys, comma-separated", s)
			}
			sizes = append(sizes, n)
		}
	}
	kinds := []string{"native", "c", "pebble"}
	if s := os.Getenv("WSTREAM_STATE_KINDS"); s != "" {
		kinds = strings.Split(s, ",")
	}
	rate := map[string]float64{}
	for _, kind := range kinds {
		for _, n := range sizes {
			name := fmt.Sprintf("%s/keys=%d", kind, n)
			b.Run(name, func(b *testing.B) {
				var r float64
				cpuRate = 0
				switch kind {
				case "native":
					r = stateScaleRun(b, n, func(b *testing.B) operator.Operator {
						op, err := builtin.New("count")
						if err != nil {
							b.Fatal(err)
						}
						return op
					})
				case "c":
					r = stateScaleRun(b, n, liftedTimers(func() (string, error) { return testmod.Build("c", "wordcount") }))
				case "pebble":
					r = pebbleScaleRun(b, n)
				default:
					b.Fatalf("WSTREAM_STATE_KINDS: unknown kind %q (native, c, pebble)", kind)
				}
				rate[name] = r
				rate[name+"/cpu"] = cpuRate
			})
		}
	}
	b.Run("ratios", func(b *testing.B) {
		for _, kind := range kinds {
			base := rate[fmt.Sprintf("%s/keys=%d", kind, sizes[0])]
			for _, n := range sizes[1:] {
				if r := rate[fmt.Sprintf("%s/keys=%d", kind, n)]; base > 0 && r > 0 {
					b.ReportMetric(r/base, fmt.Sprintf("%s-%s/%s", kind, shortCount(n), shortCount(sizes[0])))
				}
				cbase := rate[fmt.Sprintf("%s/keys=%d/cpu", kind, sizes[0])]
				if r := rate[fmt.Sprintf("%s/keys=%d/cpu", kind, n)]; cbase > 0 && r > 0 {
					b.ReportMetric(r/cbase, fmt.Sprintf("%s-cpu-%s/%s", kind, shortCount(n), shortCount(sizes[0])))
				}
			}
		}
	})
}

// cpuRate is the records per CPU-second of the last run (reportScale).
var cpuRate float64

// stateScaleRecords is the number of timed records per run.
const stateScaleRecords = 3_000_000

// shortCount writes n as 10K, 1M, 10M.
func shortCount(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "K"
	}
	return strconv.Itoa(n)
}

// scaleBatches returns the fill input (every key of n once, in a random
// order) and the timed input (stateScaleRecords records uniform over the
// n keys), in batches of 512 records as a keyed subtask receives them.
// The fill is generated batch by batch through fill, so that 10M keys do
// not sit in memory twice.
func scaleBatches(n int, fill func(batch []byte)) [][]byte {
	const per = 512
	rng := rand.New(rand.NewPCG(uint64(n), 36))
	// A permutation by a multiplicative step coprime with n: every key
	// once, in a scattered order, without an n-sized array.
	step := uint64(2654435761) % uint64(n)
	for gcd(step, uint64(n)) != 1 {
		step++
	}
	var bb abi.Builder
	for i := range n {
		k := uint64(i) * step % uint64(n)
		bb.Add(0, int64(i), strconv.AppendUint([]byte("w"), k, 10), nil)
		if bb.Len() == per || i == n-1 {
			fill(bb.Bytes())
			bb.Reset()
		}
	}
	batches := make([][]byte, 0, stateScaleRecords/per+1)
	for i := range stateScaleRecords {
		bb.Add(0, int64(i), strconv.AppendUint([]byte("w"), rng.Uint64N(uint64(n)), 10), nil)
		if bb.Len() == per || i == stateScaleRecords-1 {
			batches = append(batches, append([]byte(nil), bb.Bytes()...))
			bb.Reset()
		}
	}
	return batches
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// stateScaleRun fills a keyed subtask's store with n keys through the
// operator newOp returns, then times the counting of the timed records
// and returns records/s.
func stateScaleRun(b *testing.B, n int, newOp func(b *testing.B) operator.Operator) float64 {
	budget := state.NewBudget(state.DefaultMemoryBudget)
	defer budget.Close()
	store, op := openKeyedOp(b, budget, newOp)
	defer store.Discard()
	var out discardCollector
	process := func(batch []byte) {
		if err := op.Process(batch, &out); err != nil {
			b.Fatal(err)
		}
		// As a worker does between input messages (worker/task.go).
		if store.Pending() >= store.CacheEntries() || store.PendingBytes() >= 32<<20 {
			if err := store.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	fillStart := time.Now()
	batches := scaleBatches(n, process)
	b.Logf("%d keys: fill %.1fs", n, time.Since(fillStart).Seconds())
	rps, cpu := timeScale(b, batches, process)
	// What the next checkpoint's flush costs of the changes the timed
	// pass gathered and did not flush (the budget lets a store hold as many
	// as its clean entries leave room for): reported beside the rate, not
	// in it, as a checkpoint interval of several seconds spreads it over
	// many more records than one timed pass.
	cpu0 := processCPU()
	pending := store.Pending()
	if err := store.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(pending), "unflushed")
	b.ReportMetric((processCPU()-cpu0).Seconds()*1000, "flush-cpu-ms")
	reportScale(b, rps, cpu, store.Metrics())
	return rps
}

// timeScale processes the timed batches b.N times and returns records per
// second of wall time and of the process's CPU time.
func timeScale(b *testing.B, batches [][]byte, process func([]byte)) (rps, cpu float64) {
	records := 0
	var elapsed time.Duration
	cpu0 := processCPU()
	// Labelled, so that a CPU profile of the run can be focused on the
	// timed pass (pprof -tagfocus phase=timed).
	pprof.Do(context.Background(), pprof.Labels("phase", "timed"), func(context.Context) {
		for range b.N {
			start := time.Now()
			for _, batch := range batches {
				process(batch)
				records += abi.Count(batch)
			}
			elapsed += time.Since(start)
		}
	})
	b.StopTimer()
	return float64(records) / elapsed.Seconds(), float64(records) / (processCPU() - cpu0).Seconds()
}

// reportScale reports records/s (wall time) and records per second of the
// process's CPU time (which a shared machine's load moves less), the
// process's RSS and the Go heap.
func reportScale(b *testing.B, rps, cpu float64, m state.StoreMetrics) {
	rss, _ := memStatus()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(rps, "records/s")
	b.ReportMetric(cpu, "records/cpu-s")
	cpuRate = cpu
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(m.DiskBytes)/(1<<20), "disk-MiB")
	b.ReportMetric(float64(m.ReadAmp), "read-amp")
}

// liftedTimers is wasmOp with the instance's timer limits lifted.
func liftedTimers(build func() (string, error)) func(b *testing.B) operator.Operator {
	return wasmOpConfig(build, host.Config{Limits: host.Limits{MaxTimersPerSubtask: -1, MaxTimerBytesPerSubtask: -1}}, nil)
}

// pebbleScaleRun is the physical reference: the same keys' counts read and
// written with Pebble alone, one Get and one Set per record, a batch
// committed per input batch without a WAL, with a block cache the size of
// the budget's.
func pebbleScaleRun(b *testing.B, n int) float64 {
	cache := pebble.NewCache(state.DefaultMemoryBudget / 4)
	defer cache.Unref()
	db, err := pebble.Open(b.TempDir(), &pebble.Options{Cache: cache, DisableWAL: true, FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	wb := db.NewBatch()
	var val [8]byte
	process := func(batch []byte) {
		rd, err := abi.NewReader(batch)
		if err != nil {
			b.Fatal(err)
		}
		var r abi.Record
		for {
			ok, err := rd.Next(&r)
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			v, closer, err := db.Get(r.Key)
			var c uint64
			switch {
			case err == nil:
				c = binary.LittleEndian.Uint64(v)
				_ = closer.Close()
			case !errors.Is(err, pebble.ErrNotFound):
				b.Fatal(err)
			}
			binary.LittleEndian.PutUint64(val[:], c+1)
			if err := wb.Set(r.Key, val[:], nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := wb.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		wb.Reset()
	}
	batches := scaleBatches(n, process)
	rps, cpu := timeScale(b, batches, process)
	m := db.Metrics()
	reportScale(b, rps, cpu, state.StoreMetrics{DiskBytes: int64(m.DiskSpaceUsage()), ReadAmp: int64(m.ReadAmp())})
	return rps
}
