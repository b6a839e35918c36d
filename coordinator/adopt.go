package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// A new leader adopts the attempt its workers still run, when it can,
// instead of restarting the job from its latest checkpoint: a failover of
// the coordinator then costs the job no restart, no replay and no
// re-deployment, only the checkpoints it could not take meanwhile.
//
// Workers list in every heartbeat the attempts they run, with the subtasks
// whose input has not ended, the module's digest and the epoch of the
// deployment, and the highest leadership epoch they have heard. The new
// leader adopts attempt n of a job resumed from the job bucket when:
//
//   - the job's spec names attempt n and was written at an epoch not above
//     the leader's own;
//   - the live workers' heartbeats list attempt n, every subtask of the job
//     exactly once, with the spec's module and a deployment epoch not
//     above the leader's;
//   - on a cluster with tenants, where an attempt reaches its job's data
//     through credentials of its own that the deposed leader minted and
//     renewed: the job's tenant still exists, and each of those workers
//     lists the attempt's credentials it holds, each a JWT the authority
//     checks is the attempt's, signed by the account the authority keeps
//     for the spec's tenant (tenant.Authority.AttemptUserKey), so a job is
//     adopted into its own tenant only;
//   - each of those workers has heard the leader's epoch (the leader
//     announces it when it takes over): it refuses the deposed leader's
//     commands from then on, so the attempt obeys the new leader alone.
//
// The leader then reserves the attempt's slots, writes the spec at its
// epoch and runs the attempt as one it deployed. It keeps the public keys
// of the credentials the workers listed with those it mints, so that they
// are revoked when the attempt ends, and sends the workers new
// credentials of the attempt at once. A new checkpoint driver
// recovers the completed checkpoints from storage and goes on from the
// highest id the job's counter has given out (a checkpoint the deposed
// leader had in flight never completes; a later one's completion commits
// the sinks' output up to it). Otherwise the job is resumed as before: a
// new attempt from the latest checkpoint, once the old one is cancelled.

// adoption is the spec of a job that a new leader may adopt as it runs.
type adoption struct {
	spec *JobSpec
	// placed: its placement was taken from the workers' heartbeats, and
	// the next Deploy of attempt spec.Attempt adopts instead of deploying.
	placed bool
}

// heldCreds are the attempt credentials the workers of an attempt listed:
// user public key → expiry (Unix seconds).
type heldCreds map[string]int64

// mayAdopt reports whether a job loaded from the bucket is one whose
// running attempt the leader may adopt, as far as its spec tells.
func (c *Coordinator) mayAdopt(s *JobSpec) bool {
	// A tenant's job runs only where there are tenants; whether the tenant
	// still exists is asked at adoption, once the leader has read the
	// authority again (activate).
	return c.lead != nil && s.State == transport.JobRunning && (s.Tenant == "" || c.cfg.Tenants != nil) && s.Epoch <= c.epoch()
}

