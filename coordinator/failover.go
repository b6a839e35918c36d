package coordinator

import (
	"fmt"
	"sort"
	"time"

	"github.com/wstream/wstream/internal/logging"
)

// RestartEntry records one restart of a job: the attempt that failed and
// why.
type RestartEntry struct {
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason"`
	Time    time.Time `json:"time"`
}

// watchWorkers declares lost the workers whose heartbeats have stopped for
// longer than WorkerTimeout and fails over the job attempts that ran on
// them, until quit is closed.
func (c *Coordinator) watchWorkers(quit <-chan struct{}) {
	defer c.monitor.Done()
	every := min(c.cfg.HeartbeatInterval, c.cfg.WorkerTimeout/3)
	every = max(every, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
			c.checkWorkers()
		}
	}
}

// checkWorkers runs one liveness check. While the coordinator's own NATS
// connection is down it hears no heartbeats, so it judges nobody; when the
// connection is back, every worker starts afresh (afterReconnect).
func (c *Coordinator) checkWorkers() {
	nc := c.cfg.NATS
	if !nc.IsConnected() {
		c.offline = true
		return
	}
	if n := nc.Stats().Reconnects; n != c.reconnects || c.offline {
		c.reconnects, c.offline = n, false
		c.afterReconnect()
	}
	c.mu.Lock()
	now := c.now()
	for k, t := range c.cancelled {
		if now.Sub(t) > time.Minute {
			delete(c.cancelled, k)
		}
	}
	var lost []string
	// touched: the jobs that lost a worker, and the first loss.
	touched := map[*jobState]string{}
	for id, w := range c.workers {
		if silent := now.Sub(w.lastSeen); silent > c.cfg.WorkerTimeout {
			reason := fmt.Sprintf("worker %s lost: no heartbeat for %s", id, silent.Round(time.Millisecond))
			delete(c.workers, id)
			c.gone[id] = reason
			lost = append(lost, id)
			// Every attempt with subtasks on it fails over, even one
			// still being deployed (once it is).
			for _, j := range c.jobs {
				if _, ok := j.placement[id]; ok {
					c.drainLocked(j)
					j.lc.WorkerLost(now.UnixMilli(), id, reason)
					// Its slots went with it: nothing to release.
					delete(j.placement, id)
					if touched[j] == "" {
						touched[j] = reason
					}
				}
			}
		}
	}
	sort.Strings(lost)
	var steps []jobStep
	for j, reason := range touched {
		c.cfg.Log.Warn(reason, logging.Job, j.info.JobID, logging.Attempt, j.lc.Attempt())
		if acts := c.applyLocked(j); len(acts) > 0 {
			steps = append(steps, jobStep{j, acts})
		}
	}
	c.mu.Unlock()
	for _, id := range lost {
		c.cfg.Log.Warn(c.goneReason(id), logging.Worker, id)
	}
	for _, st := range steps {
		go c.carryOut(st.j, st.acts)
	}
}

func (c *Coordinator) goneReason(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.gone[id]; ok {
		return r
	}
	return fmt.Sprintf("worker %s lost", id)
}
