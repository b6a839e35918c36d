package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// resetProcess keeps a count of its calls in memory at 16 and in the
// global $g, and acts on the number of records in its batch: 1 returns; 2
// writes garbage into $g, grows the memory by 3 pages and writes garbage
// over the whole memory, then traps; 3 does the same but grows the memory
// to 255 pages, and 5 to its limit of 256; 4 loops for ever. t_state (resetWAT)
// returns count*1000 + $g.
var resetProcess = map[string]string{abi.ExportProcess: `
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $n i32)
    (local.set $n (i32.load (local.get 1)))
    (i32.store (i32.const 16) (i32.add (i32.load (i32.const 16)) (i32.const 1)))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (if (i32.eq (local.get $n) (i32.const 2)) (then (call $garbage (i32.const 3))))
    (if (i32.eq (local.get $n) (i32.const 3)) (then (call $garbage (i32.sub (i32.const 255) (memory.size)))))
    (if (i32.eq (local.get $n) (i32.const 5)) (then (call $garbage (i32.sub (i32.const 256) (memory.size)))))
    (if (i32.eq (local.get $n) (i32.const 4)) (then (loop $l (br $l))))
    (i32.const 0))`}

const resetWAT = `
  (global $g (mut i32) (i32.const 7))
  (func (export "t_state") (result i32)
    (i32.add (i32.mul (i32.load (i32.const 16)) (i32.const 1000)) (global.get $g)))
  (func $garbage (param $grow i32)
    (global.set $g (i32.const 0xdead))
    (drop (memory.grow (local.get $grow)))
    (memory.fill (i32.const 0) (i32.const 0xab) (i32.mul (memory.size) (i32.const 65536)))
    unreachable)`

