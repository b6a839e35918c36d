package instrument

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Handcrafted modules: Admit reads declarations only, so a module here
// holds just the sections a case needs.

func leb(v uint64) []byte { return appendU64(nil, v) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func rep(n int, part []byte) []byte {
	b := make([]byte, 0, n*len(part))
	for range n {
		b = append(b, part...)
	}
	return b
}

// sec is a section: id, size, payload.
func sec(id byte, payload ...[]byte) []byte {
	p := cat(payload...)
	return cat([]byte{id}, leb(uint64(len(p))), p)
}

// vecOf is a vector section's payload: n, then the elements.
func vecOf(n int, elem []byte) []byte { return cat(leb(uint64(n)), rep(n, elem)) }

func wasmOf(secs ...[]byte) []byte { return cat([]byte("\x00asm\x01\x00\x00\x00"), cat(secs...)) }

// body is a function body declaring the given local counts (i32), then
// pad nops and end.
func body(pad int, locals ...uint64) []byte {
	b := leb(uint64(len(locals)))
	for _, n := range locals {
		b = append(append(b, leb(n)...), 0x7f)
	}
	b = append(append(b, rep(pad, []byte{0x01})...), 0x0b)
	return cat(leb(uint64(len(b))), b)
}

// blockBody is a function body declaring locals i32 locals, with blocks
// control blocks of three kinds in turn (block, if, try_table).
func blockBody(blocks int, locals uint64) []byte {
	b := cat(leb(1), leb(locals), []byte{0x7f})
	kinds := [][]byte{{0x02, 0x40, 0x0b}, {0x41, 0x00, 0x04, 0x40, 0x0b}, {0x1f, 0x40, 0x00, 0x0b}}
	for i := range blocks {
		b = append(b, kinds[i%len(kinds)]...)
	}
	b = append(b, 0x0b)
	return cat(leb(uint64(len(b))), b)
}

func codeOf(bodies ...[]byte) []byte { return sec(secCode, leb(uint64(len(bodies))), cat(bodies...)) }

func exportsOf(names ...string) []byte {
	var b []byte
	for i, n := range names {
		b = append(appendName(b, n), 0x00)
		b = append(b, leb(uint64(i))...)
	}
	return sec(secExport, leb(uint64(len(names))), b)
}

// limitCase builds a module declaring n of something, which limit bounds.
type limitCase struct {
	limit string
	set   func(l *Limits, n uint64)
	build func(n int) []byte
	where string
}

var limitCases = []limitCase{
	{"Types", func(l *Limits, n uint64) { l.Types = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secType, vecOf(n, []byte{0x60, 0, 0}))) }, "type section"},
	{"Imports", func(l *Limits, n uint64) { l.Imports = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secImport, vecOf(n, []byte{1, 'a', 1, 'b', 0x00, 0}))) }, "import section"},
	{"Functions", func(l *Limits, n uint64) { l.Functions = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secFunction, vecOf(n, []byte{0}))) }, "function section"},
	{"Tables", func(l *Limits, n uint64) { l.Tables = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secTable, vecOf(n, []byte{0x70, 0x00, 0x01}))) }, "table section, table "},
	{"Tables", func(l *Limits, n uint64) { l.Tables = uint32(n) },
		func(n int) []byte {
			return wasmOf(sec(secImport, vecOf(n, []byte{1, 'a', 1, 'b', 0x01, 0x70, 0x00, 0x01})))
		}, "import section, table import "},
	{"TableElements", func(l *Limits, n uint64) { l.TableElements = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secTable, leb(1), []byte{0x70, 0x00}, leb(uint64(n)))) }, "table section, table 0"},
	{"TableElements", func(l *Limits, n uint64) { l.TableElements = uint32(n) },
		func(n int) []byte {
			// A table with an initializer, and a maximum.
			return wasmOf(sec(secTable, leb(1), []byte{0x40, 0x00, 0x70, 0x01}, leb(uint64(n)), leb(uint64(n)+5), []byte{0xd0, 0x70, 0x0b}))
		}, "table section, table 0"},
	{"TableElements", func(l *Limits, n uint64) { l.TableElements = uint32(n) },
		func(n int) []byte {
			return wasmOf(sec(secImport, leb(1), []byte{1, 'a', 1, 'b', 0x01, 0x70, 0x00}, leb(uint64(n))))
		}, "import section, table import 0"},
	{"Memories", func(l *Limits, n uint64) { l.Memories = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secMemory, vecOf(n, []byte{0x00, 0x01}))) }, "memory section"},
	{"Memories", func(l *Limits, n uint64) { l.Memories = uint32(n) },
		func(n int) []byte {
			return wasmOf(sec(secImport, leb(1), []byte{1, 'a', 1, 'b', 0x02, 0x00, 0x01}), sec(secMemory, vecOf(n-1, []byte{0x00, 0x01})))
		}, "memory section"},
	{"Globals", func(l *Limits, n uint64) { l.Globals = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secGlobal, vecOf(n, []byte{0x7f, 0x00, 0x41, 0x00, 0x0b}))) }, "global section"},
	{"Exports", func(l *Limits, n uint64) { l.Exports = uint32(n) },
		func(n int) []byte {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprint("e", i)
			}
			return wasmOf(exportsOf(names...))
		}, "export section"},
	{"ElementSegments", func(l *Limits, n uint64) { l.ElementSegments = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secElement, vecOf(n, []byte{0x01, 0x00, 0x00}))) }, "element section"},
	{"Elements", func(l *Limits, n uint64) { l.Elements = uint64(n) },
		func(n int) []byte {
			// Two segments: an active one of function indices, a
			// passive one of expressions.
			a := n / 2
			return wasmOf(sec(secElement, leb(2),
				[]byte{0x00, 0x41, 0x00, 0x0b}, leb(uint64(a)), rep(a, []byte{0x00}),
				[]byte{0x05, 0x70}, leb(uint64(n-a)), rep(n-a, []byte{0xd2, 0x00, 0x0b})))
		}, "element section, segment 1"},
	{"DataSegments", func(l *Limits, n uint64) { l.DataSegments = uint32(n) },
		func(n int) []byte { return wasmOf(sec(secData, vecOf(n, []byte{0x01, 0x00}))) }, "data section"},
	{"DataBytes", func(l *Limits, n uint64) { l.DataBytes = uint64(n) },
		func(n int) []byte {
			a := n / 2
			return wasmOf(sec(secData, leb(2),
				[]byte{0x00, 0x41, 0x00, 0x0b}, leb(uint64(a)), rep(a, []byte{7}),
				[]byte{0x02, 0x00, 0x41, 0x00, 0x0b}, leb(uint64(n-a)), rep(n-a, []byte{7})))
		}, "data section, segment 1"},
	{"LocalsPerFunction", func(l *Limits, n uint64) { l.LocalsPerFunction = uint32(n) },
		func(n int) []byte { return wasmOf(codeOf(body(0), body(0, 1, uint64(n-1)))) }, "code section, function 1"},
	{"LocalsPerFunction", func(l *Limits, n uint64) { l.LocalsPerFunction = uint32(n) },
		func(n int) []byte {
			// Function indices count the imported functions first.
			return wasmOf(sec(secImport, leb(1), []byte{1, 'a', 1, 'b', 0x00, 0}), codeOf(body(0, uint64(n))))
		}, "code section, function 1"},
	{"Locals", func(l *Limits, n uint64) { l.Locals = uint64(n) },
		func(n int) []byte { return wasmOf(codeOf(body(0, uint64(n/2)), body(0, uint64(n-n/2)))) }, "code section, function 1"},
	{"FunctionBytes", func(l *Limits, n uint64) { l.FunctionBytes = uint32(n) },
		func(n int) []byte { return wasmOf(codeOf(body(0), body(n-2))) }, "code section, function 1"},
	{"CodeBytes", func(l *Limits, n uint64) { l.CodeBytes = uint64(n) },
		func(n int) []byte {
			return exactly(n, func(k int) []byte { return wasmOf(codeOf(body(k))) }, func(b []byte) int { v, _ := uleb32(b[9:]); return int(v) })
		}, "code section"},
	{"LocalBlocks", func(l *Limits, n uint64) { l.LocalBlocks = uint64(n) },
		func(n int) []byte {
			// n locals times one block.
			return wasmOf(sec(secCode, leb(1), blockBody(1, uint64(n))))
		}, "code section, function 0"},
	{"LocalBlocks", func(l *Limits, n uint64) { l.LocalBlocks = uint64(n) },
		func(n int) []byte {
			// Two parameters and n/4-2 locals times four blocks, plus
			// what is left in a second function.
			k := n / 4
			return wasmOf(sec(secType, leb(2), []byte{0x60, 0, 0, 0x60, 2, 0x7f, 0x7f, 0}),
				sec(secFunction, leb(2), []byte{1, 0}),
				sec(secCode, leb(2), blockBody(4, uint64(k-2)), blockBody(1, uint64(n-4*k))))
		}, "code section, function 1"},
	{"LocalBlocks", func(l *Limits, n uint64) { l.LocalBlocks = uint64(n) },
		func(n int) []byte {
			// A loop counts twice: n/2 locals, then n%2 more in a
			// function with one block.
			loop := cat(leb(1), leb(uint64(n/2)), []byte{0x7f, 0x03, 0x40, 0x0b, 0x0b})
			return wasmOf(sec(secCode, leb(2), leb(uint64(len(loop))), loop, blockBody(1, uint64(n%2))))
		}, "code section, function 1"},
	{"BlockPairs", func(l *Limits, n uint64) { l.BlockPairs = uint64(n) },
		func(n int) []byte {
			// Functions of k blocks, k*k <= what is left, then 1 block
			// per function for the rest.
			var bodies [][]byte
			for left := n; left > 0; {
				k := 1
				for (k+1)*(k+1) <= left {
					k++
				}
				bodies = append(bodies, blockBody(k, 0))
				left -= k * k
			}
			return wasmOf(sec(secCode, leb(uint64(len(bodies))), cat(bodies...)))
		}, "code section, function "},
	{"CustomBytes", func(l *Limits, n uint64) { l.CustomBytes = uint64(n) },
		func(n int) []byte {
			// Two sections whose payloads (name length, name,
			// contents) add up to n.
			return wasmOf(sec(secCustom, appendName(nil, "a"), rep(10, []byte{1})), sec(secType, leb(0)),
				sec(secCustom, appendName(nil, "b"), rep(n-12-2, []byte{1})))
		}, "the custom sections"},
	{"ModuleBytes", func(l *Limits, n uint64) { l.ModuleBytes = uint64(n) },
		func(n int) []byte {
			return exactly(n, func(k int) []byte { return wasmOf(sec(secCustom, appendName(nil, "pad"), rep(k, []byte{0}))) }, func(b []byte) int { return len(b) })
		}, "the module"},
}

