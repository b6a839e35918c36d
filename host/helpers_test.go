package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// watImports imports every host function with the signature abi/ABI.md
// gives it, written out independently of the host's own table.
const watImports = `
  (import "wstream" "emit" (func $emit (param i32 i64 i32 i32 i32 i32) (result i32)))
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (import "wstream" "output_index" (func $output_index (param i32 i32) (result i32)))
  (import "wstream" "state_register" (func $state_register (param i32 i32 i32) (result i32)))
  (import "wstream" "state_get" (func $state_get (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_delete" (func $state_delete (param i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_iter" (func $state_iter (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "timer_delete" (func $timer_delete (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "current_watermark" (func $current_watermark (result i64)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (import "wstream" "log" (func $log (param i32 i32 i32)))
  (import "wstream" "fail" (func $fail (param i32 i32)))
  (import "wstream" "state_get_many" (func $state_get_many (param i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_write_batch" (func $state_write_batch (param i32 i32) (result i32)))
  (import "wstream" "progress_at" (func $progress_at (param i32) (result i32)))
  (import "wstream" "commit" (func $commit (param i32) (result i32)))
`

// allocWAT hands out one region at 64 KiB, growing memory to fit it, and
// counts its calls in $allocs.
const allocWAT = `
  (global $allocs (mut i32) (i32.const 0))
  (func (export "t_allocs") (result i32) (global.get $allocs))
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (global.set $allocs (i32.add (global.get $allocs) (i32.const 1)))
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 65536))`

// defaultParts are the pieces of a minimal valid module, by export name.
var defaultParts = map[string]string{
	abi.ExportMemory:     `(memory (export "memory") 2)`,
	abi.ExportABIVersion: `(func (export "wstream_abi_version") (result i32) (i32.const 1))`,
	abi.ExportAlloc:      allocWAT,
	abi.ExportOpen:       `(func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))`,
	abi.ExportProcess:    `(func (export "wstream_process") (param i32 i32 i32) (result i32) (i32.const 0))`,
	abi.ExportOnTimer:    `(func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))`,
	abi.ExportClose:      `(func (export "wstream_close") (param i32) (result i32) (i32.const 0))`,
}

// partImports is the override key of extra imports, placed before every
// definition as the text format requires.
const partImports = "(imports)"

// moduleWAT assembles a module from the default parts, replaced by
// overrides (an empty override drops the part), plus extra definitions.
// Imports and the memory come first, as the text format requires.
func moduleWAT(overrides map[string]string, extra string) string {
	parts := map[string]string{}
	for k, v := range defaultParts {
		parts[k] = v
	}
	for k, v := range overrides {
		parts[k] = v
	}
	var b strings.Builder
	b.WriteString("(module\n")
	b.WriteString(watImports)
	b.WriteString(parts[partImports] + "\n")
	b.WriteString(parts[abi.ExportMemory] + "\n")
	keys := make([]string, 0, len(parts))
	for k := range parts {
		if k != abi.ExportMemory && k != partImports {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(parts[k] + "\n")
	}
	b.WriteString(extra)
	b.WriteString("\n)\n")
	return b.String()
}

// trampolinesWAT exports t_<name> for every host function, forwarding its
// arguments, so tests can call host functions from inside the guest.
func trampolinesWAT() string {
	var b strings.Builder
	for _, f := range hostFuncs {
		fmt.Fprintf(&b, "  (func (export \"t_%s\")", f.name)
		for _, t := range f.types {
			fmt.Fprintf(&b, " (param %s)", watType(t))
		}
		for _, t := range f.results {
			fmt.Fprintf(&b, " (result %s)", watType(t))
		}
		fmt.Fprintf(&b, " (call $%s", f.name)
		for j := range f.types {
			fmt.Fprintf(&b, " (local.get %d)", j)
		}
		b.WriteString("))\n")
	}
	return b.String()
}

func watType(t byte) string {
	if t == i64 {
		return "i64"
	}
	return "i32"
}

// logEntry is one line received by Config.Log or Services.Log.
type logEntry struct {
	level    int32
	operator string
	subtask  int
	msg      string
}

// logSink collects Config.Log lines.
type logSink struct {
	mu    sync.Mutex
	lines []logEntry
}

func (l *logSink) log(level int32, op string, subtask int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, logEntry{level, op, subtask, msg})
}

func (l *logSink) find(substr string) (logEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.lines {
		if strings.Contains(e.msg, substr) {
			return e, true
		}
	}
	return logEntry{}, false
}

