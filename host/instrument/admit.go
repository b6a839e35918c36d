package instrument

import (
	"cmp"
	"fmt"
	"strings"
)

// Limits bound what a module may declare, checked by Admit on its bytes
// before anything compiles it: wazero's decoder and compiler hold memory in
// proportion to what a module declares (about 26 bytes per local, 8 bytes
// per table element, one allocation per function, type, global or
// segment), and a few hundred bytes can declare billions. A zero field
// takes its value in DefaultLimits. abi/ABI.md ("Limits") lists them.
type Limits struct {
	// ModuleBytes bounds the size of the module.
	ModuleBytes uint64
	// Types bounds the entries of the type section.
	Types uint32
	// Imports bounds the imports.
	Imports uint32
	// Functions bounds the functions the module defines.
	Functions uint32
	// Tables bounds the tables, imported and defined.
	Tables uint32
	// TableElements bounds the size of every table: its minimum may not
	// exceed it, and Instrument rewrites the table's maximum to it when the
	// table declares none or a larger one, so that table.grow past it
	// returns -1, as the core specification lets a grow fail.
	TableElements uint32
	// Memories bounds the memories, imported and defined.
	Memories uint32
	// Globals bounds the globals, imported and defined.
	Globals uint32
	// Exports bounds the exports.
	Exports uint32
	// ElementSegments bounds the element segments, and Elements the
	// elements they hold together.
	ElementSegments uint32
	Elements        uint64
	// DataSegments bounds the data segments, and DataBytes the bytes they
	// hold together.
	DataSegments uint32
	DataBytes    uint64
	// LocalsPerFunction bounds the locals one function declares (its
	// parameters not included), and Locals those of every function.
	LocalsPerFunction uint32
	Locals            uint64
	// FunctionBytes bounds the size of one function body, and CodeBytes
	// the code section.
	FunctionBytes uint32
	CodeBytes     uint64
	// LocalBlocks bounds the sum, over the functions, of a function's
	// locals and parameters times its blocks (block, if, try, and loop,
	// which counts twice: Instrument adds a block to check it), and
	// BlockPairs the sum of its blocks squared: the work and memory of
	// wazero's compiler grow with these (it tracks every variable through
	// every block, and every loop through every block), not with the size
	// of the code. A function of 130 KiB with 20,000 locals set inside
	// 10,000 nested loops took a minute and 165 MiB to compile; one of
	// 8,192 nested loops, 56 KiB, two minutes and 181 MiB.
	LocalBlocks uint64
	BlockPairs  uint64
	// CustomBytes bounds the custom sections together (names, debugging
	// information).
	CustomBytes uint64
}

// DefaultLimits are the limits of a field left zero. They admit the
// modules the guest SDKs build with a wide margin (a Go module, the
// largest, has about 2,000 functions, 1.7 MB of code, one table of 6,000
// elements and 33,000 data segments) and bound the memory that compiling
// one module takes (abi/ABI.md, "Limits", gives the measured figure).
var DefaultLimits = Limits{
	ModuleBytes:       32 << 20,
	Types:             1 << 16,
	Imports:           1 << 12,
	Functions:         1 << 17,
	Tables:            4,
	TableElements:     1 << 18,
	Memories:          1,
	Globals:           1 << 16,
	Exports:           1 << 16,
	ElementSegments:   1 << 16,
	Elements:          1 << 18,
	DataSegments:      1 << 18,
	DataBytes:         32 << 20,
	LocalsPerFunction: 50000,
	Locals:            1 << 21,
	FunctionBytes:     1 << 20,
	CodeBytes:         32 << 20,
	LocalBlocks:       1 << 22,
	BlockPairs:        1 << 25,
	CustomBytes:       16 << 20,
}

