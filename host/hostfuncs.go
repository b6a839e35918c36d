package host

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// The host functions of module "wstream" (abi/ABI.md, "Imports"). Each is
// stack based: parameters arrive in stack[0:], the result goes to
// stack[0]. Every pointer/length pair is checked against guest memory
// before use; a pair out of range makes the function return
// StatusBadPointer and log the function and operator. None of them retains
// guest memory: Memory.Read returns a view, and what outlives the call is
// copied.

// hostFunc describes one host function for the module builder and for
// import validation.
type hostFunc struct {
	name    string
	fn      api.GoModuleFunc
	params  []string // parameter names, for wazero's diagnostics
	types   []api.ValueType
	results []api.ValueType
}

var hostFuncs = []hostFunc{
	{abi.ImportEmit, hostEmit, []string{"port", "ts", "key_ptr", "key_len", "val_ptr", "val_len"},
		[]api.ValueType{i32, i64, i32, i32, i32, i32}, []api.ValueType{i32}},
	{abi.ImportEmitBatch, hostEmitBatch, []string{"batch_ptr", "batch_len"},
		[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	{abi.ImportOutputIndex, hostOutputIndex, []string{"name_ptr", "name_len"},
		[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	{abi.ImportStateRegister, hostStateRegister, []string{"name_ptr", "name_len", "kind"},
		[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	{abi.ImportStateGet, hostStateGet, []string{"h", "key_ptr", "key_len", "ns_ptr", "ns_len", "out_ptr", "out_cap"},
		[]api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	{abi.ImportStatePut, hostStatePut, []string{"h", "key_ptr", "key_len", "ns_ptr", "ns_len", "val_ptr", "val_len"},
		[]api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	{abi.ImportStateDelete, hostStateDelete, []string{"h", "key_ptr", "key_len", "ns_ptr", "ns_len"},
		[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	{abi.ImportStateIter, hostStateIter, []string{"h", "key_ptr", "key_len", "prefix_ptr", "prefix_len", "after_ptr", "after_len", "out_ptr", "out_cap"},
		[]api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	{ImportStateGetMany, hostStateGetMany, []string{"h", "req_ptr", "req_len", "out_ptr", "out_cap"},
		[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	{ImportStateWriteBatch, hostStateWriteBatch, []string{"batch_ptr", "batch_len"},
		[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	{abi.ImportTimerRegister, hostTimerRegister, []string{"domain", "key_ptr", "key_len", "ns_ptr", "ns_len", "ts"},
		[]api.ValueType{i32, i32, i32, i32, i32, i64}, []api.ValueType{i32}},
	{abi.ImportTimerDelete, hostTimerDelete, []string{"domain", "key_ptr", "key_len", "ns_ptr", "ns_len", "ts"},
		[]api.ValueType{i32, i32, i32, i32, i32, i64}, []api.ValueType{i32}},
	{abi.ImportWatermark, hostWatermark, nil, nil, []api.ValueType{i64}},
	{abi.ImportProcTime, hostProcTime, nil, nil, []api.ValueType{i64}},
	{abi.ImportLog, hostLog, []string{"level", "ptr", "len"}, []api.ValueType{i32, i32, i32}, nil},
	{abi.ImportFail, hostFail, []string{"ptr", "len"}, []api.ValueType{i32, i32}, nil},
	{abi.ImportProgressAt, hostProgressAt, []string{"ptr"}, []api.ValueType{i32}, []api.ValueType{i32}},
	{abi.ImportCommit, hostCommit, []string{"done"}, []api.ValueType{i32}, []api.ValueType{i32}},
}

// instantiateHostModule instantiates module "wstream" once per runtime.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) (api.Module, error) {
	b := rt.NewHostModuleBuilder(abi.ImportModule)
	for _, f := range hostFuncs {
		b.NewFunctionBuilder().
			WithGoModuleFunction(f.fn, f.types, f.results).
			WithParameterNames(f.params...).
			Export(f.name)
	}
	return b.Instantiate(ctx)
}

// Indices of the host functions in hostFuncs, for Instance.hostCalls.
const (
	hfEmit = iota
	hfEmitBatch
	hfOutputIndex
	hfStateRegister
	hfStateGet
	hfStatePut
	hfStateDelete
	hfStateIter
	hfStateGetMany
	hfStateWriteBatch
	hfTimerRegister
	hfTimerDelete
	hfWatermark
	hfProcTime
	hfLog
	hfFail
	hfProgressAt
	hfCommit
	numHostFuncs
)

// count counts a call of host function k (an index in hostFuncs) in the
// instance of the call in progress (nil: none): a plain increment, which
// the slot's CallStats takes once the guest call returns.
func (i *Instance) count(k int) {
	if i != nil {
		i.hostCalls[k]++
	}
}

// emptyBytes is a non-nil empty slice: state_iter's "after" distinguishes
// an empty namespace (after_len 0) from none (after_len -1).
var emptyBytes = []byte{}

// view returns guest memory [ptr, ptr+n) without copying. A negative n or a
// range past the end of memory is not ok; an empty range always is.
func view(mem api.Memory, ptr, n uint64) ([]byte, bool) {
	l := int32(uint32(n))
	if l < 0 {
		return nil, false
	}
	if l == 0 {
		return nil, true
	}
	return mem.Read(uint32(ptr), uint32(l))
}

func setStatus(stack []uint64, st int32) { stack[0] = api.EncodeI32(st) }

// callback returns the instance of ctx and the operator slot of the
// callback in progress; the slot is nil outside a callback.
func callback(ctx context.Context) (*Instance, *slot) {
	i := instanceOf(ctx)
	if i == nil || i.phase == phaseIdle {
		return i, nil
	}
	return i, i.cur
}

// read is view that reports an out-of-range pair for function fn's
// argument arg.
func (i *Instance) read(mem api.Memory, fn, arg string, ptr, n uint64) ([]byte, bool) {
	b, ok := view(mem, ptr, n)
	if !ok {
		op, sub := i.who(i.cur)
		i.logf(abi.LogWarn, "operator %s subtask %d: %s.%s: %s pointer %#x with length %d lies outside guest memory (%d bytes); returning BAD_POINTER",
			op, sub, abi.ImportModule, fn, arg, uint32(ptr), int32(uint32(n)), mem.Size())
	}
	return b, ok
}

// status maps an error from Services or the Collector to a status code.
// Failures the guest cannot fix are kept and returned from the call, so the
// job fails even if the guest ignores the status.
func (i *Instance) status(err error) int32 {
	st := operator.Status(err)
	if st == abi.StatusStateError {
		// On the error path only: errors.As makes its target escape.
		var mq *operator.MemoryQuotaError
		if errors.As(err, &mq) {
			// What the host would hold for the call is over the
			// tenant's memory quota: a quota, which stops the call as
			// the others do.
			overQuota("MemoryBytes", int(i.memPages)*pageSize, "%s", mq.What)
		}
		if i.fatal == nil {
			i.fatal = err
		}
	}
	return st
}

// hostEmit is emit(port i32, ts i64, key_ptr i32, key_len i32, val_ptr i32,
// val_len i32) -> i32: one record to output port. The slow path: prefer
// emit_batch.
var hostEmit = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfEmit)
	if s == nil || i.out == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	key, ok := i.read(mem, abi.ImportEmit, "key", stack[2], stack[3])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	val, ok := i.read(mem, abi.ImportEmit, "value", stack[4], stack[5])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	port := uint32(stack[0])
	if uint64(port) >= uint64(len(s.outputs)) {
		setStatus(stack, abi.StatusBadOutput)
		return
	}
	i.chargeOutput(1, abi.RecordHeaderSize+len(key)+len(val))
	if err := i.out.Emit(port, int64(stack[1]), key, val); err != nil {
		setStatus(stack, i.status(err))
		return
	}
	setStatus(stack, abi.StatusOK)
})

// hostEmitBatch is emit_batch(batch_ptr i32, batch_len i32) -> i32: every
// record of an encoded batch (ports are output indexes). The whole batch is
// checked before anything is forwarded.
//
//	batch  := count:u32 record{count}
//	record := port:u32 ts:i64 klen:u32 vlen:u32 key[klen] value[vlen]
var hostEmitBatch = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfEmitBatch)
	if s == nil || i.out == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	b, ok := i.read(mod.Memory(), abi.ImportEmitBatch, "batch", stack[0], stack[1])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	maxPort, st := checkBatch(b, len(s.outputs))
	if st != abi.StatusOK {
		setStatus(stack, st)
		return
	}
	// A well-formed batch has exactly the records its header counts.
	i.chargeOutput(abi.Count(b), len(b)-abi.BatchHeaderSize)
	var err error
	if cc, ok := i.out.(operator.CheckedCollector); ok {
		err = cc.EmitCheckedBatch(b, maxPort)
	} else {
		err = i.out.EmitBatch(b)
	}
	if err != nil {
		setStatus(stack, i.status(err))
		return
	}
	setStatus(stack, abi.StatusOK)
})

// checkBatch validates an emitted batch: BAD_ARGUMENT when it is malformed
// anywhere, else BAD_OUTPUT when a record's port is not below outputs. It
// returns the largest port of a valid batch too.
func checkBatch(b []byte, outputs int) (maxPort uint32, st int32) {
	maxPort, ok := abi.MaxPort(b)
	if !ok {
		return 0, abi.StatusBadArgument
	}
	if uint64(maxPort) >= uint64(outputs) {
		return 0, abi.StatusBadOutput
	}
	return maxPort, abi.StatusOK
}

// hostOutputIndex is output_index(name_ptr i32, name_len i32) -> i32: the
// position of the named output in the operator's outputs, or BAD_OUTPUT.
var hostOutputIndex = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfOutputIndex)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	name, ok := i.read(mod.Memory(), abi.ImportOutputIndex, "name", stack[0], stack[1])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	for j, o := range s.outputs {
		if string(name) == o {
			setStatus(stack, int32(j))
			return
		}
	}
	setStatus(stack, abi.StatusBadOutput)
})

// hostStateRegister is state_register(name_ptr i32, name_len i32, kind i32)
// -> i32: a state handle ≥ 0. Only inside wstream_open.
var hostStateRegister = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateRegister)
	if s == nil || i.phase != phaseOpen {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	name, ok := i.read(mod.Memory(), abi.ImportStateRegister, "name", stack[0], stack[1])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	kind := int32(uint32(stack[2]))
	switch {
	case len(name) == 0 || (kind != abi.StateValue && kind != abi.StateMap):
		setStatus(stack, abi.StatusBadArgument)
		return
	case len(name) > operator.MaxNameSize:
		setStatus(stack, abi.StatusLimit)
		return
	}
	h, err := s.svc.RegisterState(string(name), kind)
	if err != nil {
		setStatus(stack, i.status(err))
		return
	}
	setStatus(stack, h)
})

// keyNS reads the (key, namespace) pair of the state and timer functions
// from stack[at:at+4].
func (i *Instance) keyNS(mem api.Memory, fn string, stack []uint64, at int) (key, ns []byte, ok bool) {
	if key, ok = i.read(mem, fn, "key", stack[at], stack[at+1]); !ok {
		return nil, nil, false
	}
	ns, ok = i.read(mem, fn, "namespace", stack[at+2], stack[at+3])
	return key, ns, ok
}

// maxScratch bounds the state_get buffer kept between calls.
const maxScratch = 1 << 20

// hostStateGet is state_get(h i32, key_ptr i32, key_len i32, ns_ptr i32,
// ns_len i32, out_ptr i32, out_cap i32) -> i32: the value's length n ≥ 0,
// copied to out only when n ≤ out_cap; NOT_FOUND when absent.
var hostStateGet = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateGet)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	key, ns, ok := i.keyNS(mem, abi.ImportStateGet, stack, 1)
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	out, ok := i.read(mem, abi.ImportStateGet, "out", stack[5], stack[6])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	if i.keyTooLong(key, ns) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	// The value lands in a host buffer first: the backend must not write
	// into guest memory that may overlap the key it is still reading.
	val, err := s.svc.StateGet(int32(uint32(stack[0])), key, ns, i.scratch[:0])
	if err != nil {
		setStatus(stack, i.status(err))
		return
	}
	if len(val) > cap(i.scratch) && len(val) <= maxScratch {
		i.scratch = make([]byte, 0, len(val))
	}
	if len(val) <= len(out) {
		copy(out, val)
	}
	setStatus(stack, int32(len(val)))
})

