package worker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// Deadlines of these tests: generous, since they only bound a failure;
// passing runs take a fraction of them even on a loaded two-core machine.
const (
	hostileDeadline = 60 * time.Second
	hostilePoll     = time.Millisecond
)

// hostileProcWAT keeps a processing-time timer due for ever: wstream_process
// registers one at the current processing time, and every on_timer
// registers the next at the then current time. Every 256th on_timer call
// emits a record with key "t", so a test can see the cascade running.
const hostileProcWAT = `(module
  (import "wstream" "emit" (func $emit (param i32 i64 i32 i32 i32 i32) (result i32)))
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 0) "kt")
  (global $fired (mut i32) (i32.const 0))
  (func (export "wstream_abi_version") (result i32) (i32.const 1))
  (func (export "wstream_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (drop (call $timer_register (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (call $processing_time)))
    (call $emit_batch (local.get $p) (local.get $n)))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32)
    (global.set $fired (i32.add (global.get $fired) (i32.const 1)))
    (if (i32.eqz (i32.and (global.get $fired) (i32.const 255)))
      (then (drop (call $emit (i32.const 0) (i64.const 0) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0)))))
    (call $timer_register (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (call $processing_time)))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`

// hostileEventWAT registers an event-time timer at 10 per batch, and every
// on_timer registers one at the next timestamp: once the watermark jumps to
// the end of time, each firing leaves another due timer. Every 64th firing
// emits a record with key "t" and a 4 KiB value, so that the output of a
// long cascade reaches the send threshold and a test can see it running.
const hostileEventWAT = `(module
  (import "wstream" "emit" (func $emit (param i32 i64 i32 i32 i32 i32) (result i32)))
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "kt")
  (global $i (mut i64) (i64.const 0))
  (func (export "wstream_abi_version") (result i32) (i32.const 1))
  (func (export "wstream_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param $op i32) (param $p i32) (param $n i32) (result i32)
    (drop (call $timer_register (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (i64.const 10)))
    (call $emit_batch (local.get $p) (local.get $n)))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32)
    (global.set $i (i64.add (global.get $i) (i64.const 1)))
    (if (i64.eqz (i64.and (global.get $i) (i64.const 63)))
      (then (drop (call $emit (i32.const 0) (i64.const 0) (i32.const 1) (i32.const 1) (i32.const 1024) (i32.const 4096)))))
    (call $timer_register (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (i64.add (i64.const 10) (global.get $i))))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`

// hostileRig is a one-stage keyed subtask running a guest in the real host
// runtime and state store, fed by a local input channel and forwarding to a
// local output channel.
type hostileRig struct {
	tk      *task
	in      *transport.LocalChannel
	out     *transport.LocalChannel
	outWake chan struct{}
	ctx     context.Context // the job's: the instance and the loop run under it
	cancel  context.CancelFunc
}

// hostileCacheEntries is the write-back cache size of the rig's store:
// small, so that a long cascade would overflow it if the loop did not
// write state between rounds.
const hostileCacheEntries = 64

func newHostileRig(t *testing.T, wat string, lim host.Limits) *hostileRig {
	t.Helper()
	bg := context.Background()
	m := compileModule(t, "hostile.wasm", testmod.WAT(t, wat))
	g := &hostileRig{in: transport.NewLocalChannel(16), out: transport.NewLocalChannel(1 << 16), outWake: make(chan struct{}, 1)}
	g.out.Notify(g.outWake)
	g.ctx, g.cancel = context.WithCancel(bg)
	t.Cleanup(g.cancel)
	inst, err := m.NewInstance(g.ctx, "v/0", host.WithLimits(lim))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(bg) })
	store, err := state.Open(state.Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: 127},
		CacheEntries: hostileCacheEntries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	tk := &task{label: "v/0", now: time.Now, store: store, gate: transport.NewInputGate([]transport.InputChannel{g.in})}
	st := &stage{vertex: &job.Vertex{ID: "v", Operator: "op"}, op: inst.Operator(), state: store.Vertex("v", true),
		coll: stageCollector{nOut: 1, keep: -1}}
	tk.stages = []*stage{st}
	tk.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
		chans: []transport.OutputChannel{g.out}, bufs: make([]abi.Builder, 1), maxPar: 128}}
	svc := &stageServices{keyedState: st.state, t: tk, log: func(int32, string) {}}
	if err := st.op.Open(operator.Spec{VertexID: "v", Operator: "op", Keyed: true, MaxParallelism: 128}, svc); err != nil {
		t.Fatal(err)
	}
	g.tk = tk
	return g
}

