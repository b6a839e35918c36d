package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// Shape of BenchmarkTenantFairness's runs.
const (
	// tfLines are the lines of the well-behaved job: long enough (4–10 s
	// on a shared 2-core machine) that deploying it weighs little; the
	// deployment also waits for the other tenant's calls in progress,
	// which hold every slot until the job joins the gate.
	tfLines = 1_000_000
	// tfRounds rounds of every case make one iteration.
	tfRounds = 5
	// tfWarmUp is how long the other tenant's job runs before the
	// well-behaved one starts: time to deploy and reach its steady
	// misbehaviour (the crash loop's first restart).
	tfWarmUp = 1500 * time.Millisecond
	// tfSettle is a pause before each case, for the worker to finish
	// removing the previous case's jobs (their state directories).
	tfSettle = 500 * time.Millisecond
	// tfMemoryMiB is the other tenant's memory quota per instance: the
	// hostile jobs need a few pages, the C wordcount little more.
	tfMemoryMiB = 16
	// tfGood and tfOther are the two tenants, of the same weight.
	tfGood, tfOther = "acme", "bolt"
)

// tfPlan is the C wordcount over gen lines of four words (count 0: without
// end), parallelism 2, into the discard sink.
func tfPlan(count int, seed int) string {
	return fmt.Sprintf(`{"name":"wordcount","parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":4,"seed":%d}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`,
		count, seed)
}

// tfHostile are the hostile kinds: examples/wasm/hostile/bench-KIND.wat,
// each with the plan it exports.
var tfHostile = []string{"cpu", "output", "state", "timer", "crash"}

// tfJob is a job ready to submit as a tenant: its module is stored in the
// tenant's account.
type tfJob struct {
	req   transport.SubmitRequest
	insts int // wasm instances per attempt (subtasks of chains with a wasm operator)
}

// tfTenant is a tenant's connection to the cluster.
type tfTenant struct {
	name  string
	nc    *nats.Conn
	watch *coordinator.Watch
}

// tfResult is what one case measured.
type tfResult struct {
	records int64
	run     time.Duration // the well-behaved job's duration (coordinator)
	cpu     time.Duration // the process's CPU time meanwhile
	rssPeak int64         // KiB, from the other job's start to its end
	// heapAtPeak is the bytes of Go heap objects at the peak.
	heapAtPeak int64
	goodBusy   time.Duration // slot time of the two tenants' guest calls
	otherBusy  time.Duration
	waited     time.Duration // the well-behaved tenant's calls' waits for a slot
	restarts   int           // the other job's restarts
	other      string        // the other job's vertex metrics
	sched      tfSched       // the Go runtime's scheduling meanwhile
}

func (r tfResult) perSec() float64 { return float64(r.records) / r.run.Seconds() }
func (r tfResult) perCPU() float64 { return float64(r.records) / r.cpu.Seconds() }

