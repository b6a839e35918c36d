package instrument

import "fmt"

// Opcodes that the rewrite looks at; instr decodes every other one.
const (
	opBlock              = 0x02
	opLoop               = 0x03
	opIf                 = 0x04
	opTry                = 0x06 // legacy exception handling
	opEnd                = 0x0b
	opBr                 = 0x0c
	opBrIf               = 0x0d
	opBrTable            = 0x0e
	opReturn             = 0x0f
	opCall               = 0x10
	opCallIndirect       = 0x11
	opReturnCall         = 0x12
	opReturnCallIndirect = 0x13
	opCallRef            = 0x14
	opTableSet           = 0x26
	opReturnCallRef      = 0x15
	opDelegate           = 0x18 // legacy exception handling
	opTryTable           = 0x1f
	opBrOnNull           = 0xd5
	opBrOnNonNull        = 0xd6
	prefixMisc           = 0xfc // saturating truncation, bulk memory, tables
	prefixSIMD           = 0xfd
	prefixAtomic         = 0xfe
)

// reader decodes b[off:]. The first error sticks: later reads return zero
// values and do not move, so a decoding loop needs to check err only to
// stop early.
type reader struct {
	b   []byte // the module, cut at the end of the region read
	off int
	err error
	// target is a label that br_table reports, in hit, that it may take.
	target uint32
	hit    bool
	// sub is the sub-opcode of the last 0xfc instruction.
	sub uint32
}

// fail records an error at r.off+back.
func (r *reader) fail(back int, format string, args ...any) {
	r.failAt(r.off+back, format, args...)
}

