//go:build !wasip1

package wstream

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// fakeHost is an in-memory wstream host for the SDK's unit tests.
type fakeHost struct {
	outputs []string
	names   map[string]int32
	kinds   []int32
	state   map[fakeKey][]byte
	timers  map[fakeTimer]bool
	wm      int64
	now     int64

	batches [][]abi.Record // emit_batch calls, records copied
	emits   []abi.Record   // emit calls
	fails   []string
	logs    []string

	// Call counters and forced answers.
	wmCalls, getCalls, iterCalls, outputCalls int
	getManyCalls, writeBatchCalls, putCalls   int
	resBuf, valBuf                            []byte
	firsts                                    map[uint64]int
	force                                     map[string]int32 // import name -> status to return
	fixedGet                                  []byte           // when set, state_get answers it without a lookup
	discard                                   bool             // count emit_batch records instead of keeping them
	discarded                                 int

	// commitEvery is the interval commit answers (0: no commit points);
	// commits records each commit point marked, with what the host had
	// been handed by then.
	commitEvery int32
	commits     []fakeCommit
}

// fakeCommit is a commit point: the records done, and how many records the
// host had been emitted and state writes it had taken by then.
type fakeCommit struct {
	done            uint32
	emitted, writes int
}

type fakeKey struct {
	h       int32
	key, ns string
}

type fakeTimer struct {
	domain  int32
	key, ns string
	ts      int64
}

// install resets the module, installs a fresh fake host and returns it.
func install(t *testing.T) *fakeHost {
	t.Helper()
	f := &fakeHost{
		outputs: []string{"main"},
		names:   map[string]int32{},
		state:   map[fakeKey][]byte{},
		timers:  map[fakeTimer]bool{},
		wm:      abi.MinWatermark,
		force:   map[string]int32{},
	}
	saved := mod
	mod = module{}
	host = f
	// Panic stacks go to the test log instead of the terminal.
	panicOut = tlogWriter{t}
	t.Cleanup(func() { mod, host, panicOut = saved, noHost{}, os.Stderr })
	return f
}

func (f *fakeHost) forced(name string) (int32, bool) {
	st, ok := f.force[name]
	return st, ok
}

func (f *fakeHost) emit(port uint32, ts int64, key, value []byte) int32 {
	if st, ok := f.forced(abi.ImportEmit); ok {
		return st
	}
	if int(port) >= len(f.outputs) {
		return abi.StatusBadOutput
	}
	f.emits = append(f.emits, abi.Record{Port: port, Timestamp: ts, Key: bytes.Clone(key), Value: bytes.Clone(value)})
	return abi.StatusOK
}

func (f *fakeHost) emitBatch(b []byte) int32 {
	if st, ok := f.forced(abi.ImportEmitBatch); ok {
		return st
	}
	if f.discard {
		f.discarded += abi.Count(b)
		return abi.StatusOK
	}
	recs, err := abi.Decode(b)
	if err != nil {
		return abi.StatusBadArgument
	}
	for i := range recs {
		if int(recs[i].Port) >= len(f.outputs) {
			return abi.StatusBadOutput
		}
		recs[i].Key, recs[i].Value = bytes.Clone(recs[i].Key), bytes.Clone(recs[i].Value)
	}
	f.batches = append(f.batches, recs)
	return abi.StatusOK
}

func (f *fakeHost) outputIndex(name string) int32 {
	f.outputCalls++
	for i, o := range f.outputs {
		if o == name {
			return int32(i)
		}
	}
	return abi.StatusBadOutput
}

func (f *fakeHost) stateRegister(name string, kind int32) int32 {
	if st, ok := f.forced(abi.ImportStateRegister); ok {
		return st
	}
	if h, ok := f.names[name]; ok {
		if f.kinds[h] != kind {
			return abi.StatusBadArgument
		}
		return h
	}
	h := int32(len(f.kinds))
	f.names[name] = h
	f.kinds = append(f.kinds, kind)
	return h
}

func (f *fakeHost) stateGet(h int32, key, ns, out []byte) int32 {
	f.getCalls++
	if st, ok := f.forced(abi.ImportStateGet); ok {
		return st
	}
	v := f.fixedGet
	if v == nil {
		var ok bool
		if v, ok = f.state[fakeKey{h, string(key), string(ns)}]; !ok {
			return abi.StatusNotFound
		}
	}
	if len(v) <= len(out) {
		copy(out, v)
	}
	return int32(len(v))
}

func (f *fakeHost) statePut(h int32, key, ns, value []byte) int32 {
	f.putCalls++
	if st, ok := f.forced(abi.ImportStatePut); ok {
		return st
	}
	f.state[fakeKey{h, string(key), string(ns)}] = bytes.Clone(value)
	return abi.StatusOK
}

func (f *fakeHost) stateDelete(h int32, key, ns []byte) int32 {
	if st, ok := f.forced(abi.ImportStateDelete); ok {
		return st
	}
	delete(f.state, fakeKey{h, string(key), string(ns)})
	return abi.StatusOK
}

func (f *fakeHost) stateIter(h int32, key, prefix, after []byte, hasAfter bool, out []byte) int32 {
	f.iterCalls++
	if st, ok := f.forced(abi.ImportStateIter); ok {
		return st
	}
	var nss []string
	for k := range f.state {
		if k.h == h && k.key == string(key) && strings.HasPrefix(k.ns, string(prefix)) && (!hasAfter || k.ns > string(after)) {
			nss = append(nss, k.ns)
		}
	}
	sort.Strings(nss)
	n := 0
	for _, ns := range nss {
		v := f.state[fakeKey{h, string(key), ns}]
		size := 8 + len(ns) + len(v)
		if n+size > len(out) {
			if n == 0 {
				return abi.StatusLimit
			}
			break
		}
		binary.LittleEndian.PutUint32(out[n:], uint32(len(ns)))
		binary.LittleEndian.PutUint32(out[n+4:], uint32(len(v)))
		copy(out[n+8:], ns)
		copy(out[n+8+len(ns):], v)
		n += size
	}
	return int32(n)
}