// hostStatePut is state_put(h i32, key_ptr i32, key_len i32, ns_ptr i32,
// ns_len i32, val_ptr i32, val_len i32) -> i32.
var hostStatePut = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStatePut)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	key, ns, ok := i.keyNS(mem, abi.ImportStatePut, stack, 1)
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	val, ok := i.read(mem, abi.ImportStatePut, "value", stack[5], stack[6])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	if len(val) > i.q.valueBytes || i.keyTooLong(key, ns) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	i.chargeState(len(key) + len(ns) + len(val))
	setStatus(stack, i.status(s.svc.StatePut(int32(uint32(stack[0])), key, ns, val)))
})

// hostStateDelete is state_delete(h i32, key_ptr i32, key_len i32, ns_ptr
// i32, ns_len i32) -> i32; deleting an absent entry is OK.
var hostStateDelete = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateDelete)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	key, ns, ok := i.keyNS(mod.Memory(), abi.ImportStateDelete, stack, 1)
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	if i.keyTooLong(key, ns) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	i.chargeState(len(key) + len(ns))
	setStatus(stack, i.status(s.svc.StateDelete(int32(uint32(stack[0])), key, ns)))
})

// hostStateIter is state_iter(h i32, key_ptr i32, key_len i32, prefix_ptr
// i32, prefix_len i32, after_ptr i32, after_len i32, out_ptr i32, out_cap
// i32) -> i32: the number of bytes of whole entries written to out, 0 at
// the end, LIMIT when the first entry does not fit. after_len -1 starts at
// the first entry.
//
//	entry := ns_len:u32 val_len:u32 ns[ns_len] value[val_len]
var hostStateIter = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfStateIter)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	mem := mod.Memory()
	key, ok := i.read(mem, abi.ImportStateIter, "key", stack[1], stack[2])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	prefix, ok := i.read(mem, abi.ImportStateIter, "prefix", stack[3], stack[4])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	var after []byte
	if int32(uint32(stack[6])) != -1 {
		if after, ok = i.read(mem, abi.ImportStateIter, "after", stack[5], stack[6]); !ok {
			setStatus(stack, abi.StatusBadPointer)
			return
		}
	}
	out, ok := i.read(mem, abi.ImportStateIter, "out", stack[7], stack[8])
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	if i.keyTooLong(key, nil) || i.keyTooLong(prefix, after) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	// Entries are written into out while the backend still reads the
	// arguments, which the guest may have placed inside out: copy them.
	hasAfter := int32(uint32(stack[6])) != -1
	a := append(i.iterArgs[:0], key...)
	a = append(a, prefix...)
	a = append(a, after...)
	i.iterArgs = a
	k, p := len(key), len(key)+len(prefix)
	key, prefix, after = a[:k:k], a[k:p:p], nil
	if hasAfter {
		after = a[p:len(a):len(a)]
		if len(after) == 0 {
			after = emptyBytes
		}
	}
	i.iterOut, i.iterN, i.iterFull = out, 0, false
	err := s.svc.StateIter(int32(uint32(stack[0])), key, prefix, after, i.iterFn)
	n, full := i.iterN, i.iterFull
	i.iterOut = nil
	switch {
	case err != nil:
		setStatus(stack, i.status(err))
	case n == 0 && full:
		setStatus(stack, abi.StatusLimit)
	default:
		setStatus(stack, int32(n))
	}
})

