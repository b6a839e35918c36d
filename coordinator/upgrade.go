package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// An upgrade replaces a running job's module and plan at a savepoint
// barrier, as the next attempt of the same job (lifecycle, "Upgrade"):
//
//  1. onUpgrade checks the new plan against the running one
//     (job.CheckUpgrade) and that the module is stored, before anything
//     stops; a refusal answers at once and changes nothing.
//  2. The lifecycle hears UpgradeRequested and the checkpoint driver
//     triggers a stop-with-savepoint: sinks commit on it, its subtasks
//     stop, and the savepoint is exported in the canonical format.
//  3. The lifecycle's Deploy with ModuleNew switches the job's plan and
//     module (switchLocked) and deploys them from the savepoint, rescaled
//     as the new plan says; states whose layout version rose pass through
//     the module's wstream_migrate on the workers. The new attempt's
//     subtasks report their first record, for the downtime.
//  4. Its first completed checkpoint confirms the upgrade (the driver
//     reports it, checkpointConfirmed, before any sink commits on it, and
//     the lifecycle hears it before any later event); a failure before
//     that rolls back: Deploy with ModuleOld runs the old plan and module
//     again from the same savepoint.
//  5. UpgradeEnded answers the client and appends a line to the job's
//     upgrade history (DATA/jobs/JOB/upgrades.jsonl).

// upgradeSpec is what an attempt runs.
type upgradeSpec struct {
	plan   *job.Plan
	digest string
	module string
	refs   []transport.TaskRef
}

// upgradeOp is an upgrade under way. c.mu guards it; the checkpoint driver
// reports its barrier through the job's inbox (upgradeTriggered,
// upgradeBarrierDone).
type upgradeOp struct {
	old, next upgradeSpec
	reply     *nats.Msg
	who       caller
	requested time.Time
	migrated  []string
	// fromAttempt ran the old module; newAttempt the new one (0 until
	// deployed).
	fromAttempt, newAttempt int

	// trigger is when the barrier's savepoint was triggered (Unix ms);
	// savepoint its id and dir once it completed.
	trigger   int64
	savepoint int64
	dir       string
	// firstRecord is when the new module was first handed records (Unix
	// ms, 0: not yet).
	firstRecord int64
	// resolved: the savepoint was checked against the new plan (preResolve),
	// with this outcome.
	resolved bool
	nextRoot string
	nextID   int64
	nextErr  error

	// done: the upgrade ended done and waits (until wait fires) for the
	// new module's first record to report its downtime.
	done *lifecycle.UpgradeEnded
	wait *time.Timer
}

// barrier returns when the upgrade's barrier was triggered, and its
// savepoint's id and dir once it completed; c.mu must not be held.
func (c *Coordinator) barrier(op *upgradeOp) (trigger, id int64, dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return op.trigger, op.savepoint, op.dir
}

// upgradeTriggered: the upgrade's barrier was triggered at (Unix ms).
type upgradeTriggered struct {
	op *upgradeOp
	at int64
}

func (r upgradeTriggered) apply(*Coordinator, *jobState, int64) { r.op.trigger = r.at }

// upgradeBarrierDone: the upgrade's barrier, savepoint id in dir,
// completed; it is checked against the new plan at once (preResolve).
type upgradeBarrierDone struct {
	op  *upgradeOp
	id  int64
	dir string
}

func (r upgradeBarrierDone) apply(c *Coordinator, j *jobState, _ int64) {
	r.op.savepoint, r.op.dir = r.id, r.dir
	go c.preResolve(j, r.op)
}

// firstRecordWait bounds how long an upgrade that completed waits for the
// new module's first record before it answers without a downtime (a job
// whose input is idle).
const firstRecordWait = 10 * time.Second

