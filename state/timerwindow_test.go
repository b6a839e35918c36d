package state

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// smallTimerWindow makes the timer windows small for one test, so that a
// few hundred timers go through every path: shrink, blind writes past the
// bound, refills from Pebble, and key groups read ahead a few timers at a
// time (runs read again, dropped by changes past the bound), fired timers'
// deletions staged by a refill and left to the Flush.
func smallTimerWindow(t *testing.T, max, refill int) {
	t.Helper()
	oldMax, oldRefill, oldAhead, oldStage := timerWindowMax, timerRefill, timerAheadRun, firedStageBytes
	// A refill stages the fired timers' deletions past about 3 of them.
	timerWindowMax, timerRefill, timerAheadRun, firedStageBytes = max, refill, 3, 64
	t.Cleanup(func() {
		timerWindowMax, timerRefill, timerAheadRun, firedStageBytes = oldMax, oldRefill, oldAhead, oldStage
	})
}

// firingOrder renders a model timer as pop does, sorting in firing order.
func firingOrder(ms []modelTimer) []string {
	slices.SortFunc(ms, compareModel)
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%d:%s/%s", m.ts, m.key, m.ns)
	}
	return out
}

// TestTimerWindowAgainstModel drives one vertex's event-time timers with
// random registrations, deletions, pops, flushes, reopens and undone
// calls, with a window of a few timers, and checks every pop and
// NextTimer against a set of the timers that should be pending.
func TestTimerWindowAgainstModel(t *testing.T) {
	smallTimerWindow(t, 16, 8)
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			dir := t.TempDir()
			s := openStore(t, dir, fullRange)
			defer func() { closeStore(t, s) }()
			v := s.Vertex("w", true)
			model := map[modelTimer]bool{}
			var undone map[modelTimer]bool // the model when the journal opened
			randTimer := func() modelTimer {
				// Keys of different lengths in many key groups; a few
				// times, so that same-time timers cross the bound.
				return modelTimer{
					ts:  int64(r.IntN(40)),
					key: fmt.Sprintf("%0*d", 1+r.IntN(3), r.IntN(60)),
					ns:  string(rune('x' + r.IntN(3))),
				}
			}
			wm := int64(-1)
			sawBound := 0 // steps that ended with timers out of memory
			for step := range 6000 {
				switch op := r.IntN(100); {
				case op < 50:
					m := randTimer()
					m.ts += wm + 1
					mustTimer(t, v, abi.TimeEvent, m.key, m.ns, m.ts)
					model[m] = true
				case op < 65:
					m := randTimer()
					m.ts += wm + 1
					if r.IntN(2) == 0 {
						// Mostly an existing one.
						for k := range model {
							m = k
							break
						}
					}
					if err := v.DeleteTimer(abi.TimeEvent, []byte(m.key), []byte(m.ns), m.ts); err != nil {
						t.Fatalf("step %d: DeleteTimer: %v", step, err)
					}
					delete(model, m)
				case op < 75:
					// The watermark moves; everything up to it fires, in
					// order, a batch of MaxTimersPerPop at most at a time.
					wm += int64(r.IntN(12))
					var due []modelTimer
					for m := range model {
						if m.ts <= wm {
							due = append(due, m)
							delete(model, m)
						}
					}
					var got []string
					for {
						b := pop(t, v, abi.TimeEvent, wm)
						if len(b) == 0 {
							break
						}
						got = append(got, b...)
					}
					expectTimers(t, got, firingOrder(due)...)
				case op < 82:
					var want int64
					found := false
					for m := range model {
						if !found || m.ts < want {
							want, found = m.ts, true
						}
					}
					ts, ok := v.NextTimer(abi.TimeEvent)
					if ok != found || ok && ts != want {
						t.Fatalf("step %d: NextTimer = %d, %t; want %d, %t", step, ts, ok, want, found)
					}
				case op < 88:
					flush(t, s)
				case op < 90:
					if undone != nil {
						continue
					}
					closeStore(t, s)
					s = openStore(t, dir, fullRange)
					v = s.Vertex("w", true)
				case op < 95:
					if undone == nil {
						s.BeginUndo()
						undone = maps.Clone(model)
					}
				default:
					if undone == nil {
						continue
					}
					if r.IntN(2) == 0 {
						s.CommitUndo()
					} else {
						if err := s.RollbackUndo(); err != nil {
							t.Fatalf("step %d: RollbackUndo: %v", step, err)
						}
						model = undone
					}
					undone = nil
				}
				if q := &v.timers[abi.TimeEvent]; q.partial && q.bound != nil {
					sawBound++
				}
				if q := &v.timers[abi.TimeEvent]; q.len() > 2*timerWindowMax+1 {
					t.Fatalf("step %d: %d timers in memory, window %d", step, q.len(), timerWindowMax)
				}
			}
			if sawBound < 1000 {
				t.Fatalf("only %d of the steps had timers out of memory", sawBound)
			}
			if undone != nil {
				s.CommitUndo()
			}
			// Reopened, every pending timer is still there, in order.
			closeStore(t, s)
			s = openStore(t, dir, fullRange)
			v = s.Vertex("w", true)
			var all []modelTimer
			for m := range model {
				all = append(all, m)
			}
			var got []string
			for {
				b := pop(t, v, abi.TimeEvent, abi.MaxWatermark)
				if len(b) == 0 {
					break
				}
				got = append(got, b...)
			}
			expectTimers(t, got, firingOrder(all)...)
		})
	}
}