// iterEntry appends one state_iter entry to the guest's buffer, stopping
// the iteration at the first entry that does not fit.
func (i *Instance) iterEntry(ns, value []byte) bool {
	need := 8 + uint64(len(ns)) + uint64(len(value))
	if need > uint64(len(i.iterOut)-i.iterN) {
		i.iterFull = true
		return false
	}
	b := i.iterOut[i.iterN:]
	binary.LittleEndian.PutUint32(b, uint32(len(ns)))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(value)))
	copy(b[8:], ns)
	copy(b[8+len(ns):], value)
	i.iterN += int(need)
	return true
}

// timer is timer_register and timer_delete: (domain i32, key_ptr i32,
// key_len i32, ns_ptr i32, ns_len i32, ts i64) -> i32.
func timer(ctx context.Context, mod api.Module, stack []uint64, fn string, k int, delete bool) {
	i, s := callback(ctx)
	i.count(k)
	if s == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	key, ns, ok := i.keyNS(mod.Memory(), fn, stack, 1)
	if !ok {
		setStatus(stack, abi.StatusBadPointer)
		return
	}
	domain := int32(uint32(stack[0]))
	if domain != abi.TimeEvent && domain != abi.TimeProcessing {
		setStatus(stack, abi.StatusBadArgument)
		return
	}
	if i.keyTooLong(key, ns) {
		setStatus(stack, abi.StatusLimit)
		return
	}
	ts := int64(stack[5])
	// A timer is state in the subtask's store until it fires: its
	// registration and deletion count as state writes of the call.
	i.chargeState(len(key) + len(ns))
	book := i.q.timerBook()
	var id, keyID uint64
	if book {
		id, keyID = i.timers.ids(s.index, domain, ts, key, ns)
	}
	if delete {
		err := s.svc.DeleteTimer(domain, key, ns, ts)
		if err == nil && book {
			i.timers.remove(id)
		}
		setStatus(stack, i.status(err))
		return
	}
	booked := book && i.timers.has(id)
	due := false
	if !booked {
		// A timer the operator registers already due while it fires
		// timers of that domain fires in the same firing. Without the
		// book (no count quota), registering one twice counts twice.
		due = i.phase == phaseTimer && domain == i.timerDomain && i.cur == s &&
			((domain == abi.TimeEvent && ts <= s.svc.Watermark()) ||
				(domain == abi.TimeProcessing && ts <= s.svc.ProcessingTime()))
		i.checkTimer(s, keyID, len(key)+len(ns), due, book)
	}
	err := s.svc.RegisterTimer(domain, key, ns, ts)
	if err == nil && !booked {
		if book {
			i.timers.add(id, keyID, len(key)+len(ns))
		}
		if due {
			s.cascade++
		}
	}
	setStatus(stack, i.status(err))
}

