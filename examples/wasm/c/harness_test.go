package cexamples_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testmod"
)

// The harness is a minimal wstream host: every import of abi/ABI.md over
// in-memory state and timers, without key groups or limits. It checks the C
// SDK against the ABI (and runs the Go twins of the examples, to compare);
// the worker's host is tested on its own.

var (
	cacheOnce sync.Once
	cache     wazero.CompilationCache
	wasmMu    sync.Mutex
	wasmBins  = map[string][]byte{}
)

// moduleBytes builds a module once per test binary: "NAME" is the C module
// examples/wasm/c/NAME, "go/NAME" the Go one in examples/wasm/go/NAME.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	wasmMu.Lock()
	defer wasmMu.Unlock()
	if b, ok := wasmBins[name]; ok {
		return b
	}
	var path string
	var err error
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		path, err = testmod.BuildGo("examples/wasm/go/" + goName)
	} else {
		path, err = testmod.BuildC("examples/wasm/c/" + name)
	}
	if err != nil {
		tb.Fatalf("building the %s module: %v", name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	wasmBins[name] = b
	return b
}

func runtimeConfig() wazero.RuntimeConfig {
	cacheOnce.Do(func() { cache = wazero.NewCompilationCache() })
	return wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(true)
}

type stateKey struct {
	h       int32
	key, ns string
}

type timerKey struct {
	domain  int32
	key, ns string
	ts      int64
}

type logLine struct {
	level int32
	msg   string
}

type host struct {
	tb      testing.TB
	ctx     context.Context
	rt      wazero.Runtime
	mod     api.Module
	stderr  bytes.Buffer
	outputs []string // the vertex's outputs; emits to other ports are BAD_OUTPUT

	wm        int64
	states    map[string]int32
	kinds     []int32
	state     map[stateKey][]byte
	timers    map[timerKey]bool
	out       []abi.Record // emitted records, copied
	batches   int          // emit_batch calls
	emits     int          // emit calls
	iterCalls int          // state_iter calls
	discard   bool         // count emitted records instead of keeping them
	emitted   int          // records emitted while discarding
	failures  []string
	logs      []logLine
	alloc     api.Function
	open      api.Function
	process   api.Function
	onTimer   api.Function
	closeFn   api.Function
	planFn    api.Function
	arenaPtr  uint32
	arenaSize uint32
}

type hostOption func(*host, *wazero.RuntimeConfig)

// withoutDeadlineChecks compiles the module without the checks that let a
// context deadline stop a running call.
func withoutDeadlineChecks() hostOption {
	return func(_ *host, c *wazero.RuntimeConfig) { *c = (*c).WithCloseOnContextDone(false) }
}

func withOutputs(names ...string) hostOption {
	return func(h *host, _ *wazero.RuntimeConfig) { h.outputs = names }
}

// newHost instantiates the named module (see moduleBytes) against the
// harness.
func newHost(tb testing.TB, name string, opts ...hostOption) *host {
	tb.Helper()
	h := &host{
		tb:      tb,
		ctx:     context.Background(),
		outputs: []string{"main"},
		wm:      abi.MinWatermark,
		states:  map[string]int32{},
		state:   map[stateKey][]byte{},
		timers:  map[timerKey]bool{},
	}
	cfg := runtimeConfig()
	for _, o := range opts {
		o(h, &cfg)
	}
	h.rt = wazero.NewRuntimeWithConfig(h.ctx, cfg)
	tb.Cleanup(func() { h.rt.Close(context.Background()) })
	if _, err := h.hostModule().Instantiate(h.ctx); err != nil {
		tb.Fatalf("instantiating the wstream host module: %v", err)
	}
	mc := wazero.NewModuleConfig().WithName(name).WithStderr(&h.stderr)
	if strings.HasPrefix(name, "go/") {
		wasi_snapshot_preview1.MustInstantiate(h.ctx, h.rt)
		mc = mc.WithStartFunctions("_initialize")
	}
	compiled, err := h.rt.CompileModule(h.ctx, moduleBytes(tb, name))
	if err != nil {
		tb.Fatalf("compiling %s: %v", name, err)
	}
	h.mod, err = h.rt.InstantiateModule(h.ctx, compiled, mc)
	if err != nil {
		tb.Fatalf("instantiating %s: %v\nstderr:\n%s", name, err, h.stderr.String())
	}
	h.alloc = h.mod.ExportedFunction(abi.ExportAlloc)
	h.open = h.mod.ExportedFunction(abi.ExportOpen)
	h.process = h.mod.ExportedFunction(abi.ExportProcess)
	h.onTimer = h.mod.ExportedFunction(abi.ExportOnTimer)
	h.closeFn = h.mod.ExportedFunction(abi.ExportClose)
	h.planFn = h.mod.ExportedFunction(abi.ExportPlan)
	return h
}

func (h *host) read(p, n uint32) ([]byte, bool) { return h.mod.Memory().Read(p, n) }

func (h *host) hostModule() wazero.HostModuleBuilder {
	const i32, i64 = api.ValueTypeI32, api.ValueTypeI64
	b := h.rt.NewHostModuleBuilder(abi.ImportModule)
	fn := func(name string, params, results []api.ValueType, f func(m api.Module, s []uint64)) {
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) { f(m, s) }), params, results).Export(name)
	}
	status := func(s []uint64, st int32) { s[0] = api.EncodeI32(st) }
	// bytesAt reads a (ptr, len) pair; ok is false for an out-of-range pair.
	bytesAt := func(s []uint64, i int) ([]byte, bool) {
		return h.read(api.DecodeU32(s[i]), api.DecodeU32(s[i+1]))
	}
	fn(abi.ImportEmit, []api.ValueType{i32, i64, i32, i32, i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		port := api.DecodeU32(s[0])
		k, ok1 := bytesAt(s, 2)
		v, ok2 := bytesAt(s, 4)
		switch {
		case !ok1 || !ok2:
			status(s, abi.StatusBadPointer)
		case int(port) >= len(h.outputs):
			status(s, abi.StatusBadOutput)
		default:
			h.emits++
			h.out = append(h.out, abi.Record{Port: port, Timestamp: int64(s[1]), Key: bytes.Clone(k), Value: bytes.Clone(v)})
			status(s, abi.StatusOK)
		}
	})
	fn(abi.ImportEmitBatch, []api.ValueType{i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		b, ok := bytesAt(s, 0)
		if !ok {
			status(s, abi.StatusBadPointer)
			return
		}
		if h.discard {
			h.batches++
			h.emitted += abi.Count(b)
			status(s, abi.StatusOK)
			return
		}
		recs, err := abi.Decode(b)
		if err != nil {
			status(s, abi.StatusBadArgument)
			return
		}
		for _, r := range recs {
			if int(r.Port) >= len(h.outputs) {
				status(s, abi.StatusBadOutput)
				return
			}
		}
		h.batches++
		for _, r := range recs {
			r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
			h.out = append(h.out, r)
		}
		status(s, abi.StatusOK)
	})
	fn(abi.ImportOutputIndex, []api.ValueType{i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		name, _ := bytesAt(s, 0)
		for i, o := range h.outputs {
			if o == string(name) {
				status(s, int32(i))
				return
			}
		}
		status(s, abi.StatusBadOutput)
	})
	fn(abi.ImportStateRegister, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		name, _ := bytesAt(s, 0)
		kind := api.DecodeI32(s[2])
		if hd, ok := h.states[string(name)]; ok {
			if h.kinds[hd] != kind {
				status(s, abi.StatusBadArgument)
				return
			}
			status(s, hd)
			return
		}
		hd := int32(len(h.kinds))
		h.states[string(name)] = hd
		h.kinds = append(h.kinds, kind)
		status(s, hd)
	})
	fn(abi.ImportStateGet, []api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}, func(m api.Module, s []uint64) {
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		v, ok := h.state[stateKey{api.DecodeI32(s[0]), string(k), string(ns)}]
		if !ok {
			status(s, abi.StatusNotFound)
			return
		}
		if len(v) <= int(api.DecodeU32(s[6])) && !m.Memory().Write(api.DecodeU32(s[5]), v) {
			status(s, abi.StatusBadPointer)
			return
		}
		status(s, int32(len(v)))
	})
	fn(abi.ImportStatePut, []api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		v, _ := bytesAt(s, 5)
		h.state[stateKey{api.DecodeI32(s[0]), string(k), string(ns)}] = bytes.Clone(v)
		status(s, abi.StatusOK)
	})
	fn(abi.ImportStateDelete, []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}, func(_ api.Module, s []uint64) {
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		delete(h.state, stateKey{api.DecodeI32(s[0]), string(k), string(ns)})
		status(s, abi.StatusOK)
	})
	fn(abi.ImportStateIter, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}, func(m api.Module, s []uint64) {
		h.iterCalls++
		hd := api.DecodeI32(s[0])
		k, _ := bytesAt(s, 1)
		prefix, _ := bytesAt(s, 3)
		afterLen := api.DecodeI32(s[6])
		var after []byte
		if afterLen >= 0 {
			after, _ = h.read(api.DecodeU32(s[5]), uint32(afterLen))
		}
		var nss []string
		for sk := range h.state {
			if sk.h == hd && sk.key == string(k) && strings.HasPrefix(sk.ns, string(prefix)) && (afterLen < 0 || sk.ns > string(after)) {
				nss = append(nss, sk.ns)
			}
		}
		sort.Strings(nss)
		var page []byte
		for _, ns := range nss {
			v := h.state[stateKey{hd, string(k), ns}]
			if len(page)+8+len(ns)+len(v) > int(api.DecodeU32(s[8])) {
				if len(page) == 0 {
					status(s, abi.StatusLimit)
					return
				}
				break
			}
			page = fmt.Appendf(page, "%s%s", le32(len(ns)), le32(len(v)))
			page = append(append(page, ns...), v...)
		}
		m.Memory().Write(api.DecodeU32(s[7]), page)
		status(s, int32(len(page)))
	})
	timer := func(register bool) func(api.Module, []uint64) {
		return func(_ api.Module, s []uint64) {
			k, _ := bytesAt(s, 1)
			ns, _ := bytesAt(s, 3)
			tk := timerKey{api.DecodeI32(s[0]), string(k), string(ns), int64(s[5])}
			if tk.domain != abi.TimeEvent && tk.domain != abi.TimeProcessing {
				status(s, abi.StatusBadArgument)
				return
			}
			if register {
				h.timers[tk] = true
			} else {
				delete(h.timers, tk)
			}
			status(s, abi.StatusOK)
		}
	}
	fn(abi.ImportTimerRegister, []api.ValueType{i32, i32, i32, i32, i32, i64}, []api.ValueType{i32}, timer(true))
	fn(abi.ImportTimerDelete, []api.ValueType{i32, i32, i32, i32, i32, i64}, []api.ValueType{i32}, timer(false))
	fn(abi.ImportWatermark, nil, []api.ValueType{i64}, func(_ api.Module, s []uint64) { s[0] = uint64(h.wm) })
	fn(abi.ImportProcTime, nil, []api.ValueType{i64}, func(_ api.Module, s []uint64) { s[0] = 1_700_000_000_000 })
	fn(abi.ImportLog, []api.ValueType{i32, i32, i32}, nil, func(_ api.Module, s []uint64) {
		msg, _ := bytesAt(s, 1)
		h.logs = append(h.logs, logLine{api.DecodeI32(s[0]), string(msg)})
	})
	fn(abi.ImportFail, []api.ValueType{i32, i32}, nil, func(_ api.Module, s []uint64) {
		msg, _ := bytesAt(s, 0)
		h.failures = append(h.failures, string(msg))
	})
	return b
}

