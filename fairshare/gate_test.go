package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough for a loaded machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// tenantStats is a tenant's statistics, zero before the gate has seen it.
func tenantStats(t *testing.T, g *Gate, name string) TenantStats {
	t.Helper()
	ts, _ := g.Tenant(name)
	return ts
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Duration      { return time.Duration(c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// acquireAsync starts an Acquire on its own goroutine; the channel gets its
// release function, or nil on error.
func acquireAsync(ctx context.Context, g *Gate, tenant string) <-chan func() {
	ch := make(chan func(), 1)
	go func() {
		rel, err := g.Acquire(ctx, tenant)
		if err != nil {
			rel = nil
		}
		ch <- rel
	}()
	return ch
}

func TestGateDefaults(t *testing.T) {
	if n := New(Config{}).Slots(); n != runtime.GOMAXPROCS(0) {
		t.Fatalf("default slots %d, GOMAXPROCS %d", n, runtime.GOMAXPROCS(0))
	}
	if Default() != Default() || Default().Slots() != runtime.GOMAXPROCS(0) {
		t.Fatal("Default is not one gate with a slot per core")
	}
	// The slots follow GOMAXPROCS.
	auto := New(Config{})
	prev := runtime.GOMAXPROCS(3)
	n := auto.Slots()
	runtime.GOMAXPROCS(prev)
	if n != 3 || auto.Slots() != prev {
		t.Fatalf("slots %d at GOMAXPROCS 3, %d at %d", n, auto.Slots(), prev)
	}
	g := New(Config{Slots: 2})
	for _, w := range []float64{0, -1, MinWeight / 2, MaxWeight * 2} {
		if err := g.SetWeight("a", w); err == nil {
			t.Errorf("weight %g accepted", w)
		}
	}
	if err := g.SetWeight("a", 2.5); err != nil {
		t.Fatal(err)
	}
	if ts := tenantStats(t, g, "a"); ts.Weight != 2.5 || ts.Active {
		t.Fatalf("after SetWeight: %+v", ts)
	}
	if g.Leave("a") {
		t.Fatal("Leave without Join succeeded")
	}
}

func TestGateAcquireRelease(t *testing.T) {
	clk := &fakeClock{}
	g := New(Config{Slots: 2, Now: clk.now})
	ctx := context.Background()
	g.Join("a")
	r1, err := g.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	third := acquireAsync(ctx, g, "a")
	waitFor(t, "a third call to queue", func() bool { return tenantStats(t, g, "a").Waiting == 1 })
	clk.advance(5 * time.Millisecond)
	// Calls in progress count in Busy.
	if ts := tenantStats(t, g, "a"); ts.Busy != 10*time.Millisecond || ts.VirtualTime != float64(10*time.Millisecond) {
		t.Fatalf("two calls 5 ms in: busy %v, virtual time %g", ts.Busy, ts.VirtualTime)
	}
	r1()
	r1() // a second call does nothing
	r3 := <-third
	if r3 == nil {
		t.Fatal("the queued call failed")
	}
	clk.advance(time.Millisecond)
	r2()
	r3()
	st := g.Stats()
	ts := st.Tenants[0]
	if st.Running != 0 || ts.Calls != 3 || ts.Waits != 1 || ts.Busy != 12*time.Millisecond ||
		ts.Waited != 5*time.Millisecond || ts.MaxWait != 5*time.Millisecond || ts.Guaranteed != 2 || ts.Most != 2 {
		t.Fatalf("stats %+v", st)
	}
	if g.Forget("a") {
		t.Fatal("forgot a tenant with a user")
	}
	g.Leave("a")
	if !g.Forget("a") {
		t.Fatal("could not forget an idle tenant")
	}
}

func TestGateCancel(t *testing.T) {
	g := New(Config{Slots: 1})
	rel, err := g.Acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Acquire(done, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.Acquire(ctx, "b")
		errc <- err
	}()
	waitFor(t, "b to queue", func() bool { return tenantStats(t, g, "b").Waiting == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	if ts := tenantStats(t, g, "b"); ts.Canceled != 1 || ts.Waiting != 0 || ts.Running != 0 {
		t.Fatalf("b after its cancel: %+v", ts)
	}
	rel()
	// The slot is free for the next one.
	rel, err = g.Acquire(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	rel()
}

// TestGateCancelRace cancels waiting calls while slots are being given
// back, so that some are granted as their context ends: no slot may leak.
func TestGateCancelRace(t *testing.T) {
	g := New(Config{Slots: 2})
	var wg sync.WaitGroup
	var ok, canceled atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			tenant := fmt.Sprint("t", i%3)
			for range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.Intn(2) == 0 {
					go cancel()
				}
				rel, err := g.Acquire(ctx, tenant)
				if err == nil {
					ok.Add(1)
					runtime.Gosched()
					rel()
				} else {
					canceled.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	st := g.Stats()
	if st.Running != 0 {
		t.Fatalf("%d slots still held", st.Running)
	}
	var calls, waiting uint64
	for _, ts := range st.Tenants {
		calls += ts.Calls
		waiting += uint64(ts.Waiting)
	}
	// A call granted as its context ended counts as a call but returns an
	// error, so calls ≥ successes.
	if waiting != 0 || calls < uint64(ok.Load()) {
		t.Fatalf("waiting %d, calls %d, successes %d", waiting, calls, ok.Load())
	}
	for range 2 {
		if _, err := g.Acquire(context.Background(), "t0"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d calls, %d cancelled", ok.Load(), canceled.Load())
}

// TestGateSharesUnderLoad runs many goroutines of three tenants through a
// two-slot gate and checks, inside every call, that no tenant holds more
// than its share and no more than two calls run.
func TestGateSharesUnderLoad(t *testing.T) {
	g := New(Config{Slots: 2})
	tenants := []string{"a", "b", "c"}
	for _, n := range tenants {
		g.Join(n)
	}
	var total atomic.Int64
	per := map[string]*atomic.Int64{}
	for _, n := range tenants {
		per[n] = &atomic.Int64{}
	}
	var violations atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		n := tenants[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				rel, err := g.Acquire(context.Background(), n)
				if err != nil {
					t.Error(err)
					return
				}
				if total.Add(1) > 2 || per[n].Add(1) > 1 {
					violations.Add(1)
				}
				runtime.Gosched()
				per[n].Add(-1)
				total.Add(-1)
				rel()
			}
		}()
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d calls ran beyond the shares", v)
	}
	for _, ts := range g.Stats().Tenants {
		if ts.Calls != 2000 || ts.Running != 0 || ts.Waiting != 0 {
			t.Fatalf("tenant %+v", ts)
		}
	}
}

// TestGateLoopingTenant: a tenant whose calls never return (until the end
// of the test) holds one of two slots, however many it asks for; another
// tenant's calls keep running on the other at once.
func TestGateLoopingTenant(t *testing.T) {
	g := New(Config{Slots: 2})
	g.Join("hostile")
	g.Join("good")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held []func()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := g.Acquire(ctx, "hostile")
			if err == nil {
				mu.Lock()
				held = append(held, rel)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "the hostile calls to queue", func() bool {
		ts := tenantStats(t, g, "hostile")
		return ts.Running == 1 && ts.Waiting == 7
	})
	for i := range 1000 {
		rel, err := g.Acquire(ctx, "good")
		if err != nil {
			t.Fatal(err)
		}
		rel()
		if i%100 == 0 {
			if ts := tenantStats(t, g, "hostile"); ts.Running != 1 {
				t.Fatalf("hostile holds %d slots", ts.Running)
			}
		}
	}
	if ts := tenantStats(t, g, "good"); ts.Waits != 0 {
		t.Fatalf("good waited %d times", ts.Waits)
	}
	// When good leaves, hostile may have both slots.
	g.Leave("good")
	waitFor(t, "hostile to take the free slot", func() bool { return tenantStats(t, g, "hostile").Running == 2 })
	cancel()
	wg.Wait()
	for _, rel := range held {
		rel()
	}
	if st := g.Stats(); st.Running != 0 {
		t.Fatalf("%d slots held after the end", st.Running)
	}
}

// TestGateJoinWaitsForASlot: a tenant alone holds both slots; another
// joins and asks; the first slot given back is the newcomer's.
func TestGateJoinWaitsForASlot(t *testing.T) {
	g := New(Config{Slots: 2})
	ctx := context.Background()
	r1, _ := g.Acquire(ctx, "a")
	r2, _ := g.Acquire(ctx, "a")
	g.Join("b")
	b := acquireAsync(ctx, g, "b")
	waitFor(t, "b to queue", func() bool { return tenantStats(t, g, "b").Waiting == 1 })
	a := acquireAsync(ctx, g, "a")
	waitFor(t, "a to queue", func() bool { return tenantStats(t, g, "a").Waiting == 1 })
	r1()
	rb := <-b
	if rb == nil {
		t.Fatal("b's call failed")
	}
	if ts := tenantStats(t, g, "a"); ts.Running != 1 || ts.Waiting != 1 {
		t.Fatalf("a: %+v", ts)
	}
	r2()
	ra := <-a
	rb()
	ra()
}

// TestGateSetWeightGrants: raising a weight grants waiting calls at once.
func TestGateSetWeightGrants(t *testing.T) {
	g := New(Config{Slots: 4})
	ctx := context.Background()
	g.Join("a")
	g.Join("b")
	var rels []func()
	for range 2 {
		r, err := g.Acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, r)
	}
	third := acquireAsync(ctx, g, "a")
	waitFor(t, "a's third call to queue", func() bool { return tenantStats(t, g, "a").Waiting == 1 })
	if err := g.SetWeight("a", 3); err != nil {
		t.Fatal(err)
	}
	r := <-third
	if r == nil {
		t.Fatal("a's third call failed")
	}
	r()
	for _, r := range rels {
		r()
	}
}

// BenchmarkAcquireRelease is the gate's cost per guest call, uncontended,
// with a few tenants registered.
func BenchmarkAcquireRelease(b *testing.B) {
	g := New(Config{Slots: 2})
	for _, n := range []string{"a", "b", "c", "d"} {
		g.Join(n)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		rel, err := g.Acquire(ctx, "a")
		if err != nil {
			b.Fatal(err)
		}
		rel()
	}
}

// KeepHostP raises GOMAXPROCS by one, once, and keeps the gate's slots at
// the Ps there were; a gate with set slots, or a process whose GOMAXPROCS
// the environment sets, is left alone.
func TestKeepHostP(t *testing.T) {
	n := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(n)

	t.Setenv("GOMAXPROCS", "")
	g := New(Config{})
	if !g.KeepHostP() {
		t.Fatal("KeepHostP did nothing on a gate following GOMAXPROCS")
	}
	if got := runtime.GOMAXPROCS(0); got != n+1 {
		t.Fatalf("GOMAXPROCS %d after KeepHostP, want %d", got, n+1)
	}
	if got := g.Slots(); got != n {
		t.Fatalf("%d slots after KeepHostP, want %d (one per P there was)", got, n)
	}
	if g.KeepHostP() || runtime.GOMAXPROCS(0) != n+1 {
		t.Fatalf("a second KeepHostP raised GOMAXPROCS again, to %d", runtime.GOMAXPROCS(0))
	}
	// GOMAXPROCS changed by others later: the gate keeps one P spare.
	runtime.GOMAXPROCS(n + 3)
	if got := g.Slots(); got != n+2 {
		t.Fatalf("%d slots at GOMAXPROCS %d, want %d", got, n+3, n+2)
	}
	runtime.GOMAXPROCS(n)

	if New(Config{Slots: 3}).KeepHostP() || runtime.GOMAXPROCS(0) != n {
		t.Fatal("KeepHostP raised GOMAXPROCS for a gate with set slots")
	}
	t.Setenv("GOMAXPROCS", strconv.Itoa(n))
	if New(Config{}).KeepHostP() || runtime.GOMAXPROCS(0) != n {
		t.Fatal("KeepHostP raised GOMAXPROCS that the environment sets")
	}
}
