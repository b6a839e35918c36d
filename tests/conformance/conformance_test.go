package conformance_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// capability is one row of the README's conformance table: a group of
// checks every language's module must pass.
type capability struct {
	name string
	run  func(t *testing.T, m *langModule)
}

var capabilities = []capability{
	{"value state", valueState},
	{"large values", largeValues},
	{"map state", mapState},
	{"outputs", outputs},
	{"batching", batching},
	{"timers", timers},
	{"watermark", watermark},
	{"processing time, log, config", misc},
	{"checkpoint hooks", hooks},
	{"errors", failures},
	{"close", closing},
	{"state migration", migration},
}

// TestConformance runs every capability against every language's
// conformance module (tests/conformance/SPEC.md).
func TestConformance(t *testing.T) {
	for _, lang := range testmod.Languages {
		t.Run(lang, func(t *testing.T) {
			m := moduleFor(t, lang)
			for _, c := range capabilities {
				t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) { c.run(t, m) })
			}
		})
	}
}

func valueState(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k1",
		"get a", "missing",
		"put a x1", "ok",
		"get a", "=x1",
		"put b y", "ok",
		"get a", "=x1",
		"get b", "=y",
		"put a x2", "ok",
		"get a", "=x2",
	)
	// State is per key.
	h.expect("k2", "get a", "missing", "put a other", "ok", "get a", "=other")
	h.expect("k1",
		"get a", "=x2",
		"del a", "ok",
		"get a", "missing",
		"del a", "ok", // deleting an absent entry is not an error
		"get b", "=y",
		"inc n", "=1",
		"inc n", "=2",
		"inc n", "=3",
	)
	h.expect("k2", "get a", "=other", "inc n", "=1")

	// Counters are int64, 8 bytes little-endian, in the host's state: the
	// encoding that makes savepoints portable between languages.
	hn, err := h.svc.RegisterState("n", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.svc.StateGet(hn, []byte("k1"), nil, nil)
	if err != nil {
		t.Fatalf("reading state n of k1 from the host: %v", err)
	}
	if len(v) != 8 || binary.LittleEndian.Uint64(v) != 3 {
		t.Errorf("state n of k1 is % x, want 3 as 8 bytes little-endian", v)
	}
	// And a counter the host wrote is read by the guest.
	if err := h.svc.StatePut(hn, []byte("k3"), nil, binary.LittleEndian.AppendUint64(nil, 1<<40)); err != nil {
		t.Fatal(err)
	}
	h.expect("k3", "inc n", fmt.Sprintf("=%d", 1<<40+1))

	// Many commands on two keys in one call, as the SDKs' state caches see
	// them: each read sees the writes before it in the call, and the host
	// holds the last ones when the call returns.
	recs, err := h.process(5, "k5", "put a x1", "k5", "get a", "k6", "inc n", "k5", "inc n", "k6", "inc n",
		"k5", "del a", "k5", "get a", "k5", "put a x2", "k6", "get a", "k5", "get a")
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "one call", recs, "0|5|k5|ok", "0|5|k5|=x1", "0|5|k6|=1", "0|5|k5|=1", "0|5|k6|=2",
		"0|5|k5|ok", "0|5|k5|missing", "0|5|k5|ok", "0|5|k6|missing", "0|5|k5|=x2")
	ha, err := h.svc.RegisterState("a", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := h.svc.StateGet(ha, []byte("k5"), nil, nil); err != nil || string(v) != "x2" {
		t.Errorf("state a of k5 after the call: %q, %v; want x2", v, err)
	}
	if v, err := h.svc.StateGet(hn, []byte("k6"), nil, nil); err != nil || len(v) != 8 || binary.LittleEndian.Uint64(v) != 2 {
		t.Errorf("state n of k6 after the call: % x, %v; want 2", v, err)
	}
}

