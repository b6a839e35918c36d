package coordinator

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// statusPlan has a source chained into an operator (parallelism 2) and a
// keyed sink (parallelism 3): two chains.
const statusPlan = `{"name":"st","parallelism":2,
 "checkpoint":{"interval":1000},
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":0}},
  {"id":"op","kind":"operator","operator":"upper"},
  {"id":"out","kind":"sink","connector":"discard","parallelism":3}],
 "edges":[{"from":"src","to":"op"},{"from":"op","to":"out","partition":"rebalance"}]}`

// addJob puts a job of plan, owned by tenant, into c as submit would
// before it deploys anything.
func addJob(t *testing.T, c *Coordinator, id, tenantName, planJSON string) *jobState {
	t.Helper()
	plan, err := job.Parse([]byte(planJSON))
	if err != nil {
		t.Fatal(err)
	}
	g, err := job.Build(plan)
	if err != nil {
		t.Fatal(err)
	}
	var refs []transport.TaskRef
	for _, ch := range g.Chains {
		for s := 0; s < ch.Parallelism; s++ {
			refs = append(refs, transport.TaskRef{Chain: ch.Index, Subtask: s})
		}
	}
	j := &jobState{
		info: transport.JobInfo{JobID: id, Name: plan.Name, State: transport.JobRunning, Started: c.now(), Tenant: tenantName},
		plan: plan, refs: refs, lc: newLifecycle(plan, false), started: c.now(), metrics: map[string]*transport.VertexMetrics{},
	}
	c.mu.Lock()
	c.jobs[id] = j
	c.syncLocked(j)
	c.mu.Unlock()
	return j
}