// hostTimerRegister is timer_register(domain i32, key_ptr i32, key_len i32,
// ns_ptr i32, ns_len i32, ts i64) -> i32.
var hostTimerRegister = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	timer(ctx, mod, stack, abi.ImportTimerRegister, hfTimerRegister, false)
})

// hostTimerDelete is timer_delete(domain i32, key_ptr i32, key_len i32,
// ns_ptr i32, ns_len i32, ts i64) -> i32; deleting an absent timer is OK.
var hostTimerDelete = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	timer(ctx, mod, stack, abi.ImportTimerDelete, hfTimerDelete, true)
})

// hostWatermark is current_watermark() -> i64: the subtask's event-time
// watermark; MinWatermark outside a callback.
var hostWatermark = api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfWatermark)
	if s != nil {
		stack[0] = uint64(s.svc.Watermark())
		return
	}
	stack[0] = api.EncodeI64(abi.MinWatermark)
})

// hostProcTime is processing_time() -> i64: the wall clock in milliseconds.
var hostProcTime = api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfProcTime)
	if s != nil {
		stack[0] = uint64(s.svc.ProcessingTime())
		return
	}
	stack[0] = uint64(time.Now().UnixMilli())
})

// hostLog is log(level i32, ptr i32, len i32): a message for the worker's
// log, through the operator's Services inside a callback; escaped, cut to
// Limits.MaxMessageBytes, and subject to Limits.LogLinesPerSecond.
var hostLog = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i := instanceOf(ctx)
	i.count(hfLog)
	if i == nil {
		return
	}
	msg, ok := i.read(mod.Memory(), abi.ImportLog, "message", stack[1], stack[2])
	if !ok || !i.logs.allow(i) {
		return
	}
	text := EscapeGuestText(msg, i.q.messageBytes, false)
	level := int32(uint32(stack[0]))
	if _, s := callback(ctx); s != nil {
		s.svc.Log(level, text)
		return
	}
	op, sub := i.who(nil)
	i.r.log(level, op, sub, text)
})

