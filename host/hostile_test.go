package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// The tests in this file run one hostile guest per attack class and check
// that the host stops it with an error naming the cause and the operator,
// that the Go heap stays under a stated bound while it runs, and that the
// runtime still runs a well-behaved module afterwards.

// heapWatch samples the Go heap while an attack runs.
type heapWatch struct {
	base uint64
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

var heapMu sync.Mutex

func heapObjects() uint64 {
	heapMu.Lock()
	defer heapMu.Unlock()
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// watchHeap starts sampling the heap (live objects and unswept garbage)
// every millisecond, after a collection that sets the baseline.
func watchHeap(t *testing.T) *heapWatch {
	t.Helper()
	runtime.GC()
	w := &heapWatch{base: heapObjects(), stop: make(chan struct{}), done: make(chan struct{})}
	w.peak.Store(w.base)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *heapWatch) sample() {
	n := heapObjects()
	for {
		p := w.peak.Load()
		if n <= p || w.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (w *heapWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops sampling and fails t when the heap grew by more than limit
// bytes over the baseline at any sample.
func (w *heapWatch) check(t *testing.T, limit uint64) {
	t.Helper()
	w.sample()
	w.end()
	grew := w.peak.Load() - w.base
	if w.peak.Load() < w.base {
		grew = 0
	}
	t.Logf("heap grew by at most %d MiB during the attack (bound %d MiB)", grew>>20, limit>>20)
	if grew > limit {
		t.Errorf("the Go heap grew by %d MiB during the attack, over the bound of %d MiB", grew>>20, limit>>20)
	}
}

// leanServices is an operator.Services for attacks: it keeps what a real
// backend must keep (stored values, pending timers) and nothing else.
type leanServices struct {
	wm, pt  int64
	values  map[string][]byte
	timers  map[string]abi.Record // by domain/ts/key/ns
	logs    []string
	onLog   func(msg string)
	nStates int32
}

func newLeanServices() *leanServices {
	return &leanServices{wm: 1000, pt: 1_700_000_000_000, values: map[string][]byte{}, timers: map[string]abi.Record{}}
}

func (l *leanServices) RegisterState(string, int32) (int32, error) {
	l.nStates++
	return l.nStates - 1, nil
}
func (l *leanServices) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	v, ok := l.values[string(key)+"\x00"+string(ns)]
	if !ok {
		return dst[:0], operator.ErrNotFound
	}
	return append(dst[:0], v...), nil
}
func (l *leanServices) StatePut(h int32, key, ns, value []byte) error {
	l.values[string(key)+"\x00"+string(ns)] = bytes.Clone(value)
	return nil
}
func (l *leanServices) StateDelete(h int32, key, ns []byte) error {
	delete(l.values, string(key)+"\x00"+string(ns))
	return nil
}
func (l *leanServices) StateIter(int32, []byte, []byte, []byte, func([]byte, []byte) bool) error {
	return nil
}

// leanTimerKey sorts timers by domain, time, key and namespace.
func leanTimerKey(domain int32, key, ns []byte, ts int64) string {
	b := []byte{byte(domain)}
	b = binary.BigEndian.AppendUint64(b, uint64(ts)^(1<<63))
	b = binary.AppendUvarint(b, uint64(len(key)))
	return string(append(append(b, key...), ns...))
}

func (l *leanServices) RegisterTimer(domain int32, key, ns []byte, ts int64) error {
	l.timers[leanTimerKey(domain, key, ns, ts)] = abi.Record{Port: uint32(domain), Timestamp: ts, Key: bytes.Clone(key), Value: bytes.Clone(ns)}
	return nil
}
func (l *leanServices) DeleteTimer(domain int32, key, ns []byte, ts int64) error {
	delete(l.timers, leanTimerKey(domain, key, ns, ts))
	return nil
}
func (l *leanServices) Watermark() int64      { return l.wm }
func (l *leanServices) ProcessingTime() int64 { return l.pt }
func (l *leanServices) Log(level int32, msg string) {
	l.logs = append(l.logs, msg)
	if l.onLog != nil {
		l.onLog(msg)
	}
}

// popDue removes the timers of domain due at upTo, at most 1024, in firing
// order, as the worker does, and returns them as a timer batch (nil: none).
func (l *leanServices) popDue(domain int32, upTo int64) []byte {
	var keys []string
	for k, r := range l.timers {
		if int32(r.Port) == domain && r.Timestamp <= upTo {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	var b abi.Builder
	for _, k := range keys[:min(len(keys), 1024)] {
		b.AddRecord(ptr(l.timers[k]))
		delete(l.timers, k)
	}
	return bytes.Clone(b.Bytes())
}

func ptr[T any](v T) *T { return &v }

// builderCollector buffers a call's output the way the worker's stage
// collector does.
type builderCollector struct{ b abi.Builder }

func (c *builderCollector) Emit(port uint32, ts int64, key, value []byte) error {
	c.b.Add(port, ts, key, value)
	return nil
}
func (c *builderCollector) EmitBatch(b []byte) error {
	c.b.AppendBatch(b)
	return nil
}

// hostileOp opens operator "op" (testSpec) of m in a new instance created
// with ctx and opts, served by svc.
func hostileOp(t *testing.T, ctx context.Context, m *Module, svc operator.Services, opts ...InstanceOption) (*Instance, *slot) {
	t.Helper()
	inst, err := m.NewInstance(ctx, "v1/3", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(context.Background()) })
	s := inst.Operator().(*slot)
	if err := s.Open(testSpec(), svc); err != nil {
		t.Fatal(err)
	}
	return inst, s
}

// checkNamed checks that err is a GuestError of operator "v1 (op)",
// subtask 3, call call, matching target, whose message holds every want.
func checkNamed(t *testing.T, err error, call string, target error, want ...string) *GuestError {
	t.Helper()
	ge := asGuestError(t, err)
	if ge.Operator != "v1 (op)" || ge.Subtask != 3 || ge.Call != call {
		t.Errorf("error names operator %q subtask %d call %q: %v", ge.Operator, ge.Subtask, ge.Call, err)
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("error %v does not match %v", err, target)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	return ge
}

// quotaOf returns the QuotaError in err.
func quotaOf(t *testing.T, err error) *QuotaError {
	t.Helper()
	var q *QuotaError
	if !errors.As(err, &q) {
		t.Fatalf("got %v, want a *QuotaError", err)
	}
	return q
}

// checkHealthy shows that the runtime still compiles and runs a
// well-behaved module correctly after an attack.
func checkHealthy(t *testing.T, r *Runtime) {
	t.Helper()
	good := compileWAT(t, r, passWAT)
	_, s := hostileOp(t, context.Background(), good, newFakeServices())
	out := &fakeCollector{}
	in := batchOf(rec(0, 1, "k", "v"), rec(1, 2, "k2", "v2"))
	if err := s.Process(in, out); err != nil {
		t.Fatalf("a well-behaved module after the attack: %v", err)
	}
	if got, want := out.String(), "0@1 \"k\"=\"v\"\n1@2 \"k2\"=\"v2\"\n"; got != want {
		t.Errorf("a well-behaved module after the attack emitted %q, want %q", got, want)
	}
	if err := s.Close(out); err != nil {
		t.Errorf("closing it: %v", err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		runtime.Gosched()
	}
}

func TestHostileInfiniteLoopInOneCall(t *testing.T) {
	// The guest says it started, then spins without calling anything.
	src := moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 0) "started")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 7))
    (loop $l (br $l)) (i32.const 0))`,
	}, "")

	t.Run("deadline", func(t *testing.T) {
		r := newTestRuntime(t, Config{CallTimeout: 200 * time.Millisecond})
		m := compileWAT(t, r, src)
		heap := watchHeap(t)
		_, s := hostileOp(t, context.Background(), m, newLeanServices())
		err := s.Process(batchOf(rec(0, 1, "k", "v")), &builderCollector{})
		checkNamed(t, err, abi.ExportProcess, ErrDeadlineExceeded, "exceeded the call deadline of 200ms")
		heap.check(t, 16<<20)
		checkUnusable(t, s)
		checkHealthy(t, r)
	})

	t.Run("cancel", func(t *testing.T) {
		// A deadline far away: only cancellation can stop the guest.
		r := newTestRuntime(t, Config{CallTimeout: time.Hour})
		m := compileWAT(t, r, src)
		heap := watchHeap(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan struct{})
		svc := newLeanServices()
		svc.onLog = func(string) { close(started) }
		_, s := hostileOp(t, ctx, m, svc)
		errc := make(chan error, 1)
		go func() { errc <- s.Process(batchOf(rec(0, 1, "k", "v")), &builderCollector{}) }()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the guest did not start")
		}
		at := time.Now()
		cancel()
		var err error
		select {
		case err = <-errc:
		case <-time.After(10 * time.Second):
			t.Fatal("cancelling did not stop the guest within 10s")
		}
		t.Logf("stopped %s after cancel", time.Since(at))
		checkNamed(t, err, abi.ExportProcess, context.Canceled, "cancelled")
		if !errors.Is(err, ErrCanceled) {
			t.Errorf("%v is not ErrCanceled", err)
		}
		heap.check(t, 16<<20)
		if err := s.Process(batchOf(), &builderCollector{}); !errors.Is(err, ErrCanceled) {
			t.Errorf("a call after the cancellation: %v", err)
		}
		checkHealthy(t, r)
	})

	t.Run("cancel while idle", func(t *testing.T) {
		r := newTestRuntime(t, Config{CallTimeout: time.Hour})
		m := compileWAT(t, r, passWAT)
		ctx, cancel := context.WithCancel(context.Background())
		_, s := hostileOp(t, ctx, m, newLeanServices())
		cancel()
		waitFor(t, 10*time.Second, "refusal after cancel", func() bool {
			return errors.Is(s.Process(batchOf(), &builderCollector{}), context.Canceled)
		})
		checkNamed(t, s.Process(batchOf(), &builderCollector{}), abi.ExportProcess, ErrCanceled, "context was cancelled")
	})
}

// cascadeWAT re-registers, on every timer, the timer it fired: for
// processing time at the current wall clock, for event time at its own
// time, both already due.
const cascadeWAT = `(data (i32.const 0) "k")
  (func (export "wstream_on_timer") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $domain i32) (local $ts i64)
    (local.set $domain (i32.load (i32.add (local.get $b) (i32.const 4))))
    (local.set $ts (i64.load (i32.add (local.get $b) (i32.const 8))))
    (if (i32.eq (local.get $domain) (i32.const 1))
      (then (local.set $ts (call $processing_time))))
    (call $timer_register (local.get $domain) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (local.get $ts)))`

func TestHostileTimerCascade(t *testing.T) {
	for _, domain := range []int32{abi.TimeEvent, abi.TimeProcessing} {
		t.Run(domainName(domain), func(t *testing.T) {
			r := newTestRuntime(t, Config{})
			m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportOnTimer: cascadeWAT}, ""))
			heap := watchHeap(t)
			svc := newLeanServices()
			const quota = 20_000
			_, s := hostileOp(t, context.Background(), m, svc, WithLimits(Limits{MaxCascadedTimers: quota}))
			if err := svc.RegisterTimer(domain, []byte("k"), nil, svc.wm); err != nil {
				t.Fatal(err)
			}
			upTo := svc.wm
			if domain == abi.TimeProcessing {
				upTo = svc.pt
			}
			// The worker's firing loop: pop due timers until none is left.
			var err error
			rounds := 0
			for ; rounds <= quota+10; rounds++ {
				batch := svc.popDue(domain, upTo)
				if batch == nil {
					t.Fatalf("the cascade ended after %d rounds", rounds)
				}
				if err = s.OnTimers(batch, &builderCollector{}); err != nil {
					break
				}
			}
			q := quotaOf(t, err)
			checkNamed(t, err, abi.ExportOnTimer, ErrQuotaExceeded,
				fmt.Sprintf("registered %d already-due %s timers while firing timers, over the quota of %d already-due timers per firing (--max-cascaded-timers)",
					quota+1, domainName(domain), quota))
			if q.Quota != "MaxCascadedTimers" || q.Limit != quota || rounds != quota {
				t.Errorf("quota %s %d after %d rounds", q.Quota, q.Limit, rounds)
			}
			heap.check(t, 32<<20)
			checkUnusable(t, s)
			checkHealthy(t, r)
		})
	}

	t.Run("process resets the count", func(t *testing.T) {
		// Timers registered due in separate advances are no cascade.
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportOnTimer: cascadeWAT}, ""))
		svc := newLeanServices()
		_, s := hostileOp(t, context.Background(), m, svc, WithLimits(Limits{MaxCascadedTimers: 3}))
		_ = svc.RegisterTimer(abi.TimeEvent, []byte("k"), nil, svc.wm)
		for i := 0; i < 20; i++ {
			if err := s.OnTimers(svc.popDue(abi.TimeEvent, svc.wm), &builderCollector{}); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			if i%3 == 2 {
				svc.wm++ // the next advance
			}
			if i%5 == 4 {
				if err := s.Process(batchOf(), &builderCollector{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	t.Run("cancel stops a lifted cascade", func(t *testing.T) {
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportOnTimer: cascadeWAT}, ""))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		svc := newLeanServices()
		_, s := hostileOp(t, ctx, m, svc, WithLimits(Limits{MaxCascadedTimers: -1}))
		_ = svc.RegisterTimer(abi.TimeEvent, []byte("k"), nil, svc.wm)
		var err error
		for round := 0; err == nil; round++ {
			if round == 1000 {
				cancel()
			}
			if round > 1_000_000 {
				t.Fatal("cancelling did not stop the cascade")
			}
			err = s.OnTimers(svc.popDue(abi.TimeEvent, svc.wm), &builderCollector{})
		}
		checkNamed(t, err, abi.ExportOnTimer, context.Canceled)
	})
}

func TestHostileSourceThatNeverYields(t *testing.T) {
	// wstream_close emits empty records for ever, ignoring every status.
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportClose: `(func (export "wstream_close") (param i32) (result i32)
    (loop $l (drop (call $emit (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0))) (br $l))
    (i32.const 0))`,
	}, ""))
	heap := watchHeap(t)
	_, s := hostileOp(t, context.Background(), m, newLeanServices())
	out := &builderCollector{}
	err := s.Close(out)
	q := quotaOf(t, err)
	checkNamed(t, err, abi.ExportClose, ErrQuotaExceeded,
		"emitted 1000001 records in one call, over the quota of 1000000 records per call (--max-records-per-call)")
	if q.Limit != DefaultMaxRecordsPerCall || out.b.Len() != DefaultMaxRecordsPerCall {
		t.Errorf("quota %d, %d records reached the collector", q.Limit, out.b.Len())
	}
	out = nil
	heap.check(t, 96<<20)
	checkHealthy(t, r)
}

// manyRecordsWAT emits batches of 1000 empty records for ever (the batch
// lies above the argument arena at 0x10000).
const manyRecordsWAT = `(data (i32.const 0x18000) "\e8\03\00\00")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (loop $l (drop (call $emit_batch (i32.const 0x18000) (i32.const 20004))) (br $l))
    (i32.const 0))`

func TestHostileOutputAmplification(t *testing.T) {
	t.Run("many records per input", func(t *testing.T) {
		// For its one input record, the guest emits batches of 1000 empty
		// records for ever.
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{
			abi.ExportProcess: manyRecordsWAT,
		}, ""))
		heap := watchHeap(t)
		_, s := hostileOp(t, context.Background(), m, newLeanServices())
		out := &builderCollector{}
		err := s.Process(batchOf(rec(0, 1, "k", "v")), out)
		quotaOf(t, err)
		checkNamed(t, err, abi.ExportProcess, ErrQuotaExceeded,
			"emitted 101000 records for 1 input record, over the quota of 100000 records per input record (--max-records-per-input)")
		if out.b.Len() != 100_000 {
			t.Errorf("%d records reached the collector", out.b.Len())
		}
		out = nil
		heap.check(t, 64<<20)
		checkHealthy(t, r)
	})

	t.Run("per input scales with the batch", func(t *testing.T) {
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{
			abi.ExportProcess: manyRecordsWAT,
		}, ""))
		_, s := hostileOp(t, context.Background(), m, newLeanServices(), WithLimits(Limits{MaxRecordsPerInput: 1000}))
		err := s.Process(batchOf(rec(0, 1, "a", ""), rec(0, 2, "b", ""), rec(0, 3, "c", "")), &builderCollector{})
		checkNamed(t, err, abi.ExportProcess, ErrQuotaExceeded,
			"emitted 4000 records for 3 input records, over the quota of 1000 records per input record")
	})

	t.Run("huge records", func(t *testing.T) {
		// The guest emits one record with a 4 MiB value for ever.
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{
			abi.ExportMemory: `(memory (export "memory") 80)`,
			abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (loop $l (drop (call $emit (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 0) (i32.const 0x100000) (i32.const 0x400000))) (br $l))
    (i32.const 0))`,
		}, ""))
		heap := watchHeap(t)
		_, s := hostileOp(t, context.Background(), m, newLeanServices())
		out := &builderCollector{}
		err := s.Process(batchOf(rec(0, 1, "k", "v")), out)
		q := quotaOf(t, err)
		checkNamed(t, err, abi.ExportProcess, ErrQuotaExceeded,
			fmt.Sprintf("emitted %d bytes of records in one call", 8*(abi.RecordHeaderSize+4<<20)),
			"over the quota of 33554432 bytes (32 MiB) of output per call (--max-output-bytes-per-call)")
		if q.Quota != "MaxOutputBytesPerCall" || out.b.Size() > DefaultMaxOutputBytesPerCall+abi.BatchHeaderSize {
			t.Errorf("quota %s, %d bytes reached the collector", q.Quota, out.b.Size())
		}
		out = nil
		heap.check(t, 128<<20)
		checkHealthy(t, r)
	})
}

