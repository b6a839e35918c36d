package fairshare

import (
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// harness drives a core with a fake clock and checks, after every step,
// the invariants of the policy against an independent model of the
// division of slots: weights are kept as integer halves, so shares are
// exact integer ratios rather than floats.
type harness struct {
	tb    testing.TB
	c     *core
	now   time.Duration
	w2    map[string]int // weight × 2
	users map[string]int
	// held and waiting are the calls the harness knows to hold a slot and
	// to wait, in grant and arrival order.
	held    map[string][]*waiter
	waiting map[string][]*waiter
	grants  map[string]uint64
	busy    map[string]time.Duration
	vtime   map[string]float64
	log     *stepRec // the last step, for failure messages
}

// stepRec is one step, formatted only when a check fails.
type stepRec struct {
	prev *stepRec // shared by the branches of an exhaustive walk
	what string
	name string
	arg  float64
	now  time.Duration
}

func (s stepRec) String() string {
	return fmt.Sprintf("%s %s %g @%v", s.what, s.name, s.arg, s.now)
}

func newHarness(tb testing.TB, slots int) *harness {
	return &harness{tb: tb, c: newCore(slots), w2: map[string]int{}, users: map[string]int{},
		held: map[string][]*waiter{}, waiting: map[string][]*waiter{},
		grants: map[string]uint64{}, busy: map[string]time.Duration{}, vtime: map[string]float64{}}
}

func (h *harness) fatalf(format string, args ...any) {
	h.tb.Helper()
	var steps []string
	for s := h.log; s != nil; s = s.prev {
		steps = append(steps, s.String())
	}
	slices.Reverse(steps)
	h.tb.Fatalf("%s\nafter steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(steps, "\n  "))
}

func (h *harness) step(what, name string, arg float64) {
	h.log = &stepRec{h.log, what, name, arg, h.now}
}

func (h *harness) weight2(name string) int {
	if w, ok := h.w2[name]; ok {
		return w
	}
	return 2
}

func (h *harness) advance(d time.Duration) {
	h.step("advance", "", float64(d))
	h.now += d
	h.check(nil, false)
}

func (h *harness) join(name string) {
	h.step("join", name, 0)
	h.c.join(name)
	h.users[name]++
	h.check(nil, false)
}

func (h *harness) leave(name string) {
	h.step("leave", name, 0)
	ok := h.c.leave(name)
	if ok != (h.users[name] > 0) {
		h.fatalf("leave %s = %v with %d users", name, ok, h.users[name])
	}
	var g []*waiter
	if ok {
		h.users[name]--
		g = h.c.dispatch(h.now)
	}
	h.check(g, true)
}

func (h *harness) setWeight(name string, w2 int) {
	h.step("weight", name, float64(w2)/2)
	h.c.setWeight(name, float64(w2)/2)
	h.w2[name] = w2
	h.check(h.c.dispatch(h.now), true)
}

// acquire queues a call of name and reports whether it was granted at
// once.
func (h *harness) acquire(name string) *waiter {
	h.step("acquire", name, 0)
	w, g := h.c.acquire(name, h.now)
	h.waiting[name] = append(h.waiting[name], w)
	h.check(g, true)
	return w
}

// release ends the i-th oldest granted call of name.
func (h *harness) release(name string, i int) {
	w := h.held[name][i]
	h.step("release", name, float64(w.seq))
	if !h.c.release(w, h.now) {
		h.fatalf("release of a held call refused")
	}
	if h.c.release(w, h.now) {
		h.fatalf("second release accepted")
	}
	h.held[name] = slices.Delete(h.held[name], i, i+1)
	h.busy[name] += h.now - w.start
	h.check(h.c.dispatch(h.now), true)
}

// cancel withdraws the i-th waiting call of name.
func (h *harness) cancel(name string, i int) {
	w := h.waiting[name][i]
	h.step("cancel", name, float64(w.seq))
	if !h.c.cancel(w, h.now) {
		h.fatalf("cancel of a waiting call refused")
	}
	if h.c.cancel(w, h.now) || h.c.release(w, h.now) {
		h.fatalf("a cancelled call was cancelled or released again")
	}
	h.waiting[name] = slices.Delete(h.waiting[name], i, i+1)
	h.check(nil, false)
}

// modelLimits is the division of slots computed independently of the
// core, in integers.
func (h *harness) modelLimits(active map[string]bool) map[string][2]int {
	total := 0
	for n := range active {
		total += h.weight2(n)
	}
	slots := h.c.slots
	out := map[string][2]int{}
	for n := range active {
		if len(active) <= 1 {
			out[n] = [2]int{slots, slots}
			continue
		}
		num := slots * h.weight2(n)
		base, most := num/total, (num+total-1)/total
		base = min(max(base, 1), slots)
		most = min(max(most, base), slots)
		out[n] = [2]int{base, most}
	}
	return out
}

// check verifies the grants g of the last step's dispatch (made from the
// state the model holds now, before it moves them) and the state after it.
func (h *harness) check(g []*waiter, dispatched bool) {
	h.tb.Helper()
	c := h.c
	// The model's queues before the dispatch: what is waiting now plus
	// what was just granted, in arrival order.
	granted := map[*waiter]bool{}
	for _, w := range g {
		granted[w] = true
	}
	for _, w := range g {
		if !w.granted || w.done || w.start != h.now {
			h.fatalf("granted call #%d: granted %v done %v start %v", w.seq, w.granted, w.done, w.start)
		}
	}
	active := map[string]bool{}
	for n, t := range c.tenants {
		if h.users[n] > 0 || len(h.waiting[n]) > 0 || len(h.held[n]) > 0 {
			active[n] = true
		}
		if t.active() != active[n] {
			h.fatalf("tenant %s active %v, want %v", n, t.active(), active[n])
		}
	}
	lim := h.modelLimits(active)
	if !dispatched && len(g) > 0 {
		h.fatalf("grants without a dispatch")
	}
	if len(g) > 0 {
		// Replay the dispatch: every grant went to an eligible tenant with
		// the least virtual time (the grants themselves leave virtual times
		// unchanged: a call starting now has run for 0), oldest call first.
		held := map[string]int{}
		for n, ws := range h.held {
			held[n] = len(ws)
		}
		queues := map[string][]*waiter{}
		for n, ws := range h.waiting {
			queues[n] = slices.Clone(ws)
		}
		sumBase, spare := 0, 0
		for n := range active {
			sumBase += lim[n][0]
		}
		spare = max(0, c.slots-sumBase)
		extra := func() int {
			e := 0
			for n := range active {
				e += max(0, held[n]-lim[n][0])
			}
			return e
		}
		eligible := func(n string) bool {
			return held[n] < lim[n][0] || (held[n] < lim[n][1] && extra() < spare)
		}
		running := 0
		for _, v := range held {
			running += v
		}
		for _, w := range g {
			n := w.t.name
			if running >= c.slots {
				h.fatalf("call #%d of %s granted with every slot held", w.seq, n)
			}
			if len(queues[n]) == 0 || queues[n][0] != w {
				h.fatalf("call #%d of %s granted out of arrival order", w.seq, n)
			}
			if !eligible(n) {
				h.fatalf("call #%d of %s granted beyond its share: held %d, limits %v, extra %d, spare %d", w.seq, n, held[n], lim[n], extra(), spare)
			}
			for o, q := range queues {
				if o == n || len(q) == 0 || !eligible(o) {
					continue
				}
				vo, vn := c.tenants[o].v(h.now), c.tenants[n].v(h.now)
				if vo < vn || (vo == vn && q[0].seq < w.seq) {
					h.fatalf("call #%d of %s (v %g) granted before call #%d of %s (v %g)", w.seq, n, vn, q[0].seq, o, vo)
				}
			}
			queues[n] = queues[n][1:]
			held[n]++
			running++
		}
	}
	// Move the grants in the model.
	for _, w := range g {
		n := w.t.name
		i := slices.Index(h.waiting[n], w)
		if i < 0 {
			h.fatalf("granted call #%d of %s was not waiting", w.seq, n)
		}
		h.waiting[n] = slices.Delete(h.waiting[n], i, i+1)
		h.held[n] = append(h.held[n], w)
		h.grants[n]++
	}
	// The state after the step.
	running := 0
	for n, t := range c.tenants {
		if t.held != len(h.held[n]) || len(t.queue) != len(h.waiting[n]) {
			h.fatalf("tenant %s holds %d and queues %d, model %d and %d", n, t.held, len(t.queue), len(h.held[n]), len(h.waiting[n]))
		}
		for i, w := range t.queue {
			if w != h.waiting[n][i] || w.granted || w.done {
				h.fatalf("tenant %s queue[%d] is call #%d (granted %v, done %v)", n, i, w.seq, w.granted, w.done)
			}
		}
		running += t.held
		if t.users != h.users[n] {
			h.fatalf("tenant %s has %d users, model %d", n, t.users, h.users[n])
		}
		if t.stats.calls != h.grants[n] || t.stats.busy != h.busy[n] {
			h.fatalf("tenant %s stats: %d calls, busy %v; model %d, %v", n, t.stats.calls, t.stats.busy, h.grants[n], h.busy[n])
		}
		if t.vtime < h.vtime[n] {
			h.fatalf("tenant %s virtual time went back from %g to %g", n, h.vtime[n], t.vtime)
		}
		h.vtime[n] = t.vtime
		if t.held == 0 && t.runStart != 0 {
			h.fatalf("tenant %s holds nothing but runStart is %g", n, t.runStart)
		}
	}
	if running != c.running || running > c.slots {
		h.fatalf("running %d, core says %d, slots %d", running, c.running, c.slots)
	}
	// Nothing eligible is left waiting while a slot is free.
	if c.running < c.slots {
		sumBase, extra := 0, 0
		for n := range active {
			sumBase += lim[n][0]
			extra += max(0, len(h.held[n])-lim[n][0])
		}
		spare := max(0, c.slots-sumBase)
		for n := range active {
			held := len(h.held[n])
			if len(h.waiting[n]) > 0 && (held < lim[n][0] || (held < lim[n][1] && extra < spare)) {
				h.fatalf("tenant %s waits with a free slot: held %d, limits %v, extra %d, spare %d", n, held, lim[n], extra, spare)
			}
		}
		// Work conservation: a tenant alone gets every slot it asks for.
		if len(active) == 1 {
			for n := range active {
				if len(h.waiting[n]) > 0 {
					h.fatalf("tenant %s is alone and waits with a free slot", n)
				}
			}
		}
	}
}

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		slots   int
		weights []float64
		want    [][2]int // base, most per tenant
		spare   int
	}{
		{2, []float64{1}, [][2]int{{2, 2}}, 0},
		{2, []float64{5}, [][2]int{{2, 2}}, 0},
		{2, []float64{1, 1}, [][2]int{{1, 1}, {1, 1}}, 0},
		{2, []float64{3, 1}, [][2]int{{1, 2}, {1, 1}}, 0},
		{2, []float64{1, 1, 1}, [][2]int{{1, 1}, {1, 1}, {1, 1}}, 0},
		{1, []float64{1, 1}, [][2]int{{1, 1}, {1, 1}}, 0},
		{4, []float64{3, 1}, [][2]int{{3, 3}, {1, 1}}, 0},
		{4, []float64{1, 1, 1}, [][2]int{{1, 2}, {1, 2}, {1, 2}}, 1},
		{8, []float64{1, 1, 1}, [][2]int{{2, 3}, {2, 3}, {2, 3}}, 2},
		{8, []float64{0.1, 0.2, 0.7}, [][2]int{{1, 1}, {1, 2}, {5, 6}}, 1},
		{3, []float64{0.1, 0.2}, [][2]int{{1, 1}, {2, 2}}, 0},
		{16, []float64{1000, 1}, [][2]int{{15, 16}, {1, 1}}, 0},
	} {
		c := newCore(tc.slots)
		var ts []*tenant
		for i, w := range tc.weights {
			n := fmt.Sprint("t", i)
			c.join(n)
			c.setWeight(n, w)
			ts = append(ts, c.tenants[n])
		}
		s := c.shares()
		for i, tt := range ts {
			base, most := s.limits(tt)
			if [2]int{base, most} != tc.want[i] {
				t.Errorf("slots %d weights %v: tenant %d limits (%d, %d), want %v", tc.slots, tc.weights, i, base, most, tc.want[i])
			}
		}
		if s.spare != tc.spare {
			t.Errorf("slots %d weights %v: spare %d, want %d", tc.slots, tc.weights, s.spare, tc.spare)
		}
	}
}