// fakeServices is an in-memory operator.Services that records its calls.
type fakeServices struct {
	states    map[string]int32
	kinds     map[int32]int32
	values    map[string][]byte // stateKey → value
	timers    map[string]bool   // timerKey
	calls     []string
	logs      []logEntry
	watermark int64
	procTime  int64
	err       error // returned by every state and timer call when set
}

func newFakeServices() *fakeServices {
	return &fakeServices{
		states: map[string]int32{}, kinds: map[int32]int32{},
		values: map[string][]byte{}, timers: map[string]bool{},
		watermark: abi.MinWatermark, procTime: 1_700_000_000_000,
	}
}

func stateKey(h int32, key, ns []byte) string { return fmt.Sprintf("%d/%q/%q", h, key, ns) }

func timerKey(domain int32, key, ns []byte, ts int64) string {
	return fmt.Sprintf("%d/%q/%q/%d", domain, key, ns, ts)
}

func (f *fakeServices) RegisterState(name string, kind int32) (int32, error) {
	f.calls = append(f.calls, "RegisterState "+name)
	if h, ok := f.states[name]; ok {
		if f.kinds[h] != kind {
			return 0, operator.ErrBadArgument
		}
		return h, nil
	}
	h := int32(len(f.states))
	f.states[name], f.kinds[h] = h, kind
	return h, nil
}

func (f *fakeServices) handle(h int32) error {
	if f.err != nil {
		return f.err
	}
	if _, ok := f.kinds[h]; !ok {
		return operator.ErrBadHandle
	}
	return nil
}

func (f *fakeServices) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	f.calls = append(f.calls, fmt.Sprintf("StateGet %q %q", key, ns))
	if err := f.handle(h); err != nil {
		return nil, err
	}
	v, ok := f.values[stateKey(h, key, ns)]
	if !ok {
		return nil, operator.ErrNotFound
	}
	return append(dst[:0], v...), nil
}

func (f *fakeServices) StatePut(h int32, key, ns, value []byte) error {
	f.calls = append(f.calls, fmt.Sprintf("StatePut %q %q %q", key, ns, value))
	if err := f.handle(h); err != nil {
		return err
	}
	f.values[stateKey(h, key, ns)] = bytes.Clone(value)
	return nil
}

func (f *fakeServices) StateDelete(h int32, key, ns []byte) error {
	f.calls = append(f.calls, fmt.Sprintf("StateDelete %q %q", key, ns))
	if err := f.handle(h); err != nil {
		return err
	}
	delete(f.values, stateKey(h, key, ns))
	return nil
}

func (f *fakeServices) StateIter(h int32, key, prefix, after []byte, fn func(ns, value []byte) bool) error {
	f.calls = append(f.calls, fmt.Sprintf("StateIter %q %q %q", key, prefix, after))
	if err := f.handle(h); err != nil {
		return err
	}
	type entry struct{ ns, v []byte }
	var entries []entry
	start := fmt.Sprintf("%d/%q/", h, key)
	for k, v := range f.values {
		if !strings.HasPrefix(k, start) {
			continue
		}
		var ns string
		if _, err := fmt.Sscanf(k[len(start):], "%q", &ns); err != nil {
			return err
		}
		if !strings.HasPrefix(ns, string(prefix)) || (after != nil && ns <= string(after)) {
			continue
		}
		entries = append(entries, entry{[]byte(ns), v})
	}
	slices.SortFunc(entries, func(a, b entry) int { return bytes.Compare(a.ns, b.ns) })
	for _, e := range entries {
		if !fn(e.ns, e.v) {
			break
		}
	}
	return nil
}

func (f *fakeServices) RegisterTimer(domain int32, key, ns []byte, ts int64) error {
	f.calls = append(f.calls, "RegisterTimer "+timerKey(domain, key, ns, ts))
	if f.err != nil {
		return f.err
	}
	f.timers[timerKey(domain, key, ns, ts)] = true
	return nil
}

func (f *fakeServices) DeleteTimer(domain int32, key, ns []byte, ts int64) error {
	f.calls = append(f.calls, "DeleteTimer "+timerKey(domain, key, ns, ts))
	if f.err != nil {
		return f.err
	}
	delete(f.timers, timerKey(domain, key, ns, ts))
	return nil
}

func (f *fakeServices) Watermark() int64      { return f.watermark }
func (f *fakeServices) ProcessingTime() int64 { return f.procTime }
func (f *fakeServices) Log(level int32, msg string) {
	f.logs = append(f.logs, logEntry{level: level, msg: msg})
}