// Resolve returns l with every zero field set to its default.
func (l Limits) Resolve() Limits {
	d := DefaultLimits
	l.ModuleBytes = cmp.Or(l.ModuleBytes, d.ModuleBytes)
	l.Types = cmp.Or(l.Types, d.Types)
	l.Imports = cmp.Or(l.Imports, d.Imports)
	l.Functions = cmp.Or(l.Functions, d.Functions)
	l.Tables = cmp.Or(l.Tables, d.Tables)
	l.TableElements = cmp.Or(l.TableElements, d.TableElements)
	l.Memories = cmp.Or(l.Memories, d.Memories)
	l.Globals = cmp.Or(l.Globals, d.Globals)
	l.Exports = cmp.Or(l.Exports, d.Exports)
	l.ElementSegments = cmp.Or(l.ElementSegments, d.ElementSegments)
	l.Elements = cmp.Or(l.Elements, d.Elements)
	l.DataSegments = cmp.Or(l.DataSegments, d.DataSegments)
	l.DataBytes = cmp.Or(l.DataBytes, d.DataBytes)
	l.LocalsPerFunction = cmp.Or(l.LocalsPerFunction, d.LocalsPerFunction)
	l.Locals = cmp.Or(l.Locals, d.Locals)
	l.FunctionBytes = cmp.Or(l.FunctionBytes, d.FunctionBytes)
	l.CodeBytes = cmp.Or(l.CodeBytes, d.CodeBytes)
	l.LocalBlocks = cmp.Or(l.LocalBlocks, d.LocalBlocks)
	l.BlockPairs = cmp.Or(l.BlockPairs, d.BlockPairs)
	l.CustomBytes = cmp.Or(l.CustomBytes, d.CustomBytes)
	return l
}

// Within reports whether every limit of l is at most the same limit of o
// (both resolved): a module admitted under l is admitted under o.
func (l Limits) Within(o Limits) bool {
	l, o = l.Resolve(), o.Resolve()
	return l.ModuleBytes <= o.ModuleBytes && l.Types <= o.Types && l.Imports <= o.Imports &&
		l.Functions <= o.Functions && l.Tables <= o.Tables && l.TableElements <= o.TableElements &&
		l.Memories <= o.Memories && l.Globals <= o.Globals && l.Exports <= o.Exports &&
		l.ElementSegments <= o.ElementSegments && l.Elements <= o.Elements &&
		l.DataSegments <= o.DataSegments && l.DataBytes <= o.DataBytes &&
		l.LocalsPerFunction <= o.LocalsPerFunction && l.Locals <= o.Locals &&
		l.FunctionBytes <= o.FunctionBytes && l.CodeBytes <= o.CodeBytes && l.LocalBlocks <= o.LocalBlocks && l.BlockPairs <= o.BlockPairs &&
		l.CustomBytes <= o.CustomBytes
}

// LimitError is a module that declares more than a limit allows, or
// exports a name the rewrite reserves.
type LimitError struct {
	// Limit is the field of Limits exceeded, or "ReservedNames".
	Limit string
	// Where is the section, and the function, table or segment when one
	// is at fault.
	Where string
	// What the module declares there, and the limit.
	What       string
	Have, Max  uint64
	ByteOffset int
}

func (e *LimitError) Error() string {
	if e.Limit == "ReservedNames" {
		return fmt.Sprintf("module refused: %s (offset %#x): %s", e.Where, e.ByteOffset, e.What)
	}
	return fmt.Sprintf("module refused: %s (offset %#x): %d %s, over the admission limit of %d (%s)",
		e.Where, e.ByteOffset, e.Have, e.What, e.Max, e.Limit)
}

// Reserved reports whether the rewrite reserves name for the exports it
// adds.
func Reserved(name string) bool {
	return name == StopExport || name == StartExport || strings.HasPrefix(name, GlobalExportPrefix)
}