func heldBy(h *harness, name string) int { return len(h.held[name]) }

func TestAloneTakesEverySlot(t *testing.T) {
	h := newHarness(t, 3)
	h.join("a")
	for range 4 {
		h.acquire("a")
	}
	if heldBy(h, "a") != 3 || len(h.waiting["a"]) != 1 {
		t.Fatalf("held %d, waiting %d", heldBy(h, "a"), len(h.waiting["a"]))
	}
	h.advance(time.Millisecond)
	h.release("a", 0)
	if heldBy(h, "a") != 3 || len(h.waiting["a"]) != 0 {
		t.Fatalf("after a release: held %d, waiting %d", heldBy(h, "a"), len(h.waiting["a"]))
	}
	// Without Join, calls alone make a tenant active too.
	h2 := newHarness(t, 2)
	h2.acquire("x")
	h2.acquire("x")
	if heldBy(h2, "x") != 2 {
		t.Fatalf("an unregistered tenant alone holds %d", heldBy(h2, "x"))
	}
}

func TestTwoTenantsOneSlotEach(t *testing.T) {
	h := newHarness(t, 2)
	h.join("a")
	h.join("b")
	for range 3 {
		h.acquire("a")
	}
	// b is registered though idle: a keeps to its share.
	if heldBy(h, "a") != 1 || len(h.waiting["a"]) != 2 {
		t.Fatalf("a holds %d and waits %d", heldBy(h, "a"), len(h.waiting["a"]))
	}
	h.acquire("b")
	if heldBy(h, "b") != 1 {
		t.Fatal("b did not get its slot")
	}
	// a's long call and b's short ones: b never waits, a never gets more.
	for range 5 {
		h.advance(time.Millisecond)
		h.release("b", 0)
		h.acquire("b")
		if heldBy(h, "b") != 1 || heldBy(h, "a") != 1 {
			t.Fatalf("a holds %d, b %d", heldBy(h, "a"), heldBy(h, "b"))
		}
	}
	// When b leaves for good, a may use both slots.
	h.release("b", 0)
	h.leave("b")
	if heldBy(h, "a") != 2 {
		t.Fatalf("a alone holds %d", heldBy(h, "a"))
	}
}

