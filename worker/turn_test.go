package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/fairshare"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// amplifyOp emits every input record times times, with the copy's number
// in its value, record by record or as one batch.
type amplifyOp struct {
	times int
	batch bool
	b     abi.Builder
}

func (o *amplifyOp) Open(operator.Spec, operator.Services) error { return nil }
func (o *amplifyOp) Process(batch []byte, out operator.Collector) error {
	recs, err := abi.Decode(batch)
	if err != nil {
		return err
	}
	o.b.Reset()
	for _, r := range recs {
		for i := range o.times {
			v := fmt.Appendf(nil, "%s/%d", r.Value, i)
			if !o.batch {
				if err := out.Emit(0, r.Timestamp, r.Key, v); err != nil {
					return err
				}
				continue
			}
			o.b.Add(0, r.Timestamp, r.Key, v)
		}
	}
	if o.batch {
		return out.EmitBatch(o.b.Bytes())
	}
	return nil
}
func (o *amplifyOp) OnTimers([]byte, operator.Collector) error  { return nil }
func (o *amplifyOp) PreBarrier(int64, operator.Collector) error { return nil }
func (o *amplifyOp) CheckpointComplete(int64) error             { return nil }
func (o *amplifyOp) CheckpointAborted(int64) error              { return nil }
func (o *amplifyOp) Close(operator.Collector) error             { return nil }

// turnSink counts the records it is given and, at every write, whether
// its tenant held a slot of the gate.
type turnSink struct {
	g         *fairshare.Gate
	tenant    string
	mu        sync.Mutex
	values    map[string]int
	writes    int
	unheld    int
	maxHeld   int
	closed    bool
	batchErrs int
}

func (s *turnSink) Open(context.Context, int, int) error { return nil }
func (s *turnSink) Write(batch []byte) error {
	running := fairTenant(s.g, s.tenant).Running
	recs, err := abi.Decode(batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.batchErrs++
	}
	s.writes++
	if running == 0 {
		s.unheld++
	}
	s.maxHeld = max(s.maxHeld, running)
	for _, r := range recs {
		s.values[string(r.Value)]++
	}
	return nil
}
func (s *turnSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// A tenant's subtasks hold its slot of the gate while they work, the host
// work around guest calls included: the sink's writes, with no guest call
// at all, run holding it. With one slot for the tenant, an amplifying
// subtask whose output fills the channel to its consumer must give the slot
// back while it waits for room: the consumer needs it to make room, and
// holding it would deadlock. Every record arrives exactly once.
func TestFairTurnHoldsSlotAndYieldsOnFullChannel(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) {
			const (
				inputs = 40
				perIn  = 20
				times  = 50 // 40,000 records of ~20 bytes: many flushes
			)
			g := fairshare.New(fairshare.Config{Slots: 1})
			ctx, cancel := context.WithTimeout(context.Background(), hostileDeadline)
			defer cancel()
			in := transport.NewLocalChannel(inputs + 1)
			mid := transport.NewLocalChannel(1)

			prod := &task{label: "amp/0", now: time.Now, wm: abi.MinWatermark,
				gate: transport.NewInputGate([]transport.InputChannel{in}), turn: newFairTurn(ctx, g, "x")}
			fo := NewFairOperator(ctx, g, "x", 1, &amplifyOp{times: times, batch: batch})
			fo.turn = prod.turn
			prod.stages = []*stage{{vertex: &job.Vertex{ID: "amp"}, op: fo, state: noKeyedState{},
				coll: stageCollector{nOut: 1, keep: -1, tail: prod}}}
			prod.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
				chans: []transport.OutputChannel{mid}, bufs: make([]abi.Builder, 1), maxPar: 128}}

			sink := &turnSink{g: g, tenant: "x", values: map[string]int{}}
			cons := &task{label: "sink/0", now: time.Now, wm: abi.MinWatermark,
				gate: transport.NewInputGate([]transport.InputChannel{mid}), turn: newFairTurn(ctx, g, "x"), sink: sink,
				chain: &job.Chain{Vertices: []*job.Vertex{{ID: "sink", Connector: "test"}}}}

			want := map[string]int{}
			for i := range inputs {
				var b abi.Builder
				for j := range perIn {
					v := fmt.Sprintf("%d.%d", i, j)
					b.Add(0, 0, []byte("k"), []byte(v))
					for c := range times {
						want[fmt.Sprintf("%s/%d", v, c)]++
					}
				}
				if err := in.Send(ctx, transport.Message{Kind: transport.KindData, Data: append([]byte(nil), b.Bytes()...)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := in.Send(ctx, transport.Message{Kind: transport.KindEnd}); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() { errs <- prod.run(ctx) }()
			go func() { errs <- cons.run(ctx) }()
			for range 2 {
				if err := <-errs; err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("the subtasks did not finish within %s (a slot held while waiting?): %v", hostileDeadline, err)
					}
					t.Fatal(err)
				}
			}
			fo.Leave()
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if !sink.closed || sink.batchErrs != 0 || len(sink.values) != len(want) {
				t.Fatalf("sink closed %t, %d bad batches, %d distinct records, want %d", sink.closed, sink.batchErrs, len(sink.values), len(want))
			}
			for v, n := range sink.values {
				if want[v] != n {
					t.Fatalf("record %q arrived %d times, want %d", v, n, want[v])
				}
			}
			if sink.writes < 10 || sink.unheld != 0 || sink.maxHeld != 1 {
				t.Fatalf("%d sink writes, %d of them without the tenant's slot, at most %d slots held; want many, none, 1",
					sink.writes, sink.unheld, sink.maxHeld)
			}
			if ts := fairTenant(g, "x"); ts.Running != 0 || ts.Waiting != 0 {
				t.Fatalf("after the subtasks ended the tenant holds %d slots and waits for %d", ts.Running, ts.Waiting)
			}
		})
	}
}

