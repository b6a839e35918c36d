package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// Memory limits of these tests, in pages: the runtime's (4 MiB) and the
// per-instance one (1 MiB).
const (
	runtimePages  = 64
	instancePages = 16
)

// growLoopWAT's wstream_process grows memory one page at a time until
// memory.grow returns -1, storing each new page's index at its start and
// keeping a marker at address 16 from the first page; then it does what
// $after says: return 0, trap, return a status, or call fail and return
// a status.
func growLoopWAT(after string) string {
	return moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 0) "no memory left")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $old i32)
    (i32.store (i32.const 16) (i32.const 0x5eed))
    (block $full (loop $grow
      (local.set $old (memory.grow (i32.const 1)))
      (br_if $full (i32.eq (local.get $old) (i32.const -1)))
      (i32.store (i32.shl (local.get $old) (i32.const 16)) (local.get $old))
      (br $grow)))
    ` + after + `)`,
	}, "")
}

// openLimited opens slot 0 of a new instance of m with opts.
func openLimited(t *testing.T, m *Module, opts ...InstanceOption) (*Instance, *slot) {
	t.Helper()
	inst, err := m.NewInstance(context.Background(), "v1/3", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(context.Background()) })
	s := inst.Operator().(*slot)
	if err := s.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	return inst, s
}

// TestMemoryLimitPerInstance grows memory until refused in two instances
// of one module: the one with WithMemoryLimit stops at its limit, the one
// without at the runtime's, and both keep their contents across the moves
// of their buffer.
func TestMemoryLimitPerInstance(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: runtimePages})
	m := compileWAT(t, r, growLoopWAT(`(i32.const 0)`))
	for _, c := range []struct {
		name  string
		opts  []InstanceOption
		pages uint32
	}{
		{"WithMemoryLimit", []InstanceOption{WithMemoryLimit(instancePages)}, instancePages},
		{"no option", nil, runtimePages},
		{"WithMemoryLimit(0)", []InstanceOption{WithMemoryLimit(0)}, runtimePages},
		{"above the runtime's", []InstanceOption{WithMemoryLimit(runtimePages * 2)}, runtimePages},
		{"last option wins", []InstanceOption{WithMemoryLimit(8), WithMemoryLimit(instancePages)}, instancePages},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst, s := openLimited(t, m, c.opts...)
			if got := inst.MemoryLimitPages(); got != c.pages {
				t.Errorf("MemoryLimitPages %d, want %d", got, c.pages)
			}
			if err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{}); err != nil {
				t.Fatal(err)
			}
			if got := inst.MemoryBytes(); got != c.pages<<16 {
				t.Fatalf("memory grew to %d bytes (%d pages), want the limit of %d pages", got, got>>16, c.pages)
			}
			b, ok := inst.mem.Read(0, c.pages<<16)
			if !ok {
				t.Fatal("memory unreadable")
			}
			if v := binary.LittleEndian.Uint32(b[16:]); v != 0x5eed {
				t.Errorf("marker at 16 is %#x after growing", v)
			}
			// Pages 0 and 1 hold the data segment and the arena; every page
			// the loop added starts with its index and is zero elsewhere.
			for p := uint32(2); p < c.pages; p++ {
				page := b[p<<16 : (p+1)<<16]
				if v := binary.LittleEndian.Uint32(page); v != p {
					t.Fatalf("page %d starts with %d", p, v)
				}
				if !allZero(page[4:]) {
					t.Fatalf("page %d is not zero past its index", p)
				}
			}
			// The instance stays usable: a refused growth is not a failure.
			if err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{}); err != nil {
				t.Fatalf("a call after the refused growth: %v", err)
			}
		})
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestMemoryLimitGuestFailure shows what a call that fails after its
// memory.grow was refused reports, however the guest fails: the operator,
// and that the instance hit its limit.
func TestMemoryLimitGuestFailure(t *testing.T) {
	const hit = "the instance hit its memory limit of 1 MiB (16 pages): growing memory to 17 pages was refused"
	for _, c := range []struct {
		name, after, message string
		memErr, broken       bool // matches ErrMemoryLimit; leaves the instance unusable
	}{
		{"trap", `unreachable`, "wasm error: unreachable (" + hit + ")\nwasm stack trace:", true, true},
		{"status", `(i32.const -11)`, "returned status -11 (" + abi.StatusText(-11) + ") (" + hit + ")", false, false},
		{"fail", `(call $fail (i32.const 0) (i32.const 14)) (i32.const -11)`, "no memory left (" + hit + ")", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRuntime(t, Config{MemoryLimitPages: runtimePages})
			m := compileWAT(t, r, growLoopWAT(c.after))
			inst, s := openLimited(t, m, WithMemoryLimit(instancePages))
			err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{})
			t.Log(err)
			ge := asGuestError(t, err)
			if !strings.Contains(ge.Message, c.message) || !strings.Contains(ge.Message, hit) {
				t.Errorf("message %q lacks %q or %q", ge.Message, c.message, hit)
			}
			if ge.Operator != "v1 (op)" || ge.Subtask != 3 || ge.Call != abi.ExportProcess {
				t.Errorf("error names %q subtask %d call %q", ge.Operator, ge.Subtask, ge.Call)
			}
			if !strings.HasPrefix(err.Error(), "host: operator v1 (op) subtask 3: wstream_process: ") {
				t.Errorf("error %q does not name the operator first", err)
			}
			if errors.Is(err, ErrMemoryLimit) != c.memErr {
				t.Errorf("errors.Is(%v, ErrMemoryLimit) = %v", err, !c.memErr)
			}
			if c.broken {
				checkUnusable(t, s)
				return
			}
			if !errors.Is(err, ErrGuestFailed) {
				t.Errorf("%v does not match ErrGuestFailed", err)
			}
			// The refusal belongs to that call: a later call that grows
			// nothing does not report it.
			if got := inst.MemoryBytes(); got != instancePages<<16 {
				t.Fatalf("memory %d bytes", got)
			}
			inst.stack[0] = 0
			if _, err := inst.call(s, phaseProcess, &fakeCollector{}, inst.api.ExportedFunction("t_allocs"), "t_allocs", 1); err != nil {
				t.Fatal(err)
			}
			if inst.grow.refused != 0 {
				t.Errorf("refusal of an earlier call still recorded: %d pages", inst.grow.refused)
			}
		})
	}
}

// TestMemoryLimitRuntimeMessage shows a runtime-limited instance reports
// its limit in KiB when it is not a whole number of MiB.
func TestMemoryLimitRuntimeMessage(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: 4})
	m := compileWAT(t, r, growLoopWAT(`unreachable`))
	_, s := openLimited(t, m)
	ge := asGuestError(t, s.Process(batchOf(), &fakeCollector{}))
	if w := "the instance hit its memory limit of 256 KiB (4 pages)"; !strings.Contains(ge.Message, w) {
		t.Errorf("message %q lacks %q", ge.Message, w)
	}
}

// TestMemoryLimitMinimumAboveLimit: a module whose memory starts above the
// instance's limit does not instantiate, and says why; at the limit it
// does, and instances without the option are unaffected.
func TestMemoryLimitMinimumAboveLimit(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: runtimePages})
	m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportMemory: `(memory (export "memory") 32)`}, ""))
	inst, err := m.NewInstance(context.Background(), "v1/3", WithMemoryLimit(instancePages))
	if err == nil {
		_ = inst.Close(context.Background())
		t.Fatal("instantiated a module whose memory starts at 32 pages under a limit of 16")
	}
	if !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("%v does not match ErrMemoryLimit", err)
	}
	want := "host: operator v1/3: instantiate: the module's memory starts at 2 MiB (32 pages), above the instance's memory limit of 1 MiB (16 pages)"
	if err.Error() != want {
		t.Errorf("error\n%q, want\n%q", err, want)
	}
	at, s := openLimited(t, m, WithMemoryLimit(32))
	if at.MemoryBytes() != 32<<16 || at.MemoryLimitPages() != 32 {
		t.Errorf("at the limit: %d bytes, limit %d pages", at.MemoryBytes(), at.MemoryLimitPages())
	}
	if err := s.Process(batchOf(rec(0, 1, "k", "v")), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	if _, s := openLimited(t, m); s.Close(&fakeCollector{}) != nil {
		t.Error("an instance without the option failed")
	}
	checkWorkerAlive(t, r, m)
}

// TestMemoryLimitInitialize: _initialize running into the limit fails the
// instantiation with the limit's message.
func TestMemoryLimitInitialize(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: runtimePages})
	m := compileWAT(t, r, moduleWAT(nil, `
  (func (export "_initialize")
    (if (i32.eq (memory.grow (i32.const 20)) (i32.const -1)) (then unreachable)))`))
	_, err := m.NewInstance(context.Background(), "v1/3", WithMemoryLimit(instancePages))
	ge := asGuestError(t, err)
	if w := "the instance hit its memory limit of 1 MiB (16 pages): growing memory to 22 pages was refused"; !strings.Contains(ge.Message, w) ||
		ge.Call != exportInitialize || ge.Operator != "v1/3" || !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("got %v (call %q), want %q", err, ge.Call, w)
	}
	// Without the option the runtime's limit admits the growth.
	_ = newInstance(t, m)
}

// TestMemoryLimitArena: the host's argument arena, which wstream_alloc
// carves out of guest memory, grows up to the instance's limit and then
// fails cleanly, leaving the instance usable.
func TestMemoryLimitArena(t *testing.T) {
	r := newTestRuntime(t, Config{MemoryLimitPages: runtimePages})
	m := compileWAT(t, r, passWAT)
	inst, s := openLimited(t, m, WithMemoryLimit(instancePages))
	allocs := func() uint32 {
		t.Helper()
		if err := inst.api.ExportedFunction("t_allocs").CallWithStack(&inst.cc, inst.stack[:1]); err != nil {
			t.Fatal(err)
		}
		return uint32(inst.stack[0])
	}
	// allocWAT places the arena at 64 KiB, so 15 pages minus a little fit
	// under the limit.
	batch := func(bytes int) []byte {
		return batchOf(rec(0, 1, "k", strings.Repeat("v", bytes-4-20-1)))
	}
	process := func(n int) error {
		out := &discard{}
		err := s.Process(batch(n), out)
		if err == nil && out.n != 1 {
			t.Fatalf("%d records out", out.n)
		}
		return err
	}
	const fits = 15 << 16
	if err := process(600_000); err != nil {
		t.Fatal(err)
	}
	// Twice the arena would not fit: after the refusal the host asks for
	// what it needs.
	before := allocs()
	if err := process(fits); err != nil {
		t.Fatal(err)
	}
	if got := allocs() - before; got != 2 {
		t.Errorf("%d wstream_alloc calls to grow the arena to the limit, want 2", got)
	}
	if inst.MemoryBytes() != instancePages<<16 {
		t.Errorf("memory %d bytes after the arena reached the limit", inst.MemoryBytes())
	}

	// One byte more than fits: the guest's allocation fails at the limit.
	err := process(fits + 1)
	ge := asGuestError(t, err)
	want := "wstream_alloc(983041) failed: it returned 0: the instance hit its memory limit of 1 MiB (16 pages): growing memory to 17 pages was refused"
	if ge.Message != want || ge.Call != abi.ExportAlloc || ge.Operator != "v1 (op)" || ge.Subtask != 3 {
		t.Errorf("got %q (call %q, operator %q subtask %d), want %q", ge.Message, ge.Call, ge.Operator, ge.Subtask, want)
	}
	if !errors.Is(err, ErrMemoryLimit) || !errors.Is(err, ErrGuestFailed) {
		t.Errorf("%v does not match ErrMemoryLimit and ErrGuestFailed", err)
	}

	// More than the whole limit: the host does not ask the guest at all.
	before = allocs()
	err = process(instancePages<<16 + 1)
	ge = asGuestError(t, err)
	want = "1048577 argument bytes exceed the instance's memory limit of 1 MiB (16 pages)"
	if ge.Message != want || ge.Call != abi.ExportProcess || !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("got %q (call %q), want %q", ge.Message, ge.Call, want)
	}
	if n := allocs() - before; n != 0 {
		t.Errorf("%d wstream_alloc calls for arguments larger than the limit", n)
	}

	// The failures retired nothing: the arena still serves what fits.
	if err := process(fits); err != nil {
		t.Fatalf("after the failed allocations: %v", err)
	}
	if err := process(100); err != nil {
		t.Fatal(err)
	}

	// The same module under the runtime's limit takes the larger batch.
	_, s2 := openLimited(t, m)
	if err := s2.Process(batch(fits+1), &discard{}); err != nil {
		t.Fatalf("without the option: %v", err)
	}
}

// TestMemoryLimiter pins the LinearMemory behind every instance, in a
// reservation and, where nothing was reserved, in a Go slice: growth keeps
// contents and zeroes new bytes, never reserves past the limit, and refuses
// growth past it; an initial size past the limit is served (wazero cannot
// take nil there) and flagged.
func TestMemoryLimiter(t *testing.T) {
	for _, c := range []struct {
		name string
		most uint64 // what wazero says the memory may grow to
	}{
		{"reserved", 8 * pageSize},
		{"slice", 0}, // nothing to reserve
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &memLimiter{limit: 4 * pageSize}
			mem := m.Allocate(pageSize, c.most)
			b := mem.Reallocate(pageSize)
			if len(b) != pageSize || m.over {
				t.Fatalf("initial: %d bytes, over %v", len(b), m.over)
			}
			copy(b, "abc")
			for size := uint64(2 * pageSize); size <= 4*pageSize; size += pageSize {
				nb := mem.Reallocate(size)
				if uint64(len(nb)) != size || uint64(cap(nb)) > m.limit {
					t.Fatalf("grown to %d: len %d cap %d", size, len(nb), cap(nb))
				}
				if !bytes.HasPrefix(nb, []byte("abc")) || !allZero(nb[size-pageSize:]) {
					t.Fatalf("grown to %d: contents lost or new page not zero", size)
				}
				if m.res != nil && &nb[0] != &b[0] {
					t.Fatalf("grown to %d: a reserved memory moved", size)
				}
				nb[size-1] = 1
				b = nb
			}
			if nb := mem.Reallocate(5 * pageSize); nb != nil || m.refused != 5 {
				t.Fatalf("past the limit: %d bytes, refused %d", len(nb), m.refused)
			}
			if b[4*pageSize-1] != 1 {
				t.Error("a refused growth changed memory")
			}
			mem.Free()
			if b[0] != 'a' {
				t.Error("Free released the reservation")
			}
			m.release()
			m.release()

			o := &memLimiter{limit: pageSize}
			if b := o.Allocate(2*pageSize, c.most).Reallocate(2 * pageSize); len(b) != 2*pageSize || !o.over {
				t.Errorf("initial size past the limit: %d bytes, over %v", len(b), o.over)
			}
			o.release()
		})
	}
}

// TestMemoryLimitAllocations: the limiter adds no allocation to a call.
func TestMemoryLimitAllocations(t *testing.T) {
	per := func(opts ...InstanceOption) float64 {
		op, out := benchOperatorWith(t, Config{}, counterWAT, opts...)
		in := benchBatch()
		if err := op.Process(in, out); err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(20, func() {
			if err := op.Process(in, out); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := per(), per(WithMemoryLimit(DefaultMemoryLimitPages/2))
	if with > without {
		t.Errorf("%.0f allocations per call with WithMemoryLimit, %.0f without", with, without)
	}
}