func TestJoinWhileAnotherHoldsEverything(t *testing.T) {
	h := newHarness(t, 2)
	h.acquire("a")
	h.acquire("a")
	h.join("b")
	h.acquire("b")
	h.acquire("a")
	if heldBy(h, "b") != 0 {
		t.Fatal("b was granted a slot that was not free")
	}
	// The first slot a gives back goes to b, not to a's newer call.
	h.advance(time.Second)
	h.release("a", 1)
	if heldBy(h, "b") != 1 || heldBy(h, "a") != 1 {
		t.Fatalf("a holds %d, b %d", heldBy(h, "a"), heldBy(h, "b"))
	}
	// a is over its share no more; its waiting call waits for a's slot.
	h.release("b", 0)
	if heldBy(h, "a") != 1 || len(h.waiting["a"]) != 1 {
		t.Fatalf("a holds %d, waits %d with b registered", heldBy(h, "a"), len(h.waiting["a"]))
	}
	h.release("a", 0)
	if heldBy(h, "a") != 1 || len(h.waiting["a"]) != 0 {
		t.Fatalf("a's waiting call: held %d, waiting %d", heldBy(h, "a"), len(h.waiting["a"]))
	}
}

func TestWeightedSlots(t *testing.T) {
	h := newHarness(t, 4)
	h.join("a")
	h.join("b")
	h.setWeight("a", 6) // weight 3
	for range 5 {
		h.acquire("a")
		h.acquire("b")
	}
	if heldBy(h, "a") != 3 || heldBy(h, "b") != 1 {
		t.Fatalf("weights 3:1 on 4 slots: a holds %d, b %d", heldBy(h, "a"), heldBy(h, "b"))
	}
	// Equal weights again: b may take the next slot a frees.
	h.setWeight("a", 2)
	h.release("a", 0)
	if heldBy(h, "a") != 2 || heldBy(h, "b") != 2 {
		t.Fatalf("weights 1:1: a holds %d, b %d", heldBy(h, "a"), heldBy(h, "b"))
	}
	// A larger weight takes effect at once where slots are free.
	h.setWeight("b", 6)
	h.release("a", 0)
	if heldBy(h, "a") != 1 || heldBy(h, "b") != 3 {
		t.Fatalf("weights 1:3: a holds %d, b %d", heldBy(h, "a"), heldBy(h, "b"))
	}
}

