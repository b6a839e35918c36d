package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// A subtask is built in three steps, each a method of its own:
//
//  1. open (openTask): the task, its part in checkpoints, its channels and
//     its keyed store, opened on the files of the checkpoint it restores;
//  2. restore (restoreTask): what a savepoint brings, which the store and
//     the source cannot open on as they are: the keyed state imported (of
//     other key groups, canonical, or migrated through the guest) and the
//     source positions (rescaled);
//  3. wire (wireTask): the chain's vertices (sources, sinks, operators and
//     the guest instance behind them), fair share and dead letters.
//
// A step that fails leaves the rest undone; newTask then closes what the
// earlier steps opened.

// taskBuild is a subtask under construction: what one step of newTask
// passes on to the next.
type taskBuild struct {
	j   *jobRun
	mod *host.Module
	c   *job.Chain
	sub int
	t   *task
	// store is the chain head's keyed state, nil when the chain keeps none.
	store *state.Store
	// inst serves the chain's guest operators; a migration of restored
	// state makes it before they open.
	inst *host.Instance
}

// newTask builds subtask sub of chain c, its channels from channel.
func (w *Worker) newTask(j *jobRun, mod *host.Module, c *job.Chain, sub int, channel channels) (*task, error) {
	b := w.newTaskBuild(j, mod, c, sub)
	err := w.openTask(b, channel)
	if err == nil {
		err = w.restoreTask(b)
	}
	if err == nil {
		err = w.wireTask(b)
	}
	if err != nil {
		_ = b.t.close()
		return nil, err
	}
	b.t.curChan = -1
	return b.t, nil
}

// newTaskBuild starts subtask sub of chain c: the task with nothing open.
func (w *Worker) newTaskBuild(j *jobRun, mod *host.Module, c *job.Chain, sub int) *taskBuild {
	t := &task{jobID: j.id, attempt: j.attempt, id: checkpoint.TaskID{Chain: c.Index, Subtask: sub}, chain: c, subtask: sub,
		label: fmt.Sprintf("%s/%d", c.ID, sub), now: time.Now, wm: abi.MinWatermark}
	t.wmPub.Store(abi.MinWatermark)
	if j.tenant != "" {
		// A tenant's subtask works holding a slot of the gate, guest
		// calls and the host work they cause alike; the host keeps a P
		// that no guest call holds for the work that holds no slot.
		w.gate().KeepHostP()
		t.turn = newFairTurn(j.ctx, w.gate(), j.tenant)
	}
	return &taskBuild{j: j, mod: mod, c: c, sub: sub, t: t}
}

// openTask is the first step: the subtask's part in checkpoints, its
// channels, and its keyed store with the state of the checkpoint it
// restores.
func (w *Worker) openTask(b *taskBuild, channel channels) error {
	if err := b.openCheckpointing(); err != nil {
		return err
	}
	if err := b.openInputs(channel); err != nil {
		return err
	}
	if err := b.openOutputs(channel); err != nil {
		return err
	}
	return w.openStore(b)
}

// openCheckpointing readies the subtask for the job's checkpoints and
// finds its state in the checkpoint it restores.
func (b *taskBuild) openCheckpointing() error {
	t, env := b.t, b.j.ckpt
	if env == nil {
		return nil
	}
	t.ckpt = env
	t.mbox = newMailbox()
	t.triggerTS = map[int64]int64{}
	if env.mode == checkpoint.Unaligned {
		t.prio = make(chan struct{}, 1)
		t.mbox.prio = t.prio
	}
	if m := env.restore; m != nil && !env.fromSavepoint {
		for i := range m.Tasks {
			if m.Tasks[i].Task == t.id {
				t.restored = &m.Tasks[i]
			}
		}
		if t.restored == nil {
			return fmt.Errorf("subtask %s: checkpoint %d holds no state for it: the plan changed since (rescaling comes with savepoints)", t.label, m.ID)
		}
	}
	return nil
}

