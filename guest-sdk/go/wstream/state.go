package wstream

import (
	"encoding/binary"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// ValueState is one value per (current key, namespace). Get it from
// Context.ValueState in Open and keep it in the operator. The zero
// namespace is empty; Namespace returns a view on another one (for example a
// window), without allocating.
//
// Slices returned by Get stay valid until the callback returns: copy them
// to keep them. State is cached for the duration of a callback and written
// back to the host when it ends (abi/ABI.md, "How the SDKs use them"). Integers are stored as 8 bytes
// little-endian, like every integer of the ABI.
type ValueState struct {
	c    *Context
	h    int32
	name string
	ns   []byte
}

// MapState is a sorted map per current key: map keys are state namespaces,
// so Range visits them in byte order. Get it from Context.MapState in Open.
// Slices returned by Get stay valid until the callback returns; those passed
// to Range's callback, during the callback.
type MapState struct {
	c    *Context
	h    int32
	name string
}

// ValueState returns the value state called name. Call it in Open, where it
// registers the state with the host; later calls only look the name up. A
// name that was not registered in Open, a name registered as a map state, or
// a registration the host refuses panics with a message that says which;
// the SDK turns the panic into a failure of the callback.
func (c *Context) ValueState(name string) ValueState {
	return ValueState{c: c, h: c.state(name, abi.StateValue), name: name}
}

// MapState returns the map state called name, with the same rules as
// ValueState.
func (c *Context) MapState(name string) MapState {
	return MapState{c: c, h: c.state(name, abi.StateMap), name: name}
}

func kindName(kind int32) string {
	if kind == abi.StateMap {
		return "map"
	}
	return "value"
}

func (c *Context) state(name string, kind int32) int32 {
	if si, ok := c.states[name]; ok {
		if si.kind != kind {
			panic(fmt.Errorf("wstream: state %q is a %s state, not a %s state", name, kindName(si.kind), kindName(kind)))
		}
		return si.h
	}
	if !c.opening {
		method := "ValueState"
		if kind == abi.StateMap {
			method = "MapState"
		}
		panic(fmt.Errorf("wstream: %s state %q was not registered: call ctx.%s(%q) in Open", kindName(kind), name, method, name))
	}
	h := hostStateRegister(name, kind)
	if h < 0 {
		panic(fmt.Errorf("wstream: registering %s state %q: %w", kindName(kind), name, statusErr(h)))
	}
	c.states[name] = stateInfo{h: h, kind: kind}
	return h
}

// errUnregistered is returned by the methods of a zero ValueState or MapState.
var errUnregistered = fmt.Errorf("%w: state used before it was obtained from ctx.ValueState or ctx.MapState in Open", ErrBadHandle)

// Name is the state's name.
func (s ValueState) Name() string { return s.name }

// Namespace returns a view of the state under namespace ns. ns is used as
// is, not copied: keep it unchanged while the view is in use.
func (s ValueState) Namespace(ns []byte) ValueState {
	s.ns = ns
	return s
}

// Get returns the value of the current key and namespace, and false when
// there is none.
func (s ValueState) Get() ([]byte, bool, error) {
	if s.c == nil {
		return nil, false, errUnregistered
	}
	return s.c.get(s.h, s.name, s.ns)
}

// GetInt64 returns the value as an int64 (8 bytes little-endian), and false
// when there is none.
func (s ValueState) GetInt64() (int64, bool, error) {
	// The cache's answer with as few calls as may be: under a call
	// deadline every Go call in wasm costs a termination check.
	if c := s.c; c != nil && batchedState {
		if g := c.sc.hit(s.h, s.ns); g != nil {
			r, _ := g.entry(curRec())
			switch vlen := int32(binary.LittleEndian.Uint32(r[4:])); vlen {
			case 8:
				if p := binary.LittleEndian.Uint32(r[8:]); p != 0 {
					if off := int(p - g.resBase); off < len(g.res)-7 {
						return int64(binary.LittleEndian.Uint64(g.res[off:])), true, nil
					}
					if v := c.sc.bytesAt(g, p, 8); v != nil {
						return int64(binary.LittleEndian.Uint64(v)), true, nil
					}
				}
			case abi.StatusNotFound:
				return 0, false, nil
			}
		}
	}
	v, ok, err := s.Get()
	if !ok || err != nil {
		return 0, ok, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("value state %q holds %d bytes, not an 8-byte int64: %w", s.name, len(v), ErrBadArgument)
	}
	return int64(binary.LittleEndian.Uint64(v)), true, nil
}

// Put stores v for the current key and namespace. v is copied. A key or
// namespace over 64 KiB or a value over 16 MiB fails with ErrLimit; a
// refusal by the host (a limit lowered for the job, a key of another
// subtask) fails the callback when the write reaches the host, at its end.
func (s ValueState) Put(v []byte) error {
	if s.c == nil {
		return errUnregistered
	}
	return s.c.write(s.h, "put value state", s.name, s.ns, v, false)
}

// PutInt64 stores v as 8 bytes little-endian.
func (s ValueState) PutInt64(v int64) error {
	c := s.c
	if c == nil {
		return errUnregistered
	}
	if batchedState && c.sc.kl <= maxStateKey {
		if g := c.sc.hit(s.h, s.ns); g != nil {
			// put, for 8 bytes, with as few calls as may be (GetInt64).
			sc := &c.sc
			r, f := g.entry(curRec())
			if first := binary.LittleEndian.Uint32(r); first&dirtyBit == 0 {
				binary.LittleEndian.PutUint32(r, first|dirtyBit)
				sc.dirty = append(sc.dirty, uint32(g.index)<<17|f)
			}
			if len(sc.mem)-sc.used < 8 {
				sc.grow(8)
			}
			at := sc.used
			sc.used += 8
			binary.LittleEndian.PutUint64(sc.mem[at:], uint64(v))
			binary.LittleEndian.PutUint32(r[4:], 8)
			binary.LittleEndian.PutUint32(r[8:], sc.memBase+uint32(at))
			return nil
		}
	}
	binary.LittleEndian.PutUint64(c.num[:], uint64(v))
	return s.Put(c.num[:])
}

// Delete removes the value of the current key and namespace; removing an
// absent value is not an error.
func (s ValueState) Delete() error {
	if s.c == nil {
		return errUnregistered
	}
	return s.c.write(s.h, "delete value state", s.name, s.ns, nil, true)
}

// Name is the state's name.
func (s MapState) Name() string { return s.name }

// Get returns the value stored under map key k for the current key, and
// false when there is none.
func (s MapState) Get(k []byte) ([]byte, bool, error) {
	if s.c == nil {
		return nil, false, errUnregistered
	}
	return s.c.get(s.h, s.name, k)
}

// Put stores v under map key k for the current key. k and v are copied.
func (s MapState) Put(k, v []byte) error {
	if s.c == nil {
		return errUnregistered
	}
	return s.c.write(s.h, "put map state", s.name, k, v, false)
}

// Delete removes map key k of the current key; removing an absent entry is
// not an error.
func (s MapState) Delete(k []byte) error {
	if s.c == nil {
		return errUnregistered
	}
	return s.c.write(s.h, "delete map state", s.name, k, nil, true)
}

// Range calls fn for every entry of the current key whose map key starts
// with prefix (all entries for an empty prefix), in map-key byte order,
// until fn returns false. k and v are valid only during fn. fn may read and
// write state, including this map; entries it adds after the one it is
// visiting may or may not be visited.
func (s MapState) Range(prefix []byte, fn func(k, v []byte) bool) error {
	if s.c == nil {
		return errUnregistered
	}
	c := s.c
	// The host iterates its own state: hand it the cached writes first.
	if err := c.flushState(); err != nil {
		return err
	}
	// Range may nest (fn may call Range): each depth pages through its own
	// buffers, which are kept for the next Range at that depth.
	if c.depth == len(c.iters) {
		c.iters = append(c.iters, &iterScratch{page: make([]byte, 0, initialPage)})
	}
	sc := c.iters[c.depth]
	c.depth++
	defer func() { c.depth-- }()
	return sc.run(s.h, s.name, c.Key(), prefix, fn)
}

const (
	initialPage = 4 << 10
	// maxPage bounds the page buffer: one entry is at most a value, a
	// namespace (state names and keys are far smaller than values) and its
	// 8-byte header.
	maxPage = 2*(16<<20) + 8
)

// iterScratch holds one Range's page buffer and its resume position.
type iterScratch struct {
	page  []byte
	after []byte
}

func (sc *iterScratch) run(h int32, name string, key, prefix []byte, fn func(k, v []byte) bool) error {
	hasAfter := false
	for {
		page := sc.page[:cap(sc.page)]
		n := hostStateIter(h, key, prefix, sc.after, hasAfter, page)
		if n == abi.StatusLimit {
			// Not even one entry fits: grow and ask again from the same place.
			if cap(sc.page) >= maxPage {
				return callErr("iterate map state", name, n)
			}
			sc.page = make([]byte, 0, min(2*cap(sc.page), maxPage))
			continue
		}
		if n < 0 {
			return callErr("iterate map state", name, n)
		}
		if n == 0 {
			return nil
		}
		if int(n) > len(page) {
			return fmt.Errorf("iterate map state %q: host wrote %d bytes into a %d-byte buffer: %w", name, n, len(page), errMalformedState)
		}
		var last []byte
		for b := page[:n]; len(b) > 0; {
			if len(b) < 8 {
				return fmt.Errorf("iterate map state %q: truncated entry header: %w", name, errMalformedState)
			}
			nl := uint64(binary.LittleEndian.Uint32(b))
			vl := uint64(binary.LittleEndian.Uint32(b[4:]))
			if 8+nl+vl > uint64(len(b)) {
				return fmt.Errorf("iterate map state %q: entry of %d+%d bytes overruns the page: %w", name, nl, vl, errMalformedState)
			}
			k := b[8 : 8+nl : 8+nl]
			v := b[8+nl : 8+nl+vl : 8+nl+vl]
			if !fn(k, v) {
				return nil
			}
			last = k
			b = b[8+nl+vl:]
		}
		// The next call writes into page, which last aliases.
		sc.after = append(sc.after[:0], last...)
		hasAfter = true
	}
}

// getDirect reads (current key, ns) of handle h with state_get into the
// Context's reusable read buffer, growing it when the host reports a
// larger value.
func (c *Context) getDirect(h int32, name string, ns []byte) ([]byte, bool, error) {
	for attempt := 0; ; attempt++ {
		buf := c.getBuf[:cap(c.getBuf)]
		n := hostStateGet(h, c.Key(), ns, buf)
		switch {
		case n == abi.StatusNotFound:
			return nil, false, nil
		case n < 0:
			return nil, false, callErr("get state", name, n)
		case int(n) <= len(buf):
			return buf[:n], true, nil
		case attempt > 0:
			// The value cannot change between two calls of one callback.
			return nil, false, fmt.Errorf("get state %q: host reported %d bytes after %d: %w", name, n, len(buf), ErrStateError)
		}
		c.getBuf = make([]byte, 0, max(int(n), 2*cap(c.getBuf)))
	}
}