// setVTime gives a tenant a history: virtual time it has used.
func (h *harness) setVTime(name string, d time.Duration) {
	h.c.tenant(name).vtime = float64(d)
	h.vtime[name] = float64(d)
	h.step("history", name, float64(d))
}

func TestSpareSlotGoesToLeastVirtualTime(t *testing.T) {
	// Three equal tenants on four slots: one slot each is guaranteed, the
	// fourth is spare.
	h := newHarness(t, 4)
	for _, n := range []string{"a", "b", "c"} {
		h.join(n)
	}
	h.setVTime("a", 10*time.Millisecond)
	h.setVTime("b", 5*time.Millisecond)
	h.setVTime("c", time.Millisecond)
	h.acquire("c")
	h.acquire("b")
	h.acquire("a")
	h.acquire("a") // the spare, free and unclaimed
	h.acquire("b")
	h.acquire("c")
	if got := fmt.Sprint(heldBy(h, "a"), heldBy(h, "b"), heldBy(h, "c")); got != "2 1 1" {
		t.Fatalf("held a b c = %s", got)
	}
	// When a gives the spare back, it goes to c, furthest behind, though
	// b asked first.
	h.advance(time.Millisecond)
	h.release("a", 1)
	if got := fmt.Sprint(heldBy(h, "a"), heldBy(h, "b"), heldBy(h, "c")); got != "1 1 2" {
		t.Fatalf("held a b c = %s after a freed the spare", got)
	}
	// Nobody else may take a spare slot while c holds it.
	h.release("b", 0)
	if got := fmt.Sprint(heldBy(h, "a"), heldBy(h, "b"), heldBy(h, "c")); got != "1 1 2" {
		t.Fatalf("held a b c = %s after b's release", got)
	}
	if len(h.waiting["b"]) != 0 {
		t.Fatal("b's waiting call was not granted its guaranteed slot")
	}
}

