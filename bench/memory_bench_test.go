package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/transport"
)

// Shape of BenchmarkMemoryPerInstance's jobs.
const (
	// memRate paces the source (lines per second across the job), far
	// below what any language's wordcount keeps up with on two shared
	// cores: every parallelism does the same work, and the memory a
	// backlog would hold stays out of the figures.
	memRate = 20_000
	// memKeys distinct words keep every count subtask's state in its
	// hot-key cache, so that the state neither grows nor flushes while
	// the job is measured.
	memKeys = 1000
	// memWarm words counted before the first sample: every subtask has
	// run a while, and every key has been seen.
	memWarm = 60_000
	// memSamples samples of each job, memStep words counted apart.
	memSamples = 5
	memStep    = 20_000
)

// memPlan is the wordcount of the examples at parallelism p with a paced
// gen source without end: chains source ×p, split ×p and count → sink ×p
// (rebalance and key edges do not chain; count → sink does). op is "go:"
// for the native operators, "" for the module's.
func memPlan(op string, p int) string {
	return fmt.Sprintf(`{"name":"memory","parallelism":%d,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":0,"rate":%d,"keys":%d,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"%ssplit"},
  {"id":"count","kind":"operator","operator":"%scount"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`,
		p, memRate, memKeys, op, op)
}

// memShape counts a job's subtasks and its wasm instances: the worker
// creates one instance per subtask of a chain with a module operator, which
// that chain's module operators share (worker.newTask, host.Instance.Operator).
func memShape(g *job.Graph) (subtasks, instances int) {
	for _, c := range g.Chains {
		subtasks += c.Parallelism
		for _, v := range c.Vertices {
			if v.Kind == job.KindOperator && !strings.HasPrefix(v.Operator, builtin.Prefix) {
				instances += c.Parallelism
				break
			}
		}
	}
	return subtasks, instances
}

// memPoint is the process's memory while a job runs, right after a
// collection that returned every free page to the system.
type memPoint struct {
	rss    int64 // VmRSS, bytes
	file   int64 // of which file pages (RssFile): the binary, which page reclaim moves
	heap   int64 // live Go heap objects
	stacks int64 // goroutine stacks
	goRest int64 // the Go runtime's other memory (metadata, buffers, GC)
	// native is what the Go runtime does not account for: wasm linear
	// memories outside the Go heap, compiled code, Pebble's C allocations,
	// and the binary.
	native int64
}

func (p memPoint) minus(q memPoint) memPoint {
	return memPoint{p.rss - q.rss, p.file - q.file, p.heap - q.heap, p.stacks - q.stacks, p.goRest - q.goRest, p.native - q.native}
}

func (p memPoint) div(n int) memPoint {
	d := int64(n)
	return memPoint{p.rss / d, p.file / d, p.heap / d, p.stacks / d, p.goRest / d, p.native / d}
}

func (p memPoint) String() string {
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	return fmt.Sprintf("RSS %.2f MiB (Go heap %.2f, stacks %.2f, Go runtime other %.2f, outside Go %.2f, of which file pages %.2f)",
		mib(p.rss), mib(p.heap), mib(p.stacks), mib(p.goRest), mib(p.native), mib(p.file))
}

var memMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
}

// memSample collects every free page back to the system and reads the
// process's memory.
func memSample() memPoint {
	runtime.GC()
	debug.FreeOSMemory()
	m := make([]metrics.Sample, len(memMetrics))
	for i, n := range memMetrics {
		m[i].Name = n
	}
	metrics.Read(m)
	v := func(i int) int64 { return int64(m[i].Value.Uint64()) }
	rss, file := memStatus()
	p := memPoint{rss: rss, file: file, heap: v(0), stacks: v(1)}
	goMapped := v(2) - v(3)
	p.goRest = goMapped - p.heap - p.stacks
	p.native = p.rss - goMapped
	return p
}

// BenchmarkMemoryPerInstance measures the resident memory that each wasm
// instance adds: the wordcount of each guest language (and of native Go
// operators, which have no instances) runs at parallelism 1 and then 8 on
// one engine, paced so that the job is steady, and the process's resident
// set is sampled memSamples times while each runs, after a collection that
// returns every free page. It reports
//
//   - MiB/instance: (RSS at 8 − RSS at 1) / instances added (14: split and
//     count ×7; the target is ≤ 1.5 for C, Rust and WAT and ≤ 4 for
//     Go at the default memory limit);
//   - MiB/subtask (native): the same over the subtasks added (21), which is
//     what a subtask costs beyond its instances;
//   - MiB/instance-net: MiB/instance less the native subtask cost of the
//     subtasks that come with the instances, which is the instances alone.
//
// Each round measures p=1 and p=8 once; the figures are medians over rounds
// (b.N), after one unreported job at p=8 that warms the process. -v logs each
// sample's breakdown (Go heap, stacks, the Go runtime's other memory, and
// what lies outside the Go runtime: linear memories, compiled code, C
// allocations). WSTREAM_MEMORY_PROFILE=DIR writes a heap profile and
// /proc/self/smaps of each case at parallelism 1 and 8 to DIR
// (NAME-p1.heap, NAME-p8.smaps, …): go tool pprof -diff_base shows what
// the added subtasks and instances hold.
//
//	go test -run '^$' -bench MemoryPerInstance -benchtime 3x -v ./bench/
func BenchmarkMemoryPerInstance(b *testing.B) {
	if os.Getenv("WSTREAM_MEMORY_PROFILE") != "" {
		// Fine enough to tell a subtask's allocations apart.
		runtime.MemProfileRate = 4096
	}
	var nativeSubtask float64 // MiB, from the native case, which runs first
	b.Run("native", func(b *testing.B) {
		nativeSubtask = memCase(b, "native", "", "go:", 0)
	})
	for _, lang := range []string{"go", "c", "rust", "wat"} {
		mod, err := testmod.Build(lang, "wordcount")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(lang, func(b *testing.B) { memCase(b, lang, mod, "", nativeSubtask) })
	}
}

