package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// newJobID names a new job: its name's characters that are safe in
// subjects and keys, and a random suffix.
func newJobID(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = strings.Map(func(r rune) rune {
		if r < 128 && idChars.MatchString(string(r)) {
			return r
		}
		return '_'
	}, name)
	if name == "" {
		name = "job"
	}
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b[:])
}

func (c *Coordinator) onSubmit(m *nats.Msg, who caller) {
	var req transport.SubmitRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		err = c.outcome(who, "submit", "", fmt.Errorf("bad submit request: %w", err))
		respond(m, transport.SubmitReply{Error: err.Error()})
		return
	}
	// Deploying waits on a worker: answer from a goroutine so that status
	// messages keep flowing meanwhile.
	go func() {
		id, err := c.submit(req, who)
		action := "submit"
		switch {
		case req.Resume != "":
			action = "resume"
		case req.FromSavepoint != "":
			action = "submit from savepoint " + req.FromSavepoint
		}
		if err = c.outcome(who, action, orString(id, req.Resume), err); err != nil {
			respond(m, transport.SubmitReply{Error: err.Error()})
			return
		}
		respond(m, transport.SubmitReply{JobID: id})
	}()
}

func (c *Coordinator) submit(req transport.SubmitRequest, who caller) (string, error) {
	plan, g, owner, quotas, err := c.checkSubmission(&req, who)
	if err != nil {
		return "", err
	}
	dataNC, err := c.dataConn(owner)
	if err != nil {
		return "", err
	}
	mctx, mcancel := context.WithTimeout(context.Background(), time.Minute)
	err = c.tenantModule(mctx, owner, who, req.ModuleDigest, dataNC)
	mcancel()
	if err != nil {
		return "", err
	}
	refs := taskRefs(g)
	name := req.Name
	if name == "" {
		name = plan.Name
	}
	id, rec, err := c.submittedID(req, who, owner, name)
	if err != nil {
		return "", err
	}
	spID, err := c.submittedRestore(&req, plan, id, rec != nil, dataNC)
	if err != nil {
		return "", err
	}
	lc := newLifecycle(plan, req.FromSavepoint != "")
	if rec != nil {
		// A resume by hand starts the restart strategy's count afresh;
		// the log keeps the causes.
		if err := lc.Recover(rec.Attempt, 0, lifecycleLog(rec.RestartLog)); err != nil {
			return "", err
		}
	}
	// Placed before the job is accepted: a job no worker can take is
	// refused, and leaves nothing behind.
	c.mu.Lock()
	if owner != "" {
		err = c.checkTenantQuotasLocked(owner, quotas, len(refs))
	}
	var pick placement
	if err == nil {
		pick, err = c.placeLocked(name, refs)
	}
	c.mu.Unlock()
	if err != nil {
		return "", err
	}
	js := &jobState{
		info:    transport.JobInfo{JobID: id, Name: name, State: transport.JobRunning, Started: c.now(), Tenant: owner},
		plan:    plan,
		digest:  req.ModuleDigest,
		module:  req.ModuleName,
		pick:    pick,
		refs:    refs,
		lc:      lc,
		started: c.now(),
		metrics: map[string]*transport.VertexMetrics{},

		fromSavepoint: req.FromSavepoint,
		savepointID:   spID,
	}
	if err := c.startSubmitted(js, rec == nil); err != nil {
		return "", err
	}
	return id, nil
}

// checkSubmission parses and checks a submitted plan, and finds the job's
// owner: a tenant's plan is checked against what a tenant's job may do
// and its quotas, and gets the tenants' restart strategy.
func (c *Coordinator) checkSubmission(req *transport.SubmitRequest, who caller) (*job.Plan, *job.Graph, string, tenant.Quotas, error) {
	plan, err := job.Parse(req.Plan)
	if err != nil {
		return nil, nil, "", tenant.Quotas{}, err
	}
	g, err := job.Build(plan)
	if err != nil {
		return nil, nil, "", tenant.Quotas{}, err
	}
	owner, quotas, err := c.jobOwner(*req, who)
	if err != nil {
		return nil, nil, "", tenant.Quotas{}, err
	}
	if owner != "" {
		if err := checkTenantPlan(plan, g, quotas); err != nil {
			return nil, nil, "", tenant.Quotas{}, fmt.Errorf("tenant %s: %w", owner, err)
		}
		tenantRestart(plan)
		if err := c.checkTenantLocation(caller{tenant: owner}, req.FromSavepoint); err != nil {
			return nil, nil, "", tenant.Quotas{}, err
		}
	}
	return plan, g, owner, quotas, nil
}

