package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// The query side of the coordinator, for the REST API (package api): what
// `wstream list` and `wstream workers` show and more, and the same
// savepoint, stop and cancel paths as the NATS control plane, each acting
// for a Caller with that caller's view of the cluster.

// Caller is who makes a request through the REST API: a tenant, or the
// admin when Tenant is empty (on a cluster without tenants, everyone).
type Caller struct {
	Tenant string
	// User names the credential the request came with, for the audit log.
	User string
}

func (w Caller) internal() caller { return caller{tenant: w.Tenant, user: w.User} }

// Errors of the query side; the REST API maps them to HTTP statuses.
var (
	// ErrNoJob: the job does not exist, or belongs to another tenant.
	ErrNoJob = errors.New("coordinator: no such job")
	// ErrNoCheckpoint: the job has no such checkpoint in its statistics.
	ErrNoCheckpoint = errors.New("coordinator: no such checkpoint")
	// ErrAdminOnly: only the cluster's admin may ask this.
	ErrAdminOnly = errors.New("coordinator: only the cluster's admin may see this")
)

// Audit writes one line to the audit log (AuditFile) for a request made
// through another door than NATS, and returns err as who is answered (a
// tenant's answers name no path of the server's data directory).
func (c *Coordinator) Audit(who Caller, action, jobID string, err error) error {
	return c.outcome(who.internal(), action, jobID, err)
}

// Overview is the cluster as a caller sees it.
type Overview struct {
	// Workers, Slots (0: some worker has unlimited slots) and SlotsUsed
	// describe the live workers; a tenant does not see them (nil).
	Workers *WorkerTotals `json:"workers,omitempty"`
	// Jobs counts the caller's jobs by state (lifecycle's names).
	Jobs map[string]int `json:"jobs"`
	// Tenants is true on a multi-tenant cluster.
	Tenants bool `json:"tenants"`
	// Tenant is the caller's tenant ("" for the admin).
	Tenant string `json:"tenant,omitempty"`
	// StartedAt is when the coordinator started.
	StartedAt time.Time `json:"startedAt"`
	// Leader is the id of the leading coordinator (this one).
	Leader string `json:"leader,omitempty"`
}

// WorkerTotals sums the live workers.
type WorkerTotals struct {
	Live      int  `json:"live"`
	Lost      int  `json:"lost"`
	Slots     int  `json:"slots"`
	Unlimited bool `json:"unlimited"`
	SlotsUsed int  `json:"slotsUsed"`
}

// Overview returns the cluster overview for who.
func (c *Coordinator) Overview(who Caller) Overview {
	w := who.internal()
	v := c.readView()
	out := Overview{Jobs: map[string]int{}, Tenants: c.cfg.Tenants != nil, Tenant: who.Tenant, StartedAt: v.startedAt, Leader: c.serverID()}
	for _, jv := range v.jobs {
		if jv.visible(w) {
			out.Jobs[jv.state.String()]++
		}
	}
	if w.admin() {
		t := &WorkerTotals{}
		for _, ws := range v.workers {
			if !c.live(ws) {
				t.Lost++
				continue
			}
			t.Live++
			t.SlotsUsed += ws.used
			if ws.info.Slots <= 0 {
				t.Unlimited = true
			}
			t.Slots += max(ws.info.Slots, 0)
		}
		out.Workers = t
	}
	return out
}

// WorkerStatus is a registered worker and the subtasks placed on it.
type WorkerStatus struct {
	transport.WorkerRow
	Subtasks []PlacedSubtask `json:"subtasks"`
}

// PlacedSubtask is a subtask of a job's current attempt on a worker.
type PlacedSubtask struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	// Chain names the vertices the subtask runs, joined by "+".
	Chain   string `json:"chain"`
	Subtask int    `json:"subtask"`
}

