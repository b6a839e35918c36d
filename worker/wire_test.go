package worker

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// initLogWAT is an operator module whose _initialize logs "initialized".
const initLogWAT = `(module
  (import "wstream" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "initialized")
  (func (export "_initialize") (call $log (i32.const 1) (i32.const 16) (i32.const 11)))
  (func (export "wstream_abi_version") (result i32) (i32.const 1))
  (func (export "wstream_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`

// TestWireInstantiatesInParallel: the subtasks of a deployment are built
// at once. Each instance's _initialize waits until every instance has
// started its own, which only happens when they are created in parallel.
func TestWireInstantiatesInParallel(t *testing.T) {
	const n = 4
	var (
		armed   atomic.Bool
		mu      sync.Mutex
		started int
		waited  bool // an instance gave up waiting for the others
	)
	all := make(chan struct{})
	logf := func(_ int32, _ string, _ int, msg string) {
		if !armed.Load() || msg != "initialized" {
			return
		}
		mu.Lock()
		started++
		if started == n {
			close(all)
		}
		gaveUp := waited
		mu.Unlock()
		if gaveUp {
			return
		}
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			mu.Lock()
			waited = true
			mu.Unlock()
		}
	}
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{CallTimeout: time.Minute, Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	mod, err := rt.Compile(ctx, "init.wasm", testmod.WAT(t, initLogWAT))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	armed.Store(true)

	plan, err := job.Parse([]byte(`{"name":"wire","parallelism":4,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":10,"keys":5}},
 {"id":"op","kind":"operator","operator":"id"},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"op","partition":"rebalance"},{"from":"op","to":"out"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := job.Build(plan)
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{ID: "w", DataDir: t.TempDir(), Stdout: io.Discard, ChannelCapacity: 8}, log: logging.Discard(),
		rt: rt, cache: pebble.NewCache(1 << 20), modules: map[moduleKey]*host.Module{}, jobs: map[string]*jobRun{}}
	defer w.cache.Unref()
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	j := &jobRun{id: "wire", plan: plan, graph: g, ctx: jctx, cancel: cancel}
	var refs []transport.TaskRef
	for _, c := range g.Chains {
		for s := 0; s < c.Parallelism; s++ {
			refs = append(refs, transport.TaskRef{Chain: c.Index, Subtask: s})
		}
	}
	tasks, err := w.wire(j, mod, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range tasks {
		if want := g.Chains[refs[i].Chain].ID; !strings.HasPrefix(tk.label, want+"/") || tk.subtask != refs[i].Subtask {
			t.Errorf("task %d is %s, want subtask %d of %s", i, tk.label, refs[i].Subtask, want)
		}
		if err := tk.close(); err != nil {
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if started != n || waited {
		t.Fatalf("%d instances initialized, and one waited in vain for the others: %v", started, waited)
	}
}
