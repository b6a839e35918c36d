package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// SavepointVertices returns the ids of the vertices whose state a savepoint
// holds, with their kind, from the plan it was taken with.
func SavepointVertices(m *checkpoint.Metadata) (map[string]string, error) {
	old, err := job.Parse(m.Plan)
	if err != nil {
		return nil, fmt.Errorf("the savepoint's plan: %w", err)
	}
	g, err := job.Build(old)
	if err != nil {
		return nil, fmt.Errorf("the savepoint's plan: %w", err)
	}
	out := map[string]string{}
	for _, t := range m.Tasks {
		if t.Task.Chain < 0 || t.Task.Chain >= len(g.Chains) {
			return nil, fmt.Errorf("the savepoint names chain %d, which its plan does not have", t.Task.Chain)
		}
		ch := g.Chains[t.Task.Chain]
		if len(t.State) > 0 {
			out[ch.Vertices[0].ID] = ch.Vertices[0].Kind
		}
		for v := range t.Operator {
			if pv := old.Vertex(v); pv != nil {
				out[v] = pv.Kind
			}
		}
	}
	return out, nil
}

// checkSavepoint checks that a savepoint (or a retained checkpoint) can
// start plan, and returns the storage root holding it and its id.
func checkSavepoint(dir string, plan *job.Plan, allowNonRestored bool, nc *nats.Conn) (string, int64, error) {
	if !plan.Checkpoint.Enabled() {
		return "", 0, errors.New("starting from a savepoint needs checkpoints: set --checkpoint-interval (or the plan's checkpoint.interval)")
	}
	st, m, err := checkpoint.OpenRestorePointAt(dir, nc)
	if err != nil {
		return "", 0, err
	}
	for _, t := range m.Tasks {
		if len(t.Channels) > 0 {
			return "", 0, fmt.Errorf("%s %d in %s holds in-flight data of an unaligned checkpoint, which cannot be redistributed: resume the job itself (deploy --resume), or take a savepoint", m.Kind, m.ID, dir)
		}
	}
	if m.MaxParallelism != plan.MaxParallelism {
		return "", 0, fmt.Errorf("savepoint %s was taken with max parallelism %d and the plan has %d: key groups cannot be remapped (set --max-parallelism %d)",
			dir, m.MaxParallelism, plan.MaxParallelism, m.MaxParallelism)
	}
	verts, err := SavepointVertices(m)
	if err != nil {
		return "", 0, fmt.Errorf("savepoint %s: %w", dir, err)
	}
	for id, kind := range verts {
		v := plan.Vertex(id)
		switch {
		case v == nil && !allowNonRestored:
			return "", 0, fmt.Errorf("savepoint %s holds state of vertex %q, which the plan does not have (pass --allow-non-restored-state to drop it)", dir, id)
		case v != nil && v.Kind != kind:
			return "", 0, fmt.Errorf("savepoint %s holds %s state for vertex %q, which the plan makes a %s", dir, kind, id, v.Kind)
		}
	}
	return st.Root(), m.ID, nil
}

// pendingSavepoint is a savepoint a client waits for.
type pendingSavepoint struct {
	dir   string
	stop  bool
	drain bool
	// reply answers the client (over NATS or the REST API; an upgrade's
	// barrier answers no one: the upgrade does).
	reply func(transport.SavepointReply)
	// upgrade: the savepoint is the barrier of this upgrade.
	upgrade *upgradeOp
}

// savepointDir is where savepoint id of a job goes under parent.
func savepointDir(parent, jobID string, id int64) string {
	return checkpoint.JoinLocation(parent, fmt.Sprintf("savepoint-%s-%d", jobID, id))
}

func (c *Coordinator) onSavepoint(m *nats.Msg, who caller) {
	var req transport.SavepointRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		err = c.outcome(who, "savepoint", "", fmt.Errorf("bad savepoint request: %w", err))
		respond(m, transport.SavepointReply{Error: err.Error()})
		return
	}
	c.savepoint(req, who, func(r transport.SavepointReply) { respond(m, r) })
}

