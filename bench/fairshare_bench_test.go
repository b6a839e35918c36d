package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/worker"
)

// Shape of BenchmarkFairShare's runs.
const (
	// fairCallTimeout is the sandbox's call deadline: the looping guest's
	// calls each hold their slot this long. Shorter than the default 10 s
	// so that each case sees them end and start again.
	fairCallTimeout = time.Second
	// Each case runs for fairWarmUp, then is measured for fairWindow. The
	// windows are short and the cases alternate, so that the load of a
	// shared machine, which moves over seconds, weighs on all of them
	// alike; the ratios are medians over the rounds.
	fairWarmUp     = 300 * time.Millisecond
	fairWindow     = time.Second
	fairGoodTasks  = 2 // subtasks of the well-behaved job
	fairOtherTasks = 4 // subtasks of the job beside it
	fairBatch      = 1024
)

// fairWAT is an operator module whose wstream_process is body, for the
// hostile guests.
func fairWAT(body string) string {
	return `(module
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "wstream_abi_version") (result i32) (i32.const 1))
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 65536))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (local $i i32)
    ` + body + `)
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`
}

// The hostile guests.
var fairHostile = map[string]string{
	// Loops until the call deadline closes the instance.
	"loop": `(loop $l (br $l)) (i32.const 0)`,
	// Emits its input batch 64 times per call: 3.4 MB of output per
	// 53 KB batch.
	"flood": `(loop $l
      (drop (call $emit_batch (local.get $p) (local.get $n)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 64))))
    (i32.const 0)`,
	// Traps at once: the subtask instantiates and opens again, in a loop.
	"crash": `unreachable`,
}

type fairEnv struct {
	rt      *host.Runtime
	upper   *host.Module // the C stateless map (examples/wasm/c/mapfilter)
	hostile map[string]*host.Module
	batch   []byte
	// gatedBusy is the well-behaved job's records per CPU-second beside
	// the busy job, with the gate.
	gatedBusy float64
}

// BenchmarkFairShare runs a well-behaved job (the C upper-case map over
// batches of 1,024 records, 2 subtasks, tenant "good") beside a job of
// another tenant of the same weight (4 subtasks): a well-behaved busy one
// (the same map), one whose guest loops until its call deadline and is
// instantiated again ("loop"), one that emits 64 times its input per call
// ("flood"), and one that traps at once and is instantiated again in a
// tight loop ("crash"). Every guest call, instantiation included, goes
// through worker.FairOperator and worker.NewFairInstance on one
// fairshare.Gate with a slot per core ("gate"), or straight to the sandbox
// ("nogate"). One iteration is one round of every case.
//
// It reports the well-behaved job's records per second of wall time and
// per CPU-second of the whole process (which the load of other processes
// on a shared machine moves less), and the median over rounds of the
// ratio of the latter beside each hostile job to beside the busy one
// (X/busy; X/busy-wall for wall time; -v logs every round's). X-slot-share is the well-behaved
// job's share of the slot time the two jobs held, from the gate's
// statistics. Without the gate the well-behaved job's share follows the
// jobs' numbers of subtasks whatever they do; X/gated-busy compares it
// with the gated busy case.
//
//	go test -run '^$' -bench FairShare -benchtime 8x -v ./bench/
func BenchmarkFairShare(b *testing.B) {
	ctx := context.Background()
	cMod, err := testmod.BuildC("examples/wasm/c/mapfilter")
	if err != nil {
		b.Fatal(err)
	}
	wasm, err := os.ReadFile(cMod)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := host.NewRuntime(ctx, host.Config{CallTimeout: fairCallTimeout})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	env := &fairEnv{rt: rt, hostile: map[string]*host.Module{}}
	if env.upper, err = rt.Compile(ctx, "mapfilter", wasm); err != nil {
		b.Fatal(err)
	}
	for name, body := range fairHostile {
		if env.hostile[name], err = rt.Compile(ctx, name, testmod.WAT(b, fairWAT(body))); err != nil {
			b.Fatal(err)
		}
	}
	var bl abi.Builder
	for i := range fairBatch {
		bl.Add(0, int64(i), []byte(fmt.Sprintf("key-%d", i)), []byte("alpha bravo charlie delta"))
	}
	env.batch = append([]byte(nil), bl.Bytes()...)

	for _, gated := range []bool{true, false} {
		name := "gate"
		if !gated {
			name = "nogate"
		}
		b.Run(name, func(b *testing.B) {
			cases := []string{"busy", "loop", "flood", "crash"}
			if gated {
				cases = append(cases, "alone")
			}
			var total = map[string]*fairResult{}
			for _, c := range cases {
				total[c] = &fairResult{}
			}
			ratios := map[string][]float64{}
			wallRatios := map[string][]float64{}
			for i := 0; i < b.N; i++ {
				// One round runs every case, starting from another one each
				// time.
				round := map[string]fairResult{}
				for k := range cases {
					c := cases[(i+k)%len(cases)]
					r := env.scenario(b, gated, c)
					round[c] = r
					total[c].add(r)
				}
				for _, c := range []string{"loop", "flood", "crash"} {
					ratios[c] = append(ratios[c], round[c].perCPU()/round["busy"].perCPU())
					wallRatios[c] = append(wallRatios[c], round[c].perWall()/round["busy"].perWall())
				}
			}
			var missed int64
			for _, c := range cases {
				t := total[c]
				b.ReportMetric(t.perWall(), c+"-records/s")
				b.ReportMetric(t.perCPU(), c+"-records/cpu-s")
				b.Logf("%s: %.0f records/s, %.0f records per CPU-second, %.2f cores used, %d missed deadlines",
					c, t.perWall(), t.perCPU(), t.cpu.Seconds()/t.wall.Seconds(), t.missed)
				if gated && c != "alone" {
					b.ReportMetric(t.slotShare(), c+"-slot-share")
				}
				missed += t.missed
			}
			for _, c := range []string{"loop", "flood", "crash"} {
				b.ReportMetric(median(ratios[c]), c+"/busy")
				b.ReportMetric(median(wallRatios[c]), c+"/busy-wall")
				b.Logf("%s/busy per round: %.2f per CPU-second (all rounds: %.2f), %.2f per second (all rounds: %.2f)",
					c, ratios[c], total[c].perCPU()/total["busy"].perCPU(), wallRatios[c], total[c].perWall()/total["busy"].perWall())
			}
			b.ReportMetric(float64(missed), "missed-deadlines")
			if gated {
				env.gatedBusy = total["busy"].perCPU()
			} else if env.gatedBusy > 0 {
				// Without the gate, the share of the well-behaved job
				// depends on how many subtasks each job has, busy or not:
				// compare with the gated busy case, the share it should get.
				for _, c := range cases {
					b.ReportMetric(total[c].perCPU()/env.gatedBusy, c+"/gated-busy")
				}
			}
		})
	}
}

