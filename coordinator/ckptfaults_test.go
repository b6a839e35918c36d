package coordinator

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/transport"
)

// ckptPlan is onePlan checkpointing every 50 ms, with no checkpoint
// failure tolerated (the default).
var ckptPlan = strings.Replace(onePlan, `"restart"`, `"checkpoint":{"interval":50},"restart"`, 1)

// ackingWorker answers the checkpoint messages of the fake worker w as a
// worker whose subtasks are all sources would: it acknowledges each
// trigger for each subtask it names at once with empty state, and records the completions, aborts and stops it hears.
type ackingWorker struct {
	mu        sync.Mutex
	triggers  []int64
	completed []int64
	stops     []int64
	// manual, when set, receives the triggers instead: the test answers.
	manual chan transport.CheckpointControl
	// state, when set, gives the state a task acknowledges a checkpoint
	// with (nil: empty).
	state func(ctl transport.CheckpointControl, task checkpoint.TaskID) *checkpoint.SubtaskState
}

func ackCheckpoints(t *testing.T, nc *nats.Conn, worker string) *ackingWorker {
	t.Helper()
	a := &ackingWorker{}
	sub, err := nc.Subscribe(transport.WorkerCheckpointSubject(worker), func(m *nats.Msg) {
		var ctl transport.CheckpointControl
		if json.Unmarshal(m.Data, &ctl) != nil {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		switch ctl.Action {
		case transport.CheckpointTrigger:
			a.triggers = append(a.triggers, ctl.ID)
			if a.manual != nil {
				select {
				case a.manual <- ctl:
				default:
				}
				return
			}
			for _, task := range ctl.Tasks {
				ack := transport.CheckpointAck{JobID: ctl.JobID, Attempt: ctl.Attempt, Task: task, ID: ctl.ID,
					State: &checkpoint.SubtaskState{Task: task}}
				if a.state != nil {
					if st := a.state(ctl, task); st != nil {
						ack.State = st
					}
				}
				b, _ := json.Marshal(ack)
				_ = nc.Publish(transport.CheckpointAckSubject(ctl.JobID), b)
			}
		case transport.CheckpointComplete:
			a.completed = append(a.completed, ctl.ID)
		case transport.CheckpointStop:
			a.stops = append(a.stops, ctl.ID)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

// startCkptJob is startOne with ckptPlan, whose checkpoints a fake worker
// acknowledges.
func startCkptJob(t *testing.T) (*Coordinator, *fakeWorker, string, *ackingWorker) {
	t.Helper()
	return startCkptJobPlan(t, ckptPlan)
}

// startCkptJobPlan is startCkptJob with plan.
func startCkptJobPlan(t *testing.T, plan string) (*Coordinator, *fakeWorker, string, *ackingWorker) {
	t.Helper()
	c, w, _, id := startOne(t, plan)
	acks := ackCheckpoints(t, w.nc, w.id)
	// A trigger sent before the subscription was lost: abort it (an
	// abort that is no failure) rather than wait for its timeout.
	c.mu.Lock()
	d := c.jobs[id].ckpt
	c.mu.Unlock()
	d.abortPending("the test's worker subscribed")
	return c, w, id, acks
}

func (a *ackingWorker) count() (triggers, completed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.triggers), len(a.completed)
}

func jobLifecycle(c *Coordinator, id string) (state string, attempt, restarts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[id]
	return j.lc.State().String(), j.lc.Attempt(), j.lc.Restarts()
}

// TestKVOutageAbortsTriggerWithoutFailing: while the checkpoint id bucket
// is unreachable, each trigger is aborted because its id cannot be
// reserved; with no checkpoint failure tolerated the job must still run
// its first attempt (no failover), and checkpoints complete again once the
// bucket is back.
func TestKVOutageAbortsTriggerWithoutFailing(t *testing.T) {
	c, w, id, acks := startCkptJob(t)
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 2 })

	js, err := jetstream.New(w.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, transport.CheckpointIDsBucket); err != nil {
		t.Fatal(err)
	}
	// Triggers fail at their reservation: aborted, "trigger failed".
	waitUntil(t, "no trigger failed while the bucket was gone", func() bool {
		hist, _ := ReadHistory(c.cfg.DataDir, id)
		n := 0
		for _, h := range hist {
			if h.Status == "aborted" && strings.Contains(h.Reason, "trigger failed") {
				n++
			}
		}
		return n >= 3
	})
	if state, attempt, restarts := jobLifecycle(c, id); state != "RUNNING" || attempt != 0 || restarts != 0 {
		t.Fatalf("job %s at attempt %d after %d restarts while the bucket was gone; want RUNNING at attempt 0", state, attempt, restarts)
	}
	_, before := acks.count()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: transport.CheckpointIDsBucket, History: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "no checkpoint completed once the bucket was back", func() bool { _, n := acks.count(); return n >= before+2 })
	if state, attempt, restarts := jobLifecycle(c, id); state != "RUNNING" || attempt != 0 || restarts != 0 {
		t.Fatalf("job %s at attempt %d after %d restarts; want RUNNING at attempt 0", state, attempt, restarts)
	}
}

// TestStopSavepointIsRestorePoint: once a stop with savepoint completed
// (its sinks committed on it), a failure of the stopping subtasks fails
// over to that savepoint, not to the checkpoint before it (FLIP-193), and
// the job's spec names it for a coordinator that resumes the job.
func TestStopSavepointIsRestorePoint(t *testing.T) {
	c, w, id, acks := startCkptJob(t)
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 1 })

	dir := t.TempDir()
	replies := make(chan transport.SavepointReply, 1)
	c.savepoint(transport.SavepointRequest{JobID: id, Dir: dir, Stop: true}, caller{}, func(r transport.SavepointReply) { replies <- r })
	var sp transport.SavepointReply
	select {
	case sp = <-replies:
	case <-time.After(30 * time.Second):
		t.Fatal("the stop's savepoint never completed")
	}
	if sp.Error != "" || sp.ID == 0 {
		t.Fatalf("stop with savepoint: %+v", sp)
	}
	if _, err := os.Stat(sp.Dir); err != nil {
		t.Fatalf("savepoint directory: %v", err)
	}
	// The subtask fails while it stops: the job restarts.
	w.report(t, id, 0, transport.TaskFailed)
	d := nextDeploy(t, w)
	if d.Attempt != 1 {
		t.Fatalf("deployment of attempt %d, want 1", d.Attempt)
	}
	if d.RestoreID != sp.ID || d.SavepointRoot != sp.Dir {
		t.Fatalf("the restart restores %d from %q; want savepoint %d from %s", d.RestoreID, d.SavepointRoot, sp.ID, sp.Dir)
	}
	c.mu.Lock()
	spec := c.specLocked(c.jobs[id], c.jobs[id].info.State)
	c.mu.Unlock()
	if spec.FromSavepoint != sp.Dir || spec.SavepointID != sp.ID {
		t.Fatalf("spec restores %q (%d); want the savepoint %s (%d)", spec.FromSavepoint, spec.SavepointID, sp.Dir, sp.ID)
	}
}