// UpgradeEntry is one line of a job's upgrade history
// (DATA/jobs/JOB/upgrades.jsonl), which `wstream checkpoints` prints.
type UpgradeEntry struct {
	Time      time.Time `json:"time"`
	Outcome   string    `json:"outcome"` // done | rolled back | aborted
	Cause     string    `json:"cause,omitempty"`
	Savepoint int64     `json:"savepoint,omitempty"`
	// FromAttempt ran the old module; Attempt runs afterwards.
	FromAttempt int    `json:"fromAttempt"`
	Attempt     int    `json:"attempt"`
	OldModule   string `json:"oldModule"`
	OldDigest   string `json:"oldDigest"`
	NewModule   string `json:"newModule"`
	NewDigest   string `json:"newDigest"`
	// Subtasks before and after.
	OldSubtasks int      `json:"oldSubtasks"`
	NewSubtasks int      `json:"newSubtasks"`
	Migrated    []string `json:"migrated,omitempty"`
	// Downtime is from the barrier to the new module's first record
	// (DowntimeKnown false: none reached it before the entry was written).
	Downtime      time.Duration `json:"downtime,omitempty"`
	DowntimeKnown bool          `json:"downtimeKnown,omitempty"`
}

// UpgradesFile is a job's upgrade history.
func UpgradesFile(dataDir, id string) string {
	return filepath.Join(JobDir(dataDir, id), "upgrades.jsonl")
}

// ReadUpgrades reads a job's upgrade history, oldest first.
func ReadUpgrades(dataDir, id string) ([]UpgradeEntry, error) {
	return readJSONLines[UpgradeEntry](UpgradesFile(dataDir, id))
}

func (c *Coordinator) onUpgrade(m *nats.Msg, who caller) {
	var req transport.UpgradeRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		err = c.outcome(who, "upgrade", "", fmt.Errorf("bad upgrade request: %w", err))
		respond(m, transport.UpgradeReply{Error: err.Error()})
		return
	}
	// Checking the module waits on JetStream: answer from a goroutine.
	go func() {
		// An upgrade under way is audited when it ends (answerUpgrade).
		if err := c.upgrade(req, who, m); err != nil {
			err = c.outcome(who, "upgrade", req.JobID, err)
			respond(m, transport.UpgradeReply{Error: err.Error()})
		}
	}()
}

// upgrade checks an upgrade request and starts it; the reply goes out when
// the upgrade ends. An error is a refusal, and nothing changed.
func (c *Coordinator) upgrade(req transport.UpgradeRequest, who caller, m *nats.Msg) error {
	c.mu.Lock()
	j, ok := c.jobs[req.JobID]
	ok = ok && visibleLocked(j, who)
	var old upgradeSpec
	done := false
	if ok {
		old = upgradeSpec{plan: j.plan, digest: j.digest, module: j.module, refs: j.refs}
		done = j.done
	}
	c.mu.Unlock()
	switch {
	case !ok:
		return errNoJob(req.JobID)
	case done:
		return fmt.Errorf("job %s has ended: there is nothing to upgrade", req.JobID)
	case !old.plan.Checkpoint.Enabled():
		return fmt.Errorf("job %s does not checkpoint: an upgrade moves its state through a savepoint; deploy it with --checkpoint-interval", req.JobID)
	}
	next, err := job.Parse(req.Plan)
	if err != nil {
		return fmt.Errorf("the new plan: %w", err)
	}
	// What the new plan leaves out is the running job's.
	if next.Checkpoint == nil {
		cs := *old.plan.Checkpoint
		next.Checkpoint = &cs
	}
	if next.Restart == nil && old.plan.Restart != nil {
		r := *old.plan.Restart
		next.Restart = &r
	}
	next.Name = old.plan.Name
	g, err := job.Build(next)
	if err != nil {
		return fmt.Errorf("the new plan: %w", err)
	}
	if err := job.CheckUpgrade(old.plan, next); err != nil {
		return fmt.Errorf("job %s: %w", req.JobID, err)
	}
	if owner := j.info.Tenant; owner != "" {
		t, ok := c.cfg.Tenants.Get(owner)
		if !ok || t.Removed {
			return fmt.Errorf("no tenant %q", owner)
		}
		if err := checkTenantPlan(next, g, t.Quotas.WithDefaults()); err != nil {
			return fmt.Errorf("tenant %s: %w", owner, err)
		}
		tenantRestart(next)
	}
	if err := c.checkModuleStored(j, who, req.ModuleDigest, req.ModuleName); err != nil {
		return err
	}
	var refs []transport.TaskRef
	for _, ch := range g.Chains {
		for s := 0; s < ch.Parallelism; s++ {
			refs = append(refs, transport.TaskRef{Chain: ch.Index, Subtask: s})
		}
	}
	op := &upgradeOp{
		old: old, next: upgradeSpec{plan: next, digest: req.ModuleDigest, module: req.ModuleName, refs: refs},
		reply: m, who: who, requested: c.now(),
	}
	for _, mg := range job.Migrations(old.plan, next) {
		op.migrated = append(op.migrated, fmt.Sprintf("%s/%s v%d→v%d", mg.Vertex, mg.State, mg.From, mg.To))
	}
	if len(op.migrated) > 0 && !req.CanMigrate {
		return fmt.Errorf("job %s: the new plan raises the layout version of %s, and module %s does not export wstream_migrate to convert the values", req.JobID, strings.Join(op.migrated, ", "), req.ModuleName)
	}
	c.mu.Lock()
	d := j.ckpt
	switch {
	case j.done:
		err = fmt.Errorf("job %s has ended: there is nothing to upgrade", req.JobID)
	case j.upgrade != nil:
		err = fmt.Errorf("job %s: another upgrade is under way", req.JobID)
	case d == nil:
		err = fmt.Errorf("job %s is restarting: try again", req.JobID)
	default:
		err = j.lc.UpgradeRequested(c.nowMillis())
	}
	if err == nil {
		op.fromAttempt = j.attempt
		j.upgrade = op
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.cfg.DataDir, "savepoints")
	if t := j.info.Tenant; t != "" {
		dir = filepath.Join(c.tenantRoot(t), "savepoints")
	}
	c.cfg.Log.Info("upgrading at a savepoint", logging.Job, req.JobID, "from", old.module, "fromDigest", old.digest, "to", req.ModuleName, "toDigest", req.ModuleDigest)
	d.upgradeSavepoint(dir, op)
	return nil
}