func TestHostileState(t *testing.T) {
	// put(key i, 1 MiB value) for i = 0, 1, 2… for ever.
	flood := `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $i i32)
    (loop $l
      (i32.store (i32.const 0) (local.get $i))
      (drop (call $state_put (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 0) (i32.const 0x10000) (i32.const 0x100000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))
    (i32.const 0))`

	t.Run("flood", func(t *testing.T) {
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportMemory: `(memory (export "memory") 20)`, abi.ExportProcess: flood}, ""))
		heap := watchHeap(t)
		svc := newLeanServices()
		_, s := hostileOp(t, context.Background(), m, svc)
		err := s.Process(batchOf(rec(0, 1, "k", "v")), &builderCollector{})
		q := quotaOf(t, err)
		checkNamed(t, err, abi.ExportProcess, ErrQuotaExceeded,
			"bytes of state in one call, over the quota of 33554432 bytes (32 MiB) of state writes per call (--max-state-bytes-per-call)")
		if q.Quota != "MaxStateBytesPerCall" || len(svc.values) != 31 {
			t.Errorf("quota %s, %d values stored", q.Quota, len(svc.values))
		}
		svc.values = nil
		heap.check(t, 96<<20)
		checkHealthy(t, r)
	})

	t.Run("huge values", func(t *testing.T) {
		// Values and keys over lowered limits get LIMIT, which the guest
		// returns as its status.
		r := newTestRuntime(t, Config{Limits: Limits{MaxStateValueBytes: 64 << 10}})
		m := compileWAT(t, r, moduleWAT(map[string]string{
			abi.ExportMemory: `(memory (export "memory") 20)`,
			abi.ExportProcess: `(func (export "wstream_process") (param $op i32) (param i32 i32) (result i32)
    (if (i32.eqz (local.get $op))
      (then (return (call $state_put (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 0) (i32.const 0x10000) (i32.const 0x10001)))))
    (call $state_put (i32.const 0) (i32.const 0) (i32.const 0x1001) (i32.const 0) (i32.const 0) (i32.const 0x10000) (i32.const 1)))`,
		}, ""))
		heap := watchHeap(t)
		svc := newLeanServices()
		_, s := hostileOp(t, context.Background(), m, svc, WithLimits(Limits{MaxStateKeyBytes: 4096}))
		err := s.Process(batchOf(), &builderCollector{})
		checkNamed(t, err, abi.ExportProcess, ErrGuestFailed, "returned status -9 (limit exceeded)")
		// Slot 1 of the same instance: a key one byte over the lowered limit.
		s2 := s.inst.Operator().(*slot)
		if err := s2.Open(testSpec(), svc); err != nil {
			t.Fatal(err)
		}
		err = s2.Process(batchOf(), &builderCollector{})
		checkNamed(t, err, abi.ExportProcess, ErrGuestFailed, "returned status -9 (limit exceeded)")
		if len(svc.values) != 0 {
			t.Errorf("%d values stored", len(svc.values))
		}
		if l := s.inst.Limits(); l.MaxStateValueBytes != 64<<10 || l.MaxStateKeyBytes != 4096 || l.MaxRecordsPerCall != DefaultMaxRecordsPerCall {
			t.Errorf("instance limits %+v", l)
		}
		heap.check(t, 16<<20)
		checkHealthy(t, r)
	})
}

