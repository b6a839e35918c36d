package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/transport"
)

// replaceAttempt makes room for attempt d: it refuses a worker shutting down
// or an attempt not newer than the one running, and stops an older one.
func (w *Worker) replaceAttempt(d transport.Deployment) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return fmt.Errorf("worker %s is shutting down", w.cfg.ID)
	}
	if prev, dup := w.jobs[d.JobID]; dup {
		if prev.attempt >= d.Attempt {
			w.mu.Unlock()
			return fmt.Errorf("worker %s already runs attempt %d of job %s", w.cfg.ID, prev.attempt, d.JobID)
		}
		// A restart: the previous attempt's subtasks have all reported their
		// end, but may still be releasing resources.
		w.mu.Unlock()
		prev.cancel()
		select {
		case <-prev.done:
		case <-time.After(time.Minute):
			return fmt.Errorf("worker %s: attempt %d of job %s did not stop within a minute", w.cfg.ID, prev.attempt, d.JobID)
		}
	} else {
		w.mu.Unlock()
	}
	return nil
}

// deploy starts attempt d of a job on this worker: its connection, module,
// exchange and subtasks.
func (w *Worker) deploy(d transport.Deployment) error {
	if err := w.replaceAttempt(d); err != nil {
		return err
	}

	plan, err := job.Parse(d.Plan)
	if err != nil {
		return err
	}
	g, err := job.Build(plan)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &jobRun{id: d.JobID, attempt: d.Attempt, digest: d.ModuleDigest, epoch: d.Epoch, plan: plan, graph: g, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), restartable: d.Restartable, tenant: d.Tenant, stateBytes: d.StateBytes, stateRate: d.StateWriteRate,
		memPages: uint32(d.MemoryLimitMiB) * 16, weight: d.Weight, reportFirst: d.ReportFirstRecord, replicas: d.Replicas}
	if err := w.dataConn(j, d); err != nil {
		cancel()
		return err
	}
	fail := func(err error) error {
		cancel()
		j.releaseConn()
		w.forgetCreds(j)
		return err
	}
	if plan.Checkpoint.Enabled() {
		env, err := w.checkpointEnv(j, d)
		if err != nil {
			return fail(err)
		}
		j.ckpt = env
	}
	var mod *host.Module
	if needsModule(g) {
		mod, err = w.module(ctx, j.js, d.Tenant, d.ModuleDigest, d.ModuleName, d.ModuleBytes)
		if err != nil {
			return fail(err)
		}
	}
	if d.DataStream != "" {
		if d.DataStream != transport.DataStream(d.JobID) {
			return fail(fmt.Errorf("job %s: deployment names data stream %s, want %s", d.JobID, d.DataStream, transport.DataStream(d.JobID)))
		}
		x, err := transport.NewExchange(ctx, transport.ExchangeConfig{NATS: j.nc, Job: d.JobID, Attempt: d.Attempt, Window: w.cfg.ExchangeWindow})
		if err != nil {
			return fail(fmt.Errorf("worker %s: %w", w.cfg.ID, err))
		}
		j.exch = x
	}
	tasks, err := w.wire(j, mod, d.Tasks)
	if err != nil {
		if j.exch != nil {
			j.exch.Close()
		}
		return fail(err)
	}
	j.tasks = tasks
	w.mu.Lock()
	w.jobs[d.JobID] = j
	w.mu.Unlock()
	for _, t := range tasks {
		j.wg.Add(1)
		go w.runTask(j, t)
	}
	go func() {
		j.wg.Wait()
		cancel()
		if j.exch != nil {
			j.exch.Close()
		}
		j.releaseConn()
		w.mu.Lock()
		if w.jobs[j.id] == j {
			delete(w.jobs, j.id)
		}
		w.mu.Unlock()
		w.forgetCreds(j)
		close(j.done)
	}()
	return nil
}

// checkpointEnv prepares what a checkpointing job's subtasks need: its
// storage, its mode, and the checkpoint the attempt restores from.
func (w *Worker) checkpointEnv(j *jobRun, d transport.Deployment) (*ckptEnv, error) {
	cs := j.plan.Checkpoint
	if d.CheckpointRoot == "" {
		return nil, fmt.Errorf("job %s checkpoints but its deployment names no checkpoint storage", j.id)
	}
	st, err := checkpoint.OpenReplicatedStorageAt(d.CheckpointRoot, j.nc, d.Replicas)
	if err != nil {
		return nil, err
	}
	mode := checkpoint.ExactlyOnce
	if cs.Mode != "" {
		if mode, err = checkpoint.ParseMode(string(cs.Mode)); err != nil {
			return nil, err
		}
	}
	if err := st.SetCompression(cs.CompressionLevel()); err != nil {
		return nil, err
	}
	env := &ckptEnv{
		// The attempt's end cuts its uploads and restores short: a cancel
		// does not wait for a store that cannot be reached.
		storage:          st.WithContext(j.ctx),
		mode:             mode,
		incremental:      cs.IncrementalOn(),
		nativeSavepoints: cs.SavepointFormat == job.SavepointNative,
		alignedTimeout:   cs.AlignedTimeout,
		tmpDir:           filepath.Join(w.cfg.DataDir, "jobs", j.id, "snapshots"),
		log:              w.log.With(logging.Job, j.id, logging.Attempt, j.attempt),
		js:               j.js,
		publish: func(a transport.CheckpointAck) {
			if err := w.cfg.NATS.Publish(transport.CheckpointAckSubject(j.id), ackJSON(a)); err != nil {
				w.log.Warn("acknowledging a checkpoint", logging.Job, j.id, logging.Checkpoint, a.ID, "err", err)
			}
		},
	}
	localRoot := filepath.Join(w.cfg.DataDir, "jobs", j.id, "local")
	if cs.LocalRecovery {
		env.localRoot = localRoot
	} else if err := os.RemoveAll(localRoot); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(env.tmpDir, 0o755); err != nil {
		return nil, err
	}
	switch {
	case d.SavepointRoot != "":
		sp, err := checkpoint.OpenReplicatedStorageAt(d.SavepointRoot, j.nc, d.Replicas)
		if err != nil {
			return nil, err
		}
		m, err := sp.ReadMetadata(d.RestoreID)
		if err != nil {
			return nil, err
		}
		if err := sp.Verify(m); err != nil {
			return nil, err
		}
		old, err := job.Parse(m.Plan)
		if err == nil {
			env.oldGraph, err = job.Build(old)
		}
		if err != nil {
			return nil, fmt.Errorf("savepoint %s: its plan: %w", d.SavepointRoot, err)
		}
		env.migrations = job.Migrations(old, j.plan)
		env.restore, env.restoreStorage, env.fromSavepoint = m, sp, true
	case d.RestoreID > 0:
		m, err := st.ReadMetadata(d.RestoreID)
		if err != nil {
			return nil, err
		}
		if err := st.Verify(m); err != nil {
			return nil, err
		}
		env.restore, env.restoreStorage = m, st
	}
	return env, nil
}

