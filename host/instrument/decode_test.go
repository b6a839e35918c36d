package instrument

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// Immediates used below, in deliberately awkward encodings: padded LEB128
// numbers are valid as long as they fit the number's width.
var (
	u32Max     = []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	u32Padded  = []byte{0x80, 0x80, 0x00} // 0 in three bytes
	memarg     = []byte{0x02, 0x80, 0x80, 0x04}
	memargMem  = []byte{0x42, 0x01, 0x10} // alignment with bit 6: memory index 1 follows
	memarg64   = []byte{0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	blockEmpty = []byte{0x40}
)

// immediates gives, for every one-byte opcode that has them, sample
// immediates; opcodes of opNone have none; every other opcode is unknown.
var immediates = map[byte][][]byte{
	opBlock:              {blockEmpty, {0x7f}, {0x7b}, {0x70}, {0x6f}, {0x63, 0x70}, {0x64, 0x05}, {0x05}, {0x80, 0x01}},
	opLoop:               {blockEmpty, {0x7e}, {0x81, 0x80, 0x80, 0x80, 0x00}},
	opIf:                 {blockEmpty, {0x7d}, {0x00}},
	opTry:                {blockEmpty, {0x7c}},
	0x07:                 {{0x00}, u32Max},    // catch
	0x08:                 {{0x03}},            // throw
	0x09:                 {{0x01}},            // rethrow
	opBr:                 {{0x00}, u32Padded}, // br
	opBrIf:               {{0x7f}, u32Max},    // br_if
	opBrTable:            {{0x00, 0x00}, {0x03, 0x00, 0x01, 0x80, 0x01, 0x02}, {0x01, 0x80, 0x00, 0x05}},
	opCall:               {{0x00}, u32Max},
	opCallIndirect:       {{0x01, 0x00}, {0x80, 0x01, 0x02}},
	opReturnCall:         {{0x05}},
	opReturnCallIndirect: {{0x05, 0x00}},
	opCallRef:            {{0x02}},
	opReturnCallRef:      {{0x02}},
	opDelegate:           {{0x00}},
	0x1c:                 {{0x01, 0x7f}, {0x02, 0x7b, 0x6f}, {0x01, 0x63, 0x70}, {0x00}}, // select t*
	opTryTable: {
		{0x40, 0x00},
		{0x7f, 0x04, 0x00, 0x01, 0x02, 0x01, 0x02, 0x03, 0x02, 0x04, 0x03, 0x05},
	},
	0x20: {{0x00}, u32Max}, 0x21: {{0x01}}, 0x22: {{0x02}}, 0x23: {{0x03}}, 0x24: {u32Padded},
	0x25: {{0x00}}, 0x26: {{0x01}},
	0x3f: {{0x00}, {0x01}}, 0x40: {{0x00}},
	0x41:       {{0x00}, {0x7f}, {0x80, 0x7f}, {0xff, 0xff, 0xff, 0xff, 0x07}, {0x80, 0x80, 0x80, 0x80, 0x78}},
	0x42:       {{0x00}, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}},
	0x43:       {{0x00, 0x00, 0xc0, 0x7f}},
	0x44:       {{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x7f}},
	0xd0:       {{0x70}, {0x6f}, {0x05}},
	0xd2:       {{0x07}, u32Max},
	opBrOnNull: {{0x00}}, opBrOnNonNull: {{0x01}},
}

// opNone lists the one-byte opcodes without immediates.
func opNone(op byte) bool {
	switch op {
	case 0x00, 0x01, 0x05, 0x0a, opEnd, opReturn, 0x19, 0x1a, 0x1b, 0xd1, 0xd3, 0xd4:
		return true
	}
	return op >= 0x45 && op <= 0xc4
}

// decodeOne decodes the instruction op imm followed by a sentinel and
// reports how many immediate bytes it read.
func decodeOne(op byte, imm []byte) (int, error) {
	b := append(append([]byte{op}, imm...), 0xee)
	r := &reader{b: b, off: 1}
	r.instr(op)
	if r.err != nil {
		return 0, r.err
	}
	return r.off - 1, nil
}

