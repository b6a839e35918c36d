package fairshare

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config configures a Gate.
type Config struct {
	// Slots is how many guest calls may run at once; when ≤ 0, one per
	// core the process may use (runtime.GOMAXPROCS, followed as it
	// changes), so that running calls never queue for a core behind each
	// other.
	Slots int
	// Now is a monotonic clock; nil measures from the Gate's creation with
	// time.Since. Tests pass a fake one.
	Now func() time.Duration
}

// Gate admits guest calls to a worker's cores by tenant (see the package
// documentation for the policy). It is safe for concurrent use.
type Gate struct {
	mu   sync.Mutex
	c    *core
	now  func() time.Duration
	auto bool // slots follow GOMAXPROCS
	// spare is how many of the process's Ps the gate leaves to work that
	// holds no slot (KeepHostP).
	spare int
}

// New returns a gate.
func New(cfg Config) *Gate {
	slots, auto := cfg.Slots, cfg.Slots <= 0
	if auto {
		slots = runtime.GOMAXPROCS(0)
	}
	now := cfg.Now
	if now == nil {
		epoch := time.Now()
		now = func() time.Duration { return time.Since(epoch) }
	}
	return &Gate{c: newCore(slots), now: now, auto: auto}
}

// follow adjusts the slots to GOMAXPROCS, which the Go runtime may change
// while the process runs (as a container's CPU limit changes). More slots
// go to waiting calls at once; fewer take effect as calls return. g.mu is
// held.
func (g *Gate) follow() {
	if !g.auto {
		return
	}
	if n := max(runtime.GOMAXPROCS(0)-g.spare, 1); n != g.c.slots {
		g.c.slots = n
		g.wake(g.c.dispatch(g.now()))
	}
}

var (
	defaultOnce sync.Once
	defaultGate *Gate
)

// Default is the process's gate, with one slot per core: workers that run
// in one process share its cores, so they should share one gate.
func Default() *Gate {
	defaultOnce.Do(func() { defaultGate = New(Config{}) })
	return defaultGate
}

// KeepHostP gives the Go runtime one P more than the gate has slots, so
// that work holding no slot always has a P that guest calls cannot take.
//
// Compiled guest code is not preemptible by the Go scheduler: a call keeps
// its P until it next calls into Go (an instrumented module does so every
// few milliseconds of work, which lets the scheduler preempt it, but it is
// runnable again at once). With one P per slot, a tenant whose calls spin
// keeps its Ps nearly all the time, and whatever holds no slot — the other
// tenants' sources, sends into channels, the garbage collector, the NATS
// client and server, the coordinator — queues on the Ps left to the other
// tenants, beside their slot holders: a spinning tenant then takes more
// than its share of the cores. With a P to spare, the operating system
// divides the cores among the threads, and the spinning calls get their
// threads' share, not a P each to themselves.
//
// It applies to a gate whose slots follow GOMAXPROCS, once, and only when
// the GOMAXPROCS environment variable is unset (whoever set it has chosen
// the process's Ps); it reports whether it raised GOMAXPROCS. A worker calls
// it when it first runs a tenant's job: a process that serves one user
// keeps one P per core.
func (g *Gate) KeepHostP() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.auto || g.spare > 0 || os.Getenv("GOMAXPROCS") != "" {
		return false
	}
	g.spare = 1
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	g.follow()
	return true
}

// Slots returns how many calls may run at once.
func (g *Gate) Slots() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.follow()
	return g.c.slots
}

