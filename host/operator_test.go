package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// kvWAT is operator "kv": it counts records per key in value state, emits
// each count to output "side", sets an event-time timer at ts+10 per record
// and passes its input batch through to "main" with one emit_batch; fired
// timers emit "fired" and clear the key's count.
var kvWAT = moduleWAT(map[string]string{
	abi.ExportOpen: `
  (global $h (mut i32) (i32.const -1))
  (data (i32.const 0) "kv")
  (data (i32.const 16) "count")
  (data (i32.const 32) "side")
  (data (i32.const 48) "fired")
  (data (i32.const 64) "barrier")
  (data (i32.const 80) "complete")
  (data (i32.const 96) "aborted")
  (data (i32.const 112) "wm")
  (data (i32.const 120) "pt")
  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param $cp i32) (param $cl i32) (result i32)
    (if (i32.or (i32.ne (local.get $nl) (i32.const 2))
                (i32.ne (i32.load16_u (local.get $np)) (i32.load16_u (i32.const 0))))
      (then (return (i32.const -10))))
    (global.set $h (call $state_register (i32.const 16) (i32.const 5) (i32.const 1)))
    (if (i32.lt_s (global.get $h) (i32.const 0)) (then (return (global.get $h))))
    (call $log (i32.const 1) (local.get $cp) (local.get $cl))
    (i32.const 0))`,
	abi.ExportProcess: `
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (local $cnt i32) (local $off i32) (local $kl i32) (local $vl i32) (local $side i32) (local $ts i64)
    (local.set $side (call $output_index (i32.const 32) (i32.const 4)))
    (local.set $cnt (i32.load (local.get $p)))
    (local.set $off (i32.add (local.get $p) (i32.const 4)))
    (block $done (loop $next
      (br_if $done (i32.eqz (local.get $cnt)))
      (local.set $ts (i64.load offset=4 (local.get $off)))
      (local.set $kl (i32.load offset=12 (local.get $off)))
      (local.set $vl (i32.load offset=16 (local.get $off)))
      (if (i32.ne (call $state_get (global.get $h) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
                    (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 8)) (i32.const 8))
        (then (i64.store (i32.const 1024) (i64.const 0))))
      (i64.store (i32.const 1024) (i64.add (i64.load (i32.const 1024)) (i64.const 1)))
      (drop (call $state_put (global.get $h) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
              (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 8)))
      (drop (call $emit (local.get $side) (local.get $ts) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
              (i32.const 1024) (i32.const 8)))
      (drop (call $timer_register (i32.const 0) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
              (i32.const 0) (i32.const 0) (i64.add (local.get $ts) (i64.const 10))))
      (local.set $off (i32.add (local.get $off) (i32.add (i32.const 20) (i32.add (local.get $kl) (local.get $vl)))))
      (local.set $cnt (i32.sub (local.get $cnt) (i32.const 1)))
      (br $next)))
    (call $emit_batch (local.get $p) (local.get $n)))`,
	abi.ExportOnTimer: `
  (func (export "wstream_on_timer") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (local $cnt i32) (local $off i32) (local $kl i32) (local $vl i32)
    (local.set $cnt (i32.load (local.get $p)))
    (local.set $off (i32.add (local.get $p) (i32.const 4)))
    (block $done (loop $next
      (br_if $done (i32.eqz (local.get $cnt)))
      (local.set $kl (i32.load offset=12 (local.get $off)))
      (local.set $vl (i32.load offset=16 (local.get $off)))
      (drop (call $emit (i32.const 0) (i64.load offset=4 (local.get $off)) (i32.add (local.get $off) (i32.const 20)) (local.get $kl)
              (i32.const 48) (i32.const 5)))
      (drop (call $state_delete (global.get $h) (i32.add (local.get $off) (i32.const 20)) (local.get $kl) (i32.const 0) (i32.const 0)))
      (local.set $off (i32.add (local.get $off) (i32.add (i32.const 20) (i32.add (local.get $kl) (local.get $vl)))))
      (local.set $cnt (i32.sub (local.get $cnt) (i32.const 1)))
      (br $next)))
    (i32.const 0))`,
	abi.ExportClose: `
  (func (export "wstream_close") (param $op i32) (result i32)
    (drop (call $emit (i32.const 0) (call $current_watermark) (i32.const 112) (i32.const 2) (i32.const 0) (i32.const 0)))
    (call $emit (i32.const 0) (call $processing_time) (i32.const 120) (i32.const 2) (i32.const 0) (i32.const 0)))`,
}, `
  (func (export "wstream_pre_barrier") (param $op i32) (param $ck i64) (result i32)
    (call $emit (i32.const 0) (local.get $ck) (i32.const 0) (i32.const 0) (i32.const 64) (i32.const 7)))
  (func (export "wstream_checkpoint_complete") (param $op i32) (param $ck i64) (result i32)
    (call $log (i32.const 1) (i32.const 80) (i32.const 8)) (i32.const 0))
  (func (export "wstream_checkpoint_aborted") (param $op i32) (param $ck i64) (result i32)
    (call $log (i32.const 1) (i32.const 96) (i32.const 7)) (i32.const 0))`)

