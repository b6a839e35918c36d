package coordinator

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// metricsBoard holds the latest sample of every subtask of every job, as
// workers report them, and derives rates from consecutive samples. It has
// its own lock: reports arrive often and must not contend with c.mu.
type metricsBoard struct {
	mu    sync.Mutex
	byJob map[string]map[subtaskKey]transport.SubtaskMetrics
	// ckpts holds each running job's checkpoint figures.
	ckpts map[string]*CheckpointMetrics
}

type subtaskKey struct {
	vertex  string
	subtask int
}

// put records samples. A sample of a newer attempt replaces the job's
// samples of older ones; a sample of an older attempt is dropped.
func (b *metricsBoard) put(ms []transport.SubtaskMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byJob == nil {
		b.byJob = map[string]map[subtaskKey]transport.SubtaskMetrics{}
	}
	for _, m := range ms {
		job := b.byJob[m.JobID]
		if job == nil {
			job = map[subtaskKey]transport.SubtaskMetrics{}
			b.byJob[m.JobID] = job
		}
		k := subtaskKey{m.Vertex, m.Subtask}
		prev, ok := job[k]
		if ok && prev.Attempt > m.Attempt {
			continue
		}
		if ok && prev.Attempt < m.Attempt {
			// A new attempt: the old one's figures no longer describe the job.
			for kk, v := range job {
				if v.Attempt < m.Attempt {
					delete(job, kk)
				}
			}
			ok = false
		}
		if ok && m.SampledAt > prev.SampledAt {
			dt := float64(m.SampledAt-prev.SampledAt) / 1000
			m.RecordsInPerSec = float64(m.RecordsIn-prev.RecordsIn) / dt
			m.RecordsOutPerSec = float64(m.RecordsOut-prev.RecordsOut) / dt
		} else if ok {
			// A repeated or reordered sample keeps the rates it had.
			m.RecordsInPerSec, m.RecordsOutPerSec = prev.RecordsInPerSec, prev.RecordsOutPerSec
		}
		job[k] = m
	}
}

// get returns a job's samples ordered by vertex and subtask.
func (b *metricsBoard) get(jobID string) []transport.SubtaskMetrics {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]transport.SubtaskMetrics, 0, len(b.byJob[jobID]))
	for _, m := range b.byJob[jobID] {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b transport.SubtaskMetrics) int {
		if a.Vertex != b.Vertex {
			if a.Vertex < b.Vertex {
				return -1
			}
			return 1
		}
		return a.Subtask - b.Subtask
	})
	return out
}

func (b *metricsBoard) drop(jobID string) {
	b.mu.Lock()
	delete(b.byJob, jobID)
	delete(b.ckpts, jobID)
	b.mu.Unlock()
}

// CheckpointBuckets are the upper bounds, in seconds, of the checkpoint
// duration histogram.
var CheckpointBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// CheckpointMetrics are a job's checkpoint figures since the coordinator
// took the job on (across its attempts).
type CheckpointMetrics struct {
	// Completed and Aborted count checkpoints and savepoints that completed
	// or were aborted (declined, expired, or cut short by a failure).
	Completed, Aborted int64
	// DurationCount, DurationSum (seconds) and DurationBuckets
	// (cumulative, at CheckpointBuckets) are the histogram of the
	// completed ones' durations, trigger to completion.
	DurationCount   uint64
	DurationSum     float64
	DurationBuckets []uint64
	// Last is the latest completed checkpoint's history entry (zero ID:
	// none yet).
	Last HistoryEntry
}

// checkpoint records the outcome of one checkpoint of a job.
func (b *metricsBoard) checkpoint(jobID string, e HistoryEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ckpts == nil {
		b.ckpts = map[string]*CheckpointMetrics{}
	}
	st := b.ckpts[jobID]
	if st == nil {
		st = &CheckpointMetrics{DurationBuckets: make([]uint64, len(CheckpointBuckets))}
		b.ckpts[jobID] = st
	}
	if e.Status != "completed" {
		st.Aborted++
		return
	}
	st.Completed++
	secs := e.Duration.Seconds()
	st.DurationCount++
	st.DurationSum += secs
	for k, le := range CheckpointBuckets {
		if secs <= le {
			st.DurationBuckets[k]++
		}
	}
	st.Last = e
}

