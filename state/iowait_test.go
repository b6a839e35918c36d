package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

var _ operator.StorageWaiter = (*VertexState)(nil)

// TestStorageWaitCountsPebbleReadsAndWrites: reads that miss the cache and
// the commits of a Flush add to StorageWait; a read the cache answers adds
// nothing.
func TestStorageWaitCountsPebbleReadsAndWrites(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("counter", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	if w := v.StorageWait(); w != 0 {
		t.Fatalf("StorageWait of a new store = %v, want 0", w)
	}
	for i := range 1000 {
		mustPut(t, v, h, fmt.Sprint("k", i), "", "1")
	}
	flush(t, s)
	if afterFlush := v.StorageWait(); afterFlush <= 0 {
		t.Fatalf("StorageWait after a Flush that committed 1000 entries = %v, want > 0", afterFlush)
	}
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("counter", true)
	h = mustRegister(t, v, "count", abi.StateValue)
	before := v.StorageWait()
	for i := range 1000 {
		expectGet(t, v, h, fmt.Sprint("k", i), "", "1", false)
	}
	missed := v.StorageWait()
	if missed <= before {
		t.Fatalf("StorageWait after 1000 reads from Pebble = %v, want more than %v", missed, before)
	}
	expectGet(t, v, h, "k1", "", "1", false)
	if w := v.StorageWait(); w != missed {
		t.Fatalf("a cached read changed StorageWait from %v to %v", missed, w)
	}
}

// TestIOClockCountsAWaitInProgress: a reader on another goroutine sees a
// wait that has not ended, and nested waits count once.
func TestIOClockCountsAWaitInProgress(t *testing.T) {
	var c ioClock
	c.enter()
	c.enter() // nested: one wait
	deadline := time.Now().Add(time.Minute)
	for c.waited() < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("a wait in progress is not counted")
		}
		time.Sleep(time.Millisecond)
	}
	c.leave()
	if c.since.Load() == 0 {
		t.Fatal("the inner leave ended the outer wait")
	}
	c.leave()
	ended := c.waited()
	if ended < 20*time.Millisecond || c.since.Load() != 0 {
		t.Fatalf("after the wait: waited %v, since %d", ended, c.since.Load())
	}
	if again := c.waited(); again != ended {
		t.Fatalf("waited grew from %v to %v with no wait in progress", ended, again)
	}
}