// exactly returns build(k) for the largest k whose size is n.
func exactly(n int, build func(k int) []byte, size func([]byte) int) []byte {
	for k := n; k >= 0; k-- {
		if b := build(k); size(b) == n {
			return b
		}
	}
	panic(fmt.Sprintf("no module of size %d", n))
}

// TestAdmitLimits: every limit admits a module at exactly its bound and
// refuses one a unit over, with a *LimitError naming the limit and where.
func TestAdmitLimits(t *testing.T) {
	for _, c := range limitCases {
		for _, bound := range []int{20, 100, 200} {
			t.Run(fmt.Sprintf("%s/%s/%d", c.limit, c.where, bound), func(t *testing.T) {
				l := Limits{}
				c.set(&l, uint64(bound))
				if err := Admit(c.build(bound), l); err != nil {
					t.Fatalf("at the bound: %v", err)
				}
				err := Admit(c.build(bound+1), l)
				var le *LimitError
				if !errors.As(err, &le) {
					t.Fatalf("one over: got %v, want a *LimitError", err)
				}
				if le.Limit != c.limit || !strings.HasPrefix(le.Where, c.where) || le.Max != uint64(bound) || le.Have != uint64(bound)+1 {
					t.Errorf("one over: got %+v, want %s at %q, %d over %d", le, c.limit, c.where, bound+1, bound)
				}
				msg := err.Error()
				if !strings.Contains(msg, c.limit) || !strings.Contains(msg, le.Where) || !strings.Contains(msg, fmt.Sprint(bound)) {
					t.Errorf("message %q names neither the limit, the place nor the bound", msg)
				}
				// Under DefaultLimits, a few hundred of anything passes.
				if err := Admit(c.build(bound+1), Limits{}); err != nil && c.limit != "Memories" && c.limit != "Tables" {
					t.Errorf("default limits: %v", err)
				}
			})
		}
	}
}

