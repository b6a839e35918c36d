package state

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingAdmit is an Admit with one grant at a time that records how many
// it gave and the most held at once.
type countingAdmit struct {
	sem     chan struct{}
	granted atomic.Int64
	held    atomic.Int64
	most    atomic.Int64
}

func newCountingAdmit() *countingAdmit { return &countingAdmit{sem: make(chan struct{}, 1)} }

func (a *countingAdmit) admit(ctx context.Context) (func(), error) {
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	a.granted.Add(1)
	n := a.held.Add(1)
	for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.held.Add(-1)
			<-a.sem
		})
	}, nil
}

// With Admit, the writer flushes the memtable itself every half memtable it
// commits, and every compaction, automatic or asked for, runs holding a
// grant, one at a time, which it gives back when it ends. The data reads
// back unchanged.
func TestAdmitGatesFlushesAndCompactions(t *testing.T) {
	a := newCountingAdmit()
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Admit: a.admit})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	if s.flushEvery <= 0 {
		t.Fatalf("flushEvery %d with Admit", s.flushEvery)
	}
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "blob", 2)
	const (
		keys   = 256
		valLen = 8 << 10
		rounds = 6
	)
	value := func(r, k int) []byte { return bytes.Repeat([]byte{byte(r), byte(k)}, valLen/2) }
	for r := range rounds {
		before := s.db.Metrics().Flush.Count
		for k := range keys {
			if err := v.StatePut(h, fmt.Appendf(nil, "k%d", k), nil, value(r, k)); err != nil {
				t.Fatal(err)
			}
		}
		// 2 MiB in one Flush: at least one memtable flush by the writer,
		// done when Flush returns.
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		if after := s.db.Metrics().Flush.Count; after <= before {
			t.Fatalf("round %d: %d memtable flushes before and %d after committing %d bytes, want more (every %d bytes)",
				r, before, after, keys*valLen, s.flushEvery)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
		t.Fatal(err)
	}
	if a.granted.Load() == 0 {
		t.Fatal("a compaction ran without a grant")
	}
	if m := a.most.Load(); m != 1 {
		t.Fatalf("%d grants held at once, want 1", m)
	}
	deadline := time.Now().Add(time.Minute)
	for a.held.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d grants still held after the compaction", a.held.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if n := s.db.Metrics().Levels[0].TablesCount; n != 0 {
		t.Fatalf("%d tables in L0 after a full compaction", n)
	}
	for k := range keys {
		got, err := v.StateGet(h, fmt.Appendf(nil, "k%d", k), nil, nil)
		if err != nil || !bytes.Equal(got, value(rounds-1, k)) {
			t.Fatalf("key %d: err %v, value of %d bytes differs", k, err, len(got))
		}
	}
}

// A store whose compaction waits for a grant that never comes closes all
// the same: closing stops the wait.
func TestAdmitNeverGrantedCloses(t *testing.T) {
	asked := make(chan struct{}, 1)
	never := func(ctx context.Context) (func(), error) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Admit: never})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "blob", 2)
	if err := v.StatePut(h, []byte("k"), nil, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.db.Compact(ctx, []byte{0}, []byte{0xff}, false) }()
	select {
	case <-asked:
	case err := <-done:
		t.Fatalf("the compaction ran without a grant (err %v)", err)
	case <-time.After(time.Minute):
		t.Fatal("no grant asked for within a minute")
	}
	cancel()
	<-done
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close hangs while a compaction waits for a grant")
	}
}