// A turn is taken only while the subtask's loop runs: guest calls before it
// (opening, restoring) and after it take a slot each and give it back.
func TestFairTurnOutsideTheLoop(t *testing.T) {
	g := fairshare.New(fairshare.Config{Slots: 1})
	ctx := context.Background()
	turn := newFairTurn(ctx, g, "x")
	probe := &fairProbeOp{g: g, tenant: "x"}
	fo := NewFairOperator(ctx, g, "x", 1, probe)
	defer fo.Leave()
	fo.turn = turn
	if err := fo.Open(operator.Spec{}, nil); err != nil {
		t.Fatal(err)
	}
	if ts := fairTenant(g, "x"); ts.Running != 0 {
		t.Fatalf("after Open outside the loop the tenant holds %d slots", ts.Running)
	}
	turn.start()
	if err := fo.Process(nil, nil); err != nil {
		t.Fatal(err)
	}
	if ts := fairTenant(g, "x"); ts.Running != 1 {
		t.Fatalf("within a turn the slot went back after the call: %d held", ts.Running)
	}
	// A second call in the same turn does not wait for the slot it holds.
	if err := fo.Process(nil, nil); err != nil {
		t.Fatal(err)
	}
	turn.yield()
	if ts := fairTenant(g, "x"); ts.Running != 0 || ts.Calls != 2 {
		t.Fatalf("after yield: %d held, %d grants; want 0 and 2 (Open, then one for the turn)", ts.Running, ts.Calls)
	}
	turn.stop()
	if err := fo.Close(nil); err != nil {
		t.Fatal(err)
	}
	if ts := fairTenant(g, "x"); ts.Running != 0 {
		t.Fatalf("after the loop the tenant holds %d slots", ts.Running)
	}
}

