package coordinator

import (
	"slices"
	"sync"

	"github.com/wstream/wstream/transport"
)

// metricsBoard holds the latest sample of every subtask of every job, as
// workers report them, and derives rates from consecutive samples. It has
// its own lock: reports arrive often and must not contend with c.mu.
type metricsBoard struct {
	mu    sync.Mutex
	byJob map[string]map[subtaskKey]transport.SubtaskMetrics
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
	b.mu.Unlock()
}

// SubtaskMetrics returns the latest sample of each subtask of a job's
// current attempt, ordered by vertex id and subtask; empty when no worker
// has reported one.
func (c *Coordinator) SubtaskMetrics(jobID string) []transport.SubtaskMetrics {
	return c.board.get(jobID)
}