func TestHostileTimerFlood(t *testing.T) {
	// register(domain 0, key, ns, ts 5000) with a new key or namespace each
	// time, for ever.
	flood := func(key, ns string) string {
		return `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $i i32)
    (loop $l
      (i32.store (i32.const 0) (local.get $i))
      (drop (call $timer_register (i32.const 0) ` + key + ` ` + ns + ` (i64.const 5000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))
    (i32.const 0))`
	}
	// The count quotas are off by default: the state backend keeps timers
	// in Pebble. Each registration is a state write of the call, which
	// bounds what one call can stage; set, the count quotas work as before.
	old := Limits{MaxTimersPerKey: 10_000, MaxTimersPerSubtask: 200_000, MaxTimerBytesPerSubtask: 16 << 20}
	// 4 MiB of state writes per call (the default is 32), so that the
	// test's fake backend stays quick.
	perCall := (4 << 20) / (4 + StateWriteOverhead)
	for _, tc := range []struct {
		name, key, ns string
		limits        Limits
		quota         string
		want          string
		pending       int
		booked        int
		bound         uint64
	}{
		{"by default", "(i32.const 0) (i32.const 4)", "(i32.const 0) (i32.const 0)", Limits{MaxStateBytesPerCall: 4 << 20}, "MaxStateBytesPerCall",
			fmt.Sprintf("wrote %d bytes of state in one call, over the quota of 4194304 bytes (4 MiB) of state writes per call (--max-state-bytes-per-call)", (perCall+1)*(4+StateWriteOverhead)),
			perCall, 0, 64 << 20},
		{"per key", "(i32.const 16) (i32.const 1)", "(i32.const 0) (i32.const 4)", old, "MaxTimersPerKey",
			"registered a timer that makes 10001 pending timers for one key, over the quota of 10000 pending timers per key (--max-timers-per-key)",
			10_000, 10_000, 32 << 20},
		{"per subtask", "(i32.const 0) (i32.const 4)", "(i32.const 0) (i32.const 0)", old, "MaxTimersPerSubtask",
			"registered a timer that makes 200001 pending timers in the subtask, over the quota of 200000 pending timers per subtask (--max-timers-per-subtask)",
			200_000, 200_000, 128 << 20},
		{"bytes per subtask", "(i32.const 0) (i32.const 4)", "(i32.const 0x10000) (i32.const 60000)", Limits{MaxTimerBytesPerSubtask: 16 << 20, MaxStateBytesPerCall: 64 << 20}, "MaxTimerBytesPerSubtask",
			"bytes of pending timer keys and namespaces in the subtask, over the quota of 16777216 bytes (16 MiB) of pending timer keys and namespaces per subtask (--max-timer-bytes-per-subtask)",
			(16 << 20) / 60004, (16 << 20) / 60004, 96 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRuntime(t, Config{})
			m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportProcess: flood(tc.key, tc.ns)}, ""))
			heap := watchHeap(t)
			svc := newLeanServices()
			inst, s := hostileOp(t, context.Background(), m, svc, WithLimits(tc.limits))
			err := s.Process(batchOf(rec(0, 1, "k", "v")), &builderCollector{})
			q := quotaOf(t, err)
			checkNamed(t, err, abi.ExportProcess, ErrQuotaExceeded, tc.want)
			if q.Quota != tc.quota || len(svc.timers) != tc.pending || len(inst.timers.pending) != tc.booked {
				t.Errorf("quota %s; %d timers registered, %d booked, want %d and %d", q.Quota, len(svc.timers), len(inst.timers.pending), tc.pending, tc.booked)
			}
			heap.check(t, tc.bound)
			checkHealthy(t, r)
		})
	}

	t.Run("fired and deleted timers leave the book", func(t *testing.T) {
		// Per call: register 8 timers of key "k", delete the first.
		r := newTestRuntime(t, Config{})
		m := compileWAT(t, r, moduleWAT(map[string]string{
			abi.ExportProcess: `(data (i32.const 16) "k")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $i i32)
    (loop $l
      (i32.store (i32.const 0) (local.get $i))
      (drop (call $timer_register (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 0) (i32.const 4) (i64.const 5000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 8))))
    (i32.store (i32.const 0) (i32.const 0))
    (call $timer_delete (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 0) (i32.const 4) (i64.const 5000)))`,
		}, ""))
		svc := newLeanServices()
		inst, s := hostileOp(t, context.Background(), m, svc, WithLimits(Limits{MaxTimersPerKey: 8}))
		for round := 0; round < 50; round++ {
			if err := s.Process(batchOf(), &builderCollector{}); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if len(inst.timers.pending) != 7 || len(svc.timers) != 7 {
				t.Fatalf("round %d: %d booked, %d registered", round, len(inst.timers.pending), len(svc.timers))
			}
			svc.wm = 5000
			if err := s.OnTimers(svc.popDue(abi.TimeEvent, 5000), &builderCollector{}); err != nil {
				t.Fatal(err)
			}
			if len(inst.timers.pending) != 0 || inst.timers.bytes != 0 || len(inst.timers.perKey) != 0 {
				t.Fatalf("round %d: %d timers, %d bytes, %d keys still booked after firing", round,
					len(inst.timers.pending), inst.timers.bytes, len(inst.timers.perKey))
			}
		}
	})
}