// A tenant's state in the host's memory is bounded by the store's memory
// bound (the worker derives it from the tenant's memory quota): a guest
// that writes 4 MB of distinct 16 KiB values per call
// (examples/wasm/hostile/bench-state.wat) leaves at most the bound held
// after each call, where without a bound the values pile up until the
// subtask's own flush threshold.
func TestStateMemoryBoundWithStateFlood(t *testing.T) {
	ctx := context.Background()
	m := stateFloodModule(t)
	const calls = 8 // 8 × 256 × 16 KiB: 32 MiB written
	run := func(bound int64) (maxHeld int) {
		inst, err := m.NewInstance(ctx, "op/0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = inst.Close(ctx) }()
		store, err := state.Open(state.Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, MemoryBytes: bound})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = store.Close() }()
		tk := &task{label: "op/0", now: time.Now, store: store}
		st := &stage{vertex: &job.Vertex{ID: "op", Operator: "flood"}, op: inst.Operator(), state: store.Vertex("op", true),
			coll: stageCollector{nOut: 1, keep: -1}}
		tk.stages = []*stage{st}
		svc := &stageServices{keyedState: st.state, t: tk, log: func(int32, string) {}}
		if err := st.op.Open(operator.Spec{VertexID: "op", Operator: "flood", Keyed: true, MaxParallelism: 128}, svc); err != nil {
			t.Fatal(err)
		}
		for c := range calls {
			floodCall(ctx, t, tk, c)
			maxHeld = max(maxHeld, store.HeldBytes())
		}
		return maxHeld
	}
	const bound = 4 << 20
	if held := run(0); held < 2*bound {
		t.Fatalf("without a bound the store held %d bytes at most: the flood does not test the bound", held)
	}
	// The cache holds up to the bound (half changed, half clean), plus
	// one value and one batch chunk of slack.
	if held := run(bound); held > bound+(16<<10)+(1<<20) {
		t.Fatalf("with a bound of %d bytes the store held %d", bound, held)
	}
}