// fairResult is what the well-behaved job did in measured windows: records,
// wall time, the CPU time the whole process got meanwhile (on a shared
// machine it moves with the other load; records per CPU-second do not), and
// its calls that missed their deadline.
type fairResult struct {
	records   int64
	wall, cpu time.Duration
	missed    int64
	// goodSlots and otherSlots are the time the two jobs' calls held
	// slots of the gate in the window.
	goodSlots, otherSlots time.Duration
}

func (r *fairResult) add(o fairResult) {
	r.records += o.records
	r.wall += o.wall
	r.cpu += o.cpu
	r.missed += o.missed
	r.goodSlots += o.goodSlots
	r.otherSlots += o.otherSlots
}

// slotShare is the well-behaved job's share of the slot time the two jobs
// held.
func (r fairResult) slotShare() float64 {
	return r.goodSlots.Seconds() / (r.goodSlots + r.otherSlots).Seconds()
}

func (r fairResult) perWall() float64 { return float64(r.records) / r.wall.Seconds() }
func (r fairResult) perCPU() float64  { return float64(r.records) / r.cpu.Seconds() }

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// scenario runs the well-behaved job beside the job of case c ("alone":
// none) and returns what the well-behaved job did in the measured window
// (deadlines missed: over the whole run).
func (e *fairEnv) scenario(b *testing.B, gated bool, c string) fairResult {
	ctx, stop := context.WithCancel(context.Background())
	var g *fairshare.Gate
	var tenants []string
	if gated {
		// Both jobs are deployed before either runs, as a worker registers
		// a job's tenant when it wires the job's subtasks.
		g = fairshare.New(fairshare.Config{})
		tenants = []string{"good"}
		switch c {
		case "alone":
		case "busy":
			tenants = append(tenants, "other")
		default:
			tenants = append(tenants, "hostile")
		}
		for _, t := range tenants {
			g.Join(t)
			defer g.Leave(t)
		}
	}
	var wg sync.WaitGroup
	var good, missed atomic.Int64
	var failed atomic.Value
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				failed.Store(err)
				stop()
			}
		}()
	}
	for i := range fairGoodTasks {
		run(func() error { return e.mapTask(ctx, g, "good", i, &good, &missed) })
	}
	switch c {
	case "alone":
	case "busy":
		var n, m atomic.Int64
		for i := range fairOtherTasks {
			run(func() error { return e.mapTask(ctx, g, "other", i, &n, &m) })
		}
	default:
		for i := range fairOtherTasks {
			run(func() error { return e.hostileTask(ctx, g, c, i) })
		}
	}
	// The measured window; the jobs run on their own meanwhile.
	time.Sleep(fairWarmUp)
	slots := func() (good, other time.Duration) {
		if len(tenants) < 2 {
			return 0, 0
		}
		a, _ := g.Tenant(tenants[0])
		b, _ := g.Tenant(tenants[1])
		return a.Busy, b.Busy
	}
	n0, t0, cpu0 := good.Load(), time.Now(), processCPU()
	good0, other0 := slots()
	time.Sleep(fairWindow)
	n1, el, cpu1 := good.Load(), time.Since(t0), processCPU()
	good1, other1 := slots()
	stop()
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatalf("%s (gate %v): %v", c, gated, err)
	}
	if gated && testing.Verbose() {
		for _, ts := range g.Stats().Tenants {
			b.Logf("%s: tenant %s: %d calls, busy %v, %d waits (%v), canceled %d", c, ts.Tenant, ts.Calls,
				ts.Busy.Round(time.Millisecond), ts.Waits, ts.Waited.Round(time.Millisecond), ts.Canceled)
		}
	}
	return fairResult{records: n1 - n0, wall: el, cpu: cpu1 - cpu0, missed: missed.Load(),
		goodSlots: good1 - good0, otherSlots: other1 - other0}
}