// openInputs connects the subtask's inputs, in the order of the head's
// input edges, into its input gate.
func (b *taskBuild) openInputs(channel channels) error {
	t, j := b.t, b.j
	var ins []transport.InputChannel
	for _, e := range b.c.Inputs {
		for _, up := range e.Upstream(b.sub) {
			ch, err := channel.in(e, up, b.sub)
			if err != nil {
				for _, in := range ins {
					in.Close()
				}
				return err
			}
			ins = append(ins, ch)
			_, isLocal := ch.(*transport.LocalChannel)
			t.recycle = append(t.recycle, isLocal && !mayCapture(j.ckpt))
			t.inputs = append(t.inputs, inputRef{edge: e.Index, peer: up})
			if in, ok := ch.(*transport.JetStreamInput); ok {
				t.remoteIns = append(t.remoteIns, in)
			}
		}
	}
	if len(ins) == 0 {
		return nil
	}
	t.gate = transport.NewInputGate(ins)
	t.closers = append(t.closers, func() error { t.gate.Close(); return nil })
	if t.mbox == nil {
		return nil
	}
	t.mbox.poke = t.gate.Interrupt
	if t.prio != nil {
		t.gate.NotifyPriority(t.prio)
	}
	return nil
}

// openOutputs connects the output edges of the chain's tail.
func (b *taskBuild) openOutputs(channel channels) error {
	t, c, sub := b.t, b.c, b.sub
	for _, e := range c.Outputs {
		o := &outEdge{edge: e, port: uint32(e.OutputIndex), inPort: uint32(e.InputIndex), maxPar: b.j.plan.MaxParallelism}
		downs := make([]int, 0, e.To.Parallelism)
		if e.Partition == job.PartitionForward {
			downs = append(downs, sub)
		} else {
			for d := 0; d < e.To.Parallelism; d++ {
				downs = append(downs, d)
			}
		}
		for _, d := range downs {
			ch, err := channel.out(e, sub, d)
			if err != nil {
				return err
			}
			if r, ok := ch.(interface{ Close() error }); ok {
				// A channel to another worker holds subscriptions.
				t.closers = append(t.closers, r.Close)
			}
			o.chans = append(o.chans, ch)
			o.peers = append(o.peers, d)
		}
		o.bufs = make([]abi.Builder, len(o.chans))
		t.outs = append(t.outs, o)
	}
	return nil
}

// keyedChain reports whether chain c keeps keyed state: its head is an
// operator fed only by key-partitioned edges.
func keyedChain(c *job.Chain) bool {
	keyed := c.Vertices[0].Kind == job.KindOperator && len(c.Inputs) > 0
	for _, e := range c.Inputs {
		if e.Partition != job.PartitionKey {
			keyed = false
		}
	}
	return keyed
}

// openStore opens the keyed store of a keyed chain in the attempt's
// working directory, on the files of the checkpoint the subtask restores
// (its local snapshot when one verifies).
func (w *Worker) openStore(b *taskBuild) error {
	if !keyedChain(b.c) {
		return nil
	}
	t, j, c, sub := b.t, b.j, b.c, b.sub
	dir := filepath.Join(w.cfg.DataDir, "jobs", j.id, "state", fmt.Sprintf("%s-%d", c.ID, sub))
	// State left by an earlier attempt ran past the checkpoint this one
	// starts from: start from the checkpoint's files, or empty.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("subtask %s: clearing state: %w", t.label, err)
	}
	local := t.localDir()
	var keep int64 // the local snapshot restored from
	if t.restored != nil {
		r, err := restoreKeyedState(j.ckpt.restoreStorage, j.ckpt.restore, t.restored, local, dir, j.ckpt.log)
		if err != nil {
			return fmt.Errorf("subtask %s: restoring state from checkpoint %d: %w", t.label, j.ckpt.restore.ID, err)
		}
		w.restoreRead.Add(r.storageBytes)
		w.localRead.Add(r.localBytes)
		if r.local {
			keep = j.ckpt.restore.ID
		}
	}
	if local != "" {
		// Snapshots of other checkpoints (newer ones that never
		// completed, or one that did not verify) are of no use.
		t.dropLocal(func(id int64) bool { return id != keep })
	}
	s, err := state.Open(w.stateOptions(j, dir, abi.RangeForSubtask(sub, c.Parallelism, j.plan.MaxParallelism)))
	if err != nil {
		return fmt.Errorf("subtask %s: opening state: %w", t.label, err)
	}
	// The store is the attempt's working copy: the next attempt clears
	// it and starts from a checkpoint's files, so nothing in it is kept
	// at the end.
	t.closers = append(t.closers, s.Discard)
	t.store = s
	b.store = s
	return nil
}