// TestAdmitHugeDeclarations: a few bytes declaring billions are refused
// by the count, before anything is allocated or read in proportion to it.
func TestAdmitHugeDeclarations(t *testing.T) {
	max32 := uint64(1<<32 - 1)
	for _, c := range []struct {
		limit string
		wasm  []byte
	}{
		{"LocalsPerFunction", wasmOf(codeOf(body(0, 32<<20)))},
		{"LocalsPerFunction", wasmOf(codeOf(body(0, max32)))},
		{"LocalsPerFunction", wasmOf(codeOf(body(0, 30000, 30000)))},
		{"Locals", wasmOf(sec(secCode, leb(50), rep(50, body(0, 49999))))},
		{"Functions", wasmOf(sec(secFunction, leb(max32)))},
		{"Types", wasmOf(sec(secType, leb(max32)))},
		{"Globals", wasmOf(sec(secGlobal, leb(max32)))},
		{"Memories", wasmOf(sec(secMemory, leb(2), []byte{0, 1, 0, 1}))},
		{"TableElements", wasmOf(sec(secTable, leb(1), []byte{0x70, 0x00}, leb(max32)))},
		{"TableElements", wasmOf(sec(secTable, leb(1), []byte{0x70, 0x04}, leb(1<<40)))}, // table64
		{"Tables", wasmOf(sec(secTable, vecOf(5, []byte{0x70, 0x00, 0x00})))},
	} {
		err := Admit(c.wasm, Limits{})
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != c.limit {
			t.Errorf("%s (%x): got %v", c.limit, c.wasm, err)
		}
	}
}