// stateFloodModule compiles examples/wasm/hostile/bench-state.wat, which
// writes 4 MB of distinct 16 KiB values per call, in a runtime of its own.
func stateFloodModule(t *testing.T) *host.Module {
	t.Helper()
	wat, err := os.ReadFile(filepath.Join("..", "examples", "wasm", "hostile", "bench-state.wat"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	m, err := rt.Compile(ctx, "bench-state.wasm", testmod.WAT(t, string(wat)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// floodCall hands bench-state's operator in tk the batch of call c, 256
// records, and writes the state changes as the subtask's loop does.
func floodCall(ctx context.Context, t *testing.T, tk *task, c int) {
	t.Helper()
	var b abi.Builder
	for i := range 256 {
		// Value n goes to namespace n mod 128 (the guest's choice); the
		// key varies with n / 128 too, so that the 2,048 values of eight
		// calls are distinct entries.
		n := c*256 + i
		b.Add(0, 0, fmt.Appendf(nil, "key%d", (37*n+n/128)%64), []byte("w"))
	}
	if err := tk.deliver(ctx, 0, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := tk.flushState(); err != nil {
		t.Fatal(err)
	}
}

// Checkpoints go on while a tenant's subtasks take turns on its one slot:
// a source whose amplified output keeps its channel full takes unaligned
// checkpoints while its send is blocked, the consumer snapshots at each
// barrier, and neither starves the other of the slot. Every triggered
// checkpoint is acknowledged by both, the final one completes the job, and
// every record reaches the sink exactly once.
func TestFairTurnCheckpointsUnderOneSlot(t *testing.T) {
	const (
		lines = 20000
		times = 20
	)
	g := fairshare.New(fairshare.Config{Slots: 1})
	ctx, cancel := context.WithTimeout(context.Background(), hostileDeadline)
	defer cancel()
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan transport.CheckpointAck, 64)
	env := &ckptEnv{storage: st, mode: checkpoint.Unaligned, tmpDir: t.TempDir(),
		publish: func(a transport.CheckpointAck) { acks <- a }}
	mid := transport.NewLocalChannel(1)

	src, err := connector.NewSource("gen", []byte(fmt.Sprintf(`{"count":%d,"keys":50,"words":2,"seed":3}`, lines)))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	prod := &task{id: checkpoint.TaskID{Chain: 0}, label: "src/0", now: time.Now, wm: abi.MinWatermark,
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "src", Kind: job.KindSource, Connector: "gen"}, {ID: "amp"}}},
		ckpt:  env, mbox: newMailbox(), prio: make(chan struct{}, 1),
		triggerTS: map[int64]int64{},
		source:    src, turn: newFairTurn(ctx, g, "x")}
	prod.mbox.prio = prod.prio
	fo := NewFairOperator(ctx, g, "x", 1, &amplifyOp{times: times, batch: true})
	defer fo.Leave()
	fo.turn = prod.turn
	prod.stages = []*stage{{vertex: &job.Vertex{ID: "amp"}, op: fo, state: noKeyedState{},
		coll: stageCollector{nOut: 1, keep: -1, tail: prod}}}
	prod.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
		chans: []transport.OutputChannel{mid}, bufs: make([]abi.Builder, 1), maxPar: 128}}

	sink := &turnSink{g: g, tenant: "x", values: map[string]int{}}
	cons := &task{id: checkpoint.TaskID{Chain: 1}, label: "sink/0", now: time.Now, wm: abi.MinWatermark,
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "sink", Kind: job.KindSink, Connector: "test"}}},
		ckpt:  env, mbox: newMailbox(), prio: make(chan struct{}, 1),
		triggerTS: map[int64]int64{},
		gate:      transport.NewInputGate([]transport.InputChannel{mid}), inputs: []inputRef{{edge: 0, peer: 0}},
		sink: sink, turn: newFairTurn(ctx, g, "x")}
	cons.mbox.prio = cons.prio
	cons.mbox.poke = cons.gate.Interrupt
	cons.gate.NotifyPriority(cons.prio)
	h, err := subtask.NewMachine(subtask.Config{Channels: 1, Mode: checkpoint.Unaligned})
	if err != nil {
		t.Fatal(err)
	}
	cons.machine = h

	errs := make(chan error, 2)
	go func() { errs <- prod.run(ctx) }()
	go func() { errs <- cons.run(ctx) }()

	// Checkpoints 1, 2, … while the job runs; each is acknowledged by both
	// subtasks before the next. A subtask that reports the end of its input
	// gets the pending trigger again, as the coordinator does (its barrier
	// may never come); once both have ended, one more checkpoint is their
	// final one.
	tasks := map[checkpoint.TaskID]*task{prod.id: prod, cons.id: cons}
	ackedBy := map[int64]map[checkpoint.TaskID]bool{}
	ended := map[checkpoint.TaskID]bool{}
	var id, final int64
	triggerTo := func(tk *task) {
		tk.mbox.put(control{action: transport.CheckpointTrigger, id: id, kind: checkpoint.KindCheckpoint, timestamp: time.Now().UnixMilli()})
	}
	next := func() {
		id++
		ackedBy[id] = map[checkpoint.TaskID]bool{}
		triggerTo(prod)
		if ended[cons.id] {
			triggerTo(cons)
		}
		if len(ended) == 2 {
			final = id
		}
	}
	next()
	for final == 0 || len(ackedBy[final]) < 2 {
		select {
		case a := <-acks:
			if a.Decline != "" {
				t.Fatalf("checkpoint %d declined: %s", a.ID, a.Decline)
			}
			if a.EndOfInput {
				ended[a.Task] = true
				if !ackedBy[id][a.Task] {
					triggerTo(tasks[a.Task])
				}
				continue
			}
			ackedBy[a.ID][a.Task] = true
			if a.ID == id && len(ackedBy[id]) == 2 && final == 0 {
				next()
			}
		case err := <-errs:
			t.Fatalf("a subtask ended before its final checkpoint: %v", err)
		case <-ctx.Done():
			t.Fatalf("stuck: checkpoint %d acknowledged by %d of 2 subtasks, %d ended (a slot held while waiting, or a starved barrier?)", id, len(ackedBy[id]), len(ended))
		}
	}
	for _, tk := range []*task{prod, cons} {
		tk.mbox.put(control{action: transport.CheckpointComplete, id: final, kind: checkpoint.KindCheckpoint})
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	prod.asyncWG.Wait()
	cons.asyncWG.Wait()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	total := 0
	for _, n := range sink.values {
		total += n
	}
	if total != lines*times || sink.unheld != 0 || final < 3 {
		t.Fatalf("the sink got %d records, want %d; %d writes without the slot; %d checkpoints",
			total, lines*times, sink.unheld, final)
	}
	t.Logf("%d checkpoints, %d sink writes", final, sink.writes)
}