// restoreTask is the second step: after a restore from a savepoint, the
// keyed state of the old subtasks whose key groups the subtask now owns,
// migrated through the guest where the plan raised a layout version, and
// where its source starts reading.
func (w *Worker) restoreTask(b *taskBuild) error {
	t, env := b.t, b.j.ckpt
	if env == nil || !env.fromSavepoint {
		return nil
	}
	if b.store != nil {
		migrate, err := w.migrator(b.j, b.mod, t, b.c.Vertices[0], &b.inst)
		if err != nil {
			return fmt.Errorf("subtask %s: restoring state from savepoint %d: %w", t.label, env.restore.ID, err)
		}
		n, err := t.importSavepointState(b.c.Vertices[0].ID, migrate)
		w.restoreRead.Add(n)
		if err != nil {
			return fmt.Errorf("subtask %s: restoring state from savepoint %d: %w", t.label, env.restore.ID, err)
		}
	}
	for _, v := range b.c.Vertices {
		if v.Kind != job.KindSource {
			continue
		}
		olds, _ := env.oldTasks(v.ID)
		finished := len(olds) > 0
		for _, o := range olds {
			finished = finished && o != nil && o.Finished
		}
		if finished {
			// The source had read all of its input: it ends at once.
			t.restored = &checkpoint.SubtaskState{Task: t.id, Finished: true}
			continue
		}
		off, err := t.savepointOffset(v.ID, v.Connector)
		if err != nil {
			return fmt.Errorf("subtask %s: the source position in %s %d: %w", t.label, env.restore.Kind, env.restore.ID, err)
		}
		t.sourceOffset = off
	}
	return nil
}

// wireTask is the third step: the chain's vertices, the pacing of a
// tenant's state writes, the first-record report and dead letters.
func (w *Worker) wireTask(b *taskBuild) error {
	t, j, c := b.t, b.j, b.c
	for i, v := range c.Vertices {
		var err error
		switch v.Kind {
		case job.KindSource:
			err = w.wireSource(b, v)
		case job.KindSink:
			err = w.wireSink(b, v)
		default:
			err = w.wireStage(b, i, v)
		}
		if err != nil {
			return err
		}
	}
	t.store = b.store
	if b.store != nil && j.tenant != "" && j.stateRate > 0 {
		t.turn.pace(w.writeRate(j.tenant, j.stateRate), b.store.Committed)
	}
	if j.reportFirst && len(t.stages) > 0 {
		t.firstRecord = w.firstRecordReport(j, c, b.sub, t.label)
	}
	dl, err := w.newDeadLetters(j, c)
	if err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	t.dl = dl
	if dl != nil && len(t.stages) > 0 {
		// A failed call's output is dropped (task.guarded): it must stay
		// in the collector until the call returns, not be routed into the
		// channels as it is emitted.
		t.stages[len(t.stages)-1].coll.tail = nil
	}
	// The machine, once its input gate, its checkpointing and its dead
	// letters are known.
	return t.newMachine()
}

