package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// The harness drives one language's conformance module through the real
// host (package host: validation, sandbox, host functions) over real keyed
// state (package state, Pebble in a temporary directory), with the
// watermark, the clock and the timer firing in the test's hands.

const (
	vertexID = "conform"
	maxPar   = 128
	// config is the operator's configuration; the module must hand it back
	// byte for byte.
	config = `{"mode":"conformance","n":1}`
)

// langModule is one language's compiled conformance module.
type langModule struct {
	lang string
	rt   *host.Runtime
	mod  *host.Module
	logs *logSink
}

// logSink collects what guests log outside a callback and the host's
// diagnostics.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

var (
	modulesMu sync.Mutex
	modules   = map[string]*langModule{}
)

// moduleFor builds (once per test binary) and compiles the conformance
// module of lang. A language whose toolchain is missing fails: the set-up
// script installs every toolchain, so a missing one is a broken set-up.
func moduleFor(t *testing.T, lang string) *langModule {
	t.Helper()
	modulesMu.Lock()
	defer modulesMu.Unlock()
	if m, ok := modules[lang]; ok {
		return m
	}
	path, err := testmod.Build(lang, "conformance")
	if err != nil {
		t.Fatalf("building the %s conformance module: %v", lang, err)
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	ctx := context.Background()
	rt, err := host.NewRuntime(ctx, host.Config{
		CallTimeout: 20 * time.Second,
		Log: func(level int32, op string, subtask int, msg string) {
			logs.add(fmt.Sprintf("%d %s/%d %s", level, op, subtask, msg))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Compile(ctx, "conformance-"+lang, wasm)
	if err != nil {
		_ = rt.Close(ctx)
		t.Fatalf("compiling the %s conformance module: %v", lang, err)
	}
	m := &langModule{lang: lang, rt: rt, mod: mod, logs: logs}
	modules[lang] = m
	return m
}

// services is the operator's view of the host: real keyed state and timers
// from package state, the watermark and clock the test sets, and a log.
type services struct {
	*state.VertexState
	wm   int64
	now  int64
	logs []string
}

func (s *services) Watermark() int64      { return s.wm }
func (s *services) ProcessingTime() int64 { return s.now }
func (s *services) Log(level int32, msg string) {
	s.logs = append(s.logs, fmt.Sprintf("%d %s", level, msg))
}

// collector keeps every record an operator emits, in order, with its port.
type collector struct{ recs []abi.Record }

func (c *collector) Emit(port uint32, ts int64, key, value []byte) error {
	c.recs = append(c.recs, abi.Record{Port: port, Timestamp: ts, Key: clone(key), Value: clone(value)})
	return nil
}

func (c *collector) EmitBatch(b []byte) error {
	recs, err := abi.Decode(b)
	if err != nil {
		return err
	}
	for _, r := range recs {
		r.Key, r.Value = clone(r.Key), clone(r.Value)
		c.recs = append(c.recs, r)
	}
	return nil
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

// opHarness is one open conform operator over a fresh store.
type opHarness struct {
	t     *testing.T
	m     *langModule
	inst  *host.Instance
	op    operator.Operator
	store *state.Store
	svc   *services
}

// open instantiates the module and opens operator name (normally "conform").
func open(t *testing.T, m *langModule, name string) (*opHarness, error) {
	t.Helper()
	ctx := context.Background()
	inst, err := m.mod.NewInstance(ctx, m.lang+"/conform")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(ctx) })
	store, err := state.Open(state.Options{Dir: t.TempDir(), MaxParallelism: maxPar,
		KeyGroups: abi.KeyGroupRange{Start: 0, End: maxPar - 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h := &opHarness{t: t, m: m, inst: inst, op: inst.Operator(), store: store,
		svc: &services{VertexState: store.Vertex(vertexID, true), wm: abi.MinWatermark, now: time.Now().UnixMilli()}}
	err = h.op.Open(operator.Spec{VertexID: vertexID, Operator: name, Config: []byte(config),
		Outputs: []string{"out", "side"}, Parallel: 1, MaxParallelism: maxPar, Keyed: true}, h.svc)
	return h, err
}

// mustOpen opens the conform operator.
func mustOpen(t *testing.T, m *langModule) *opHarness {
	t.Helper()
	h, err := open(t, m, "conform")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return h
}

// process sends records (key, command) with timestamp ts in one batch and
// returns what the operator emitted.
func (h *opHarness) process(ts int64, keyCmds ...string) ([]abi.Record, error) {
	var b abi.Builder
	for i := 0; i < len(keyCmds); i += 2 {
		b.Add(0, ts, []byte(keyCmds[i]), []byte(keyCmds[i+1]))
	}
	var out collector
	err := h.op.Process(b.Bytes(), &out)
	return out.recs, err
}

// reply runs one command for key and returns its reply, checking that the
// command emitted nothing else and that the reply carries the record's key
// and timestamp on output "out".
func (h *opHarness) reply(key, cmd string) string {
	h.t.Helper()
	const ts = 42
	recs, err := h.process(ts, key, cmd)
	if err != nil {
		h.t.Fatalf("%q (key %q): %v", cmd, key, err)
	}
	if len(recs) != 1 {
		h.t.Fatalf("%q (key %q): emitted %d records %s, want one reply", cmd, key, len(recs), show(recs))
	}
	r := recs[0]
	if r.Port != 0 || string(r.Key) != key || r.Timestamp != ts {
		h.t.Fatalf("%q (key %q): reply %s, want port 0, key %q, timestamp %d", cmd, key, show(recs), key, ts)
	}
	return string(r.Value)
}

// expect runs commands for key and checks each reply.
func (h *opHarness) expect(key string, cmdReplies ...string) {
	h.t.Helper()
	for i := 0; i < len(cmdReplies); i += 2 {
		if got := h.reply(key, cmdReplies[i]); got != cmdReplies[i+1] {
			h.t.Errorf("%q (key %q) replied %q, want %q", cmdReplies[i], key, got, cmdReplies[i+1])
		}
	}
}

// mustFail runs cmd and checks that the call fails as a guest error whose
// message contains want.
func (h *opHarness) mustFail(key, cmd, want string) {
	h.t.Helper()
	recs, err := h.process(1, key, cmd)
	if err == nil {
		h.t.Fatalf("%q succeeded with %s, want a failure containing %q", cmd, show(recs), want)
	}
	var ge *host.GuestError
	if !errors.As(err, &ge) {
		h.t.Fatalf("%q: error %v (%T) is not a *host.GuestError", cmd, err, err)
	}
	if !strings.Contains(err.Error(), want) {
		h.t.Fatalf("%q: error %q does not contain %q", cmd, err, want)
	}
}

// advance sets the watermark and fires the due event-time timers the way the
// runtime does: pop until none are left, hand each batch to on_timer.
func (h *opHarness) advance(wm int64) []abi.Record {
	h.svc.wm = wm
	return h.fire(abi.TimeEvent, wm)
}

// advanceClock sets processing time and fires the due processing-time timers.
func (h *opHarness) advanceClock(now int64) []abi.Record {
	h.svc.now = now
	return h.fire(abi.TimeProcessing, now)
}

func (h *opHarness) fire(domain int32, upTo int64) []abi.Record {
	h.t.Helper()
	var out collector
	for {
		var b abi.Builder
		n, err := h.svc.PopTimers(domain, upTo, &b)
		if err != nil {
			h.t.Fatal(err)
		}
		if n == 0 {
			return out.recs
		}
		if err := h.op.OnTimers(b.Bytes(), &out); err != nil {
			h.t.Fatalf("on_timer: %v", err)
		}
	}
}

// show formats records for failure messages.
func show(recs []abi.Record) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range recs {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 && len(recs) > 10 {
			fmt.Fprintf(&b, "... %d more", len(recs)-i)
			break
		}
		fmt.Fprintf(&b, "{port %d ts %d key %q value %.60q}", r.Port, r.Timestamp, r.Key, r.Value)
	}
	b.WriteByte(']')
	return b.String()
}

// wantRecords compares emitted records with want, each written as
// "port|ts|key|value".
func wantRecords(t *testing.T, what string, got []abi.Record, want ...string) {
	t.Helper()
	g := make([]string, len(got))
	for i, r := range got {
		g[i] = fmt.Sprintf("%d|%d|%s|%s", r.Port, r.Timestamp, r.Key, r.Value)
	}
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: got\n  %s\nwant\n  %s", what, strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}
