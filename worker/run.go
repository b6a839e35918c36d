package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/transport"
)

// sinkStates returns the sink state of vertex that the subtask restores:
// after a checkpoint restore of the same job, its own (the sink adopts it);
// after a restore from a savepoint, or at another parallelism, none of its
// own, and the old subtasks' states it takes over for connector.TakesOver:
// its own index, and the removed s' ≥ parallelism with s' mod parallelism =
// its index.
func (t *task) sinkStates(vertex string) (own []byte, taken [][]byte) {
	env := t.ckpt
	if env == nil || env.restore == nil || !env.fromSavepoint {
		return t.operatorState(vertex), nil
	}
	olds, _ := env.oldTasks(t.chain.Vertices[0].ID)
	p := t.chain.Parallelism
	for s, st := range olds {
		if st == nil || st.Operator[vertex] == nil {
			continue
		}
		if s == t.subtask || (s >= p && s%p == t.subtask) {
			taken = append(taken, st.Operator[vertex])
		}
	}
	return nil, taken
}

// recoverFinishedSink commits the transactions that the sink of a subtask
// restored as finished pre-committed in the restored checkpoint (its final
// one), and closes the sink.
func (w *Worker) recoverFinishedSink(j *jobRun, t *task) error {
	sink := t.sink
	t.sink = nil
	if sink == nil {
		return nil
	}
	v := t.chain.Vertices[len(t.chain.Vertices)-1]
	st := t.operatorState(v.ID)
	if !t.sinkTxn || st == nil {
		releaseSink(sink)
		return nil
	}
	if idf, ok := sink.(connector.Identified); ok {
		if err := idf.SetIdentity(j.id, v.ID); err != nil {
			return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
	}
	if err := sink.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
		return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
	}
	if err := sink.(connector.Transactional).Recover(st, j.ckpt.restore.ID); err != nil {
		releaseSink(sink)
		return fmt.Errorf("sink %q (vertex %s, subtask %d): recovering: %w", v.Connector, v.ID, t.subtask, err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("sink %q (vertex %s, subtask %d): closing: %w", v.Connector, v.ID, t.subtask, err)
	}
	return nil
}

// open opens the task's connectors and operators; it runs on the task's
// goroutine so that a slow guest open does not hold up the deployment.
func (w *Worker) open(j *jobRun, t *task) error {
	p := j.plan
	if t.source != nil {
		v := t.chain.Vertices[0]
		if err := t.source.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
			return fmt.Errorf("source %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
		off := t.operatorState(v.ID)
		if off == nil {
			off = t.sourceOffset
		}
		if off != nil {
			r, ok := t.source.(connector.Rewindable)
			if !ok {
				return fmt.Errorf("source %q (vertex %s, subtask %d) cannot rewind to its checkpointed position", v.Connector, v.ID, t.subtask)
			}
			if err := r.Seek(off); err != nil {
				return fmt.Errorf("source %q (vertex %s, subtask %d): rewinding to checkpoint %d: %w", v.Connector, v.ID, t.subtask, j.ckpt.restore.ID, err)
			}
		}
	}
	if t.sink != nil {
		v := t.chain.Vertices[len(t.chain.Vertices)-1]
		if idf, ok := t.sink.(connector.Identified); ok {
			if err := idf.SetIdentity(j.id, v.ID); err != nil {
				return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
			}
		}
		if err := t.sink.Open(j.ctx, t.subtask, t.chain.Parallelism); err != nil {
			return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
		if t.sinkTxn && (j.attempt > 0 || j.ckpt.restore != nil) {
			// Commit what the restored checkpoint pre-committed, and remove
			// what the failed attempt wrote after it.
			var id int64
			if j.ckpt.restore != nil {
				id = j.ckpt.restore.ID
			}
			own, taken := t.sinkStates(v.ID)
			if err := t.sink.(connector.Transactional).Recover(own, id); err != nil {
				return fmt.Errorf("sink %q (vertex %s, subtask %d): recovering: %w", v.Connector, v.ID, t.subtask, err)
			}
			if to, ok := t.sink.(connector.TakesOver); ok && len(taken) > 0 {
				if err := to.RecoverFrom(taken, id); err != nil {
					return fmt.Errorf("sink %q (vertex %s, subtask %d): committing what %s %d pre-committed: %w", v.Connector, v.ID, t.subtask, j.ckpt.restore.Kind, id, err)
				}
			}
		}
	}
	for k, s := range t.stages {
		v := s.vertex
		// Guest text arrives escaped (package host); the line says whose
		// job wrote it.
		attrs := []any{"guest", true, logging.Job, j.id, logging.Vertex, v.ID, logging.Subtask, t.subtask}
		if j.tenant != "" {
			attrs = append(attrs, logging.Tenant, j.tenant)
		}
		glog := w.log
		svc := &stageServices{keyedState: s.state, t: t, log: func(level int32, msg string) {
			glog.Log(context.Background(), logging.GuestLevel(level), msg, attrs...)
		}}
		spec := operator.Spec{
			VertexID:       v.ID,
			Operator:       strings.TrimPrefix(v.Operator, builtin.Prefix),
			Config:         v.Config,
			Outputs:        v.Outputs,
			Subtask:        t.subtask,
			Parallel:       t.chain.Parallelism,
			MaxParallelism: p.MaxParallelism,
			Keyed:          k == 0 && t.store != nil,
		}
		s.spec, s.svc = spec, svc
		if err := s.op.Open(spec, svc); err != nil {
			return t.stageError(s, "failed to open", err)
		}
	}
	if t.dl != nil && t.inst != nil {
		// Saved now, so that the first trap resets the instance too
		// rather than makes a new one (recoverInstance). A module whose
		// instances cannot be reset has them replaced.
		_ = t.inst.Snapshot()
	}
	return t.openDeadLetters(j.ctx, j)
}

func (w *Worker) runTask(j *jobRun, t *task) {
	defer j.wg.Done()
	var err error
	if t.restored != nil && t.restored.Finished {
		// It finished before the checkpoint it restores from: its output
		// is complete, so it only commits what its sink pre-committed for
		// that checkpoint and tells downstream that it has ended.
		err = w.recoverFinishedSink(j, t)
		if err == nil && t.dl != nil {
			// Its dead letters too: commit what the checkpoint lists.
			if err = t.openDeadLetters(j.ctx, j); err == nil {
				err = t.closeDeadLetters()
			} else {
				t.endDeadLetters(true)
			}
		}
		if err == nil {
			err = t.broadcast(j.ctx, transport.Message{Kind: transport.KindEnd})
		}
		if cerr := t.close(); err == nil && cerr != nil {
			err = cerr
		}
		w.report(j, t, err)
		return
	}
	err = w.open(j, t)
	if err == nil {
		// The replay below may take checkpoints while a send blocks.
		err = t.ensureMachine()
	}
	if err == nil && t.restored != nil && len(t.restored.Channels) > 0 {
		err = t.restoreChannels(j.ctx, t.restored)
	}
	if err == nil {
		err = t.run(j.ctx)
	}
	// Acknowledgements of snapshots already taken still go out.
	t.asyncWG.Wait()
	if err == nil {
		// A finished subtask never restores again from its local snapshots.
		if dir := t.localDir(); dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	failed := err != nil && !(j.ctx.Err() != nil && errors.Is(err, context.Canceled)) && !errors.Is(err, errStopped)
	if failed {
		// Before any sink of the job is closed: they must abort instead.
		j.failed.Store(true)
	}
	if t.sink != nil {
		// The input did not end. A job stopped with a savepoint flushes
		// what its sinks hold; a failed or canceled job's sinks abort, so a
		// file sink never leaves a file that looks complete. A
		// transactional sink's files are what recovery (after a restart, or
		// a resumed run) commits or removes, so they stay as they are.
		switch {
		case t.sinkTxn:
			releaseSink(t.sink)
		case j.failed.Load() || (err != nil && !errors.Is(err, errStopped)):
			abortSink(t.sink)
		default:
			_ = t.sink.Close()
		}
	}
	t.endDeadLetters(j.failed.Load() || (err != nil && !errors.Is(err, errStopped)))
	if cerr := t.close(); err == nil && cerr != nil {
		err = fmt.Errorf("subtask %s: releasing resources: %w", t.label, cerr)
	}
	w.report(j, t, err)
}

// report publishes how a subtask ended.
func (w *Worker) report(j *jobRun, t *task, err error) {
	st := transport.TaskStatus{JobID: j.id, Attempt: j.attempt, Worker: w.cfg.ID, Task: transport.TaskRef{Chain: t.chain.Index, Subtask: t.subtask}, Metrics: t.metrics()}
	switch {
	case err == nil:
		st.State = transport.TaskFinished
	case j.ctx.Err() != nil && errors.Is(err, context.Canceled), errors.Is(err, errStopped):
		st.State = transport.TaskCanceled
	default:
		st.State = transport.TaskFailed
		st.Error = err.Error()
		st.AfterPeer = errors.Is(err, transport.ErrClosed)
		j.failed.Store(true)
		// Stop the job's other local subtasks at once; the coordinator also
		// cancels them everywhere.
		j.cancel()
	}
	b, _ := json.Marshal(st)
	if perr := w.cfg.NATS.Publish(transport.TaskStatusSubject(j.id, w.cfg.ID), b); perr != nil {
		w.log.Warn("reporting a subtask's state", logging.Job, j.id, "subtask", t.label, "state", st.State, "err", perr)
	}
}
