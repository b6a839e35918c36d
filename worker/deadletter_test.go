package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// poisoned is testops' poison hash: FNV-1a 64 of salt then value.
func poisoned(salt string, v []byte, every uint64) bool {
	h := uint64(14695981039346656037)
	for _, c := range []byte(salt) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for _, c := range v {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h%every == 0
}

// poisonRig is a one-stage keyed subtask running testops' poison in
// dead-letter mode, with the real host, state store and a file sink of
// dead letters, fed by a local channel.
type poisonRig struct {
	tk   *task
	in   *transport.LocalChannel
	out  *transport.LocalChannel
	dir  string // the dead-letter file
	ctx  context.Context
	stop context.CancelFunc
}

func newPoisonRig(t *testing.T, config string, max int64) *poisonRig {
	t.Helper()
	bg := context.Background()
	m := compileTestops(t)
	g := &poisonRig{in: transport.NewLocalChannel(1 << 10), out: transport.NewLocalChannel(1 << 20), dir: filepath.Join(t.TempDir(), "dead")}
	g.ctx, g.stop = context.WithCancel(bg)
	t.Cleanup(g.stop)
	inst, err := m.NewInstance(g.ctx, "v/0")
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(state.Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, CacheEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	snk, err := connector.NewSink("file", json.RawMessage(`{"path":`+strconv.Quote(g.dir)+`}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snk.Open(g.ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	tk := &task{jobID: "j", label: "v/0", now: time.Now, store: store, gate: transport.NewInputGate([]transport.InputChannel{g.in}),
		inst: inst, newInstance: func() (*host.Instance, error) { return m.NewInstance(g.ctx, "v/0") },
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "v", Operator: "poison"}}, Parallelism: 1},
		dl:    &deadLetters{sink: snk, key: "v-dead-letters", connector: "file", max: max}, curChan: -1}
	t.Cleanup(func() { _ = tk.dropSpare(); _ = tk.inst.Close(bg) })
	st := &stage{vertex: tk.chain.Vertices[0], op: inst.Operator(), state: store.Vertex("v", true),
		coll: stageCollector{nOut: 1, keep: -1}, guest: true}
	tk.stages = []*stage{st}
	tk.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
		chans: []transport.OutputChannel{g.out}, bufs: make([]abi.Builder, 1), maxPar: 128}}
	st.spec = operator.Spec{VertexID: "v", Operator: "poison", Config: []byte(config), Keyed: true, MaxParallelism: 128, Parallel: 1}
	st.svc = &stageServices{keyedState: st.state, t: tk, log: func(int32, string) {}}
	if err := st.op.Open(st.spec, st.svc); err != nil {
		t.Fatal(err)
	}
	// As the worker does in dead-letter mode, once the stages are open.
	if err := inst.Snapshot(); err != nil {
		t.Fatal(err)
	}
	g.tk = tk
	return g
}

// run feeds batches of records (key k<i%keys>, value v<i>, timestamp i)
// and the end of input, and returns the subtask's result.
func (g *poisonRig) run(t *testing.T, records, batch, keys int) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.tk.runGate(g.ctx) }()
	var b abi.Builder
	for i := 0; i < records; i++ {
		b.Add(0, int64(i), []byte(fmt.Sprintf("k%d", i%keys)), []byte(fmt.Sprintf("v%d", i)))
		if b.Len() == batch || i == records-1 {
			if err := g.in.Send(g.ctx, transport.Message{Kind: transport.KindData, Data: append([]byte(nil), b.Bytes()...)}); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := g.in.Send(g.ctx, transport.Message{Kind: transport.KindEnd}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			err = g.tk.closeDeadLetters()
		}
		return err
	case <-time.After(hostileDeadline):
		t.Fatalf("the subtask still runs after %s", hostileDeadline)
		return nil
	}
}

// output returns the records the subtask sent: key → values in order.
func (g *poisonRig) output(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for {
		m, ok := g.out.TryRecv()
		if !ok {
			return out
		}
		if m.Kind != transport.KindData {
			continue
		}
		recs, err := abi.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out[string(r.Key)] = append(out[string(r.Key)], string(r.Value))
		}
	}
}

func readDeadLetters(t *testing.T, path string) []deadLetter {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []deadLetter
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d deadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("dead letter %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	return out
}

// TestDeadLettersIsolateBadRecords runs poison over batches holding bad
// records at hash-chosen positions, trapping, failing and failing in
// timers: the output must be the running counts of the good records only
// (state rolled back, no output of a failed call), and the dead letters
// exactly the bad records, each once, with the error, key and time. After
// the first failure the Go SDK marks commit points (every commitEvery
// records, several per batch), and a failure keeps the work before them.
func TestDeadLettersIsolateBadRecords(t *testing.T) {
	const records, batch, keys, every = 3000, 600, 7, 97
	for _, mode := range []string{"trap", "fail", "timers"} {
		t.Run(mode, func(t *testing.T) {
			cfg := fmt.Sprintf(`{"every":%d,"salt":"s","mode":%q}`, every, mode)
			if mode == "timers" {
				cfg = fmt.Sprintf(`{"every":%d,"salt":"s","timers":true}`, every)
			}
			g := newPoisonRig(t, cfg, -1)
			if err := g.run(t, records, batch, keys); err != nil {
				t.Fatalf("the subtask failed: %v", err)
			}
			good := map[string]int{}
			bad := map[string]string{} // value → key
			for i := 0; i < records; i++ {
				k, v := fmt.Sprintf("k%d", i%keys), fmt.Sprintf("v%d", i)
				if poisoned("s", []byte(v), every) {
					bad[v] = k
				} else {
					good[k]++
				}
			}
			if len(bad) == 0 || len(bad) > records/20 {
				t.Fatalf("%d bad records of %d: the hash picks a useless share", len(bad), records)
			}
			out := g.output(t)
			for k, n := range good {
				var want []string
				for i := 1; i <= n; i++ {
					want = append(want, strconv.Itoa(i))
				}
				if got := strings.Join(out[k], ","); got != strings.Join(want, ",") {
					t.Errorf("key %s: counts %s, want 1..%d", k, abbreviateList(out[k]), n)
				}
			}
			dls := readDeadLetters(t, g.dir)
			seen := map[string]int{}
			for _, d := range dls {
				v := string(d.Value)
				seen[v]++
				if bad[v] == "" {
					t.Errorf("dead letter for good record %q", v)
					continue
				}
				want := "testops poison"
				if mode != "fail" {
					want = "unreachable"
				}
				if !strings.Contains(d.Error, want) || string(d.Key) != bad[v] || d.KeyText != bad[v] || d.ValueText != v ||
					d.Vertex != "v" || d.EventTime != mustAtoi(t, v[1:]) || (mode == "timers") != (d.Call == "timer") || len(d.Input) == 0 {
					t.Errorf("dead letter of %q: %+v", v, d)
				}
			}
			for v := range bad {
				if seen[v] != 1 {
					t.Errorf("bad record %q has %d dead letters, want 1", v, seen[v])
				}
			}
			if n := g.tk.stages[0].dead.Load(); n != int64(len(bad)) {
				t.Errorf("the stage counted %d dead letters, want %d", n, len(bad))
			}
			// The Go SDK says which record it failed at: one trap per bad
			// record, none for fail. Each trap resets the instance to the
			// snapshot taken once its stage was open.
			traps := len(bad)
			if mode == "fail" {
				traps = 0
			}
			if g.tk.renewals != 0 || g.tk.resets != traps {
				t.Errorf("%d instances replaced and %d reset for %d bad records, want none and %d", g.tk.renewals, g.tk.resets, len(bad), traps)
			}
			if !g.tk.dlCommits {
				t.Error("the guest never marked a commit point")
			}
		})
	}
}

// TestDeadLetterBudget: an operator that fails every record stops at its
// budget, with an error that names the operator and the budget.
func TestDeadLetterBudget(t *testing.T) {
	g := newPoisonRig(t, `{"every":1,"mode":"fail"}`, 5)
	err := g.run(t, 100, 10, 3)
	if err == nil || !strings.Contains(err.Error(), "budget of 5") || !strings.Contains(err.Error(), `operator "poison" (vertex v`) {
		t.Fatalf("got %v, want the budget of 5 exceeded by operator poison", err)
	}
	if n := g.tk.stages[0].dead.Load(); n != 6 {
		t.Errorf("%d dead letters counted, want 6 (the budget and the one past it)", n)
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func abbreviateList(l []string) string {
	if len(l) > 12 {
		return strings.Join(l[:6], ",") + ",…," + strings.Join(l[len(l)-6:], ",")
	}
	return strings.Join(l, ",")
}

// fakeGuest fails (as a guest calling fail would) on the records whose
// value is in bad, after emitting the values before them in the batch,
// and counts its calls.
type fakeGuest struct {
	bad   map[string]bool
	calls int
	sizes []int // records per call
	// commits: the guest marks the commit points its collector asks for
	// (operator.Committer); firsts holds the first value of each call.
	commits   bool
	firsts    []string
	intervals []int // the commit interval asked for in each call
}

func (o *fakeGuest) Open(operator.Spec, operator.Services) error { return nil }
func (o *fakeGuest) Process(batch []byte, out operator.Collector) error {
	o.calls++
	recs, err := abi.Decode(batch)
	if err != nil {
		return err
	}
	o.sizes = append(o.sizes, len(recs))
	if len(recs) > 0 {
		o.firsts = append(o.firsts, string(recs[0].Value))
	}
	next := -1
	cm, _ := out.(operator.Committer)
	if cm != nil {
		o.intervals = append(o.intervals, cm.CommitInterval())
	}
	if o.commits && cm != nil && cm.CommitInterval() > 0 {
		next = cm.CommitInterval()
	}
	for i, r := range recs {
		if i == next {
			if err := cm.Commit(i); err != nil {
				return err
			}
			next += cm.CommitInterval()
		}
		if o.bad[string(r.Value)] {
			return &host.GuestError{Operator: "v", Call: abi.ExportProcess, Message: "bad " + string(r.Value), Err: host.ErrGuestFailed}
		}
		if err := out.Emit(0, r.Timestamp, r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}
func (o *fakeGuest) OnTimers([]byte, operator.Collector) error  { return nil }
func (o *fakeGuest) PreBarrier(int64, operator.Collector) error { return nil }
func (o *fakeGuest) CheckpointComplete(int64) error             { return nil }
func (o *fakeGuest) CheckpointAborted(int64) error              { return nil }
func (o *fakeGuest) Close(operator.Collector) error             { return nil }

// memSink is a dead-letter sink in memory.
type memSink struct{ values []string }

func (m *memSink) Open(context.Context, int, int) error { return nil }
func (m *memSink) Write(b []byte) error {
	recs, err := abi.Decode(b)
	for _, r := range recs {
		var d deadLetter
		if err := json.Unmarshal(r.Value, &d); err != nil {
			return err
		}
		m.values = append(m.values, string(d.Value))
	}
	return err
}
func (m *memSink) Close() error { return nil }

// TestSettleFindsEveryBadRecord settles batches with bad records at the
// ends, adjacent, everywhere and nowhere, by halves, record by record and
// from the record a guest said it failed at:
// the good records' output must come out whole and in order, each bad
// record must be dead-lettered once, and halving must stay near
// 2·log2(n) calls for one bad record.
func TestSettleFindsEveryBadRecord(t *testing.T) {
	const n = 64
	cases := map[string][]int{"first": {0}, "last": {n - 1}, "middle": {37}, "adjacent": {5, 6, 7},
		"spread": {1, 20, 21, 40, 62}, "all": nil}
	for name, badIdx := range cases {
		for _, mode := range []string{"halving", "one-by-one", "hinted"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				bad := map[string]bool{}
				if name == "all" {
					for i := range n {
						bad[fmt.Sprintf("v%d", i)] = true
					}
				}
				for _, i := range badIdx {
					bad[fmt.Sprintf("v%d", i)] = true
				}
				op := &fakeGuest{bad: bad}
				sink := &memSink{}
				tk := &task{label: "v/0", now: time.Now, curChan: -1, chain: &job.Chain{Vertices: []*job.Vertex{{ID: "v"}}},
					dl: &deadLetters{sink: sink, max: -1}}
				st := &stage{vertex: tk.chain.Vertices[0], op: op, state: noKeyedState{}, coll: stageCollector{nOut: 1, keep: -1}, guest: true}
				tk.stages = []*stage{st}
				var b abi.Builder
				for i := range n {
					b.Add(0, int64(i), []byte("k"), []byte(fmt.Sprintf("v%d", i)))
				}
				if err := tk.ensureMachine(); err != nil {
					t.Fatal(err)
				}
				// The call of the whole batch failed (not run: the test
				// says how).
				if err := tk.machine.Call(0, n); err != nil {
					t.Fatal(err)
				}
				tk.machine.Ready()
				whole := subtask.Failure{Lo: 0, Hi: n, At: -1, Trap: mode == "one-by-one", Err: "bad"}
				if mode == "hinted" {
					// The first bad record, as a guest reporting its
					// progress says (the fake reports none later).
					for i := range n {
						if bad[fmt.Sprintf("v%d", i)] {
							whole.At = i
							break
						}
					}
				}
				in := &tk.dlIn
				in.reset(b.Bytes(), false)
				tk.dlErrs = []error{&host.GuestError{Operator: "v", Message: "bad", Err: host.ErrGuestFailed}}
				if err := tk.machine.Trap(whole); err != nil {
					t.Fatal(err)
				}
				if err := tk.settle(context.Background(), 0, in); err != nil {
					t.Fatal(err)
				}
				var got, want, wantBad []string
				out, _ := abi.Decode(st.coll.b.Bytes())
				for _, r := range out {
					got = append(got, string(r.Value))
				}
				for i := range n {
					if v := fmt.Sprintf("v%d", i); bad[v] {
						wantBad = append(wantBad, v)
					} else {
						want = append(want, v)
					}
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("output %v, want %v", got, want)
				}
				if strings.Join(sink.values, ",") != strings.Join(wantBad, ",") {
					t.Errorf("dead letters %v, want %v", sink.values, wantBad)
				}
				switch {
				case len(badIdx) == 1 && mode == "halving" && op.calls > 2*6+1:
					t.Errorf("halving took %d calls for one bad record of %d", op.calls, n)
				case len(badIdx) == 1 && mode == "hinted" && op.calls > 2:
					t.Errorf("a hinted record took %d calls, want at most 2 (before and after it)", op.calls)
				}
			})
		}
	}
}

// TestDeadLetterCountsSettle: what a snapshot counted comes back when its
// checkpoint is aborted or subsumed, and is reported once when it
// completes, so the checkpoint history misses no dead letter.
func TestDeadLetterCountsSettle(t *testing.T) {
	var d deadLetters
	d.sinceSnapshot = 3
	if n := d.snapshotted(1); n != 3 || d.sinceSnapshot != 0 {
		t.Fatalf("snapshot 1 took %d, left %d", n, d.sinceSnapshot)
	}
	d.settled(1, false) // aborted: given back
	d.sinceSnapshot += 2
	if n := d.snapshotted(2); n != 5 {
		t.Fatalf("snapshot 2 took %d, want 5 (3 given back + 2)", n)
	}
	d.sinceSnapshot = 4
	if n := d.snapshotted(3); n != 4 {
		t.Fatalf("snapshot 3 took %d, want 4", n)
	}
	d.settled(3, true) // 3 completes: 2 is subsumed and gives its 5 back
	if d.sinceSnapshot != 5 || len(d.inSnapshot) != 0 {
		t.Fatalf("after 3 completed: %d since the snapshot, %d pending; want 5 and 0", d.sinceSnapshot, len(d.inSnapshot))
	}
	d.settled(3, true) // a repeated notification changes nothing
	if d.sinceSnapshot != 5 {
		t.Fatalf("a repeated completion changed the count to %d", d.sinceSnapshot)
	}
}

// valueSink collects the values of the records written to it.
type valueSink struct{ values []string }

func (m *valueSink) Open(context.Context, int, int) error { return nil }
func (m *valueSink) Write(b []byte) error {
	recs, err := abi.Decode(b)
	for _, r := range recs {
		m.values = append(m.values, string(r.Value))
	}
	return err
}
func (m *valueSink) Close() error { return nil }

// fakeGuestTask is a dead-letter subtask of one stage, op, whose output
// goes to a sink: it returns the task, the stage, its dead letters and its
// output.
func fakeGuestTask(op *fakeGuest) (*task, *stage, *memSink, *valueSink) {
	dead, out := &memSink{}, &valueSink{}
	tk := &task{label: "v/0", now: time.Now, curChan: -1,
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "v"}, {ID: "out", Kind: job.KindSink}}},
		dl:    &deadLetters{sink: dead, max: -1}, sink: out}
	st := &stage{vertex: tk.chain.Vertices[0], op: op, state: noKeyedState{}, coll: stageCollector{nOut: 1, keep: -1}, guest: true}
	tk.stages = []*stage{st}
	if err := tk.ensureMachine(); err != nil {
		panic(err)
	}
	return tk, st, dead, out
}

// TestWaryWhileFailuresAreFrequent: once subtask.WaryFails of the last subtask.WaryWindow
// batches failed, batches reach the guest in pieces of at most subtask.WaryPiece
// records, so that a bad record costs its piece rather than its batch; bad
// records spread more thinly leave batches whole.
func TestWaryWhileFailuresAreFrequent(t *testing.T) {
	const n = 1000
	bad := map[string]bool{}
	// A run: batches 0 to 7 each have a bad record. The subtask is wary
	// from batch 8 on, while batch 0's failure is within the window of
	// the next batch, and batch 30's failure (found within its piece)
	// moves that on by a batch: wary up to batch 81.
	for b := range subtask.WaryFails {
		bad[fmt.Sprintf("b%d-%d", b, 100*b+50)] = true
	}
	bad["b30-100"] = true
	const lastWary = subtask.WaryWindow + 1
	// Then one batch in 12 fails, which never makes it wary.
	for b := 90; b <= 190; b += 12 {
		bad[fmt.Sprintf("b%d-%d", b, b)] = true
	}
	op := &fakeGuest{bad: bad}
	tk, _, dead, out := fakeGuestTask(op)
	var want, wantDead []string
	feed := func(batch int) (sizes []int, hasBad bool) {
		var b abi.Builder
		for i := range n {
			v := fmt.Sprintf("b%d-%d", batch, i)
			b.Add(0, int64(i), []byte("k"), []byte(v))
			if op.bad[v] {
				wantDead = append(wantDead, v)
				hasBad = true
			} else {
				want = append(want, v)
			}
		}
		op.sizes = nil
		if err := tk.processGuarded(context.Background(), 0, b.Bytes(), false); err != nil {
			t.Fatal(err)
		}
		return op.sizes, hasBad
	}
	for batch := 0; batch <= 200; batch++ {
		sizes, hasBad := feed(batch)
		if batch < subtask.WaryFails || batch > lastWary {
			if sizes[0] != n {
				t.Fatalf("batch %d: calls of %v records, want one of %d first", batch, sizes, n)
			}
			if !hasBad && len(sizes) != 1 {
				t.Errorf("batch %d, without a failure: calls of %v records, want one of %d", batch, sizes, n)
			}
			continue
		}
		for _, m := range sizes {
			if m > subtask.WaryPiece {
				t.Fatalf("batch %d: a call of %d records while wary (calls %v)", batch, m, sizes)
			}
		}
		if batch == 30 {
			// The bad record's piece failed and was searched (by halves:
			// the fake reports no progress): what ran again stays within
			// that piece's search.
			extra := 0
			for _, m := range sizes {
				extra += m
			}
			if extra-n > 2*subtask.WaryPiece {
				t.Errorf("batch 30: %d records ran again for one bad record, want at most %d", extra-n, 2*subtask.WaryPiece)
			}
		}
	}
	if strings.Join(out.values, ",") != strings.Join(want, ",") {
		t.Errorf("output of %d records differs from the %d good ones in order", len(out.values), len(want))
	}
	if got := strings.Join(dead.values, ","); got != strings.Join(wantDead, ",") {
		t.Errorf("dead letters %v, want %v", got, wantDead)
	}
}

// TestCommitPointsKeepWork: once a batch failed, a guest that marks
// commit points is asked for them, and has the work before the last one
// kept when it fails: the records after it run again, none before, and the
// output still comes out whole and in order, each bad record
// dead-lettered once. Without a failure in the last subtask.WaryWindow batches it
// is asked for none, and it is never fed in pieces.
func TestCommitPointsKeepWork(t *testing.T) {
	const n = 1000
	for _, badAt := range [][]int{{700}, {0}, {commitEvery}, {n - 1}, {5, 300, 301, 999}} {
		t.Run(fmt.Sprint(badAt), func(t *testing.T) {
			op := &fakeGuest{bad: map[string]bool{}, commits: true}
			tk, st, dead, out := fakeGuestTask(op)
			var want, wantDead []string
			feed := func(batch int, bad []int) {
				t.Helper()
				var b abi.Builder
				for i := range n {
					v := fmt.Sprintf("b%d-%d", batch, i)
					b.Add(0, int64(i), []byte("k"), []byte(v))
					if slices.Contains(bad, i) {
						op.bad[v] = true
						wantDead = append(wantDead, v)
					} else {
						want = append(want, v)
					}
				}
				op.firsts, op.sizes, op.intervals = nil, nil, nil
				if err := tk.processGuarded(context.Background(), 0, b.Bytes(), false); err != nil {
					t.Fatal(err)
				}
				if st.coll.cp != nil {
					t.Fatal("the collector still asks for commit points after the batch")
				}
			}
			// The first failure finds the guest asked for no commit point.
			feed(0, []int{400})
			if op.intervals[0] != 0 {
				t.Errorf("the first batch asked for commit points every %d records, before any failure", op.intervals[0])
			}
			// Then, subtask.WaryFails and more failing batches: commit points, and
			// the batches stay whole.
			for batch := 1; batch <= subtask.WaryFails+1; batch++ {
				feed(batch, badAt)
				if op.intervals[0] != commitEvery || op.sizes[0] != n {
					t.Fatalf("batch %d after a failure: the first call had %d records and commit points every %d, want %d and %d",
						batch, op.sizes[0], op.intervals[0], n, commitEvery)
				}
				// The first call fails at the first bad record; what runs
				// again starts at the commit point before it.
				first := badAt[0]
				from := fmt.Sprintf("b%d-%d", batch, first/commitEvery*commitEvery)
				if len(op.firsts) < 2 || op.firsts[1] != from {
					t.Fatalf("batch %d: calls starting at %v; the second should start at %s, the last commit point before record %d",
						batch, op.firsts, from, first)
				}
			}
			// subtask.WaryWindow clean batches later, no commit points.
			for batch := subtask.WaryFails + 2; batch < 2*subtask.WaryWindow; batch++ {
				feed(batch, nil)
				wantEvery := commitEvery
				if batch > subtask.WaryFails+1+subtask.WaryWindow {
					wantEvery = 0
				}
				if len(op.intervals) != 1 || op.intervals[0] != wantEvery {
					t.Fatalf("clean batch %d: calls asking for commit points every %v records, want one call at %d", batch, op.intervals, wantEvery)
				}
			}
			if strings.Join(out.values, ",") != strings.Join(want, ",") {
				t.Errorf("output of %d records, want the %d good ones in order", len(out.values), len(want))
			}
			if strings.Join(dead.values, ",") != strings.Join(wantDead, ",") {
				t.Errorf("dead letters %v, want %v", dead.values, wantDead)
			}
		})
	}
}

// compileTestops compiles examples/wasm/go/testops (compileModule).
func compileTestops(t *testing.T) *host.Module {
	t.Helper()
	b, err := os.ReadFile(testmod.GoModule(t, "examples/wasm/go/testops"))
	if err != nil {
		t.Fatal(err)
	}
	return compileModule(t, "testops.wasm", b)
}

// compileModule compiles wasm in a runtime of its own, closed when the
// test ends.
func compileModule(t *testing.T, name string, wasm []byte) *host.Module {
	t.Helper()
	bg := context.Background()
	rt, err := host.NewRuntime(bg, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(bg) })
	m, err := rt.Compile(bg, name, wasm)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