func TestRunningCallsCount(t *testing.T) {
	h := newHarness(t, 2)
	h.join("a")
	h.join("b")
	h.acquire("a")
	h.advance(100 * time.Millisecond)
	// a has finished nothing, but its call has run 100 ms.
	if v := h.c.tenants["a"].v(h.now); v != float64(100*time.Millisecond) {
		t.Fatalf("a's virtual time with a call running 100 ms: %g", v)
	}
	// b, arriving now, starts level with it rather than 100 ms ahead.
	h.acquire("b")
	if v := h.c.tenants["b"].vtime; v != float64(100*time.Millisecond) {
		t.Fatalf("b's virtual time %g", v)
	}
	// Weight divides running time too.
	h.setWeight("a", 4)
	if v := h.c.tenants["a"].v(h.now); v != float64(50*time.Millisecond) {
		t.Fatalf("a's virtual time at weight 2: %g", v)
	}
}

func TestWeightsOrderTheWaiters(t *testing.T) {
	h := newHarness(t, 1)
	h.join("heavy")
	h.join("light")
	h.setWeight("heavy", 4) // weight 2
	// Both flood the single slot with 1 ms calls; the heavy tenant gets
	// twice the calls.
	for range 3 {
		h.acquire("heavy")
		h.acquire("light")
	}
	for range 300 {
		h.advance(time.Millisecond)
		for n, ws := range h.held {
			if len(ws) > 0 {
				h.release(n, 0)
				h.acquire(n)
				break
			}
		}
	}
	hv, lt := h.grants["heavy"], h.grants["light"]
	if hv < 195 || hv > 205 || lt < 95 || lt > 105 {
		t.Fatalf("grants heavy %d, light %d; want about 200 and 100", hv, lt)
	}
}

