package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/operator"
)

// FairOperator runs an operator's calls through a fair-share gate: every
// method that may enter the guest holds a slot of the gate for the
// operator's tenant while it runs, so that one tenant's guests cannot take
// more than its share of the worker's cores (package fairshare). Every
// method of operator.Operator is gated: on a wasm operator each one calls
// an export (the checkpoint hooks only when the module has them, which the
// wrapper cannot tell).
//
// The wrapper registers the tenant with the gate (Join) when it is made
// and leaves once ctx is done or Leave is called, so the tenant's share is
// reserved from deployment to the end of the job on this worker. A call
// waiting for a slot gives up when ctx is done, with an error that wraps
// ctx's (context.Canceled for a cancelled job).
type FairOperator struct {
	op     operator.Operator
	gate   *fairshare.Gate
	ctx    context.Context
	tenant string
	leave  sync.Once
	mu     sync.Mutex
	stop   func() bool // unregisters the leave at ctx's end
	// turn, when set and started, is the subtask's hold on the slot: a
	// call takes the slot through it and leaves it held (see fairTurn).
	turn *fairTurn
}

var _ operator.Operator = (*FairOperator)(nil)

// NewFairOperator wraps op for tenant, setting the tenant's weight on the
// gate when weight > 0 (a tenant has one weight: the latest set wins;
// values beyond fairshare's bounds are clamped to them). With a nil gate,
// calls pass straight through.
func NewFairOperator(ctx context.Context, g *fairshare.Gate, tenant string, weight float64, op operator.Operator) *FairOperator {
	f := &FairOperator{op: op, gate: g, ctx: ctx, tenant: tenant}
	if g != nil {
		if weight > 0 {
			// In bounds, SetWeight cannot fail.
			_ = g.SetWeight(tenant, min(max(weight, fairshare.MinWeight), fairshare.MaxWeight))
		}
		g.Join(tenant)
		// Under mu: ctx may be done already, and Leave, running at once,
		// must find stop set.
		f.mu.Lock()
		f.stop = context.AfterFunc(ctx, f.Leave)
		f.mu.Unlock()
	}
	return f
}

// Leave ends the wrapper's registration with the gate (once; ctx's end
// does it too). Calls made afterwards are still gated.
func (f *FairOperator) Leave() {
	if f.gate == nil {
		return
	}
	f.leave.Do(func() {
		f.mu.Lock()
		stop := f.stop
		f.mu.Unlock()
		// A wrapper left before its job ends (an operator closed early)
		// does not keep a callback on the job's context.
		stop()
		f.gate.Leave(f.tenant)
	})
}

// Unwrap returns the wrapped operator.
func (f *FairOperator) Unwrap() operator.Operator { return f.op }

// noRelease is the release of a call that runs in its subtask's turn: the
// turn gives the slot back.
func noRelease() {}

// acquire waits for a slot; the release function is never nil on success.
func (f *FairOperator) acquire(call string) (func(), error) {
	if f.gate == nil {
		return noRelease, nil
	}
	if f.turn.started() {
		if err := f.turn.hold(call); err != nil {
			return nil, err
		}
		return noRelease, nil
	}
	rel, err := f.gate.Acquire(f.ctx, f.tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: waiting for a guest call slot for %s: %w", f.tenant, call, err)
	}
	return rel, nil
}

// Open calls the wrapped operator's Open holding a slot.
func (f *FairOperator) Open(spec operator.Spec, svc operator.Services) error {
	rel, err := f.acquire("open")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.Open(spec, svc)
}

// Process calls the wrapped operator's Process holding a slot.
func (f *FairOperator) Process(batch []byte, out operator.Collector) error {
	rel, err := f.acquire("process")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.Process(batch, out)
}

// OnTimers calls the wrapped operator's OnTimers holding a slot.
func (f *FairOperator) OnTimers(timers []byte, out operator.Collector) error {
	rel, err := f.acquire("on_timer")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.OnTimers(timers, out)
}

// PreBarrier calls the wrapped operator's PreBarrier holding a slot.
func (f *FairOperator) PreBarrier(checkpoint int64, out operator.Collector) error {
	rel, err := f.acquire("pre_barrier")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.PreBarrier(checkpoint, out)
}

// CheckpointComplete calls the wrapped operator's CheckpointComplete holding a slot.
func (f *FairOperator) CheckpointComplete(checkpoint int64) error {
	rel, err := f.acquire("checkpoint_complete")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.CheckpointComplete(checkpoint)
}

// CheckpointAborted calls the wrapped operator's CheckpointAborted holding a slot.
func (f *FairOperator) CheckpointAborted(checkpoint int64) error {
	rel, err := f.acquire("checkpoint_aborted")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.CheckpointAborted(checkpoint)
}

// Close calls the wrapped operator's Close holding a slot.
func (f *FairOperator) Close(out operator.Collector) error {
	rel, err := f.acquire("close")
	if err != nil {
		return err
	}
	defer rel()
	return f.op.Close(out)
}