// start runs the subtask's input loop. The test's cleanup cancels it and
// waits for it to return, so it never outlives the store or the runtime.
func (g *hostileRig) start(t *testing.T) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		done <- g.tk.runGate(g.ctx)
	}()
	t.Cleanup(func() {
		g.cancel()
		select {
		case <-exited:
		case <-time.After(hostileDeadline):
			t.Errorf("the subtask loop did not return within %s of cancellation", hostileDeadline)
		}
	})
	return done
}

// send queues one record with key "k" on the input.
func (g *hostileRig) send(t *testing.T, ts int64) {
	t.Helper()
	var b abi.Builder
	b.Add(0, ts, []byte("k"), []byte("v"))
	ctx, cancel := context.WithTimeout(g.ctx, hostileDeadline)
	defer cancel()
	if err := g.in.Send(ctx, transport.Message{Kind: transport.KindData, Data: append([]byte(nil), b.Bytes()...)}); err != nil {
		t.Fatalf("sending input: %v", err)
	}
}

// endInput queues the end of the input.
func (g *hostileRig) endInput(t *testing.T) {
	t.Helper()
	if err := g.in.Send(g.ctx, transport.Message{Kind: transport.KindEnd}); err != nil {
		t.Fatal(err)
	}
}

// outCounts is what the output channel carried: records by key ("?" for
// an undecodable batch), and the kinds of messages.
type outCounts struct {
	keys  map[string]int
	kinds map[transport.Kind]int
}

func (c *outCounts) add(m transport.Message) {
	c.kinds[m.Kind]++
	if m.Kind != transport.KindData {
		return
	}
	recs, err := abi.Decode(m.Data)
	if err != nil {
		c.keys["?"]++
		return
	}
	for _, r := range recs {
		c.keys[string(r.Key)]++
	}
}

// drained reads what the output holds now.
func (g *hostileRig) drained() outCounts {
	c := outCounts{keys: map[string]int{}, kinds: map[transport.Kind]int{}}
	for {
		m, ok := g.out.TryRecv()
		if !ok {
			return c
		}
		c.add(m)
	}
}

// result waits for the loop's error.
func result(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(hostileDeadline):
		t.Fatalf("%s: the subtask loop still runs after %s", what, hostileDeadline)
		return nil
	}
}

// checkCascadeQuota checks err is the MaxCascadedTimers quota of limit,
// reported against the operator.
func checkCascadeQuota(t *testing.T, err error, limit int) {
	t.Helper()
	var qe *host.QuotaError
	if !errors.Is(err, host.ErrQuotaExceeded) || !errors.As(err, &qe) {
		t.Fatalf("got %v, want the cascade quota", err)
	}
	if qe.Quota != "MaxCascadedTimers" || qe.Limit != limit {
		t.Errorf("quota %s of %d, want MaxCascadedTimers of %d", qe.Quota, qe.Limit, limit)
	}
	if w := `operator "op" (vertex v, subtask 0) failed on a timer`; !strings.Contains(err.Error(), w) {
		t.Errorf("%q does not say %q", err, w)
	}
}

// TestCascadeQuotaProcessingTime: a guest that keeps a processing-time
// timer due for ever fails with the cascade quota instead of spinning, and
// the input it was given before still went downstream.
func TestCascadeQuotaProcessingTime(t *testing.T) {
	const limit = 5000
	g := newHostileRig(t, hostileProcWAT, host.Limits{MaxCascadedTimers: limit})
	g.send(t, 1)
	err := result(t, g.start(t), "cascade under a quota")
	checkCascadeQuota(t, err, limit)
	out := g.drained()
	if out.keys["k"] != 1 || out.keys["?"] != 0 {
		t.Errorf("downstream got %v records, want the input record", out.keys)
	}
	// Firings 256, 512, … emit; the one over the quota traps first.
	if n := out.keys["t"]; n > limit/256 {
		t.Errorf("%d timer records downstream from %d firings", n, limit)
	}
}

// TestCascadeQuotaEventTimeAtEnd: at the end of input the watermark jumps
// to the end of time, where a guest that registers a due event-time timer
// in every on_timer would keep the final advance going for ever; the quota
// ends it, the end never goes downstream as if the subtask had finished,
// and the state written meanwhile went to the store round by round.
func TestCascadeQuotaEventTimeAtEnd(t *testing.T) {
	const limit = 20_000
	g := newHostileRig(t, hostileEventWAT, host.Limits{MaxCascadedTimers: limit})
	g.send(t, 1)
	g.endInput(t)
	err := result(t, g.start(t), "event-time cascade at the end")
	checkCascadeQuota(t, err, limit)
	out := g.drained()
	if out.keys["k"] != 1 || out.keys["?"] != 0 || out.kinds[transport.KindEnd] != 0 || out.kinds[transport.KindWatermark] != 0 {
		t.Errorf("downstream got %v records and %v messages, want the record and no watermark or end", out.keys, out.kinds)
	}
	t.Logf("%d state changes pending, %d timer records downstream", g.tk.store.Pending(), out.keys["t"])
	if p := g.tk.store.Pending(); p > 2*hostileCacheEntries {
		t.Errorf("%d state changes pending after %d rounds: the loop did not write state between rounds", p, limit)
	}
}

