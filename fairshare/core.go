package fairshare

import (
	"math"
	"time"
)

// core is the gate's decision logic: who may hold a slot, and which waiting
// call gets the next one. It reads no clock, starts no goroutines and
// blocks on nothing: every method takes the time as an argument, so tests
// can drive it step by step. It is not safe for concurrent use; Gate
// serializes it.
type core struct {
	slots   int
	running int // slots held, over all tenants
	tenants map[string]*tenant
	seq     uint64    // arrival order of waiters
	granted []*waiter // dispatch's result, reused
}

// tenant is one tenant's share and usage.
type tenant struct {
	name   string
	weight float64
	users  int // Join minus Leave
	held   int // slots held now
	queue  []*waiter
	// vtime is the tenant's virtual time: the duration of its finished
	// calls, each divided by the tenant's weight at its end, in ns, raised
	// when it returns from idle (see acquire).
	vtime float64
	// runStart is the sum of the start times (ns) of the calls held now,
	// so the time they have run so far is held*now - runStart.
	runStart float64
	stats    counters
}

// counters are a tenant's cumulative statistics.
type counters struct {
	calls    uint64        // slots granted
	waits    uint64        // calls that queued before their grant
	canceled uint64        // calls that gave up waiting
	busy     time.Duration // time slots were held, over finished calls
	waited   time.Duration // time calls spent queued, granted or not
	maxWait  time.Duration
}

// waiter is one call asking for a slot, from Acquire to release.
type waiter struct {
	t       *tenant
	seq     uint64
	arrived time.Duration
	start   time.Duration // when the slot was granted
	granted bool
	queued  bool // it was not granted at once
	done    bool // released, or given up
	// ready is Gate's: closed when a call that had to wait is granted.
	ready chan struct{}
}

// Weight bounds: outside them, weighted shares lose their meaning in
// floating point.
const (
	MinWeight     = 1e-6
	MaxWeight     = 1e6
	DefaultWeight = 1.0
)

// eps absorbs rounding when slots*weight/total lands next to an integer.
const eps = 1e-9

func newCore(slots int) *core {
	return &core{slots: slots, tenants: map[string]*tenant{}}
}

func (c *core) tenant(name string) *tenant {
	t := c.tenants[name]
	if t == nil {
		t = &tenant{name: name, weight: DefaultWeight}
		c.tenants[name] = t
	}
	return t
}

// active reports whether t counts for the division of slots: it has
// registered users or calls held or waiting.
func (t *tenant) active() bool { return t.users > 0 || t.held > 0 || len(t.queue) > 0 }

// busy reports whether t has calls held or waiting.
func (t *tenant) busy() bool { return t.held > 0 || len(t.queue) > 0 }

// v is t's virtual time at now, counting the calls it holds as charged up
// to now: a tenant inside one long call falls behind the others in the
// order while the call runs, not only once it ends.
func (t *tenant) v(now time.Duration) float64 {
	if t.held == 0 {
		return t.vtime
	}
	return t.vtime + (float64(t.held)*float64(now)-t.runStart)/t.weight
}

// shares are the division of slots among the active tenants at one
// moment.
type shares struct {
	slots   int
	nActive int
	total   float64 // weight of the active tenants
	spare   int     // slots beyond the sum of the guaranteed ones
	extra   int     // slots held beyond their tenants' guaranteed ones
}

// limits returns the slots t is guaranteed (base) and the most it may hold
// (most). With one active tenant both are every slot. With more, base is
// its weighted share rounded down and most rounded up, both at least 1, so
// that every active tenant can always run a call.
func (s *shares) limits(t *tenant) (base, most int) {
	if s.nActive <= 1 {
		return s.slots, s.slots
	}
	share := float64(s.slots) * t.weight / s.total
	base = int(math.Floor(share + eps))
	most = int(math.Ceil(share - eps))
	base = min(max(base, 1), s.slots)
	most = min(max(most, base), s.slots)
	return base, most
}

// eligible reports whether t may take a free slot now: below its
// guaranteed share, or below its rounded-up share while spare slots remain.
func (s *shares) eligible(t *tenant) bool {
	base, most := s.limits(t)
	return t.held < base || (t.held < most && s.extra < s.spare)
}

func (c *core) shares() shares {
	s := shares{slots: c.slots}
	for _, t := range c.tenants {
		if t.active() {
			s.nActive++
			s.total += t.weight
		}
	}
	sumBase := 0
	for _, t := range c.tenants {
		if !t.active() {
			continue
		}
		base, _ := s.limits(t)
		sumBase += base
		s.extra += max(0, t.held-base)
	}
	s.spare = max(0, c.slots-sumBase)
	return s
}

