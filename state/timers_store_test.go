package state

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

func mustTimer(t testing.TB, v *VertexState, domain int32, key, ns string, ts int64) {
	t.Helper()
	if err := v.RegisterTimer(domain, []byte(key), []byte(ns), ts); err != nil {
		t.Fatalf("RegisterTimer(%d, %q, %q, %d): %v", domain, key, ns, ts, err)
	}
}

// pop pops the timers of domain up to upTo and renders them as
// "ts:key/ns", checking the batch encoding on the way.
func pop(t testing.TB, v *VertexState, domain int32, upTo int64) []string {
	t.Helper()
	var b abi.Builder
	n, err := v.PopTimers(domain, upTo, &b)
	if err != nil {
		t.Fatalf("PopTimers(%d, %d): %v", domain, upTo, err)
	}
	recs, err := abi.Decode(b.Bytes())
	if err != nil {
		t.Fatalf("PopTimers built a malformed batch: %v", err)
	}
	if len(recs) != n {
		t.Fatalf("PopTimers returned %d, batch holds %d", n, len(recs))
	}
	var out []string
	for _, r := range recs {
		if r.Port != uint32(domain) {
			t.Fatalf("timer record port %d, want domain %d", r.Port, domain)
		}
		out = append(out, fmt.Sprintf("%d:%s/%s", r.Timestamp, r.Key, r.Value))
	}
	return out
}

func expectTimers(t testing.TB, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("timers = %q, want %q", got, want)
	}
}

func TestTimersFireInOrder(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	if _, ok := v.NextTimer(abi.TimeEvent); ok {
		t.Fatal("NextTimer on an empty queue reported a timer")
	}
	mustTimer(t, v, abi.TimeEvent, "b", "", 10)
	mustTimer(t, v, abi.TimeEvent, "a", "2", 10)
	mustTimer(t, v, abi.TimeEvent, "a", "1", 10)
	mustTimer(t, v, abi.TimeEvent, "z", "", -5)
	mustTimer(t, v, abi.TimeEvent, "c", "", math.MinInt64)
	mustTimer(t, v, abi.TimeEvent, "a", "1", 20)
	mustTimer(t, v, abi.TimeEvent, "b", "", 10) // duplicate: one timer
	mustTimer(t, v, abi.TimeProcessing, "p", "", 1)

	if ts, ok := v.NextTimer(abi.TimeEvent); !ok || ts != math.MinInt64 {
		t.Fatalf("NextTimer = %d, %t", ts, ok)
	}
	expectTimers(t, pop(t, v, abi.TimeEvent, -6), fmt.Sprintf("%d:c/", int64(math.MinInt64)))
	expectTimers(t, pop(t, v, abi.TimeEvent, 10), "-5:z/", "10:a/1", "10:a/2", "10:b/")
	expectTimers(t, pop(t, v, abi.TimeEvent, 10))
	if ts, ok := v.NextTimer(abi.TimeEvent); !ok || ts != 20 {
		t.Fatalf("NextTimer = %d, %t; want 20", ts, ok)
	}
	// A timer registered after a pop, at or before upTo, is found by the next call.
	mustTimer(t, v, abi.TimeEvent, "late", "", 3)
	expectTimers(t, pop(t, v, abi.TimeEvent, 10), "3:late/")
	expectTimers(t, pop(t, v, abi.TimeEvent, abi.MaxWatermark), "20:a/1")
	if _, ok := v.NextTimer(abi.TimeEvent); ok {
		t.Fatal("NextTimer after popping everything reported a timer")
	}
	// Domains are separate.
	expectTimers(t, pop(t, v, abi.TimeProcessing, 1), "1:p/")
}

