//go:build wasip1

package wstream

import (
	"unsafe"

	"github.com/wstream/wstream/abi"
)

// The host functions of abi/ABI.md. Slices cross as (pointer, length) pairs
// into the module's linear memory; the host copies what it keeps, so nothing
// passed here escapes.

//go:wasmimport wstream emit
//go:noescape
func importEmit(port uint32, ts int64, key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32) int32

//go:wasmimport wstream emit_batch
//go:noescape
func importEmitBatch(batch unsafe.Pointer, n uint32) int32

//go:wasmimport wstream output_index
func importOutputIndex(name string) int32

//go:wasmimport wstream state_register
func importStateRegister(name string, kind int32) int32

//go:wasmimport wstream state_get
//go:noescape
func importStateGet(h int32, key unsafe.Pointer, keyLen uint32, ns unsafe.Pointer, nsLen uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wstream state_put
//go:noescape
func importStatePut(h int32, key unsafe.Pointer, keyLen uint32, ns unsafe.Pointer, nsLen uint32, val unsafe.Pointer, valLen uint32) int32

//go:wasmimport wstream state_delete
//go:noescape
func importStateDelete(h int32, key unsafe.Pointer, keyLen uint32, ns unsafe.Pointer, nsLen uint32) int32

//go:wasmimport wstream state_iter
//go:noescape
func importStateIter(h int32, key unsafe.Pointer, keyLen uint32, prefix unsafe.Pointer, prefixLen uint32, after unsafe.Pointer, afterLen int32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wstream timer_register
//go:noescape
func importTimerRegister(domain int32, key unsafe.Pointer, keyLen uint32, ns unsafe.Pointer, nsLen uint32, ts int64) int32

//go:wasmimport wstream timer_delete
//go:noescape
func importTimerDelete(domain int32, key unsafe.Pointer, keyLen uint32, ns unsafe.Pointer, nsLen uint32, ts int64) int32

//go:wasmimport wstream state_get_many
//go:noescape
func importStateGetMany(h int32, req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wstream state_write_batch
//go:noescape
func importStateWriteBatch(batch unsafe.Pointer, n uint32) int32

//go:wasmimport wstream current_watermark
func importWatermark() int64

//go:wasmimport wstream processing_time
func importProcessingTime() int64

//go:wasmimport wstream log
func importLog(level int32, msg string)

//go:wasmimport wstream fail
func importFail(msg string)

//go:wasmimport wstream progress_at
func importProgressAt(p unsafe.Pointer) int32

//go:wasmimport wstream commit
func importCommit(done uint32) int32

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// addr is the address of b in linear memory, for the (ptr, len) pairs of
// the batched state lists. The cache keeps every slice it passes alive
// until the host is done with it.
func addr(b []byte) uint32 { return uint32(uintptr(ptr(b))) }

// resetAddrs forgets what addr handed out: nothing to do in wasm.
func resetAddrs() {}

func hostEmit(port uint32, ts int64, key, value []byte) int32 {
	return importEmit(port, ts, ptr(key), uint32(len(key)), ptr(value), uint32(len(value)))
}

func hostEmitBatch(b []byte) int32 { return importEmitBatch(ptr(b), uint32(len(b))) }

func hostOutputIndex(name string) int32 { return importOutputIndex(name) }

func hostStateRegister(name string, kind int32) int32 { return importStateRegister(name, kind) }

func hostStateGet(h int32, key, ns, out []byte) int32 {
	return importStateGet(h, ptr(key), uint32(len(key)), ptr(ns), uint32(len(ns)), ptr(out), uint32(len(out)))
}

func hostStatePut(h int32, key, ns, value []byte) int32 {
	return importStatePut(h, ptr(key), uint32(len(key)), ptr(ns), uint32(len(ns)), ptr(value), uint32(len(value)))
}

func hostStateDelete(h int32, key, ns []byte) int32 {
	return importStateDelete(h, ptr(key), uint32(len(key)), ptr(ns), uint32(len(ns)))
}

func hostStateIter(h int32, key, prefix, after []byte, hasAfter bool, out []byte) int32 {
	afterLen := int32(-1)
	if hasAfter {
		afterLen = int32(len(after))
	}
	return importStateIter(h, ptr(key), uint32(len(key)), ptr(prefix), uint32(len(prefix)), ptr(after), afterLen, ptr(out), uint32(len(out)))
}

func hostStateGetMany(h int32, req, out []byte) int32 {
	return importStateGetMany(h, ptr(req), uint32(len(req)), ptr(out), uint32(len(out)))
}

func hostStateWriteBatch(b []byte) int32 { return importStateWriteBatch(ptr(b), uint32(len(b))) }

func hostTimerRegister(domain int32, key, ns []byte, ts int64) int32 {
	return importTimerRegister(domain, ptr(key), uint32(len(key)), ptr(ns), uint32(len(ns)), ts)
}

func hostTimerDelete(domain int32, key, ns []byte, ts int64) int32 {
	return importTimerDelete(domain, ptr(key), uint32(len(key)), ptr(ns), uint32(len(ns)), ts)
}

func hostWatermark() int64 { return importWatermark() }

func hostProcessingTime() int64 { return importProcessingTime() }

func hostLog(level int32, msg string) { importLog(level, msg) }

func hostFail(msg string) { importFail(msg) }

func hostProgressAt(p *uint32) int32 { return importProgressAt(unsafe.Pointer(p)) }

func hostCommit(done uint32) int32 { return importCommit(done) }

// The exports of abi/ABI.md.

//go:wasmexport wstream_abi_version
func exportABIVersion() int32 { return abi.Version }

//go:wasmexport wstream_alloc
func exportAlloc(size int32) uint32 {
	a := mod.alloc(size)
	if a == nil {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&a[0])))
}

// arg resolves an argument region the host wrote into the arena.
func arg(export string, p uint32, n int32) ([]byte, bool) {
	var base uint64
	if len(mod.arena) > 0 {
		base = uint64(uintptr(unsafe.Pointer(&mod.arena[0])))
	}
	b, ok := mod.region(base, p, n)
	if !ok {
		badPointer(export, p, n, len(mod.arena))
	}
	return b, ok
}

//go:wasmexport wstream_open
func exportOpen(op int32, namePtr uint32, nameLen int32, cfgPtr uint32, cfgLen int32) int32 {
	name, ok := arg(abi.ExportOpen, namePtr, nameLen)
	if !ok {
		return abi.StatusBadPointer
	}
	cfg, ok := arg(abi.ExportOpen, cfgPtr, cfgLen)
	if !ok {
		return abi.StatusBadPointer
	}
	return mod.open(op, name, cfg)
}

//go:wasmexport wstream_process
func exportProcess(op int32, p uint32, n int32) int32 {
	b, ok := arg(abi.ExportProcess, p, n)
	if !ok {
		return abi.StatusBadPointer
	}
	return mod.process(op, b)
}

//go:wasmexport wstream_on_timer
func exportOnTimer(op int32, p uint32, n int32) int32 {
	b, ok := arg(abi.ExportOnTimer, p, n)
	if !ok {
		return abi.StatusBadPointer
	}
	return mod.onTimer(op, b)
}

//go:wasmexport wstream_close
func exportClose(op int32) int32 { return mod.close(op) }

//go:wasmexport wstream_plan
func exportPlan() uint64 {
	if len(mod.plan) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&mod.plan[0])))<<32 | uint64(len(mod.plan))
}