var fakeSeed = maphash.MakeSeed()

// pairs reads the (ptr, len) pairs at b[at:at+16] of a list entry.
func pairs(b []byte, at int) (k, ns []byte, ok bool) {
	k, ok1 := resolve(binary.LittleEndian.Uint32(b[at:]), binary.LittleEndian.Uint32(b[at+4:]))
	ns, ok2 := resolve(binary.LittleEndian.Uint32(b[at+8:]), binary.LittleEndian.Uint32(b[at+12:]))
	return k, ns, ok1 && ok2
}

func (f *fakeHost) stateGetMany(h int32, req, out []byte) int32 {
	f.getManyCalls++
	if st, ok := f.forced("state_get_many"); ok {
		return st
	}
	if len(req)%16 != 0 {
		return abi.StatusBadArgument
	}
	n := len(req) / 16
	if 12*n > len(out) {
		return abi.StatusLimit
	}
	outAddr := addr(out)
	// Buffers and the table of first requests are reused, so that the
	// fake host allocates nothing in TestNoAllocations.
	res := append(f.resBuf[:0], make([]byte, 12*n)...)
	vals := f.valBuf[:0]
	if f.firsts == nil {
		f.firsts = map[uint64]int{}
	}
	clear(f.firsts)
	need := 12 * n
	for j := range n {
		k, ns, ok := pairs(req, 16*j)
		if !ok {
			return abi.StatusBadPointer
		}
		hash := maphash.Bytes(fakeSeed, k)*31 ^ maphash.Bytes(fakeSeed, ns)
		r := res[12*j:]
		if first, ok := f.firsts[hash]; ok {
			if fk, fns, _ := pairs(req, 16*first); string(fk) == string(k) && string(fns) == string(ns) {
				binary.LittleEndian.PutUint32(r, uint32(first))
				copy(r[4:12], res[12*first+4:12*first+12])
				continue
			}
		}
		f.firsts[hash] = j
		binary.LittleEndian.PutUint32(r, uint32(j))
		v, found := f.fixedGet, f.fixedGet != nil
		if !found {
			v, found = f.state[fakeKey{h, string(k), string(ns)}]
		}
		if !found {
			binary.LittleEndian.PutUint32(r[4:], 0xffffffff) // NOT_FOUND
			continue
		}
		binary.LittleEndian.PutUint32(r[4:], uint32(len(v)))
		if 12*n+len(vals)+len(v) <= len(out) {
			binary.LittleEndian.PutUint32(r[8:], outAddr+uint32(12*n+len(vals)))
			vals = append(vals, v...)
		}
		need += len(v)
	}
	copy(out, res)
	copy(out[12*n:], vals)
	f.resBuf, f.valBuf = res, vals
	return int32(need)
}

func (f *fakeHost) stateWriteBatch(b []byte) int32 {
	f.writeBatchCalls++
	if len(b)%28 != 0 {
		return abi.StatusBadArgument
	}
	for ; len(b) > 0; b = b[28:] {
		h := int32(binary.LittleEndian.Uint32(b))
		k, ns, ok := pairs(b, 4)
		if !ok {
			return abi.StatusBadPointer
		}
		vl := int32(binary.LittleEndian.Uint32(b[24:]))
		var st int32
		switch {
		case vl == -1:
			st = f.stateDelete(h, k, ns)
		case vl < -1:
			return abi.StatusBadArgument
		default:
			v, ok := resolve(binary.LittleEndian.Uint32(b[20:]), uint32(vl))
			if !ok {
				return abi.StatusBadPointer
			}
			st = f.statePut(h, k, ns, v)
		}
		if st < 0 {
			return st
		}
	}
	return abi.StatusOK
}

func (f *fakeHost) timerRegister(domain int32, key, ns []byte, ts int64) int32 {
	if st, ok := f.forced(abi.ImportTimerRegister); ok {
		return st
	}
	f.timers[fakeTimer{domain, string(key), string(ns), ts}] = true
	return abi.StatusOK
}

func (f *fakeHost) timerDelete(domain int32, key, ns []byte, ts int64) int32 {
	delete(f.timers, fakeTimer{domain, string(key), string(ns), ts})
	return abi.StatusOK
}

func (f *fakeHost) watermark() int64 {
	f.wmCalls++
	return f.wm
}

func (f *fakeHost) processingTime() int64 { return f.now }

func (f *fakeHost) log(level int32, msg string) {
	f.logs = append(f.logs, string(rune('0'+level))+" "+msg)
}

func (f *fakeHost) fail(msg string) { f.fails = append(f.fails, msg) }

func (f *fakeHost) commit(done uint32) int32 {
	if st, ok := f.force[abi.ImportCommit]; ok && done > 0 {
		return st
	}
	if done > 0 {
		n := 0
		for _, b := range f.batches {
			n += len(b)
		}
		f.commits = append(f.commits, fakeCommit{done: done, emitted: n, writes: f.writeBatchCalls + f.putCalls})
	}
	return f.commitEvery
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(b []byte) (int, error) {
	w.t.Logf("stderr: %s", b)
	return len(b), nil
}

// out flattens the emitted batches.
func (f *fakeHost) out() []abi.Record {
	var all []abi.Record
	for _, b := range f.batches {
		all = append(all, b...)
	}
	return all
}