func le64(v uint64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return string(b[:])
}

func TestOperatorEndToEnd(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, kvWAT)
	inst := newInstance(t, m)
	op := inst.Operator()
	svc := newFakeServices()
	spec := testSpec()
	spec.Operator, spec.Config = "kv", []byte(`{"x":1}`)
	if err := op.Open(spec, svc); err != nil {
		t.Fatal(err)
	}
	if h, ok := svc.states["count"]; !ok || h != 0 {
		t.Errorf("states registered in open: %v", svc.states)
	}
	if !svc.findLog(`{"x":1}`) {
		t.Errorf("the guest did not receive its config: logs %+v", svc.logs)
	}

	out := &fakeCollector{}
	in := batchOf(rec(0, 100, "a", "x"), rec(0, 200, "b", "y"), rec(0, 300, "a", "z"))
	if err := op.Process(in, out); err != nil {
		t.Fatal(err)
	}
	want := "1@100 \"a\"=" + quote(le64(1)) + "\n" +
		"1@200 \"b\"=" + quote(le64(1)) + "\n" +
		"1@300 \"a\"=" + quote(le64(2)) + "\n" +
		"0@100 \"a\"=\"x\"\n0@200 \"b\"=\"y\"\n0@300 \"a\"=\"z\"\n"
	if got := out.String(); got != want {
		t.Errorf("Process emitted\n%s\nwant\n%s", got, want)
	}
	if out.batches != 1 {
		t.Errorf("%d emit_batch calls, want 1", out.batches)
	}
	if got := svc.values[stateKey(0, []byte("a"), nil)]; string(got) != le64(2) {
		t.Errorf("state a = %x", got)
	}
	for _, k := range []string{timerKey(0, []byte("a"), nil, 110), timerKey(0, []byte("b"), nil, 210), timerKey(0, []byte("a"), nil, 310)} {
		if !svc.timers[k] {
			t.Errorf("timer %s not registered: %v", k, svc.timers)
		}
	}

	out = &fakeCollector{}
	if err := op.OnTimers(batchOf(rec(0, 110, "a", "")), out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "0@110 \"a\"=\"fired\"\n"; got != want {
		t.Errorf("OnTimers emitted %q, want %q", got, want)
	}
	if _, ok := svc.values[stateKey(0, []byte("a"), nil)]; ok {
		t.Error("the timer did not clear state a")
	}

	out = &fakeCollector{}
	if err := op.PreBarrier(7, out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "0@7 \"\"=\"barrier\"\n"; got != want {
		t.Errorf("PreBarrier emitted %q, want %q", got, want)
	}
	if err := op.CheckpointComplete(7); err != nil || !svc.findLog("complete") {
		t.Errorf("CheckpointComplete: %v, logs %+v", err, svc.logs)
	}
	if err := op.CheckpointAborted(8); err != nil || !svc.findLog("aborted") {
		t.Errorf("CheckpointAborted: %v, logs %+v", err, svc.logs)
	}

	svc.watermark, svc.procTime = abi.MaxWatermark, 555
	out = &fakeCollector{}
	if err := op.Close(out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "0@9223372036854775807 \"wm\"=\"\"\n0@555 \"pt\"=\"\"\n"; got != want {
		t.Errorf("Close emitted %q, want %q", got, want)
	}
	for name, call := range map[string]func() error{
		"Process":  func() error { return op.Process(in, out) },
		"OnTimers": func() error { return op.OnTimers(in, out) },
		"Close":    func() error { return op.Close(out) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "after Close") {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func TestOperatorLifecycleErrors(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, kvWAT)
	inst := newInstance(t, m)
	op := inst.Operator()
	out := &fakeCollector{}
	if err := op.Process(batchOf(), out); err == nil || !strings.Contains(err.Error(), "before Open") {
		t.Errorf("Process before Open: %v", err)
	}
	if err := op.PreBarrier(1, out); err == nil || !strings.Contains(err.Error(), "before Open") {
		t.Errorf("PreBarrier before Open: %v", err)
	}
	if err := op.Open(testSpec(), nil); err == nil || !strings.Contains(err.Error(), "needs Services") {
		t.Errorf("Open without Services: %v", err)
	}
	// Operator "op" is not in the module.
	err := op.Open(testSpec(), newFakeServices())
	ge := asGuestError(t, err)
	if ge.Status != abi.StatusUnknownOp || !strings.Contains(err.Error(), `the module has no operator "op"`) ||
		ge.Operator != "v1 (op)" || ge.Subtask != 3 || ge.Call != abi.ExportOpen {
		t.Errorf("unknown operator: %+v", ge)
	}
	spec := testSpec()
	spec.Operator = "kv"
	if err := op.Open(spec, newFakeServices()); err != nil {
		t.Fatalf("Open after a refused Open: %v", err)
	}
	if err := op.Open(spec, newFakeServices()); err == nil || !strings.Contains(err.Error(), "opened twice") {
		t.Errorf("Open twice: %v", err)
	}
	// A second slot in the same instance gets its own index and state.
	op2 := inst.Operator()
	svc2 := newFakeServices()
	if err := op2.Open(spec, svc2); err != nil {
		t.Fatal(err)
	}
	if op2.(*slot).index != 1 || len(svc2.states) != 1 {
		t.Errorf("second slot: index %d, states %v", op2.(*slot).index, svc2.states)
	}
	if err := op2.Process(batchOf(rec(0, 1, "k", "v")), out); err != nil {
		t.Fatal(err)
	}
	if len(svc2.values) != 1 {
		t.Errorf("the second slot's state went elsewhere: %v", svc2.values)
	}
}

func TestOptionalHooksAbsent(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(nil, ""))
	op := newInstance(t, m).Operator()
	if err := op.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	out := &fakeCollector{}
	if err := op.PreBarrier(1, out); err != nil {
		t.Errorf("PreBarrier: %v", err)
	}
	if err := op.CheckpointComplete(1); err != nil {
		t.Errorf("CheckpointComplete: %v", err)
	}
	if err := op.CheckpointAborted(1); err != nil {
		t.Errorf("CheckpointAborted: %v", err)
	}
	if err := op.Close(out); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// passWAT passes its input batch through with one emit_batch call.
var passWAT = moduleWAT(map[string]string{
	abi.ExportProcess: `(func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (call $emit_batch (local.get $p) (local.get $n)))`,
}, "")

func TestArenaReuse(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, passWAT)
	inst := newInstance(t, m)
	op := inst.Operator()
	if err := op.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	allocs := func() uint32 {
		if err := inst.api.ExportedFunction("t_allocs").CallWithStack(&inst.cc, inst.stack[:1]); err != nil {
			t.Fatal(err)
		}
		return uint32(inst.stack[0])
	}
	if n := allocs(); n != 1 {
		t.Fatalf("%d allocs after Open, want 1", n)
	}
	small := batchOf(rec(0, 1, "k", strings.Repeat("v", 100)))
	for range 5 {
		out := &fakeCollector{}
		if err := op.Process(small, out); err != nil {
			t.Fatal(err)
		}
		if len(out.records) != 1 || string(out.records[0].Value) != strings.Repeat("v", 100) {
			t.Fatalf("pass-through emitted %s", out)
		}
	}
	if n := allocs(); n != 1 {
		t.Errorf("%d allocs after small batches, want the arena reused", n)
	}
	big := batchOf(rec(0, 2, "big", strings.Repeat("w", 100<<10)))
	out := &fakeCollector{}
	if err := op.Process(big, out); err != nil {
		t.Fatal(err)
	}
	if len(out.records) != 1 || len(out.records[0].Value) != 100<<10 {
		t.Fatalf("big batch: %d records", len(out.records))
	}
	if n := allocs(); n != 2 {
		t.Errorf("%d allocs after a bigger batch, want 2", n)
	}
	if inst.arenaCap < uint32(len(big)) {
		t.Errorf("arena %d bytes < batch %d", inst.arenaCap, len(big))
	}
}

func TestAllocFailures(t *testing.T) {
	for _, tc := range []struct {
		name, alloc, want string
	}{
		{"returns 0", `(func (export "wstream_alloc") (param i32) (result i32) (i32.const 0))`, "wstream_alloc(2) failed: it returned 0"},
		{"past memory", `(func (export "wstream_alloc") (param i32) (result i32) (i32.const 131000))`, "a region past the end of memory"},
		{"traps", `(func (export "wstream_alloc") (param i32) (result i32) unreachable)`, "wstream_alloc: wasm error: unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRuntime(t, Config{})
			m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportAlloc: tc.alloc}, ""))
			err := newInstance(t, m).Operator().Open(testSpec(), newFakeServices())
			ge := asGuestError(t, err)
			if !strings.Contains(err.Error(), tc.want) || ge.Call != abi.ExportAlloc || ge.Operator != "v1 (op)" {
				t.Errorf("got %v (%+v), want %q", err, ge, tc.want)
			}
		})
	}
}