// sharedFile opens job id's checkpoint storage and returns put, which
// stores a shared file name holding content there (reusing it once it
// exists, as a subtask does) and returns its handle.
func sharedFile(t *testing.T, c *Coordinator, id, name, content string) (*checkpoint.Storage, func() checkpoint.FileHandle) {
	t.Helper()
	st, err := checkpoint.OpenStorage(CheckpointRoot(c.cfg.DataDir, id))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := checkpoint.FileSHA256(src)
	if err != nil {
		t.Fatal(err)
	}
	return st, func() checkpoint.FileHandle {
		h, _, err := st.PutShared(src, sum)
		if err != nil {
			t.Fatal(err)
		}
		h.Name = name
		return h
	}
}

// sharedPlan runs two subtasks (tasks 0/0 and 0/1) with two periodic
// checkpoints pending at once and any number of failed checkpoints
// tolerated.
var sharedPlan = strings.Replace(strings.Replace(onePlan, `"parallelism":1`, `"parallelism":2`, 1),
	`"restart"`, `"checkpoint":{"interval":50,"maxConcurrent":2,"tolerableFailures":-1},"restart"`, 1)

// TestSharedFileOfPendingCheckpointKept: with two checkpoints pending, a
// shared file uploaded for checkpoint n (acknowledged by one subtask) and
// reused by n+1 (whose acks are still to come) must survive n's abort,
// so that n+1 completes with every file it references.
func TestSharedFileOfPendingCheckpointKept(t *testing.T) {
	c, w, _, id := startOne(t, sharedPlan)
	acks := ackCheckpoints(t, w.nc, w.id)
	acks.mu.Lock()
	acks.manual = make(chan transport.CheckpointControl, 64)
	acks.mu.Unlock()
	c.mu.Lock()
	d := c.jobs[id].ckpt
	c.mu.Unlock()
	pending := func(cid int64) (is bool) {
		d.do(func() { is = slices.Contains(d.sm.Pending(), cid) })
		return is
	}
	next := func() transport.CheckpointControl {
		t.Helper()
		for {
			select {
			case ctl := <-acks.manual:
				if ctl.Kind == checkpoint.KindCheckpoint && pending(ctl.ID) {
					return ctl
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no trigger came")
			}
		}
	}
	answer := func(ctl transport.CheckpointControl, task checkpoint.TaskID, st *checkpoint.SubtaskState, decline string) {
		t.Helper()
		b, _ := json.Marshal(transport.CheckpointAck{JobID: ctl.JobID, Attempt: ctl.Attempt, Task: task, ID: ctl.ID, State: st, Decline: decline})
		if err := w.nc.Publish(transport.CheckpointAckSubject(ctl.JobID), b); err != nil {
			t.Fatal(err)
		}
	}
	// A trigger sent before the subscription was lost: abort it.
	d.abortPending("the test's worker subscribed")

	st, put := sharedFile(t, c, id, "000007.sst", "an SST file of subtask 0/0")
	a, b := checkpoint.TaskID{Chain: 0, Subtask: 0}, checkpoint.TaskID{Chain: 0, Subtask: 1}
	stateWith := func(task checkpoint.TaskID) *checkpoint.SubtaskState {
		return &checkpoint.SubtaskState{Task: task, State: []checkpoint.FileHandle{put()}}
	}

	n := next()
	// Subtask 0/0 uploads the file for n and acknowledges; 0/1 is slow.
	answer(n, a, stateWith(a), "")
	m := next()
	if m.ID <= n.ID {
		t.Fatalf("second trigger %d is not after %d", m.ID, n.ID)
	}
	// Subtask 0/0 takes its part of n+1: the file is there, it reuses it.
	reused := stateWith(a)
	// Subtask 0/1 declines n: n is aborted and discarded.
	answer(n, b, nil, "disk full")
	waitUntil(t, "checkpoint n was never aborted", func() bool { return !pending(n.ID) })
	answer(m, a, reused, "")
	answer(m, b, &checkpoint.SubtaskState{Task: b}, "")
	waitUntil(t, "checkpoint n+1 never completed", func() bool {
		acks.mu.Lock()
		defer acks.mu.Unlock()
		return slices.Contains(acks.completed, m.ID)
	})
	meta, err := st.ReadMetadata(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(meta); err != nil {
		t.Fatalf("completed checkpoint %d references a deleted file: %v", m.ID, err)
	}
}

// TestUnreadableCheckpointNotSkipped: a restart that cannot read the
// latest checkpoint now (its metadata read fails, though nothing says it
// is damaged) must not restore from empty state, nor from an older
// checkpoint: the deployment fails and the restart strategy tries again,
// and once the checkpoint reads again the restart restores it.
func TestUnreadableCheckpointNotSkipped(t *testing.T) {
	defer func(r []time.Duration) { restoreRetries = r }(restoreRetries)
	restoreRetries = []time.Duration{10 * time.Millisecond}
	plan := strings.Replace(ckptPlan, `"attempts":3,"delay":0`, `"attempts":20,"delay":1000`, 1)
	c, w, _, id := startOne(t, plan)
	acks := ackCheckpoints(t, w.nc, w.id)
	c.mu.Lock()
	c.jobs[id].ckpt.abortPending("the test's worker subscribed")
	c.mu.Unlock()
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 2 })
	// The attempt fails; once its checkpoint driver has stopped, the
	// storage holds what the restart will find.
	w.report(t, id, 0, transport.TaskFailed)
	waitUntil(t, "the failed attempt's driver never stopped", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		j := c.jobs[id]
		return j.lc.Attempt() == 1 && j.ckpt == nil
	})
	st, err := checkpoint.OpenStorage(CheckpointRoot(c.cfg.DataDir, id))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.Completed()
	if err != nil || len(ids) == 0 {
		t.Fatalf("completed checkpoints %v, %v", ids, err)
	}
	latest := ids[len(ids)-1]
	// Its metadata cannot be read now: where the file was is a directory.
	meta := filepath.Join(st.Dir(latest), checkpoint.MetadataName)
	aside := filepath.Join(t.TempDir(), "metadata")
	if err := os.Rename(meta, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the restart's deployment never failed", func() bool {
		_, _, restarts := jobLifecycle(c, id)
		return restarts >= 2
	})
	select {
	case d := <-w.deploys:
		t.Fatalf("attempt %d deployed restoring %d while checkpoint %d could not be read", d.Attempt, d.RestoreID, latest)
	default:
	}
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, meta); err != nil {
		t.Fatal(err)
	}
	d := nextDeploy(t, w)
	if d.RestoreID != latest {
		t.Fatalf("attempt %d restores %d; want checkpoint %d", d.Attempt, d.RestoreID, latest)
	}
	if state, _, _ := jobLifecycle(c, id); state != "RUNNING" && state != "RESTARTING" {
		t.Fatalf("job %s", state)
	}
}