func largeValues(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	// 200,000 bytes: far beyond any first read buffer, so the SDK must grow
	// its buffer when state_get says the value does not fit.
	h.expect("k", "big big 200000", "ok 200000", "big big 70000", "ok 70000", "big big 1", "ok 1", "big big 0", "ok 0")
	hb, err := h.svc.RegisterState("big", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	h.expect("k", "big big 131073", "ok 131073")
	v, err := h.svc.StateGet(hb, []byte("k"), nil, nil)
	if err != nil || len(v) != 131073 || v[0] != 'a' || v[26] != 'a' || v[131072] != 'a'+byte(131072%26) {
		t.Errorf("state big of k: %d bytes, err %v; want 131073 bytes of the SPEC's pattern", len(v), err)
	}
}

func mapState(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k1",
		"mget m x", "missing",
		"mput m x 1", "ok",
		"mput m y 2", "ok",
		"mget m x", "=1",
		"mget m y", "=2",
		"mscan m -", "n=2 first=x last=y",
		"mdel m x", "ok",
		"mget m x", "missing",
		"mdel m x", "ok",
		"mscan m -", "n=1 first=y last=y",
		"mscan m x", "n=0",
		// 3000 entries of ~10 bytes: many pages of state_iter.
		"mfill p 3000", "ok",
		"mscan p -", "n=3000 first=k0000 last=k2999",
		"mscan p k12", "n=100 first=k1200 last=k1299",
		"mscan p k2999", "n=1 first=k2999 last=k2999",
		"mscan p k3", "n=0",
		"mget p k0042", "=v42",
		"mscan m -", "n=1 first=y last=y",
	)
	h.expect("k2", "mscan p -", "n=0", "mget p k0042", "missing")
	// An iteration sees the writes made before it in the same call.
	recs, err := h.process(6, "k9", "mput m q 1", "k9", "mput m r 2", "k9", "mscan m -", "k9", "mdel m q", "k9", "mscan m -",
		"k9", "mget m q")
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "map state in one call", recs, "0|6|k9|ok", "0|6|k9|ok", "0|6|k9|n=2 first=q last=r", "0|6|k9|ok",
		"0|6|k9|n=1 first=r last=r", "0|6|k9|missing")
	// The entries are the host's map entries: namespace = map key.
	hp, err := h.svc.RegisterState("p", abi.StateMap)
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.svc.StateGet(hp, []byte("k1"), []byte("k2999"), nil)
	if err != nil || string(v) != "v2999" {
		t.Errorf("map p of k1, entry k2999: %q, %v; want v2999", v, err)
	}
}

func outputs(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	recs, err := h.process(7, "k", "emit side hello")
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "emit side hello", recs, "1|7|k|hello", "0|7|k|ok")
	recs, err = h.process(8, "k", "emit out direct")
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "emit out direct", recs, "0|8|k|direct", "0|8|k|ok")
	// An unknown output name is the host's BAD_OUTPUT, which the operator
	// reports instead of failing.
	h.expect("k", "emit nowhere x", "bad output nowhere", "get a", "missing")
}

func batching(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	recs, err := h.process(9, "k", "batch 5000")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 0, 5001)
	for i := 0; i < 5000; i++ {
		want = append(want, fmt.Sprintf("0|9|k|r%d", i))
	}
	want = append(want, "0|9|k|ok")
	wantRecords(t, "batch 5000", recs, want...)

	// Many input records in one batch: replies in input order.
	var in []string
	want = want[:0]
	for i := 1; i <= 300; i++ {
		key := fmt.Sprintf("k%d", i%3)
		in = append(in, key, "inc n")
		want = append(want, fmt.Sprintf("0|10|%s|=%d", key, (i+2)/3))
	}
	recs, err = h.process(10, in...)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "300 inc in one batch", recs, want...)
}

func timers(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k1", "timer event 100", "ok", "timer event 200", "ok", "timer event 100", "ok", "untimer event 200", "ok",
		"untimer event 999", "ok")
	h.expect("k2", "timer event 50", "ok", "timer event 300", "ok")
	wantRecords(t, "watermark 49", h.advance(49))
	wantRecords(t, "watermark 150", h.advance(150),
		"0|50|k2|fired event 50 ns=t",
		"0|100|k1|fired event 100 ns=t")
	// A timer set by the call that wrote the state it counts in reads the
	// write when it fires, and its own write is read back after it.
	h.expect("k4", "inc n", "=1", "tinc n 500", "ok")
	wantRecords(t, "watermark 1000", h.advance(1000), "0|300|k2|fired event 300 ns=t", "0|500|k4|fired event 500 ns=inc:n =2")
	h.expect("k4", "inc n", "=3")
	wantRecords(t, "the end of input", h.advance(math.MaxInt64))

	h.expect("k3", "timer proc 5000", "ok", "timer proc 7000", "ok", "timer event 5000", "ok")
	h.svc.now = 0
	wantRecords(t, "clock 6000", h.advanceClock(6000), "0|5000|k3|fired proc 5000 ns=t")
	h.expect("k3", "untimer proc 7000", "ok")
	wantRecords(t, "clock 8000", h.advanceClock(8000))
	// The event-time timer of k3 at 5000 is due: the watermark is already at
	// its maximum, and the next advance fires it.
	wantRecords(t, "the end of input again", h.advance(math.MaxInt64), "0|5000|k3|fired event 5000 ns=t")
}