// taskRefs are the subtasks of graph g.
func taskRefs(g *job.Graph) []transport.TaskRef {
	var refs []transport.TaskRef
	for _, ch := range g.Chains {
		for s := 0; s < ch.Parallelism; s++ {
			refs = append(refs, transport.TaskRef{Chain: ch.Index, Subtask: s})
		}
	}
	return refs
}

// submittedID is the id of a submitted job: a new one, or that of the
// running job a resume names, with its record.
func (c *Coordinator) submittedID(req transport.SubmitRequest, who caller, owner, name string) (string, *JobSpec, error) {
	id := req.Resume
	if id == "" {
		return newJobID(name), nil, nil
	}
	// A resumed job continues from its latest checkpoint; its sinks
	// recover as after any restart.
	rec, err := c.readRecord(id)
	if err != nil || rec.Tenant != owner {
		// A tenant hears the same of a record it cannot read as of
		// one that is absent or another's.
		if err != nil && !who.admin() {
			c.cfg.Log.Warn("resume: reading the job's record", logging.Job, id, "err", err)
		}
		if err == nil || !who.admin() {
			err = errNoJob(id)
		}
		return "", nil, err
	}
	if rec.State != transport.JobRunning {
		return "", nil, fmt.Errorf("job %s has %s: there is nothing to resume", id, rec.State)
	}
	return id, rec, nil
}

// submittedRestore checks the savepoint a new job starts from, or finds
// the restore point of a resumed one (the bucket's: the record is not
// rewritten at each checkpoint); req.FromSavepoint becomes its root. It
// returns the savepoint's id.
func (c *Coordinator) submittedRestore(req *transport.SubmitRequest, plan *job.Plan, id string, resumed bool, dataNC *nats.Conn) (int64, error) {
	var spID int64
	var err error
	if req.FromSavepoint != "" {
		if req.Resume != "" {
			return 0, errors.New("a job cannot both resume and start from a savepoint")
		}
		var root string
		if root, spID, err = checkSavepoint(req.FromSavepoint, plan, req.AllowNonRestoredState, dataNC); err != nil {
			return 0, err
		}
		req.FromSavepoint = root
	}
	if resumed {
		if req.FromSavepoint, spID, err = c.resumePoint(id); err != nil {
			return 0, err
		}
	}
	return spID, nil
}

// startSubmitted registers a submitted job placed on js.pick, listens to
// its subtasks and deploys its first attempt; on an error it leaves
// nothing behind. A new job's record is written once it is deployed (see
// carry).
func (c *Coordinator) startSubmitted(js *jobState, fresh bool) error {
	id := js.info.JobID
	c.mu.Lock()
	if old, ok := c.jobs[id]; ok && !old.done {
		c.mu.Unlock()
		c.release(js.pick)
		return fmt.Errorf("job %s is running already", id)
	}
	c.jobs[id] = js
	c.syncLocked(js)
	c.mu.Unlock()
	sub, err := c.cfg.NATS.Subscribe(transport.TaskStatusSubject(id, "*"), c.tracked(statusFromWorker(c.onTaskStatus)))
	if err == nil {
		err = c.cfg.NATS.Flush()
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		c.forget(id)
		c.release(js.pick)
		return fmt.Errorf("job %s: %w", id, err)
	}
	c.mu.Lock()
	js.sub = sub
	_ = js.lc.Submit(c.nowMillis())
	acts := c.applyLocked(js)
	c.mu.Unlock()
	// The first attempt is deployed here: the client learns whether it
	// could be.
	if err := c.carry(js, acts, fresh); err != nil {
		c.forget(id)
		return err
	}
	return nil
}