// TestNoTriggerOutsideRunning: once an attempt fails, the job is
// RESTARTING while its other subtasks are being cancelled; no checkpoint
// or savepoint may be triggered then.
func TestNoTriggerOutsideRunning(t *testing.T) {
	plan := strings.Replace(strings.Replace(ckptPlan, `"parallelism":1`, `"parallelism":2`, 1), `"delay":0`, `"delay":60000`, 1)
	c, w, id, acks := startCkptJobPlan(t, plan)
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 2 })
	// One of the two subtasks fails; the other has not ended yet.
	w.report(t, id, 0, transport.TaskFailed)
	waitUntil(t, "the job never restarted", func() bool { state, _, _ := jobLifecycle(c, id); return state == "RESTARTING" })
	c.mu.Lock()
	d := c.jobs[id].ckpt
	c.mu.Unlock()
	if d == nil {
		t.Fatal("the failed attempt's checkpoint driver stopped before its subtasks ended")
	}
	// The triggers that went out before: one may still be on its way to
	// the worker.
	var sent int64
	d.do(func() {
		for cid := range d.pending {
			if !d.unsent[cid] {
				sent = max(sent, cid)
			}
		}
	})
	acks.mu.Lock()
	for _, cid := range acks.triggers {
		sent = max(sent, cid)
	}
	acks.mu.Unlock()
	// Twenty intervals of the driver's own clock.
	until := time.Now().Add(time.Second)
	waitUntil(t, "", func() bool { return time.Now().After(until) })
	acks.mu.Lock()
	for _, cid := range acks.triggers {
		if cid > sent {
			t.Errorf("checkpoint %d triggered while the job was RESTARTING", cid)
		}
	}
	acks.mu.Unlock()
	replies := make(chan transport.SavepointReply, 1)
	c.savepoint(transport.SavepointRequest{JobID: id, Dir: t.TempDir()}, caller{}, func(r transport.SavepointReply) { replies <- r })
	select {
	case r := <-replies:
		if r.Error == "" {
			t.Fatalf("savepoint %d taken while the job was RESTARTING", r.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the savepoint request got no answer")
	}
}

// TestCheckpointsBeforeSavepointKeptUntilNextCompletes: a restart of a job
// whose restore point is a savepoint newer than its checkpoints (an
// upgrade's, or a stop's) passes those checkpoints over, but must not
// delete the shared files they reference before a checkpoint of the new
// attempt completes: until then a resume may still need them. After it,
// they go.
func TestCheckpointsBeforeSavepointKeptUntilNextCompletes(t *testing.T) {
	c, w, id, acks := startCkptJob(t)
	st, put := sharedFile(t, c, id, "000009.sst", "an SST file the checkpoints of attempt 0 share")
	h := put()
	acks.mu.Lock()
	acks.state = func(ctl transport.CheckpointControl, task checkpoint.TaskID) *checkpoint.SubtaskState {
		if ctl.Attempt != 0 || ctl.Kind != checkpoint.KindCheckpoint {
			return nil
		}
		return &checkpoint.SubtaskState{Task: task, State: []checkpoint.FileHandle{h}}
	}
	acks.mu.Unlock()
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 2 })

	// Hold the periodic checkpoints; answer the savepoint alone.
	acks.mu.Lock()
	acks.manual = make(chan transport.CheckpointControl, 64)
	acks.mu.Unlock()
	replies := make(chan transport.SavepointReply, 1)
	c.savepoint(transport.SavepointRequest{JobID: id, Dir: t.TempDir()}, caller{}, func(r transport.SavepointReply) { replies <- r })
	var sp transport.SavepointReply
	for sp.ID == 0 {
		select {
		case ctl := <-acks.manual:
			if ctl.Kind != checkpoint.KindSavepoint {
				continue
			}
			for _, task := range ctl.Tasks {
				b, _ := json.Marshal(transport.CheckpointAck{JobID: ctl.JobID, Attempt: ctl.Attempt, Task: task, ID: ctl.ID,
					State: &checkpoint.SubtaskState{Task: task}})
				if err := w.nc.Publish(transport.CheckpointAckSubject(ctl.JobID), b); err != nil {
					t.Fatal(err)
				}
			}
		case sp = <-replies:
			if sp.Error != "" {
				t.Fatalf("savepoint: %s", sp.Error)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the savepoint never completed")
		}
	}
	// The job restores from the savepoint from now on, as after an
	// upgrade's barrier.
	c.mu.Lock()
	j := c.jobs[id]
	j.fromSavepoint, j.savepointID = sp.Dir, sp.ID
	c.mu.Unlock()
	ids, err := st.Completed()
	if err != nil || len(ids) == 0 || ids[len(ids)-1] > sp.ID {
		t.Fatalf("completed checkpoints %v, %v; want some, all before savepoint %d", ids, err, sp.ID)
	}
	older := ids[len(ids)-1]

	w.report(t, id, 0, transport.TaskFailed)
	d := nextDeploy(t, w)
	if d.Attempt != 1 || d.RestoreID != sp.ID {
		t.Fatalf("attempt %d restores %d; want attempt 1 from savepoint %d", d.Attempt, d.RestoreID, sp.ID)
	}
	shared := filepath.Join(st.Root(), h.Path)
	if _, err := os.Stat(shared); err != nil {
		t.Fatalf("checkpoint %d's shared file was deleted before attempt 1 completed a checkpoint: %v", older, err)
	}
	if m, err := st.ReadMetadata(older); err != nil || st.Verify(m) != nil {
		t.Fatalf("checkpoint %d no longer reads whole before attempt 1 completed a checkpoint: %v", older, err)
	}
	// Attempt 1 checkpoints (with empty state): then the older files go.
	acks.mu.Lock()
	acks.manual = nil
	acks.mu.Unlock()
	c.mu.Lock()
	c.jobs[id].ckpt.abortPending("the test's worker answers again")
	c.mu.Unlock()
	waitUntil(t, "the older checkpoint and its shared file stayed after attempt 1 completed a checkpoint", func() bool {
		_, ferr := os.Stat(shared)
		_, derr := os.Stat(st.Dir(older))
		return os.IsNotExist(ferr) && os.IsNotExist(derr)
	})
}