func TestInstrEveryOpcode(t *testing.T) {
	known := 0
	for i := 0; i < 256; i++ {
		op := byte(i)
		samples, hasImm := immediates[op]
		if op >= 0x28 && op <= 0x3e {
			samples, hasImm = [][]byte{memarg, memargMem, memarg64, {0x00, 0x00}}, true
		}
		switch {
		case op == prefixMisc || op == prefixSIMD || op == prefixAtomic:
			continue // below
		case hasImm:
			known++
			for _, imm := range samples {
				n, err := decodeOne(op, imm)
				if err != nil || n != len(imm) {
					t.Errorf("opcode %#x % x: read %d bytes, %v; want %d", op, imm, n, err, len(imm))
				}
			}
		case opNone(op):
			known++
			if n, err := decodeOne(op, nil); err != nil || n != 0 {
				t.Errorf("opcode %#x: read %d bytes, %v; want none", op, n, err)
			}
		default:
			if _, err := decodeOne(op, []byte{0, 0, 0, 0}); err == nil || !strings.Contains(err.Error(), "unknown opcode") {
				t.Errorf("opcode %#x: got %v, want unknown opcode", op, err)
			}
		}
	}
	if known != 199 {
		t.Errorf("%d one-byte opcodes known", known)
	}
}

// sub encodes a prefixed instruction's sub-opcode, padded to its widest
// encoding half of the time.
func sub(v uint32, pad bool) []byte {
	if !pad {
		return appendU32(nil, v)
	}
	b := make([]byte, 5)
	for i := range 4 {
		b[i] = byte(v>>(7*i))&0x7f | 0x80
	}
	b[4] = byte(v >> 28)
	return b
}

func TestInstrPrefixes(t *testing.T) {
	lane := []byte{0x0f}
	bytes16 := bytes.Repeat([]byte{0xab}, 16)
	cases := []struct {
		prefix byte
		max    uint32 // sub-opcodes above are unknown
		imm    func(sub uint32) ([]byte, bool)
	}{
		{prefixMisc, 17, func(s uint32) ([]byte, bool) {
			switch {
			case s <= 7:
				return nil, true
			case s == 8 || s == 10 || s == 12 || s == 14:
				return []byte{0x81, 0x01, 0x00}, true
			default:
				return u32Max, true
			}
		}},
		{prefixSIMD, 0x113, func(s uint32) ([]byte, bool) {
			switch {
			case s <= 11 || s == 92 || s == 93:
				return memarg, true
			case s == 12 || s == 13:
				return bytes16, true
			case s >= 21 && s <= 34:
				return lane, true
			case s >= 84 && s <= 91:
				return append(append([]byte{}, memargMem...), lane...), true
			default:
				return nil, true
			}
		}},
		{prefixAtomic, 0x4e, func(s uint32) ([]byte, bool) {
			switch {
			case s == 3:
				return []byte{0x00}, true
			case s <= 2 || s >= 0x10:
				return memarg, true
			}
			return nil, false
		}},
	}
	for _, c := range cases {
		for s := uint32(0); s <= c.max+3; s++ {
			imm, ok := c.imm(s)
			code := append(sub(s, s%2 == 1), imm...)
			n, err := decodeOne(c.prefix, code)
			if ok && s <= c.max {
				if err != nil || n != len(code) {
					t.Errorf("%#x %d: read %d bytes, %v; want %d", c.prefix, s, n, err, len(code))
				}
			} else if err == nil || !strings.Contains(err.Error(), "unknown instruction") {
				t.Errorf("%#x %d: got %v, want unknown instruction", c.prefix, s, err)
			}
		}
	}
}

func TestInstrRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		want string
	}{
		{"GC prefix", []byte{0xfb, 0x00}, "unknown opcode 0xfb"},
		{"truncated f64", []byte{0x44, 0x00, 0x00}, "unexpected end"},
		{"truncated v128.const", append([]byte{0xfd, 0x0c}, make([]byte, 15)...), "unexpected end"},
		{"truncated LEB", []byte{0x41, 0x80, 0x80}, "truncated LEB128"},
		{"u32 over 5 bytes", []byte{0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, "longer than 32 bits"},
		{"u32 over 32 bits", []byte{0x20, 0xff, 0xff, 0xff, 0xff, 0x1f}, "longer than 32 bits"},
		{"s32 bad sign bits", []byte{0x41, 0xff, 0xff, 0xff, 0xff, 0x4f}, "longer than 32 bits"},
		{"s64 over 10 bytes", []byte{0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, "longer than 64 bits"},
		{"s64 bad last byte", []byte{0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}, "longer than 64 bits"},
		{"block type value", []byte{0x02, 0x5a}, "unknown value type"},
		{"negative block type index", []byte{0x02, 0xff, 0x7e}, "invalid block type"},
		{"select type", []byte{0x1c, 0x01, 0x01}, "unknown value type"},
		{"select count", []byte{0x1c, 0x80, 0x80, 0x04, 0x7f}, "overruns"},
		{"br_table count", []byte{0x0e, 0xff, 0xff, 0x03, 0x00}, "overruns"},
		{"catch kind", []byte{0x1f, 0x40, 0x01, 0x04, 0x00}, "unknown catch clause"},
	} {
		b := tc.code
		r := &reader{b: b, off: 1}
		r.instr(b[0])
		if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%s (% x): got %v, want %q", tc.name, tc.code, r.err, tc.want)
		}
	}
}

func TestLEB(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		bits uint
		u    uint64
		s    int64
		uerr bool
		serr bool
	}{
		{b: []byte{0x00}, bits: 32},
		{b: []byte{0x7f}, bits: 32, u: 127, s: -1},
		{b: []byte{0x80, 0x01}, bits: 32, u: 128, s: 128},
		{b: []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, bits: 32, u: 1<<32 - 1, serr: true},
		{b: []byte{0xff, 0xff, 0xff, 0xff, 0x07}, bits: 32, u: 1<<31 - 1, s: 1<<31 - 1},
		{b: []byte{0x80, 0x80, 0x80, 0x80, 0x78}, bits: 32, uerr: true, s: -1 << 31},
		{b: []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, bits: 33, u: 1<<33 - 1, serr: true},
		{b: []byte{0x80, 0x80, 0x80, 0x80, 0x70}, bits: 33, uerr: true, s: -1 << 32},
		{b: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, bits: 64, uerr: true, s: -1 << 63},
		{b: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, bits: 64, u: 1<<64 - 1, serr: true},
		{b: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, bits: 64, u: 1<<63 - 1, s: 1<<63 - 1},
		{b: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, bits: 32, uerr: true, serr: true},
	} {
		r := &reader{b: tc.b}
		u := r.uleb(tc.bits)
		if (r.err != nil) != tc.uerr || (r.err == nil && (u != tc.u || r.off != len(tc.b))) {
			t.Errorf("uleb%d(% x) = %d, %v (read %d)", tc.bits, tc.b, u, r.err, r.off)
		}
		r = &reader{b: tc.b}
		s := r.sleb(tc.bits)
		if (r.err != nil) != tc.serr || (r.err == nil && (s != tc.s || r.off != len(tc.b))) {
			t.Errorf("sleb%d(% x) = %d, %v (read %d)", tc.bits, tc.b, s, r.err, r.off)
		}
	}
	for _, v := range []int32{0, 1, -1, 63, 64, -64, -65, Budget, 1<<31 - 1, -1 << 31} {
		r := &reader{b: appendS32(nil, v)}
		if got := r.sleb(32); got != int64(v) || r.err != nil || r.off != len(r.b) {
			t.Errorf("appendS32(%d) decodes as %d, %v", v, got, r.err)
		}
	}
	for _, v := range []uint32{0, 127, 128, 1<<32 - 1} {
		if got, n := uleb32(appendU32(nil, v)); got != v || n != len(appendU32(nil, v)) {
			t.Errorf("appendU32(%d) decodes as %d", v, got)
		}
	}
}

func ExampleError() {
	// One function, () -> (), whose body holds a GC instruction.
	_, err := Instrument([]byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + // type section
		"\x03\x02\x01\x00" + // function section
		"\x05\x03\x01\x00\x01" + // memory section
		"\x0a\x05\x01\x03\x00\xfb\x0b")) // code section
	fmt.Println(err)
	// Output: instrument: at offset 0x1c: unknown opcode 0xfb
}
