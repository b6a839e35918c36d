package fairshare

import (
	"sync"
	"time"
)

// Rate paces a tenant's use of a resource measured in bytes (the state it
// writes to disk) to a rate: a token bucket, charged after the fact. Work
// that has used the resource is charged for it (Charge); once the charges
// exceed what the rate has allowed since the bucket was last full, the
// charger is told how long to wait before its next piece of work, and the
// bucket recovers at the rate meanwhile. Up to the bucket's burst passes
// without a wait.
//
// Charging after the fact is what a write path allows: a guest call's
// writes are known once it returns, and the wait falls between the
// tenant's turns, where the subtask holds no slot, rather than inside a
// guest call. Several subtasks of a tenant share one Rate: each pays for
// the debt it finds, so together they keep to the rate.
//
// Rate is safe for concurrent use.
type Rate struct {
	mu    sync.Mutex
	now   func() time.Duration
	per   float64 // bytes per second
	burst float64
	// tokens is the bytes the bucket holds at last; negative when the
	// charges have overrun it.
	tokens float64
	last   time.Duration
}

// NewRate returns a full bucket that refills at perSecond bytes per second
// and holds at most burst bytes (perSecond when burst ≤ 0). now is a
// monotonic clock (nil: time since creation); tests pass a fake one.
func NewRate(perSecond, burst int64, now func() time.Duration) *Rate {
	if now == nil {
		epoch := time.Now()
		now = func() time.Duration { return time.Since(epoch) }
	}
	if burst <= 0 {
		burst = perSecond
	}
	r := &Rate{now: now}
	r.set(perSecond, burst)
	r.tokens = r.burst
	r.last = now()
	return r
}

// set changes the rate; the bucket keeps its tokens, up to the new burst.
func (r *Rate) set(perSecond, burst int64) {
	r.per = float64(max(perSecond, 1))
	r.burst = float64(max(burst, 1))
	r.tokens = min(r.tokens, r.burst)
}

// Set changes the rate and the burst (a tenant's quota updated); burst ≤ 0
// makes it perSecond.
func (r *Rate) Set(perSecond, burst int64) {
	if burst <= 0 {
		burst = perSecond
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill()
	r.set(perSecond, burst)
}

// PerSecond is the rate.
func (r *Rate) PerSecond() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(r.per)
}

// refill adds what the rate allowed since the last call. r.mu is held.
func (r *Rate) refill() {
	now := r.now()
	if d := now - r.last; d > 0 {
		r.tokens = min(r.burst, r.tokens+d.Seconds()*r.per)
	}
	r.last = now
}

// Charge takes n bytes from the bucket and returns how long the charger
// should wait before its next piece of work: zero while the bucket holds
// tokens, else the time the rate takes to pay the debt back.
func (r *Rate) Charge(n int64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill()
	if n > 0 {
		r.tokens -= float64(n)
	}
	if r.tokens >= 0 {
		return 0
	}
	return time.Duration(-r.tokens / r.per * float64(time.Second))
}
