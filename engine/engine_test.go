package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// lockedBuffer is a stdout that tests can read while a job writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startEngine(t *testing.T, hc host.Config) (*Engine, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	e, err := Start(context.Background(), Options{DataDir: t.TempDir(), Stdout: out, Host: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("closing engine: %v", err)
		}
	})
	return e, out
}

func prepare(t *testing.T, e *Engine, module, plan string) *Deployment {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	var mod string
	if module != "" {
		mod = testmod.GoModule(t, "examples/wasm/go/"+module)
	}
	d, err := Prepare(context.Background(), e.Runtime(), PrepareOptions{ModulePath: mod, PlanPath: path})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func run(t *testing.T, e *Engine, d *Deployment) *transport.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := e.Run(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFailingGuestsLeaveWorkerHealthy runs guests that trap, overrun their
// deadline and outgrow their memory, then a good job on the same worker,
// which must still produce exact results. The guest that outgrows its memory
// runs on an engine whose call deadline is long: on a busy machine growing
// 32 MiB can take longer than the short deadline the looping guest needs.
func TestFailingGuestsLeaveWorkerHealthy(t *testing.T) {
	bad := func(op, cfg string) string {
		return `{"name":"bad","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":500,"keys":20}},
 {"id":"victim","kind":"operator","operator":"` + op + `","config":` + cfg + `},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"victim"},{"from":"victim","to":"out"}]}`
	}
	type victim struct{ op, cfg, want string }
	for _, c := range []struct {
		timeout time.Duration
		victims []victim
	}{
		{500 * time.Millisecond, []victim{
			{"trap", `{"on":"w3"}`, "w3"},
			{"sleep", `{"on":"w3"}`, "deadline"},
			{"fail", `{"on":"w3"}`, "w3"},
		}},
		{10 * time.Minute, []victim{{"grow", `{"mb":64}`, "memory"}}},
	} {
		e, out := startEngine(t, host.Config{CallTimeout: c.timeout, MemoryLimitPages: 512})
		for _, v := range c.victims {
			r := run(t, e, prepare(t, e, "testops", bad(v.op, v.cfg)))
			if r.State != transport.JobFailed || !strings.Contains(r.Error, "victim") || !strings.Contains(r.Error, v.want) {
				t.Fatalf("%s: state %s, error %q; want failed naming victim and %q", v.op, r.State, r.Error, v.want)
			}
		}
		checkHealthy(t, e, out)
	}
}

// checkHealthy runs a keyed job on e, whose worker saw guests fail: it must
// produce exact results and leave no job behind.
func checkHealthy(t *testing.T, e *Engine, out *lockedBuffer) {
	t.Helper()
	r := run(t, e, prepare(t, e, "wordcount", `{"name":"wc","parallelism":2,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":4000,"keys":50,"words":3}},
 {"id":"split","kind":"operator","operator":"split"},
 {"id":"count","kind":"operator","operator":"count"},
 {"id":"out","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[{"from":"src","to":"split"},{"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"out","partition":"rebalance"}]}`))
	if r.State != transport.JobFinished {
		t.Fatalf("good job after failures: %s %s", r.State, r.Error)
	}
	total := 0
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var w string
		var n int
		if _, err := fmt.Sscanf(strings.Replace(l, "\t", " ", 1), "%s %d", &w, &n); err != nil {
			t.Fatalf("bad line %q", l)
		}
		total += n
	}
	if total != 12000 {
		t.Fatalf("counts sum to %d, want 12000 (4000 records × 3 words)", total)
	}
	if len(e.Workers()[0].Jobs()) != 0 {
		t.Fatalf("worker still holds jobs %v", e.Workers()[0].Jobs())
	}
}

// TestBackpressureBoundsMemory runs an unbounded source into a sink that
// takes 20,000 records/s: the bounded channels must hold the source back, so
// the records in flight stay bounded while the job runs, and cancelling it
// stops it cleanly.
func TestBackpressureBoundsMemory(t *testing.T) {
	e, _ := startEngine(t, host.Config{})
	d := prepare(t, e, "", `{"name":"bp","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":0,"keys":100,"words":4}},
 {"id":"id","kind":"operator","operator":"go:identity"},
 {"id":"out","kind":"sink","connector":"discard","config":{"rate":20000}}],
 "edges":[{"from":"src","to":"id","partition":"rebalance"},{"from":"id","to":"out","partition":"rebalance"}]}`)
	w, err := coordinator.WatchJobs(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, err := e.Submit(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	metric := func(vertex string, in bool) int64 {
		for _, m := range e.Workers()[0].Metrics(id) {
			if m.Vertex == vertex {
				if in {
					return m.RecordsIn
				}
				return m.RecordsOut
			}
		}
		return 0
	}
	// Two channels of 8 buffers, each at most one source batch (1,024
	// records) since a batch's output is sent whole, plus a buffer waiting
	// to be sent into each and one batch in hand at the source and sink.
	const bound = 2*(8+1)*1024 + 2*1024
	deadline := time.Now().Add(time.Minute)
	var maxInFlight int64
	var ms runtime.MemStats
	for samples := 0; samples < 40; {
		if time.Now().After(deadline) {
			t.Fatal("the sink never consumed 20,000 records")
		}
		produced, consumed := metric("src", false), metric("out", true)
		if consumed > 0 {
			samples++
			if f := produced - consumed; f > maxInFlight {
				maxInFlight = f
			}
		}
		if consumed >= 20000 && samples >= 40 {
			break
		}
		time.Sleep(25 * time.Millisecond) // sampling interval, not a wait for progress
	}
	runtime.ReadMemStats(&ms)
	if maxInFlight > bound {
		t.Fatalf("%d records in flight, want at most %d: backpressure does not hold the source", maxInFlight, bound)
	}
	if ms.HeapInuse > 256<<20 {
		t.Fatalf("heap in use %d MiB: memory is not bounded", ms.HeapInuse>>20)
	}
	if err := coordinator.Cancel(context.Background(), e.Conn(), id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := w.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != transport.JobCanceled || r.Error != "" {
		t.Fatalf("cancelled job ended %s %q", r.State, r.Error)
	}
	t.Logf("max in flight %d records (bound %d), heap %d MiB", maxInFlight, bound, ms.HeapInuse>>20)
}

// TestBroadcastUnionAndSideOutputs wires two sources into one operator
// (union over key edges) and broadcasts its output to a sink of parallelism
// 2: every sink subtask must see every record.
func TestBroadcastUnionAndSideOutputs(t *testing.T) {
	e, _ := startEngine(t, host.Config{})
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out.txt")
	d := prepare(t, e, "", `{"name":"fan","parallelism":2,"vertices":[
 {"id":"a","kind":"source","connector":"gen","config":{"count":300,"keys":10,"seed":1}},
 {"id":"b","kind":"source","connector":"gen","config":{"count":200,"keys":10,"seed":2}},
 {"id":"id","kind":"operator","operator":"go:identity","parallelism":3},
 {"id":"out","kind":"sink","connector":"file","config":{"path":"`+outPath+`"}}],
 "edges":[{"from":"a","to":"id","partition":"key"},{"from":"b","to":"id","partition":"key"},
  {"from":"id","to":"out","partition":"broadcast"}]}`)
	r := run(t, e, d)
	if r.State != transport.JobFinished {
		t.Fatalf("%s %s", r.State, r.Error)
	}
	var parts [][]string
	for s := 0; s < 2; s++ {
		b, err := os.ReadFile(fmt.Sprintf("%s.part-%d", outPath, s))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		sort.Strings(lines)
		parts = append(parts, lines)
	}
	if len(parts[0]) != 500 || strings.Join(parts[0], "\n") != strings.Join(parts[1], "\n") {
		t.Fatalf("broadcast parts hold %d and %d records, want 500 each and equal", len(parts[0]), len(parts[1]))
	}
	for _, m := range r.Metrics {
		if m.Vertex == "id" && (m.RecordsIn != 500 || m.RecordsOut != 500) {
			t.Fatalf("union operator saw %d in, %d out; want 500", m.RecordsIn, m.RecordsOut)
		}
		if m.Vertex == "out" && m.RecordsIn != 1000 {
			t.Fatalf("sinks got %d records, want 1000 (broadcast to 2)", m.RecordsIn)
		}
	}
}

// TestPrepareErrors checks that bad plans and overrides are refused before
// anything runs, with errors that name the problem.
func TestPrepareErrors(t *testing.T) {
	e, _ := startEngine(t, host.Config{})
	mod := testmod.GoModule(t, "examples/wasm/go/wordcount")
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		o    PrepareOptions
		want string
	}{
		{PrepareOptions{ModulePath: mod, PlanPath: write("bad.json", `{"name":"x","vertices":[`)}, "bad.json"},
		{PrepareOptions{ModulePath: mod, PlanPath: write("cycle.json", `{"name":"x","vertices":[
 {"id":"s","kind":"source","connector":"gen"},{"id":"a","kind":"operator","operator":"split"},
 {"id":"b","kind":"operator","operator":"split"},{"id":"o","kind":"sink","connector":"stdout"}],
 "edges":[{"from":"s","to":"a"},{"from":"a","to":"b"},{"from":"b","to":"a"},{"from":"b","to":"o"}]}`)}, "cycle"},
		{PrepareOptions{ModulePath: mod, Overrides: job.Overrides{VertexParallelism: map[string]int{"nope": 2}}}, "nope"},
		{PrepareOptions{ModulePath: mod, Overrides: job.Overrides{Sink: []string{"file"}}}, "path"},
		{PrepareOptions{ModulePath: filepath.Join(dir, "missing.wasm")}, "missing.wasm"},
		{PrepareOptions{PlanPath: write("native.json", `{"name":"x","vertices":[
 {"id":"s","kind":"source","connector":"gen"},{"id":"a","kind":"operator","operator":"go:nosuch"},
 {"id":"o","kind":"sink","connector":"stdout"}],"edges":[{"from":"s","to":"a"},{"from":"a","to":"o"}]}`)}, "nosuch"},
	}
	for _, c := range cases {
		_, err := Prepare(context.Background(), e.Runtime(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Prepare(%+v) = %v; want an error mentioning %q", c.o, err, c.want)
		}
	}
}

// TestFailedJobLeavesNoOutputFile checks that a failing job's file sink
// aborts: no file appears that looks complete.
func TestFailedJobLeavesNoOutputFile(t *testing.T) {
	e, _ := startEngine(t, host.Config{})
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	d := prepare(t, e, "testops", `{"name":"x","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":5000,"keys":100}},
 {"id":"f","kind":"operator","operator":"fail","config":{"on":"w42"}},
 {"id":"out","kind":"sink","connector":"file","config":{"path":"`+out+`"}}],
 "edges":[{"from":"src","to":"f"},{"from":"f","to":"out","partition":"rebalance"}]}`)
	r := run(t, e, d)
	if r.State != transport.JobFailed {
		t.Fatalf("job %s, want failed", r.State)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		t.Fatalf("a failed job left %s behind", en.Name())
	}
}