//go:wasmexport wstream_migrate
func exportMigrate(opPtr uint32, opLen int32, statePtr uint32, stateLen int32, version int32,
	keyPtr uint32, keyLen int32, nsPtr uint32, nsLen int32, valPtr uint32, valLen int32) int64 {
	var args [5][]byte
	for i, r := range [5]struct {
		p uint32
		n int32
	}{{opPtr, opLen}, {statePtr, stateLen}, {keyPtr, keyLen}, {nsPtr, nsLen}, {valPtr, valLen}} {
		b, ok := arg(abi.ExportMigrate, r.p, r.n)
		if !ok {
			return int64(abi.StatusBadPointer)
		}
		args[i] = b
	}
	v, st := mod.migrate(args[0], args[1], version, args[2], args[3], args[4])
	if st != abi.StatusOK {
		return int64(st)
	}
	if len(v) == 0 {
		return 0
	}
	return int64(uint64(uintptr(unsafe.Pointer(&v[0])))<<32 | uint64(len(v)))
}

//go:wasmexport wstream_pre_barrier
func exportPreBarrier(op int32, id int64) int32 { return mod.checkpoint(hookPreBarrier, op, id) }

//go:wasmexport wstream_checkpoint_complete
func exportCheckpointComplete(op int32, id int64) int32 {
	return mod.checkpoint(hookComplete, op, id)
}

//go:wasmexport wstream_checkpoint_aborted
func exportCheckpointAborted(op int32, id int64) int32 {
	return mod.checkpoint(hookAborted, op, id)
}