// savepoint takes a savepoint, or stops the job with one, for who; reply
// gets the outcome, once, when the savepoint completes or fails (or at
// once when it cannot start), and the audit log with it.
func (c *Coordinator) savepoint(req transport.SavepointRequest, who caller, reply func(transport.SavepointReply)) {
	action := "savepoint"
	if req.Stop {
		action = "stop with savepoint"
	}
	reply = c.answerSavepoint(who, action, req.JobID, reply)
	if err := c.checkTenantLocation(who, req.Dir); err != nil {
		reply(transport.SavepointReply{Error: err.Error()})
		return
	}
	c.mu.Lock()
	j, ok := c.jobs[req.JobID]
	// Another tenant's job is as absent as one that never was.
	ok = ok && visibleLocked(j, who)
	var d *ckptDriver
	if ok && !j.done {
		d = j.ckpt
	}
	c.mu.Unlock()
	switch {
	case !ok:
		reply(transport.SavepointReply{Error: errNoJob(req.JobID).Error()})
		return
	case j.done:
		reply(transport.SavepointReply{Error: fmt.Sprintf("job %s has ended", req.JobID), JobEnded: true})
		return
	case d == nil:
		if !j.plan.Checkpoint.Enabled() {
			reply(transport.SavepointReply{Error: fmt.Sprintf("job %s does not checkpoint: deploy it with --checkpoint-interval to take savepoints", req.JobID)})
		} else {
			reply(transport.SavepointReply{Error: fmt.Sprintf("job %s is restarting: try again", req.JobID)})
		}
		return
	}
	if req.Stop {
		if err := c.stopSavepointRequested(j); err != nil {
			reply(transport.SavepointReply{Error: err.Error(), JobEnded: errors.Is(err, lifecycle.ErrEnded)})
			return
		}
	}
	dir := req.Dir
	switch {
	case dir != "":
	case j.info.Tenant != "":
		dir = filepath.Join(c.tenantRoot(j.info.Tenant), "savepoints")
	default:
		dir = filepath.Join(c.cfg.DataDir, "savepoints")
	}
	d.savepoint(dir, req.Stop, req.Stop && req.Drain, reply)
}

// savepoint triggers a savepoint; the client's reply comes when it
// completes or fails.
func (d *ckptDriver) savepoint(parent string, stop, drain bool, reply func(transport.SavepointReply)) {
	refuse := func(why string) {
		if stop {
			d.c.stopSavepointEnded(d.j, d.attempt, 0, errors.New(why))
		}
		reply(transport.SavepointReply{Error: why})
	}
	if !d.do(func() {
		if d.stopped {
			refuse("the job is restarting: try again")
			return
		}
		id, err := d.sm.TriggerSavepoint(time.Now().UnixMilli())
		if err != nil {
			refuse(err.Error())
			return
		}
		dir := savepointDir(parent, d.j.info.JobID, id)
		d.savepoints[id] = &pendingSavepoint{dir: dir, stop: stop, drain: drain, reply: reply}
		d.run()
	}) {
		refuse("the job is restarting: try again")
	}
}

// exportSavepoint copies a completed savepoint out of the job's checkpoint
// storage into its own directory, self-contained, metadata last.
func (d *ckptDriver) exportSavepoint(id int64, dir string) error {
	if checkpoint.IsObjectLocation(dir) || checkpoint.IsObjectLocation(d.storage.Root()) {
		return d.copySavepoint(id, dir)
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("savepoint directory %s exists already", dir)
	}
	src := d.storage.Dir(id)
	dstRoot := dir + ".tmp"
	_ = os.RemoveAll(dstRoot)
	dst := filepath.Join(dstRoot, filepath.Base(src))
	var metadata string
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if rel == checkpoint.MetadataName {
			metadata = p
			return nil
		}
		return checkpoint.CopyLocalFile(p, target)
	})
	if err == nil && metadata == "" {
		err = fmt.Errorf("checkpoint %d has no metadata", id)
	}
	if err == nil {
		err = checkpoint.CopyLocalFile(metadata, filepath.Join(dst, checkpoint.MetadataName))
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(dir), 0o755)
	}
	if err == nil {
		err = os.Rename(dstRoot, dir)
	}
	if err != nil {
		_ = os.RemoveAll(dstRoot)
		return fmt.Errorf("writing savepoint %s: %w", dir, err)
	}
	return nil
}

// copySavepoint is exportSavepoint when the checkpoints or the savepoint
// live in an object store: the checkpoint and the shared files it
// references are copied through the storage, checked on the way, the
// metadata last. A directory target is staged and renamed into place.
func (d *ckptDriver) copySavepoint(id int64, dir string) error {
	nc, err := d.c.jobConn(d.j)
	if err != nil {
		return fmt.Errorf("writing savepoint %s: %w", dir, err)
	}
	if checkpoint.IsObjectLocation(dir) {
		// Opened first: a bucket it makes has the cluster's replica count.
		dst, err := checkpoint.OpenReplicatedStorageAt(dir, nc, d.c.replicas())
		if err != nil {
			return fmt.Errorf("writing savepoint %s: %w", dir, err)
		}
		if _, _, err := checkpoint.OpenSavepointAt(dir, nc); err == nil {
			return fmt.Errorf("savepoint %s exists already", dir)
		}
		if _, err := d.storage.CopyCheckpoint(id, dst); err != nil {
			return fmt.Errorf("writing savepoint %s: %w", dir, err)
		}
		return nil
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("savepoint directory %s exists already", dir)
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	dst, err := checkpoint.OpenStorage(tmp)
	if err == nil {
		_, err = d.storage.CopyCheckpoint(id, dst)
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("writing savepoint %s: %w", dir, err)
	}
	return nil
}