func needsModule(g *job.Graph) bool {
	for _, c := range g.Chains {
		for _, v := range c.Vertices {
			if v.Kind == job.KindOperator && !strings.HasPrefix(v.Operator, builtin.Prefix) {
				return true
			}
		}
	}
	return false
}

// wire builds the tasks of refs and the channels between them: local
// channels between two subtasks of refs, JetStream channels (when the job
// has a data stream) to subtasks on other workers.
func (w *Worker) wire(j *jobRun, mod *host.Module, refs []transport.TaskRef) (tasks []*task, err error) {
	g := j.graph
	local := map[[2]int]bool{}
	for _, r := range refs {
		if r.Chain < 0 || r.Chain >= len(g.Chains) || r.Subtask < 0 || r.Subtask >= g.Chains[r.Chain].Parallelism {
			return nil, fmt.Errorf("deployment of job %s names subtask %d of chain %d, which the plan does not have", j.id, r.Subtask, r.Chain)
		}
		local[[2]int{r.Chain, r.Subtask}] = true
	}
	chans := map[chanKey]*transport.LocalChannel{}
	remote := func(e *job.ChainEdge) error {
		if j.exch == nil {
			return fmt.Errorf("job %s: edge %s→%s joins subtasks on different workers, and the job has no data stream to carry it", j.id, e.FromVertex, e.ToVertex)
		}
		return nil
	}
	localChannel := func(e *job.ChainEdge, up, down int) *transport.LocalChannel {
		k := chanKey{e.Index, up, down}
		c, ok := chans[k]
		if !ok {
			c = transport.NewLocalChannel(w.cfg.ChannelCapacity)
			chans[k] = c
		}
		return c
	}
	cs := channels{
		in: func(e *job.ChainEdge, up, down int) (transport.InputChannel, error) {
			if local[[2]int{e.From.Index, up}] {
				return localChannel(e, up, down), nil
			}
			if err := remote(e); err != nil {
				return nil, err
			}
			w.remoteChannels.Add(1)
			in, err := j.exch.NewInput(e.Index, up, down)
			if err != nil {
				return nil, err
			}
			if j.ckpt != nil {
				// It holds the stream ranges the subtask's checkpoints
				// refer to until they are subsumed.
				j.ckpt.observe(checkpoint.TaskID{Chain: e.To.Index, Subtask: down}, e.Index, up, in)
			}
			return in, nil
		},
		out: func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error) {
			if local[[2]int{e.To.Index, down}] {
				return localChannel(e, up, down), nil
			}
			if err := remote(e); err != nil {
				return nil, err
			}
			w.remoteChannels.Add(1)
			return j.exch.NewOutput(e.Index, up, down)
		},
	}
	// The subtasks are built in parallel: instantiating a module (the
	// guest's _initialize) and opening keyed state take milliseconds each,
	// and a deployment is not done until every subtask is built. Only the
	// channels are shared between them.
	var mu sync.Mutex
	shared := channels{
		in: func(e *job.ChainEdge, up, down int) (transport.InputChannel, error) {
			mu.Lock()
			defer mu.Unlock()
			return cs.in(e, up, down)
		},
		out: func(e *job.ChainEdge, up, down int) (transport.OutputChannel, error) {
			mu.Lock()
			defer mu.Unlock()
			return cs.out(e, up, down)
		},
	}
	tasks = make([]*task, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tasks[i], errs[i] = w.newTask(j, mod, g.Chains[r.Chain], r.Subtask, shared)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, t := range tasks {
				if t != nil {
					_ = t.close()
				}
			}
			// The first in deployment order, as when they were built one
			// by one.
			return nil, err
		}
	}
	return tasks, nil
}

// chainedOutput is the output index of from that the chained edge from→to
// carries.
func chainedOutput(p *job.Plan, from, to string) int {
	v := p.Vertex(from)
	for _, e := range p.Edges {
		if e.From == from && e.To == to {
			for i, o := range v.Outputs {
				if o == e.Output {
					return i
				}
			}
		}
	}
	return 0
}
