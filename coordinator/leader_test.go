package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

// TestLeaderElection runs the lease against a real JetStream bucket with
// two servers and a clock the test moves: the first takes the free lease
// at once, the second is a standby until the first stops renewing for a
// period, then takes over at a higher epoch; the first, resumed, cannot
// renew, is deposed, and its job-record writes are refused.
func TestLeaderElection(t *testing.T) {
	connect := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	clockA, clockB := time.Now(), time.Now()
	a, err := openLeader(ctx, connect("a"), "a", ttl, 1, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	b, err := openLeader(ctx, connect("b"), "b", ttl, 1, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return clockA }
	b.now = func() time.Time { return clockB }

	if ok, err := a.step(ctx, false); err != nil || !ok {
		t.Fatalf("a free lease was not taken at once: %v %v", ok, err)
	}
	epochA, err := a.check()
	if err != nil || epochA == 0 {
		t.Fatalf("the leader's check: %d %v", epochA, err)
	}
	if ok, err := b.step(ctx, false); err != nil || ok {
		t.Fatalf("the second server leads beside the first: %v %v", ok, err)
	}
	if h, leading := b.info(); leading || h.ID != "a" || h.Epoch != epochA {
		t.Fatalf("the standby sees %+v (leading %v), want a at epoch %d", h, leading, epochA)
	}
	if _, err := b.check(); !errors.Is(err, errNotLeading) {
		t.Fatalf("a standby may act: %v", err)
	}
	// a renews on time: b never takes over.
	for i := 0; i < 6; i++ {
		clockA, clockB = clockA.Add(ttl/3), clockB.Add(ttl/3)
		if err := a.renew(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.step(ctx, false); err != nil || ok {
			t.Fatalf("the standby took a renewed lease: %v %v", ok, err)
		}
	}
	// a pauses: b sees the lease unchanged for a period and takes it.
	clockB = clockB.Add(ttl)
	ok, err := b.step(ctx, false)
	if err != nil || !ok {
		t.Fatalf("the standby did not take a lapsed lease: %v %v", ok, err)
	}
	epochB, err := b.check()
	if err != nil || epochB <= epochA {
		t.Fatalf("the new leader's epoch %d (err %v), the old one's %d", epochB, err, epochA)
	}
	// a resumes past its period: it must renew before it acts, and the
	// renewal finds the lease taken.
	clockA = clockA.Add(time.Hour)
	if _, err := a.check(); !errors.Is(err, errDeposed) {
		t.Fatalf("the paused leader's check after resuming: %v, want deposed", err)
	}
	if h, leading := a.info(); leading || h.ID != "b" {
		t.Fatalf("the deposed leader sees %+v (leading %v)", h, leading)
	}

	// Job records: the new leader's write fences the old one's off.
	kv, err := OpenJobs(ctx, connect("jobs"), 1)
	if err != nil {
		t.Fatal(err)
	}
	storeA, storeB := newJobStore(kv, slog.Default()), newJobStore(kv, slog.Default())
	defer storeA.close(0)
	defer storeB.close(0)
	storeA.fence = func() (uint64, error) { return epochA, nil } // as if its check had passed
	storeB.fence = b.check
	spec := func(epoch uint64, state string) []byte {
		b, _ := json.Marshal(JobSpec{JobID: "j", State: state, Epoch: epoch})
		return b
	}
	if err := storeA.write("j", spec(epochA, transport.JobRunning)); err != nil {
		t.Fatalf("the first write: %v", err)
	}
	if err := storeB.write("j", spec(epochB, transport.JobRunning)); err != nil {
		t.Fatalf("the new leader's write over the old one's: %v", err)
	}
	if err := storeA.write("j", spec(epochA, transport.JobCanceled)); !errors.Is(err, errDeposed) {
		t.Fatalf("the old leader's write after the new one's: %v, want refused", err)
	}
	s, err := getSpec(ctx, kv, "j")
	if err != nil || s.Epoch != epochB || s.State != transport.JobRunning {
		t.Fatalf("stored %+v %v: want the new leader's", s, err)
	}
	// Releasing: the deposed leader deletes nothing; the leader's release
	// frees the lease for a standby at once.
	a.release()
	if ok, err := a.step(ctx, false); err != nil || ok {
		t.Fatalf("the deposed server took the lease back: %v %v", ok, err)
	}
	b.release()
	if ok, err := a.step(ctx, false); err != nil || !ok {
		t.Fatalf("a released lease was not taken at once: %v %v", ok, err)
	}
	if e, _ := a.check(); e <= epochB {
		t.Fatalf("epoch %d after %d", e, epochB)
	}
}
