package coordinator

import (
	"fmt"
	"sort"
	"time"
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

// failover is what a check decided for one job: cancel the attempt's
// remaining workers (and, on the off chance that it still listens, the
// lost one), and end the attempt when nothing else is left to report.
type failover struct {
	j       *jobState
	attempt int
	cancel  []string
	lost    []string
	failed  bool
	over    bool
	reason  string
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
	for id, w := range c.workers {
		if silent := now.Sub(w.lastSeen); silent > c.cfg.WorkerTimeout {
			reason := fmt.Sprintf("worker %s lost: no heartbeat for %s", id, silent.Round(time.Millisecond))
			delete(c.workers, id)
			c.gone[id] = reason
			lost = append(lost, id)
			// Every attempt with subtasks on it fails over, even one
			// still being deployed (whose turn comes once it is).
			for _, j := range c.jobs {
				if !j.done && len(j.placement[id]) > 0 {
					if j.lost == nil {
						j.lost = map[string]string{}
					}
					if j.lost[id] == "" {
						j.lost[id] = reason
					}
				}
			}
		}
	}
	sort.Strings(lost)
	var failovers []failover
	for _, j := range c.jobs {
		if f, ok := c.failoverLocked(j); ok {
			failovers = append(failovers, f)
		}
	}
	c.mu.Unlock()
	for _, id := range lost {
		c.cfg.Logf("coordinator: %s", c.goneReason(id))
	}
	for _, f := range failovers {
		go c.runFailover(f)
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

// failoverLocked takes a job's lost workers out of its current attempt:
// their subtasks that have not reported count as ended, and the attempt
// fails with the first loss as its error (unless it failed already or is
// being cancelled). c.mu is held.
func (c *Coordinator) failoverLocked(j *jobState) (failover, bool) {
	if j.done || j.deploying || j.placement == nil || j.ended == len(j.refs) {
		// Ended, between attempts, or about to end: nothing runs to fail.
		return failover{}, false
	}
	var lost []string
	for _, w := range j.placement.workers() {
		if j.lost[w] != "" {
			lost = append(lost, w)
			continue
		}
		if _, ok := c.workers[w]; !ok {
			// Lost while its placement was being made.
			if j.lost == nil {
				j.lost = map[string]string{}
			}
			r, ok := c.gone[w]
			if !ok {
				r = fmt.Sprintf("worker %s lost", w)
			}
			j.lost[w] = r
			lost = append(lost, w)
		}
	}
	if len(lost) == 0 {
		return failover{}, false
	}
	f := failover{j: j, attempt: j.attempt, lost: lost, reason: j.lost[lost[0]]}
	for _, w := range lost {
		j.ended += len(j.placement[w]) - j.reported[w]
		// Its slots went with it: nothing to release.
		delete(j.placement, w)
	}
	if j.failed == "" && !j.canceled {
		j.failed = f.reason
		f.failed = true
	}
	f.cancel = j.placement.workers()
	f.over = j.ended == len(j.refs)
	return f, true
}

// runFailover carries out a failover decided by failoverLocked.
func (c *Coordinator) runFailover(f failover) {
	id := f.j.info.JobID
	c.cfg.Logf("coordinator: job %s attempt %d: %s", id, f.attempt, f.reason)
	// A worker declared lost may only be cut off: if it still hears, it
	// stops its subtasks of the failed attempt.
	go c.cancelAll(f.lost, id, f.attempt, true)
	if f.failed && len(f.cancel) > 0 {
		c.cancelAll(f.cancel, id, f.attempt, true)
	}
	if f.over {
		c.attemptEnded(f.j)
	}
}
