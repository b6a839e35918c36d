package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// A coordinator that starts with Config.ResumeJobs takes over the jobs its
// predecessor ran: it reads the running jobs' specs from the job bucket,
// waits for the workers to heartbeat (a heartbeat registers a worker), lets
// the old attempts' subtasks be cancelled (a worker's heartbeat lists the
// attempts it runs, and the coordinator cancels those that are not the
// current attempt of a job it runs), and starts a new attempt of each job
// from its latest completed checkpoint, as after a restart.

// resumedJob makes the state of a job to resume from its spec. The job's
// attempt is already the new one, so that reports of the old attempt are
// ignored and its subtasks cancelled wherever they still run.
func (c *Coordinator) resumedJob(s *JobSpec) (*jobState, error) {
	plan, err := job.Parse(s.Plan)
	if err != nil {
		return nil, fmt.Errorf("its plan: %w", err)
	}
	g, err := job.Build(plan)
	if err != nil {
		return nil, fmt.Errorf("its plan: %w", err)
	}
	var refs []transport.TaskRef
	for _, ch := range g.Chains {
		for sub := 0; sub < ch.Parallelism; sub++ {
			refs = append(refs, transport.TaskRef{Chain: ch.Index, Subtask: sub})
		}
	}
	now := c.now()
	started := s.Started
	if started.IsZero() {
		started = now
	}
	log := append(s.RestartLog, RestartEntry{Attempt: s.Attempt, Reason: "the coordinator restarted: attempt resumed by a new coordinator", Time: now})
	return &jobState{
		info:             transport.JobInfo{JobID: s.JobID, Name: s.Name, State: transport.JobRunning, Started: started},
		plan:             plan,
		digest:           s.ModuleDigest,
		module:           s.ModuleName,
		refs:             refs,
		attempt:          s.Attempt + 1,
		restarts:         s.Restarts,
		started:          started,
		metrics:          map[string]*transport.VertexMetrics{},
		fromSavepoint:    s.FromSavepoint,
		savepointID:      s.SavepointID,
		restartLog:       log,
		ckptRoot:         s.CheckpointRoot,
		latestCheckpoint: s.LatestCheckpoint,
		// Nothing runs for the coordinator until the new attempt is
		// deployed: failover leaves the job alone.
		deploying: true,
	}, nil
}

// loadJobs reads the running jobs of the bucket into c.jobs; Start calls
// it before it subscribes, and resumes them once it has.
func (c *Coordinator) loadJobs(ctx context.Context) ([]*jobState, error) {
	specs, err := runningSpecs(ctx, c.store.kv)
	if err != nil {
		return nil, fmt.Errorf("coordinator: reading the running jobs from %s: %w", transport.JobsBucket, err)
	}
	var out []*jobState
	for _, s := range specs {
		j, err := c.resumedJob(s)
		if err != nil {
			c.cfg.Logf("coordinator: job %s cannot be resumed: %v", s.JobID, err)
			s.State, s.Error, s.Updated = transport.JobFailed, "resuming the job: "+err.Error(), c.now()
			c.store.put(s)
			continue
		}
		c.jobs[j.info.JobID] = j
		out = append(out, j)
	}
	return out, nil
}

// resume starts a new attempt of a job loaded from the bucket, once
// workers have registered and the old attempt has stopped.
func (c *Coordinator) resume(j *jobState, quit <-chan struct{}) {
	id := j.info.JobID
	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id), c.onTaskStatus)
	if err != nil {
		c.resumeFailed(j, fmt.Errorf("subscribing to its task reports: %w", err))
		return
	}
	c.mu.Lock()
	j.sub = sub
	c.mu.Unlock()
	c.writeRecord(j, transport.JobRunning)
	c.cfg.Logf("coordinator: resuming job %s (attempt %d) once workers have registered", id, j.attempt)

	step := min(100*time.Millisecond, max(c.cfg.HeartbeatInterval/2, 5*time.Millisecond))
	tick := time.NewTicker(step)
	defer tick.Stop()
	wait := func(until time.Time, done func() bool) bool {
		for !done() {
			if c.now().After(until) {
				return false
			}
			select {
			case <-quit:
				return false
			case <-tick.C:
			}
		}
		return true
	}
	// Every live worker heartbeats within an interval or two: placing the
	// job earlier would crowd it onto the first workers to speak.
	settle := c.startedAt.Add(2*c.cfg.HeartbeatInterval + step)
	var pl placement
	var perr error
	ok := wait(c.startedAt.Add(c.cfg.DeployTimeout), func() bool {
		if c.canceled(j) {
			return true
		}
		if c.now().Before(settle) {
			return false
		}
		pl, perr = c.place(j.info.Name, j.refs)
		return perr == nil
	})
	select {
	case <-quit:
		if pl != nil {
			c.release(pl)
		}
		return
	default:
	}
	if c.canceled(j) {
		if pl != nil {
			c.release(pl)
		}
		c.mu.Lock()
		result := c.endJob(j)
		c.mu.Unlock()
		c.announce(j, result)
		return
	}
	if !ok {
		if perr == nil {
			perr = errors.New("no worker registered")
		}
		c.resumeFailed(j, fmt.Errorf("no placement within %s: %w", c.cfg.DeployTimeout, perr))
		return
	}
	// The old attempt's subtasks stop when their workers hear the cancel
	// that their heartbeats bring about; the new attempt must not share
	// checkpoint storage and sink transactions with them.
	if !wait(c.now().Add(30*time.Second), func() bool { return !c.oldAttemptRuns(j) }) {
		c.cfg.Logf("coordinator: job %s: subtasks of an earlier attempt still run after 30s; deploying attempt %d anyway", id, j.attempt)
	}
	c.mu.Lock()
	j.placement = pl
	c.mu.Unlock()
	if err := c.deployAttempt(j); err != nil {
		c.resumeFailed(j, err)
	}
}