// TestCheckpointStatistics records checkpoints as the driver does, some
// of them already in the history file as a previous coordinator left it,
// and checks counts, latest, summary (min/avg/max against the test's own
// sums), the bounded history, and the details per subtask from memory and
// from a retained checkpoint's metadata. A second coordinator reading the
// same history file must agree.
func TestCheckpointStatistics(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	c.cfg.CheckpointHistory = 5
	j := addJob(t, c, "st-1", "", statusPlan)

	// What a previous coordinator wrote.
	root := CheckpointRoot(c.cfg.DataDir, "st-1")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	type fig struct {
		id                             int64
		ok                             bool
		kind                           checkpoint.Kind
		dur, size, up, inflight, align int64
	}
	figs := []fig{
		{1, true, checkpoint.KindCheckpoint, 40, 100, 100, 0, 3},
		{2, false, checkpoint.KindCheckpoint, 0, 0, 0, 0, 0},
		{3, true, checkpoint.KindCheckpoint, 10, 300, 50, 7, 1},
		{4, true, checkpoint.KindSavepoint, 90, 500, 500, 0, 9},
	}
	entry := func(f fig) HistoryEntry {
		e := HistoryEntry{ID: f.id, Kind: f.kind, Status: "completed", Trigger: 1000 * f.id, Done: 1000*f.id + f.dur,
			Duration: time.Duration(f.dur) * time.Millisecond, StateSize: f.size, Uploaded: f.up, InFlightBytes: f.inflight,
			Alignment: time.Duration(f.align) * time.Millisecond}
		if !f.ok {
			e.Status, e.Reason = "aborted", "declined by 1/0"
		}
		return e
	}
	for _, f := range figs[:2] {
		b, _ := json.Marshal(entry(f))
		lines = append(lines, string(b))
	}
	hist := filepath.Join(root, "history.jsonl")
	if err := os.WriteFile(hist, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	appendLine := func(e HistoryEntry) func() {
		return func() {
			f, err := os.OpenFile(hist, os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(e)
			_, _ = f.Write(append(b, '\n'))
			f.Close()
		}
	}
	// This coordinator's driver records the next ones with their subtasks.
	tasks := map[checkpoint.TaskID]checkpoint.Metrics{
		{Chain: 0, Subtask: 0}: {StateSize: 100, Sync: 2 * time.Millisecond},
		{Chain: 0, Subtask: 1}: {StateSize: 200, Alignment: time.Millisecond},
		{Chain: 1, Subtask: 2}: {StateSize: 7, Unaligned: true, InFlightBytes: 7},
	}
	for _, f := range figs[2:] {
		e := entry(f)
		j.stats.record(c, "st-1", e, tasks, appendLine(e))
	}
	// More failures than the history keeps.
	for id := int64(5); id <= 8; id++ {
		f := fig{id: id, kind: checkpoint.KindCheckpoint}
		figs = append(figs, f)
		e := entry(f)
		j.stats.record(c, "st-1", e, nil, appendLine(e))
	}

	var completed, failed int64
	var dur, size MinAvgMax
	for _, f := range figs {
		if !f.ok {
			failed++
			continue
		}
		completed++
		dur.add(f.dur)
		size.add(f.size)
	}
	check := func(c *Coordinator) {
		t.Helper()
		admin := Caller{}
		ov, err := c.Checkpoints(admin, "st-1")
		if err != nil {
			t.Fatal(err)
		}
		if ov.Counts.Completed != completed || ov.Counts.Failed != failed || ov.Counts.Total != completed+failed || ov.Counts.InProgress != 0 {
			t.Fatalf("counts %+v, want %d completed and %d failed", ov.Counts, completed, failed)
		}
		if ov.Latest.Completed == nil || ov.Latest.Completed.ID != 3 || ov.Latest.Savepoint == nil || ov.Latest.Savepoint.ID != 4 ||
			ov.Latest.Failed == nil || ov.Latest.Failed.ID != 8 || ov.Latest.Failed.Status != CheckpointFailed {
			t.Fatalf("latest %+v %+v %+v, want checkpoint 3, savepoint 4, failed 8", ov.Latest.Completed, ov.Latest.Savepoint, ov.Latest.Failed)
		}
		if ov.Settings == nil || ov.Settings.IntervalMillis != 1000 || ov.Settings.Retain != checkpoint.DefaultRetain {
			t.Fatalf("settings %+v", ov.Settings)
		}
		sum, err := c.CheckpointSummary(admin, "st-1")
		if err != nil {
			t.Fatal(err)
		}
		if sum.DurationMillis != dur.final() || sum.StateSize != size.final() {
			t.Fatalf("summary %+v %+v, want %+v %+v", sum.DurationMillis, sum.StateSize, dur.final(), size.final())
		}
		h, err := c.CheckpointHistory(admin, "st-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, e := range h {
			ids = append(ids, e.ID)
		}
		if want := []int64{8, 7, 6, 5, 4}; !equalIDs(ids, want) {
			t.Fatalf("history %v, want %v (newest first, the latest 5)", ids, want)
		}
		if h, _ := c.CheckpointHistory(admin, "st-1", 2); len(h) != 2 || h[0].ID != 8 {
			t.Fatalf("history with limit 2: %+v", h)
		}
	}
	check(c)

	d, err := c.Checkpoint(Caller{}, "st-1", 4)
	if err != nil {
		t.Fatal(err)
	}
	// Two chains: src+op (2 subtasks) and out (3); three acknowledged.
	if d.SubtasksFrom != "memory" || len(d.Subtasks) != 5 {
		t.Fatalf("checkpoint 4: %+v, want 5 subtasks from memory", d)
	}
	acked := 0
	for _, s := range d.Subtasks {
		if s.Acknowledged {
			acked++
		}
		if s.Chain == "out" && s.Subtask == 2 && (!s.Unaligned || s.InFlightBytes != 7) {
			t.Fatalf("subtask out/2: %+v", s)
		}
		if s.Chain == "src+op" && s.Subtask == 0 && (s.StateSize != 100 || s.SyncMs != 2) {
			t.Fatalf("subtask src+op/0: %+v", s)
		}
	}
	if acked != 3 {
		t.Fatalf("%d subtasks acknowledged, want 3: %+v", acked, d.Subtasks)
	}
	if _, err := c.Checkpoint(Caller{}, "st-1", 99); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("checkpoint 99: %v, want ErrNoCheckpoint", err)
	}

	// A coordinator that took the job over knows checkpoint 3 only from
	// the history file, and its subtasks from the metadata in storage.
	c2, err := New(Config{NATS: c.cfg.NATS, DataDir: c.cfg.DataDir, CheckpointHistory: 5})
	if err != nil {
		t.Fatal(err)
	}
	addJob(t, c2, "st-1", "", statusPlan)
	check(c2)
	writeMetadata(t, c2, "st-1", 3)
	d, err = c2.Checkpoint(Caller{}, "st-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if d.SubtasksFrom != "metadata" || len(d.Subtasks) != 5 || d.Subtasks[0].Chain != "src+op" || d.Subtasks[0].StateSize != 11 {
		t.Fatalf("checkpoint 3 after a takeover: %+v", d)
	}
}

// writeMetadata writes a completed checkpoint's metadata, every subtask
// acknowledged with state size 11, where job id keeps its checkpoints.
func writeMetadata(t *testing.T, c *Coordinator, id string, cid int64) {
	t.Helper()
	c.mu.Lock()
	j := c.jobs[id]
	root := j.checkpointRoot(c.cfg.DataDir)
	c.mu.Unlock()
	nc, err := c.jobConn(j)
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.OpenStorageAt(root, nc)
	if err != nil {
		t.Fatal(err)
	}
	m := &checkpoint.Metadata{JobID: id, ID: cid, Kind: checkpoint.KindCheckpoint, Trigger: 1, Done: 2, Plan: j.plan.JSON(),
		MaxParallelism: j.plan.MaxParallelism, Metrics: map[string]checkpoint.Metrics{}}
	for _, r := range j.refs {
		tid := checkpoint.TaskID{Chain: r.Chain, Subtask: r.Subtask}
		m.Tasks = append(m.Tasks, checkpoint.SubtaskState{Task: tid})
		m.Metrics[tid.String()] = checkpoint.Metrics{StateSize: 11}
	}
	if err := st.WriteMetadata(m); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointDetailsFromObjectStore: the details of a checkpoint the
// coordinator has no figures of come from its metadata in a JetStream
// object store as they do from a directory.
func TestCheckpointDetailsFromObjectStore(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	plan := strings.Replace(statusPlan, `"interval":1000`, `"interval":1000,"storage":"nats-obj://rest-ckpts"`, 1)
	addJob(t, c, "st-obj", "", plan)
	writeMetadata(t, c, "st-obj", 7)
	d, err := c.Checkpoint(Caller{}, "st-obj", 7)
	if err != nil {
		t.Fatal(err)
	}
	if d.SubtasksFrom != "metadata" || len(d.Subtasks) != 5 || d.Status != CheckpointCompleted || d.DurationMillis != 1 {
		t.Fatalf("checkpoint 7 from the object store: %+v", d)
	}
	ov, err := c.Checkpoints(Caller{}, "st-obj")
	if err != nil {
		t.Fatal(err)
	}
	if ov.Settings.Storage != "nats-obj://rest-ckpts" {
		t.Fatalf("storage %q", ov.Settings.Storage)
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTenantScopedQueries: a tenant sees and acts on its own jobs only;
// another tenant's job is absent; workers are the admin's.
func TestTenantScopedQueries(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	cc.silentWorker(t, "w1", nil)
	addJob(t, c, "a-1", "acme", statusPlan)
	addJob(t, c, "b-1", "bolt", statusPlan)
	addJob(t, c, "x-1", "", statusPlan)
	acme, bolt, admin := Caller{Tenant: "acme"}, Caller{Tenant: "bolt"}, Caller{}

	ids := func(who Caller) string {
		var out []string
		for _, j := range c.Jobs(who) {
			out = append(out, j.JobID)
		}
		return strings.Join(out, ",")
	}
	if got := ids(acme); got != "a-1" {
		t.Fatalf("acme lists %q", got)
	}
	if got := ids(admin); got != "a-1,b-1,x-1" {
		t.Fatalf("the admin lists %q", got)
	}
	for name, f := range map[string]func() error{
		"job":         func() error { _, err := c.Job(bolt, "a-1"); return err },
		"vertex":      func() error { _, err := c.Vertex(bolt, "a-1", "src"); return err },
		"checkpoints": func() error { _, err := c.Checkpoints(bolt, "a-1"); return err },
		"history":     func() error { _, err := c.CheckpointHistory(bolt, "a-1", 0); return err },
		"summary":     func() error { _, err := c.CheckpointSummary(bolt, "a-1"); return err },
		"checkpoint":  func() error { _, err := c.Checkpoint(bolt, "a-1", 1); return err },
		"exceptions":  func() error { _, err := c.Exceptions(bolt, "a-1"); return err },
		"cancel":      func() error { return c.Cancel(bolt, "a-1") },
		"can see":     func() error { return c.CanSee(bolt, "a-1") },
	} {
		if err := f(); !errors.Is(err, ErrNoJob) {
			t.Errorf("bolt's %s of acme's job: %v, want ErrNoJob", name, err)
		}
	}
	var rep transport.SavepointReply
	c.Savepoint(bolt, transport.SavepointRequest{JobID: "a-1"}, func(r transport.SavepointReply) { rep = r })
	if !strings.Contains(rep.Error, `no job "a-1"`) {
		t.Fatalf("bolt's savepoint of acme's job: %+v", rep)
	}
	c.mu.Lock()
	state := c.jobs["a-1"].lc.State()
	c.mu.Unlock()
	if state != lifecycle.Created {
		t.Fatalf("acme's job is %s after bolt's attempts", state)
	}
	if _, err := c.Job(acme, "a-1"); err != nil {
		t.Fatalf("acme's own job: %v", err)
	}
	if _, err := c.WorkerStatuses(acme); !errors.Is(err, ErrAdminOnly) {
		t.Fatalf("acme's workers: %v, want ErrAdminOnly", err)
	}
	ws, err := c.WorkerStatuses(admin)
	if err != nil || len(ws) != 1 || ws[0].ID != "w1" {
		t.Fatalf("the admin's workers: %+v, %v", ws, err)
	}
	if ov := c.Overview(acme); ov.Workers != nil || ov.Jobs["CREATED"] != 1 || ov.Tenant != "acme" {
		t.Fatalf("acme's overview: %+v", ov)
	}
	if ov := c.Overview(admin); ov.Workers == nil || ov.Workers.Live != 1 || ov.Jobs["CREATED"] != 3 {
		t.Fatalf("the admin's overview: %+v", ov)
	}
}

// TestJobDetailFigures feeds the metrics board samples as workers would
// and checks what a job's detail makes of them: sums, rates, ratios from
// consecutive samples, backpressure levels, the least watermark, and
// subtasks with no sample yet.
func TestJobDetailFigures(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	j := addJob(t, c, "fig-1", "", statusPlan)
	c.mu.Lock()
	j.placement = placement{"w1": {{Chain: 0, Subtask: 0}, {Chain: 1, Subtask: 0}}, "w2": {{Chain: 0, Subtask: 1}}}
	c.mu.Unlock()

	d, err := c.Job(Caller{}, "fig-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Vertices {
		if v.Metrics.Sampled != 0 || v.Metrics.Backpressure != "" || v.Metrics.Watermark != nil {
			t.Fatalf("vertex %s with no samples: %+v", v.ID, v.Metrics)
		}
		for _, s := range v.Subtasks {
			if s.Metrics != nil || s.Backpressure != "" {
				t.Fatalf("vertex %s subtask %d with no sample: %+v", v.ID, s.Subtask, s)
			}
		}
	}
	if got := []string{d.Vertices[0].ID, d.Vertices[1].ID, d.Vertices[2].ID}; strings.Join(got, ",") != "src,op,out" {
		t.Fatalf("vertices %v, want plan order", got)
	}
	if s := d.Vertices[0].Subtasks; s[0].Worker != "w1" || s[1].Worker != "w2" {
		t.Fatalf("src's subtasks placed on %q and %q", s[0].Worker, s[1].Worker)
	}
	if s := d.Vertices[2].Subtasks; len(s) != 3 || s[0].Worker != "w1" || s[1].Worker != "" {
		t.Fatalf("out's subtasks: %+v", s)
	}

	sample := func(v string, sub int, at, in, busy, bp, idle, wm int64) transport.SubtaskMetrics {
		return transport.SubtaskMetrics{JobID: "fig-1", Vertex: v, Subtask: sub, SampledAt: at, RecordsIn: in, RecordsOut: in, BytesIn: 10 * in,
			BusyMillis: busy, BackpressuredMillis: bp, IdleMillis: idle, Watermark: wm, HasWatermark: wm > 0}
	}
	c.board.put([]transport.SubtaskMetrics{sample("op", 0, 1000, 100, 100, 0, 900, 50), sample("op", 1, 1000, 300, 500, 500, 0, 70)})
	if _, err := c.Job(Caller{}, "fig-1"); err != nil {
		t.Fatal(err)
	}
	// One second later: subtask 0 was blocked 600 of 1000 ms, subtask 1
	// idle all along.
	c.board.put([]transport.SubtaskMetrics{sample("op", 0, 2000, 300, 300, 600, 1100, 60), sample("op", 1, 2000, 400, 500, 500, 1000, 80)})
	d, err = c.Job(Caller{}, "fig-1")
	if err != nil {
		t.Fatal(err)
	}
	op := d.Vertices[1]
	m := op.Metrics
	if m.Sampled != 2 || m.RecordsIn != 700 || m.BytesIn != 7000 || m.RecordsInPerSec != 300 {
		t.Fatalf("op's figures %+v, want 2 sampled, 700 in, 7000 bytes in, 300/s", m)
	}
	if s0 := op.Subtasks[0]; s0.BackpressureRatio != 0.6 || s0.BusyRatio != 0.2 || s0.Backpressure != BackpressureHigh || s0.Metrics == nil {
		t.Fatalf("op/0: %+v", s0)
	}
	if s1 := op.Subtasks[1]; s1.IdleRatio != 1 || s1.Backpressure != BackpressureOK {
		t.Fatalf("op/1: %+v", s1)
	}
	if m.BackpressureRatio != 0.6 || m.Backpressure != BackpressureHigh || m.Watermark == nil || *m.Watermark != 60 {
		t.Fatalf("op's figures %+v (watermark %v), want backpressure 0.6 high and watermark 60", m, m.Watermark)
	}
	if d.Vertices[0].Metrics.Sampled != 0 {
		t.Fatalf("src has figures without samples: %+v", d.Vertices[0].Metrics)
	}
	for _, r := range []struct {
		ratio float64
		want  string
	}{{0, BackpressureOK}, {0.1, BackpressureOK}, {0.11, BackpressureLow}, {0.5, BackpressureLow}, {0.51, BackpressureHigh}} {
		if got := backpressureLevel(r.ratio); got != r.want {
			t.Errorf("backpressure %.2f: %s, want %s", r.ratio, got, r.want)
		}
	}
}

// TestExceptions: task failures (bounded, messages cut), restart causes
// and the job's final error, newest first.
func TestExceptions(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	j := addJob(t, c, "ex-1", "", statusPlan)
	e, err := c.Exceptions(Caller{}, "ex-1")
	if err != nil || e.Root != nil || len(e.Entries) != 0 {
		t.Fatalf("a job that never failed: %+v, %v", e, err)
	}
	long := strings.Repeat("é", maxMessage)
	c.mu.Lock()
	for i := 0; i < maxExceptions+20; i++ {
		msg := "trap in op"
		if i == maxExceptions+19 {
			msg = long
		}
		c.taskFailedLocked(j, transport.TaskStatus{JobID: "ex-1", Attempt: 0, Worker: "w1", Task: transport.TaskRef{Chain: 1, Subtask: 2}, Error: msg}, lifecycle.TaskFailed)
	}
	j.restartLog = []RestartEntry{{Attempt: 1, Reason: "worker w2 lost", Time: c.now().Add(time.Hour)}}
	j.result = &transport.JobResult{State: transport.JobFailed, Error: "too many restarts", Duration: 2 * time.Hour}
	c.mu.Unlock()
	e, err = c.Exceptions(Caller{}, "ex-1")
	if err != nil {
		t.Fatal(err)
	}
	if !e.Truncated || len(e.Entries) != maxExceptions+2 {
		t.Fatalf("%d entries (truncated %v), want %d and truncated", len(e.Entries), e.Truncated, maxExceptions+2)
	}
	if e.Root == nil || e.Root.Kind != "job" || e.Root.Message != "too many restarts" {
		t.Fatalf("root %+v", e.Root)
	}
	if e.Entries[0].Kind != "job" || e.Entries[1].Kind != "restart" || e.Entries[1].Attempt != 0 || e.Entries[2].Kind != "task" {
		t.Fatalf("entries not newest first: %+v", e.Entries[:3])
	}
	task := e.Entries[2]
	if task.Chain != "out" || task.Subtask == nil || *task.Subtask != 2 || task.Worker != "w1" {
		t.Fatalf("task failure %+v", task)
	}
	if len(task.Message) > maxMessage+len("…") || !strings.HasSuffix(task.Message, "…") {
		t.Fatalf("a long message is %d bytes, want it cut to %d", len(task.Message), maxMessage)
	}
}
