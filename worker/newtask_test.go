package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// keyedPlan is gen → op (key-partitioned, so op keeps keyed state) → out,
// op's operator being operator and its parallelism opPar.
func keyedPlan(t *testing.T, operator string, opPar int) (*job.Plan, *job.Graph) {
	t.Helper()
	plan, err := job.Parse([]byte(fmt.Sprintf(`{"name":"build","parallelism":1,"maxParallelism":16,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":10,"keys":5}},
 {"id":"op","kind":"operator","operator":%q,"parallelism":%d},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"op","partition":"key"},{"from":"op","to":"out","partition":"rebalance"}]}`, operator, opPar)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := job.Build(plan)
	if err != nil {
		t.Fatal(err)
	}
	return plan, g
}

// buildWorker is a worker that builds subtasks in dataDir, without a
// cluster.
func buildWorker(t *testing.T, dataDir string) *Worker {
	t.Helper()
	w := &Worker{cfg: Config{ID: "w", DataDir: dataDir, Stdout: io.Discard, ChannelCapacity: 8}, log: logging.Discard(),
		cache: pebble.NewCache(1 << 20), modules: map[moduleKey]*host.Module{}, jobs: map[string]*jobRun{}}
	t.Cleanup(w.cache.Unref)
	return w
}

func buildJob(t *testing.T, plan *job.Plan, g *job.Graph) *jobRun {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &jobRun{id: "build", plan: plan, graph: g, ctx: ctx, cancel: cancel}
}

// freshChannels gives every channel asked for a new local channel.
func freshChannels() channels {
	return channels{
		in: func(*job.ChainEdge, int, int) (transport.InputChannel, error) {
			return transport.NewLocalChannel(8), nil
		},
		out: func(*job.ChainEdge, int, int) (transport.OutputChannel, error) {
			return transport.NewLocalChannel(8), nil
		},
	}
}

func chainOf(t *testing.T, g *job.Graph, head string) *job.Chain {
	t.Helper()
	for _, c := range g.Chains {
		if c.Vertices[0].ID == head {
			return c
		}
	}
	t.Fatalf("no chain starts at %s", head)
	return nil
}

// TestOpenTask: the open step connects the subtask's channels and opens
// its keyed store, or fails saying which subtask and where.
func TestOpenTask(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		dataDir string // "" a fresh directory
		head    string
		ckpt    func(*testing.T) *ckptEnv
		chans   func() channels
		err     []string // the error says all of these
	}{
		{name: "keyed chain", head: "op"},
		{name: "unkeyed source chain", head: "src"},
		{name: "checkpointed", head: "op", ckpt: func(*testing.T) *ckptEnv { return &ckptEnv{mode: checkpoint.Unaligned} }},
		{name: "store dir under a file", dataDir: notDir, head: "op", err: []string{"subtask op/1", "state", notDir}},
		{name: "checkpoint without the subtask", head: "op", ckpt: func(t *testing.T) *ckptEnv {
			return &ckptEnv{mode: checkpoint.ExactlyOnce, restore: &checkpoint.Metadata{ID: 7, Tasks: []checkpoint.SubtaskState{{Task: checkpoint.TaskID{Chain: 9}}}}}
		}, err: []string{"subtask op/1", "checkpoint 7 holds no state for it"}},
		{name: "input channel refused", head: "op", chans: func() channels {
			cs := freshChannels()
			cs.in = func(e *job.ChainEdge, up, down int) (transport.InputChannel, error) {
				return nil, fmt.Errorf("no channel from %d on edge %d", up, e.Index)
			}
			return cs
		}, err: []string{"no channel from 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, g := keyedPlan(t, "go:count", 2)
			dataDir := c.dataDir
			if dataDir == "" {
				dataDir = t.TempDir()
			}
			w := buildWorker(t, dataDir)
			j := buildJob(t, plan, g)
			if c.ckpt != nil {
				j.ckpt = c.ckpt(t)
			}
			chans := freshChannels()
			if c.chans != nil {
				chans = c.chans()
			}
			chain := chainOf(t, g, c.head)
			sub := chain.Parallelism - 1
			b := w.newTaskBuild(j, nil, chain, sub)
			err := w.openTask(b, chans)
			defer b.t.close()
			if len(c.err) > 0 {
				if err == nil {
					t.Fatal("opened, want an error")
				}
				for _, s := range c.err {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := b.t.gate != nil, len(chain.Inputs) > 0; got != want {
				t.Fatalf("input gate made: %v, want %v", got, want)
			}
			if b.t.gate != nil && b.t.gate.Len() != 1 {
				t.Fatalf("gate of %d channels, want 1 (one source subtask)", b.t.gate.Len())
			}
			if b.t.machine != nil {
				t.Fatal("subtask machine made before the dead letters are wired")
			}
			if got, want := b.t.prio != nil, j.ckpt != nil && j.ckpt.mode == checkpoint.Unaligned; got != want {
				t.Fatalf("priority channel made: %v, want %v", got, want)
			}
			if len(b.t.outs) != len(chain.Outputs) {
				t.Fatalf("%d output edges, want %d", len(b.t.outs), len(chain.Outputs))
			}
			keyed := c.head == "op"
			if (b.store != nil) != keyed || b.t.store != b.store {
				t.Fatalf("store %v (task's %v), want one: %v", b.store, b.t.store, keyed)
			}
			if keyed {
				if got, want := b.store.KeyGroups(), abi.RangeForSubtask(sub, chain.Parallelism, plan.MaxParallelism); got != want {
					t.Fatalf("store serves key groups %v, want %v", got, want)
				}
			}
		})
	}
}

// savepointFixture stores savepoint 3 of keyedPlan with op at parallelism
// oldPar: old subtask s of op holds value "v-KEY" of state "n" for the keys
// of its key groups, as a canonical export or (native) as Pebble files;
// the source's subtask holds offset "at-7", or has finished. It returns the
// restore environment of a new attempt and the keys stored.
func savepointFixture(t *testing.T, oldPar int, native, finished bool) (*ckptEnv, []string) {
	t.Helper()
	_, oldG := keyedPlan(t, "go:count", oldPar)
	const maxPar, id = 16, 3
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "savepoints"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	src, op := chainOf(t, oldG, "src"), chainOf(t, oldG, "op")
	srcID := checkpoint.TaskID{Chain: src.Index}
	m := &checkpoint.Metadata{JobID: "build", ID: id, Kind: checkpoint.KindSavepoint, MaxParallelism: maxPar,
		Tasks: []checkpoint.SubtaskState{{Task: srcID, Finished: finished, Operator: map[string][]byte{"src": []byte("at-7")}}}}
	for s := 0; s < oldPar; s++ {
		tid := checkpoint.TaskID{Chain: op.Index, Subtask: s}
		groups := abi.RangeForSubtask(s, oldPar, maxPar)
		store, err := state.Open(state.Options{Dir: filepath.Join(t.TempDir(), "old"), MaxParallelism: maxPar, KeyGroups: groups})
		if err != nil {
			t.Fatal(err)
		}
		v := store.Vertex("op", true)
		h, err := v.RegisterState("n", abi.StateValue)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if groups.Contains(abi.KeyGroup([]byte(k), maxPar)) {
				if err := v.StatePut(h, []byte(k), nil, []byte("v-"+k)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := store.Flush(); err != nil {
			t.Fatal(err)
		}
		base := st.TaskDir(id, tid)
		var files []checkpoint.FileHandle
		if native {
			snap := filepath.Join(t.TempDir(), "snap")
			if err := store.Checkpoint(snap); err != nil {
				t.Fatal(err)
			}
			files, err = st.CopyDir(id, base+"/state", snap)
		} else {
			var fh checkpoint.FileHandle
			fh, err = st.WriteFrom(id, base+"/state/"+canonicalFile, func(w io.Writer) error {
				_, err := store.ExportCanonical(w, 0)
				return err
			})
			files = []checkpoint.FileHandle{fh}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		m.Tasks = append(m.Tasks, checkpoint.SubtaskState{Task: tid, KeyGroups: groups, State: files})
	}
	if err := st.WriteMetadata(m); err != nil {
		t.Fatal(err)
	}
	return &ckptEnv{mode: checkpoint.ExactlyOnce, restore: m, restoreStorage: st, fromSavepoint: true, oldGraph: oldG, tmpDir: t.TempDir(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, keys
}

// TestRestoreTask: the restore step fills the new subtask's store with the
// savepoint's keys of its key groups, whatever the old parallelism and
// form, and places its source where the old one stopped.
func TestRestoreTask(t *testing.T) {
	for _, c := range []struct {
		name           string
		oldPar, newPar int
		native         bool
	}{
		{name: "canonical savepoint", oldPar: 2, newPar: 2},
		{name: "native savepoint", oldPar: 2, newPar: 2, native: true},
		{name: "canonical, key groups rescaled 2 to 3", oldPar: 2, newPar: 3},
		{name: "native, key groups rescaled 3 to 2", oldPar: 3, newPar: 2, native: true},
		{name: "native, key groups rescaled 1 to 4", oldPar: 1, newPar: 4, native: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, keys := savepointFixture(t, c.oldPar, c.native, false)
			plan, g := keyedPlan(t, "go:count", c.newPar)
			w := buildWorker(t, t.TempDir())
			j := buildJob(t, plan, g)
			j.ckpt = env
			chain := chainOf(t, g, "op")
			for sub := 0; sub < c.newPar; sub++ {
				b := w.newTaskBuild(j, nil, chain, sub)
				err := w.openTask(b, freshChannels())
				if err == nil {
					err = w.restoreTask(b)
				}
				if err != nil {
					b.t.close()
					t.Fatalf("subtask %d: %v", sub, err)
				}
				mine := b.store.KeyGroups()
				v := b.store.Vertex("op", true)
				h, err := v.RegisterState("n", abi.StateValue)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, k := range keys {
					if !mine.Contains(abi.KeyGroup([]byte(k), plan.MaxParallelism)) {
						continue
					}
					n++
					got, err := v.StateGet(h, []byte(k), nil, nil)
					if err != nil || string(got) != "v-"+k {
						t.Fatalf("subtask %d: %s = %q, %v; want %q", sub, k, got, err, "v-"+k)
					}
				}
				if n == 0 {
					t.Fatalf("subtask %d owns none of the keys: the test proves nothing", sub)
				}
				if err := b.t.close(); err != nil {
					t.Fatal(err)
				}
			}
			if n := w.restoreRead.Load(); n <= 0 {
				t.Fatalf("restore read %d bytes of savepoint files", n)
			}
		})
	}
	for _, finished := range []bool{false, true} {
		t.Run(fmt.Sprintf("source finished %v", finished), func(t *testing.T) {
			env, _ := savepointFixture(t, 1, false, finished)
			plan, g := keyedPlan(t, "go:count", 1)
			w := buildWorker(t, t.TempDir())
			j := buildJob(t, plan, g)
			j.ckpt = env
			b := w.newTaskBuild(j, nil, chainOf(t, g, "src"), 0)
			defer b.t.close()
			if err := w.openTask(b, freshChannels()); err != nil {
				t.Fatal(err)
			}
			if err := w.restoreTask(b); err != nil {
				t.Fatal(err)
			}
			if finished {
				if b.t.restored == nil || !b.t.restored.Finished || b.t.sourceOffset != nil {
					t.Fatalf("restored %+v at %q, want a finished source", b.t.restored, b.t.sourceOffset)
				}
				return
			}
			if b.t.restored != nil || string(b.t.sourceOffset) != "at-7" {
				t.Fatalf("restored %+v at %q, want the old offset at-7", b.t.restored, b.t.sourceOffset)
			}
		})
	}
}

// TestWireTask: the wire step makes a stage per operator, the guest's in
// one instance of the subtask, wrapped for its tenant's fair share, and a
// dead-letter sink for a chain that runs guest code when the job asks for
// one; then a failed call's output stays in the last stage's collector. A
// tenant's job may not write dead letters to the host's files.
func TestWireTask(t *testing.T) {
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{CallTimeout: time.Minute, Log: func(int32, string, int, string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	mod, err := rt.Compile(ctx, "init.wasm", testmod.WAT(t, initLogWAT))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	for _, c := range []struct {
		name        string
		operator    string
		deadLetters string // --on-guest-error, "" none
		tenant      string
		err         string // the wire step fails saying it
	}{
		{name: "builtin", operator: "go:count"},
		{name: "builtin, dead letters asked", operator: "go:count", deadLetters: "dead-letter"},
		{name: "guest", operator: "id"},
		{name: "guest with dead letters", operator: "id", deadLetters: "dead-letter"},
		{name: "guest of a tenant", operator: "id", tenant: "a"},
		{name: "guest of a tenant with dead letters", operator: "id", deadLetters: "dead-letter", tenant: "a", err: "dead-letter sink"},
		{name: "builtin of a tenant", operator: "go:count", tenant: "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, g := keyedPlan(t, c.operator, 1)
			if c.deadLetters != "" {
				plan.OnGuestError, err = job.ParseOnGuestError(c.deadLetters)
				if err != nil {
					t.Fatal(err)
				}
			}
			w := buildWorker(t, t.TempDir())
			w.cfg.Gate = fairshare.New(fairshare.Config{Slots: 1})
			j := buildJob(t, plan, g)
			j.tenant = c.tenant
			chain := chainOf(t, g, "op")
			b := w.newTaskBuild(j, mod, chain, 0)
			defer b.t.close()
			if err := w.openTask(b, freshChannels()); err != nil {
				t.Fatal(err)
			}
			err := w.wireTask(b)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("wired: %v, want an error saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			guest := !strings.HasPrefix(c.operator, "go:")
			if len(b.t.stages) != 1 {
				t.Fatalf("%d stages, want 1", len(b.t.stages))
			}
			s := b.t.stages[0]
			if s.guest != guest || (b.t.inst != nil) != guest || (b.t.newInstance != nil) != guest {
				t.Fatalf("stage guest %v, instance %v, renewable %v; want all %v", s.guest, b.t.inst != nil, b.t.newInstance != nil, guest)
			}
			if !s.keyed || b.t.store == nil {
				t.Fatal("the keyed head's stage has no keyed state")
			}
			_, fair := s.op.(*FairOperator)
			if want := guest && c.tenant != ""; fair != want {
				t.Fatalf("operator %T wrapped for fair share: %v, want %v", s.op, fair, want)
			}
			if fair && s.op.(*FairOperator).turn != b.t.turn {
				t.Fatal("the fair operator does not take the subtask's turn")
			}
			if (b.t.turn != nil) != (c.tenant != "") {
				t.Fatalf("subtask has a fair turn: %v, want %v", b.t.turn != nil, c.tenant != "")
			}
			dl := c.deadLetters != "" && guest
			if (b.t.dl != nil) != dl {
				t.Fatalf("dead letters %v, want %v", b.t.dl != nil, dl)
			}
			if tail := s.coll.tail == b.t; tail == dl {
				t.Fatalf("the last stage's output routed as emitted: %v, with dead letters %v", tail, dl)
			}
			// The machine guards guest calls with dead letters only.
			if b.t.machine == nil {
				t.Fatal("no subtask machine after wiring")
			}
			if err := b.t.machine.Call(0, 1); (err == nil) != dl {
				t.Fatalf("a guarded call: %v, want one with dead letters %v", err, dl)
			}
		})
	}
	t.Run("source and sink", func(t *testing.T) {
		plan, g := keyedPlan(t, "go:count", 1)
		w := buildWorker(t, t.TempDir())
		j := buildJob(t, plan, g)
		for _, head := range []string{"src", "out"} {
			b := w.newTaskBuild(j, mod, chainOf(t, g, head), 0)
			if err := w.openTask(b, freshChannels()); err != nil {
				t.Fatal(err)
			}
			if err := w.wireTask(b); err != nil {
				t.Fatal(err)
			}
			if (b.t.source != nil) != (head == "src") || (b.t.sink != nil) != (head == "out") || len(b.t.stages) != 0 {
				t.Fatalf("chain %s: source %v, sink %v, %d stages", head, b.t.source != nil, b.t.sink != nil, len(b.t.stages))
			}
			if err := b.t.close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("unknown builtin", func(t *testing.T) {
		plan, g := keyedPlan(t, "go:nosuch", 1)
		w := buildWorker(t, t.TempDir())
		b := w.newTaskBuild(buildJob(t, plan, g), mod, chainOf(t, g, "op"), 0)
		defer b.t.close()
		if err := w.openTask(b, freshChannels()); err != nil {
			t.Fatal(err)
		}
		if err := w.wireTask(b); err == nil || !strings.Contains(err.Error(), "vertex op") {
			t.Fatalf("wiring an unknown builtin: %v, want an error naming vertex op", err)
		}
	})
}