// Admit checks the module's declarations against l (resolved) without
// decoding its code: the sizes and counts of every section, the locals of
// every function, the limits of every table, and that no export takes a
// name Reserved. It returns a *LimitError for a module over a limit and an
// *Error for one it cannot decode. Its work and memory are linear in the
// module's size and independent of what the module declares.
func Admit(wasm []byte, l Limits) error {
	l = l.Resolve()
	if uint64(len(wasm)) > l.ModuleBytes {
		return &LimitError{Limit: "ModuleBytes", Where: "the module", What: "bytes", Have: uint64(len(wasm)), Max: l.ModuleBytes}
	}
	m := &module{b: wasm, start: -1}
	secs, err := m.sections()
	if err != nil {
		return err
	}
	a := admission{l: l}
	for i := range secs {
		s := &secs[i]
		r := m.reader(s.start, s.end)
		a.at = s.start
		switch s.id {
		case secCustom:
			a.custom += uint64(s.end - s.start)
			a.over("CustomBytes", "the custom sections", "bytes", a.custom, l.CustomBytes)
		case secType:
			a.over("Types", "type section", "types", uint64(r.u32()), uint64(l.Types))
			if a.err == nil {
				// Parameter counts, for LocalBlocks.
				r = m.reader(s.start, s.end)
				m.typeList(r)
			}
		case secImport:
			a.imports(m, r)
		case secFunction:
			n := r.u32()
			a.over("Functions", "function section", "functions", uint64(n), uint64(l.Functions))
			if a.err == nil && r.err == nil {
				a.funcTypes = make([]uint32, n)
				for j := range a.funcTypes {
					a.funcTypes[j] = r.u32()
				}
				r.done("function section")
			}
		case secTable:
			a.tableList(r)
		case secMemory:
			a.memories += uint64(r.u32())
			a.over("Memories", "memory section", "memories", a.memories, uint64(l.Memories))
		case secGlobal:
			a.globals += uint64(r.u32())
			a.over("Globals", "global section", "globals", a.globals, uint64(l.Globals))
		case secExport:
			a.exports(r)
		case secElement:
			a.elements(r)
		case secCode:
			a.over("CodeBytes", "code section", "bytes", uint64(s.end-s.start), l.CodeBytes)
			a.code(r, m.types)
		case secData:
			a.data(r)
		}
		// A limit stops the reading where it was exceeded, and what was
		// left unread is no fault of the module.
		if a.err != nil {
			return a.err
		}
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// admission is the state of one Admit.
type admission struct {
	l   Limits
	at  int // the offset at fault, for the error
	err *LimitError

	custom, memories, globals, tables uint64
	funcTypes                         []uint32 // type per defined function
	funcImports                       uint32
}

// over records the first limit exceeded.
func (a *admission) over(limit, where, what string, have, max uint64) {
	if a.err == nil && have > max {
		a.err = &LimitError{Limit: limit, Where: where, What: what, Have: have, Max: max, ByteOffset: a.at}
	}
}

func (a *admission) imports(m *module, r *reader) {
	at := r.off
	m.imports(r)
	a.at = at
	a.over("Imports", "import section", "imports", uint64(m.importCount), uint64(a.l.Imports))
	for i, t := range m.tableImports {
		a.tableAt(fmt.Sprintf("import section, table import %d", i), t)
	}
	a.funcImports = m.funcImports
	a.memories += uint64(m.memories)
	a.over("Memories", "import section", "memories", a.memories, uint64(a.l.Memories))
	a.globals += uint64(m.globalImports)
	a.over("Globals", "import section", "globals", a.globals, uint64(a.l.Globals))
}

// tableList reads the table section.
func (a *admission) tableList(r *reader) {
	n := r.count(2)
	for i := uint32(0); i < n && r.err == nil && a.err == nil; i++ {
		a.at = r.off
		where := fmt.Sprintf("table section, table %d", uint64(a.tables))
		if r.off+1 < len(r.b) && r.b[r.off] == 0x40 && r.b[r.off+1] == 0x00 {
			// A table with an initializer (function references).
			r.skip(2)
			r.valType()
			a.table(r, where)
			r.constExpr()
			continue
		}
		r.valType()
		a.table(r, where)
	}
	r.done("table section")
}

// table reads a table's limits (its reference type read), counting it.
func (a *admission) table(r *reader, where string) {
	at := r.off
	lim := r.tableLimits()
	a.at = at
	a.tableAt(where, lim)
}

// tableAt counts a table of limits lim.
func (a *admission) tableAt(where string, lim tableLimits) {
	a.tables++
	a.over("Tables", where, "tables", a.tables, uint64(a.l.Tables))
	a.over("TableElements", where, "elements at the table's minimum", lim.min, uint64(a.l.TableElements))
}

// exports reads the export section, refusing reserved names.
func (a *admission) exports(r *reader) {
	n := r.count(3)
	a.over("Exports", "export section", "exports", uint64(n), uint64(a.l.Exports))
	for i := uint32(0); i < n && r.err == nil && a.err == nil; i++ {
		at := r.off
		name := r.name()
		r.byte()
		r.u32()
		if r.err == nil && Reserved(string(name)) {
			a.err = &LimitError{Limit: "ReservedNames", Where: fmt.Sprintf("export section, export %d", i), ByteOffset: at,
				What: fmt.Sprintf("the name %q is reserved for the host's instrumentation (names %q, %q and %q...)",
					string(name), StopExport, StartExport, GlobalExportPrefix)}
		}
	}
	r.done("export section")
}

// elements reads the element section: segment flags per the core
// specification's binary format, then the elements.
func (a *admission) elements(r *reader) {
	n := r.count(2)
	a.over("ElementSegments", "element section", "segments", uint64(n), uint64(a.l.ElementSegments))
	var total uint64
	for i := uint32(0); i < n && r.err == nil && a.err == nil; i++ {
		a.at = r.off
		flags := r.u32()
		if flags > 7 {
			r.fail(-1, "element segment %d: unknown flags %d", i, flags)
			return
		}
		if flags&3 == 2 {
			r.u32() // table index
		}
		if flags&1 == 0 {
			r.constExpr() // active: offset
		}
		exprs := flags&4 != 0
		if flags&3 != 0 {
			if exprs {
				r.valType() // reference type
			} else {
				r.byte() // element kind
			}
		}
		k := r.count(1)
		total += uint64(k)
		a.over("Elements", fmt.Sprintf("element section, segment %d", i), "elements in the segments so far", total, a.l.Elements)
		for j := uint32(0); j < k && r.err == nil && a.err == nil; j++ {
			if exprs {
				r.constExpr()
			} else {
				r.u32()
			}
		}
	}
	r.done("element section")
}

// data reads the data section.
func (a *admission) data(r *reader) {
	n := r.count(1)
	a.over("DataSegments", "data section", "segments", uint64(n), uint64(a.l.DataSegments))
	var total uint64
	for i := uint32(0); i < n && r.err == nil && a.err == nil; i++ {
		a.at = r.off
		switch flags := r.u32(); flags {
		case 0:
			r.constExpr()
		case 1:
		case 2:
			r.u32()
			r.constExpr()
		default:
			r.fail(-1, "data segment %d: unknown flags %d", i, flags)
			return
		}
		total += uint64(len(r.name()))
		a.over("DataBytes", fmt.Sprintf("data section, segment %d", i), "bytes in the segments so far", total, a.l.DataBytes)
	}
	r.done("data section")
}

// code reads every body's size and local declarations, and counts its
// blocks. types holds the parameter count of every type.
func (a *admission) code(r *reader, types []uint32) {
	n := r.count(2)
	var total, localBlocks, pairs uint64
	for i := uint32(0); i < n && r.err == nil && a.err == nil; i++ {
		a.at = r.off
		fn := uint64(a.funcImports) + uint64(i)
		where := fmt.Sprintf("code section, function %d", fn)
		size := r.u32()
		a.over("FunctionBytes", where, "bytes of code", uint64(size), uint64(a.l.FunctionBytes))
		if r.err != nil || a.err != nil {
			return
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			r.fail(0, "body of function %d overruns the code section", fn)
			return
		}
		body := &reader{b: r.b[:r.off+int(size)], off: r.off}
		nl := body.count(2)
		var locals uint64
		for j := uint32(0); j < nl && body.err == nil && a.err == nil; j++ {
			locals += uint64(body.u32())
			body.valType()
			a.over("LocalsPerFunction", where, "locals", locals, uint64(a.l.LocalsPerFunction))
		}
		total += locals
		a.over("Locals", where, "locals in the functions so far", total, a.l.Locals)
		blocks := uint64(0)
		for body.off < len(body.b) && body.err == nil && a.err == nil {
			switch op := body.byte(); op {
			case opLoop:
				// Its check, which Instrument adds, is a block too.
				blocks += 2
				body.instr(op)
			case opBlock, opIf, opTry, opTryTable:
				blocks++
				body.instr(op)
			default:
				body.instr(op)
			}
		}
		if body.err != nil {
			r.err = body.err
			return
		}
		if i < uint32(len(a.funcTypes)) && a.funcTypes[i] < uint32(len(types)) {
			locals += uint64(types[a.funcTypes[i]])
		}
		localBlocks += locals * blocks
		a.over("LocalBlocks", where, "locals and parameters times blocks in the functions so far", localBlocks, a.l.LocalBlocks)
		pairs += blocks * blocks
		a.over("BlockPairs", where, "blocks squared in the functions so far", pairs, a.l.BlockPairs)
		r.off += int(size)
	}
	r.done("code section")
}

// tableLimits are a table's limits.
type tableLimits struct {
	flags    byte
	min, max uint64
	hasMax   bool
}

// tableLimits reads the limits of a table.
func (r *reader) tableLimits() tableLimits {
	var l tableLimits
	l.flags = r.byte()
	if r.err == nil && l.flags > 7 {
		r.fail(-1, "unknown limits flags %#x", l.flags)
		return l
	}
	bits := uint(32)
	if l.flags&4 != 0 {
		bits = 64
	}
	l.min = r.uleb(bits)
	if l.flags&1 != 0 {
		l.hasMax = true
		l.max = r.uleb(bits)
	}
	return l
}