// WorkerStatuses lists the registered workers; workers are shared by every
// tenant, so only the admin sees them (ErrAdminOnly).
func (c *Coordinator) WorkerStatuses(who Caller) ([]WorkerStatus, error) {
	if !who.internal().admin() {
		return nil, ErrAdminOnly
	}
	v := c.readView()
	byWorker := map[string][]PlacedSubtask{}
	for _, jv := range v.jobs {
		for w, subs := range jv.placed {
			byWorker[w] = append(byWorker[w], subs...)
		}
	}
	out := make([]WorkerStatus, 0, len(v.workers))
	for _, ws := range v.workers {
		subs := byWorker[ws.info.ID]
		sort.Slice(subs, func(i, k int) bool {
			a, b := subs[i], subs[k]
			if a.JobID != b.JobID {
				return a.JobID < b.JobID
			}
			if a.Chain != b.Chain {
				return a.Chain < b.Chain
			}
			return a.Subtask < b.Subtask
		})
		if subs == nil {
			subs = []PlacedSubtask{}
		}
		out = append(out, WorkerStatus{WorkerRow: c.workerRow(ws), Subtasks: subs})
	}
	return out, nil
}

// Jobs lists who's jobs as `wstream list` does, oldest first.
func (c *Coordinator) Jobs(who Caller) []transport.JobInfo {
	w := who.internal()
	out := []transport.JobInfo{}
	for _, jv := range c.readView().jobs {
		if jv.visible(w) {
			row := jv.row
			row.Cause = c.tenantText(w, row.Cause)
			out = append(out, row)
		}
	}
	return out
}

func (c *Coordinator) jobRowLocked(j *jobState) transport.JobInfo {
	row := j.info
	row.State = j.lc.State().String()
	row.Attempt, row.Restarts, row.Cause = j.lc.Attempt(), j.lc.Restarts(), j.lc.Cause()
	return row
}

// lookupLocked returns job id if who may see it; c.mu is held.
func (c *Coordinator) lookupLocked(id string, who Caller) (*jobState, error) {
	j, ok := c.jobs[id]
	if !ok || !visibleLocked(j, who.internal()) {
		// Another tenant's job is as absent as one that never was.
		return nil, errNoJob(id)
	}
	return j, nil
}

// JobDetail is one job as the REST API shows it.
type JobDetail struct {
	transport.JobInfo
	// Now is the coordinator's clock (Unix ms) when it answered;
	// DurationMillis how long the job has run (or ran).
	Now            int64  `json:"now"`
	DurationMillis int64  `json:"durationMillis"`
	Module         string `json:"module,omitempty"`
	ModuleDigest   string `json:"moduleDigest,omitempty"`
	MaxParallelism int    `json:"maxParallelism"`
	// Checkpointing is nil for a job that takes no checkpoints.
	Checkpointing *CheckpointSettings `json:"checkpointing"`
	// RestartLog says why each restart happened, oldest first.
	RestartLog []RestartEntry       `json:"restartLog"`
	Vertices   []VertexStatus       `json:"vertices"`
	Edges      []job.Edge           `json:"edges"`
	Result     *transport.JobResult `json:"result,omitempty"`
	// Upgrades are the job's module upgrades (wstream upgrade), oldest
	// first: done, rolled back or aborted.
	Upgrades []UpgradeEntry `json:"upgrades"`
}

// VertexStatus is one vertex of a job with its live figures.
type VertexStatus struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Operator    string `json:"operator,omitempty"`
	Connector   string `json:"connector,omitempty"`
	Parallelism int    `json:"parallelism"`
	// Chain names the vertices that run in one subtask with this one,
	// joined by "+".
	Chain    string          `json:"chain"`
	Metrics  VertexFigures   `json:"metrics"`
	Subtasks []SubtaskStatus `json:"subtasks"`
}

// Backpressure levels, Flink's: the share of time a subtask was blocked
// sending downstream, up to 10% ok, up to 50% low, above high.
const (
	BackpressureOK   = "ok"
	BackpressureLow  = "low"
	BackpressureHigh = "high"
)

func backpressureLevel(ratio float64) string {
	switch {
	case ratio > 0.5:
		return BackpressureHigh
	case ratio > 0.1:
		return BackpressureLow
	}
	return BackpressureOK
}

