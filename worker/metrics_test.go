package worker

import (
	"testing"
	"time"
)

func TestTimeSplit(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(ms int) { now = time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	s := &timeSplit{clock: func() time.Time { return now }}
	check := func(what string, busy, bp, idle int) {
		t.Helper()
		b, p, i := s.totals()
		if b != time.Duration(busy)*time.Millisecond || p != time.Duration(bp)*time.Millisecond || i != time.Duration(idle)*time.Millisecond {
			t.Errorf("%s: busy %v, backpressured %v, idle %v; want %dms, %dms, %dms", what, b, p, i, busy, bp, idle)
		}
	}
	check("before start", 0, 0, 0)
	s.start(now)
	at(10)
	s.to(timeIdle)
	at(30)
	// The period in progress counts before it ends.
	check("idle in progress", 10, 0, 20)
	s.to(timeBusy)
	s.to(timeBusy) // no change
	at(35)
	s.to(timeBackpressured)
	at(100)
	check("blocked", 15, 65, 20)
	s.to(timeBusy)
	at(110)
	// A source's call that brought nothing: its 10ms were idle.
	s.charge(timeIdle)
	check("after charge", 15, 65, 30)
	at(120)
	check("busy again", 25, 65, 30)
	// A period in progress moved to another state: what was read stays.
	s.charge(timeIdle)
	check("never back", 25, 65, 40)
	at(125)
	check("caught up", 25, 65, 40)
	at(140)
	check("past", 35, 65, 40)
}

// BenchmarkTimeSplit measures a subtask's wait bracket: the switch to idle
// (or backpressured) before it waits and back to busy after, as around
// every gate read and every send.
func BenchmarkTimeSplit(b *testing.B) {
	var s timeSplit
	s.start(time.Now())
	for b.Loop() {
		s.to(timeIdle)
		s.to(timeBusy)
	}
}