func TestIdleTenantDoesNotBankTime(t *testing.T) {
	h := newHarness(t, 1)
	h.join("a")
	h.join("b")
	h.acquire("b")
	h.advance(100 * time.Millisecond)
	h.release("b", 0)
	h.acquire("b")
	h.advance(50 * time.Millisecond)
	// a returns after 150 ms idle: it starts level with b (150 ms), not
	// 150 ms behind, so it cannot hold the slot for the next 150 ms.
	h.acquire("a")
	if v := h.c.tenants["a"].vtime; v != float64(150*time.Millisecond) {
		t.Fatalf("a's virtual time %g, want b's %d", v, 150*time.Millisecond)
	}
	// Leaving and joining again keeps it.
	h.release("b", 0)
	h.advance(time.Millisecond)
	h.release("a", 0)
	h.leave("a")
	h.join("a")
	if v := h.c.tenants["a"].vtime; v != float64(151*time.Millisecond) {
		t.Fatalf("after leave and join: a's virtual time %g", v)
	}
	// With nobody busy, an idle tenant keeps what it had.
	h.acquire("a")
	if v := h.c.tenants["a"].vtime; v != float64(151*time.Millisecond) {
		t.Fatalf("alone: a's virtual time %g", v)
	}
}

func TestCancelAndRelease(t *testing.T) {
	h := newHarness(t, 1)
	h.join("a")
	h.acquire("a")
	h.acquire("a")
	h.acquire("a")
	h.advance(3 * time.Millisecond)
	h.cancel("a", 0)
	st := h.c.tenants["a"].stats
	if st.canceled != 1 || st.waited != 3*time.Millisecond {
		t.Fatalf("stats after cancel: %+v", st)
	}
	// A granted call cannot be cancelled.
	if h.c.cancel(h.held["a"][0], h.now) {
		t.Fatal("a granted call was cancelled")
	}
	h.release("a", 0)
	st = h.c.tenants["a"].stats
	if st.calls != 2 || st.waits != 1 || st.busy != 3*time.Millisecond || st.maxWait != 3*time.Millisecond {
		t.Fatalf("stats after release: %+v", st)
	}
	if h.c.leave("nobody") {
		t.Fatal("leave of an unknown tenant succeeded")
	}
}

func TestForget(t *testing.T) {
	c := newCore(1)
	c.join("a")
	if c.forget("a") {
		t.Fatal("forgot a tenant with a user")
	}
	c.leave("a")
	w, _ := c.acquire("a", 0)
	if c.forget("a") {
		t.Fatal("forgot a tenant with a call")
	}
	c.release(w, 1)
	if !c.forget("a") || c.forget("a") {
		t.Fatal("forget of an idle tenant")
	}
	if len(c.tenants) != 0 {
		t.Fatalf("tenants left: %v", c.tenants)
	}
}