// VertexFigures sums a vertex's subtasks' latest samples. Sampled counts
// the subtasks that have one; with none, the figures are zero and
// Backpressure is empty ("no sample yet").
type VertexFigures struct {
	Sampled          int     `json:"sampled"`
	RecordsIn        int64   `json:"recordsIn"`
	RecordsOut       int64   `json:"recordsOut"`
	BytesIn          int64   `json:"bytesIn"`
	BytesOut         int64   `json:"bytesOut"`
	RecordsInPerSec  float64 `json:"recordsInPerSec"`
	RecordsOutPerSec float64 `json:"recordsOutPerSec"`
	// BusyRatio and BackpressureRatio are the largest over the subtasks,
	// as Flink shows them.
	BusyRatio         float64 `json:"busyRatio"`
	BackpressureRatio float64 `json:"backpressureRatio"`
	Backpressure      string  `json:"backpressure"`
	// Watermark is the least of the subtasks' watermarks (Unix ms), nil
	// until every sampled subtask has one.
	Watermark  *int64 `json:"watermark"`
	StateBytes int64  `json:"stateBytes"`
	// DeadLetters counts the records and timers the vertex's operator sent
	// to the dead-letter sink (--on-guest-error dead-letter).
	DeadLetters int64 `json:"deadLetters"`
	// StateWrittenBytes is what the vertex's keyed state wrote to Pebble;
	// StatePacedMillis is the time its subtasks waited under the tenant's
	// state write rate (summed over subtasks).
	StateWrittenBytes int64 `json:"stateWrittenBytes,omitempty"`
	StatePacedMillis  int64 `json:"statePacedMillis,omitempty"`
}

// SubtaskStatus is one subtask of a vertex in the current attempt.
type SubtaskStatus struct {
	Subtask int `json:"subtask"`
	// Worker runs it ("" while the attempt is being placed).
	Worker string `json:"worker"`
	// Metrics is the latest sample, nil when no worker has sent one yet.
	Metrics *transport.SubtaskMetrics `json:"metrics"`
	// The shares of time, since the sample before (or the subtask's start
	// with one sample), spent busy, blocked by backpressure and idle.
	BusyRatio         float64 `json:"busyRatio"`
	BackpressureRatio float64 `json:"backpressureRatio"`
	IdleRatio         float64 `json:"idleRatio"`
	Backpressure      string  `json:"backpressure"`
}

// Job returns the detail of job id, from the readers' view: it never
// waits for the coordinator's lock.
func (c *Coordinator) Job(who Caller, id string) (*JobDetail, error) {
	jv, err := c.viewedJob(who, id)
	if err != nil {
		return nil, err
	}
	g, err := job.Build(jv.plan)
	if err != nil {
		return nil, fmt.Errorf("job %s: its plan: %w", id, err)
	}
	d := &JobDetail{JobInfo: jv.row, Now: c.nowMillis(), Module: jv.module, ModuleDigest: jv.digest,
		MaxParallelism: jv.plan.MaxParallelism, Checkpointing: checkpointSettings(jv.plan), RestartLog: slices.Clone(jv.restartLog),
		Edges: slices.Clone(jv.plan.Edges)}
	if d.RestartLog == nil {
		d.RestartLog = []RestartEntry{}
	}
	if d.Edges == nil {
		d.Edges = []job.Edge{}
	}
	w := who.internal()
	d.Cause = c.tenantText(w, d.Cause)
	for i := range d.RestartLog {
		d.RestartLog[i].Reason = c.tenantText(w, d.RestartLog[i].Reason)
	}
	if jv.result != nil {
		r := *jv.result
		r.Error = c.tenantText(w, r.Error)
		d.Result = &r
		d.DurationMillis = r.Duration.Milliseconds()
	} else {
		d.DurationMillis = c.now().Sub(jv.started).Milliseconds()
	}
	chainIndex := map[string]int{}
	for _, ch := range g.Chains {
		chainIndex[ch.ID] = ch.Index
	}
	workerOf := map[transport.TaskRef]string{}
	for w, subs := range jv.placed {
		for _, s := range subs {
			workerOf[transport.TaskRef{Chain: chainIndex[s.Chain], Subtask: s.Subtask}] = w
		}
	}
	d.Upgrades = []UpgradeEntry{}
	if c.cfg.DataDir != "" {
		ups, err := c.upgrades.read(UpgradesFile(c.cfg.DataDir, id))
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", id, err)
		}
		d.Upgrades = append(d.Upgrades, ups...)
	}
	samples := c.currentSamples(id, jv.attempt)
	for _, ch := range g.Chains {
		for _, v := range ch.Vertices {
			d.Vertices = append(d.Vertices, c.vertexStatus(id, ch, v, workerOf, samples))
		}
	}
	// Plan order reads best: the graph is drawn from it.
	order := map[string]int{}
	for i, v := range jv.plan.Vertices {
		order[v.ID] = i
	}
	sort.SliceStable(d.Vertices, func(i, k int) bool { return order[d.Vertices[i].ID] < order[d.Vertices[k].ID] })
	return d, nil
}