func watermark(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k", "wm", "wm=-9223372036854775808")
	h.svc.wm = 1234
	h.expect("k", "wm", "wm=1234")
	h.svc.wm = -5
	h.expect("k", "wm", "wm=-5")
	h.svc.wm = math.MaxInt64
	h.expect("k", "wm", "wm=9223372036854775807")
}

func misc(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k", "ptime", "ptime ok", "config", "config="+config, "log hello-from-the-guest", "ok")
	found := false
	for _, l := range h.svc.logs {
		if l == fmt.Sprintf("%d hello-from-the-guest", abi.LogInfo) {
			found = true
		}
	}
	if !found {
		t.Errorf("log: the host got %q, want %q at level info", h.svc.logs, "hello-from-the-guest")
	}
	h.svc.now = 0
	h.expect("k", "ptime", "ptime bad")
}

func hooks(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k", "hooks", "pre=-1 complete=-1 aborted=-1")
	var out collector
	if err := h.op.PreBarrier(7, &out); err != nil {
		t.Fatalf("pre_barrier: %v", err)
	}
	wantRecords(t, "pre_barrier 7", out.recs, "0|0||pre 7")
	if err := h.op.CheckpointComplete(7); err != nil {
		t.Fatalf("checkpoint_complete: %v", err)
	}
	if err := h.op.CheckpointAborted(8); err != nil {
		t.Fatalf("checkpoint_aborted: %v", err)
	}
	h.expect("k", "hooks", "pre=7 complete=7 aborted=8")
	out.recs = nil
	if err := h.op.PreBarrier(9, &out); err != nil {
		t.Fatalf("pre_barrier: %v", err)
	}
	wantRecords(t, "pre_barrier 9", out.recs, "0|0||pre 9")
	h.expect("k", "hooks", "pre=9 complete=7 aborted=8")

	// Counts written in one call are in a checkpoint taken after it; a
	// restore, at the same parallelism or at two, counts on from them.
	h = mustOpen(t, m)
	var in []string
	for i := range 20 {
		k := fmt.Sprintf("c%d", i)
		in = append(in, k, "inc n", k, "inc n")
	}
	if _, err := h.process(3, in...); err != nil {
		t.Fatal(err)
	}
	if err := h.op.PreBarrier(11, &collector{}); err != nil {
		t.Fatalf("pre_barrier: %v", err)
	}
	ckpt := filepath.Join(t.TempDir(), "checkpoint")
	if err := h.store.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	for _, par := range []int{1, 2} {
		seen := 0
		for sub := range par {
			r := restore(t, m, ckpt, sub, par)
			for i := range 20 {
				k := fmt.Sprintf("c%d", i)
				if r.store.KeyGroups().Contains(abi.KeyGroup([]byte(k), maxPar)) {
					r.expect(k, "inc n", "=3")
					seen++
				}
			}
		}
		if seen != 20 {
			t.Errorf("parallelism %d: %d keys restored, want 20", par, seen)
		}
	}
}