// wasmState returns what t_state returns.
func wasmState(t *testing.T, inst *Instance) int32 {
	t.Helper()
	v, err := inst.call(nil, phaseIdle, nil, inst.api.ExportedFunction("t_state"), "t_state", 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func memoryCopy(t *testing.T, inst *Instance) []byte {
	t.Helper()
	b, ok := inst.mem.Read(0, inst.mem.Size())
	if !ok {
		t.Fatal("memory unreadable")
	}
	return bytes.Clone(b)
}

func records(n int) []byte {
	var recs []abi.Record
	for k := range n {
		recs = append(recs, rec(0, int64(k), "k", "v"))
	}
	return batchOf(recs...)
}

// TestResetWAT: a trap that wrote garbage over the memory and a global,
// and grew the memory, is undone exactly by Reset, and the instance then
// behaves as a fresh one.
func TestResetWAT(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 2 * time.Second})
	m := compileWAT(t, r, moduleWAT(resetProcess, resetWAT))
	open := func() (*Instance, operator.Operator) {
		inst := newInstance(t, m)
		op := inst.Operator()
		if err := op.Open(testSpec(), newFakeServices()); err != nil {
			t.Fatal(err)
		}
		return inst, op
	}
	inst, op := open()
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	snapMem := memoryCopy(t, inst)
	if inst.snap.size != uint32(len(snapMem)) || inst.SnapshotBytes() > len(snapMem)+len(snapMem)/1000+8 {
		t.Errorf("snapshot of a %d-byte memory (SnapshotBytes %d), memory %d bytes", inst.snap.size, inst.SnapshotBytes(), len(snapMem))
	}
	arena := inst.arenaPtr
	fresh, freshOp := open()
	for round := range 3 {
		if err := op.Process(records(1), &fakeCollector{}); err != nil {
			t.Fatal(err)
		}
		if got := wasmState(t, inst); got != 1008 {
			t.Fatalf("round %d: state %d before the trap, want 1008", round, got)
		}
		err := op.Process(records(2), &fakeCollector{})
		if ge := asGuestError(t, err); !strings.Contains(ge.Message, "unreachable") {
			t.Fatalf("round %d: got %v, want a trap", round, err)
		}
		if !inst.Broken() || !inst.CanReset() {
			t.Fatalf("round %d: Broken %v, CanReset %v after a trap", round, inst.Broken(), inst.CanReset())
		}
		if err := inst.Reset(); err != nil {
			t.Fatal(err)
		}
		if inst.Broken() || inst.Resets() != round+1 {
			t.Fatalf("round %d: Broken %v, %d resets after Reset", round, inst.Broken(), inst.Resets())
		}
		mem := memoryCopy(t, inst)
		if !bytes.Equal(mem, snapMem) {
			t.Fatalf("round %d: memory of %d bytes differs from the snapshot's %d", round, len(mem), len(snapMem))
		}
		if got := wasmState(t, inst); got != 7 {
			t.Fatalf("round %d: state %d after Reset, want the snapshot's 7", round, got)
		}
		if inst.arenaPtr != arena {
			t.Errorf("round %d: arena at %#x, want the snapshot's %#x", round, inst.arenaPtr, arena)
		}
	}
	// The memory that the trap grew and wrote reads as zero when the guest
	// grows it again.
	if old, ok := inst.mem.Grow(3); !ok || old != uint32(len(snapMem)/pageSize) {
		t.Fatalf("memory.grow: %d, %v", old, ok)
	}
	if k := bytes.IndexFunc(memoryCopy(t, inst)[len(snapMem):], func(r rune) bool { return r != 0 }); k >= 0 {
		t.Fatalf("memory grown during the trap not zeroed at %#x", len(snapMem)+k)
	}
	if _, ok := fresh.mem.Grow(3); !ok {
		t.Fatal("memory.grow")
	}
	// The reset instance and a fresh one answer alike.
	for range 2 {
		if err := op.Process(records(1), &fakeCollector{}); err != nil {
			t.Fatal(err)
		}
		if err := freshOp.Process(records(1), &fakeCollector{}); err != nil {
			t.Fatal(err)
		}
		if got, want := wasmState(t, inst), wasmState(t, fresh); got != want {
			t.Errorf("reset instance: state %d, fresh instance %d", got, want)
		}
	}

	t.Run("memory limit", func(t *testing.T) {
		inst, op := open()
		if err := inst.Snapshot(); err != nil {
			t.Fatal(err)
		}
		size := inst.mem.Size()
		if err := op.Process(records(3), &fakeCollector{}); err == nil {
			t.Fatal("no trap")
		}
		if inst.mem.Size() != 255*pageSize {
			t.Fatalf("memory of %d bytes after the trap, want 255 pages", inst.mem.Size())
		}
		// resetAfter resets the instance after a trap (what says which),
		// and checks that it has the snapshot's memory size and state.
		resetAfter := func(what string) {
			t.Helper()
			if err := inst.Reset(); err != nil {
				t.Fatalf("Reset after %s: %v", what, err)
			}
			if inst.mem.Size() != size {
				t.Errorf("memory of %d bytes after %s and Reset, want the snapshot's %d", inst.mem.Size(), what, size)
			}
			if err := op.Process(records(1), &fakeCollector{}); err != nil {
				t.Fatal(err)
			}
			if got := wasmState(t, inst); got != 1008 {
				t.Errorf("state %d after %s, Reset and a call, want 1008", got, what)
			}
		}
		resetAfter("a trap at 255 pages")
		// At its limit too the memory is given its size back: the limit
		// is the instance's allocator's, past which wazero lets it grow.
		err := op.Process(records(5), &fakeCollector{})
		if ge := asGuestError(t, err); !strings.Contains(ge.Message, "at its limit") {
			t.Fatalf("got %v, want a trap at the memory limit", err)
		}
		if inst.mem.Size() != 256*pageSize {
			t.Fatalf("memory of %d bytes after the trap, want the limit's 256 pages", inst.mem.Size())
		}
		resetAfter("a trap at the limit")
	})
	t.Run("deadline", func(t *testing.T) {
		inst, op := open()
		if err := inst.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if err := op.Process(records(4), &fakeCollector{}); !errors.Is(err, ErrDeadlineExceeded) {
			t.Fatalf("got %v, want the deadline", err)
		}
		if inst.CanReset() || !errors.Is(inst.Reset(), ErrNoReset) {
			t.Error("an instance stopped by its deadline can be reset")
		}
	})
	t.Run("no snapshot", func(t *testing.T) {
		inst, op := open()
		trapCloses(t, inst, op)
	})
}

