//go:build !wasip1

package wstream

import "github.com/wstream/wstream/abi"

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
	timerRegister(domain int32, key, ns []byte, ts int64) int32
	timerDelete(domain int32, key, ns []byte, ts int64) int32
	watermark() int64
	processingTime() int64
	log(level int32, msg string)
	fail(msg string)
}

var host hostABI = noHost{}

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
func (noHost) watermark() int64                                 { return abi.MinWatermark }
func (noHost) processingTime() int64                            { return 0 }
func (noHost) log(int32, string)                                {}
func (noHost) fail(string)                                      {}
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
