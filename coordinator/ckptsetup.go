package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
)

// The steps of newCkptDriver: open the job's checkpoint storage, choose
// what a restart restores, find the last id used, and build the state
// machine's configuration and tasks.

// openCkptStorage opens job j's checkpoint storage through the job's own
// connection and clears what no restore can use: checkpoints that never
// completed and savepoints interrupted before their export.
func (c *Coordinator) openCkptStorage(j *jobState) (*nats.Conn, *checkpoint.Storage, error) {
	if c.cfg.DataDir == "" {
		return nil, nil, errors.New("checkpoints need a data directory for their storage")
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return nil, nil, err
	}
	st, err := checkpoint.OpenReplicatedStorageAt(j.checkpointRoot(c.cfg.DataDir), nc, c.replicas())
	if err != nil {
		return nil, nil, err
	}
	// Directories of checkpoints that never completed hold nothing usable.
	if _, err := st.CleanIncomplete(); err != nil {
		return nil, nil, err
	}
	// A savepoint is in the job's storage only between its metadata and its
	// export; one found here was interrupted, and its caller told so.
	if ids, err := st.Completed(); err == nil {
		for _, id := range ids {
			if m, err := st.ReadMetadata(id); err == nil && m.Kind == checkpoint.KindSavepoint {
				c.cfg.Log.Info("removing a savepoint interrupted before its export", logging.Job, j.info.JobID, logging.Checkpoint, id)
				if err := st.Discard(id); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	return nc, st, nil
}

// restorePlan is what an attempt after the first restores: checkpoint id
// (0: none) with its metadata, the completed checkpoints it keeps
// (retained), and those it keeps out of the machine until it completes a
// checkpoint (outside).
type restorePlan struct {
	id                int64
	meta              *checkpoint.Metadata
	retained, outside []checkpoint.Completed
}

// planRestore chooses the checkpoint that attempt j.attempt restores.
func (c *Coordinator) planRestore(j *jobState, nc *nats.Conn, st *checkpoint.Storage) (restorePlan, error) {
	var rp restorePlan
	floor := j.savepointID
	if j.fromSavepoint == "" {
		floor = 0
	}
	m, err := c.latestUsable(j, nc, st, floor)
	if err != nil {
		return rp, err
	}
	if m != nil {
		rp.id, rp.meta = m.ID, m
	}
	metas, err := c.completedMetadata(j, st)
	if err != nil {
		return rp, fmt.Errorf("not restoring: %w", err)
	}
	for _, m := range metas {
		id := m.ID
		cp := checkpoint.Completed{ID: m.ID, Kind: m.Kind, Trigger: m.Trigger, Done: m.Done, Tasks: m.Tasks}
		if id > rp.id || id < floor || m.Kind != checkpoint.KindCheckpoint {
			// Newer but unusable: keeping it would make it "retained";
			// older than the savepoint: of another plan, maybe. Its
			// files stay until this attempt completes a checkpoint.
			rp.outside = append(rp.outside, cp)
			continue
		}
		rp.retained = append(rp.retained, cp)
	}
	return rp, nil
}

// latestUsable returns the latest checkpoint a failover may restore (nil:
// none, start from the savepoint at floor or from the beginning). One that
// cannot be read now is waited for, never skipped as if corrupt.
func (c *Coordinator) latestUsable(j *jobState, nc *nats.Conn, st *checkpoint.Storage, floor int64) (*checkpoint.Metadata, error) {
	accept := func(m *checkpoint.Metadata) error {
		if m.Kind != checkpoint.KindCheckpoint {
			return fmt.Errorf("it is a %s: a failover restores checkpoints only", m.Kind)
		}
		if m.ID < floor {
			// Taken before the savepoint the job (re)started from: an
			// upgrade's sinks committed on that savepoint.
			return fmt.Errorf("it is older than savepoint %d, which the job started from", floor)
		}
		return c.rangesPresent(nc, m)
	}
	m, skipped, err := st.LatestUsableWith(accept)
	for _, wait := range restoreRetries {
		if !errors.Is(err, checkpoint.ErrUnavailable) {
			break
		}
		c.cfg.Log.Warn("a checkpoint cannot be read now; waiting to read it again", logging.Job, j.info.JobID, "in", wait, "err", err)
		time.Sleep(wait)
		m, skipped, err = st.LatestUsableWith(accept)
	}
	for _, s := range skipped {
		c.cfg.Log.Warn("skipping an unusable checkpoint", logging.Job, j.info.JobID, "err", s)
	}
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, checkpoint.ErrNoCheckpoint) && floor != 0:
		c.cfg.Log.Info("no usable checkpoint since the savepoint; restoring the savepoint", logging.Job, j.info.JobID, logging.Checkpoint, floor)
	case errors.Is(err, checkpoint.ErrNoCheckpoint) && len(skipped) > 0:
		// Checkpoints completed, so sinks committed on them: empty
		// state would publish again what they committed, and a file
		// sink's recovery would delete it. A person decides.
		return nil, fmt.Errorf("not restoring: every completed checkpoint is unusable, and starting from empty state would repeat the output the sinks committed on them (restore a savepoint, or deploy the job anew to start over): %w", err)
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		c.cfg.Log.Warn("no usable checkpoint; restarting from the beginning", logging.Job, j.info.JobID)
	case errors.Is(err, checkpoint.ErrUnavailable):
		// Not from empty state, nor from an older checkpoint: the
		// attempt fails, and the restart strategy tries again later.
		return nil, fmt.Errorf("not restoring: %w", err)
	default:
		return nil, err
	}
	return nil, nil
}

// newAdoptedCkptDriver makes the checkpoint driver of an adopted attempt.
// Nothing is restored: the workers run the attempt with its state. The
// driver needs only the completed checkpoints' metadata: the state
// machine's retained checkpoints, and the shared-state registry's
// references, so that a discard deletes a shared file only when no
// completed, retained or pending checkpoint refers to it. So each
// metadata is read once, and no file is verified (reading every file of
// the latest checkpoint took seconds of a failover), no range checked and
// no stream purged: a restart, which restores, does those. Nothing is
// cleaned either: a directory without metadata may be the deposed
// leader's checkpoint that the workers are still writing; the next
// restart removes it.
func (c *Coordinator) newAdoptedCkptDriver(j *jobState) (*ckptDriver, int64, error) {
	if c.cfg.DataDir == "" {
		return nil, 0, errors.New("checkpoints need a data directory for their storage")
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return nil, 0, err
	}
	st, err := checkpoint.OpenReplicatedStorageAt(j.checkpointRoot(c.cfg.DataDir), nc, c.replicas())
	if err != nil {
		return nil, 0, err
	}
	rp, err := c.planAdoption(j, st)
	for _, wait := range restoreRetries {
		if !errors.Is(err, checkpoint.ErrUnavailable) {
			break
		}
		c.cfg.Log.Warn("a checkpoint's metadata cannot be read now; waiting to read it again", logging.Job, j.info.JobID, "in", wait, "err", err)
		time.Sleep(wait)
		rp, err = c.planAdoption(j, st)
	}
	if err != nil {
		return nil, 0, err
	}
	d, err := c.startCkptDriver(j, st, rp)
	if err != nil {
		return nil, 0, err
	}
	return d, rp.id, nil
}

// completedMetadata reads the metadata of every completed checkpoint of st.
// One that cannot be read now fails the read: left out, its shared files
// would look unreferenced to the registry's sweep. A corrupt one is logged
// and left out.
func (c *Coordinator) completedMetadata(j *jobState, st *checkpoint.Storage) ([]*checkpoint.Metadata, error) {
	ids, err := st.Completed()
	if err != nil {
		return nil, err
	}
	metas := make([]*checkpoint.Metadata, 0, len(ids))
	for _, id := range ids {
		m, err := st.ReadMetadata(id)
		switch {
		case errors.Is(err, checkpoint.ErrUnavailable):
			return nil, err
		case err != nil:
			c.cfg.Log.Warn("an unreadable checkpoint left out", logging.Job, j.info.JobID, logging.Checkpoint, id, "err", err)
			continue
		}
		metas = append(metas, m)
	}
	return metas, nil
}

// planAdoption reads the metadata of every completed checkpoint of st
// once: the checkpoints from the job's savepoint on are retained, the
// latest of them is the one reported; older ones are outside. A savepoint
// found in the job's storage was interrupted before its export, and is
// removed, as openCkptStorage does.
func (c *Coordinator) planAdoption(j *jobState, st *checkpoint.Storage) (restorePlan, error) {
	var rp restorePlan
	floor := j.savepointID
	if j.fromSavepoint == "" {
		floor = 0
	}
	metas, err := c.completedMetadata(j, st)
	if err != nil {
		return rp, fmt.Errorf("not adopting: %w", err)
	}
	for _, m := range metas {
		id := m.ID
		if m.Kind == checkpoint.KindSavepoint {
			c.cfg.Log.Info("removing a savepoint interrupted before its export", logging.Job, j.info.JobID, logging.Checkpoint, id)
			if err := st.Discard(id); err != nil {
				return rp, err
			}
			continue
		}
		cp := checkpoint.Completed{ID: m.ID, Kind: m.Kind, Trigger: m.Trigger, Done: m.Done, Tasks: m.Tasks}
		if id < floor || m.Kind != checkpoint.KindCheckpoint {
			rp.outside = append(rp.outside, cp)
			continue
		}
		rp.retained = append(rp.retained, cp)
		rp.id, rp.meta = m.ID, m
	}
	return rp, nil
}

// lastCheckpointID is the highest checkpoint id job j has used: the next
// trigger takes the one after it.
func (c *Coordinator) lastCheckpointID(j *jobState, st *checkpoint.Storage) (int64, error) {
	var next int64
	if !j.adopting || c.ids == nil {
		// An adopted attempt's ids came from the counter, which is read
		// below: listing the storage again would add nothing.
		var err error
		if next, err = st.MaxID(); err != nil {
			return 0, err
		}
	}
	// Sinks name their output by checkpoint id: a job started from a
	// savepoint continues the savepoint's numbering.
	next = max(next, j.savepointID)
	if c.ids != nil {
		// The counter is the authority: storage forgets the ids of
		// checkpoints it deleted (incomplete ones, exported savepoints).
		// An unreachable bucket fails the deployment, and the restart
		// strategy tries again.
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		used, _, err := c.ids.current(ctx, j.info.JobID)
		cancel()
		if err != nil {
			return 0, err
		}
		next = max(next, used)
	}
	// An id whose trigger failed before the counter could be raised (NATS
	// was down) reached no subtask, but the history shows it: never again.
	if hist, err := ReadHistory(c.cfg.DataDir, j.info.JobID); err == nil {
		for _, h := range hist {
			next = max(next, h.ID)
		}
	}
	return next, nil
}

// ckptConfig is the state machine's configuration from the plan's
// checkpoint settings.
func ckptConfig(cs *job.CheckpointSettings) checkpoint.Config {
	cfg := checkpoint.Config{
		Interval: cs.Interval, MinPause: cs.MinPause, MaxConcurrent: cs.MaxConcurrent,
		Timeout: cs.Timeout, TolerableFailures: cs.TolerableFailures, Retain: cs.Retain,
	}
	// A random initial delay spreads the first checkpoints of many jobs
	// (seed 002: the coordinator's first trigger).
	if span := cs.Interval - cs.MinPause; span > 0 {
		cfg.InitialDelay = cs.MinPause + time.Now().UnixNano()%span
	} else {
		cfg.InitialDelay = cs.Interval
	}
	return cfg
}

// ckptTasks are the subtasks of plan that acknowledge checkpoints, and
// those of them that are sources (the trigger goes to them).
func ckptTasks(plan *job.Plan) (tasks, sources []checkpoint.TaskID, err error) {
	g, err := job.Build(plan)
	if err != nil {
		return nil, nil, err
	}
	for _, ch := range g.Chains {
		for s := 0; s < ch.Parallelism; s++ {
			id := checkpoint.TaskID{Chain: ch.Index, Subtask: s}
			tasks = append(tasks, id)
			if ch.Vertices[0].Kind == job.KindSource {
				sources = append(sources, id)
			}
		}
	}
	return tasks, sources, nil
}

// openHistory opens job's checkpoint history for appending. It stays on
// the coordinator's disk wherever the checkpoints go: ReadHistory and
// `wstream checkpoints` read it there.
func openHistory(dataDir, jobID string) (*os.File, error) {
	dir := CheckpointRoot(dataDir, jobID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "history.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}
