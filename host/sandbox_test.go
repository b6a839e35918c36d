package host

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

const wasiWrite = `(import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))`

// openOp opens operator "op" (testSpec) in a new instance of m.
func openOp(t *testing.T, m *Module) (*Instance, *slot) {
	t.Helper()
	inst := newInstance(t, m)
	s := inst.Operator().(*slot)
	if err := s.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	return inst, s
}

// checkWorkerAlive shows the runtime still compiles and runs modules, and
// that a new instance of m opens and closes.
func checkWorkerAlive(t *testing.T, r *Runtime, m *Module) {
	t.Helper()
	good := compileWAT(t, r, passWAT)
	_, s := openOp(t, good)
	out := &fakeCollector{}
	if err := s.Process(batchOf(rec(0, 1, "k", "v")), out); err != nil || len(out.records) != 1 {
		t.Fatalf("a healthy module after the failure: %v, %d records", err, len(out.records))
	}
	_, s2 := openOp(t, m)
	if err := s2.Close(out); err != nil {
		t.Fatalf("another instance of the failing module: %v", err)
	}
}

// checkUnusable shows that every later call on a failed instance returns
// ErrInstanceClosed, and none panics.
func checkUnusable(t *testing.T, s *slot) {
	t.Helper()
	out := &fakeCollector{}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Process", func() error { return s.Process(batchOf(), out) }},
		{"OnTimers", func() error { return s.OnTimers(batchOf(), out) }},
		{"CheckpointComplete", func() error { return s.CheckpointComplete(1) }},
		{"Close", func() error { return s.Close(out) }}, // last: it retires the slot
	} {
		if err := c.call(); !errors.Is(err, ErrInstanceClosed) {
			t.Errorf("%s after the failure: %v, want ErrInstanceClosed", c.name, err)
		}
	}
	if err := s.inst.Close(context.Background()); err != nil {
		t.Errorf("closing the failed instance: %v", err)
	}
}

func TestMemoryLimitTrap(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: 4})
	// Grows one page at a time until memory.grow fails, then traps.
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable)`,
	}, ""))
	inst, s := openOp(t, m)
	err := s.Process(batchOf(), &fakeCollector{})
	ge := asGuestError(t, err)
	for _, w := range []string{"unreachable", "the instance hit its memory limit of 256 KiB (4 pages): growing memory to 5 pages was refused"} {
		if !strings.Contains(ge.Message, w) {
			t.Errorf("message %q lacks %q", ge.Message, w)
		}
	}
	if ge.Operator != "v1 (op)" || ge.Subtask != 3 || ge.Call != abi.ExportProcess {
		t.Errorf("error names %q subtask %d call %q", ge.Operator, ge.Subtask, ge.Call)
	}
	if inst.MemoryBytes() != 0 {
		t.Errorf("a failed instance reports %d bytes of memory", inst.MemoryBytes())
	}
	checkUnusable(t, s)
	checkWorkerAlive(t, r, m)
}

func TestMemoryLimitReportedByGuest(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: 4})
	// Asks for more than the limit at once and reports the failure.
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 0) "out of memory")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (if (i32.eq (memory.grow (i32.const 100)) (i32.const -1))
      (then (call $fail (i32.const 0) (i32.const 13)) (return (i32.const -11))))
    (i32.const 0))`,
	}, ""))
	inst, s := openOp(t, m)
	err := s.Process(batchOf(), &fakeCollector{})
	ge := asGuestError(t, err)
	// The host adds that its limit refused the growth.
	if ge.Message != "out of memory (the instance hit its memory limit of 256 KiB (4 pages): growing memory to 102 pages was refused)" ||
		ge.Status != abi.StatusGuestError || !errors.Is(err, ErrGuestFailed) {
		t.Errorf("got %+v", ge)
	}
	if inst.MemoryBytes() != 2<<16 {
		t.Errorf("memory %d bytes, want the 2 pages it started with", inst.MemoryBytes())
	}
	checkWorkerAlive(t, r, m)
}

