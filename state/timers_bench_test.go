package state

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

// BenchmarkTimers registers n timers of distinct 8-byte keys in one
// subtask's store on the default worker budget, flushing as the worker
// does, and fires them all: at the end of input (every timer at
// MaxWatermark, as the starter templates register them) or on a watermark
// jump (times spread over 1000 milliseconds). It reports the firing rate
// (fire-timers/s) and the registering rate, per second of wall time and of
// the process's CPU time (Pebble's background work included; on a shared
// machine the CPU rate is the steadier figure), and the process's peak
// RSS while registering (peak-RSS-MiB) and while firing
// (fire-peak-RSS-MiB), the peak reset before each.
// WSTREAM_BENCH_TIMERS lists the sizes (default 10000,1000000); the
// acceptance run is WSTREAM_BENCH_TIMERS=10000,10000000.
// WSTREAM_BENCH_TIMER_DELETES=point,range pairs the deletion of fired
// timers one by one with their range deletions (the default, range).
func BenchmarkTimers(b *testing.B) {
	sizes := []int{10_000, 1_000_000}
	if env := os.Getenv("WSTREAM_BENCH_TIMERS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("WSTREAM_BENCH_TIMERS=%q: want positive numbers of timers, comma-separated", env)
			}
			sizes = append(sizes, n)
		}
	}
	deletes := []string{"range"}
	if env := os.Getenv("WSTREAM_BENCH_TIMER_DELETES"); env != "" {
		deletes = strings.Split(env, ",")
	}
	for _, mode := range []string{"end", "jump"} {
		for _, n := range sizes {
			for _, del := range deletes {
				if del != "range" && del != "point" {
					b.Fatalf("WSTREAM_BENCH_TIMER_DELETES=%q: want range or point, comma-separated", del)
				}
				b.Run(fmt.Sprintf("%s/timers=%d/deletes=%s", mode, n, del), func(b *testing.B) {
					defer func(old bool) { timerRangeDeletes = old }(timerRangeDeletes)
					timerRangeDeletes = del == "range"
					benchmarkTimers(b, n, mode == "end")
				})
			}
		}
	}
}

func benchmarkTimers(b *testing.B, n int, atEnd bool) {
	var reg, fire time.Duration
	var regCPU, fireCPU int64
	var regRSS, fireRSS int64
	for range b.N {
		budget := NewBudget(0)
		s, err := Open(Options{Dir: b.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}, Budget: budget})
		if err != nil {
			b.Fatal(err)
		}
		v := s.Vertex("count", true)
		flushIf := func() {
			if s.Pending() >= s.CacheEntries() {
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		key := make([]byte, 8)
		resetPeakRSS()
		start, cpu := time.Now(), processCPU()
		for i := range n {
			binary.BigEndian.PutUint64(key, uint64(i)*0x9E3779B97F4A7C15)
			ts := int64(abi.MaxWatermark)
			if !atEnd {
				ts = int64(i % 1000)
			}
			if err := v.RegisterTimer(abi.TimeEvent, key, nil, ts); err != nil {
				b.Fatal(err)
			}
			if i%1024 == 1023 {
				flushIf() // the worker flushes between input batches
			}
		}
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
		reg += time.Since(start)
		regCPU += processCPU() - cpu
		regRSS = max(regRSS, peakRSS())
		resetPeakRSS()

		start, cpu = time.Now(), processCPU()
		var tb abi.Builder
		fired := 0
		// Labelled, so that a CPU profile can be focused on firing
		// (pprof -tagfocus phase=fire).
		pprof.Do(context.Background(), pprof.Labels("phase", "fire"), func(context.Context) {
			for {
				flushIf()
				tb.Reset()
				k, err := v.PopTimers(abi.TimeEvent, abi.MaxWatermark, &tb)
				if err != nil {
					b.Fatal(err)
				}
				if k == 0 {
					break
				}
				fired += k
			}
		})
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
		fire += time.Since(start)
		fireCPU += processCPU() - cpu
		fireRSS = max(fireRSS, peakRSS())
		if fired != n {
			b.Fatalf("fired %d timers, registered %d", fired, n)
		}
		if err := s.Discard(); err != nil {
			b.Fatal(err)
		}
		budget.Close()
	}
	total := float64(n) * float64(b.N)
	b.ReportMetric(total/fire.Seconds(), "fire-timers/s")
	b.ReportMetric(total/(float64(fireCPU)/1e9), "fire-timers/cpu-s")
	b.ReportMetric(total/reg.Seconds(), "register-timers/s")
	b.ReportMetric(total/(float64(regCPU)/1e9), "register-timers/cpu-s")
	b.ReportMetric(float64(regRSS)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(fireRSS)/(1<<20), "fire-peak-RSS-MiB")
}

// resetPeakRSS makes the process's peak resident set its current one, so
// that peakRSS tells the peak of what follows; it does nothing where
// /proc does not allow it.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is the process's peak resident set (VmHWM), in bytes; 0 where
// /proc does not tell.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