// SetWeight sets a tenant's weight (DefaultWeight until set), within
// [MinWeight, MaxWeight]. A tenant's share of the slots is its weight over
// the weight of the active tenants.
func (g *Gate) SetWeight(tenant string, w float64) error {
	if math.IsNaN(w) || w < MinWeight || w > MaxWeight {
		return fmt.Errorf("fairshare: weight %g of tenant %q must be within [%g, %g]", w, tenant, float64(MinWeight), float64(MaxWeight))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.c.setWeight(tenant, w)
	g.wake(g.c.dispatch(g.now()))
	return nil
}

// Join registers a user of tenant (an operator instance, a subtask): the
// tenant counts for the division of slots, whether it is calling or not,
// until every user has left. Registering before the first call is what
// keeps another tenant that is alone on the worker from taking every slot
// just before this one starts.
func (g *Gate) Join(tenant string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.c.join(tenant)
}

// Leave ends one Join of tenant; it reports false, and does nothing, when
// the tenant has no registered user.
func (g *Gate) Leave(tenant string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.c.leave(tenant) {
		return false
	}
	// The others' shares may have grown.
	g.wake(g.c.dispatch(g.now()))
	return true
}

// Forget drops a tenant's weight and statistics; it reports false, and
// does nothing, while the tenant has users or calls.
func (g *Gate) Forget(tenant string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.c.forget(tenant)
}

// Acquire waits for a slot for a call of tenant and returns the function
// that gives it back, to be called once the call has returned (calling it
// again does nothing). It fails with ctx's error when ctx is done before a
// slot is granted.
func (g *Gate) Acquire(ctx context.Context, tenant string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.follow()
	w, granted := g.c.acquire(tenant, g.now())
	g.wake(granted)
	if w.granted {
		g.mu.Unlock()
		return g.releaser(w), nil
	}
	w.ready = make(chan struct{})
	g.mu.Unlock()
	select {
	case <-w.ready:
		return g.releaser(w), nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.c.cancel(w, now) {
		// Granted while ctx was ending: the caller will not run the call,
		// so the slot goes straight to the next one.
		g.c.release(w, now)
		g.wake(g.c.dispatch(now))
	}
	return nil, ctx.Err()
}

func (g *Gate) releaser(w *waiter) func() {
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.follow()
		now := g.now()
		if g.c.release(w, now) {
			g.wake(g.c.dispatch(now))
		}
	}
}

// wake lets the granted calls that are blocked in Acquire go on. A call
// granted within its own Acquire has no channel yet and needs no wake-up.
func (g *Gate) wake(granted []*waiter) {
	for _, w := range granted {
		if w.ready != nil {
			close(w.ready)
		}
	}
}

// Stats is a snapshot of a gate.
type Stats struct {
	Slots   int
	Running int           // calls holding a slot
	Tenants []TenantStats // by name
}

// TenantStats is one tenant's share and usage. Counts and durations are
// cumulative since the tenant was first seen.
type TenantStats struct {
	Tenant string
	Weight float64
	Users  int  // registered users (Join minus Leave)
	Active bool // counts for the division of slots
	// Guaranteed and Most are the slots the tenant is guaranteed and the
	// most it may hold under the current division.
	Guaranteed, Most int
	Running          int // calls holding a slot now
	Waiting          int // calls queued now
	Calls            uint64
	Waits            uint64 // calls that queued before running
	Canceled         uint64 // calls that gave up waiting
	// Busy is the time the tenant's calls have held slots, those in
	// progress up to now: the core time its guests took, and the host
	// work done for it under its slots (package worker holds a slot for a
	// subtask's work around its calls), as far as the gate can tell.
	Busy time.Duration
	// Waited is the time calls spent queued; MaxWait the longest wait.
	Waited, MaxWait time.Duration
	// VirtualTime is the weighted time that orders waiting calls (ns of
	// call time per unit of weight, calls in progress included).
	VirtualTime float64
}

// Stats returns a snapshot of the gate.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.follow()
	now := g.now()
	c := g.c
	s := c.shares()
	st := Stats{Slots: c.slots, Running: c.running, Tenants: make([]TenantStats, 0, len(c.tenants))}
	for _, t := range c.tenants {
		ts := TenantStats{
			Tenant: t.name, Weight: t.weight, Users: t.users, Active: t.active(),
			Running: t.held, Waiting: len(t.queue),
			Calls: t.stats.calls, Waits: t.stats.waits, Canceled: t.stats.canceled,
			Busy:   t.stats.busy + time.Duration(float64(t.held)*float64(now)-t.runStart),
			Waited: t.stats.waited, MaxWait: t.stats.maxWait,
			VirtualTime: t.v(now),
		}
		if ts.Active {
			ts.Guaranteed, ts.Most = s.limits(t)
		}
		st.Tenants = append(st.Tenants, ts)
	}
	slices.SortFunc(st.Tenants, func(a, b TenantStats) int { return strings.Compare(a.Tenant, b.Tenant) })
	return st
}

// Tenant returns one tenant's statistics, and false when the gate has never
// seen it.
func (g *Gate) Tenant(name string) (TenantStats, bool) {
	for _, t := range g.Stats().Tenants {
		if t.Tenant == name {
			return t, true
		}
	}
	return TenantStats{}, false
}