// The chain's last stage checks an emitted batch whole before it routes any
// of it: a malformed batch or a port beyond the stage's outputs routes
// nothing, and a good batch is routed record by record into batches of
// about flushBytes.
func TestTailCollectorChecksBeforeRouting(t *testing.T) {
	tk := &task{}
	tk.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionRebalance}, peers: []int{0, 1},
		chans: make([]transport.OutputChannel, 2), bufs: make([]abi.Builder, 2), maxPar: 128}}
	c := &stageCollector{nOut: 1, keep: -1, tail: tk}
	var good, badPort abi.Builder
	for i := range 3000 {
		good.Add(0, int64(i), []byte("k"), fmt.Appendf(nil, "value %05d ..........", i))
		badPort.Add(uint32(i/2999), 0, nil, nil) // the last record's port is 1
	}
	malformed := append([]byte(nil), good.Bytes()...)
	malformed = malformed[:len(malformed)-3]
	if err := c.EmitBatch(malformed); !errors.Is(err, operator.ErrBadArgument) {
		t.Fatalf("malformed batch: %v, want ErrBadArgument", err)
	}
	if err := c.EmitBatch(badPort.Bytes()); !errors.Is(err, operator.ErrBadOutput) {
		t.Fatalf("a port beyond the outputs: %v, want ErrBadOutput", err)
	}
	o := tk.outs[0]
	if c.routed != 0 || o.bufs[0].Len()+o.bufs[1].Len() != 0 || o.hasReady(0) || o.hasReady(1) {
		t.Fatalf("refused batches routed %d records", c.routed)
	}
	if err := c.EmitBatch(good.Bytes()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range 2 {
		batches := o.ready[i]
		if o.bufs[i].Len() > 0 {
			batches = append(batches, o.bufs[i].Bytes())
		}
		for _, b := range batches {
			if len(b) > flushBytes+64 {
				t.Fatalf("a batch of %d bytes, want about %d at most", len(b), flushBytes)
			}
			recs, err := abi.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if want := fmt.Sprintf("value %05d ..........", r.Timestamp); string(r.Value) != want || int(r.Timestamp)%2 != i {
					t.Fatalf("channel %d got %q (ts %d)", i, r.Value, r.Timestamp)
				}
				n++
			}
		}
	}
	if n != 3000 || c.routed != 3000 || len(o.ready[0]) == 0 {
		t.Fatalf("routed %d records (counted %d), %d ready batches on channel 0; want 3000 in several batches", n, c.routed, len(o.ready[0]))
	}
}