// hostFail is fail(ptr i32, len i32): records the message the host fails
// the call with, escaped and cut to Limits.MaxMessageBytes. The first
// message of a call wins.
var hostFail = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	i.count(hfFail)
	if i == nil {
		return
	}
	msg, ok := i.read(mod.Memory(), abi.ImportFail, "message", stack[0], stack[1])
	if s == nil && i.phase != phaseMigrate {
		if ok {
			i.logf(abi.LogError, "%s.%s called outside a callback: %s", abi.ImportModule, abi.ImportFail,
				EscapeGuestText(msg, i.q.messageBytes, false))
		}
		return
	}
	if i.failed {
		return
	}
	i.failed = true
	if !ok {
		i.failMsg = append(i.failMsg[:0], "the guest called fail with a message pointer outside its memory"...)
		return
	}
	i.failMsg = append(i.failMsg[:0], EscapeGuestText(msg, i.q.messageBytes, false)...)
})

// hostProgressAt is progress_at(ptr i32) -> i32: the guest names the
// address of a little-endian u32 in its memory where its batch callbacks
// keep the index of the record or timer in progress (0 turns it off). The
// host sets it to 0xFFFFFFFF before each wstream_process and
// wstream_on_timer and reads it when the call fails: dead-letter mode then
// knows which record failed without searching (Instance.FailedAt).
//
//	ptr ──▶ ┌──────────────┐
//	        │ index u32 le │  0xFFFFFFFF: no record in progress
//	        └──────────────┘
//
// Result: OK, or BAD_ARGUMENT for an address that is not 4-aligned or
// whose 4 bytes are not in memory.
var hostProgressAt = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	i.count(hfProgressAt)
	ptr := uint32(stack[0])
	if ptr != 0 && (ptr%4 != 0 || uint64(ptr)+4 > uint64(mod.Memory().Size())) {
		setStatus(stack, abi.StatusBadArgument)
		return
	}
	i.progress = ptr
	setStatus(stack, abi.StatusOK)
})