func le32(n int) string {
	return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
}

// write copies b into the guest's argument arena and returns its address.
func (h *host) write(b []byte) uint32 {
	h.tb.Helper()
	if uint32(len(b)) > h.arenaSize || h.arenaPtr == 0 {
		res, err := h.alloc.Call(h.ctx, uint64(len(b)))
		if err != nil || res[0] == 0 {
			h.tb.Fatalf("wstream_alloc(%d) = %v, %v", len(b), res, err)
		}
		h.arenaPtr, h.arenaSize = api.DecodeU32(res[0]), uint32(len(b))
	}
	if !h.mod.Memory().Write(h.arenaPtr, b) {
		h.tb.Fatalf("writing %d bytes at %#x: out of range", len(b), h.arenaPtr)
	}
	return h.arenaPtr
}

// call calls an export and returns its status, or the error of a trap.
func (h *host) call(ctx context.Context, fn api.Function, args ...uint64) (int32, error) {
	res, err := fn.Call(ctx, args...)
	if err != nil {
		return 0, err
	}
	return api.DecodeI32(res[0]), nil
}

// mustOK fails the test unless a call returned OK.
func (h *host) mustOK(what string, st int32, err error) {
	h.tb.Helper()
	if err != nil || st != abi.StatusOK {
		h.tb.Fatalf("%s: status %d (%s), error %v, failures %q\nstderr:\n%s", what, st, abi.StatusText(st), err, h.failures, h.stderr.String())
	}
}