func (b *metricsBoard) checkpointStats(jobID string) CheckpointMetrics {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.ckpts[jobID]
	if st == nil {
		return CheckpointMetrics{DurationBuckets: make([]uint64, len(CheckpointBuckets))}
	}
	out := *st
	out.DurationBuckets = slices.Clone(st.DurationBuckets)
	return out
}

// onMetrics takes a worker's samples (transport.SubjectMetrics). Only
// samples of the current attempt of a job that has not ended are kept, so
// a late report cannot bring back a job's figures once it has ended; the
// tenant is the coordinator's own record of the job's owner.
func (c *Coordinator) onMetrics(m *nats.Msg) {
	var r transport.MetricsReport
	if json.Unmarshal(m.Data, &r) != nil || !idChars.MatchString(r.Worker) {
		return
	}
	keep := r.Subtasks[:0]
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range r.Subtasks {
		j := c.jobs[s.JobID]
		if j == nil || j.done || s.Attempt != j.attempt {
			continue
		}
		s.Worker, s.Tenant = r.Worker, j.info.Tenant
		keep = append(keep, s)
	}
	// Under c.mu, so that a job that ends meanwhile (syncLocked drops its
	// figures) is not filled again.
	c.board.put(keep)
}

// JobStats is what the metrics endpoint reports of one job that has not
// ended.
type JobStats struct {
	JobID, Name, Tenant string
	// State is the lifecycle's (RUNNING, RESTARTING, …); Restarts counts
	// the restarts its restart strategy made; Started is when it was
	// submitted.
	State       string
	Attempt     int
	Restarts    int
	Started     time.Time
	Checkpoints CheckpointMetrics
}

// Stats is the coordinator's figures for the metrics endpoint.
type Stats struct {
	// Jobs are the jobs that have not ended, ordered by id.
	Jobs []JobStats
	// JobsByState counts every job the coordinator knows, ended or not,
	// by state; every state is present.
	JobsByState map[string]int
	// Workers and LiveWorkers count the registered workers and those
	// heard from within the worker timeout.
	Workers, LiveWorkers int
}

// MetricsStats returns the coordinator's figures for the metrics endpoint.
func (c *Coordinator) MetricsStats() Stats {
	out := Stats{JobsByState: map[string]int{}}
	// Every state, so that a state no job is in reads 0 rather than
	// vanishing.
	for st := lifecycle.Created; st <= lifecycle.Suspended; st++ {
		out.JobsByState[st.String()] = 0
	}
	v := c.readView()
	for _, jv := range v.jobs {
		out.JobsByState[jv.state.String()]++
		if jv.state.Terminal() {
			continue
		}
		r := jv.row
		out.Jobs = append(out.Jobs, JobStats{JobID: r.JobID, Name: r.Name, Tenant: r.Tenant,
			State: r.State, Attempt: r.Attempt, Restarts: r.Restarts, Started: r.Started})
	}
	for _, w := range v.workers {
		out.Workers++
		if c.live(w) {
			out.LiveWorkers++
		}
	}
	for k := range out.Jobs {
		out.Jobs[k].Checkpoints = c.board.checkpointStats(out.Jobs[k].JobID)
	}
	slices.SortFunc(out.Jobs, func(a, b JobStats) int {
		if a.JobID < b.JobID {
			return -1
		}
		if a.JobID > b.JobID {
			return 1
		}
		return 0
	})
	return out
}

// SubtaskMetrics returns the latest sample of each subtask of a job's
// current attempt, ordered by vertex id and subtask; empty when no worker
// has reported one.
func (c *Coordinator) SubtaskMetrics(jobID string) []transport.SubtaskMetrics {
	return c.board.get(jobID)
}