// op is one step of a random or exhaustive run.
type op struct {
	name string
	do   func(h *harness) bool // false: not applicable now
}

func ops(tenants []string) []op {
	var out []op
	for _, n := range tenants {
		out = append(out,
			op{"acquire " + n, func(h *harness) bool { h.acquire(n); return true }},
			op{"release " + n, func(h *harness) bool {
				if len(h.held[n]) == 0 {
					return false
				}
				h.release(n, 0)
				return true
			}},
			op{"cancel " + n, func(h *harness) bool {
				if len(h.waiting[n]) == 0 {
					return false
				}
				h.cancel(n, len(h.waiting[n])-1)
				return true
			}},
			op{"join " + n, func(h *harness) bool { h.join(n); return true }},
			op{"leave " + n, func(h *harness) bool { h.leave(n); return true }},
		)
	}
	out = append(out,
		op{"advance", func(h *harness) bool { h.advance(time.Millisecond); return true }},
		op{"weight", func(h *harness) bool { h.setWeight(tenants[0], 6-h.weight2(tenants[0])); return true }},
	)
	return out
}

// TestRandomRuns checks the invariants along long random runs: several
// slot counts, tenants and weights (halves, so the model's shares are
// exact), random calls, releases, cancels, joins, leaves and time.
func TestRandomRuns(t *testing.T) {
	runs, steps := 300, 400
	if testing.Short() || raceEnabled {
		runs = 50
	}
	for run := range runs {
		rng := rand.New(rand.NewSource(int64(run)))
		slots := 1 + rng.Intn(6)
		nt := 1 + rng.Intn(4)
		var tenants []string
		for i := range nt {
			tenants = append(tenants, string(rune('a'+i)))
		}
		h := newHarness(t, slots)
		for _, n := range tenants {
			if rng.Intn(2) == 0 {
				h.setWeight(n, 1+rng.Intn(6))
			}
		}
		for range steps {
			n := tenants[rng.Intn(nt)]
			switch r := rng.Intn(100); {
			case r < 35:
				h.acquire(n)
			case r < 60:
				if len(h.held[n]) > 0 {
					h.release(n, rng.Intn(len(h.held[n])))
				}
			case r < 65:
				if len(h.waiting[n]) > 0 {
					h.cancel(n, rng.Intn(len(h.waiting[n])))
				}
			case r < 72:
				h.join(n)
			case r < 78:
				h.leave(n)
			case r < 80:
				h.setWeight(n, 1+rng.Intn(6))
			default:
				h.advance(time.Duration(rng.Intn(20)) * time.Millisecond)
			}
		}
	}
}

// clone copies the harness and its core, so that an exhaustive walk can
// branch without replaying every prefix.
func (h *harness) clone() *harness {
	c := *h.c
	c.tenants = map[string]*tenant{}
	c.granted = nil
	for n, t := range h.c.tenants {
		t2 := *t
		c.tenants[n] = &t2
	}
	ws := map[*waiter]*waiter{}
	cp := func(w *waiter) *waiter {
		if w2, ok := ws[w]; ok {
			return w2
		}
		w2 := *w
		w2.t = c.tenants[w.t.name]
		ws[w] = &w2
		return &w2
	}
	for _, t := range c.tenants {
		q := make([]*waiter, len(t.queue))
		for i, w := range t.queue {
			q[i] = cp(w)
		}
		if len(q) == 0 {
			q = nil
		}
		t.queue = q
	}
	h2 := &harness{tb: h.tb, c: &c, now: h.now, w2: maps.Clone(h.w2), users: maps.Clone(h.users),
		held: map[string][]*waiter{}, waiting: map[string][]*waiter{},
		grants: maps.Clone(h.grants), busy: maps.Clone(h.busy), vtime: maps.Clone(h.vtime), log: h.log}
	for n, l := range h.held {
		for _, w := range l {
			h2.held[n] = append(h2.held[n], cp(w))
		}
	}
	for n, l := range h.waiting {
		for _, w := range l {
			h2.waiting[n] = append(h2.waiting[n], cp(w))
		}
	}
	return h2
}