// TestAdmitReservedNames: the names of the exports the rewrite adds are
// refused, and only they.
func TestAdmitReservedNames(t *testing.T) {
	for _, name := range []string{StopExport, StartExport, GlobalExportPrefix, GlobalExport(0), GlobalExport(1 << 30)} {
		err := Admit(wasmOf(exportsOf("ok", name)), Limits{})
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != "ReservedNames" || le.Where != "export section, export 1" ||
			!strings.Contains(err.Error(), fmt.Sprintf("%q is reserved", name)) {
			t.Errorf("%q: got %v", name, err)
		}
	}
	for _, name := range []string{"wstream:sto", "wstream:stopped", "wstream:globa", "WSTREAM:STOP", "wstream_stop", "memory"} {
		if err := Admit(wasmOf(exportsOf(name)), Limits{}); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// TestAdmitMalformed: what cannot be decoded is an *Error with its offset,
// never a panic or a limit.
func TestAdmitMalformed(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		wasm         []byte
	}{
		{"empty", "not a WebAssembly module", nil},
		{"magic", "not a WebAssembly module", []byte("\x00asn\x01\x00\x00\x00")},
		{"version", "unsupported binary version", []byte("\x00asm\x02\x00\x00\x00")},
		{"section size truncated", "truncated LEB128", wasmOf([]byte{secType, 0x80})},
		{"section size too long", "longer than 32 bits", wasmOf([]byte{secType, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00})},
		{"section size over 32 bits", "longer than 32 bits", wasmOf([]byte{secType, 0xff, 0xff, 0xff, 0xff, 0x7f})},
		{"section overruns", "overruns the module", wasmOf([]byte{secType, 0x05, 0x00})},
		{"order", "out of order", wasmOf(sec(secFunction, leb(0)), sec(secType, leb(0)))},
		{"repeated", "out of order or repeated", wasmOf(sec(secType, leb(0)), sec(secType, leb(0)))},
		{"unknown id", "unknown section id", wasmOf(sec(14))},
		{"count truncated", "truncated LEB128", wasmOf(sec(secFunction, []byte{0x80}))},
		{"import count overruns", "overruns its section", wasmOf(sec(secImport, leb(3), []byte{1, 'a', 1, 'b', 0, 0}))},
		{"import truncated", "unexpected end", wasmOf(sec(secImport, leb(1), []byte{1, 'a', 5, 'b'}))},
		{"import kind", "unknown import kind", wasmOf(sec(secImport, leb(1), []byte{1, 'a', 1, 'b', 9, 0}))},
		{"table flags", "unknown limits flags", wasmOf(sec(secTable, leb(1), []byte{0x70, 0x08, 0x00}))},
		{"table min truncated", "truncated LEB128", wasmOf(sec(secTable, leb(1), []byte{0x70, 0x00, 0x80}))},
		{"table type", "unknown value type", wasmOf(sec(secTable, leb(1), []byte{0x12, 0x00, 0x00}))},
		{"table trailing", "after the end of the table section", wasmOf(sec(secTable, leb(1), []byte{0x70, 0x00, 0x00, 0x00}))},
		{"export name overruns", "unexpected end", wasmOf(sec(secExport, leb(1), []byte{9, 'a', 0, 0}))},
		{"element flags", "unknown flags 8", wasmOf(sec(secElement, leb(1), []byte{0x08, 0x00}))},
		{"element offset", "truncated LEB128", wasmOf(sec(secElement, leb(1), []byte{0x00, 0x41}))},
		{"element count overruns", "overruns its section", wasmOf(sec(secElement, leb(1), []byte{0x01, 0x00, 0x05, 0x00}))},
		{"data flags", "unknown flags 3", wasmOf(sec(secData, leb(1), []byte{0x03}))},
		{"data overruns", "unexpected end", wasmOf(sec(secData, leb(1), []byte{0x01, 0x09, 1, 2}))},
		{"body overruns", "overruns the code section", wasmOf(sec(secCode, leb(1), []byte{0x09, 0x00, 0x0b}))},
		{"locals count overruns", "overruns its section", wasmOf(sec(secCode, leb(1), []byte{0x03, 0x05, 0x01, 0x7f}))},
		{"locals type", "unknown value type", wasmOf(sec(secCode, leb(1), []byte{0x04, 0x01, 0x01, 0x12, 0x0b}))},
		{"locals count too long", "longer than 32 bits", wasmOf(sec(secCode, leb(1), []byte{0x08, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x7f}))},
		{"unknown opcode", "unknown opcode 0xff", wasmOf(sec(secCode, leb(1), []byte{0x03, 0x00, 0xff, 0x0b}))},
		{"code trailing", "after the end of the code section", wasmOf(sec(secCode, leb(1), body(0), []byte{0x00}))},
		{"custom name overruns", "unexpected end", wasmOf(sec(secCustom, []byte{0x05, 'a'}))},
	} {
		err := Admit(c.wasm, Limits{})
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Reason, c.reason) {
			t.Errorf("%s: got %v, want an *Error saying %q", c.name, err, c.reason)
		}
	}
}

