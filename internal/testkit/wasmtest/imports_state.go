package wasmtest

import (
	"bytes"
	"encoding/binary"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

// stateRegister hands out a handle per state name and kind.
func (h *Host) stateRegister(_ api.Module, s []uint64) {
	name, _ := h.bytesAt(s, 0)
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
}

// stateGet copies a value out when it fits and answers its length.
func (h *Host) stateGet(m api.Module, s []uint64) {
	h.GetCalls++
	k, _ := h.bytesAt(s, 1)
	ns, _ := h.bytesAt(s, 3)
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
}

// statePut stores a copy of a value.
func (h *Host) statePut(_ api.Module, s []uint64) {
	h.PutCalls++
	k, _ := h.bytesAt(s, 1)
	ns, _ := h.bytesAt(s, 3)
	v, _ := h.bytesAt(s, 5)
	h.State[StateKey{api.DecodeI32(s[0]), string(k), string(ns)}] = bytes.Clone(v)
	status(s, abi.StatusOK)
}

// stateDelete removes one entry.
func (h *Host) stateDelete(_ api.Module, s []uint64) {
	h.DeleteCalls++
	k, _ := h.bytesAt(s, 1)
	ns, _ := h.bytesAt(s, 3)
	delete(h.State, StateKey{api.DecodeI32(s[0]), string(k), string(ns)})
	status(s, abi.StatusOK)
}

// stateIter writes a page of (ns, value) entries after a namespace, in order.
func (h *Host) stateIter(m api.Module, s []uint64) {
	h.IterCalls++
	hd := api.DecodeI32(s[0])
	k, _ := h.bytesAt(s, 1)
	prefix, _ := h.bytesAt(s, 3)
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
}

// stateGetMany answers a list of gets: a 12-byte result per request (first index, length
// or NOT_FOUND, value address) and the values after them while they fit.
func (h *Host) stateGetMany(m api.Module, s []uint64) {
	h.GetManyCalls++
	req, ok1 := h.bytesAt(s, 1)
	out, ok2 := h.bytesAt(s, 3)
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
		k, ns, ok := h.pairAt(req, 16*j)
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
}

// stateWriteBatch applies 28-byte put/delete entries, all or none.
func (h *Host) stateWriteBatch(_ api.Module, s []uint64) {
	h.WriteBatchCalls++
	b, ok := h.bytesAt(s, 0)
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
		k, ns, ok := h.pairAt(b, 4)
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
}

// timer registers or deletes a timer.
func (h *Host) timer(register bool) hostFunc {
	return func(_ api.Module, s []uint64) {
		k, _ := h.bytesAt(s, 1)
		ns, _ := h.bytesAt(s, 3)
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