// currentSamples are the samples of the job's current attempt, by vertex
// and subtask.
func (c *Coordinator) currentSamples(id string, attempt int) map[subtaskKey]transport.SubtaskMetrics {
	out := map[subtaskKey]transport.SubtaskMetrics{}
	for _, m := range c.SubtaskMetrics(id) {
		if m.Attempt == attempt {
			out[subtaskKey{m.Vertex, m.Subtask}] = m
		}
	}
	return out
}

func (c *Coordinator) vertexStatus(jobID string, ch *job.Chain, v *job.Vertex, workerOf map[transport.TaskRef]string, samples map[subtaskKey]transport.SubtaskMetrics) VertexStatus {
	vs := VertexStatus{ID: v.ID, Kind: v.Kind, Operator: v.Operator, Connector: v.Connector, Parallelism: ch.Parallelism, Chain: ch.ID}
	var watermark int64
	allWatermarks := true
	for s := 0; s < ch.Parallelism; s++ {
		st := SubtaskStatus{Subtask: s, Worker: workerOf[transport.TaskRef{Chain: ch.Index, Subtask: s}]}
		m, ok := samples[subtaskKey{v.ID, s}]
		if !ok && ch.Head() == v {
			// A worker may report a chain as one vertex.
			m, ok = samples[subtaskKey{ch.ID, s}]
		}
		if ok {
			mm := m
			st.Metrics = &mm
			st.BusyRatio, st.BackpressureRatio, st.IdleRatio = c.ratios.observe(jobID, m)
			st.Backpressure = backpressureLevel(st.BackpressureRatio)
			f := &vs.Metrics
			f.Sampled++
			f.RecordsIn += m.RecordsIn
			f.RecordsOut += m.RecordsOut
			f.BytesIn += m.BytesIn
			f.BytesOut += m.BytesOut
			f.RecordsInPerSec += m.RecordsInPerSec
			f.RecordsOutPerSec += m.RecordsOutPerSec
			f.StateBytes += m.StateBytes
			f.DeadLetters += m.DeadLetters
			f.StateWrittenBytes += m.StateWrittenBytes
			f.StatePacedMillis += m.StatePacedMillis
			f.BusyRatio = max(f.BusyRatio, st.BusyRatio)
			f.BackpressureRatio = max(f.BackpressureRatio, st.BackpressureRatio)
			if m.HasWatermark {
				if f.Sampled == 1 || m.Watermark < watermark {
					watermark = m.Watermark
				}
			} else {
				allWatermarks = false
			}
		}
		vs.Subtasks = append(vs.Subtasks, st)
	}
	if vs.Metrics.Sampled > 0 {
		vs.Metrics.Backpressure = backpressureLevel(vs.Metrics.BackpressureRatio)
		if allWatermarks {
			vs.Metrics.Watermark = &watermark
		}
	}
	return vs
}

