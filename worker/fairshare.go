package worker

import (
	"context"
	"fmt"
	"sync"

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

// acquire waits for a slot; the release function is never nil on success.
func (f *FairOperator) acquire(call string) (func(), error) {
	if f.gate == nil {
		return func() {}, nil
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