// A tenant's keyed store gets the tenant's quotas: its memory bound, its
// size bound on disk, and compactions admitted to the tenant's slot (a
// compaction asked for while the subtask holds the slot waits until the
// slot is given back). A job without a tenant gets none of them.
func TestStateOptionsFollowTenantQuotas(t *testing.T) {
	g := fairshare.New(fairshare.Config{Slots: 1})
	w := &Worker{cfg: Config{Gate: g}}
	groups := abi.KeyGroupRange{Start: 0, End: 127}
	plan := &job.Plan{MaxParallelism: 128}

	o := w.stateOptions(&jobRun{plan: plan}, t.TempDir(), groups)
	if o.MemoryBytes != 0 || o.MaxBytes != 0 || o.Admit != nil {
		t.Fatalf("a job without a tenant got memory bound %d, disk bound %d, admission %v", o.MemoryBytes, o.MaxBytes, o.Admit != nil)
	}

	j := &jobRun{plan: plan, tenant: "acme", memPages: 256, stateBytes: 1 << 30}
	o = w.stateOptions(j, t.TempDir(), groups)
	if o.MemoryBytes != 16<<20 || o.MaxBytes != 1<<30 || o.Admit == nil {
		t.Fatalf("tenant acme's job got memory bound %d (want %d), disk bound %d (want %d), admission %v",
			o.MemoryBytes, 16<<20, o.MaxBytes, 1<<30, o.Admit != nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hold, err := g.Acquire(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		release, err := o.Admit(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if st, _ := g.Tenant("acme"); st.Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the compaction did not queue for acme's slot within a minute")
		}
	}
	select {
	case <-got:
		t.Fatal("admitted while acme's subtask holds its only slot")
	default:
	}
	hold()
	release := <-got
	if st, _ := g.Tenant("acme"); st.Running != 1 {
		t.Fatalf("acme runs %d calls while its compaction is admitted, want 1", st.Running)
	}
	release()
}

// A tenant's subtask pays for its state writes between turns: before each
// turn it waits, holding no slot, until the tenant's write rate has caught
// up with what its store committed, so at the start of every turn the
// bytes committed are at most the rate's burst plus the rate times the
// time since the first. A cancelled job's wait ends at once.
func TestFairTurnPacesStateWrites(t *testing.T) {
	bg := context.Background()
	inst, err := stateFloodModule(t).NewInstance(bg, "op/0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inst.Close(bg) }()
	store, err := state.Open(state.Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, MemoryBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	g := fairshare.New(fairshare.Config{Slots: 1})
	const rate = 8 << 20 // bytes/s, and the burst
	r := fairshare.NewRate(rate, rate, nil)
	tk := &task{label: "op/0", now: time.Now, store: store, turn: newFairTurn(ctx, g, "x")}
	tk.turn.pace(r, store.Committed)
	st := &stage{vertex: &job.Vertex{ID: "op", Operator: "flood"}, op: NewFairOperator(ctx, g, "x", 1, inst.Operator()),
		state: store.Vertex("op", true), coll: stageCollector{nOut: 1, keep: -1}}
	st.op.(*FairOperator).turn = tk.turn
	tk.stages = []*stage{st}
	svc := &stageServices{keyedState: st.state, t: tk, log: func(int32, string) {}}
	if err := st.op.Open(operator.Spec{VertexID: "op", Operator: "flood", Keyed: true, MaxParallelism: 128}, svc); err != nil {
		t.Fatal(err)
	}
	tk.turn.start()
	start := time.Now()
	const calls = 8 // 8 × 256 × 16 KiB: 32 MiB written
	for c := range calls {
		committed := store.Committed()
		if err := tk.turn.hold("its input"); err != nil {
			t.Fatal(err)
		}
		if most := rate + time.Since(start).Seconds()*rate; float64(committed) > most {
			t.Fatalf("turn %d began with %d bytes committed %s after the first, over the rate's %.0f", c, committed, time.Since(start), most)
		}
		floodCall(ctx, t, tk, c)
		tk.turn.yield()
	}
	if store.Committed() < 3*rate {
		t.Fatalf("the flood committed %d bytes: too few to test a rate of %d bytes/s", store.Committed(), rate)
	}
	// No check that the subtask waited: on a machine slow enough, the
	// calls alone take as long as the rate asks. The wait below must.
	t.Logf("%d bytes committed in %s, %s of it waiting", store.Committed(), time.Since(start), tk.turn.pacedFor())
	if st, _ := g.Tenant("x"); st.Running != 0 {
		t.Fatalf("%d slots held between turns", st.Running)
	}

	// The last turn's writes are not paid for yet: at a rate this slow,
	// the next turn would wait for hours. Cancelling the job ends the
	// wait with the job's error.
	r.Set(1<<10, 0)
	done := make(chan error, 1)
	go func() { done <- tk.turn.hold("its input") }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "state write rate") {
			t.Fatalf("a cancelled wait under the rate returned %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("cancelling did not end the wait under the rate within a minute")
	}
}
