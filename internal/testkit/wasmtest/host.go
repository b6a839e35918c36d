package wasmtest

import (
	"bytes"
	"context"
	"sort"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wstream/wstream/abi"
)

// StateKey names one entry of the in-memory state: a state handle, a record
// key and a namespace.
type StateKey struct {
	Handle  int32
	Key, NS string
}

// TimerKey names one registered timer.
type TimerKey struct {
	Domain  int32 // abi.TimeEvent or abi.TimeProcessing
	Key, NS string
	TS      int64
}

// LogLine is one call of wstream_log.
type LogLine struct {
	Level int32
	Msg   string
}

// Host is one guest module instance and the in-memory host it imports. Tests
// may read and set its fields between calls.
type Host struct {
	TB      testing.TB
	Ctx     context.Context // the context of the Must* calls
	Runtime wazero.Runtime
	Module  api.Module
	Stderr  bytes.Buffer // the guest's stderr
	Outputs []string     // the vertex's outputs; emits to other ports are BAD_OUTPUT

	Watermark int64               // what wstream_watermark returns
	States    map[string]int32    // registered state names and their handles
	Kinds     []int32             // the kind of each state handle
	State     map[StateKey][]byte // state values
	Timers    map[TimerKey]bool   // registered timers
	Out       []abi.Record        // emitted records, copied
	Batches   int                 // emit_batch calls
	Emits     int                 // emit calls
	IterCalls int                 // state_iter calls
	Discard   bool                // count records emitted by emit_batch instead of keeping them
	Emitted   int                 // records emitted while discarding
	Failures  []string            // wstream_fail messages
	Logs      []LogLine           // wstream_log calls

	// Calls of the per-entry and the batched state functions: a guest
	// SDK that batches makes few of the first kind.
	GetCalls, PutCalls, DeleteCalls int
	GetManyCalls, WriteBatchCalls   int
	// ProgressAt is the address the guest named with progress_at (0: none).
	ProgressAt uint32
	// CommitEvery is what commit answers: the records between commit
	// points (0: none). Commits are the commit points the guest marked.
	CommitEvery int
	Commits     []Commit

	// The module's exports.
	AllocFn, OpenFn, ProcessFn, OnTimerFn, CloseFn, PlanFn api.Function

	// The argument arena: the last region wstream_alloc returned, which
	// Write reuses while its arguments fit.
	ArenaPtr, ArenaSize uint32
}

// Commit is a commit point a guest marked: the records it said were done,
// and the records it had emitted and the state the host held by then.
type Commit struct {
	Done, Emitted int
	State         map[StateKey][]byte
}

// An Option configures New.
type Option func(*options)

type options struct {
	cfg     wazero.RuntimeConfig
	outputs []string
	wasi    bool
}

// WithOutputs sets the vertex's outputs; the default is one, "main".
func WithOutputs(names ...string) Option {
	return func(o *options) { o.outputs = names }
}

// WithMemoryLimitMiB caps the guest's memory.
func WithMemoryLimitMiB(mb uint32) Option {
	return func(o *options) { o.cfg = o.cfg.WithMemoryLimitPages(mb * 16) }
}

// WithoutDeadlineChecks compiles the module without the checks that let a
// context deadline stop a running call.
func WithoutDeadlineChecks() Option {
	return func(o *options) { o.cfg = o.cfg.WithCloseOnContextDone(false) }
}

// WithWASI instantiates wasi_snapshot_preview1 for the module and runs its
// _initialize export, as a Go module built with -buildmode=c-shared needs.
func WithWASI() Option {
	return func(o *options) { o.wasi = true }
}

