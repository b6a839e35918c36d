package wasmtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

// procTime is what wstream_proc_time returns.
const procTime = 1_700_000_000_000

// hostModule builds the wstream import module over h's fields, with the
// signatures of Imports.
func (h *Host) hostModule() wazero.HostModuleBuilder {
	b := h.Runtime.NewHostModuleBuilder(abi.ImportModule)
	for name, f := range h.imports() {
		sig, ok := Imports[name]
		if !ok {
			panic("wasmtest: no signature for import " + name)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) { f(m, s) }), sig.Params, sig.Results).Export(name)
	}
	return b
}

// hostFunc is one import: the calling module and the wasm stack.
type hostFunc = func(m api.Module, s []uint64)

// imports maps every import name to its implementation: records out, state
// (per entry and batched), timers, and the rest.
func (h *Host) imports() map[string]hostFunc {
	return map[string]hostFunc{
		abi.ImportEmit:          h.emit,
		abi.ImportEmitBatch:     h.emitBatch,
		abi.ImportOutputIndex:   h.outputIndex,
		abi.ImportStateRegister: h.stateRegister,
		abi.ImportStateGet:      h.stateGet,
		abi.ImportStatePut:      h.statePut,
		abi.ImportStateDelete:   h.stateDelete,
		abi.ImportStateIter:     h.stateIter,
		ImportStateGetMany:      h.stateGetMany,
		ImportStateWriteBatch:   h.stateWriteBatch,
		abi.ImportTimerRegister: h.timer(true),
		abi.ImportTimerDelete:   h.timer(false),
		abi.ImportWatermark:     func(_ api.Module, s []uint64) { s[0] = uint64(h.Watermark) },
		abi.ImportProcTime:      func(_ api.Module, s []uint64) { s[0] = procTime },
		abi.ImportLog:           h.log,
		abi.ImportFail:          h.fail,
		abi.ImportProgressAt:    h.progressAt,
		abi.ImportCommit:        h.commit,
	}
}

func status(s []uint64, st int32) { s[0] = api.EncodeI32(st) }

// bytesAt reads the (ptr, len) pair at s[i:i+2]; ok is false for an
// out-of-range pair.
func (h *Host) bytesAt(s []uint64, i int) ([]byte, bool) {
	return h.Read(api.DecodeU32(s[i]), api.DecodeU32(s[i+1]))
}

// pairAt reads the (ptr, len) pairs at b[at:at+16] of a list entry.
func (h *Host) pairAt(b []byte, at int) (k, ns []byte, ok bool) {
	k, ok1 := h.Read(binary.LittleEndian.Uint32(b[at:]), binary.LittleEndian.Uint32(b[at+4:]))
	ns, ok2 := h.Read(binary.LittleEndian.Uint32(b[at+8:]), binary.LittleEndian.Uint32(b[at+12:]))
	return k, ns, ok1 && ok2
}

// emit copies one record to Out.
func (h *Host) emit(_ api.Module, s []uint64) {
	port := api.DecodeU32(s[0])
	k, ok1 := h.bytesAt(s, 2)
	v, ok2 := h.bytesAt(s, 4)
	switch {
	case !ok1 || !ok2:
		status(s, abi.StatusBadPointer)
	case int(port) >= len(h.Outputs):
		status(s, abi.StatusBadOutput)
	default:
		h.Emits++
		h.Out = append(h.Out, abi.Record{Port: port, Timestamp: int64(s[1]), Key: bytes.Clone(k), Value: bytes.Clone(v)})
		status(s, abi.StatusOK)
	}
}

// emitBatch decodes a batch into Out, or counts it while Discard is set.
func (h *Host) emitBatch(_ api.Module, s []uint64) {
	b, ok := h.bytesAt(s, 0)
	if !ok {
		status(s, abi.StatusBadPointer)
		return
	}
	if h.Discard {
		h.Batches++
		h.Emitted += abi.Count(b)
		status(s, abi.StatusOK)
		return
	}
	recs, err := abi.Decode(b)
	if err != nil {
		status(s, abi.StatusBadArgument)
		return
	}
	for _, r := range recs {
		if int(r.Port) >= len(h.Outputs) {
			status(s, abi.StatusBadOutput)
			return
		}
	}
	h.Batches++
	for _, r := range recs {
		r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		h.Out = append(h.Out, r)
	}
	status(s, abi.StatusOK)
}

// outputIndex answers the port of an output name.
func (h *Host) outputIndex(_ api.Module, s []uint64) {
	name, _ := h.bytesAt(s, 0)
	for i, o := range h.Outputs {
		if o == string(name) {
			status(s, int32(i))
			return
		}
	}
	status(s, abi.StatusBadOutput)
}

// log records a wstream_log line.
func (h *Host) log(_ api.Module, s []uint64) {
	msg, _ := h.bytesAt(s, 1)
	h.Logs = append(h.Logs, LogLine{api.DecodeI32(s[0]), string(msg)})
}

// fail records a wstream_fail message.
func (h *Host) fail(_ api.Module, s []uint64) {
	msg, _ := h.bytesAt(s, 0)
	h.Failures = append(h.Failures, string(msg))
}

// progressAt records the progress address.
func (h *Host) progressAt(_ api.Module, s []uint64) {
	h.ProgressAt = uint32(s[0])
	status(s, abi.StatusOK)
}

// commit records a commit point and answers CommitEvery.
func (h *Host) commit(_ api.Module, s []uint64) {
	if done := api.DecodeI32(s[0]); done > 0 {
		h.Commits = append(h.Commits, Commit{Done: int(done), Emitted: len(h.Out) + h.Emitted, State: maps.Clone(h.State)})
	}
	status(s, int32(h.CommitEvery))
}
