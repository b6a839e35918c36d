package host

import (
	"context"
	"testing"
	"time"
)

// TestCallStatsCountsCalls runs operator kv (see kvWAT) with CallStats and
// checks the calls by kind and the host functions its guest called: per
// record of the batch, state_get, state_put, emit and timer_register, and
// output_index and emit_batch once per call.
func TestCallStatsCountsCalls(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, kvWAT)
	inst := newInstance(t, m)
	st := &CallStats{}
	op := inst.OperatorWithStats(st)
	// A second slot without stats: its calls must not land in st.
	other := inst.Operator()
	spec := testSpec()
	spec.Operator = "kv"
	if err := op.Open(spec, newFakeServices()); err != nil {
		t.Fatal(err)
	}
	if err := other.Open(spec, newFakeServices()); err != nil {
		t.Fatal(err)
	}
	in := batchOf(rec(0, 100, "a", "x"), rec(0, 200, "b", "y"), rec(0, 300, "a", "z"))
	for range 2 {
		if err := op.Process(in, &fakeCollector{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Process(in, &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	if err := op.OnTimers(batchOf(rec(0, 110, "a", "")), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}

	calls := map[string]CallSnapshot{}
	for _, c := range st.Calls() {
		calls[c.Call] = c
	}
	if c := calls["process"]; c.Count != 2 || c.Sum <= 0 || c.Buckets[len(c.Buckets)-1] != 2 {
		t.Errorf("process calls: %+v; want 2 with a positive sum, all within 10s", c)
	}
	if c := calls["open"]; c.Count != 1 {
		t.Errorf("open calls: %+v, want 1", c)
	}
	if c := calls["on_timer"]; c.Count != 1 {
		t.Errorf("on_timer calls: %+v, want 1", c)
	}
	for _, c := range calls {
		for k := 1; k < len(c.Buckets); k++ {
			if c.Buckets[k] < c.Buckets[k-1] {
				t.Errorf("%s: buckets not cumulative: %v", c.Call, c.Buckets)
			}
		}
	}
	host := st.HostCalls()
	for fn, want := range map[string]int64{"state_register": 1, "state_get": 6, "state_put": 6, "emit": 6, "timer_register": 6, "output_index": 2, "emit_batch": 2} {
		if host[fn] < want {
			t.Errorf("host calls of %s: %d, want at least %d (all: %v)", fn, host[fn], want, host)
		}
	}
	if host["state_get"] != 6 || host["state_put"] != 6 {
		t.Errorf("state_get %d, state_put %d: want 6 each (the slot without stats must not count)", host["state_get"], host["state_put"])
	}
}

func TestLatencyBuckets(t *testing.T) {
	st := &CallStats{}
	for _, d := range []time.Duration{500 * time.Nanosecond, time.Microsecond, 3 * time.Millisecond, time.Minute} {
		st.calls[phaseProcess].observe(d)
	}
	got := st.Calls()
	if len(got) != 1 {
		t.Fatalf("%d kinds, want 1", len(got))
	}
	c := got[0]
	// ≤1µs: two; ≤5ms: three; the minute is past every bound.
	le := func(s float64) uint64 {
		for k, b := range CallBuckets {
			if b == s {
				return c.Buckets[k]
			}
		}
		t.Fatalf("no bucket %v", s)
		return 0
	}
	if le(1e-6) != 2 || le(2.5e-3) != 2 || le(5e-3) != 3 || le(10) != 3 || c.Count != 4 {
		t.Errorf("buckets %v, count %d", c.Buckets, c.Count)
	}
	if want := (500*time.Nanosecond + time.Microsecond + 3*time.Millisecond + time.Minute).Seconds(); c.Sum != want {
		t.Errorf("sum %v, want %v", c.Sum, want)
	}
}

// BenchmarkHostCallCounting measures what counting adds to one host call:
// finding the call's instance and slot from its context (callback, what
// every host function does), then counting the call or not.
func BenchmarkHostCallCounting(b *testing.B) {
	i := &Instance{}
	i.cc.init(i)
	i.cur, i.phase = &slot{inst: i}, phaseProcess
	var ctx context.Context = &i.cc
	var n int
	b.Run("callback", func(b *testing.B) {
		for b.Loop() {
			if _, s := callback(ctx); s != nil {
				n++
			}
		}
	})
	b.Run("callback+count", func(b *testing.B) {
		for b.Loop() {
			i, s := callback(ctx)
			i.count(hfStateGet)
			if s != nil {
				n++
			}
		}
	})
	// Once per guest call: the duration and the host calls into CallStats.
	st := &CallStats{}
	b.Run("observe-per-guest-call", func(b *testing.B) {
		for b.Loop() {
			start := time.Now()
			i.hostCalls[hfStateGet] += 1000
			st.observe(phaseProcess, time.Since(start), &i.hostCalls)
		}
	})
	_ = n
}