func TestDeadline(t *testing.T) {
	const timeout = 100 * time.Millisecond
	r := newTestRuntime(t, Config{CallTimeout: timeout})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (loop $l (br $l)) (i32.const 0))`,
	}, ""))
	_, s := openOp(t, m)
	start := time.Now()
	err := s.Process(batchOf(), &fakeCollector{})
	elapsed := time.Since(start)
	ge := asGuestError(t, err)
	if !errors.Is(err, ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap the deadline errors", err)
	}
	for _, w := range []string{"v1 (op) subtask 3", "wstream_process", "call deadline of 100ms", "instance was closed"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if ge.Status != 0 {
		t.Errorf("status %d", ge.Status)
	}
	if elapsed < timeout || elapsed > 5*time.Second {
		t.Errorf("the call returned after %s", elapsed)
	}
	checkUnusable(t, s)
	checkWorkerAlive(t, r, m)
}

// A guest sleeping through WASI poll_oneoff is cut off at the deadline too.
func TestDeadlineWhileSleeping(t *testing.T) {
	const timeout = 100 * time.Millisecond
	r := newTestRuntime(t, Config{CallTimeout: timeout})
	// One clock subscription (48 bytes at 0): relative timeout of 1 hour.
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: `(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))`,
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (i64.store (i32.const 0) (i64.const 1))          ;; userdata
    (i32.store8 (i32.const 8) (i32.const 0))         ;; tag: clock
    (i32.store (i32.const 16) (i32.const 1))         ;; clock id: monotonic
    (i64.store (i32.const 24) (i64.const 3600000000000)) ;; 1 h
    (i64.store (i32.const 32) (i64.const 0))         ;; precision
    (i32.store16 (i32.const 40) (i32.const 0))       ;; flags: relative
    (drop (call $poll (i32.const 0) (i32.const 100) (i32.const 1) (i32.const 200)))
    (i32.const 0))`,
	}, ""))
	_, s := openOp(t, m)
	start := time.Now()
	err := s.Process(batchOf(), &fakeCollector{})
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("the sleeping call returned after %s", elapsed)
	}
}

// stderrWAT writes "panic: boom\n" to fd 2, then traps.
var stderrWAT = moduleWAT(map[string]string{
	partImports: wasiWrite,
	abi.ExportProcess: `(data (i32.const 300) "panic: boom\n")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (i32.store (i32.const 200) (i32.const 300))
    (i32.store (i32.const 204) (i32.const 12))
    (drop (call $fd_write (i32.const 2) (i32.const 200) (i32.const 1) (i32.const 400)))
    unreachable)`,
}, "")

func TestTrapQuotesStderr(t *testing.T) {
	logs := &logSink{}
	r := newTestRuntime(t, Config{Log: logs.log})
	m := compileWAT(t, r, stderrWAT)
	_, s := openOp(t, m)
	err := s.Process(batchOf(), &fakeCollector{})
	ge := asGuestError(t, err)
	for _, w := range []string{"wasm error: unreachable", "stderr:\npanic: boom"} {
		if !strings.Contains(ge.Message, w) {
			t.Errorf("message %q lacks %q", ge.Message, w)
		}
	}
	if ge.Operator != "v1 (op)" || ge.Subtask != 3 {
		t.Errorf("error names %q subtask %d", ge.Operator, ge.Subtask)
	}
	e, ok := logs.find("panic: boom")
	if !ok || e.msg != "panic: boom" || e.level != abi.LogWarn || e.operator != "v1 (op)" || e.subtask != 3 {
		t.Errorf("stderr log line: %+v %v", e, ok)
	}
	checkUnusable(t, s)
}

func TestStdoutLines(t *testing.T) {
	logs := &logSink{}
	r := newTestRuntime(t, Config{Log: logs.log})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: wasiWrite,
		abi.ExportProcess: `(data (i32.const 300) "hello\nworld\n")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    ;; two writes split inside "world"
    (i32.store (i32.const 200) (i32.const 300)) (i32.store (i32.const 204) (i32.const 9))
    (i32.store (i32.const 208) (i32.const 309)) (i32.store (i32.const 212) (i32.const 3))
    (drop (call $fd_write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 400)))
    (drop (call $fd_write (i32.const 1) (i32.const 208) (i32.const 1) (i32.const 400)))
    (i32.const 0))`,
	}, ""))
	_, s := openOp(t, m)
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range logs.lines {
		if e.level == abi.LogInfo && e.operator == "v1 (op)" {
			got = append(got, e.msg)
		}
	}
	if strings.Join(got, "|") != "hello|world" {
		t.Errorf("stdout lines %q", got)
	}
}