// trapCloses makes op trap and checks that its instance, which cannot be
// reset, refuses Reset and has its module closed, as before resets.
func trapCloses(t *testing.T, inst *Instance, op operator.Operator) {
	t.Helper()
	if err := op.Process(records(2), &fakeCollector{}); err == nil {
		t.Fatal("no trap")
	}
	if inst.CanReset() || !errors.Is(inst.Reset(), ErrNoReset) {
		t.Error("the instance can be reset")
	}
	if !inst.api.IsClosed() {
		t.Error("the trap left the module open")
	}
}

// TestResetRefused: instances of a module whose code changes its table,
// or that runs without instrumentation, take no snapshot, and a trap
// closes them as before.
func TestResetRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		extra string
		why   string
	}{
		{"table.set", Config{}, resetWAT + `
  (table 1 funcref)
  (func (export "t_table") (table.set 0 (i32.const 0) (ref.null func)))`, "table.set"},
		{"not instrumented", Config{CallTimeout: -1}, resetWAT, "not instrumented"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRuntime(t, tc.cfg)
			m := compileWAT(t, r, moduleWAT(resetProcess, tc.extra))
			inst := newInstance(t, m)
			op := inst.Operator()
			if err := op.Open(testSpec(), newFakeServices()); err != nil {
				t.Fatal(err)
			}
			err := inst.Snapshot()
			if !errors.Is(err, ErrNoReset) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Snapshot: %v, want ErrNoReset saying %q", err, tc.why)
			}
			trapCloses(t, inst, op)
		})
	}
}