// BenchmarkTenantFairness is the acceptance benchmark of the multi-tenant
// sandbox. Tenant acme runs a well-behaved job (the C wordcount over
// 1,000,000 generated lines, parallelism 2) on an in-process engine with
// tenants and one worker, beside a job of tenant bolt (the same weight):
// none ("alone"), the same wordcount over a source without end ("busy"),
// and each module examples/wasm/hostile/bench-KIND.wat, which misbehaves
// for as long as it runs without tripping a quota: "cpu" (200 ms of
// arithmetic per call), "output" (5,000 records per input record across a
// rebalance edge), "state" (4 MB of distinct 16 KiB values per call),
// "timer" (100 timers per record, re-armed every 100 ms), "crash" (traps at
// once, restarted every second for ever). bolt's job starts first and is
// cancelled after acme's ends.
//
// Every other case runs between two busy ones. It reports acme's records
// per second of its job's duration for each case (X-records/s), the median
// over rounds of the ratio to the mean of the busy cases just before and
// after (X/busy; the target is ≥ 0.9), the same per CPU-second
// of the process (X/busy-cpu, which the load of other processes moves
// less, but which also moves with the CPU that bolt's job takes), the
// process's peak resident set while bolt's job ran (X-rss-MiB), and acme's
// share of the slot time of the fair-share gate (X-slot-share). -v logs
// every case of every round, with the Go runtime's GC cycles and
// scheduling delays, and, per hostile kind, whether the ratio meets 0.9
// and whether the peak resident set exceeds the busy case's by no more
// than the quotas allow bolt's job (tfAllowance).
//
// WSTREAM_TENANT_PROFILE=DIR writes a CPU profile of acme's run in each
// case of the first round to DIR/KIND.pprof, and a heap profile at its end
// (bolt's job still running) to DIR/KIND.heap. WSTREAM_TENANT_CASES=A,B,…
// runs those cases only (and busy).
//
//	go test -run '^$' -bench TenantFairness -benchtime 1x -v ./bench/
func BenchmarkTenantFairness(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	auth, err := tenant.Open(filepath.Join(dir, "auth"))
	if err != nil {
		b.Fatal(err)
	}
	// Added before the engine starts, so that its server preloads their
	// accounts.
	if _, _, err := auth.Add(tfGood, tenant.Quotas{}); err != nil {
		b.Fatal(err)
	}
	if _, _, err := auth.Add(tfOther, tenant.Quotas{MemoryMiB: tfMemoryMiB}); err != nil {
		b.Fatal(err)
	}
	var logs tfLog
	// The engine's embedded server is reached over loopback: Engine has no
	// accessor for it, which transport.ConnectInProcess would need.
	e, err := engine.Start(ctx, engine.Options{Tenants: auth, Workers: 1, DataDir: filepath.Join(dir, "data"),
		Listen: "127.0.0.1:0", Stdout: io.Discard, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	url, err := engine.LocalURL(filepath.Join(dir, "data"))
	if err != nil {
		b.Fatal(err)
	}
	connect := func(name string) *tfTenant {
		cr, err := auth.TenantUser(name, "bench")
		if err != nil {
			b.Fatal(err)
		}
		nc, err := nats.Connect(url, cr.Option())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		w, err := coordinator.WatchJobs(nc)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(w.Close)
		return &tfTenant{name: name, nc: nc, watch: w}
	}
	good, other := connect(tfGood), connect(tfOther)

	wordcount, err := testmod.BuildC("examples/wasm/c/wordcount")
	if err != nil {
		b.Fatal(err)
	}
	jobs := map[string]tfJob{}
	prepare := func(t *tfTenant, name, module, plan string) tfJob {
		o := engine.PrepareOptions{ModulePath: module, Name: name}
		if plan != "" {
			o.PlanPath = filepath.Join(dir, name+".json")
			if err := os.WriteFile(o.PlanPath, []byte(plan), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		// Prepare validates the module as deploy does.
		d, err := engine.Prepare(ctx, e.Runtime(), o)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		digest, err := coordinator.StoreModule(ctx, t.nc, d.Wasm)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, ch := range d.Graph.Chains {
			for _, v := range ch.Vertices {
				if v.Kind == job.KindOperator {
					n += ch.Parallelism
					break
				}
			}
		}
		return tfJob{req: transport.SubmitRequest{Name: d.Name, Plan: d.Plan.JSON(), ModuleName: d.ModuleName, ModuleDigest: digest}, insts: n}
	}
	jobs["good"] = prepare(good, "good", wordcount, tfPlan(tfLines, 1))
	jobs["busy"] = prepare(other, "busy", wordcount, tfPlan(0, 2))
	for _, k := range tfHostile {
		mod, err := testmod.BuildWAT("examples/wasm/hostile/bench-" + k + ".wat")
		if err != nil {
			b.Fatal(err)
		}
		jobs[k] = prepare(other, "bench-"+k, mod, "")
	}

	cases := append([]string{"alone", "busy"}, tfHostile...)
	if only := os.Getenv("WSTREAM_TENANT_CASES"); only != "" {
		// A subset, to look into some kinds (busy is always run: the
		// ratios are to it).
		cases = slices.DeleteFunc(cases, func(c string) bool {
			return c != "busy" && !slices.Contains(strings.Split(only, ","), c)
		})
	}
	profDir := os.Getenv("WSTREAM_TENANT_PROFILE")
	b.Logf("load average at the start: %s", tfLoadAvg())
	b.ResetTimer()
	total := map[string]*tfResult{}
	for _, c := range cases {
		total[c] = &tfResult{}
	}
	ratios, cpuRatios := map[string][]float64{}, map[string][]float64{}
	kinds := slices.DeleteFunc(slices.Clone(cases), func(c string) bool { return c == "busy" })
	run := func(i int, c string) tfResult {
		prof := ""
		if profDir != "" && i == 0 {
			prof = filepath.Join(profDir, c+".pprof")
		}
		r := tfScenario(b, good, other, jobs, c, prof, &logs)
		t := total[c]
		t.records += r.records
		t.run += r.run
		t.cpu += r.cpu
		t.rssPeak = max(t.rssPeak, r.rssPeak)
		t.goodBusy += r.goodBusy
		t.otherBusy += r.otherBusy
		t.waited += r.waited
		t.restarts += r.restarts
		b.Logf("round %d %-6s: %7.0f records/s, %7.0f per CPU-s, run %v, RSS peak %d MiB (Go heap objects %d MiB), slot time acme %v bolt %v, acme waited %v, %s, bolt restarts %d%s",
			i, c, r.perSec(), r.perCPU(), r.run.Round(time.Millisecond), r.rssPeak>>10, r.heapAtPeak>>20,
			r.goodBusy.Round(time.Millisecond), r.otherBusy.Round(time.Millisecond), r.waited.Round(time.Millisecond), r.sched, r.restarts, r.other)
		return r
	}
	for i := 0; i < b.N*tfRounds; i++ {
		// Each kind runs between two busy cases and is compared with
		// their mean: the load of a shared machine moves over seconds,
		// and a case's neighbours saw much the same. The kinds take turns
		// at the start of a round.
		before := run(i, "busy")
		for k := range kinds {
			c := kinds[(i+k)%len(kinds)]
			r := run(i, c)
			after := run(i, "busy")
			ratios[c] = append(ratios[c], r.perSec()/((before.perSec()+after.perSec())/2))
			cpuRatios[c] = append(cpuRatios[c], r.perCPU()/((before.perCPU()+after.perCPU())/2))
			before = after
		}
	}
	b.StopTimer()
	b.Logf("load average at the end: %s", tfLoadAvg())
	busyRSS := total["busy"].rssPeak
	for _, c := range cases {
		t := total[c]
		b.ReportMetric(t.perSec(), c+"-records/s")
		b.ReportMetric(float64(t.rssPeak>>10), c+"-rss-MiB")
		if c != "alone" {
			b.ReportMetric(t.goodBusy.Seconds()/(t.goodBusy+t.otherBusy).Seconds(), c+"-slot-share")
		}
		if c != "busy" {
			b.ReportMetric(tfMedian(ratios[c]), c+"/busy")
			b.ReportMetric(tfMedian(cpuRatios[c]), c+"/busy-cpu")
		}
		verdict := ""
		if slices.Contains(tfHostile, c) {
			allow := tfAllowance(jobs[c].insts)
			verdict = fmt.Sprintf("; ratio %s 0.9; RSS peak %+d MiB against busy's, allowance %d MiB (%s)",
				map[bool]string{true: "meets", false: "MISSES"}[tfMedian(ratios[c]) >= 0.9],
				(t.rssPeak-busyRSS)>>10, allow>>20, map[bool]string{true: "within", false: "OVER"}[t.rssPeak-busyRSS <= allow>>10])
		}
		if c == "busy" {
			b.Logf("busy  : %7.0f records/s, RSS peak %d MiB", t.perSec(), t.rssPeak>>10)
			continue
		}
		b.Logf("%-6s: %7.0f records/s, /busy per round %.2f (median %.2f), per CPU-s %.2f (median %.2f), RSS peak %d MiB%s",
			c, t.perSec(), ratios[c], tfMedian(ratios[c]), cpuRatios[c], tfMedian(cpuRatios[c]), t.rssPeak>>10, verdict)
	}
}

// tfAllowance is what the quotas let a job of the other tenant with insts
// wasm instances hold in host memory beyond a well-behaved job: per
// instance its linear memory (the tenant's memory quota), one call's
// buffered output and state writes, and its pending timers' keys.
func tfAllowance(insts int) int64 {
	l := host.DefaultLimits()
	per := int64(tfMemoryMiB)<<20 + int64(l.MaxOutputBytesPerCall) + int64(l.MaxStateBytesPerCall) + int64(l.MaxTimerBytesPerSubtask)
	return int64(insts) * per
}

// tfScenario runs the other tenant's job of case c (none for "alone"), then
// the well-behaved job to its end, then cancels the other job and waits
// for its end. prof, when set, is where a CPU profile of the well-behaved
// job's run goes.
func tfScenario(b *testing.B, good, other *tfTenant, jobs map[string]tfJob, c, prof string, logs *tfLog) tfResult {
	ctx := context.Background()
	// What earlier cases freed goes back to the system first, so that the
	// peak is this case's.
	debug.FreeOSMemory()
	time.Sleep(tfSettle)
	rss := tfSampleRSS()
	var otherID string
	if c != "alone" {
		id, err := coordinator.Submit(ctx, other.nc, jobs[c].req)
		if err != nil {
			b.Fatalf("%s: submitting %s's job: %v", c, other.name, err)
		}
		otherID = id
		time.Sleep(tfWarmUp)
		if info := tfInfo(b, other, id); info.State != "RUNNING" && info.State != "RESTARTING" {
			b.Fatalf("%s: %s's job is %s after the warm-up: %s%s", c, other.name, info.State, info.Error, logs.tail())
		}
	}
	gate := fairshare.Default()
	g0, _ := gate.Tenant(tfGood)
	o0, _ := gate.Tenant(tfOther)
	cpu0, sched0 := tfProcessCPU(), tfReadSched()
	if prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Logf("no profile of %s: %v", c, err)
			prof = ""
		}
	}
	id, err := coordinator.Submit(ctx, good.nc, jobs["good"].req)
	if err != nil {
		b.Fatalf("%s: submitting %s's job: %v", c, good.name, err)
	}
	wctx, stop := context.WithTimeout(ctx, 10*time.Minute)
	res, err := good.watch.Wait(wctx, id)
	stop()
	if prof != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		b.Fatalf("%s: %s's job: %v", c, good.name, err)
	}
	if res.State != transport.JobFinished {
		b.Fatalf("%s: %s's job %s: %s%s", c, good.name, res.State, res.Error, logs.tail())
	}
	if prof != "" {
		// The live heap while the other job still runs.
		runtime.GC()
		if f, err := os.Create(strings.TrimSuffix(prof, ".pprof") + ".heap"); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	r := tfResult{records: tfLines, run: res.Duration, cpu: tfProcessCPU() - cpu0, sched: tfReadSched().since(sched0)}
	g1, _ := gate.Tenant(tfGood)
	o1, _ := gate.Tenant(tfOther)
	r.goodBusy, r.otherBusy, r.waited = g1.Busy-g0.Busy, o1.Busy-o0.Busy, g1.Waited-g0.Waited
	if otherID != "" {
		info := tfInfo(b, other, otherID)
		r.restarts = info.Restarts
		if info.State != "RUNNING" && info.State != "RESTARTING" {
			b.Fatalf("%s: %s's job is %s beside %s's: %s%s", c, other.name, info.State, good.name, info.Error, logs.tail())
		}
		if err := coordinator.Cancel(ctx, other.nc, otherID); err != nil {
			b.Fatalf("%s: cancelling %s's job: %v", c, other.name, err)
		}
		wctx, stop := context.WithTimeout(ctx, 2*time.Minute)
		ores, err := other.watch.Wait(wctx, otherID)
		stop()
		if err != nil {
			b.Fatalf("%s: %s's job did not end: %v", c, other.name, err)
		}
		if ores.State != transport.JobCanceled {
			b.Fatalf("%s: %s's job %s: %s%s", c, other.name, ores.State, ores.Error, logs.tail())
		}
		for _, m := range ores.Metrics {
			r.other += fmt.Sprintf(", bolt %s %d in %d out", m.Vertex, m.RecordsIn, m.RecordsOut)
		}
	}
	r.rssPeak, r.heapAtPeak = rss()
	return r
}

// tfSched is what the Go runtime's scheduler did over an interval: GC
// cycles, their stop-the-world pauses (the time from deciding to stop
// the world until it starts again), and how long goroutines waited,
// runnable, for a processor.
type tfSched struct {
	gcs                  int64
	stw, stwMax          time.Duration
	runnable, runnable99 time.Duration // mean and 99th percentile
	hist                 map[string]*metrics.Float64Histogram
}

var tfSchedMetrics = []string{"/gc/cycles/total:gc-cycles", "/sched/pauses/total/gc:seconds", "/sched/latencies:seconds"}

func tfReadSched() tfSched {
	m := make([]metrics.Sample, len(tfSchedMetrics))
	for i, n := range tfSchedMetrics {
		m[i].Name = n
	}
	metrics.Read(m)
	s := tfSched{hist: map[string]*metrics.Float64Histogram{}}
	if m[0].Value.Kind() == metrics.KindUint64 {
		s.gcs = int64(m[0].Value.Uint64())
	}
	for _, x := range m[1:] {
		if x.Value.Kind() == metrics.KindFloat64Histogram {
			h := x.Value.Float64Histogram()
			s.hist[x.Name] = &metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: slices.Clone(h.Buckets)}
		}
	}
	return s
}

// since is s less s0, its histograms summarized.
func (s tfSched) since(s0 tfSched) tfSched {
	d := tfSched{gcs: s.gcs - s0.gcs}
	// sum, max and quantile q of the histogram of name over the interval,
	// each sample taken at its bucket's upper bound (capped at the lower
	// bound where that is infinite).
	summary := func(name string, q float64) (sum, most, quant time.Duration, n uint64) {
		h, h0 := s.hist[name], s0.hist[name]
		if h == nil || h0 == nil || len(h.Counts) != len(h0.Counts) {
			return
		}
		up := func(i int) time.Duration {
			v := h.Buckets[i+1]
			if v > 1e9 {
				v = h.Buckets[i]
			}
			return time.Duration(v * 1e9)
		}
		for i := range h.Counts {
			c := h.Counts[i] - h0.Counts[i]
			n += c
			sum += time.Duration(c) * up(i)
			if c > 0 {
				most = up(i)
			}
		}
		var seen uint64
		for i := range h.Counts {
			seen += h.Counts[i] - h0.Counts[i]
			if n > 0 && float64(seen) >= q*float64(n) {
				quant = up(i)
				break
			}
		}
		return
	}
	d.stw, d.stwMax, _, _ = summary("/sched/pauses/total/gc:seconds", 1)
	sum, _, q99, n := summary("/sched/latencies:seconds", 0.99)
	if n > 0 {
		d.runnable = sum / time.Duration(n)
	}
	d.runnable99 = q99
	return d
}

func (s tfSched) String() string {
	return fmt.Sprintf("%d GCs (stop-the-world %v, longest %v), runnable goroutines waited %v on average (p99 %v)",
		s.gcs, s.stw.Round(time.Microsecond), s.stwMax.Round(time.Microsecond), s.runnable.Round(time.Microsecond), s.runnable99.Round(time.Microsecond))
}

// tfInfo returns the row of job id in t's list.
func tfInfo(b *testing.B, t *tfTenant, id string) transport.JobInfo {
	list, err := coordinator.List(context.Background(), t.nc)
	if err != nil {
		b.Fatal(err)
	}
	for _, j := range list {
		if j.JobID == id {
			return j
		}
	}
	b.Fatalf("%s's list lacks job %s", t.name, id)
	return transport.JobInfo{}
}

// tfSampleRSS samples the process's resident set every 10 ms until the
// function it returns is called, which returns the peak in KiB and the
// bytes of live and dead Go heap objects at that peak (the rest is the Go
// runtime's other memory and what is mapped outside it: wasm linear
// memories, compiled code).
func tfSampleRSS() func() (peak, heap int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak, heap int64
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	sample := func() {
		if r := tfRSS(); r > peak {
			metrics.Read(m)
			peak, heap = r, int64(m[0].Value.Uint64())
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		sample()
		return peak, heap
	}
}

// tfRSS is VmRSS of /proc/self/status, KiB (0 where there is none).
func tfRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// tfProcessCPU is the CPU time the process has used, user and system.
func tfProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func tfLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ") + fmt.Sprintf(" (%d cores)", runtime.NumCPU())
}

func tfMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tfLog keeps the engine's last log lines, to show when a case fails.
type tfLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *tfLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSuffix(string(p), "\n"))
	if len(l.lines) > 200 {
		l.lines = slices.Delete(l.lines, 0, len(l.lines)-100)
	}
	return len(p), nil
}

func (l *tfLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var buf bytes.Buffer
	for _, s := range l.lines[max(0, len(l.lines)-30):] {
		buf.WriteString("\n  " + s)
	}
	return buf.String()
}