// Vertex returns one vertex of job id.
func (c *Coordinator) Vertex(who Caller, id, vertex string) (*VertexStatus, error) {
	d, err := c.Job(who, id)
	if err != nil {
		return nil, err
	}
	for i := range d.Vertices {
		if d.Vertices[i].ID == vertex {
			return &d.Vertices[i], nil
		}
	}
	return nil, fmt.Errorf("%w: job %s has no vertex %q", ErrNoJob, id, vertex)
}

// ratioTracker remembers each subtask's sample before its latest, so that
// busy and backpressure ratios describe the recent past, not the whole
// attempt. It has its own lock.
type ratioTracker struct {
	mu   sync.Mutex
	last map[ratioKey][2]transport.SubtaskMetrics // previous, latest
}

type ratioKey struct {
	job     string
	vertex  string
	subtask int
}

// observe records m and returns the busy, backpressured and idle shares
// of the time between the sample before it and m (since the subtask
// started when there is none).
func (r *ratioTracker) observe(jobID string, m transport.SubtaskMetrics) (busy, bp, idle float64) {
	r.mu.Lock()
	if r.last == nil {
		r.last = map[ratioKey][2]transport.SubtaskMetrics{}
	}
	k := ratioKey{jobID, m.Vertex, m.Subtask}
	pair, ok := r.last[k]
	switch {
	case !ok || pair[1].Attempt != m.Attempt || m.SampledAt < pair[1].SampledAt:
		pair = [2]transport.SubtaskMetrics{{}, m}
	case m.SampledAt > pair[1].SampledAt:
		pair = [2]transport.SubtaskMetrics{pair[1], m}
	}
	r.last[k] = pair
	r.mu.Unlock()
	prev, cur := pair[0], pair[1]
	db := float64(cur.BusyMillis - prev.BusyMillis)
	dp := float64(cur.BackpressuredMillis - prev.BackpressuredMillis)
	di := float64(cur.IdleMillis - prev.IdleMillis)
	total := db + dp + di
	if total <= 0 {
		return 0, 0, 0
	}
	return db / total, dp / total, di / total
}

func (r *ratioTracker) drop(jobID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.last {
		if k.job == jobID {
			delete(r.last, k)
		}
	}
}

func checkpointSettings(plan *job.Plan) *CheckpointSettings {
	cs := plan.Checkpoint
	if !cs.Enabled() {
		return nil
	}
	mode := string(cs.Mode)
	if mode == "" {
		mode = string(job.ModeAligned)
	}
	storage := cs.Storage
	if storage == "" {
		storage = "data directory"
	}
	// Zero means the checkpoint coordinator's default: show what applies.
	orInt := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	timeout := cs.Timeout
	if timeout == 0 {
		timeout = checkpoint.DefaultTimeout
	}
	return &CheckpointSettings{IntervalMillis: cs.Interval, Mode: mode, TimeoutMillis: timeout, MinPauseMillis: cs.MinPause,
		AlignedTimeoutMillis: cs.AlignedTimeout, MaxConcurrent: orInt(cs.MaxConcurrent, checkpoint.DefaultMaxConcurrent),
		TolerableFailures: cs.TolerableFailures, Retain: orInt(cs.Retain, checkpoint.DefaultRetain),
		Incremental: cs.Incremental == nil || *cs.Incremental, Storage: storage}
}

// chainNames are the ids of the chains of the plan the job runs; c.mu is
// held.
func (j *jobState) chainNames() []string {
	if j.chainsOf != j.plan {
		j.chains, j.chainsOf = chainNames(j.plan), j.plan
	}
	return j.chains
}

// chainNames are the ids of a plan's chains by index.
func chainNames(p *job.Plan) []string {
	g, err := job.Build(p)
	if err != nil {
		return nil
	}
	out := make([]string, len(g.Chains))
	for i, ch := range g.Chains {
		out[i] = ch.ID
	}
	return out
}

func nameOf(chains []string, i int) string {
	if i >= 0 && i < len(chains) {
		return chains[i]
	}
	return fmt.Sprintf("chain %d", i)
}