// TestResetGoGuest resets a Go guest (testops' poison, a keyed running
// count that traps on the records its hash picks) after traps, and
// compares what it emits with a fresh instance's.
func TestResetGoGuest(t *testing.T) {
	wasm, err := os.ReadFile(testmod.GoModule(t, "examples/wasm/go/testops"))
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRuntime(t, Config{CallTimeout: 5 * time.Second})
	m, err := r.Compile(context.Background(), "testops.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	// Values poison picks with every 3 and salt "s", and values it does
	// not, by the hash that poison.go documents.
	var bad, good []string
	for k := 0; len(bad) < 3 || len(good) < 20; k++ {
		v := "w" + strconv.Itoa(k)
		h := uint64(14695981039346656037)
		for _, c := range []byte("s" + v) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		if h%3 == 0 {
			bad = append(bad, v)
		} else {
			good = append(good, v)
		}
	}
	open := func() (*Instance, operator.Operator) {
		inst := newInstance(t, m)
		op := inst.Operator()
		spec := operator.Spec{VertexID: "v", Operator: "poison", Config: []byte(`{"every":3,"salt":"s"}`),
			Subtask: 0, Parallel: 1, MaxParallelism: 128, Keyed: true}
		if err := op.Open(spec, newFakeServices()); err != nil {
			t.Fatal(err)
		}
		return inst, op
	}
	inst, op := open()
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot of %d bytes", inst.SnapshotBytes())
	fresh, freshOp := open()
	defer fresh.Close(context.Background())
	// Every good value once, under its own key: each emits count 1 in the
	// fresh instance; the reset one's state was kept by its services, so
	// its keys differ per round.
	batch := func(round int, values []string) []byte {
		var recs []abi.Record
		for k, v := range values {
			recs = append(recs, rec(0, int64(k), fmt.Sprintf("r%d-%s", round, v), v))
		}
		return batchOf(recs...)
	}
	for round, b := range bad {
		out, want := &fakeCollector{}, &fakeCollector{}
		if err := op.Process(batch(round, good), out); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := freshOp.Process(batch(round, good), want); err != nil {
			t.Fatal(err)
		}
		if out.String() != want.String() {
			t.Fatalf("round %d: the instance emitted\n%s\nthe fresh one\n%s", round, out, want)
		}
		// Garbage on the Go heap before the trap: the trap's call
		// allocates as it goes.
		poisoned := append(append([]string{}, good[:5]...), b)
		err := op.Process(batch(100+round, poisoned), &fakeCollector{})
		if ge := asGuestError(t, err); !strings.Contains(ge.Message, "unreachable") {
			t.Fatalf("round %d: got %v, want a trap", round, err)
		}
		if at := inst.FailedAt(); at != 5 {
			t.Errorf("round %d: FailedAt %d, want 5", round, at)
		}
		if err := inst.Reset(); err != nil {
			t.Fatalf("round %d: Reset: %v (grown from %d to %d bytes)", round, err, inst.snap.size, inst.mem.Size())
		}
		if inst.mem.Size() != inst.snap.size {
			t.Errorf("round %d: memory of %d bytes after Reset, the snapshot's %d", round, inst.mem.Size(), inst.snap.size)
		}
		if inst.SnapshotBytes() >= int(inst.snap.size) {
			t.Errorf("round %d: the snapshot holds %d bytes of a %d-byte memory: its zero pages were kept", round, inst.SnapshotBytes(), inst.snap.size)
		}
		fresh.Close(context.Background())
		fresh, freshOp = open()
	}
	if inst.Resets() != len(bad) {
		t.Errorf("%d resets, want %d", inst.Resets(), len(bad))
	}
	// The Go runtime still works after the resets: a full batch, and one
	// that makes it collect garbage.
	big := make([]string, 0, 2000)
	for k := range 2000 {
		big = append(big, good[k%len(good)])
	}
	out, want := &fakeCollector{}, &fakeCollector{}
	if err := op.Process(batch(999, big), out); err != nil {
		t.Fatal(err)
	}
	if err := freshOp.Process(batch(999, big), want); err != nil {
		t.Fatal(err)
	}
	if out.String() != want.String() {
		t.Errorf("after %d resets the instance emits differently from a fresh one", len(bad))
	}
}

// BenchmarkTrapRecovery measures what a trap costs a Go guest (testops'
// poison, a keyed running count) in dead-letter mode: the trapping call
// (a batch of one good and one bad record), then getting a usable
// instance back, by Reset from a snapshot or by a new instance whose
// operator is opened again, then a call of one record.
func BenchmarkTrapRecovery(b *testing.B) {
	m := compileTestops(b, context.Background())
	// A value poison picks, and one it does not.
	bad, good := poisonValues(1)
	trap := batchOf(rec(0, 1, "k", good[0]), rec(0, 2, "k", bad))
	one := batchOf(rec(0, 3, "k", good[0]))
	open := func(b *testing.B) (*Instance, operator.Operator) {
		inst, err := m.NewInstance(context.Background(), "v/0")
		if err != nil {
			b.Fatal(err)
		}
		op := inst.Operator()
		if err := op.Open(poisonSpec, newFakeServices()); err != nil {
			b.Fatal(err)
		}
		return inst, op
	}
	for _, reset := range []bool{true, false} {
		name := "new-instance"
		if reset {
			name = "reset"
		}
		b.Run(name, func(b *testing.B) {
			inst, op := open(b)
			if reset {
				if err := inst.Snapshot(); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if err := op.Process(trap, &fakeCollector{}); err == nil {
					b.Fatal("no trap")
				}
				if reset {
					if err := inst.Reset(); err != nil {
						b.Fatal(err)
					}
				} else {
					_ = inst.Close(context.Background())
					inst, op = open(b)
				}
				if err := op.Process(one, &fakeCollector{}); err != nil {
					b.Fatal(err)
				}
			}
			if reset {
				b.ReportMetric(float64(inst.SnapshotBytes()), "snapshot-bytes")
			}
			_ = inst.Close(context.Background())
		})
	}
}

// openSnapshotted returns an instance of the resetProcess module with its
// operator open and a snapshot taken.
func openSnapshotted(t *testing.T, r *Runtime) (*Instance, operator.Operator) {
	t.Helper()
	inst := newInstance(t, compileWAT(t, r, moduleWAT(resetProcess, resetWAT)))
	op := inst.Operator()
	if err := op.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	return inst, op
}

// TestResetRestoresWrittenPages: Reset puts back exactly the memory of the
// snapshot, whichever pages were written between the snapshot and the
// trap: pages the snapshot kept and pages it left out as zero, single
// bytes and runs over several pages.
func TestResetRestoresWrittenPages(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		name := "compared"
		if tracked {
			name = "tracked"
		}
		t.Run(name, func(t *testing.T) {
			noWriteTracking = !tracked
			defer func() { noWriteTracking = false }()
			r := newTestRuntime(t, Config{CallTimeout: 2 * time.Second})
			inst, op := openSnapshotted(t, r)
			isTracked := func() {
				t.Helper()
				if uffd, _ := tracking(); (inst.track != nil) != (tracked && uffd >= 0) {
					t.Fatalf("writes tracked: %v, want %v", inst.track != nil, tracked && uffd >= 0)
				}
			}
			isTracked()
			snapMem := memoryCopy(t, inst)
			rng := rand.New(rand.NewPCG(1, 2))
			for round := range 6 {
				if round == 3 {
					// A snapshot of a larger memory: the pages it adds
					// must be tracked too.
					if _, ok := inst.mem.Grow(1); !ok {
						t.Fatal("growing the memory")
					}
					if !inst.mem.WriteByte(uint32(len(snapMem))+pageSize/2, 7) {
						t.Fatal("writing the new page")
					}
					if err := inst.Snapshot(); err != nil {
						t.Fatal(err)
					}
					isTracked()
					snapMem = memoryCopy(t, inst)
				}
				for range 40 {
					off := rng.IntN(len(snapMem) - 3*resetPage)
					if round >= 3 && rng.IntN(4) == 0 {
						off = len(snapMem) - pageSize + rng.IntN(pageSize-3*resetPage)
					}
					b := make([]byte, 1+rng.IntN(3*resetPage))
					for k := range b {
						b[k] = byte(1 + rng.IntN(255))
					}
					if !inst.mem.Write(uint32(off), b) {
						t.Fatal("writing the memory")
					}
				}
				err := op.Process(records(2), &fakeCollector{})
				if ge := asGuestError(t, err); !strings.Contains(ge.Message, "unreachable") {
					t.Fatalf("round %d: got %v, want a trap", round, err)
				}
				if err := inst.Reset(); err != nil {
					t.Fatal(err)
				}
				if mem := memoryCopy(t, inst); !bytes.Equal(mem, snapMem) {
					k := 0
					for k < len(mem) && k < len(snapMem) && mem[k] == snapMem[k] {
						k++
					}
					t.Fatalf("round %d: memory differs from the snapshot's from %#x (page %d)", round, k, k/resetPage)
				}
			}
		})
	}
}