// NewFairInstance instantiates mod holding a slot of g for tenant:
// instantiation runs the guest's start function (_initialize), guest code
// like any call, and a job that fails and restarts in a loop instantiates
// again each time. With a nil gate it is mod.NewInstance.
func NewFairInstance(ctx context.Context, g *fairshare.Gate, tenant string, mod *host.Module, label string, opts ...host.InstanceOption) (*host.Instance, error) {
	if g == nil {
		return mod.NewInstance(ctx, label, opts...)
	}
	rel, err := g.Acquire(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: waiting for a guest call slot to instantiate %s: %w", tenant, label, err)
	}
	defer rel()
	return mod.NewInstance(ctx, label, opts...)
}

// fairTurn charges a subtask's host work to its tenant's share: the work
// that a guest call causes but that runs outside the call (routing and
// copying its output, handing it to the sink, writing its state to Pebble,
// firing its timers) costs the worker's cores as much as the call, and a
// tenant whose guest floods output would otherwise take far more than its
// share through it. While the subtask's loop runs (start to stop), it
// holds a slot of the gate for its tenant from the moment it takes up an
// input message (or the first guest call, which then runs under it) until
// it next has to wait: for input, for room in a full output channel, for a
// control message. So a slot is never held while its subtask waits on
// another subtask (which may need the same tenant's slot: with one slot,
// that would deadlock), and every other blocking point lies outside a turn
// too. A turn is bounded by one input message's processing, so a barrier
// or a control message waits for the slot at most that long behind the
// tenant's other subtasks.
//
// Only the subtask's goroutine uses a started turn; a nil *fairTurn is a
// subtask outside any tenant, and does nothing.
type fairTurn struct {
	gate   *fairshare.Gate
	ctx    context.Context
	tenant string
	on     atomic.Bool
	rel    func() // the slot, when held
	// writes, when set, paces the tenant's state writes on this worker:
	// before a turn, the subtask pays for the bytes its store committed
	// since the last (written), waiting without the slot while the
	// tenant is over its rate.
	writes  *fairshare.Rate
	written func() int64
	charged int64
	// paced is the time the subtask waited so (nanoseconds; metrics read
	// it from other goroutines).
	paced atomic.Int64
}

func newFairTurn(ctx context.Context, g *fairshare.Gate, tenant string) *fairTurn {
	return &fairTurn{gate: g, ctx: ctx, tenant: tenant}
}

// start makes the subtask's work take the slot in turns; guest calls made
// before (opening, restoring) take a slot each.
func (f *fairTurn) start() {
	if f != nil {
		if f.written != nil {
			// What the store wrote before (restoring) is not the
			// tenant's writing.
			f.charged = f.written()
		}
		f.on.Store(true)
	}
}

// pace sets the rate that paces the writes of the subtask's store.
func (f *fairTurn) pace(r *fairshare.Rate, written func() int64) {
	if f != nil {
		f.writes, f.written = r, written
	}
}

// stop gives the slot back and ends the turns.
func (f *fairTurn) stop() {
	if f != nil {
		f.yield()
		f.on.Store(false)
	}
}

func (f *fairTurn) started() bool { return f != nil && f.on.Load() }

// hold waits for the slot unless the subtask holds it already. It fails
// with an error wrapping ctx's when the job ends first.
func (f *fairTurn) hold(what string) error {
	if f == nil || f.rel != nil || !f.on.Load() {
		return nil
	}
	if err := f.pay(what); err != nil {
		return err
	}
	rel, err := f.gate.Acquire(f.ctx, f.tenant)
	if err != nil {
		return fmt.Errorf("tenant %q: waiting for a slot for %s: %w", f.tenant, what, err)
	}
	f.rel = rel
	return nil
}

// pay charges the tenant's write rate with what the subtask's store
// committed since the last turn and waits, holding no slot, for as long as
// the rate says. Between turns, not inside them: a guest call is never
// held up by it, and every other subtask of every tenant goes on.
func (f *fairTurn) pay(what string) error {
	if f.writes == nil {
		return nil
	}
	w := f.written()
	d := f.writes.Charge(w - f.charged)
	f.charged = w
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		f.paced.Add(int64(d))
		return nil
	case <-f.ctx.Done():
		return fmt.Errorf("tenant %q: waiting under the state write rate for %s: %w", f.tenant, what, f.ctx.Err())
	}
}

// pacedFor is the time the subtask has waited under the state write rate.
func (f *fairTurn) pacedFor() time.Duration {
	if f == nil {
		return 0
	}
	return time.Duration(f.paced.Load())
}

// yield gives the slot back, if held, before the subtask waits.
func (f *fairTurn) yield() {
	if f != nil && f.rel != nil {
		rel := f.rel
		f.rel = nil
		rel()
	}
}