func TestHostFailuresFailTheCall(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, kvWAT)
	spec := testSpec()
	spec.Operator = "kv"
	in := batchOf(rec(0, 1, "k", "v"))

	// The guest ignores state_put's status, but a backend failure still
	// fails the call.
	op := newInstance(t, m).Operator()
	svc := newFakeServices()
	if err := op.Open(spec, svc); err != nil {
		t.Fatal(err)
	}
	diskErr := errors.New("disk on fire")
	svc.err = diskErr
	err := op.Process(in, &fakeCollector{})
	if !errors.Is(err, diskErr) || !strings.Contains(err.Error(), "v1 (kv) subtask 3: wstream_process") {
		t.Errorf("backend failure: %v", err)
	}
	svc.err = nil
	if err := op.Process(in, &fakeCollector{}); err != nil {
		t.Errorf("after the backend recovered: %v", err)
	}

	// So does a collector failure.
	downErr := errors.New("downstream closed")
	err = op.Process(in, &fakeCollector{err: downErr})
	if !errors.Is(err, downErr) {
		t.Errorf("collector failure: %v", err)
	}
	// An expected refusal (BAD_OUTPUT) is the guest's to handle.
	if err := op.Process(in, &fakeCollector{err: operator.ErrBadOutput}); err == nil || !errors.Is(err, ErrGuestFailed) {
		t.Errorf("collector refusal: %v", err)
	}
}