// TestAdmitTruncated: every prefix of a module with every kind of section
// fails with an *Error, or passes when it ends on a section boundary.
func TestAdmitTruncated(t *testing.T) {
	full := wasmOf(
		sec(secType, leb(1), []byte{0x60, 0, 0}),
		sec(secImport, leb(1), []byte{1, 'a', 1, 'b', 0x00, 0}),
		sec(secFunction, leb(1), []byte{0}),
		sec(secTable, leb(1), []byte{0x70, 0x01, 0x01, 0x02}),
		sec(secMemory, leb(1), []byte{0x00, 0x01}),
		sec(secGlobal, leb(1), []byte{0x7f, 0x01, 0x41, 0x00, 0x0b}),
		exportsOf("f"),
		sec(secElement, leb(1), []byte{0x00, 0x41, 0x00, 0x0b, 0x01, 0x01}),
		codeOf(body(3, 2, 1)),
		sec(secData, leb(1), []byte{0x00, 0x41, 0x00, 0x0b, 0x02, 'h', 'i'}),
		sec(secCustom, appendName(nil, "name"), []byte{1, 2, 3}),
	)
	if err := Admit(full, Limits{}); err != nil {
		t.Fatal(err)
	}
	boundary := map[int]bool{8: true}
	r := &reader{b: full, off: 8}
	for r.off < len(full) {
		r.byte()
		r.off += int(r.u32())
		boundary[r.off] = true
	}
	for n := range len(full) {
		err := Admit(full[:n], Limits{})
		var e *Error
		switch {
		case boundary[n] && err != nil:
			t.Errorf("cut at the section boundary %d: %v", n, err)
		case !boundary[n] && !errors.As(err, &e):
			t.Errorf("cut at %d: got %v, want an *Error", n, err)
		}
	}
}