// hostCommit is commit(done i32) -> i32: in wstream_process or
// wstream_on_timer, the guest says that the first done records (or
// timers) of the call's batch are done: their output emitted, their
// state written. When the call fails later, a host that asked for commit
// points (an operator.Committer collector: dead-letter mode) keeps that
// work and undoes only what came after. The result is how many records
// the host would have the guest process before its next commit point, 0
// for none: commit(0) at the start of a call asks without committing.
//
// Result: the interval (≥ 0), NOT_IN_CALLBACK outside a batch call,
// BAD_ARGUMENT for done below what was committed before in the call or not
// below the batch's count (the end of the call commits everything), or
// the collector's error.
var hostCommit = api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
	i, s := callback(ctx)
	if s == nil || !i.inBatch {
		setStatus(stack, abi.StatusNotInCallback)
		return
	}
	i.count(hfCommit)
	done := int(int32(uint32(stack[0])))
	if done < i.committed || done >= i.inputs {
		setStatus(stack, abi.StatusBadArgument)
		return
	}
	if done > i.committed && i.commitEvery > 0 {
		if err := i.out.(operator.Committer).Commit(done); err != nil {
			setStatus(stack, i.status(err))
			return
		}
	}
	i.committed = done
	setStatus(stack, int32(i.commitEvery))
})