// hostileReader reads the rig's output as it comes, as a downstream
// subtask would: a cascade with the quota lifted emits without end.
type hostileReader struct {
	inputs, ticks, ends atomic.Int64 // records with key "k", with key "t"; end messages
}

// read starts reading the output until the test ends.
func (g *hostileRig) read(t *testing.T) *hostileReader {
	r := &hostileReader{}
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		c := outCounts{keys: map[string]int{}, kinds: map[transport.Kind]int{}}
		for {
			m, ok := g.out.TryRecv()
			if !ok {
				select {
				case <-g.outWake:
					continue
				case <-stop:
					return
				}
			}
			c.add(m)
			r.inputs.Store(int64(c.keys["k"]))
			r.ticks.Store(int64(c.keys["t"]))
			r.ends.Store(int64(c.kinds[transport.KindEnd]))
		}
	}()
	t.Cleanup(func() { close(stop); <-exited })
	return r
}

// waitFor polls cond until it holds; the loop returning first, or the
// deadline passing, fails the test.
func (r *hostileReader) waitFor(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hostileDeadline)
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("%s: the subtask loop returned %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%d input and %d timer records downstream)",
				what, hostileDeadline, r.inputs.Load(), r.ticks.Load())
		}
		time.Sleep(hostilePoll)
	}
}

// checkCanceled checks that cancelling the job stops the loop with
// cancellation, not a quota error.
func (g *hostileRig) checkCanceled(t *testing.T, done <-chan error, what string) {
	t.Helper()
	at := time.Now()
	g.cancel()
	err := result(t, done, what)
	t.Logf("%s: stopped %s after the cancellation", what, time.Since(at))
	if !errors.Is(err, context.Canceled) || errors.Is(err, host.ErrQuotaExceeded) {
		t.Fatalf("%s: got %v, want cancellation", what, err)
	}
}

// TestCascadeUnlimitedCancel: with the cascade quota lifted, a processing-
// time cascade runs for ever, yet input keeps flowing through between its
// rounds, and cancelling the job stops the subtask promptly with
// cancellation, not a quota error.
func TestCascadeUnlimitedCancel(t *testing.T) {
	g := newHostileRig(t, hostileProcWAT, host.Limits{MaxCascadedTimers: -1})
	done := g.start(t)
	r := g.read(t)

	g.send(t, 1)
	r.waitFor(t, done, "the first record downstream", func() bool { return r.inputs.Load() == 1 })
	r.waitFor(t, done, "the cascade running", func() bool { return r.ticks.Load() >= 2 })
	// Each record goes through while timers are due, and the timers keep
	// firing after it.
	const records = 20
	for i := 2; i <= records; i++ {
		before := r.ticks.Load()
		g.send(t, int64(i))
		r.waitFor(t, done, "an input record while timers are due", func() bool { return r.inputs.Load() == int64(i) })
		r.waitFor(t, done, "the cascade going on after the record", func() bool { return r.ticks.Load() > before })
	}
	g.checkCanceled(t, done, "processing-time cascade")
	t.Logf("%d timer records downstream", r.ticks.Load())
}

// TestCascadeUnlimitedAtEndCancel: the end-of-input event-time cascade
// with the quota lifted stops on cancellation too (the timer loop checks
// the context between rounds), without sending the end downstream.
func TestCascadeUnlimitedAtEndCancel(t *testing.T) {
	g := newHostileRig(t, hostileEventWAT, host.Limits{MaxCascadedTimers: -1})
	g.send(t, 1)
	g.endInput(t)
	done := g.start(t)
	r := g.read(t)
	r.waitFor(t, done, "the record downstream", func() bool { return r.inputs.Load() == 1 })
	// 64 timer records are 4096 firings of the final advance.
	r.waitFor(t, done, "the cascade running", func() bool { return r.ticks.Load() >= 64 })
	g.checkCanceled(t, done, "event-time cascade at the end")
	if r.ends.Load() != 0 {
		t.Error("the end went downstream from a cancelled subtask")
	}
}
