package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// fairWaitFor polls cond until it holds, failing after a deadline generous
// enough for a loaded machine.
func fairWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func fairTenant(g *fairshare.Gate, name string) fairshare.TenantStats {
	ts, _ := g.Tenant(name)
	return ts
}

// fairProbeOp is an operator whose every method records what the gate
// showed while it ran.
type fairProbeOp struct {
	g      *fairshare.Gate
	tenant string
	calls  []string
	bad    []string
	block  chan struct{} // when set, Process waits for it
}

func (o *fairProbeOp) record(call string) error {
	o.calls = append(o.calls, call)
	if ts := fairTenant(o.g, o.tenant); ts.Running != 1 {
		o.bad = append(o.bad, fmt.Sprintf("%s ran while %s held %d slots", call, o.tenant, ts.Running))
	}
	return nil
}

func (o *fairProbeOp) Open(operator.Spec, operator.Services) error { return o.record("open") }
func (o *fairProbeOp) Process([]byte, operator.Collector) error {
	if o.block != nil {
		<-o.block
	}
	return o.record("process")
}
func (o *fairProbeOp) OnTimers([]byte, operator.Collector) error { return o.record("on_timer") }
func (o *fairProbeOp) PreBarrier(int64, operator.Collector) error {
	return o.record("pre_barrier")
}
func (o *fairProbeOp) CheckpointComplete(int64) error { return o.record("complete") }
func (o *fairProbeOp) CheckpointAborted(int64) error  { return o.record("aborted") }
func (o *fairProbeOp) Close(operator.Collector) error { return o.record("close") }

func TestFairOperatorGatesEveryMethod(t *testing.T) {
	g := fairshare.New(fairshare.Config{Slots: 2})
	ctx, cancel := context.WithCancel(context.Background())
	probe := &fairProbeOp{g: g, tenant: "acme"}
	f := NewFairOperator(ctx, g, "acme", 3, probe)
	if ts := fairTenant(g, "acme"); ts.Users != 1 || ts.Weight != 3 {
		t.Fatalf("after wrapping: %+v", ts)
	}
	_ = f.Open(operator.Spec{}, nil)
	_ = f.Process(nil, nil)
	_ = f.OnTimers(nil, nil)
	_ = f.PreBarrier(1, nil)
	_ = f.CheckpointComplete(1)
	_ = f.CheckpointAborted(2)
	_ = f.Close(nil)
	if len(probe.calls) != 7 || len(probe.bad) != 0 {
		t.Fatalf("calls %v, problems %v", probe.calls, probe.bad)
	}
	if ts := fairTenant(g, "acme"); ts.Calls != 7 || ts.Running != 0 {
		t.Fatalf("gate after 7 calls: %+v", ts)
	}
	if f.Unwrap() != operator.Operator(probe) {
		t.Fatal("Unwrap")
	}
	// The end of the job's context ends the registration.
	cancel()
	fairWaitFor(t, "the tenant to leave", func() bool { return fairTenant(g, "acme").Users == 0 })
	f.Leave() // once only
	if ts := fairTenant(g, "acme"); ts.Users != 0 {
		t.Fatalf("users %d after a second Leave", ts.Users)
	}
}

func TestFairOperatorCancelWhileWaiting(t *testing.T) {
	g := fairshare.New(fairshare.Config{Slots: 1})
	hold, err := g.Acquire(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	ctx, cancel := context.WithCancel(context.Background())
	probe := &fairProbeOp{g: g, tenant: "acme"}
	f := NewFairOperator(ctx, g, "acme", 0, probe)
	errc := make(chan error, 1)
	go func() { errc <- f.Process(nil, nil) }()
	fairWaitFor(t, "the call to queue", func() bool { return fairTenant(g, "acme").Waiting == 1 })
	cancel()
	err = <-errc
	// A cancelled job's subtask must see context.Canceled, which the worker
	// reports as a cancel rather than a failure.
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Process: %v", err)
	}
	if len(probe.calls) != 0 {
		t.Fatalf("the operator ran: %v", probe.calls)
	}
}

func TestFairOperatorNilGate(t *testing.T) {
	probe := &fairProbeOp{g: fairshare.New(fairshare.Config{Slots: 1}), tenant: "x"}
	f := NewFairOperator(context.Background(), nil, "x", 1, probe)
	// No gate: nothing is held, so the probe sees 0 slots.
	if err := f.Process(nil, nil); err != nil || len(probe.calls) != 1 {
		t.Fatalf("Process: %v, calls %v", err, probe.calls)
	}
	f.Leave()
}