// Checkpoints returns the checkpoint overview of job id, from the readers'
// view and the driver's loop: it never waits for the coordinator's lock.
func (c *Coordinator) Checkpoints(who Caller, id string) (*CheckpointOverview, error) {
	jv, err := c.viewedJob(who, id)
	if err != nil {
		return nil, err
	}
	out := &CheckpointOverview{JobID: id, Settings: checkpointSettings(jv.plan), InProgress: []CheckpointStats{}}
	if jv.restored.ID != 0 {
		r := jv.restored
		out.Latest.Restored = &r
	}
	if d := jv.ckpt; d != nil {
		d.do(func() {
			for cid, trig := range d.pending {
				out.InProgress = append(out.InProgress, CheckpointStats{ID: cid, Kind: d.kinds[cid].String(), Status: CheckpointInProgress,
					Attempt: d.attempt, TriggerTime: trig, DurationMillis: max(0, time.Now().UnixMilli()-trig)})
			}
		})
	}
	sort.Slice(out.InProgress, func(i, k int) bool { return out.InProgress[i].ID < out.InProgress[k].ID })
	s := jv.stats
	s.mu.Lock()
	s.loadLocked(c, id)
	out.Counts = CheckpointCounts{Restored: s.restores, Completed: s.completed, Failed: s.failed, InProgress: len(out.InProgress)}
	out.Counts.Total = s.completed + s.failed + int64(len(out.InProgress))
	out.Latest.Completed = cloneStats(s.latestCompleted)
	out.Latest.Savepoint = cloneStats(s.latestSavepoint)
	out.Latest.Failed = cloneStats(s.latestFailed)
	s.mu.Unlock()
	w := who.internal()
	if r := out.Latest.Restored; r != nil {
		r.Location = c.tenantText(w, r.Location)
	}
	if f := out.Latest.Failed; f != nil {
		f.Reason = c.tenantText(w, f.Reason)
	}
	return out, nil
}

func cloneStats(p *CheckpointStats) *CheckpointStats {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// CheckpointHistory returns up to limit of job id's latest checkpoints,
// newest first (limit ≤ 0 or over Config.CheckpointHistory: all it keeps).
func (c *Coordinator) CheckpointHistory(who Caller, id string, limit int) ([]CheckpointStats, error) {
	j, err := c.visibleJob(who, id)
	if err != nil {
		return nil, err
	}
	s := &j.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadLocked(c, id)
	n := len(s.recent)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]CheckpointStats, 0, n)
	for i := len(s.recent) - 1; i >= len(s.recent)-n; i-- {
		st := s.recent[i].CheckpointStats
		st.Reason = c.tenantText(who.internal(), st.Reason)
		out = append(out, st)
	}
	return out, nil
}

// CheckpointSummary returns the summary of job id's completed checkpoints.
func (c *Coordinator) CheckpointSummary(who Caller, id string) (*CheckpointSummary, error) {
	j, err := c.visibleJob(who, id)
	if err != nil {
		return nil, err
	}
	s := &j.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadLocked(c, id)
	sum := s.summary
	return &CheckpointSummary{DurationMillis: sum.DurationMillis.final(), StateSize: sum.StateSize.final(), Uploaded: sum.Uploaded.final(),
		InFlightBytes: sum.InFlightBytes.final(), AlignmentMillis: sum.AlignmentMillis.final()}, nil
}

func (c *Coordinator) visibleJob(who Caller, id string) (*jobState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookupLocked(id, who)
}

// Checkpoint returns checkpoint cid of job id with its subtasks' figures:
// from the coordinator's recent history, else from the metadata of a
// checkpoint its storage retains (a directory or an object store alike).
func (c *Coordinator) Checkpoint(who Caller, id string, cid int64) (*CheckpointDetail, error) {
	d, err := c.checkpointDetail(who, id, cid)
	if d != nil {
		d.Reason = c.tenantText(who.internal(), d.Reason)
	}
	return d, err
}