// recursionWAT recurses to the depth given as op, adding after each
// return so that the calls are not tail calls.
const recursionWAT = `(func $rec (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (i32.add (call $rec (i32.sub (local.get $n) (i32.const 1))) (i32.const 1)))))
  (func (export "wstream_process") (param $op i32) (param i32 i32) (result i32)
    (drop (call $rec (local.get $op))) (i32.const 0))`

func TestHostileDeepRecursion(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportProcess: recursionWAT}, ""))

	t.Run("unbounded", func(t *testing.T) {
		heap := watchHeap(t)
		inst, s := hostileOp(t, context.Background(), m, newLeanServices())
		s.index = -1 // as an i32 depth: 2^32-1, far past the ceiling
		err := s.Process(batchOf(), &builderCollector{})
		checkNamed(t, err, abi.ExportProcess, ErrStackOverflow, "stack overflow", "about 84 MB")
		// wazero's stack of at most ~84 MB, plus the buffers it grew
		// through (42, 21… MB: 168 MB in all if no collection runs between
		// the growths).
		heap.check(t, 224<<20)
		// The failed instance let go of its stack.
		runtime.GC()
		if grew := int64(heapObjects()) - int64(heap.base); grew > 16<<20 {
			t.Errorf("after the failure the heap is still %d MiB over the baseline", grew>>20)
		}
		runtime.KeepAlive(inst)
		checkUnusable(t, s)
		checkHealthy(t, r)
	})

	t.Run("deep but bounded", func(t *testing.T) {
		heap := watchHeap(t)
		inst, s := hostileOp(t, context.Background(), m, newLeanServices())
		s.index = 1_000_000 // some tens of MB of stack, under the ceiling
		if err := s.Process(batchOf(), &builderCollector{}); err != nil {
			t.Fatal(err)
		}
		heap.check(t, 192<<20)
		// The grown stack does not stay with the instance.
		if n := retainedStack(inst.fns[expProcess]); n > maxRetainedStack {
			t.Errorf("the instance keeps a %d-byte stack", n)
		}
		runtime.GC()
		if grew := int64(heapObjects()) - int64(heap.base); grew > 16<<20 {
			t.Errorf("after the call the heap is still %d MiB over the baseline", grew>>20)
		}
		s.index = 10
		if err := s.Process(batchOf(), &builderCollector{}); err != nil {
			t.Fatalf("the instance after a deep call: %v", err)
		}
	})
}