// join registers a user of tenant name: the tenant counts for the division
// of slots until every user has left.
func (c *core) join(name string) { c.tenant(name).users++ }

// leave ends one registration; it reports false when there was none.
func (c *core) leave(name string) bool {
	t := c.tenants[name]
	if t == nil || t.users == 0 {
		return false
	}
	t.users--
	return true
}

// setWeight sets a tenant's weight. The new weight divides the time the
// tenant's calls in progress have run so far as well.
func (c *core) setWeight(name string, w float64) {
	c.tenant(name).weight = w
}

// forget drops an idle tenant without users, and its statistics.
func (c *core) forget(name string) bool {
	t := c.tenants[name]
	if t == nil || t.active() {
		return false
	}
	delete(c.tenants, name)
	return true
}

// acquire queues a call of tenant name and dispatches. The call is granted
// at once when w.granted is set afterwards; otherwise it is marked queued.
// The result is dispatch's, including w when granted.
func (c *core) acquire(name string, now time.Duration) (*waiter, []*waiter) {
	t := c.tenant(name)
	if !t.busy() {
		// A tenant returning from idle starts level with the busy tenant
		// furthest behind, not where it stopped: time it did not use is
		// not a credit to spend later in a burst.
		first := true
		var vmin float64
		for _, o := range c.tenants {
			if o != t && o.busy() {
				if v := o.v(now); first || v < vmin {
					vmin, first = v, false
				}
			}
		}
		if !first && t.vtime < vmin {
			t.vtime = vmin
		}
	}
	c.seq++
	w := &waiter{t: t, seq: c.seq, arrived: now}
	t.queue = append(t.queue, w)
	g := c.dispatch(now)
	if !w.granted {
		w.queued = true
	}
	return w, g
}

// dispatch grants free slots to waiting calls until none is free or no
// waiting tenant may take one: each time to the eligible tenant with the
// least virtual time (ties: the oldest waiting call), and within a tenant
// in arrival order. The result is valid until the next call of a core
// method.
func (c *core) dispatch(now time.Duration) []*waiter {
	c.granted = c.granted[:0]
	if c.running >= c.slots {
		return c.granted
	}
	s := c.shares()
	for c.running < c.slots {
		var best *tenant
		var bestV float64
		for _, t := range c.tenants {
			if len(t.queue) == 0 || !s.eligible(t) {
				continue
			}
			v := t.v(now)
			if best == nil || v < bestV || (v == bestV && t.queue[0].seq < best.queue[0].seq) {
				best, bestV = t, v
			}
		}
		if best == nil {
			break
		}
		// Shifted rather than resliced, so that the queue keeps its array
		// and queueing allocates nothing; queues are as short as a
		// tenant's subtasks are few.
		w := best.queue[0]
		n := copy(best.queue, best.queue[1:])
		best.queue[n] = nil
		best.queue = best.queue[:n]
		base, _ := s.limits(best)
		best.held++
		if best.held > base {
			s.extra++
		}
		best.runStart += float64(now)
		c.running++
		w.granted, w.start = true, now
		best.stats.calls++
		if w.queued {
			best.stats.waits++
		}
		d := max(now-w.arrived, 0)
		best.stats.waited += d
		best.stats.maxWait = max(best.stats.maxWait, d)
		c.granted = append(c.granted, w)
	}
	return c.granted
}

// release ends a granted call at now and charges its duration to its
// tenant's virtual time. It reports false for a waiter that does not hold
// a slot (never granted, or released already).
func (c *core) release(w *waiter, now time.Duration) bool {
	if !w.granted || w.done {
		return false
	}
	w.done = true
	t := w.t
	d := max(now-w.start, 0)
	t.held--
	c.running--
	if t.held == 0 {
		// Exact, rather than a difference of floats.
		t.runStart = 0
	} else {
		t.runStart -= float64(w.start)
	}
	t.vtime += float64(d) / t.weight
	t.stats.busy += d
	return true
}

// cancel withdraws a call that is still waiting. It reports false when the
// call was granted meanwhile (the caller must then release it) or has
// ended.
func (c *core) cancel(w *waiter, now time.Duration) bool {
	if w.granted || w.done {
		return false
	}
	t := w.t
	for i, q := range t.queue {
		if q == w {
			copy(t.queue[i:], t.queue[i+1:])
			t.queue[len(t.queue)-1] = nil
			t.queue = t.queue[:len(t.queue)-1]
			break
		}
	}
	w.done = true
	t.stats.canceled++
	d := max(now-w.arrived, 0)
	t.stats.waited += d
	t.stats.maxWait = max(t.stats.maxWait, d)
	return true
}