func TestDeleteTimer(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	for i := range 10 {
		mustTimer(t, v, abi.TimeEvent, "k", fmt.Sprint(i), int64(i))
	}
	for _, i := range []int{0, 5, 9} {
		if err := v.DeleteTimer(abi.TimeEvent, []byte("k"), []byte(fmt.Sprint(i)), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Absent timers: wrong time, wrong domain, never registered.
	if err := v.DeleteTimer(abi.TimeEvent, []byte("k"), []byte("1"), 2); err != nil {
		t.Fatal(err)
	}
	if err := v.DeleteTimer(abi.TimeProcessing, []byte("k"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	expectTimers(t, pop(t, v, abi.TimeEvent, 100), "1:k/1", "2:k/2", "3:k/3", "4:k/4", "6:k/6", "7:k/7", "8:k/8")
}

func TestTimerDomainChecked(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	for _, d := range []int32{-1, 2, 255} {
		if err := v.RegisterTimer(d, []byte("k"), nil, 1); !errors.Is(err, operator.ErrBadArgument) {
			t.Errorf("RegisterTimer(domain %d) = %v", d, err)
		}
		if err := v.DeleteTimer(d, []byte("k"), nil, 1); !errors.Is(err, operator.ErrBadArgument) {
			t.Errorf("DeleteTimer(domain %d) = %v", d, err)
		}
		if _, err := v.PopTimers(d, 1, &abi.Builder{}); !errors.Is(err, operator.ErrBadArgument) {
			t.Errorf("PopTimers(domain %d) = %v", d, err)
		}
		if _, ok := v.NextTimer(d); ok {
			t.Errorf("NextTimer(domain %d) reported a timer", d)
		}
	}
}

// Timers are state: they survive a reopen, and a store that owns fewer key
// groups loads only the timers of its own.
func TestTimersPersistAndReloadOwnedKeyGroups(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("w", true)
	low, high := keyIn(t, "low", 3), keyIn(t, "high", 100)
	mustTimer(t, v, abi.TimeEvent, string(low), "ns", 7)
	mustTimer(t, v, abi.TimeEvent, string(high), "ns", 5)
	mustTimer(t, v, abi.TimeProcessing, string(low), "", -1)
	mustTimer(t, v, abi.TimeEvent, string(low), "gone", 1)
	mustTimer(t, v, abi.TimeEvent, string(low), "fired", 0)
	flush(t, s)
	if err := v.DeleteTimer(abi.TimeEvent, low, []byte("gone"), 1); err != nil {
		t.Fatal(err)
	}
	expectTimers(t, pop(t, v, abi.TimeEvent, 0), "0:"+string(low)+"/fired")
	other := s.Vertex("other", true)
	mustTimer(t, other, abi.TimeEvent, string(high), "", 9)
	closeStore(t, s) // Close flushes the deletions and the last registration

	s = openStore(t, dir, fullRange)
	v = s.Vertex("w", true)
	expectTimers(t, pop(t, v, abi.TimeProcessing, abi.MaxWatermark), "-1:"+string(low)+"/")
	expectTimers(t, pop(t, v, abi.TimeEvent, abi.MaxWatermark), "5:"+string(high)+"/ns", "7:"+string(low)+"/ns")
	expectTimers(t, pop(t, s.Vertex("other", true), abi.TimeEvent, abi.MaxWatermark), "9:"+string(high)+"/")
	// Close without popping persisted: the pops above are flushed by Close.
	closeStore(t, s)
	s = openStore(t, dir, fullRange)
	expectTimers(t, pop(t, s.Vertex("w", true), abi.TimeEvent, abi.MaxWatermark))
	mustTimer(t, s.Vertex("w", true), abi.TimeEvent, string(low), "a", 1)
	mustTimer(t, s.Vertex("w", true), abi.TimeEvent, string(high), "b", 2)
	closeStore(t, s)

	s = openStore(t, dir, abi.KeyGroupRange{Start: 0, End: 63})
	defer closeStore(t, s)
	v = s.Vertex("w", true)
	expectTimers(t, pop(t, v, abi.TimeEvent, abi.MaxWatermark), "1:"+string(low)+"/a")
	if err := v.RegisterTimer(abi.TimeEvent, high, nil, 1); !errors.Is(err, operator.ErrKeyGroup) {
		t.Fatalf("RegisterTimer for a key group not owned after reopen: %v", err)
	}
}

func TestTimerSteadyStateDoesNotAllocate(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	key, ns := []byte("key"), []byte("window")
	mustTimer(t, v, abi.TimeEvent, "key", "window", 100)
	// Re-registering an existing timer is the per-record case of windowing.
	if n := testing.AllocsPerRun(100, func() { _ = v.RegisterTimer(abi.TimeEvent, key, ns, 100) }); n != 0 {
		t.Fatalf("re-registering a timer: %v allocations, want 0", n)
	}
}

func TestPopTimersIsCapped(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("w", true)
	const n = MaxTimersPerPop + 10
	for i := 0; i < n; i++ {
		mustTimer(t, v, abi.TimeEvent, fmt.Sprintf("k%05d", i), "", int64(i))
	}
	var b abi.Builder
	got, err := v.PopTimers(abi.TimeEvent, abi.MaxWatermark, &b)
	if err != nil || got != MaxTimersPerPop || b.Len() != MaxTimersPerPop {
		t.Fatalf("first pop = %d (%d in batch), %v; want %d", got, b.Len(), err, MaxTimersPerPop)
	}
	b.Reset()
	got, err = v.PopTimers(abi.TimeEvent, abi.MaxWatermark, &b)
	if err != nil || got != 10 {
		t.Fatalf("second pop = %d, %v; want the remaining 10", got, err)
	}
	recs, _ := abi.Decode(b.Bytes())
	if recs[0].Timestamp != MaxTimersPerPop {
		t.Fatalf("second pop starts at %d, want %d (time order kept)", recs[0].Timestamp, MaxTimersPerPop)
	}
}