// TestRetainedStackProbe pins what retainedStack reads inside wazero: a
// renamed field in a new wazero version would silently turn the bound off.
func TestRetainedStackProbe(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, passWAT)
	inst := newInstance(t, m)
	if n := retainedStack(inst.fn(expProcess)); n < 4<<10 || n > maxRetainedStack {
		t.Errorf("retainedStack of a fresh handle = %d, want wazero's initial stack (10 KiB)", n)
	}
	if n := retainedStack(nil); n != 0 {
		t.Errorf("retainedStack(nil) = %d", n)
	}
	if a := testing.AllocsPerRun(100, func() { retainedStack(inst.fns[expProcess]) }); a != 0 {
		t.Errorf("retainedStack allocates %.0f times", a)
	}
}

func TestHostileLogFlood(t *testing.T) {
	// 200000 iterations of log("x") and a "y\n" on stdout.
	r0 := &logSink{}
	const lim = 500
	r := newTestRuntime(t, Config{Log: r0.log, Limits: Limits{LogLinesPerSecond: lim}})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		partImports: wasiWrite,
		abi.ExportProcess: `(data (i32.const 0) "x")
  (data (i32.const 16) "y\n")
  (data (i32.const 32) "\10\00\00\00\02\00\00\00")
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $i i32)
    (loop $l
      (call $log (i32.const 1) (i32.const 0) (i32.const 1))
      (drop (call $fd_write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 48)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 200000))))
    (i32.const 0))`,
	}, ""))
	heap := watchHeap(t)
	svc := newLeanServices()
	inst, s := hostileOp(t, context.Background(), m, svc)
	start := time.Now()
	if err := s.Process(batchOf(), &builderCollector{}); err != nil {
		t.Fatalf("a log flood is throttled, not failed: %v", err)
	}
	elapsed := time.Since(start)
	if err := inst.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	heap.check(t, 32<<20)
	lines, suppressed, notices := 0, 0, 0
	count := func(msg string) {
		if n, ok := strings.CutSuffix(msg, " guest log lines suppressed (over the limit of 500 lines per second, --guest-log-lines-per-second)"); ok {
			k, err := strconv.Atoi(n)
			if err != nil {
				t.Errorf("notice %q", msg)
			}
			suppressed += k
			notices++
			return
		}
		if msg != "x" && msg != "y" {
			t.Errorf("unexpected line %q", msg)
		}
		lines++
	}
	for _, l := range svc.logs {
		count(l)
	}
	for _, e := range r0.lines {
		count(e.msg)
	}
	windows := int(elapsed/time.Second) + 1
	t.Logf("%d lines written, %d suppressed, %d notices in %s", lines, suppressed, notices, elapsed)
	if lines > lim*windows || lines < lim {
		t.Errorf("%d lines written in %s, want %d..%d", lines, elapsed, lim, lim*windows)
	}
	if notices == 0 || notices > windows+1 || lines+suppressed != 400_000 {
		t.Errorf("%d notices for %d suppressed lines; %d+%d lines in all, want 400000", notices, suppressed, lines, suppressed)
	}
	checkHealthy(t, r)
}