// A queue past its window keeps a bounded number of timers in memory, and
// a store reopened on many timers reads none of them until it needs them.
func TestTimerWindowBoundsMemory(t *testing.T) {
	smallTimerWindow(t, 64, 32)
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("w", true)
	const n = 5000
	for i := range n {
		mustTimer(t, v, abi.TimeEvent, fmt.Sprintf("k%d", i), "", abi.MaxWatermark)
		if i%100 == 99 {
			flush(t, s)
		}
	}
	flush(t, s)
	q := &v.timers[abi.TimeEvent]
	if q.len() > timerWindowMax || !q.partial {
		t.Fatalf("after %d timers and a flush: %d in memory (partial %t), want at most %d", n, q.len(), q.partial, timerWindowMax)
	}
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("w", true)
	if q := &v.timers[abi.TimeEvent]; q.len() != 0 || !q.partial {
		t.Fatalf("reopened: %d timers in memory (partial %t), want none yet", q.len(), q.partial)
	}
	if ts, ok := v.NextTimer(abi.TimeEvent); !ok || ts != abi.MaxWatermark {
		t.Fatalf("NextTimer = %d, %t", ts, ok)
	}
	if q := &v.timers[abi.TimeEvent]; q.len() != timerRefill {
		t.Fatalf("NextTimer read %d timers, want one window of %d", q.len(), timerRefill)
	}
	seen := map[string]bool{}
	last := ""
	for {
		got := pop(t, v, abi.TimeEvent, abi.MaxWatermark)
		if len(got) == 0 {
			break
		}
		for _, g := range got {
			if seen[g] {
				t.Fatalf("timer %s fired twice", g)
			}
			seen[g] = true
			// Same time: shorter keys first, then byte order.
			if last != "" && (len(g) < len(last) || len(g) == len(last) && g < last) {
				t.Fatalf("timer %s fired after %s", g, last)
			}
			last = g
		}
		if q := &v.timers[abi.TimeEvent]; q.len() > timerRefill {
			t.Fatalf("%d timers in memory while firing, want at most %d", q.len(), timerRefill)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d timers fired, want %d", len(seen), n)
	}
}

// TestFiredTimerRangeDeletesAgainstModel drives the timers of two vertices
// in both time domains with registrations at, behind and ahead of the
// watermark, pops up to times behind the latest, deletions, flushes,
// reopens and undone calls, and checks every pop, and the timers left at
// the end, against a model: a timer registered between fired ones and not
// fired yet, deleted by a fired timers' range deletion, would be missing.
// It also checks that both ways of deleting fired timers were taken.
func TestFiredTimerRangeDeletesAgainstModel(t *testing.T) {
	smallTimerWindow(t, 16, 8)
	type queue struct {
		vertex string
		domain int32
	}
	queues := []queue{{"w", abi.TimeEvent}, {"w", abi.TimeProcessing}, {"w2", abi.TimeEvent}, {"w2", abi.TimeProcessing}}
	ranges, points := 0, 0
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 36))
			dir := t.TempDir()
			s := openStore(t, dir, fullRange)
			defer func() { closeStore(t, s) }()
			models := make([]map[modelTimer]bool, len(queues))
			for i := range models {
				models[i] = map[modelTimer]bool{}
			}
			var undone []map[modelTimer]bool
			wm := int64(0)
			// A few keys and namespaces: many timers share a key group.
			randTimer := func() modelTimer {
				return modelTimer{
					ts:  wm - 10 + int64(r.IntN(40)),
					key: fmt.Sprint(r.IntN(8)),
					ns:  string(rune('a' + r.IntN(5))),
				}
			}
			popAll := func(step int, qi int, upTo int64) {
				qu := queues[qi]
				v := s.Vertex(qu.vertex, true)
				var due []modelTimer
				for m := range models[qi] {
					if m.ts <= upTo {
						due = append(due, m)
						delete(models[qi], m)
					}
				}
				var got []string
				for {
					b := pop(t, v, qu.domain, upTo)
					if len(b) == 0 {
						break
					}
					got = append(got, b...)
				}
				if want := firingOrder(due); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("step %d: %s domain %d up to %d: timers = %q, want %q", step, qu.vertex, qu.domain, upTo, got, want)
				}
			}
			for step := range 8000 {
				qi := r.IntN(len(queues))
				qu := queues[qi]
				v := s.Vertex(qu.vertex, true)
				switch op := r.IntN(100); {
				case op < 50:
					m := randTimer()
					mustTimer(t, v, qu.domain, m.key, m.ns, m.ts)
					models[qi][m] = true
				case op < 60:
					m := randTimer()
					for k := range models[qi] {
						if r.IntN(2) == 0 {
							m = k
						}
						break
					}
					if err := v.DeleteTimer(qu.domain, []byte(m.key), []byte(m.ns), m.ts); err != nil {
						t.Fatalf("step %d: DeleteTimer: %v", step, err)
					}
					delete(models[qi], m)
				case op < 78:
					// Up to the watermark or to a time behind it: what
					// is due and registered later stays, between fired
					// timers, until a later pop.
					wm += int64(r.IntN(8))
					popAll(step, qi, wm-int64(r.IntN(12)))
				case op < 88:
					flush(t, s)
				case op < 90:
					if undone != nil {
						continue
					}
					flush(t, s)
					ranges, points = ranges+s.firedRanges, points+s.firedPoints
					closeStore(t, s)
					s = openStore(t, dir, fullRange)
				case op < 95:
					if undone == nil {
						s.BeginUndo()
						undone = make([]map[modelTimer]bool, len(models))
						for i := range models {
							undone[i] = maps.Clone(models[i])
						}
					}
				default:
					if undone == nil {
						continue
					}
					if r.IntN(2) == 0 {
						s.CommitUndo()
					} else {
						if err := s.RollbackUndo(); err != nil {
							t.Fatalf("step %d: RollbackUndo: %v", step, err)
						}
						models = undone
					}
					undone = nil
				}
			}
			if undone != nil {
				s.CommitUndo()
			}
			flush(t, s)
			ranges, points = ranges+s.firedRanges, points+s.firedPoints
			closeStore(t, s)
			s = openStore(t, dir, fullRange)
			for qi := range queues {
				popAll(-1, qi, abi.MaxWatermark)
			}
		})
	}
	if ranges == 0 {
		t.Fatalf("fired timers deleted by %d ranges and %d one by one; want ranges", ranges, points)
	}
}

