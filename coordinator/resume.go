package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// A coordinator that starts with Config.ResumeJobs takes over the jobs its
// predecessor ran: it reads the running jobs' specs from the job bucket,
// waits for the workers to heartbeat (a heartbeat registers a worker), lets
// the old attempts' subtasks be cancelled (a worker's heartbeat lists the
// attempts it runs, and each job's lifecycle cancels those it does not
// run), and starts a new attempt of each job from its latest completed
// checkpoint, as after a restart (lifecycle.Job.Resume).

// resumedJob makes the state of a job to resume from its spec. Its
// lifecycle is CREATED at the attempt after the spec's, so that reports of
// the old attempt are ignored and its subtasks cancelled wherever they
// still run.
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
	lc := newLifecycle(plan, s.FromSavepoint != "")
	// A job whose attempt may be adopted stays at that attempt until the
	// workers have spoken (tryAdopt); otherwise it goes on to the next.
	adopt := c.mayAdopt(s)
	if last := s.Attempt - 1; !adopt || last >= 0 {
		if !adopt {
			last = s.Attempt
		}
		if err := lc.Recover(last, s.Restarts, lifecycleLog(s.RestartLog)); err != nil {
			return nil, err
		}
	}
	started := s.Started
	if started.IsZero() {
		started = c.now()
	}
	j := &jobState{
		info:             transport.JobInfo{JobID: s.JobID, Name: s.Name, State: transport.JobRunning, Started: started, Tenant: s.Tenant},
		plan:             plan,
		digest:           s.ModuleDigest,
		module:           s.ModuleName,
		refs:             refs,
		lc:               lc,
		started:          started,
		metrics:          map[string]*transport.VertexMetrics{},
		fromSavepoint:    s.FromSavepoint,
		savepointID:      s.SavepointID,
		ckptRoot:         s.CheckpointRoot,
		latestCheckpoint: s.LatestCheckpoint,
	}
	if adopt {
		j.adopt = &adoption{spec: s}
	}
	c.syncLocked(j)
	return j, nil
}

// loadJobsLocked makes the running jobs of the bucket, read by
// activate before it subscribes, jobs of c.jobs; activate resumes them
// once it has subscribed. c.mu is held. A job c.jobs has already is left
// as it is: the bucket was read without c.mu.
func (c *Coordinator) loadJobsLocked(specs []*JobSpec) []*jobState {
	var out []*jobState
	for _, s := range specs {
		if _, known := c.jobs[s.JobID]; known {
			continue
		}
		j, err := c.resumedJob(s)
		if err != nil {
			c.cfg.Log.Error("job cannot be resumed", logging.Job, s.JobID, "err", err)
			s.State, s.Error, s.Updated, s.Epoch = transport.JobFailed, "resuming the job: "+err.Error(), c.now(), c.epoch()
			c.store.put(s)
			continue
		}
		c.jobs[j.info.JobID] = j
		out = append(out, j)
	}
	return out
}

// resume starts a new attempt of a job loaded from the bucket: its
// placement waits until workers have registered and the old attempt has
// stopped (awaitWorkers).
func (c *Coordinator) resume(j *jobState, quit <-chan struct{}) {
	c.stampCounter(j)
	if j.adopt != nil && c.tryAdopt(j, quit) {
		return
	}
	id := j.info.JobID
	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id, "*"), c.tracked(statusFromWorker(c.onTaskStatus)))
	c.mu.Lock()
	now := c.nowMillis()
	_ = j.lc.Resume(now)
	if err != nil {
		_ = j.lc.DeployFailed(now, j.lc.Attempt(), "subscribing to its task reports: "+err.Error(), nil)
	}
	j.sub = sub
	acts := c.applyLocked(j)
	c.mu.Unlock()
	if err == nil {
		c.cfg.Log.Info("resuming the job once workers have registered", logging.Job, id, logging.Attempt, j.attempt)
	}
	c.carryOut(j, acts)
}