// adoptPlacementLocked looks whether the workers run every subtask of
// attempt s.Attempt of j, as the leader of epoch may adopt it; it returns
// the placement they run and the attempt credentials they hold, or why
// not. c.mu is held.
func (c *Coordinator) adoptPlacementLocked(j *jobState, s *JobSpec, epoch uint64) (placement, heldCreds, string) {
	id := j.info.JobID
	pl := placement{}
	creds := heldCreds{}
	seen := map[transport.TaskRef]string{}
	for wid, w := range c.workers {
		if c.now().Sub(w.lastSeen) > c.cfg.WorkerTimeout {
			continue
		}
		for _, r := range w.info.Running {
			switch {
			case r.JobID != id:
				continue
			case r.Attempt != s.Attempt:
				// Older attempts are cancelled by the lifecycle; a newer one
				// than the spec says is no attempt this leader knows.
				if r.Attempt > s.Attempt {
					return nil, nil, fmt.Sprintf("worker %s runs attempt %d, the job's spec names %d", wid, r.Attempt, s.Attempt)
				}
				continue
			case r.Module != s.ModuleDigest:
				return nil, nil, fmt.Sprintf("worker %s runs module %s, the job's spec names %s", wid, r.Module, s.ModuleDigest)
			case r.Epoch > epoch:
				return nil, nil, fmt.Sprintf("worker %s runs the attempt as deployed at epoch %d, above this leader's %d", wid, r.Epoch, epoch)
			case w.info.Epoch != epoch:
				return nil, nil, fmt.Sprintf("worker %s has not heard this leader's epoch %d yet (it knows %d)", wid, epoch, w.info.Epoch)
			}
			if why := c.attemptCreds(s, wid, r, creds); why != "" {
				return nil, nil, why
			}
			for _, t := range r.Tasks {
				if other, dup := seen[t]; dup {
					return nil, nil, fmt.Sprintf("subtask %d/%d runs on workers %s and %s", t.Chain, t.Subtask, other, wid)
				}
				seen[t] = wid
				pl[wid] = append(pl[wid], t)
			}
		}
	}
	var missing []string
	for _, t := range j.refs {
		if _, ok := seen[t]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", t.Chain, t.Subtask))
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Sprintf("no live worker runs subtask(s) %s of attempt %d (lost, not started, or their input ended)", strings.Join(missing, ", "), s.Attempt)
	}
	if len(seen) != len(j.refs) {
		return nil, nil, fmt.Sprintf("the workers run %d subtasks of attempt %d, the job has %d", len(seen), s.Attempt, len(j.refs))
	}
	for _, refs := range pl {
		slices.SortFunc(refs, func(a, b transport.TaskRef) int {
			if a.Chain != b.Chain {
				return a.Chain - b.Chain
			}
			return a.Subtask - b.Subtask
		})
	}
	return pl, creds, ""
}

// attemptCreds adds to held the credentials of attempt r that worker wid
// lists, on a cluster with tenants (where every attempt, the admin's too,
// runs on credentials of its own); it says why the attempt cannot be
// adopted when one is not the attempt's, of the account of the spec's
// tenant, or when the worker lists none that is still valid.
func (c *Coordinator) attemptCreds(s *JobSpec, wid string, r transport.RunningAttempt, held heldCreds) string {
	if c.cfg.Tenants == nil {
		return ""
	}
	valid := 0
	for _, uj := range r.Creds {
		key, exp, err := c.cfg.Tenants.AttemptUserKey(s.Tenant, s.JobID, s.Attempt, uj)
		if errors.Is(err, tenant.ErrAttemptUserExpired) {
			continue
		}
		if err != nil {
			return fmt.Sprintf("worker %s lists credentials of attempt %d that are not the job's: %v", wid, s.Attempt, err)
		}
		held[key] = exp
		valid++
	}
	if valid == 0 {
		return fmt.Sprintf("worker %s lists no valid credentials of attempt %d (the job's new leader could not revoke them)", wid, s.Attempt)
	}
	return ""
}