func (r *reader) failAt(off int, format string, args ...any) {
	if r.err == nil {
		r.err = &Error{Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(0, "unexpected end")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) skip(n int) {
	if r.err != nil {
		return
	}
	if n > len(r.b)-r.off {
		r.fail(0, "unexpected end: %d bytes needed, %d left", n, len(r.b)-r.off)
		return
	}
	r.off += n
}

// uleb decodes an unsigned LEB128 number of at most bits bits, as strictly
// as the binary format: at most ceil(bits/7) bytes, unused bits zero.
func (r *reader) uleb(bits uint) uint64 {
	if r.err != nil {
		return 0
	}
	start := r.off
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if r.off >= len(r.b) {
			r.failAt(start, "truncated LEB128 number")
			return 0
		}
		c := r.b[r.off]
		r.off++
		if rem := bits - shift; rem <= 7 {
			if c&0x80 != 0 || (rem < 7 && c>>rem != 0) {
				r.failAt(start, "LEB128 number longer than %d bits", bits)
				return 0
			}
			return v | uint64(c)<<shift
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

// sleb decodes a signed LEB128 number of at most bits bits.
func (r *reader) sleb(bits uint) int64 {
	if r.err != nil {
		return 0
	}
	start := r.off
	var v int64
	for shift := uint(0); ; shift += 7 {
		if r.off >= len(r.b) {
			r.failAt(start, "truncated LEB128 number")
			return 0
		}
		c := r.b[r.off]
		r.off++
		last := c&0x80 == 0
		if rem := bits - shift; rem <= 7 {
			// The bits above the number's own must repeat its sign.
			mask := byte(0x7f) &^ (1<<(rem-1) - 1)
			if !last || (c&mask != 0 && c&mask != mask) {
				r.failAt(start, "LEB128 number longer than %d bits", bits)
				return 0
			}
		}
		v |= int64(c&0x7f) << shift
		if last {
			if c&0x40 != 0 && shift+7 < 64 {
				v |= -1 << (shift + 7)
			}
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

// count reads the length of a vector whose elements take at least min
// bytes each, refusing one longer than what is left: it bounds every
// decoding loop by the input's size.
func (r *reader) count(min int) uint32 {
	at := r.off
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(min) > uint64(len(r.b)-r.off) {
		r.failAt(at, "vector of %d elements overruns its section", n)
		return 0
	}
	return n
}

// name reads a length-prefixed byte string.
func (r *reader) name() []byte {
	n := r.u32()
	at := r.off
	r.skip(int(min(n, 1<<31-1)))
	if r.err != nil {
		return nil
	}
	return r.b[at:r.off]
}

// done fails unless the region was read to its end.
func (r *reader) done(what string) {
	if r.err == nil && r.off != len(r.b) {
		r.fail(0, "%d bytes after the end of the %s", len(r.b)-r.off, what)
	}
}

// valV128 is the vector value type.
const valV128 = 0x7b

// valType reads a value type: a number or vector type, a reference type
// abbreviation, or (ref null? heaptype). It returns its first byte.
func (r *reader) valType() byte {
	c := r.byte()
	switch {
	case r.err != nil:
	case c >= 0x7b && c <= 0x7f: // v128, f64, f32, i64, i32
	case c >= 0x69 && c <= 0x74: // funcref, externref, exnref and the GC abbreviations
	case c == 0x63 || c == 0x64: // (ref null ht), (ref ht)
		r.heapType()
	default:
		r.fail(-1, "unknown value type %#x", c)
	}
	return c
}

// constExpr reads a constant expression up to its end: an initializer of a
// global, element or data segment.
func (r *reader) constExpr() {
	for r.err == nil {
		op := r.byte()
		switch op {
		case opEnd:
			return
		case opBlock, opLoop, opIf, opTry, opTryTable:
			r.fail(-1, "block in a constant expression")
			return
		}
		r.instr(op)
	}
}

// heapType reads an abstract heap type or a type index (s33).
func (r *reader) heapType() { r.sleb(33) }

// blockType reads the type of a block: empty, one value type, or a type
// index (multi-value).
func (r *reader) blockType() (typeIdx uint32) {
	if r.err != nil {
		return noType
	}
	if r.off >= len(r.b) {
		r.fail(0, "unexpected end")
		return noType
	}
	switch c := r.b[r.off]; {
	case c == 0x40:
		r.off++
	case c&0xc0 == 0x40: // a one-byte negative s33: a value type
		r.valType()
	default:
		at := r.off
		v := r.sleb(33)
		if v < 0 && r.err == nil {
			r.failAt(at, "invalid block type %d", v)
		}
		if r.err == nil && v < noType {
			return uint32(v)
		}
	}
	return noType
}

// noType is what blockType returns for a block type that is not a type
// index (empty, or one result).
const noType = 1<<32 - 1

// limits reads the limits of a table or memory.
func (r *reader) limits() {
	flags := r.byte()
	if flags > 7 {
		r.fail(-1, "unknown limits flags %#x", flags)
		return
	}
	bits := uint(32)
	if flags&4 != 0 { // 64-bit memory or table
		bits = 64
	}
	r.uleb(bits)
	if flags&1 != 0 {
		r.uleb(bits)
	}
}

// memarg reads a memory access's alignment, memory index (multi-memory)
// and offset.
func (r *reader) memarg() {
	if align := r.u32(); align&0x40 != 0 {
		r.u32()
	}
	r.uleb(64)
}

// catches reads the catch clauses of try_table.
func (r *reader) catches() {
	n := r.count(2)
	for i := uint32(0); i < n && r.err == nil; i++ {
		switch kind := r.byte(); kind {
		case 0x00, 0x01: // catch, catch_ref: tag, label
			r.u32()
			r.u32()
		case 0x02, 0x03: // catch_all, catch_all_ref: label
			r.u32()
		default:
			r.fail(-1, "unknown catch clause kind %#x", kind)
		}
	}
}

// instr reads the immediates of the instruction whose opcode op was just
// read. It returns the first index immediate, if any (a call's function),
// or a block's type index (noType when its type is not one).
func (r *reader) instr(op byte) (idx uint32) {
	switch op {
	case 0x00, 0x01, // unreachable, nop
		0x05, // else
		0x0a, // throw_ref
		opEnd, opReturn,
		0x19,       // catch_all (legacy)
		0x1a, 0x1b, // drop, select
		0xd1, 0xd3, 0xd4: // ref.is_null, ref.eq, ref.as_non_null
	case opBlock, opLoop, opIf, opTry:
		return r.blockType()
	case opTryTable:
		r.blockType()
		r.catches()
	case 0x07, 0x08, 0x09, // catch (legacy), throw, rethrow (legacy): tag or label
		opBr, opBrIf,
		opCall, opReturnCall, opCallRef, opReturnCallRef,
		opDelegate,
		0x20, 0x21, 0x22, 0x23, 0x24, // local.get/set/tee, global.get/set
		0x25, opTableSet, // table.get/set
		0x3f, 0x40, // memory.size/grow: memory index
		0xd2, // ref.func
		opBrOnNull, opBrOnNonNull:
		return r.u32()
	case opBrTable: // labels, default
		n := r.count(1)
		r.hit = false
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.hit = r.u32() == r.target || r.hit
		}
	case opCallIndirect, opReturnCallIndirect: // type, table
		idx = r.u32()
		r.u32()
	case 0x1c: // select with types
		n := r.count(1)
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valType()
		}
	case 0x41: // i32.const
		r.sleb(32)
	case 0x42: // i64.const
		r.sleb(64)
	case 0x43: // f32.const
		r.skip(4)
	case 0x44: // f64.const
		r.skip(8)
	case 0xd0: // ref.null
		r.heapType()
	case prefixMisc:
		r.misc()
	case prefixSIMD:
		r.simd()
	case prefixAtomic:
		r.atomic()
	default:
		switch {
		case op >= 0x28 && op <= 0x3e: // loads and stores
			r.memarg()
		case op >= 0x45 && op <= 0xc4: // numeric, sign extension
		default:
			r.fail(-1, "unknown opcode %#x", op)
		}
	}
	return idx
}

// misc reads an instruction of the 0xfc prefix.
func (r *reader) misc() {
	r.sub = r.u32()
	switch sub := r.sub; {
	case r.err != nil:
	case sub <= 7: // saturating truncation
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	case sub == 9, sub == 11, sub == 13, // data.drop, memory.fill, elem.drop
		sub == 15, sub == 16, sub == 17: // table.grow, table.size, table.fill
		r.u32()
	default:
		r.fail(-1, "unknown instruction 0xfc %d", sub)
	}
}

// simd reads an instruction of the 0xfd prefix (vector instructions and
// relaxed SIMD).
func (r *reader) simd() {
	switch sub := r.u32(); {
	case r.err != nil:
	case sub <= 11 || sub == 92 || sub == 93: // v128.load*, v128.store, v128.load*_zero
		r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		r.skip(1)
	case sub >= 84 && sub <= 91: // v128.load*_lane, v128.store*_lane
		r.memarg()
		r.skip(1)
	case sub <= 0x113: // the rest, relaxed SIMD included, have no immediates
	default:
		r.fail(-1, "unknown instruction 0xfd %d", sub)
	}
}

// atomic reads an instruction of the 0xfe prefix (threads).
func (r *reader) atomic() {
	switch sub := r.u32(); {
	case r.err != nil:
	case sub == 3: // atomic.fence
		r.skip(1)
	case sub <= 2 || (sub >= 0x10 && sub <= 0x4e):
		r.memarg()
	default:
		r.fail(-1, "unknown instruction 0xfe %d", sub)
	}
}