// wireSource opens source vertex v.
func (w *Worker) wireSource(b *taskBuild, v *job.Vertex) error {
	src, err := w.newSource(b.j, v.Connector, v.Config)
	if err != nil {
		return fmt.Errorf("vertex %s: %w", v.ID, err)
	}
	b.t.source = src
	b.t.closers = append(b.t.closers, src.Close)
	return nil
}

// wireSink opens sink vertex v; a transactional sink of a checkpointed job
// writes exactly once: its output is pending per checkpoint, committed
// when the checkpoint completes.
func (w *Worker) wireSink(b *taskBuild, v *job.Vertex) error {
	snk, err := w.newSink(b.j, v.Connector, v.Config)
	if err != nil {
		return fmt.Errorf("vertex %s: %w", v.ID, err)
	}
	b.t.sink = snk
	if tx, ok := snk.(connector.Transactional); ok && b.j.ckpt != nil {
		if err := tx.BeginTransactions(); err != nil {
			return fmt.Errorf("vertex %s: %w", v.ID, err)
		}
		b.t.sinkTxn = true
	}
	return nil
}

// wireStage adds operator vertex v, the i-th of the chain, as a stage: a
// builtin, or the module's operator in the subtask's instance (made by the
// first guest stage unless a migration made it), a tenant's taking its
// fair share of the cores.
func (w *Worker) wireStage(b *taskBuild, i int, v *job.Vertex) error {
	t, j, c := b.t, b.j, b.c
	var op operator.Operator
	var calls *host.CallStats
	if name, ok := strings.CutPrefix(v.Operator, builtin.Prefix); ok {
		o, err := builtin.New(name)
		if err != nil {
			return fmt.Errorf("vertex %s: %w", v.ID, err)
		}
		op = o
	} else {
		if b.inst == nil {
			in, err := w.instance(j, b.mod, t.label)
			if err != nil {
				return fmt.Errorf("subtask %s: %w", t.label, err)
			}
			b.inst = in
			t.inst = in
			t.newInstance = func() (*host.Instance, error) { return w.instance(j, b.mod, t.label) }
			// t.inst: a trap in dead-letter mode replaces the instance.
			t.closers = append(t.closers, func() error { return t.inst.Close(context.Background()) })
		}
		calls = &host.CallStats{}
		op = b.inst.OperatorWithStats(calls)
		if j.tenant != "" {
			// A tenant's guest calls take their share of the cores.
			fo := NewFairOperator(j.ctx, w.gate(), j.tenant, float64(j.weight), op)
			fo.turn = t.turn
			op = fo
		}
	}
	s := &stage{vertex: v, op: op, calls: calls, guest: b.inst != nil && !strings.HasPrefix(v.Operator, builtin.Prefix)}
	s.coll.nOut = len(v.Outputs)
	s.coll.keep = -1
	if i+1 < len(c.Vertices) {
		s.coll.keep = chainedOutput(j.plan, v.ID, c.Vertices[i+1].ID)
	} else {
		// The chain's end: its output goes straight to the edges.
		s.coll.tail = t
	}
	if i == 0 && b.store != nil {
		s.state = b.store.Vertex(v.ID, true)
		s.keyed = true
	} else {
		s.state = noKeyedState{}
	}
	t.stages = append(t.stages, s)
	return nil
}

// firstRecordReport returns what tells the coordinator that subtask sub of
// chain c has its first records.
func (w *Worker) firstRecordReport(j *jobRun, c *job.Chain, sub int, label string) func() {
	return func() {
		st := transport.TaskStatus{JobID: j.id, Attempt: j.attempt, Worker: w.cfg.ID, Task: transport.TaskRef{Chain: c.Index, Subtask: sub},
			State: transport.TaskFirstRecord, At: time.Now().UnixMilli()}
		b, _ := json.Marshal(st)
		if err := w.cfg.NATS.Publish(transport.TaskStatusSubject(j.id, w.cfg.ID), b); err != nil {
			w.log.Warn("reporting the first records", logging.Job, j.id, "subtask", label, "err", err)
		}
	}
}