// tryAdopt waits, for a job loaded with an adoption, until the workers'
// heartbeats show the attempt can be adopted, and adopts it: it reports
// true when it has started the job (adopted, or it ended meanwhile). When
// the attempt cannot be adopted within a few heartbeats of the take-over,
// the job gets the lifecycle of a resumed job, whose next attempt
// restores the latest checkpoint, and tryAdopt reports false.
func (c *Coordinator) tryAdopt(j *jobState, quit <-chan struct{}) bool {
	id := j.info.JobID
	s := j.adopt.spec
	epoch := c.epoch()
	step := min(50*time.Millisecond, max(c.cfg.HeartbeatInterval/4, 5*time.Millisecond))
	tick := time.NewTicker(step)
	defer tick.Stop()
	// Workers heartbeat every interval; one that heard the announcement
	// says so in its next heartbeat. Past that, waiting longer would only
	// delay the restart.
	deadline := c.listening.Add(3*c.cfg.HeartbeatInterval + step)
	why := ""
	for {
		c.mu.Lock()
		if j.lc.State() != lifecycle.Created {
			// Cancelled meanwhile (it ends CANCELED at once).
			c.mu.Unlock()
			return true
		}
		var (
			pl    placement
			creds heldCreds
		)
		pl, creds, why = c.adoptPlacementLocked(j, s, epoch)
		if pl != nil {
			for w, refs := range pl {
				c.workers[w].used += len(refs)
			}
			j.pick = pl
			j.adopt.placed = true
			c.mu.Unlock()
			c.startAdopted(j, pl)
			c.takeAttemptCreds(j, s, creds, pl)
			return true
		}
		if c.now().After(deadline) || c.adoptSettledLocked(epoch, step) {
			// The job's next attempt is a new one, from the latest
			// checkpoint; the old one is cancelled where it runs.
			lc := newLifecycle(j.plan, s.FromSavepoint != "")
			err := lc.Recover(s.Attempt, s.Restarts, lifecycleLog(s.RestartLog))
			if err == nil {
				j.lc = lc
				j.adopt = nil
				c.syncLocked(j)
			}
			c.mu.Unlock()
			if err != nil {
				c.cfg.Log.Error("job cannot be resumed", logging.Job, id, "err", err)
				return true
			}
			c.cfg.Log.Info("not adopting the running attempt: restarting the job from its latest checkpoint", logging.Job, id, logging.Attempt, s.Attempt, "why", why)
			return false
		}
		c.mu.Unlock()
		select {
		case <-quit:
			return true
		case <-tick.C:
		}
	}
}

// adoptSettledLocked reports whether waiting longer to adopt is pointless:
// a heartbeat interval has passed since the take-over subscribed to the
// workers' heartbeats, so every live worker has been heard, and every live worker's last heartbeat carries this
// leader's epoch, so what they run will not change by waiting (a worker
// that had not heard it could still report the missing subtasks). c.mu is
// held.
func (c *Coordinator) adoptSettledLocked(epoch uint64, step time.Duration) bool {
	now := c.now()
	if now.Before(c.listening.Add(c.cfg.HeartbeatInterval + step)) {
		return false
	}
	for _, w := range c.workers {
		if now.Sub(w.lastSeen) <= c.cfg.WorkerTimeout && w.info.Epoch != epoch {
			return false
		}
	}
	return true
}

// startAdopted starts the lifecycle of an adopted job: its spec is written
// at the leader's epoch, and its Deploy adopts the attempt the workers run
// (deployOrAdopt).
func (c *Coordinator) startAdopted(j *jobState, pl placement) {
	id := j.info.JobID
	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id, "*"), c.tracked(statusFromWorker(c.onTaskStatus)))
	c.mu.Lock()
	now := c.nowMillis()
	// Submit, not Resume: the attempt goes on; no restart to log.
	_ = j.lc.Submit(now)
	if err != nil {
		_ = j.lc.DeployFailed(now, j.lc.Attempt(), "subscribing to its task reports: "+err.Error(), nil)
	}
	j.sub = sub
	acts := c.applyLocked(j)
	c.mu.Unlock()
	if err == nil {
		c.cfg.Log.Info("adopting the attempt the workers run", logging.Job, id, logging.Attempt, j.attempt, "workers", strings.Join(pl.workers(), ","))
	}
	c.carryOut(j, acts)
}

// takeAttemptCreds makes the credentials that the workers of an adopted
// attempt hold this leader's to revoke when the attempt ends, and sends
// the workers new ones it minted: the attempt then outlives the deposed
// leader's renewals.
func (c *Coordinator) takeAttemptCreds(j *jobState, s *JobSpec, held heldCreds, pl placement) {
	if c.cfg.Tenants == nil {
		return
	}
	c.keepCreds(s.Tenant, s.JobID, s.Attempt, held)
	c.mu.Lock()
	running := !j.done && j.attempt == s.Attempt && j.placement != nil
	c.mu.Unlock()
	if !running {
		// Not adopted after all: the keys are revoked as the attempt's end.
		return
	}
	for _, w := range pl.workers() {
		c.sendCreds(w, s.Tenant, s.JobID, s.Attempt)
	}
}