// resumePoint returns the savepoint that the spec of job id names as its
// restore point: a stop's or an upgrade's savepoint, which became it
// before its sinks committed on it (restoreFrom), or the savepoint the job
// was deployed from. A resume (`deploy --resume` after the process was
// killed, during an upgrade say) restores no checkpoint older than it: its
// output was committed. A spec that cannot be read now fails the resume,
// which may be tried again; no spec (a job never stored one): none.
func (c *Coordinator) resumePoint(id string) (string, int64, error) {
	if c.store == nil {
		return "", 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	s, err := getSpec(ctx, c.store.kv, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", 0, nil
	case err != nil:
		return "", 0, fmt.Errorf("job %s: its restore point cannot be read from bucket %s now (try again): %w", id, transport.JobsBucket, err)
	}
	if s.FromSavepoint == "" {
		return "", 0, nil
	}
	return s.FromSavepoint, s.SavepointID, nil
}

// checkModuleStored checks that the job's workers will find the module.
func (c *Coordinator) checkModuleStored(j *jobState, who caller, digest, name string) error {
	if digest == "" {
		return errors.New("the upgrade names no module digest")
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.tenantModule(ctx, j.info.Tenant, who, digest, nc); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	obs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	if err == nil {
		_, err = obs.GetInfo(ctx, digest)
	}
	if err != nil {
		return fmt.Errorf("module %s (%s) is not in the module store %s, where workers fetch it: %w", name, digest, transport.ModuleBucket, err)
	}
	return nil
}

// upgradeSavepoint triggers the upgrade's barrier: a stop with savepoint
// whose outcome goes to the lifecycle (StopCompleted, StopFailed).
func (d *ckptDriver) upgradeSavepoint(parent string, op *upgradeOp) {
	refuse := func(why string) { d.c.stopSavepointEnded(d.j, d.attempt, 0, errors.New(why)) }
	if !d.do(func() {
		if d.stopped {
			refuse("the job is restarting: try again")
			return
		}
		now := time.Now().UnixMilli()
		id, err := d.sm.TriggerSavepoint(now)
		if err != nil {
			refuse(err.Error())
			return
		}
		d.c.report(d.j, upgradeTriggered{op: op, at: now})
		// The upgrade answers its client when the new module runs (or the
		// old one is back), not when its barrier completes: the barrier's
		// own reply has no one to tell.
		d.savepoints[id] = &pendingSavepoint{dir: savepointDir(parent, d.j.info.JobID, id), stop: true, upgrade: op,
			reply: func(transport.SavepointReply) {}}
		d.run()
	}) {
		refuse("the job is restarting: try again")
	}
}

// switchLocked makes the job run module m of its upgrade from the next
// attempt on; c.mu is held. The new module's attempt restores the
// upgrade's savepoint (resolved by resolveUpgradeSavepoint); the old one's
// too, once the barrier completed, else what it restored before.
func (c *Coordinator) switchLocked(j *jobState, m lifecycle.Module) error {
	op := j.upgrade
	if op == nil {
		return fmt.Errorf("job %s: no upgrade is under way", j.info.JobID)
	}
	s := op.next
	if m == lifecycle.ModuleOld {
		s = op.old
		j.upgrade = nil
		j.probation = 0
	} else {
		j.probation = j.lc.Attempt() + 1
		op.newAttempt = j.lc.Attempt()
	}
	j.plan, j.digest, j.module, j.refs = s.plan, s.digest, s.module, s.refs
	return nil
}

// checkUpgradeSavepoint checks the upgrade's savepoint against plan and
// returns its storage root and id.
func (c *Coordinator) checkUpgradeSavepoint(j *jobState, op *upgradeOp, plan *job.Plan) (string, int64, error) {
	_, id, dir := c.barrier(op)
	if id == 0 {
		return "", 0, errors.New("the upgrade's savepoint is unknown")
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return "", 0, err
	}
	root, spID, err := checkSavepoint(dir, plan, false, nc)
	if err != nil {
		return "", 0, fmt.Errorf("the upgrade's savepoint: %w", err)
	}
	return root, spID, nil
}

// preResolve checks the upgrade's savepoint against the new plan as soon
// as it completed, while the old module's subtasks stop: the new attempt's
// deployment then need not.
func (c *Coordinator) preResolve(j *jobState, op *upgradeOp) {
	root, id, err := c.checkUpgradeSavepoint(j, op, op.next.plan)
	c.mu.Lock()
	defer c.mu.Unlock()
	op.nextRoot, op.nextID, op.nextErr, op.resolved = root, id, err, true
}

// resolveUpgradeSavepoint makes the upgrade's savepoint what the job
// restores from, checked against the plan of module m.
func (c *Coordinator) resolveUpgradeSavepoint(j *jobState, op *upgradeOp, m lifecycle.Module) error {
	c.mu.Lock()
	root, id, err, ok := op.nextRoot, op.nextID, op.nextErr, op.resolved && m == lifecycle.ModuleNew
	plan := j.plan
	c.mu.Unlock()
	if !ok {
		root, id, err = c.checkUpgradeSavepoint(j, op, plan)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	j.fromSavepoint, j.savepointID = root, id
	c.mu.Unlock()
	return nil
}

// upgradeEnded answers the client of an upgrade that ended and records it.
// A done upgrade waits, up to firstRecordWait, for the new module's first
// record, to report its downtime.
func (c *Coordinator) upgradeEnded(j *jobState, a lifecycle.UpgradeEnded) {
	c.mu.Lock()
	op := j.upgrade
	if op == nil {
		c.mu.Unlock()
		return
	}
	if a.Outcome != lifecycle.UpgradeRolledBack {
		// A roll-back keeps it until the old module's Deploy switches back.
		j.upgrade = nil
		j.probation = 0
	}
	if a.Outcome == lifecycle.UpgradeDone {
		// Its first record may come later.
		j.lastUpgrade = op
	}
	c.mu.Unlock()
	if _, id, _ := c.barrier(op); a.Outcome == lifecycle.UpgradeAborted && id != 0 {
		// The old module failed after its sinks committed on the barrier:
		// a restart must restore the barrier's savepoint, not an older
		// checkpoint.
		root, spID, err := c.checkUpgradeSavepoint(j, op, op.old.plan)
		if err == nil {
			c.mu.Lock()
			j.fromSavepoint, j.savepointID = root, spID
			c.mu.Unlock()
		} else {
			c.cfg.Log.Warn("removing the aborted upgrade's savepoint", logging.Job, j.info.JobID, logging.Checkpoint, id, "err", err)
		}
	}
	if a.Outcome == lifecycle.UpgradeDone {
		c.mu.Lock()
		if op.firstRecord == 0 {
			done := a
			op.done = &done
			op.wait = time.AfterFunc(firstRecordWait, func() { c.finishUpgrade(j, op) })
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	c.answerUpgrade(j, op, a)
}

// firstRecord notes when the new module of an upgrade was first handed
// records (the earliest report of its subtasks); c.mu is held.
func (c *Coordinator) firstRecordLocked(j *jobState, st transport.TaskStatus, op *upgradeOp) {
	if op == nil || op.newAttempt == 0 || op.newAttempt != st.Attempt {
		return
	}
	if op.firstRecord == 0 || st.At < op.firstRecord {
		op.firstRecord = st.At
	}
	if op.done != nil && op.wait.Stop() {
		go c.finishUpgrade(j, op)
	}
}

// finishUpgrade answers a done upgrade that waited for its first record.
func (c *Coordinator) finishUpgrade(j *jobState, op *upgradeOp) {
	c.mu.Lock()
	a := op.done
	op.done = nil
	c.mu.Unlock()
	if a != nil {
		c.answerUpgrade(j, op, *a)
	}
}

func (c *Coordinator) answerUpgrade(j *jobState, op *upgradeOp, a lifecycle.UpgradeEnded) {
	c.mu.Lock()
	trigger, first, dir := op.trigger, op.firstRecord, op.dir
	c.mu.Unlock()
	r := transport.UpgradeReply{Savepoint: a.Savepoint, Attempt: a.Attempt, Migrated: slices.Clone(op.migrated)}
	if a.Savepoint != 0 {
		r.SavepointDir = dir
	}
	e := UpgradeEntry{Time: c.now(), Outcome: a.Outcome.String(), Cause: a.Cause, Savepoint: a.Savepoint,
		FromAttempt: op.fromAttempt, Attempt: a.Attempt,
		OldModule: op.old.module, OldDigest: op.old.digest, NewModule: op.next.module, NewDigest: op.next.digest,
		OldSubtasks: len(op.old.refs), NewSubtasks: len(op.next.refs), Migrated: r.Migrated}
	switch a.Outcome {
	case lifecycle.UpgradeDone:
		if first != 0 && trigger != 0 {
			r.Downtime, r.DowntimeKnown = time.Duration(first-trigger)*time.Millisecond, true
			e.Downtime, e.DowntimeKnown = r.Downtime, true
		}
		c.cfg.Log.Info("upgraded", logging.Job, j.info.JobID, "to", op.next.module, logging.Checkpoint, a.Savepoint, logging.Attempt, a.Attempt, "downtime", downtimeText(r))
	case lifecycle.UpgradeRolledBack:
		r.RolledBack = true
		r.Error = fmt.Sprintf("upgrade rolled back: %s; the old module (%s) runs again from savepoint %d as attempt %d", a.Cause, op.old.module, a.Savepoint, a.Attempt)
		c.cfg.Log.Warn(r.Error, logging.Job, j.info.JobID)
	default:
		r.Error = "upgrade aborted: " + a.Cause
		c.cfg.Log.Warn(r.Error, logging.Job, j.info.JobID)
	}
	if c.cfg.DataDir != "" {
		if err := appendJSONLine(UpgradesFile(c.cfg.DataDir, j.info.JobID), e); err != nil {
			c.cfg.Log.Error("recording the upgrade", logging.Job, j.info.JobID, "err", err)
		}
	}
	if r.Error != "" {
		r.Error = c.outcome(op.who, "upgrade", j.info.JobID, errors.New(r.Error)).Error()
	} else {
		c.audit(op.who, "upgrade", j.info.JobID, nil)
	}
	respond(op.reply, r)
}

func downtimeText(r transport.UpgradeReply) string {
	if !r.DowntimeKnown {
		return "unknown: no record reached the new module yet"
	}
	return r.Downtime.String()
}

func appendJSONLine(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(v)
	_, werr := f.Write(append(b, '\n'))
	return errors.Join(werr, f.Close())
}
