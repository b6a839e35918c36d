package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// restoreChannels replays the channel state of the checkpoint the attempt
// starts from: captured output is sent again ahead of new output, captured
// input is processed before the gate is read.
func (t *task) restoreChannels(ctx context.Context, st *checkpoint.SubtaskState) error {
	var replay []replayBatch
	var resend []resendBatch
	defer func() { t.replayRest, t.resendRest = nil, nil }()
	s := t.ckpt.storage
	for _, c := range st.Channels {
		var batches [][]byte
		if c.Range != nil {
			// Overtaken data left in the data stream.
			if t.ckpt.js == nil {
				return fmt.Errorf("subtask %s: checkpoint %d refers to %s in stream %s, and the worker has no JetStream to read it", t.label, t.ckpt.restore.ID, c.Range.Subject, c.Range.Stream)
			}
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			b, err := transport.ReadRange(rctx, t.ckpt.js, *c.Range)
			cancel()
			if err != nil {
				return fmt.Errorf("subtask %s: checkpoint %d is unusable: %w", t.label, t.ckpt.restore.ID, err)
			}
			batches = b
		}
		if c.File.Path != "" {
			r, err := s.Open(t.ckpt.restore.ID, c.File)
			if err != nil {
				return err
			}
			b, err := decodeChannel(r, c.File.Path)
			r.Close()
			if err != nil {
				return err
			}
			batches = append(batches, b...)
		}
		if !c.Input {
			out, idx := t.outChannel(c.Edge, c.Peer)
			if out == nil {
				return fmt.Errorf("subtask %s: channel state of edge %d names subtask %d, which this job does not have", t.label, c.Edge, c.Peer)
			}
			for _, b := range batches {
				resend = append(resend, resendBatch{out: out, ch: idx, data: b})
			}
			continue
		}
		for _, b := range batches {
			replay = append(replay, replayBatch{edge: c.Edge, peer: c.Peer, data: b})
		}
	}
	// Captured output goes out again first. The sends take checkpoints
	// while they wait for room, as any send does (a job that fails before
	// it could resend a large channel state would otherwise never checkpoint
	// again): such a checkpoint holds what was not resent yet as its output
	// channel state, after what its barrier overtook.
	for i, b := range resend {
		t.resendRest = resend[i+1:]
		if err := t.sendMsg(ctx, b.out, b.ch, transport.Message{Kind: transport.KindData, Data: b.data}); err != nil {
			return err
		}
	}
	t.resendRest = nil
	// Captured input goes through the chain after the captured output went
	// out. A checkpoint taken while a send of the replay blocks (unaligned)
	// holds the batches not replayed yet as its input channel state: they
	// are in no other part of it, and a restore from it replays them.
	for i, b := range replay {
		t.replayRest = replay[i+1:]
		if err := t.deliver(ctx, 0, b.data); err != nil {
			return err
		}
	}
	t.replayRest = nil
	return t.flush(ctx)
}

// replayState returns the restored input not replayed yet, as channel state
// by channel, in replay order.
func (t *task) replayState() []capturedChannel {
	var out []capturedChannel
	for _, b := range t.replayRest {
		if n := len(out); n == 0 || out[n-1].edge != b.edge || out[n-1].peer != b.peer {
			out = append(out, capturedChannel{input: true, replay: true, edge: b.edge, peer: b.peer})
		}
		c := &out[len(out)-1]
		c.batches = append(c.batches, b.data)
		c.bytes += int64(len(b.data))
	}
	return out
}

func (t *task) outChannel(edge, peer int) (*outEdge, int) {
	for _, o := range t.outs {
		if o.edge.Index != edge {
			continue
		}
		for i, p := range o.peers {
			if p == peer {
				return o, i
			}
		}
	}
	return nil, 0
}

// operatorState returns the restored operator state of vertex, if any.
func (t *task) operatorState(vertex string) []byte {
	if t.restored == nil {
		return nil
	}
	return t.restored.Operator[vertex]
}

// oldTasks returns the savepoint's subtask states of the chain whose head is
// vertex, ordered by subtask, and the parallelism they ran with.
func (e *ckptEnv) oldTasks(vertex string) ([]*checkpoint.SubtaskState, int) {
	var chain *job.Chain
	for _, c := range e.oldGraph.Chains {
		if c.Vertices[0].ID == vertex {
			chain = c
		}
	}
	if chain == nil {
		return nil, 0
	}
	out := make([]*checkpoint.SubtaskState, chain.Parallelism)
	for i := range e.restore.Tasks {
		st := &e.restore.Tasks[i]
		if st.Task.Chain == chain.Index && st.Task.Subtask < chain.Parallelism {
			out[st.Task.Subtask] = st
		}
	}
	return out, chain.Parallelism
}

// importSavepointState fills a new subtask's store with the keyed state of
// every old subtask of the same vertex whose key groups overlap its own:
// the import keeps only the key groups the store owns (rescaling). It
// returns the bytes of savepoint files it read.
func (t *task) importSavepointState(vertex string, migrate state.Migrate) (read int64, err error) {
	env := t.ckpt
	olds, _ := env.oldTasks(vertex)
	mine := t.store.KeyGroups()
	for _, st := range olds {
		if st == nil || len(st.State) == 0 || st.KeyGroups.End < mine.Start || st.KeyGroups.Start > mine.End {
			continue
		}
		if !isCanonical(st.State) {
			// A checkpoint's native Pebble files: restore them, then move
			// this subtask's key groups over in the canonical form.
			n, err := t.importNative(st, migrate)
			read += n
			if err != nil {
				return read, err
			}
			continue
		}
		for _, f := range st.State {
			r, err := env.restoreStorage.Open(env.restore.ID, f)
			if err != nil {
				return read, err
			}
			_, err = t.store.ImportCanonicalMigrating(r, migrate)
			r.Close()
			if err != nil {
				return read, fmt.Errorf("savepoint file %s: %w", f.Path, err)
			}
			read += f.Size
		}
	}
	return read, nil
}