// A state change refused for the tenant's memory quota (the undo journal
// of dead-letter mode, over it) stops the call with a quota error that
// names the quota and its flag, whatever the guest does with the status.
func TestMemoryQuotaOfStateStopsTheCall(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, kvWAT)
	spec := testSpec()
	spec.Operator = "kv"
	op := newInstance(t, m).Operator()
	svc := newFakeServices()
	if err := op.Open(spec, svc); err != nil {
		t.Fatal(err)
	}
	svc.err = &operator.MemoryQuotaError{What: "the undo journal of one call in dead-letter mode holds 20971520 bytes of old state values"}
	err := op.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{})
	var q *QuotaError
	if !errors.As(err, &q) || !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("got %v, want a quota error", err)
	}
	if q.Quota != "MemoryBytes" || q.Flag != "--memory" || !strings.Contains(err.Error(), "holds 20971520 bytes of old state values, over the quota of") {
		t.Errorf("quota %q flag %q, message %q", q.Quota, q.Flag, err.Error())
	}
}

// TestExportHandlesTakenOnFirstUse: an instance takes the handle of an
// export (and its call stack) only when it first calls it; the handle of
// an export the module lacks stays nil, and a closed instance takes none.
func TestExportHandlesTakenOnFirstUse(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, passWAT)
	inst := newInstance(t, m)
	if inst.exports&(1<<expProcess) == 0 || inst.exports&(1<<expMigrate) != 0 {
		t.Fatalf("exports %b: want wstream_process and not wstream_migrate", inst.exports)
	}
	for k, f := range inst.fns {
		if f != nil {
			t.Fatalf("a new instance holds the handle of %s", exportNames[k])
		}
	}
	op := inst.Operator()
	if err := op.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	if err := op.Process(records(3), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	if inst.fns[expOpen] == nil || inst.fns[expProcess] == nil {
		t.Fatal("Open and Process left no handles")
	}
	for _, k := range []int{expOnTimer, expPreBarrier, expCkptComplete, expCkptAborted, expMigrate} {
		if inst.fns[k] != nil {
			t.Errorf("the handle of %s, never called, was taken", exportNames[k])
		}
	}
	if inst.fn(expMigrate) != nil {
		t.Error("fn returned a handle for an export the module lacks")
	}
	if err := inst.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if inst.fn(expProcess) != nil {
		t.Error("a closed instance took a handle")
	}
}