func (c *Coordinator) checkpointDetail(who Caller, id string, cid int64) (*CheckpointDetail, error) {
	j, err := c.visibleJob(who, id)
	if err != nil {
		return nil, err
	}
	chains := chainNames(j.plan)
	s := &j.stats
	s.mu.Lock()
	s.loadLocked(c, id)
	var found *statsEntry
	for i := len(s.recent) - 1; i >= 0; i-- {
		if s.recent[i].ID == cid {
			e := s.recent[i]
			found = &e
			break
		}
	}
	s.mu.Unlock()
	if found != nil && found.tasks != nil {
		out := &CheckpointDetail{CheckpointStats: found.CheckpointStats, SubtasksFrom: "memory", Subtasks: []SubtaskCheckpointStats{}}
		g, _ := job.Build(j.plan)
		if g != nil {
			for _, ch := range g.Chains {
				for sub := 0; sub < ch.Parallelism; sub++ {
					t := checkpoint.TaskID{Chain: ch.Index, Subtask: sub}
					m, acked := found.tasks[t]
					out.Subtasks = append(out.Subtasks, subtaskStats(chains, t, m, acked))
				}
			}
		}
		return out, nil
	}
	// Not in memory with its details: a retained checkpoint's metadata
	// has them.
	if m := c.retainedMetadata(j, cid); m != nil {
		out := &CheckpointDetail{SubtasksFrom: "metadata", Subtasks: []SubtaskCheckpointStats{}}
		if found != nil {
			out.CheckpointStats = found.CheckpointStats
		} else {
			out.CheckpointStats = CheckpointStats{ID: m.ID, Kind: m.Kind.String(), Status: CheckpointCompleted, TriggerTime: m.Trigger,
				EndTime: m.Done, DurationMillis: m.Done - m.Trigger}
		}
		for _, t := range m.Tasks {
			mm, acked := m.Metrics[t.Task.String()]
			out.Subtasks = append(out.Subtasks, subtaskStats(chains, t.Task, mm, acked && !t.Finished))
		}
		sortSubtasks(chains, out.Subtasks)
		return out, nil
	}
	if found != nil {
		return &CheckpointDetail{CheckpointStats: found.CheckpointStats, Subtasks: []SubtaskCheckpointStats{}}, nil
	}
	return nil, fmt.Errorf("%w: job %s has no checkpoint %d in its history", ErrNoCheckpoint, id, cid)
}

// retainedMetadata reads the metadata of checkpoint cid from j's storage,
// nil when it is not there.
func (c *Coordinator) retainedMetadata(j *jobState, cid int64) *checkpoint.Metadata {
	c.mu.Lock()
	root := j.checkpointRoot(c.cfg.DataDir)
	c.mu.Unlock()
	if root == "" {
		return nil
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return nil
	}
	st, err := checkpoint.OpenReplicatedStorageAt(root, nc, c.replicas())
	if err != nil {
		return nil
	}
	m, err := st.ReadMetadata(cid)
	if err != nil {
		return nil
	}
	return m
}

// Exception is one failure of a job.
type Exception struct {
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt"`
	// Kind is "task" (a subtask failed: Chain, Subtask and Worker say
	// which), "restart" (the cause of a restart, whatever failed) or
	// "job" (what the job failed with).
	Kind    string `json:"kind"`
	Chain   string `json:"chain,omitempty"`
	Subtask *int   `json:"subtask,omitempty"`
	Worker  string `json:"worker,omitempty"`
	// AfterPeer: the subtask failed because another one did.
	AfterPeer bool   `json:"afterPeer,omitempty"`
	Message   string `json:"message"`
}

// Exceptions is a job's failure history, newest first.
type Exceptions struct {
	// Root is the latest: what the job failed with, or its latest
	// restart's cause (nil: nothing failed).
	Root    *Exception  `json:"root"`
	Entries []Exception `json:"entries"`
	// Truncated: older task failures were dropped (the coordinator keeps
	// the latest maxExceptions).
	Truncated bool `json:"truncated"`
}