// fairWAT is a minimal operator module whose wstream_process is body.
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
    ` + body + `)
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`
}

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

type fairCollector struct{ n int }

func (c *fairCollector) Emit(uint32, int64, []byte, []byte) error { c.n++; return nil }
func (c *fairCollector) EmitBatch(b []byte) error                 { c.n += abi.Count(b); return nil }

// TestFairOperatorLoopingGuest runs real sandboxes: a tenant whose guests
// loop until their deadline, restarting (instantiating again) after each,
// on four subtasks, and another tenant's pass-through guest on one. The
// looping tenant never holds more than one of the two slots, and the other
// tenant's calls never wait.
func TestFairOperatorLoopingGuest(t *testing.T) {
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	compile := func(name, body string) *host.Module {
		m, err := rt.Compile(ctx, name, testmod.WAT(t, fairWAT(body)))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	loop := compile("loop", `(loop $l (br $l)) (i32.const 0)`)
	pass := compile("pass", `(call $emit_batch (local.get $p) (local.get $n))`)

	g := fairshare.New(fairshare.Config{Slots: 2})
	// The good tenant's job is deployed first: its share is reserved
	// before the looping tenant starts.
	g.Join("good")
	defer g.Leave("good")
	jobCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var deadlines atomic.Int64
	var maxHeld atomic.Int64
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jobCtx.Err() == nil {
				inst, err := NewFairInstance(jobCtx, g, "hostile", loop, fmt.Sprint("loop/", i))
				if err != nil {
					return
				}
				op := NewFairOperator(jobCtx, g, "hostile", 1, inst.Operator())
				if err := op.Open(operator.Spec{VertexID: "loop", Subtask: i}, fairServices{}); err == nil {
					if err := op.Process(abi.Encode(nil), &fairCollector{}); errors.Is(err, host.ErrDeadlineExceeded) {
						deadlines.Add(1)
					}
				}
				op.Leave()
				_ = inst.Close(ctx)
			}
		}()
	}
	// The good tenant's subtask; on a machine loaded enough to starve the
	// test of a core for a whole deadline, its call can miss its deadline
	// too: it then starts again on a new instance, as a restart would.
	var op *FairOperator
	var good *host.Instance
	open := func() {
		if good != nil {
			op.Leave()
			_ = good.Close(ctx)
		}
		var err error
		if good, err = pass.NewInstance(ctx, "pass/0"); err != nil {
			t.Fatal(err)
		}
		op = NewFairOperator(jobCtx, g, "good", 1, good.Operator())
		if err := op.Open(operator.Spec{VertexID: "pass"}, fairServices{}); err != nil {
			t.Fatal(err)
		}
	}
	open()
	defer func() { _ = good.Close(ctx) }()
	fairWaitFor(t, "the looping tenant to queue calls", func() bool {
		ts := fairTenant(g, "hostile")
		return ts.Running == 1 && ts.Waiting >= 2
	})
	batch := abi.Encode([]abi.Record{{Key: []byte("k"), Value: []byte("v")}})
	out := &fairCollector{}
	// Until two of the looping calls have hit their deadline: the slots
	// change hands under the looping tenant's restarts meanwhile.
	missed := 0
	for deadlines.Load() < 2 {
		if err := op.Process(batch, out); errors.Is(err, host.ErrDeadlineExceeded) {
			missed++
			open()
		} else if err != nil {
			t.Fatal(err)
		}
		maxHeld.Store(max(maxHeld.Load(), int64(fairTenant(g, "hostile").Running)))
	}
	stop()
	wg.Wait()
	ts := fairTenant(g, "good")
	if ts.Waits != 0 || maxHeld.Load() > 1 || out.n == 0 {
		t.Fatalf("good waited %d times (max %v), the looping tenant held up to %d slots, %d records out",
			ts.Waits, ts.MaxWait, maxHeld.Load(), out.n)
	}
	t.Logf("good: %d calls, %d missed deadlines; hostile: %d deadlines", ts.Calls, missed, deadlines.Load())
}

func TestFairOperatorDoneContext(t *testing.T) {
	g := fairshare.New(fairshare.Config{Slots: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	probe := &fairProbeOp{g: g, tenant: "acme"}
	f := NewFairOperator(ctx, g, "acme", 1, probe)
	fairWaitFor(t, "the tenant to leave", func() bool { return fairTenant(g, "acme").Users == 0 })
	if err := f.Process(nil, nil); !errors.Is(err, context.Canceled) || len(probe.calls) != 0 {
		t.Fatalf("Process on a done context: %v, calls %v", err, probe.calls)
	}
	f.Leave()
	if ts := fairTenant(g, "acme"); ts.Users != 0 {
		t.Fatalf("users %d", ts.Users)
	}
}