func TestFailAndStatus(t *testing.T) {
	r := newTestRuntime(t, Config{})
	// Fails on non-empty batches, returns BAD_ARGUMENT on timers.
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 0) "bad record 7")
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (if (i32.eqz (i32.load (local.get $p))) (then (return (i32.const 0))))
    (call $fail (i32.const 0) (i32.const 12))
    (call $fail (i32.const 0) (i32.const 3))
    (i32.const -11))`,
		abi.ExportOnTimer: `(func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const -5))`,
	}, ""))
	_, s := openOp(t, m)
	err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{})
	ge := asGuestError(t, err)
	if ge.Message != "bad record 7" || ge.Status != abi.StatusGuestError || !errors.Is(err, ErrGuestFailed) {
		t.Errorf("fail: %+v", ge)
	}
	if want := "host: operator v1 (op) subtask 3: wstream_process: bad record 7"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// The guest returned normally: the instance still works, and the
	// message does not leak into the next call.
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil {
		t.Errorf("after fail: %v", err)
	}
	err = s.OnTimers(batchOf(), &fakeCollector{})
	ge = asGuestError(t, err)
	if ge.Status != abi.StatusBadArgument || ge.Message != "returned status -5 (bad argument)" {
		t.Errorf("status: %+v", ge)
	}
}

func TestProcExit(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: `(import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))`,
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $exit (i32.const 3)) (i32.const 0))`,
	}, ""))
	_, s := openOp(t, m)
	err := s.Process(batchOf(), &fakeCollector{})
	if ge := asGuestError(t, err); !strings.Contains(ge.Message, "exited with code 3") {
		t.Errorf("got %v", err)
	}
	checkUnusable(t, s)
}

func TestWASIHasNoCapabilities(t *testing.T) {
	r := newTestRuntime(t, Config{})
	// Stores at 500: argc, argv bytes, envc, env bytes, and the errnos of
	// fd_prestat_get(3) and path_open on fd 3.
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: `
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))`,
		abi.ExportProcess: `(data (i32.const 600) "etc/passwd")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (i64.store (i32.const 500) (i64.const -1))
    (i64.store (i32.const 508) (i64.const -1))
    (drop (call $args (i32.const 500) (i32.const 504)))
    (drop (call $env (i32.const 508) (i32.const 512)))
    (i32.store (i32.const 516) (call $prestat (i32.const 3) (i32.const 700)))
    (i32.store (i32.const 520) (call $open (i32.const 3) (i32.const 0) (i32.const 600) (i32.const 10)
      (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 704)))
    (i32.const 0))`,
	}, ""))
	inst, s := openOp(t, m)
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	b, _ := inst.mem.Read(500, 24)
	u := func(j int) uint32 { return binary.LittleEndian.Uint32(b[4*j:]) }
	if u(0) != 0 || u(1) != 0 || u(2) != 0 || u(3) != 0 {
		t.Errorf("args %d (%d bytes), env %d (%d bytes): want none", u(0), u(1), u(2), u(3))
	}
	const errnoBadf = 8
	if u(4) != errnoBadf || u(5) != errnoBadf {
		t.Errorf("fd_prestat_get(3) = %d, path_open(3, ...) = %d: want EBADF (no preopened directory)", u(4), u(5))
	}
}

// TestTrapAfterFail checks that a guest that calls fail and then traps (a
// Rust panic hook, an AssemblyScript abort) gets its message into the error.
func TestTrapAfterFail(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 300) "panic: index out of bounds")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $fail (i32.const 300) (i32.const 26))
    unreachable)`,
	}, ""))
	_, s := openOp(t, m)
	ge := asGuestError(t, s.Process(batchOf(), &fakeCollector{}))
	for _, w := range []string{"panic: index out of bounds", "wasm error: unreachable"} {
		if !strings.Contains(ge.Message, w) {
			t.Errorf("message %q lacks %q", ge.Message, w)
		}
	}
	checkUnusable(t, s)
}