// TestLimitsResolveWithin: zero fields take their defaults, and Within
// compares field by field.
func TestLimitsResolveWithin(t *testing.T) {
	if got := (Limits{}).Resolve(); got != DefaultLimits {
		t.Errorf("Resolve of zero: %+v", got)
	}
	l := Limits{Functions: 10, Locals: 5}
	got := l.Resolve()
	if got.Functions != 10 || got.Locals != 5 || got.Types != DefaultLimits.Types {
		t.Errorf("Resolve: %+v", got)
	}
	if !l.Within(Limits{}) || (Limits{}).Within(l) || !l.Within(l) {
		t.Error("Within")
	}
	if (Limits{CustomBytes: DefaultLimits.CustomBytes + 1}).Within(Limits{}) {
		t.Error("Within: a larger CustomBytes")
	}
}

// TestInstrumentTableMax: the rewrite lowers or sets every defined
// table's maximum to Options.TableMax, keeps one under it, and refuses a
// table that starts above it.
func TestInstrumentTableMax(t *testing.T) {
	tables := sec(secTable, leb(4),
		[]byte{0x70, 0x00, 0x01},             // 1, no maximum
		[]byte{0x70, 0x01, 0x02, 0x0a},       // 2..10
		[]byte{0x6f, 0x01, 0x03}, leb(1<<20), // externref 3..2^20
		[]byte{0x40, 0x00, 0x70, 0x00, 0x04, 0xd0, 0x70, 0x0b}) // 4, no maximum, an initializer
	wasm := wasmOf(tables, sec(secMemory, leb(1), []byte{0x00, 0x01}))
	res, err := InstrumentWith(wasm, Options{TableMax: 50})
	if err != nil {
		t.Fatal(err)
	}
	if res.TablesCapped != 3 {
		t.Errorf("TablesCapped %d, want 3", res.TablesCapped)
	}
	m := &module{b: res.Wasm}
	secs, err := m.sections()
	if err != nil {
		t.Fatal(err)
	}
	var got []tableLimits
	for _, s := range secs {
		if s.id != secTable {
			continue
		}
		r := m.reader(s.start, s.end)
		n := r.u32()
		for i := uint32(0); i < n; i++ {
			if r.off+1 < len(r.b) && r.b[r.off] == 0x40 {
				r.skip(2)
				r.valType()
				got = append(got, r.tableLimits())
				r.constExpr()
				continue
			}
			r.valType()
			got = append(got, r.tableLimits())
		}
		r.done("table section")
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	want := []tableLimits{{1, 1, 50, true}, {1, 2, 10, true}, {1, 3, 50, true}, {1, 4, 50, true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tables %v, want %v", got, want)
	}
	// Without the option the section is kept as it is.
	if res, err := Instrument(wasm); err != nil || !strings.Contains(string(res.Wasm), string(tables)) {
		t.Errorf("without TableMax: %v", err)
	}
	_, err = InstrumentWith(wasm, Options{TableMax: 3})
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "table 3 starts at 4 elements, more than 3") {
		t.Errorf("a table over the cap: %v", err)
	}
}

// TestAdmitLimitsCovered: every field of Limits has a case in limitCases,
// a default, and a part in Resolve and Within.
func TestAdmitLimitsCovered(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range limitCases {
		covered[c.limit] = true
	}
	v := reflect.ValueOf(DefaultLimits)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if !covered[name] {
			t.Errorf("no case of limitCases checks %s", name)
		}
		if v.Field(i).IsZero() {
			t.Errorf("DefaultLimits.%s is zero", name)
		}
		// One field over its default: not within the defaults.
		over := DefaultLimits
		f := reflect.ValueOf(&over).Elem().Field(i)
		f.SetUint(f.Uint() + 1)
		if over.Within(Limits{}) || !(Limits{}).Within(over) {
			t.Errorf("Within ignores %s", name)
		}
		zero := DefaultLimits
		reflect.ValueOf(&zero).Elem().Field(i).SetUint(0)
		if zero.Resolve() != DefaultLimits {
			t.Errorf("Resolve leaves %s zero", name)
		}
	}
}