// isCanonical reports whether a subtask's state is a canonical export.
func isCanonical(files []checkpoint.FileHandle) bool {
	return len(files) == 1 && !files[0].Shared && filepath.Base(files[0].Path) == canonicalFile
}

// importNative imports the key groups this subtask owns from an old
// subtask's native snapshot: the Pebble files are restored into a scratch
// directory, and the owned key groups' span of them is written into SST
// files that this subtask's store ingests (state.Store.ImportStore). With
// values to migrate, the scratch directory is opened as a store of the old
// range instead and streamed through the canonical format, migrate
// converting each value.
func (t *task) importNative(old *checkpoint.SubtaskState, migrate state.Migrate) (int64, error) {
	env := t.ckpt
	start := time.Now()
	tmp := filepath.Join(env.tmpDir, fmt.Sprintf("rescale-%d-%d-%d", old.Task.Chain, old.Task.Subtask, t.subtask))
	_ = os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	if err := env.restoreStorage.Restore(env.restore, old.Task, tmp); err != nil {
		return 0, err
	}
	var read int64
	for _, f := range old.State {
		read += f.Size
	}
	if migrate == nil {
		st, err := t.store.ImportStore(tmp, old.KeyGroups)
		if err != nil {
			return read, fmt.Errorf("moving the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
		}
		env.log.Info("rescaled keyed state", "subtask", t.label, "from", old.Task.String(), logging.Checkpoint, env.restore.ID,
			"read_bytes", read, "entries", st.Entries, "timers", st.Timers, "seconds", time.Since(start).Seconds())
		return read, nil
	}
	src, err := state.Open(state.Options{Dir: tmp, MaxParallelism: t.store.MaxParallelism(), KeyGroups: old.KeyGroups})
	if err != nil {
		return read, fmt.Errorf("opening the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := src.ExportCanonical(pw, 0)
		pw.CloseWithError(err)
	}()
	_, err = t.store.ImportCanonicalMigrating(pr, migrate)
	pr.Close()
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return read, fmt.Errorf("moving the state of subtask %s of checkpoint %d: %w", old.Task, env.restore.ID, err)
	}
	return read, nil
}

// savepointOffset returns the position a new source subtask starts from:
// the old subtask's own offset when the parallelism is unchanged, else the
// old offsets redistributed.
func (t *task) savepointOffset(vertex, connectorName string) ([]byte, error) {
	olds, p := t.ckpt.oldTasks(vertex)
	if olds == nil {
		return nil, nil
	}
	offs := make([][]byte, p)
	for s, st := range olds {
		if st != nil {
			offs[s] = st.Operator[vertex]
		}
	}
	if p == t.chain.Parallelism {
		return offs[t.subtask], nil
	}
	return connector.RescaleOffsets(connectorName, offs, t.subtask, t.chain.Parallelism)
}

// migrator returns what converts the restored values of the states of head
// whose layout version the plan raised (nil when there are none): each goes
// through the module's wstream_migrate, in the subtask's instance, which it
// makes for the purpose (*inst) before any operator opens.
func (w *Worker) migrator(j *jobRun, mod *host.Module, t *task, head *job.Vertex, inst **host.Instance) (state.Migrate, error) {
	versions := map[string]int{}
	for _, m := range j.ckpt.migrations {
		if m.Vertex == head.ID {
			versions[m.State] = m.From
		}
	}
	if len(versions) == 0 {
		return nil, nil
	}
	var names []string
	for s := range versions {
		names = append(names, s)
	}
	sort.Strings(names)
	if head.Kind != job.KindOperator || strings.HasPrefix(head.Operator, builtin.Prefix) || mod == nil {
		return nil, fmt.Errorf("the plan raises the layout version of state %s of vertex %s, whose operator is not the module's: nothing can migrate it", strings.Join(names, ", "), head.ID)
	}
	if !mod.CanMigrate() {
		return nil, fmt.Errorf("the plan raises the layout version of state %s of vertex %s, and module %s does not export wstream_migrate to convert its values", strings.Join(names, ", "), head.ID, mod.Name())
	}
	if *inst == nil {
		in, err := w.instance(j, mod, t.label)
		if err != nil {
			return nil, err
		}
		*inst = in
		t.closers = append(t.closers, func() error { return in.Close(context.Background()) })
	}
	in := *inst
	vertex := []byte(head.ID)
	return func(rec *state.CanonicalRecord) ([]byte, error) {
		if !bytes.Equal(rec.Vertex, vertex) {
			return rec.Value, nil
		}
		from, ok := versions[string(rec.State)]
		if !ok {
			return rec.Value, nil
		}
		v, err := in.Migrate(head.Operator, string(rec.State), from, rec.Key, rec.Namespace, rec.Value)
		if err != nil {
			return nil, fmt.Errorf("migrating state %q from layout version %d: %w", rec.State, from, err)
		}
		return v, nil
	}, nil
}