// fairCollector keeps what a call emits, as a subtask's collector does,
// until the next call.
type fairCollector struct{ b abi.Builder }

func (c *fairCollector) Emit(port uint32, ts int64, key, value []byte) error {
	c.b.Add(port, ts, key, value)
	return nil
}

func (c *fairCollector) EmitBatch(batch []byte) error {
	c.b.AppendBatch(batch)
	return nil
}

// mapTask is one subtask of a well-behaved job: the upper-case map over
// the same batch, as fast as it goes, counting records into n. A call that
// misses its deadline (its goroutine starved of a core for that long) is
// counted in missed, and the subtask starts again on a new instance.
func (e *fairEnv) mapTask(ctx context.Context, g *fairshare.Gate, tenant string, i int, n, missed *atomic.Int64) error {
	for ctx.Err() == nil {
		err := e.mapInstance(ctx, g, tenant, i, n)
		if !errors.Is(err, host.ErrDeadlineExceeded) {
			return err
		}
		missed.Add(1)
	}
	return nil
}

func (e *fairEnv) mapInstance(ctx context.Context, g *fairshare.Gate, tenant string, i int, n *atomic.Int64) error {
	inst, err := worker.NewFairInstance(ctx, g, tenant, e.upper, fmt.Sprintf("upper/%d", i))
	if err != nil {
		return err
	}
	defer inst.Close(context.Background())
	op := worker.NewFairOperator(ctx, g, tenant, 1, inst.Operator())
	defer op.Leave()
	if err := op.Open(operator.Spec{VertexID: "upper", Operator: "upper", Subtask: i, Parallel: fairGoodTasks}, fairServices{}); err != nil {
		return err
	}
	out := &fairCollector{}
	for ctx.Err() == nil {
		if err := op.Process(e.batch, out); err != nil {
			return err
		}
		if out.b.Len() != fairBatch {
			return fmt.Errorf("upper emitted %d records of %d", out.b.Len(), fairBatch)
		}
		out.b.Reset()
		n.Add(fairBatch)
	}
	return nil
}

// hostileTask is one subtask of a hostile job: it calls its guest, and
// when the guest fails (a trap, a deadline) it instantiates and opens the
// module again, as a restart would.
func (e *fairEnv) hostileTask(ctx context.Context, g *fairshare.Gate, kind string, i int) error {
	mod := e.hostile[kind]
	out := &fairCollector{}
	for ctx.Err() == nil {
		inst, err := worker.NewFairInstance(ctx, g, "hostile", mod, fmt.Sprintf("%s/%d", kind, i))
		if errors.Is(err, host.ErrDeadlineExceeded) {
			// Instantiation starved of a core past the deadline (a loaded
			// machine): a restart all the same.
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		op := worker.NewFairOperator(ctx, g, "hostile", 1, inst.Operator())
		err = op.Open(operator.Spec{VertexID: kind, Subtask: i, Parallel: fairOtherTasks}, fairServices{})
		for err == nil && ctx.Err() == nil {
			err = op.Process(e.batch, out)
			out.b.Reset()
		}
		op.Leave()
		_ = inst.Close(context.Background())
	}
	return nil
}

// fairServices serves operators without keyed state.
type fairServices struct{}

func (fairServices) RegisterState(string, int32) (int32, error) { return 0, operator.ErrNoKeyedState }
func (fairServices) StateGet(int32, []byte, []byte, []byte) ([]byte, error) {
	return nil, operator.ErrNoKeyedState
}
func (fairServices) StatePut(int32, []byte, []byte, []byte) error { return operator.ErrNoKeyedState }
func (fairServices) StateDelete(int32, []byte, []byte) error      { return operator.ErrNoKeyedState }
func (fairServices) StateIter(int32, []byte, []byte, []byte, func([]byte, []byte) bool) error {
	return operator.ErrNoKeyedState
}
func (fairServices) RegisterTimer(int32, []byte, []byte, int64) error {
	return operator.ErrNoKeyedState
}
func (fairServices) DeleteTimer(int32, []byte, []byte, int64) error { return operator.ErrNoKeyedState }
func (fairServices) Watermark() int64                               { return 0 }
func (fairServices) ProcessingTime() int64                          { return time.Now().UnixMilli() }
func (fairServices) Log(int32, string)                              {}