// memCase runs one language's rounds and returns the MiB per added
// subtask. nativeSubtask, when not 0, is what a subtask costs without
// instances, for MiB/instance-net.
func memCase(b *testing.B, name, module, op string, nativeSubtask float64) float64 {
	ctx := context.Background()
	dir := b.TempDir()
	e, err := engine.Start(ctx, engine.Options{DataDir: filepath.Join(dir, "data"), Stdout: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	prepare := func(p int) *engine.Deployment {
		path := filepath.Join(dir, fmt.Sprintf("plan-%d.json", p))
		if err := os.WriteFile(path, []byte(memPlan(op, p)), 0o644); err != nil {
			b.Fatal(err)
		}
		d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{ModulePath: module, PlanPath: path})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	d1, d8 := prepare(1), prepare(8)
	sub1, inst1 := memShape(d1.Graph)
	sub8, inst8 := memShape(d8.Graph)
	profDir := os.Getenv("WSTREAM_MEMORY_PROFILE")

	memJob(b, e, d8, "") // warm-up: the process's first job grows what every later one reuses
	var perInst, perSub, net []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		prof1, prof8 := "", ""
		if i == 0 && profDir != "" {
			prof1, prof8 = filepath.Join(profDir, name+"-p1"), filepath.Join(profDir, name+"-p8")
		}
		at1 := memJob(b, e, d1, prof1)
		at8 := memJob(b, e, d8, prof8)
		diff := at8.minus(at1)
		sub := float64(diff.rss) / float64(sub8-sub1) / (1 << 20)
		perSub = append(perSub, sub)
		b.Logf("round %d %s: p=1 %v", i, name, at1)
		b.Logf("round %d %s: p=8 %v", i, name, at8)
		if inst8 > inst1 {
			in := float64(diff.rss) / float64(inst8-inst1) / (1 << 20)
			perInst = append(perInst, in)
			n := in
			if nativeSubtask != 0 {
				n = (float64(diff.rss)/(1<<20) - nativeSubtask*float64(sub8-sub1)) / float64(inst8-inst1)
				net = append(net, n)
			}
			b.Logf("round %d %s: per added instance (%d) %v; less the native subtask cost %.2f MiB", i, name, inst8-inst1, diff.div(inst8-inst1), n)
		} else {
			b.Logf("round %d %s: per added subtask (%d) %v", i, name, sub8-sub1, diff.div(sub8-sub1))
		}
	}
	b.StopTimer()
	if len(perInst) > 0 {
		b.ReportMetric(tfMedian(perInst), "MiB/instance")
		if len(net) > 0 {
			b.ReportMetric(tfMedian(net), "MiB/instance-net")
		}
	} else {
		b.ReportMetric(tfMedian(perSub), "MiB/subtask")
	}
	return tfMedian(perSub)
}

// memJob runs d until it is steady, samples the process's memory
// memSamples times, memStep counted words apart, cancels the job, and
// returns the median sample (by RSS). prof, when set, is the prefix of a
// heap profile and a copy of /proc/self/smaps taken at the last sample.
func memJob(b *testing.B, e *engine.Engine, d *engine.Deployment, prof string) memPoint {
	ctx := context.Background()
	w, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	id, err := e.Submit(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	wk := e.Workers()[0]
	counted := func() int64 {
		for _, m := range wk.Metrics(id) {
			if m.Vertex == "count" {
				return m.RecordsIn
			}
		}
		return 0
	}
	// ended is the job's result when it stopped by itself (it never
	// should: its source has no end).
	ended := make(chan *transport.JobResult, 1)
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	go func() {
		if r, err := w.Wait(wctx, id); err == nil {
			ended <- r
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(2 * time.Minute)
	await := func(n int64) {
		for counted() < n {
			select {
			case r := <-ended:
				b.Fatalf("job %s ended: %s %s", id, r.State, r.Error)
			case <-limit:
				b.Fatalf("job %s counted %d words in 2 minutes, want %d", id, counted(), n)
			case <-tick.C:
			}
		}
	}
	var samples []memPoint
	next := int64(memWarm)
	for range memSamples {
		await(next)
		samples = append(samples, memSample())
		next = counted() + memStep
	}
	if prof != "" {
		memProfile(b, prof)
	}
	stopWait()
	if err := coordinator.Cancel(ctx, e.Conn(), id); err != nil {
		b.Fatal(err)
	}
	cctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	w2, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		b.Fatal(err)
	}
	defer w2.Close()
	if _, err := w2.Wait(cctx, id); err != nil {
		b.Fatalf("job %s did not stop: %v", id, err)
	}
	slices.SortFunc(samples, func(a, b memPoint) int { return int(a.rss - b.rss) })
	return samples[len(samples)/2]
}

// memStatus returns VmRSS and RssFile of /proc/self/status, bytes.
func memStatus() (rss, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = n << 10
		case "RssFile":
			file = n << 10
		}
	}
	return rss, file
}

// memProfile writes the live heap to prefix.heap and /proc/self/smaps to
// prefix.smaps.
func memProfile(b *testing.B, prefix string) {
	runtime.GC()
	f, err := os.Create(prefix + ".heap")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
	if s, err := os.ReadFile("/proc/self/smaps"); err == nil {
		_ = os.WriteFile(prefix+".smaps", s, 0o644)
	}
}
