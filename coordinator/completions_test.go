package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/transport"

	"github.com/nats-io/nats.go"
)

// TestCompletionsRecordFencesEpochs: two coordinators' views of the
// completions record, at epochs 1 and 2. Once the leader of epoch 2 has
// stamped the job (its take-over), the leader of epoch 1 completes
// nothing, although it checked its lease before (a pause between the
// check and the write), and the record never goes back.
func TestCompletionsRecordFencesEpochs(t *testing.T) {
	url, _ := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *idCounter {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ids, err := openIDCounter(ctx, nc, 1)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	one, two := open(), open()
	for _, id := range []int64{1, 2, 3} {
		if err := one.complete(ctx, "job", id, 1); err != nil {
			t.Fatalf("leader 1 completes %d: %v", id, err)
		}
	}
	// A savepoint that completes after a later checkpoint: the record
	// keeps the highest id.
	if err := one.complete(ctx, "job", 2, 1); err != nil {
		t.Fatal(err)
	}
	if n, ep, _, err := two.read(ctx, completedKey("job")); err != nil || n != 3 || ep != 1 {
		t.Fatalf("the record: %d@%d %v, want 3@1", n, ep, err)
	}
	if _, err := two.stamp(ctx, "job", 2); err != nil {
		t.Fatal(err)
	}
	if err := one.complete(ctx, "job", 4, 1); !errors.Is(err, errDeposed) {
		t.Fatalf("the deposed leader completes checkpoint 4: %v, want errDeposed", err)
	}
	if err := two.complete(ctx, "job", 4, 2); err != nil {
		t.Fatalf("the new leader completes checkpoint 4: %v", err)
	}
	if err := one.complete(ctx, "job", 5, 1); !errors.Is(err, errDeposed) {
		t.Fatalf("the deposed leader completes checkpoint 5: %v, want errDeposed", err)
	}
	if n, ep, _, err := one.read(ctx, completedKey("job")); err != nil || n != 4 || ep != 2 {
		t.Fatalf("the record: %d@%d %v, want 4@2", n, ep, err)
	}
	// The record is no job's counter.
	if n, _, err := one.current(ctx, "job"); err != nil || n != 0 {
		t.Fatalf("the counter of job: %d %v, want 0", n, err)
	}
}

// TestDeposedLeaderCompletesNoCheckpoint: a checkpoint triggered by the
// leader is acknowledged after a second coordinator, at a later epoch, has
// taken the job over, while the first still believes its lease valid (as
// one paused between its lease check and the write): it does not complete
// (no metadata, no notification), and the first coordinator learns that
// it is deposed.
func TestDeposedLeaderCompletesNoCheckpoint(t *testing.T) {
	deposed := make(chan error, 1)
	c, w, _, id := startOneWith(t, ckptPlan, func(cfg *Config) {
		cfg.Deposed = func(err error) { deposed <- err }
	})
	acks := ackCheckpoints(t, w.nc, w.id)
	acks.mu.Lock()
	acks.manual = make(chan transport.CheckpointControl, 16)
	acks.mu.Unlock()
	// A trigger sent before the subscription was lost, and would hold
	// back the next one until its timeout: abort it (as startCkptJob does).
	c.mu.Lock()
	d := c.jobs[id].ckpt
	c.mu.Unlock()
	d.abortPending("the test's worker subscribed")
	var ctl transport.CheckpointControl
	select {
	case ctl = <-acks.manual:
	case <-time.After(time.Minute):
		t.Fatal("no checkpoint triggered within a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other, err := openIDCounter(ctx, c.cfg.NATS, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.stamp(ctx, id, c.epoch()+1); err != nil {
		t.Fatal(err)
	}
	for _, task := range ctl.Tasks {
		b, _ := json.Marshal(transport.CheckpointAck{JobID: ctl.JobID, Attempt: ctl.Attempt, Task: task, ID: ctl.ID,
			State: &checkpoint.SubtaskState{Task: task}})
		if err := w.nc.Publish(transport.CheckpointAckSubject(ctl.JobID), b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-deposed:
		if !errors.Is(err, errDeposed) {
			t.Fatalf("deposed by %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the coordinator did not learn within a minute that it was deposed")
	}
	st, err := checkpoint.OpenStorage(CheckpointRoot(c.cfg.DataDir, id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReadMetadata(ctl.ID); err == nil {
		t.Errorf("the deposed leader wrote the metadata of checkpoint %d", ctl.ID)
	}
	acks.mu.Lock()
	notified := slices.Contains(acks.completed, ctl.ID)
	acks.mu.Unlock()
	if notified {
		t.Errorf("the deposed leader notified the completion of checkpoint %d", ctl.ID)
	}
}