func (f *fakeServices) findLog(substr string) bool {
	for _, e := range f.logs {
		if strings.Contains(e.msg, substr) {
			return true
		}
	}
	return false
}

// fakeCollector records copies of what an operator emits.
type fakeCollector struct {
	records []abi.Record
	batches int
	err     error
}

func (c *fakeCollector) Emit(port uint32, ts int64, key, value []byte) error {
	if c.err != nil {
		return c.err
	}
	c.records = append(c.records, abi.Record{Port: port, Timestamp: ts, Key: bytes.Clone(key), Value: bytes.Clone(value)})
	return nil
}

func (c *fakeCollector) EmitBatch(b []byte) error {
	if c.err != nil {
		return c.err
	}
	recs, err := abi.Decode(b)
	if err != nil {
		return err
	}
	c.batches++
	for _, r := range recs {
		if err := c.Emit(r.Port, r.Timestamp, r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

func (c *fakeCollector) String() string {
	var b strings.Builder
	for _, r := range c.records {
		fmt.Fprintf(&b, "%d@%d %q=%q\n", r.Port, r.Timestamp, r.Key, r.Value)
	}
	return b.String()
}

// newTestRuntime creates a runtime closed with the test.
func newTestRuntime(t testing.TB, c Config) *Runtime {
	t.Helper()
	r, err := NewRuntime(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r
}

func compileWAT(t testing.TB, r *Runtime, src string) *Module {
	t.Helper()
	m, err := r.Compile(context.Background(), "test.wasm", testmod.WAT(t, src))
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, src)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func newInstance(t testing.TB, m *Module) *Instance {
	t.Helper()
	inst, err := m.NewInstance(context.Background(), "v1/3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(context.Background()) })
	return inst
}

// testSpec is the spec tests open operators with.
func testSpec() operator.Spec {
	return operator.Spec{VertexID: "v1", Operator: "op", Outputs: []string{"main", "side"},
		Subtask: 3, Parallel: 4, MaxParallelism: 128, Keyed: true}
}

// rig is an opened operator in an instance whose module exports a
// trampoline for every host function.
type rig struct {
	t    *testing.T
	logs *logSink
	inst *Instance
	s    *slot
	svc  *fakeServices
	out  *fakeCollector
}

func newRig(t *testing.T, overrides map[string]string) *rig {
	t.Helper()
	g := &rig{t: t, logs: &logSink{}, svc: newFakeServices(), out: &fakeCollector{}}
	r := newTestRuntime(t, Config{Log: g.logs.log})
	m := compileWAT(t, r, moduleWAT(overrides, trampolinesWAT()))
	g.inst = newInstance(t, m)
	g.s = g.inst.Operator().(*slot)
	if err := g.s.Open(testSpec(), g.svc); err != nil {
		t.Fatal(err)
	}
	g.svc.calls = nil
	return g
}

// call runs the host function name through its trampoline in phase ph.
func (g *rig) call(ph phase, name string, args ...uint64) int32 {
	g.t.Helper()
	fn := g.inst.api.ExportedFunction("t_" + name)
	if fn == nil {
		g.t.Fatalf("no trampoline for %s", name)
	}
	var out operator.Collector
	switch ph {
	case phaseProcess, phaseTimer, phaseClose, phaseBarrier:
		out = g.out
	}
	copy(g.inst.stack[:], args)
	st, err := g.inst.call(g.s, ph, out, fn, "t_"+name, max(len(args), 1))
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	return st
}

// write puts b into guest memory at ptr.
func (g *rig) write(ptr uint32, b []byte) {
	g.t.Helper()
	if !g.inst.mem.Write(ptr, b) {
		g.t.Fatalf("write %d bytes at %#x: out of range", len(b), ptr)
	}
}

func (g *rig) read(ptr, n uint32) []byte {
	g.t.Helper()
	b, ok := g.inst.mem.Read(ptr, n)
	if !ok {
		g.t.Fatalf("read %d bytes at %#x: out of range", n, ptr)
	}
	return bytes.Clone(b)
}

func asGuestError(t testing.TB, err error) *GuestError {
	t.Helper()
	var ge *GuestError
	if !errors.As(err, &ge) {
		t.Fatalf("got %T %v, want a *GuestError", err, err)
	}
	return ge
}

func batchOf(recs ...abi.Record) []byte { return abi.Encode(recs) }

func rec(port uint32, ts int64, key, value string) abi.Record {
	return abi.Record{Port: port, Timestamp: ts, Key: []byte(key), Value: []byte(value)}
}