// awaitWorkers places attempt n of a resumed job once the workers have
// spoken (every live worker heartbeats within an interval or two: placing
// the job earlier would crowd it onto the first workers to speak), within
// Config.DeployTimeout of the coordinator's start, and waits until no
// worker runs an older attempt any more: the new attempt must not share
// checkpoint storage and sink transactions with it. It returns
// errNotWanted when quit closes or the attempt is no longer wanted.
func (c *Coordinator) awaitWorkers(j *jobState, n int, quit <-chan struct{}) (placement, error) {
	id := j.info.JobID
	step := min(100*time.Millisecond, max(c.cfg.HeartbeatInterval/2, 5*time.Millisecond))
	tick := time.NewTicker(step)
	defer tick.Stop()
	wanted := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return j.lc.AwaitsPlacement(n)
	}
	// wait polls done until until; it reports whether done came true, and
	// gives up early when the attempt is not wanted any more.
	wait := func(until time.Time, done func() bool) (bool, error) {
		for {
			switch {
			case !wanted():
				return false, errNotWanted
			case done():
				return true, nil
			case c.now().After(until):
				return false, nil
			}
			select {
			case <-quit:
				return false, errNotWanted
			case <-tick.C:
			}
		}
	}
	settle := c.listening.Add(2*c.cfg.HeartbeatInterval + step)
	var pl placement
	var perr error
	ok, err := wait(c.startedAt.Add(c.cfg.DeployTimeout), func() bool {
		if c.now().Before(settle) {
			return false
		}
		pl, perr = c.place(j.info.Name, j.refs)
		return perr == nil
	})
	if err != nil {
		if pl != nil {
			c.release(pl)
		}
		return nil, err
	}
	if !ok {
		if perr == nil {
			perr = errors.New("no worker registered")
		}
		return nil, fmt.Errorf("no placement within %s: %w", c.cfg.DeployTimeout, perr)
	}
	// The old attempt's subtasks stop when their workers hear the cancel
	// that their heartbeats bring about.
	ok, err = wait(c.now().Add(30*time.Second), func() bool { return !c.oldAttemptRuns(j, n) })
	if err != nil {
		c.release(pl)
		return nil, err
	}
	if !ok {
		c.cfg.Log.Warn("subtasks of an earlier attempt still run after 30s; deploying anyway", logging.Job, id, logging.Attempt, n)
	}
	return pl, nil
}

// oldAttemptRuns reports whether a live worker's latest heartbeat lists an
// attempt of j older than n.
func (c *Coordinator) oldAttemptRuns(j *jobState, n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		for _, r := range w.info.Running {
			if r.JobID == j.info.JobID && r.Attempt < n {
				return true
			}
		}
	}
	return false
}

// reconcileLocked compares a worker's heartbeat with what the coordinator
// runs there. Every job's lifecycle hears which of its attempts the worker
// lists: it cancels those it does not run (any more), and fails its current
// attempt when the worker stopped listing it although some of its subtasks
// there never reported their end (the reports were lost while NATS was
// unreachable). The attempts of jobs the coordinator does not know are
// cancelled here, at most every second per attempt: the cancel may have
// been lost, or come from a coordinator that has since died. c.mu is held;
// it returns the cancels to send and what the jobs asked for.
func (c *Coordinator) reconcileLocked(worker string, running []transport.RunningAttempt) (cancels []transport.RunningAttempt, steps []jobStep) {
	now := c.now()
	listed := map[string][]int{}
	for _, r := range running {
		listed[r.JobID] = append(listed[r.JobID], r.Attempt)
		if c.jobs[r.JobID] != nil {
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
		c.drainLocked(j)
		j.lc.Heartbeat(now.UnixMilli(), worker, listed[id])
		if acts := c.applyLocked(j); len(acts) > 0 {
			steps = append(steps, jobStep{j, acts})
		}
	}
	return cancels, steps
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
		if j.lc.State() == lifecycle.Running && len(j.placement) > 1 {
			checks = append(checks, check{j, j.lc.Attempt()})
		}
	}
	// Checkpoint messages sent or due while the connection was down may
	// have been lost.
	c.connectionRestoredLocked()
	c.mu.Unlock()
	c.cfg.Log.Info("reconnected to NATS", "url", c.cfg.NATS.ConnectedUrlRedacted())
	for _, k := range checks {
		go c.checkDataStream(k.j, k.attempt)
	}
}

// checkDataStream fails the attempt of j when its data stream is gone.
func (c *Coordinator) checkDataStream(j *jobState, attempt int) {
	id := j.info.JobID
	nc, err := c.jobConn(j)
	var js jetstream.JetStream
	if err == nil {
		js, err = jetstream.New(nc)
	}
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
		stop := j.lc.State() != lifecycle.Running || j.lc.Attempt() != attempt
		c.mu.Unlock()
		if stop {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