func (h *host) openOp(op int32, name, cfg string) (int32, error) {
	p := h.write([]byte(name + cfg))
	return h.call(h.ctx, h.open, uint64(op), uint64(p), uint64(len(name)), uint64(p)+uint64(len(name)), uint64(len(cfg)))
}

func (h *host) mustOpen(op int32, name, cfg string) {
	h.tb.Helper()
	st, err := h.openOp(op, name, cfg)
	h.mustOK("open "+name, st, err)
}

func (h *host) processCtx(ctx context.Context, op int32, recs []abi.Record) (int32, error) {
	b := abi.Encode(recs)
	p := h.write(b)
	return h.call(ctx, h.process, uint64(op), uint64(p), uint64(len(b)))
}

func (h *host) mustProcess(op int32, recs ...abi.Record) {
	h.tb.Helper()
	st, err := h.processCtx(h.ctx, op, recs)
	h.mustOK("process", st, err)
}

// dueTimers removes and returns, in firing order, the timers of domain
// that are due at t.
func (h *host) dueTimers(domain int32, t int64) []byte {
	var due []timerKey
	for tk := range h.timers {
		if tk.domain == domain && tk.ts <= t {
			due = append(due, tk)
		}
	}
	if len(due) == 0 {
		return nil
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].ts != due[j].ts {
			return due[i].ts < due[j].ts
		}
		return due[i].key+"\x00"+due[i].ns < due[j].key+"\x00"+due[j].ns
	})
	var bb abi.Builder
	for _, tk := range due {
		delete(h.timers, tk)
		bb.Add(uint32(tk.domain), tk.ts, []byte(tk.key), []byte(tk.ns))
	}
	return bb.Bytes()
}

// fire calls wstream_on_timer with the timers of domain due at t, if any.
func (h *host) fire(op int32, domain int32, t int64) (int32, error) {
	b := h.dueTimers(domain, t)
	if b == nil {
		return abi.StatusOK, nil
	}
	p := h.write(b)
	return h.call(h.ctx, h.onTimer, uint64(op), uint64(p), uint64(len(b)))
}

// advance sets the watermark and fires the event-time timers it reached, in
// time order, in one wstream_on_timer call.
func (h *host) advance(op int32, wm int64) {
	h.tb.Helper()
	h.wm = wm
	st, err := h.fire(op, abi.TimeEvent, wm)
	h.mustOK("on_timer", st, err)
}

func (h *host) mustClose(op int32) {
	h.tb.Helper()
	st, err := h.call(h.ctx, h.closeFn, uint64(op))
	h.mustOK("close", st, err)
}

// take returns the records emitted so far and forgets them.
func (h *host) take() []abi.Record {
	out := h.out
	h.out = nil
	return out
}

func rec(key, value string, ts int64) abi.Record {
	return abi.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts}
}