// A timer in the queue that sorts before a timer fired since the last
// Flush keeps the fired timers of its queue from being deleted by range.
// Registering cannot make one (stageSet stages the fired deletions
// first), so the test puts it in the queue as a registration that did not
// would.
func TestFiredTimerBehindRangeIsKept(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("w", true)
	for i := range 20 {
		mustTimer(t, v, abi.TimeEvent, "k", fmt.Sprint(i%4), int64(10+i))
	}
	flush(t, s)
	got := pop(t, v, abi.TimeEvent, 25)
	if len(got) != 16 {
		t.Fatalf("popped %q, want the 16 timers up to 25", got)
	}
	pk, err := v.timerKey(abi.TimeEvent, []byte("k"), []byte("x"), 12)
	if err != nil {
		t.Fatal(err)
	}
	v.timers[abi.TimeEvent].add(newTimer(12, pk, 1, 1))
	if err := s.stageTimer(pk, false); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	if s.firedRanges != 0 || s.firedPoints != 16 {
		t.Fatalf("fired timers deleted by %d ranges and %d one by one, want 0 and 16", s.firedRanges, s.firedPoints)
	}
	closeStore(t, s)
	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("w", true)
	expectTimers(t, pop(t, v, abi.TimeEvent, abi.MaxWatermark), "12:k/x", "26:k/0", "27:k/1", "28:k/2", "29:k/3")
}

// A window that shrinks after a refill, when timers registered before the
// bound push it past its size, starts the key groups' runs read ahead
// again from its new bound: the timers between the new bound and the old
// one are in Pebble only, and a run kept from before would skip them.
func TestTimerWindowShrinkAfterReadAhead(t *testing.T) {
	smallTimerWindow(t, 16, 8)
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	want := map[string]bool{}
	add := func(key string, ts int64) {
		t.Helper()
		mustTimer(t, v, abi.TimeEvent, key, "", ts)
		want[fmt.Sprintf("%d:%s/", ts, key)] = true
	}
	for i := range 400 {
		add(fmt.Sprintf("k%d", i), 1000+int64(i))
	}
	flush(t, s)
	// Firing past the window refills it and leaves runs read ahead.
	got := pop(t, v, abi.TimeEvent, 1008)
	for _, g := range got {
		delete(want, g)
	}
	if q := &v.timers[abi.TimeEvent]; q.ahead == nil {
		t.Fatal("no key group was read ahead: the test tests nothing")
	}
	// Registrations before the bound, in the window, past its size: the
	// next flush shrinks it, and its bound moves down.
	for i := range 20 {
		add(fmt.Sprintf("e%d", i), 1009+int64(i%5))
	}
	flush(t, s)
	if q := &v.timers[abi.TimeEvent]; q.len() > timerWindowMax {
		t.Fatalf("%d timers in the window after a flush, want it shrunk to at most %d", q.len(), timerWindowMax)
	}
	for {
		got := pop(t, v, abi.TimeEvent, abi.MaxWatermark)
		if len(got) == 0 {
			break
		}
		for _, g := range got {
			if !want[g] {
				t.Fatalf("timer %s fired, not pending", g)
			}
			delete(want, g)
		}
	}
	if len(want) != 0 {
		t.Fatalf("%d timers never fired, among them %v", len(want), slices.Collect(maps.Keys(want))[:min(len(want), 5)])
	}
}