// TestDeposedLeaderDeletesNothing: a leader that lost its lease deletes no
// checkpoint files. Its registry knows nothing of a later leader's
// checkpoints, which may reference the same shared files (named by their
// content): the fault suite saw a partitioned leader delete, for half a
// minute after it knew it was deposed, a file the new leader's latest
// checkpoint needed.
func TestDeposedLeaderDeletesNothing(t *testing.T) {
	c, _, id, acks := startCkptJob(t)
	if c.lead == nil {
		t.Fatal("the test coordinator has no lease")
	}
	c.mu.Lock()
	d := c.jobs[id].ckpt
	c.mu.Unlock()
	exists := func(st *checkpoint.Storage, h checkpoint.FileHandle) bool {
		files, err := st.SharedFiles()
		if err != nil {
			t.Fatal(err)
		}
		_, ok := files[h.Path]
		return ok
	}
	// While it leads, a shared file nothing references is swept.
	st, put := sharedFile(t, c, id, "000001.sst", "unreferenced while leading")
	h := put()
	if !exists(st, h) {
		t.Fatalf("%s is not listed", h.Path)
	}
	waitUntil(t, "a leader never swept an unreferenced shared file", func() bool {
		d.do(func() { d.sweep() })
		return !exists(st, h)
	})
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n > 0 })
	completed, err := st.Completed()
	if err != nil || len(completed) == 0 {
		t.Fatalf("completed checkpoints: %v %v", completed, err)
	}

	// Deposed: neither the sweep nor a discard deletes anything.
	c.lead.mu.Lock()
	c.lead.l.lost()
	c.lead.mu.Unlock()
	_, put = sharedFile(t, c, id, "000002.sst", "unreferenced once deposed")
	h = put()
	latest := completed[len(completed)-1]
	d.do(func() {
		d.sweep()
		d.discard(latest)
	})
	if !exists(st, h) {
		t.Error("a deposed leader swept a shared file")
	}
	if _, err := st.ReadMetadata(latest); err != nil {
		t.Errorf("a deposed leader discarded checkpoint %d: %v", latest, err)
	}
}

