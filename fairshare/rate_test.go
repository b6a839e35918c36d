package fairshare

import (
	"testing"
	"time"
)

// rateClock is a monotonic clock the test moves.
type rateClock struct{ t time.Duration }

func (c *rateClock) now() time.Duration { return c.t }

func TestRateBurstThenPace(t *testing.T) {
	c := &rateClock{}
	r := NewRate(1000, 500, c.now)
	// The burst passes without a wait.
	if d := r.Charge(500); d != 0 {
		t.Fatalf("a charge within the burst waits %s", d)
	}
	// 250 bytes past it: a quarter second at 1,000 bytes/s.
	if d := r.Charge(250); d != 250*time.Millisecond {
		t.Fatalf("250 bytes over: wait %s, want 250ms", d)
	}
	// The debt is paid at the rate: after 250 ms nothing is owed.
	c.t += 250 * time.Millisecond
	if d := r.Charge(0); d != 0 {
		t.Fatalf("after the wait: %s more", d)
	}
	// Idle time refills up to the burst, no more.
	c.t += time.Hour
	if d := r.Charge(500); d != 0 {
		t.Fatalf("after an hour idle, the burst waits %s", d)
	}
	if d := r.Charge(1); d != time.Millisecond {
		t.Fatalf("idle time saved beyond the burst: one byte past it waits %s, want 1ms", d)
	}
}

// Chargers sharing a rate each pay the debt they find: whatever the order
// of their charges, the bytes they are let through by a time never exceed
// the burst plus the rate times that time plus one piece of work of each
// (charged after the fact, a piece is done before it is paid for).
func TestRateSharedKeepsTheRate(t *testing.T) {
	c := &rateClock{}
	const per, burst = 1 << 20, 1 << 20
	r := NewRate(per, burst, c.now)
	// Each charger charges a chunk, waits what it is told, charges again.
	type charger struct {
		next  time.Duration // when it charges next
		chunk int64
	}
	cs := []*charger{{chunk: 300 << 10}, {chunk: 700 << 10}, {chunk: 64 << 10}}
	var total, pieces int64
	for _, k := range cs {
		pieces += k.chunk
	}
	for range 3000 {
		// The charger due first goes.
		k := cs[0]
		for _, x := range cs[1:] {
			if x.next < k.next {
				k = x
			}
		}
		c.t = k.next
		// Its work (what it charges now) was let through at c.t.
		total += k.chunk
		if most := burst + int64(c.t.Seconds()*per) + pieces; total > most {
			t.Fatalf("at %s the chargers wrote %d bytes, over %d", c.t, total, most)
		}
		k.next = c.t + r.Charge(k.chunk)
	}
	// And they were not held back much more than the rate asks: at the
	// end, the rate is within 10% of what they got through.
	if got := float64(total) / c.t.Seconds(); got < 0.9*per {
		t.Fatalf("the chargers got %.0f bytes/s through a rate of %d", got, per)
	}
}

func TestRateSet(t *testing.T) {
	c := &rateClock{}
	r := NewRate(1000, 0, c.now)
	if d := r.Charge(2000); d != time.Second {
		t.Fatalf("1,000 bytes over a 1,000-byte burst: wait %s, want 1s", d)
	}
	r.Set(4000, 0)
	if r.PerSecond() != 4000 {
		t.Fatalf("PerSecond %d after Set(4000)", r.PerSecond())
	}
	// The debt stays and is paid at the new rate.
	if d := r.Charge(0); d != 250*time.Millisecond {
		t.Fatalf("the same debt at 4,000 bytes/s: wait %s, want 250ms", d)
	}
}