// TestResetKeepsExportHandles: a reset instance keeps the handles of its
// exports, whose call stacks are grown already, but not one whose stack a
// deep recursion grew past maxRetainedStack before it overflowed.
func TestResetKeepsExportHandles(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 5 * time.Second})
	inst, op := openSnapshotted(t, r)
	h := inst.fn(expProcess)
	if err := op.Process(records(2), &fakeCollector{}); err == nil {
		t.Fatal("no trap")
	}
	if err := inst.Reset(); err != nil {
		t.Fatal(err)
	}
	if inst.fn(expProcess) != h {
		t.Error("the reset instance took a new wstream_process handle")
	}
	if err := op.Process(records(1), &fakeCollector{}); err != nil {
		t.Fatalf("after the reset: %v", err)
	}

	m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportProcess: recursionWAT}, ""))
	inst = newInstance(t, m)
	s := inst.Operator().(*slot)
	if err := s.Open(testSpec(), newLeanServices()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	s.index = -1 // unbounded: the stack overflows at wazero's ceiling
	if err := s.Process(batchOf(), &builderCollector{}); !errors.Is(err, ErrStackOverflow) {
		t.Fatalf("got %v, want a stack overflow", err)
	}
	if !inst.CanReset() {
		t.Fatal("a stack overflow left an instance that cannot be reset")
	}
	if err := inst.Reset(); err != nil {
		t.Fatal(err)
	}
	if n := retainedStack(inst.fns[expProcess]); n > maxRetainedStack {
		t.Errorf("the reset instance keeps a %d-byte stack", n)
	}
	s.index = 10
	if err := s.Process(batchOf(), &builderCollector{}); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
}