// keepCreds adds credentials of attempt of job that this coordinator did
// not mint to those it revokes once the attempt has ended.
func (c *Coordinator) keepCreds(tenantName, job string, attempt int, held heldCreds) {
	c.minted.mu.Lock()
	defer c.minted.mu.Unlock()
	if c.minted.keys == nil {
		c.minted.keys = map[string]mintedAttempt{}
	}
	for k, exp := range held {
		if _, known := c.minted.keys[k]; !known {
			c.minted.keys[k] = mintedAttempt{tenant: tenantName, job: job, attempt: attempt, expires: exp}
		}
	}
}

// learnAttemptCreds keeps, to revoke once it has ended, the credentials
// that workers list for an attempt of j being cancelled: a new leader
// that resumed the job instead of adopting its attempt did not mint them,
// and they would otherwise stay valid until they expire. Only those the
// authority finds are that attempt's, in the account of j's tenant, count.
func (c *Coordinator) learnAttemptCreds(j *jobState, attempt int, workers []string) {
	if c.cfg.Tenants == nil {
		return
	}
	var jwts []string
	c.mu.Lock()
	for _, w := range workers {
		if ws := c.workers[w]; ws != nil {
			for _, r := range ws.info.Running {
				if r.JobID == j.info.JobID && r.Attempt == attempt {
					jwts = append(jwts, r.Creds...)
				}
			}
		}
	}
	c.mu.Unlock()
	held := heldCreds{}
	for _, uj := range jwts {
		if key, exp, err := c.cfg.Tenants.AttemptUserKey(j.info.Tenant, j.info.JobID, attempt, uj); err == nil {
			held[key] = exp
		}
	}
	c.keepCreds(j.info.Tenant, j.info.JobID, attempt, held)
}

// deployOrAdopt sends attempt a's deployment, or, for the attempt of an
// adopted job, makes only its checkpoint driver: the workers run it.
func (c *Coordinator) deployOrAdopt(j *jobState, a lifecycle.Deploy, pl placement) ([]string, int64, error) {
	c.mu.Lock()
	ad := j.adopt
	j.adopt = nil
	c.mu.Unlock()
	if ad == nil || !ad.placed || a.Attempt != ad.spec.Attempt || a.Module != lifecycle.ModuleCurrent {
		return c.sendDeployment(j, a, pl)
	}
	if j.plan.Checkpoint.Enabled() {
		j.adopting = true
		drv, latest, err := c.newCkptDriver(j)
		j.adopting = false
		if err != nil {
			// The attempt fails like one whose deployment failed: it is
			// cancelled where it runs, and the restart strategy decides.
			return nil, 0, fmt.Errorf("job %s: adopting attempt %d: %w", j.info.JobID, a.Attempt, err)
		}
		drv.workers = pl.workers()
		c.mu.Lock()
		if j.ckpt != nil {
			j.ckpt.stop()
		}
		j.ckpt = drv
		c.mu.Unlock()
		c.cfg.Log.Info("attempt adopted", logging.Job, j.info.JobID, logging.Attempt, a.Attempt, "latestCheckpoint", latest)
	} else {
		c.cfg.Log.Info("attempt adopted", logging.Job, j.info.JobID, logging.Attempt, a.Attempt)
	}
	// The workers took their parts when the deposed leader deployed them.
	return pl.workers(), 0, nil
}

// stampCounter writes the leader's epoch into the checkpoint id counter of
// a job it takes over, before it does anything else with the job: from
// then on the deposed leader reserves no id (its checkpoints go no
// further than their trigger).
func (c *Coordinator) stampCounter(j *jobState) {
	if c.ids == nil {
		return
	}
	epoch, err := c.fence()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	if _, err := c.ids.stamp(ctx, j.info.JobID, epoch); err != nil {
		if errors.Is(err, errDeposed) {
			c.depose(err)
			return
		}
		// The first reservation writes the epoch as well.
		c.cfg.Log.Warn("writing this leader's epoch into the job's checkpoint id counter", logging.Job, j.info.JobID, "err", err)
	}
}