// New instantiates the module wasm, named name in messages, against a new
// Host. The runtime closes when the test ends.
func New(tb testing.TB, name string, wasm []byte, opts ...Option) *Host {
	tb.Helper()
	o := options{cfg: RuntimeConfig(), outputs: []string{"main"}}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Host{
		TB:        tb,
		Ctx:       context.Background(),
		Outputs:   o.outputs,
		Watermark: abi.MinWatermark,
		States:    map[string]int32{},
		State:     map[StateKey][]byte{},
		Timers:    map[TimerKey]bool{},
	}
	h.Runtime = wazero.NewRuntimeWithConfig(h.Ctx, o.cfg)
	tb.Cleanup(func() { h.Runtime.Close(context.Background()) })
	if _, err := h.hostModule().Instantiate(h.Ctx); err != nil {
		tb.Fatalf("instantiating the wstream host module: %v", err)
	}
	mc := wazero.NewModuleConfig().WithName(name).WithStderr(&h.Stderr)
	if o.wasi {
		wasi_snapshot_preview1.MustInstantiate(h.Ctx, h.Runtime)
		mc = mc.WithStartFunctions("_initialize")
	}
	compiled, err := h.Runtime.CompileModule(h.Ctx, wasm)
	if err != nil {
		tb.Fatalf("compiling %s: %v", name, err)
	}
	h.Module, err = h.Runtime.InstantiateModule(h.Ctx, compiled, mc)
	if err != nil {
		tb.Fatalf("instantiating %s: %v\nstderr:\n%s", name, err, h.Stderr.String())
	}
	h.AllocFn = h.Module.ExportedFunction(abi.ExportAlloc)
	h.OpenFn = h.Module.ExportedFunction(abi.ExportOpen)
	h.ProcessFn = h.Module.ExportedFunction(abi.ExportProcess)
	h.OnTimerFn = h.Module.ExportedFunction(abi.ExportOnTimer)
	h.CloseFn = h.Module.ExportedFunction(abi.ExportClose)
	h.PlanFn = h.Module.ExportedFunction(abi.ExportPlan)
	return h
}

// Read returns n bytes of guest memory at p; ok is false when they are out
// of range.
func (h *Host) Read(p, n uint32) ([]byte, bool) { return h.Module.Memory().Read(p, n) }

// Write copies b into the guest's argument arena and returns its address.
func (h *Host) Write(b []byte) uint32 {
	h.TB.Helper()
	if uint32(len(b)) > h.ArenaSize || h.ArenaPtr == 0 {
		res, err := h.AllocFn.Call(h.Ctx, uint64(len(b)))
		if err != nil || res[0] == 0 {
			h.TB.Fatalf("wstream_alloc(%d) = %v, %v", len(b), res, err)
		}
		h.ArenaPtr, h.ArenaSize = api.DecodeU32(res[0]), uint32(len(b))
	}
	if !h.Module.Memory().Write(h.ArenaPtr, b) {
		h.TB.Fatalf("writing %d bytes at %#x: out of range", len(b), h.ArenaPtr)
	}
	return h.ArenaPtr
}

// Call calls an export and returns its status, or the error of a trap.
func (h *Host) Call(ctx context.Context, fn api.Function, args ...uint64) (int32, error) {
	res, err := fn.Call(ctx, args...)
	if err != nil {
		return 0, err
	}
	return api.DecodeI32(res[0]), nil
}

// MustOK fails the test unless a call returned OK.
func (h *Host) MustOK(what string, st int32, err error) {
	h.TB.Helper()
	if err != nil || st != abi.StatusOK {
		h.TB.Fatalf("%s: status %d (%s), error %v, failures %q\nstderr:\n%s", what, st, abi.StatusText(st), err, h.Failures, h.Stderr.String())
	}
}

// MustABIVersion fails the test unless wstream_abi_version returns
// abi.Version.
func (h *Host) MustABIVersion() {
	h.TB.Helper()
	st, err := h.Call(h.Ctx, h.Module.ExportedFunction(abi.ExportABIVersion))
	if err != nil || st != abi.Version {
		h.TB.Fatalf("wstream_abi_version = %d, %v; want %d", st, err, abi.Version)
	}
}