var exhaustiveDepth = flag.Int("fairshare.depth", 5, "steps of TestExhaustive's sequences")

// TestExhaustive runs every sequence of steps up to a depth over two
// tenants (calls, releases, cancels, joins, leaves, a weight change, time),
// for one, two and three slots, checking the invariants after each step.
func TestExhaustive(t *testing.T) {
	depth := *exhaustiveDepth
	if testing.Short() || raceEnabled {
		depth = min(depth, 4)
	}
	all := ops([]string{"a", "b"})
	sequences := 0
	var walk func(h *harness, d int)
	walk = func(h *harness, d int) {
		if d == depth {
			return
		}
		for _, o := range all {
			h2 := h.clone()
			if o.do(h2) {
				sequences++
				walk(h2, d+1)
			}
		}
	}
	for slots := 1; slots <= 3; slots++ {
		walk(newHarness(t, slots), 0)
	}
	t.Logf("%d sequences of up to %d steps", sequences, depth)
}

// TestNoStarvationUnderFlood: a tenant that keeps every one of its calls
// waiting, long or short, never delays another tenant's call by more than
// the longest call in progress.
func TestNoStarvationUnderFlood(t *testing.T) {
	for _, callLen := range []time.Duration{time.Microsecond * 50, 10 * time.Second} {
		h := newHarness(t, 2)
		h.join("hostile")
		h.join("good")
		for range 16 {
			h.acquire("hostile")
		}
		var maxWait time.Duration
		for i := range 200 {
			w := h.acquire("good")
			if !w.granted {
				t.Fatalf("call %d of good waits beside calls of %v", i, callLen)
			}
			h.advance(100 * time.Microsecond)
			h.release("good", 0)
			if h.now-h.held["hostile"][0].start >= callLen {
				h.release("hostile", 0)
				h.acquire("hostile")
			}
			maxWait = max(maxWait, h.c.tenants["good"].stats.maxWait)
		}
		if heldBy(h, "hostile") != 1 || maxWait != 0 {
			t.Fatalf("hostile holds %d, good waited up to %v", heldBy(h, "hostile"), maxWait)
		}
	}
}

func TestStatsOrder(t *testing.T) {
	g := New(Config{Slots: 2})
	for _, n := range []string{"c", "a", "b"} {
		g.Join(n)
	}
	var names []string
	for _, ts := range g.Stats().Tenants {
		names = append(names, ts.Tenant)
	}
	if !sort.StringsAreSorted(names) || len(names) != 3 {
		t.Fatalf("tenants %v", names)
	}
}

func TestSlotsChange(t *testing.T) {
	c := newCore(2)
	var held []*waiter
	for range 3 {
		w, _ := c.acquire("a", 0)
		if w.granted {
			held = append(held, w)
		}
	}
	if len(held) != 2 {
		t.Fatalf("%d granted of 2 slots", len(held))
	}
	// Fewer slots: the running calls go on; nothing more is granted until
	// fewer run than the new count.
	c.slots = 1
	if g := c.dispatch(1); len(g) != 0 {
		t.Fatal("granted beyond the new slot count")
	}
	c.release(held[0], 2)
	if g := c.dispatch(2); len(g) != 0 {
		t.Fatal("granted with the one slot still held")
	}
	c.release(held[1], 3)
	if g := c.dispatch(3); len(g) != 1 {
		t.Fatal("the waiting call was not granted the free slot")
	}
	// More slots: granted at once.
	c.slots = 3
	w, _ := c.acquire("a", 4)
	if !w.granted {
		t.Fatal("not granted with slots to spare")
	}
}
