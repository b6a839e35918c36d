package coordinator

import (
	"slices"
	"testing"
	"time"

	"github.com/wstream/wstream/job"
)

// noted is a report that notes its turn.
type noted struct {
	n    int
	seen *[]int
}

func (r noted) apply(*Coordinator, *jobState, int64) { *r.seen = append(*r.seen, r.n) }

// TestInboxHandsOverInOrder: reports reach the job in the order they were
// put in, once each; a restore point of a driver that is no longer the
// job's changes nothing, one of the job's driver becomes the job's restore
// point.
func TestInboxHandsOverInOrder(t *testing.T) {
	plan, err := job.Parse([]byte(statusPlan))
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{now: time.Now}
	j := &jobState{plan: plan, lc: newLifecycle(plan, false)}
	var seen []int
	for n := range 5 {
		j.inbox.put(noted{n: n, seen: &seen})
	}
	c.drainLocked(j)
	c.drainLocked(j)
	if !slices.Equal(seen, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("handed over %v, want 0..4 once each in order", seen)
	}

	old, cur := &ckptDriver{}, &ckptDriver{}
	j.ckpt = cur
	stale := make(chan struct{})
	j.inbox.put(restorePoint{d: old, dir: "/sp/old", id: 3, done: stale})
	c.drainLocked(j)
	select {
	case <-stale:
		t.Fatal("a stopped driver's restore point was taken")
	default:
	}
	if j.fromSavepoint != "" || j.savepointID != 0 {
		t.Fatalf("restore point %s %d after a stopped driver's report, want none", j.fromSavepoint, j.savepointID)
	}
	done := make(chan struct{})
	j.inbox.put(restorePoint{d: cur, dir: "/sp/7", id: 7, done: done})
	c.drainLocked(j)
	select {
	case <-done:
	default:
		t.Fatal("the driver's restore point was not taken")
	}
	if j.fromSavepoint != "/sp/7" || j.savepointID != 7 {
		t.Fatalf("restore point %s %d, want /sp/7 7", j.fromSavepoint, j.savepointID)
	}
}