func (c *Coordinator) canceled(j *jobState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return j.canceled
}

// oldAttemptRuns reports whether a live worker's latest heartbeat lists an
// attempt of j older than its current one.
func (c *Coordinator) oldAttemptRuns(j *jobState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		for _, r := range w.info.Running {
			if r.JobID == j.info.JobID && r.Attempt < j.attempt {
				return true
			}
		}
	}
	return false
}

// resumeFailed ends a job that could not be resumed.
func (c *Coordinator) resumeFailed(j *jobState, err error) {
	c.mu.Lock()
	j.failed = fmt.Sprintf("resuming attempt %d: %v", j.attempt, err)
	j.canceled = true // no further restarts
	result := c.endJob(j)
	c.mu.Unlock()
	c.announce(j, result)
}

// reconcileLocked compares a worker's heartbeat with what the coordinator
// runs there. Attempts the worker lists that the coordinator does not run
// (any more) are cancelled, at most every second per attempt: the cancel
// may have been lost, or come from a coordinator that has since died. A
// current attempt that the worker no longer lists, while some of its
// subtasks there never reported their end, lost those reports (they were
// published while NATS was unreachable): after three such heartbeats in a
// row the attempt fails and restarts from its latest checkpoint. c.mu is
// held; it returns the cancels to send and the failovers to run.
func (c *Coordinator) reconcileLocked(worker string, running []transport.RunningAttempt) (cancels []transport.RunningAttempt, failovers []failover) {
	now := c.now()
	listed := map[string]int{}
	for _, r := range running {
		listed[r.JobID] = r.Attempt
		j := c.jobs[r.JobID]
		stale := j == nil || j.done || r.Attempt < j.attempt ||
			(r.Attempt == j.attempt && !j.deploying && (j.failed != "" || j.canceled))
		if !stale {
			continue
		}
		key := worker + "/" + r.JobID + "/" + fmt.Sprint(r.Attempt)
		if last, ok := c.cancelled[key]; ok && now.Sub(last) < time.Second {
			continue
		}
		c.cancelled[key] = now
		cancels = append(cancels, r)
	}
	for id, j := range c.jobs {
		if j.done || j.deploying || j.placement == nil || j.lost[worker] != "" {
			continue
		}
		owed := len(j.placement[worker]) - j.reported[worker]
		if a, ok := listed[id]; owed <= 0 || (ok && a == j.attempt) {
			delete(j.missing, worker)
			continue
		}
		if j.missing == nil {
			j.missing = map[string]int{}
		}
		j.missing[worker]++
		if j.missing[worker] < 3 {
			continue
		}
		delete(j.missing, worker)
		f := failover{j: j, attempt: j.attempt,
			reason: fmt.Sprintf("worker %s no longer runs attempt %d, but %d of its subtasks there never reported their end (reports lost while NATS was unreachable)", worker, j.attempt, owed)}
		if j.reported == nil {
			j.reported = map[string]int{}
		}
		j.reported[worker] += owed
		j.ended += owed
		if j.failed == "" && !j.canceled {
			j.failed = f.reason
			f.failed = true
			f.cancel = j.placement.workers()
		}
		f.over = j.ended == len(j.refs)
		failovers = append(failovers, f)
	}
	return cancels, failovers
}

// afterReconnect runs when the coordinator's NATS connection came back:
// workers get a fresh start for their heartbeats (the coordinator heard
// nothing while it was away), and every attempt that spans several workers
// checks its data stream, which is gone when the NATS server lost its
// store: such an attempt fails (its channels are broken) and restarts from
// the latest checkpoint.
func (c *Coordinator) afterReconnect() {
	c.mu.Lock()
	now := c.now()
	for _, w := range c.workers {
		w.lastSeen = now
	}
	type check struct {
		j       *jobState
		attempt int
	}
	var checks []check
	for _, j := range c.jobs {
		if !j.done && !j.deploying && len(j.placement) > 1 && j.failed == "" && !j.canceled {
			checks = append(checks, check{j, j.attempt})
		}
	}
	c.mu.Unlock()
	c.cfg.Logf("coordinator: reconnected to NATS (%s)", c.cfg.NATS.ConnectedUrlRedacted())
	for _, k := range checks {
		go c.checkDataStream(k.j, k.attempt)
	}
}

// checkDataStream fails the attempt of j when its data stream is gone.
func (c *Coordinator) checkDataStream(j *jobState, attempt int) {
	id := j.info.JobID
	js, err := jetstream.New(c.cfg.NATS)
	if err != nil {
		c.failJob(j, attempt, fmt.Sprintf("checking its data stream after NATS reconnected: %v", err))
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		_, err := js.Stream(ctx, transport.DataStream(id))
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, jetstream.ErrStreamNotFound):
			c.failJob(j, attempt, fmt.Sprintf("its data stream %s was lost (the NATS server restarted)", transport.DataStream(id)))
			return
		case time.Now().After(deadline):
			c.failJob(j, attempt, fmt.Sprintf("its data stream %s cannot be reached after NATS reconnected: %v", transport.DataStream(id), err))
			return
		}
		c.mu.Lock()
		stop := j.done || j.attempt != attempt || j.failed != ""
		c.mu.Unlock()
		if stop {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