// maxExceptions bounds the task failures kept per job; maxMessage the
// length of one message (guest text is data: bounded before it is shown).
const (
	maxExceptions = 100
	maxMessage    = 4096
)

// exceptionLog holds a job's latest task failures; it has its own lock.
type exceptionLog struct {
	mu        sync.Mutex
	entries   []Exception
	truncated bool
}

func (l *exceptionLog) add(e Exception) {
	if len(e.Message) > maxMessage {
		e.Message = strings.ToValidUTF8(e.Message[:maxMessage], "") + "…"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	if len(l.entries) > maxExceptions {
		l.entries = append(l.entries[:0:0], l.entries[len(l.entries)-maxExceptions:]...)
		l.truncated = true
	}
}

// taskFailed records a subtask's failure report; c.mu is held.
func (c *Coordinator) taskFailedLocked(j *jobState, st transport.TaskStatus, end lifecycle.TaskEnd) {
	sub := st.Task.Subtask
	j.exceptions.add(Exception{Time: c.now(), Attempt: st.Attempt, Kind: "task", Chain: nameOf(chainNames(j.plan), st.Task.Chain),
		Subtask: &sub, Worker: st.Worker, AfterPeer: end == lifecycle.TaskFailedAfterPeer, Message: orString(st.Error, "failed")})
}

// Exceptions returns job id's failures: its subtasks' failure reports,
// the causes of its restarts and the error it failed with.
func (c *Coordinator) Exceptions(who Caller, id string) (*Exceptions, error) {
	c.mu.Lock()
	j, err := c.lookupLocked(id, who)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	restarts := slices.Clone(j.restartLog)
	var final *Exception
	if j.result != nil && j.result.Error != "" {
		final = &Exception{Time: j.started.Add(j.result.Duration), Attempt: j.attempt, Kind: "job", Message: j.result.Error}
	}
	c.mu.Unlock()
	j.exceptions.mu.Lock()
	out := &Exceptions{Entries: slices.Clone(j.exceptions.entries), Truncated: j.exceptions.truncated}
	j.exceptions.mu.Unlock()
	for _, r := range restarts {
		// The restart's attempt is the new one; the cause ended the one before.
		out.Entries = append(out.Entries, Exception{Time: r.Time, Attempt: r.Attempt - 1, Kind: "restart", Message: r.Reason})
	}
	if final != nil {
		out.Entries = append(out.Entries, *final)
	}
	sort.SliceStable(out.Entries, func(i, k int) bool { return out.Entries[i].Time.After(out.Entries[k].Time) })
	for i := range out.Entries {
		out.Entries[i].Message = c.tenantText(who.internal(), out.Entries[i].Message)
		if len(out.Entries[i].Message) > maxMessage {
			out.Entries[i].Message = strings.ToValidUTF8(out.Entries[i].Message[:maxMessage], "") + "…"
		}
	}
	switch {
	case final != nil:
		out.Root = final
	case len(restarts) > 0:
		r := restarts[len(restarts)-1]
		out.Root = &Exception{Time: r.Time, Attempt: r.Attempt - 1, Kind: "restart", Message: r.Reason}
	}
	if out.Root != nil {
		out.Root.Message = c.tenantText(who.internal(), out.Root.Message)
	}
	if out.Entries == nil {
		out.Entries = []Exception{}
	}
	return out, nil
}

// Cancel cancels job id for who, as `wstream cancel` does; it returns once
// the cancellation has begun.
func (c *Coordinator) Cancel(who Caller, id string) error {
	return c.cancel(id, who.internal())
}

// Savepoint takes a savepoint of a job, or stops it with one (req.Stop),
// for who, as `wstream savepoint` and `wstream stop` do; done gets the
// outcome once, when the savepoint has completed or failed.
func (c *Coordinator) Savepoint(who Caller, req transport.SavepointRequest, done func(transport.SavepointReply)) {
	c.savepoint(req, who.internal(), done)
}

// CanSee returns ErrNoJob unless who may see job id.
func (c *Coordinator) CanSee(who Caller, id string) error {
	_, err := c.visibleJob(who, id)
	return err
}