// MustPlan calls wstream_plan and returns the plan it points at, or nil when
// it returns 0 (no plan).
func (h *Host) MustPlan() []byte {
	h.TB.Helper()
	res, err := h.PlanFn.Call(h.Ctx)
	if err != nil {
		h.TB.Fatal(err)
	}
	if res[0] == 0 {
		return nil
	}
	b, ok := h.Read(uint32(res[0]>>32), uint32(res[0]))
	if !ok {
		h.TB.Fatalf("wstream_plan = %#x: out of memory range", res[0])
	}
	return b
}

// OpenOp calls wstream_open for operator name with config cfg in slot op.
func (h *Host) OpenOp(op int32, name, cfg string) (int32, error) {
	p := h.Write([]byte(name + cfg))
	return h.Call(h.Ctx, h.OpenFn, uint64(op), uint64(p), uint64(len(name)), uint64(p)+uint64(len(name)), uint64(len(cfg)))
}

// MustOpen is OpenOp, failing the test unless it returns OK.
func (h *Host) MustOpen(op int32, name, cfg string) {
	h.TB.Helper()
	st, err := h.OpenOp(op, name, cfg)
	h.MustOK("open "+name, st, err)
}

// ProcessCtx calls wstream_process on slot op with the batch recs.
func (h *Host) ProcessCtx(ctx context.Context, op int32, recs []abi.Record) (int32, error) {
	b := abi.Encode(recs)
	p := h.Write(b)
	return h.Call(ctx, h.ProcessFn, uint64(op), uint64(p), uint64(len(b)))
}

// MustProcess is ProcessCtx with h.Ctx, failing the test unless it returns
// OK.
func (h *Host) MustProcess(op int32, recs ...abi.Record) {
	h.TB.Helper()
	st, err := h.ProcessCtx(h.Ctx, op, recs)
	h.MustOK("process", st, err)
}

// DueTimers removes and returns, in firing order, the timers of domain
// that are due at t, as a wstream_on_timer batch; nil if there are none.
func (h *Host) DueTimers(domain int32, t int64) []byte {
	var due []TimerKey
	for tk := range h.Timers {
		if tk.Domain == domain && tk.TS <= t {
			due = append(due, tk)
		}
	}
	if len(due) == 0 {
		return nil
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].TS != due[j].TS {
			return due[i].TS < due[j].TS
		}
		return due[i].Key+"\x00"+due[i].NS < due[j].Key+"\x00"+due[j].NS
	})
	var bb abi.Builder
	for _, tk := range due {
		delete(h.Timers, tk)
		bb.Add(uint32(tk.Domain), tk.TS, []byte(tk.Key), []byte(tk.NS))
	}
	return bb.Bytes()
}

// Fire calls wstream_on_timer with the timers of domain due at t, if any.
func (h *Host) Fire(op int32, domain int32, t int64) (int32, error) {
	b := h.DueTimers(domain, t)
	if b == nil {
		return abi.StatusOK, nil
	}
	p := h.Write(b)
	return h.Call(h.Ctx, h.OnTimerFn, uint64(op), uint64(p), uint64(len(b)))
}

// Advance sets the watermark and fires the event-time timers it reached, in
// time order, in one wstream_on_timer call.
func (h *Host) Advance(op int32, wm int64) {
	h.TB.Helper()
	h.Watermark = wm
	st, err := h.Fire(op, abi.TimeEvent, wm)
	h.MustOK("on_timer", st, err)
}

// MustClose calls wstream_close on slot op, failing the test unless it
// returns OK.
func (h *Host) MustClose(op int32) {
	h.TB.Helper()
	st, err := h.Call(h.Ctx, h.CloseFn, uint64(op))
	h.MustOK("close", st, err)
}

// Take returns the records emitted so far and forgets them.
func (h *Host) Take() []abi.Record {
	out := h.Out
	h.Out = nil
	return out
}

// Rec is a record on port 0.
func Rec(key, value string, ts int64) abi.Record {
	return abi.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts}
}
