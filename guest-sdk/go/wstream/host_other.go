//go:build !wasip1

package wstream

import (
	"unsafe"

	"github.com/wstream/wstream/abi"
)

// Outside a wasip1 module there is no wstream host: the package compiles so
// that host-side tools (go build ./..., go vet) work, and every host call
// reports NOT_IN_CALLBACK. The package's own tests install a fake host.

// hostABI mirrors the host functions of abi/ABI.md with slices for
// (pointer, length) pairs.
type hostABI interface {
	emit(port uint32, ts int64, key, value []byte) int32
	emitBatch(b []byte) int32
	outputIndex(name string) int32
	stateRegister(name string, kind int32) int32
	stateGet(h int32, key, ns, out []byte) int32
	statePut(h int32, key, ns, value []byte) int32
	stateDelete(h int32, key, ns []byte) int32
	stateIter(h int32, key, prefix, after []byte, hasAfter bool, out []byte) int32
	stateGetMany(h int32, req, out []byte) int32
	stateWriteBatch(b []byte) int32
	timerRegister(domain int32, key, ns []byte, ts int64) int32
	timerDelete(domain int32, key, ns []byte, ts int64) int32
	watermark() int64
	processingTime() int64
	log(level int32, msg string)
	fail(msg string)
	commit(done uint32) int32
}

var host hostABI = noHost{}

// Outside wasm a slice has no 32-bit address: addr hands out addresses in
// a made-up space, resolve maps them back, for a fake host to read the
// (ptr, len) pairs of the batched state lists. resetAddrs empties it, at
// the end of every callback.
var addrs struct {
	regions []addrRegion
	next    uint32
}

type addrRegion struct {
	base uint32
	b    []byte
}

func addr(b []byte) uint32 {
	if addrs.next == 0 {
		addrs.next = 1 << 16
	}
	// Bytes keep their address, as in wasm: a slice within one handed out
	// before has the address of its place in it.
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, r := range addrs.regions {
		q := uintptr(unsafe.Pointer(unsafe.SliceData(r.b)))
		if p >= q && p+uintptr(len(b)) <= q+uintptr(len(r.b)) {
			return r.base + uint32(p-q)
		}
	}
	base := addrs.next
	addrs.regions = append(addrs.regions, addrRegion{base, b})
	addrs.next += uint32(len(b)) + 1
	return base
}

// resolve returns the n bytes at a made-up address p.
func resolve(p, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	for _, r := range addrs.regions {
		if p >= r.base && uint64(p)+uint64(n) <= uint64(r.base)+uint64(len(r.b)) {
			return r.b[p-r.base : p-r.base+n], true
		}
	}
	return nil, false
}

func resetAddrs() {
	clear(addrs.regions)
	addrs.regions = addrs.regions[:0]
	addrs.next = 1 << 16
}

type noHost struct{}

func (noHost) emit(uint32, int64, []byte, []byte) int32         { return abi.StatusNotInCallback }
func (noHost) emitBatch([]byte) int32                           { return abi.StatusNotInCallback }
func (noHost) outputIndex(string) int32                         { return abi.StatusNotInCallback }
func (noHost) stateRegister(string, int32) int32                { return abi.StatusNotInCallback }
func (noHost) stateGet(int32, []byte, []byte, []byte) int32     { return abi.StatusNotInCallback }
func (noHost) statePut(int32, []byte, []byte, []byte) int32     { return abi.StatusNotInCallback }
func (noHost) stateDelete(int32, []byte, []byte) int32          { return abi.StatusNotInCallback }
func (noHost) timerRegister(int32, []byte, []byte, int64) int32 { return abi.StatusNotInCallback }
func (noHost) timerDelete(int32, []byte, []byte, int64) int32   { return abi.StatusNotInCallback }
func (noHost) stateGetMany(int32, []byte, []byte) int32         { return abi.StatusNotInCallback }
func (noHost) stateWriteBatch([]byte) int32                     { return abi.StatusNotInCallback }
func (noHost) watermark() int64                                 { return abi.MinWatermark }
func (noHost) processingTime() int64                            { return 0 }
func (noHost) log(int32, string)                                {}
func (noHost) fail(string)                                      {}
func (noHost) commit(uint32) int32                              { return abi.StatusNotInCallback }
func (noHost) stateIter(int32, []byte, []byte, []byte, bool, []byte) int32 {
	return abi.StatusNotInCallback
}

func hostEmit(port uint32, ts int64, key, value []byte) int32 { return host.emit(port, ts, key, value) }
func hostEmitBatch(b []byte) int32                            { return host.emitBatch(b) }
func hostOutputIndex(name string) int32                       { return host.outputIndex(name) }
func hostStateRegister(name string, kind int32) int32         { return host.stateRegister(name, kind) }
func hostStateGet(h int32, key, ns, out []byte) int32         { return host.stateGet(h, key, ns, out) }
func hostStatePut(h int32, key, ns, value []byte) int32       { return host.statePut(h, key, ns, value) }
func hostStateDelete(h int32, key, ns []byte) int32           { return host.stateDelete(h, key, ns) }
func hostStateIter(h int32, key, prefix, after []byte, hasAfter bool, out []byte) int32 {
	return host.stateIter(h, key, prefix, after, hasAfter, out)
}
func hostStateGetMany(h int32, req, out []byte) int32 { return host.stateGetMany(h, req, out) }
func hostStateWriteBatch(b []byte) int32              { return host.stateWriteBatch(b) }
func hostTimerRegister(domain int32, key, ns []byte, ts int64) int32 {
	return host.timerRegister(domain, key, ns, ts)
}
func hostTimerDelete(domain int32, key, ns []byte, ts int64) int32 {
	return host.timerDelete(domain, key, ns, ts)
}
func hostWatermark() int64            { return host.watermark() }
func hostProcessingTime() int64       { return host.processingTime() }
func hostLog(level int32, msg string) { host.log(level, msg) }
func hostFail(msg string)             { host.fail(msg) }
func hostCommit(done uint32) int32    { return host.commit(done) }

// hostProgressAt has nothing to tell outside wasm: the index stays in the
// guest's variable.
func hostProgressAt(*uint32) int32 { return abi.StatusOK }