// restore opens the conform operator as subtask sub of par over a copy of
// the checkpoint in dir, keeping the key groups of that subtask, as a job
// restored from a checkpoint (at another parallelism: rescaled) does.
func restore(t *testing.T, m *langModule, dir string, sub, par int) *opHarness {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.mod.NewInstance(ctx, fmt.Sprintf("%s/conform/%d", m.lang, sub))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(ctx) })
	store, err := state.Open(state.Options{Dir: cp, MaxParallelism: maxPar, KeyGroups: abi.RangeForSubtask(sub, par, maxPar)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h := &opHarness{t: t, m: m, inst: inst, op: inst.Operator(), store: store,
		svc: &services{VertexState: store.Vertex(vertexID, true), wm: abi.MinWatermark, now: time.Now().UnixMilli()}}
	if err := h.op.Open(operator.Spec{VertexID: vertexID, Operator: "conform", Config: []byte(config),
		Outputs: []string{"out", "side"}, Subtask: sub, Parallel: par, MaxParallelism: maxPar, Keyed: true}, h.svc); err != nil {
		t.Fatalf("open after the restore: %v", err)
	}
	return h
}

func failures(t *testing.T, m *langModule) {
	// Each failure leaves its instance failed: one instance per case.
	mustOpen(t, m).mustFail("k", "fail boom-42", "boom-42")
	mustOpen(t, m).mustFail("k", "frobnicate now", "unknown command")
	mustOpen(t, m).mustFail("k", "put zz v", "unknown state")
	mustOpen(t, m).mustFail("k", "mput a x y", "unknown state")
	mustOpen(t, m).mustFail("k", "get m", "unknown state")

	// A failing command in the middle of a batch fails the batch.
	h := mustOpen(t, m)
	if _, err := h.process(3, "k", "inc n", "k", "fail late", "k", "inc n"); err == nil || !strings.Contains(err.Error(), "late") {
		t.Fatalf("a batch with a failing command: %v, want its failure", err)
	}

	// An operator name the module lacks fails open with UNKNOWN_OP.
	_, err := open(t, m, "no-such-operator")
	if err == nil {
		t.Fatal("open of an unknown operator succeeded")
	}
	var ge *host.GuestError
	if !errors.As(err, &ge) {
		t.Errorf("open of an unknown operator: %v (%T), want a *host.GuestError", err, err)
	}
	if !strings.Contains(err.Error(), "no-such-operator") {
		t.Errorf("open of an unknown operator: %q does not name the operator", err)
	}
}

func closing(t *testing.T, m *langModule) {
	h := mustOpen(t, m)
	h.expect("k", "put a v", "ok")
	var out collector
	if err := h.op.Close(&out); err != nil {
		t.Fatalf("close: %v", err)
	}
	wantRecords(t, "close", out.recs, "0|0||close")
}

func migration(t *testing.T, m *langModule) {
	ctx := context.Background()
	inst, err := m.mod.NewInstance(ctx, m.lang+"/migrate")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if !m.mod.CanMigrate() {
		t.Fatal("the module does not export wstream_migrate")
	}
	got, err := inst.Migrate("conform", "m", 1, []byte("k1"), []byte("ns"), []byte("old"))
	if err != nil || string(got) != "m|1|k1|ns|old" {
		t.Fatalf("migrate: %q, %v", got, err)
	}
	big := bytes.Repeat([]byte("x"), 200000)
	got, err = inst.Migrate("conform", "m", 7, nil, nil, big)
	if err != nil || string(got) != "m|7|||"+string(big) {
		t.Fatalf("migrate of a large value with an empty key and namespace: %d bytes, %v", len(got), err)
	}
	_, err = inst.Migrate("conform", "fail", 1, []byte("k"), nil, []byte("v"))
	if err == nil || !strings.Contains(err.Error(), "migration refused") {
		t.Fatalf("a failing migration: %v", err)
	}
	got, err = inst.Migrate("conform", "m", 2, []byte("k"), nil, []byte("after"))
	if err != nil || string(got) != "m|2|k||after" {
		t.Fatalf("a migration after a failed one: %q, %v", got, err)
	}
}

// TestREADMETable checks that the README's conformance table lists every
// capability and every language, as TestConformance runs them.
func TestREADMETable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testmod.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := readmeTable(); !strings.Contains(string(b), want) {
		t.Errorf("README.md lacks the conformance table; it should contain:\n%s", want)
	}
}

// readmeTable is the README's table: a row per capability, a column per
// language, each cell a pass (TestConformance fails otherwise).
func readmeTable() string {
	names := map[string]string{"go": "Go", "c": "C", "rust": "Rust", "as": "AssemblyScript", "wat": "WAT"}
	var b strings.Builder
	b.WriteString("| capability |")
	for _, l := range testmod.Languages {
		fmt.Fprintf(&b, " %s |", names[l])
	}
	b.WriteString("\n| --- |")
	for range testmod.Languages {
		b.WriteString(" :-: |")
	}
	b.WriteByte('\n')
	for _, c := range capabilities {
		fmt.Fprintf(&b, "| %s |", c.name)
		for range testmod.Languages {
			b.WriteString(" ✓ |")
		}
		b.WriteByte('\n')
	}
	return b.String()
}
