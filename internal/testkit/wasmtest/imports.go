package wasmtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	"sort"
	"strings"

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
	fn := func(name string, f func(m api.Module, s []uint64)) {
		sig, ok := Imports[name]
		if !ok {
			panic("wasmtest: no signature for import " + name)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) { f(m, s) }), sig.Params, sig.Results).Export(name)
	}
	status := func(s []uint64, st int32) { s[0] = api.EncodeI32(st) }
	// bytesAt reads a (ptr, len) pair; ok is false for an out-of-range pair.
	bytesAt := func(s []uint64, i int) ([]byte, bool) {
		return h.Read(api.DecodeU32(s[i]), api.DecodeU32(s[i+1]))
	}
	fn(abi.ImportEmit, func(_ api.Module, s []uint64) {
		port := api.DecodeU32(s[0])
		k, ok1 := bytesAt(s, 2)
		v, ok2 := bytesAt(s, 4)
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
	})
	fn(abi.ImportEmitBatch, func(_ api.Module, s []uint64) {
		b, ok := bytesAt(s, 0)
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
	})
	fn(abi.ImportOutputIndex, func(_ api.Module, s []uint64) {
		name, _ := bytesAt(s, 0)
		for i, o := range h.Outputs {
			if o == string(name) {
				status(s, int32(i))
				return
			}
		}
		status(s, abi.StatusBadOutput)
	})
	fn(abi.ImportStateRegister, func(_ api.Module, s []uint64) {
		name, _ := bytesAt(s, 0)
		kind := api.DecodeI32(s[2])
		if hd, ok := h.States[string(name)]; ok {
			if h.Kinds[hd] != kind {
				status(s, abi.StatusBadArgument)
				return
			}
			status(s, hd)
			return
		}
		hd := int32(len(h.Kinds))
		h.States[string(name)] = hd
		h.Kinds = append(h.Kinds, kind)
		status(s, hd)
	})
	fn(abi.ImportStateGet, func(m api.Module, s []uint64) {
		h.GetCalls++
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		v, ok := h.State[StateKey{api.DecodeI32(s[0]), string(k), string(ns)}]
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
	fn(abi.ImportStatePut, func(_ api.Module, s []uint64) {
		h.PutCalls++
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		v, _ := bytesAt(s, 5)
		h.State[StateKey{api.DecodeI32(s[0]), string(k), string(ns)}] = bytes.Clone(v)
		status(s, abi.StatusOK)
	})
	fn(abi.ImportStateDelete, func(_ api.Module, s []uint64) {
		h.DeleteCalls++
		k, _ := bytesAt(s, 1)
		ns, _ := bytesAt(s, 3)
		delete(h.State, StateKey{api.DecodeI32(s[0]), string(k), string(ns)})
		status(s, abi.StatusOK)
	})
	fn(abi.ImportStateIter, func(m api.Module, s []uint64) {
		h.IterCalls++
		hd := api.DecodeI32(s[0])
		k, _ := bytesAt(s, 1)
		prefix, _ := bytesAt(s, 3)
		afterLen := api.DecodeI32(s[6])
		var after []byte
		if afterLen >= 0 {
			after, _ = h.Read(api.DecodeU32(s[5]), uint32(afterLen))
		}
		var nss []string
		for sk := range h.State {
			if sk.Handle == hd && sk.Key == string(k) && strings.HasPrefix(sk.NS, string(prefix)) && (afterLen < 0 || sk.NS > string(after)) {
				nss = append(nss, sk.NS)
			}
		}
		sort.Strings(nss)
		var page []byte
		for _, ns := range nss {
			v := h.State[StateKey{hd, string(k), ns}]
			if len(page)+8+len(ns)+len(v) > int(api.DecodeU32(s[8])) {
				if len(page) == 0 {
					status(s, abi.StatusLimit)
					return
				}
				break
			}
			page = binary.LittleEndian.AppendUint32(page, uint32(len(ns)))
			page = binary.LittleEndian.AppendUint32(page, uint32(len(v)))
			page = append(append(page, ns...), v...)
		}
		m.Memory().Write(api.DecodeU32(s[7]), page)
		status(s, int32(len(page)))
	})
	// pairAt reads the (ptr, len) pairs at b[at:at+16] of a list entry.
	pairAt := func(b []byte, at int) (k, ns []byte, ok bool) {
		k, ok1 := h.Read(binary.LittleEndian.Uint32(b[at:]), binary.LittleEndian.Uint32(b[at+4:]))
		ns, ok2 := h.Read(binary.LittleEndian.Uint32(b[at+8:]), binary.LittleEndian.Uint32(b[at+12:]))
		return k, ns, ok1 && ok2
	}
	fn(ImportStateGetMany, func(m api.Module, s []uint64) {
		h.GetManyCalls++
		req, ok1 := bytesAt(s, 1)
		out, ok2 := bytesAt(s, 3)
		if !ok1 || !ok2 {
			status(s, abi.StatusBadPointer)
			return
		}
		if len(req)%16 != 0 {
			status(s, abi.StatusBadArgument)
			return
		}
		n := len(req) / 16
		if n > 1<<16 || 12*n > len(out) {
			status(s, abi.StatusLimit)
			return
		}
		hd, outPtr := api.DecodeI32(s[0]), api.DecodeU32(s[3])
		// Read every request before writing: out may overlap them.
		res := make([]byte, 12*n)
		var vals []byte
		firsts := map[StateKey]int{}
		need := 12 * n
		for j := range n {
			k, ns, ok := pairAt(req, 16*j)
			if !ok {
				status(s, abi.StatusBadPointer)
				return
			}
			sk := StateKey{hd, string(k), string(ns)}
			r := res[12*j:]
			if f, ok := firsts[sk]; ok {
				binary.LittleEndian.PutUint32(r, uint32(f))
				copy(r[4:12], res[12*f+4:12*f+12])
				continue
			}
			firsts[sk] = j
			binary.LittleEndian.PutUint32(r, uint32(j))
			v, found := h.State[sk]
			if !found {
				binary.LittleEndian.PutUint32(r[4:], uint32(api.EncodeI32(abi.StatusNotFound)))
				continue
			}
			binary.LittleEndian.PutUint32(r[4:], uint32(len(v)))
			if 12*n+len(vals)+len(v) <= len(out) {
				binary.LittleEndian.PutUint32(r[8:], outPtr+uint32(12*n+len(vals)))
				vals = append(vals, v...)
			}
			need += len(v)
		}
		m.Memory().Write(outPtr, append(res, vals...))
		status(s, int32(need))
	})
	fn(ImportStateWriteBatch, func(_ api.Module, s []uint64) {
		h.WriteBatchCalls++
		b, ok := bytesAt(s, 0)
		if !ok {
			status(s, abi.StatusBadPointer)
			return
		}
		if len(b)%28 != 0 {
			status(s, abi.StatusBadArgument)
			return
		}
		type write struct {
			k   StateKey
			v   []byte
			del bool
		}
		var ws []write
		for ; len(b) > 0; b = b[28:] {
			k, ns, ok := pairAt(b, 4)
			vl := int32(binary.LittleEndian.Uint32(b[24:]))
			w := write{k: StateKey{int32(binary.LittleEndian.Uint32(b)), string(k), string(ns)}, del: vl == -1}
			switch {
			case vl < -1:
				status(s, abi.StatusBadArgument)
				return
			case !w.del:
				v, okv := h.Read(binary.LittleEndian.Uint32(b[20:]), uint32(vl))
				ok = ok && okv
				w.v = bytes.Clone(v)
			}
			if !ok {
				status(s, abi.StatusBadPointer)
				return
			}
			ws = append(ws, w)
		}
		for _, w := range ws {
			if w.del {
				delete(h.State, w.k)
			} else {
				h.State[w.k] = w.v
			}
		}
		status(s, abi.StatusOK)
	})
	timer := func(register bool) func(api.Module, []uint64) {
		return func(_ api.Module, s []uint64) {
			k, _ := bytesAt(s, 1)
			ns, _ := bytesAt(s, 3)
			tk := TimerKey{api.DecodeI32(s[0]), string(k), string(ns), int64(s[5])}
			if tk.Domain != abi.TimeEvent && tk.Domain != abi.TimeProcessing {
				status(s, abi.StatusBadArgument)
				return
			}
			if register {
				h.Timers[tk] = true
			} else {
				delete(h.Timers, tk)
			}
			status(s, abi.StatusOK)
		}
	}
	fn(abi.ImportTimerRegister, timer(true))
	fn(abi.ImportTimerDelete, timer(false))
	fn(abi.ImportWatermark, func(_ api.Module, s []uint64) { s[0] = uint64(h.Watermark) })
	fn(abi.ImportProcTime, func(_ api.Module, s []uint64) { s[0] = procTime })
	fn(abi.ImportLog, func(_ api.Module, s []uint64) {
		msg, _ := bytesAt(s, 1)
		h.Logs = append(h.Logs, LogLine{api.DecodeI32(s[0]), string(msg)})
	})
	fn(abi.ImportFail, func(_ api.Module, s []uint64) {
		msg, _ := bytesAt(s, 0)
		h.Failures = append(h.Failures, string(msg))
	})
	fn(abi.ImportProgressAt, func(_ api.Module, s []uint64) {
		h.ProgressAt = uint32(s[0])
		status(s, abi.StatusOK)
	})
	fn(abi.ImportCommit, func(_ api.Module, s []uint64) {
		if done := api.DecodeI32(s[0]); done > 0 {
			h.Commits = append(h.Commits, Commit{Done: int(done), Emitted: len(h.Out) + h.Emitted, State: maps.Clone(h.State)})
		}
		status(s, int32(h.CommitEvery))
	})
	return b
}