// TestUnusableCheckpointsNoEmptyRestart: when every completed checkpoint
// is damaged, a restart does not start from empty state (the sinks
// committed on those checkpoints: they would publish again, and a file
// sink would delete what it committed); the deployment fails, and once the
// restart strategy gives up the job fails saying why.
func TestUnusableCheckpointsNoEmptyRestart(t *testing.T) {
	// One restart, late enough (10 s, for a busy machine) to damage the
	// storage before it.
	plan := strings.Replace(ckptPlan, `"attempts":3,"delay":0`, `"attempts":1,"delay":10000`, 1)
	c, w, _, id := startOne(t, plan)
	acks := ackCheckpoints(t, w.nc, w.id)
	c.mu.Lock()
	c.jobs[id].ckpt.abortPending("the test's worker subscribed")
	c.mu.Unlock()
	waitUntil(t, "no checkpoint completed", func() bool { _, n := acks.count(); return n >= 2 })
	w.report(t, id, 0, transport.TaskFailed)
	// Once the failed attempt's driver has stopped, no checkpoint
	// completes before the restart.
	waitUntil(t, "the failed attempt's driver never stopped", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		j := c.jobs[id]
		return j.lc.Attempt() >= 1 && j.ckpt == nil
	})
	st, err := checkpoint.OpenStorage(CheckpointRoot(c.cfg.DataDir, id))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.Completed()
	if err != nil || len(ids) == 0 {
		t.Fatalf("completed checkpoints %v, %v", ids, err)
	}
	for _, cid := range ids {
		if err := os.WriteFile(filepath.Join(st.Dir(cid), checkpoint.MetadataName), []byte("not metadata"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the job never failed", func() bool {
		state, _, _ := jobLifecycle(c, id)
		return state == "FAILED"
	})
	for {
		select {
		case d := <-w.deploys:
			if d.Attempt > 0 && d.RestoreID == 0 {
				t.Fatalf("attempt %d deployed from empty state although checkpoints %v completed", d.Attempt, ids)
			}
			continue
		default:
		}
		break
	}
	info := listed(t, c, id)
	if !strings.Contains(info.Error, "every completed checkpoint is unusable") {
		t.Fatalf("the job's error does not say why: %q", info.Error)
	}
}