// withFunctionName appends a "name" custom section that names function
// idx of the module wasm.
func withFunctionName(wasm []byte, idx uint32, name string) []byte {
	var names []byte
	names = binary.AppendUvarint(names, 1) // one name
	names = binary.AppendUvarint(names, uint64(idx))
	names = binary.AppendUvarint(names, uint64(len(name)))
	names = append(names, name...)
	var body []byte
	body = binary.AppendUvarint(body, 4)
	body = append(body, "name"...)
	body = append(body, 1) // function names
	body = binary.AppendUvarint(body, uint64(len(names)))
	body = append(body, names...)
	out := append(bytes.Clone(wasm), 0)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
}

func TestHostileTerminalEscapes(t *testing.T) {
	// Erase the line, fake a success line, set the terminal title, reverse
	// the text, and end on invalid UTF-8.
	const evil = "\x1b[2K\x1b[1G\rjob finished OK\n\x1b]0;pwned\x07\u202e\xff"
	const escaped = `\x1b[2K\x1b[1G\rjob finished OK\n\x1b]0;pwned\a\u202e` + "\uFFFD"
	// Written as lines, the text is split at its newline.
	const line1, line2 = `\x1b[2K\x1b[1G\rjob finished OK`, `\x1b]0;pwned\a\u202e` + "\uFFFD"
	data := func(at int, s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			fmt.Fprintf(&b, `\%02x`, s[i])
		}
		return fmt.Sprintf(`(data (i32.const %d) "%s")`, at, b.String())
	}
	n := strconv.Itoa(len(evil))
	// One iovec for fd_write: the text and a newline, at 256.
	iov := fmt.Sprintf(`(data (i32.const 512) "\00\01\00\00\%02x\00\00\00")`, len(evil)+1)
	logs := &logSink{}
	r := newTestRuntime(t, Config{Log: logs.log})
	src := moduleWAT(map[string]string{
		partImports: wasiWrite,
		abi.ExportProcess: data(0, evil) + data(256, evil+"\n") + iov + `
  (func (export "wstream_process") (param $op i32) (param i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const ` + n + `))
    (drop (call $fd_write (i32.const 1) (i32.const 512) (i32.const 1) (i32.const 520)))
    (drop (call $fd_write (i32.const 2) (i32.const 512) (i32.const 1) (i32.const 520)))
    (if (local.get $op) (then unreachable))
    (call $fail (i32.const 0) (i32.const ` + n + `))
    (i32.const -11))`,
	}, "")
	// A function name that drives the terminal is refused at deploy: wazero
	// prints names in stack traces.
	wasm := testmod.WAT(t, src)
	probe, err := r.Compile(context.Background(), "probe.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	idx := probe.c.cm.ExportedFunctions()[abi.ExportProcess].Index()
	_, err = r.Compile(context.Background(), "evil.wasm", withFunctionName(wasm, idx, strings.TrimSuffix(evil, "\xff")))
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(ve.Reason, fmt.Sprintf("gives function %d the name \"%s\"", idx, strings.TrimSuffix(escaped, "\uFFFD"))) {
		t.Errorf("a module with an escape sequence in a function name: %v", err)
	} else if strings.ContainsFunc(err.Error(), func(c rune) bool { return c < 0x20 || c == '\u202e' }) {
		t.Errorf("the validation error %q holds control characters", err)
	}
	m := probe
	t.Cleanup(func() { _ = m.Close(context.Background()) })

	heap := watchHeap(t)
	check := func(what, got, want string) {
		t.Helper()
		if !strings.Contains(got, want) {
			t.Errorf("%s %q lacks the escaped text %q", what, got, want)
		}
		for _, c := range got {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c == '\u202e' {
				t.Errorf("%s %q holds %U", what, got, c)
			}
		}
	}
	svc := newLeanServices()
	_, s := hostileOp(t, context.Background(), m, svc)
	err = s.Process(batchOf(), &builderCollector{})
	ge := checkNamed(t, err, abi.ExportProcess, ErrGuestFailed)
	if ge.Message != escaped {
		t.Errorf("fail message %q, want %q", ge.Message, escaped)
	}
	check("the error", err.Error(), escaped)
	if len(svc.logs) != 1 {
		t.Fatalf("log lines %q", svc.logs)
	}
	check("the log line", svc.logs[0], escaped)
	var stdout []string
	for _, e := range logs.lines {
		check("a stdout or stderr line", e.msg, "")
		stdout = append(stdout, e.msg)
	}
	if want := []string{line1, line2, line1, line2}; strings.Join(stdout, "|") != strings.Join(want, "|") {
		t.Errorf("stdout and stderr lines %q, want %q", stdout, want)
	}

	// Slot 1 traps: the error quotes stderr.
	_, s = hostileOp(t, context.Background(), m, svc)
	s1 := s.inst.Operator().(*slot)
	if err := s1.Open(testSpec(), svc); err != nil {
		t.Fatal(err)
	}
	err = s1.Process(batchOf(), &builderCollector{})
	checkNamed(t, err, abi.ExportProcess, nil, "unreachable", "wasm stack trace:\n\t", "stderr:\n"+line1+"\n"+line2)
	check("the trap", err.Error(), line2)
	heap.check(t, 16<<20)
	checkHealthy(t, r)
}
