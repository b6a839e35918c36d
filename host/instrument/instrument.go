// Package instrument rewrites a WebAssembly module so that its host can stop
// it at any time, and so that it never keeps the Go runtime waiting, without
// compiler support and at a small fraction of the cost of wazero's
// WithCloseOnContextDone, which calls into Go at every loop iteration.
//
// Compiled guest code cannot be preempted by the Go scheduler: a guest that
// runs without calling into Go holds its thread, and a garbage collection's
// stop-the-world waits until it does (wazero's per-iteration call exists for
// that as much as for the deadline). A stop flag alone is therefore not
// enough: the timer that would set it cannot run while the world is
// stopping, and a looping guest would hang the process. So the rewrite gives
// the module a budget of work and a slow path:
//
//   - Every loop header adds the loop's weight to a per-call counter kept in
//     a new local (a register: no memory access), and takes the slow path
//     when it passes Budget, then, in a loop without parameters, goes back
//     to the header (appendSlowElse says why).
//   - Every exit from a function with loops (return, a branch out of the
//     function, the final end, a tail call) subtracts that counter and the
//     function's own weight from a budget kept in a new global, and takes the
//     slow path when the budget runs out; so does the entry of every function
//     that calls a module function without passing a loop header first, and
//     of every large function, and every bulk memory or table instruction
//     (fill, copy, init), charged by the size it was given, but for one
//     whose size is a constant under a unit, pushed right before it.
//   - The slow path, a new function, refills the budget, calls into Go with
//     memory.grow 0 (wazero serves memory.grow in Go, where the scheduler can
//     preempt the goroutine; growing by 0 pages changes nothing), then traps
//     with unreachable when the stop flag, a new mutable i32 global exported
//     as StopExport, is set.
//   - After every call that may reach the host (a call to an imported
//     function, an indirect call), the module traps when the flag is set:
//     host functions run in Go, where the world can stop, but they may take
//     long or block (WASI's sleep returns early when the host stops the
//     guest, which then stops at once).
//
// A weight is one unit plus one per 64 bytes of code (a loop's whole body, a
// function's body), and a bulk instruction weighs one unit per 256 bytes or
// elements, so the work between two slow paths is about Budget units
// whatever the shape of the code: a long loop, nested loops in nested calls
// (the counts of returning calls reach the global budget), recursion, tail
// calls, loops of bulk instructions. A host that sets the flag
// (api.MutableGlobal.Set) stops the guest at its next slow path or host
// call, and can tell that trap from the guest's own by the flag it set.
// Counts lost to exceptions unwinding a call are not charged. The module
// must have a memory (operator modules export one).
//
// Control flow is structured, so inserting instructions moves no branch
// target: only the size of each function body and of the code section
// change. Nothing is renumbered: the new type, function, globals and local
// come after every existing one (imports first), so the "name" section stays
// valid and stack traces keep naming functions. Custom sections holding code
// offsets (DWARF, source maps, branch hints, relocations) would be wrong
// after the rewrite and are dropped.
//
// A start section would run the module's start function inside
// instantiation, before the host holds the instance and its flag, so it is
// removed and the function exported as StartExport instead: the host calls
// it right after instantiating, as wasm would have.
//
// A host can also put an instance back into a state it saved, as it was
// right after instantiation or any later call, by restoring a copy of its
// memory and the values of its mutable globals: wazero exports no others,
// so the rewrite exports every mutable global the module defines (the
// budget's included, the stop flag's not: it belongs to the host) as
// GlobalExport(index), Result.Globals. That is the whole state only when
// the module owns its memory, tables and mutable globals (imports none of
// them) and its code never changes a table or drops a segment after
// instantiation; Result.NoReset says otherwise, and why.
//
// Instantiation applies data segments one by one, and Go's linker ends a
// segment at every run of more than 8 zero bytes (tens of thousands of
// segments). So the rewrite also joins consecutive segments separated by
// at most 64 zero bytes, filling the zeros in, where that writes the same
// memory: active segments of a memory the module defines (fresh memory is
// zero), no segment writing into a gap, and nothing naming segments by
// index (data count section, data names).
//
// The rewrite is deterministic: the same input always gives the same bytes,
// so a compilation cache keyed by content keeps working. Instrument refuses
// with an *Error whatever it cannot decode exactly (an unknown opcode or
// section, a type that is not a function type, a malformed encoding); the
// host then runs the module without it, unless it is a tenant's.
//
// InstrumentWith can also cap every table the module defines
// (Options.TableMax): a table's maximum is host memory outside the linear
// memory's limit, and wazero enforces it, so table.grow past it returns -1.
//
// Admit, with the same decoder, checks a module's declarations against
// Limits before anything compiles it: the size and counts of every
// section, the locals of every function, the tables' sizes, and that no
// export takes a name the rewrite reserves (Reserved). It reads no code,
// so its work is linear in the module's size whatever the module declares.
package instrument

import (
	"fmt"
	"strconv"
	"strings"
)

// Names of the exports Instrument adds. The colon keeps them out of the
// identifiers that compilers export.
const (
	// StopExport is the mutable i32 global that stops the module when
	// non-zero.
	StopExport = "wstream:stop"
	// StartExport is the module's start function, exported when the module
	// had a start section (Result.Start).
	StartExport = "wstream:start"
	// GlobalExportPrefix starts the names of the mutable globals exported
	// for the host to save and restore (Result.Globals, GlobalExport).
	GlobalExportPrefix = "wstream:global:"
)

// MaxGlobals is the most mutable globals a module may define for its
// instances to be reset (Result.NoReset): each is an export, and saving or
// restoring one is a call through wazero's API.
const MaxGlobals = 1024

// GlobalExport is the name under which the rewrite exports the global of
// index g (Result.Globals).
func GlobalExport(g uint32) string { return GlobalExportPrefix + strconv.FormatUint(uint64(g), 10) }

// Budget is the work, in units, between two slow paths: a unit is a loop
// iteration or a function call, plus one per 64 bytes of code. The slow path
// costs a call into Go (tens of nanoseconds) and runs about every 50 µs in the
// tightest loop, a negligible cost, and within a few milliseconds in the
// worst case.
const Budget = 1 << 16

// A unit is also the work of 1<<unitShift bytes of code, or of a bulk
// memory or table instruction over 1<<bulkShift bytes or elements.
const (
	unitShift = 6
	bulkShift = 8
)

// bigFunction is the weight from which a function without loops or calls
// is charged on entry: smaller ones run in less time than a few units.
const bigFunction = 16

// Result is an instrumented module.
type Result struct {
	// Wasm is the instrumented module.
	Wasm []byte
	// Start reports that the module had a start section: its function is
	// now exported as StartExport, and the host must call it once after
	// instantiation, before anything else.
	Start bool
	// Stop and Budget are the indices of the stop flag and budget globals;
	// Slow is the index of the slow path function.
	Stop, Budget, Slow uint32
	// Loops, Entries and Exits count the checks inserted at loop headers,
	// at function entries and at function exits; Calls those after calls
	// that may reach the host, Bulk the bulk memory and table instructions
	// charged.
	Loops, Entries, Exits, Calls, Bulk int
	// Dropped lists the custom sections removed, in module order.
	Dropped []string
	// TablesCapped counts the tables whose maximum Options.TableMax
	// lowered or set.
	TablesCapped int
	// DataJoined is the number of data segments that joining them across
	// short runs of zeros removed.
	DataJoined int
	// Globals lists the indices of the mutable globals the module defines,
	// the budget's included and the stop flag's not, in increasing order;
	// each is exported as GlobalExport(index). With a copy of the memory
	// they are the whole state of an instance that a host can save and
	// restore. Nil when NoReset names a reason found outside the code
	// (imports, globals).
	Globals []uint32
	// NoReset says why an instance of the module cannot be put back into a
	// state saved earlier by restoring its memory and Globals: it imports a
	// mutable global, a memory or a table, which the instance does not own;
	// it has a mutable v128 global (wazero's API reads 64 bits of a
	// global); more than MaxGlobals mutable globals, or other than one
	// memory; or its code changes tables or drops segments (table.set,
	// table.grow, table.fill, table.copy, table.init, elem.drop,
	// data.drop), state that no export reaches. "" when it can.
	NoReset string
}

// Error is a module that Instrument cannot rewrite.
type Error struct {
	Offset int    // byte offset in the module
	Reason string // what is wrong there
}

func (e *Error) Error() string {
	return fmt.Sprintf("instrument: at offset %#x: %s", e.Offset, e.Reason)
}

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank orders known sections as the binary format requires them
// (the tag section goes between memory and global, data count between
// element and code); 0 for unknown ids.
func sectionRank(id byte) int {
	switch id {
	case secType, secImport, secFunction, secTable, secMemory, secGlobal, secExport, secStart, secElement, secCode, secData:
		return int(id) * 2
	case secTag:
		return secMemory*2 + 1
	case secDataCount:
		return secElement*2 + 1
	}
	return 0
}

// dropCustom reports whether a custom section refers to code offsets, which
// the rewrite changes.
func dropCustom(name string) bool {
	return strings.HasPrefix(name, ".debug_") || // DWARF
		name == "external_debug_info" || // DWARF in another file
		name == "sourceMappingURL" ||
		strings.HasPrefix(name, "metadata.code.") || // branch hints
		strings.HasPrefix(name, "reloc.") || name == "linking" // object files
}

// section is one section of the input.
type section struct {
	id          byte
	headerStart int
	start, end  int // payload, as offsets in the module
	name        string
}

// Kinds of check.
const (
	checkEntry      = iota
	checkLoop       // after a loop's header
	checkExit       // before what leaves the function
	checkCall       // after a call that may reach the host
	checkBulkSize   // before a bulk memory or table instruction
	checkBulkCharge // after it
)

// point is a check to insert before m.b[off].
type point struct {
	off    int
	kind   uint8
	weight uint32
	// reenter: a loop check's slow path branches back to the loop's
	// header instead of going on (appendSlowElse); false for a loop with
	// parameters, which such a branch would have to pass.
	reenter bool
}

// module is the state of one rewrite.
type module struct {
	b             []byte
	types         []uint32 // parameter count per type
	funcTypes     []uint32 // type per defined function
	funcImports   uint32
	globalImports uint32
	globals       uint32 // defined
	memories      uint32 // imported and defined
	memImports    uint32
	importCount   uint32
	tableImports  []tableLimits
	dataCount     bool // the module has a data count section
	dataNames     bool // its name section names data segments
	exports       uint32
	exportNames   map[string]bool
	start         int64    // start function index, -1 when none
	mutGlobals    []uint32 // indices of the mutable globals defined
	res           Result
	opts          Options

	points []point // reused per function body
	open   []int   // per open block: its loop's index in points, or -1
	body   []byte  // reused per function body
	local  uint32  // the counter local of the body being rewritten
	size   uint32  // the local holding a bulk instruction's size
	fnW    uint32  // the weight of the body being rewritten
}

// Options adjust a rewrite.
type Options struct {
	// TableMax, when not 0, caps the tables the module defines: a table
	// whose minimum is above it is refused, and one with no maximum or a
	// larger one gets TableMax as its maximum, so that table.grow past it
	// returns -1 (Limits.TableElements).
	TableMax uint32
}

// Instrument returns the instrumented form of the module wasm.
func Instrument(wasm []byte) (*Result, error) { return InstrumentWith(wasm, Options{}) }

// InstrumentWith is Instrument with options.
func InstrumentWith(wasm []byte, o Options) (*Result, error) {
	m := &module{b: wasm, start: -1, opts: o}
	secs, err := m.sections()
	if err != nil {
		return nil, err
	}
	if err := m.read(secs); err != nil {
		return nil, err
	}
	if err := m.plan(); err != nil {
		return nil, err
	}
	out, err := m.write(secs)
	if err != nil {
		return nil, err
	}
	m.res.Wasm = out
	return &m.res, nil
}

// read decodes what the rewrite needs from the sections.
func (m *module) read(secs []section) error {
	haveCode := false
	for i := range secs {
		s := &secs[i]
		r := m.reader(s.start, s.end)
		switch s.id {
		case secType:
			m.typeList(r)
		case secImport:
			m.imports(r)
		case secFunction:
			m.funcSection(r)
		case secMemory:
			m.memories += r.u32()
		case secGlobal:
			m.globalList(r)
		case secExport:
			m.exportList(r)
		case secStart:
			m.start = int64(r.u32())
			r.done("start section")
		case secDataCount:
			m.dataCount = true
		case secCustom:
			if s.name == "name" {
				// A reader of its own: a malformed name section is not
				// the rewrite's concern.
				m.dataNames = hasDataNames(m.reader(s.start, s.end))
			}
		case secCode:
			haveCode = true
			if n := r.u32(); r.err == nil && n != uint32(len(m.funcTypes)) {
				r.fail(0, "%d function bodies for %d functions", n, len(m.funcTypes))
			}
		}
		if r.err != nil {
			return r.err
		}
	}
	if !haveCode && len(m.funcTypes) != 0 {
		return &Error{Reason: fmt.Sprintf("%d functions without a code section", len(m.funcTypes))}
	}
	return nil
}

// funcSection reads the function section: each function's type index.
func (m *module) funcSection(r *reader) {
	n := r.count(1)
	m.funcTypes = make([]uint32, n)
	for j := range m.funcTypes {
		m.funcTypes[j] = r.u32()
		if r.err == nil && m.funcTypes[j] >= uint32(len(m.types)) {
			r.fail(0, "function %d has type %d, past the type section", j, m.funcTypes[j])
		}
	}
	r.done("function section")
}

// plan assigns the indices the rewrite adds and refuses a module it cannot
// rewrite.
func (m *module) plan() error {
	if m.memories == 0 {
		return &Error{Reason: "the module has no memory, which the slow path's memory.grow needs"}
	}
	m.res.Stop = m.globalImports + m.globals
	m.res.Budget = m.res.Stop + 1
	m.res.Slow = m.funcImports + uint32(len(m.funcTypes))
	if m.res.Budget < m.globals || m.res.Slow < m.funcImports || uint64(len(m.types)) >= 1<<32-1 {
		return &Error{Reason: "index space full"}
	}
	for _, name := range []string{StopExport, StartExport} {
		if m.exportNames[name] {
			return &Error{Reason: fmt.Sprintf("the module already exports %q", name)}
		}
	}
	for name := range m.exportNames {
		if strings.HasPrefix(name, GlobalExportPrefix) {
			return &Error{Reason: fmt.Sprintf("the module already exports %q, a name the rewrite reserves", name)}
		}
	}
	m.res.Start = m.start >= 0
	if m.memories != 1 {
		m.noReset("the module has %d memories", m.memories)
	}
	if n := len(m.mutGlobals) + 1; n > MaxGlobals {
		m.noReset("the module has %d mutable globals, more than %d", n, MaxGlobals)
	}
	if m.res.NoReset == "" {
		m.res.Globals = append(m.mutGlobals, m.res.Budget)
	}

	return nil
}

// write appends the rewritten sections, creating those the rewrite needs
// in module order.
func (m *module) write(secs []section) ([]byte, error) {
	wasm := m.b
	out := make([]byte, 0, len(wasm)+len(wasm)/8+256)
	out = append(out, wasm[:8]...)
	done := map[byte]bool{}
	// Sections that the rewrite may have to create, in module order.
	added := []byte{secType, secFunction, secGlobal, secExport, secCode}
	emit := func(id byte, s *section) error {
		var err error
		switch id {
		case secType:
			out = m.appendTypes(out, s)
		case secFunction:
			out = m.appendFunctions(out, s)
		case secGlobal:
			out = m.appendGlobals(out, s)
		case secExport:
			out = m.appendExports(out, s)
		case secCode:
			out, err = m.appendCode(out, s)
		}
		done[id] = true
		return err
	}
	for i := range secs {
		s := &secs[i]
		if s.id != secCustom {
			for _, id := range added {
				if !done[id] && sectionRank(id) < sectionRank(s.id) {
					if err := emit(id, nil); err != nil {
						return nil, err
					}
				}
			}
		}
		switch s.id {
		case secCustom:
			if dropCustom(s.name) {
				m.res.Dropped = append(m.res.Dropped, s.name)
				continue
			}
			out = append(out, wasm[s.headerStart:s.end]...)
		case secType, secFunction, secGlobal, secExport, secCode:
			if err := emit(s.id, s); err != nil {
				return nil, err
			}
		case secStart:
			// Exported instead (Result.Start).
		case secData:
			out = m.appendData(out, s)
		case secTable:
			if m.opts.TableMax == 0 {
				out = append(out, wasm[s.headerStart:s.end]...)
				break
			}
			var err error
			if out, err = m.appendTables(out, s); err != nil {
				return nil, err
			}
		default:
			out = append(out, wasm[s.headerStart:s.end]...)
		}
	}
	for _, id := range added {
		if !done[id] {
			if err := emit(id, nil); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// sections splits the module into its sections, checking their order.
func (m *module) sections() ([]section, error) {
	b := m.b
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, &Error{Reason: "not a WebAssembly module"}
	}
	if b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, &Error{Offset: 4, Reason: "unsupported binary version"}
	}
	var secs []section
	last := 0
	r := m.reader(8, len(b))
	for r.off < len(b) && r.err == nil {
		hdr := r.off
		id := r.byte()
		size := r.u32()
		if r.err != nil {
			break
		}
		if uint64(size) > uint64(len(b)-r.off) {
			return nil, &Error{Offset: hdr, Reason: fmt.Sprintf("section %d of %d bytes overruns the module", id, size)}
		}
		s := section{id: id, headerStart: hdr, start: r.off, end: r.off + int(size)}
		if id == secCustom {
			cr := m.reader(s.start, s.end)
			s.name = string(cr.name())
			if cr.err != nil {
				return nil, cr.err
			}
		} else {
			rk := sectionRank(id)
			if rk == 0 {
				return nil, &Error{Offset: hdr, Reason: fmt.Sprintf("unknown section id %d", id)}
			}
			if rk <= last {
				return nil, &Error{Offset: hdr, Reason: fmt.Sprintf("section %d out of order or repeated", id)}
			}
			last = rk
		}
		secs = append(secs, s)
		r.off = s.end
	}
	if r.err != nil {
		return nil, r.err
	}
	return secs, nil
}

func (m *module) reader(start, end int) *reader {
	return &reader{b: m.b[:end], off: start}
}

// typeList reads the parameter count of every type, refusing types other
// than function types (the GC proposal's), which would make the type index
// of an appended type harder to tell.
func (m *module) typeList(r *reader) {
	n := r.count(1)
	m.types = make([]uint32, 0, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		if form := r.byte(); form != 0x60 && r.err == nil {
			r.fail(-1, "type %d is not a function type (form %#x)", i, form)
			break
		}
		params := r.count(1)
		for j := uint32(0); j < params && r.err == nil; j++ {
			r.valType()
		}
		results := r.count(1)
		for j := uint32(0); j < results && r.err == nil; j++ {
			r.valType()
		}
		m.types = append(m.types, params)
	}
	r.done("type section")
}

// imports counts the imported functions, globals and memories, and keeps
// the limits of imported tables.
func (m *module) imports(r *reader) {
	n := r.count(4)
	m.importCount = n
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0x00: // function: type index
			r.u32()
			m.funcImports++
		case 0x01: // table: reference type, limits
			r.valType()
			m.tableImports = append(m.tableImports, r.tableLimits())
			m.noReset("the module imports a table")
		case 0x02: // memory
			r.limits()
			m.memories++
			m.memImports++
			m.noReset("the module imports a memory")
		case 0x03: // global: value type, mutability
			r.valType()
			if mut := r.byte(); mut > 1 && r.err == nil {
				r.fail(-1, "global mutability %#x", mut)
			} else if mut == 1 {
				m.noReset("the module imports a mutable global")
			}
			m.globalImports++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			if r.err == nil {
				r.fail(-1, "unknown import kind %#x", kind)
			}
		}
	}
	r.done("import section")
}

// globalList reads the global section, noting which globals are mutable.
func (m *module) globalList(r *reader) {
	m.globals = r.count(3) // type, mutability, end
	for i := uint32(0); i < m.globals && r.err == nil; i++ {
		t := r.valType()
		mut := r.byte()
		if mut > 1 && r.err == nil {
			r.fail(-1, "global mutability %#x", mut)
		}
		r.constExpr()
		if mut == 1 && r.err == nil {
			if t == valV128 {
				m.noReset("global %d is a mutable v128", m.globalImports+i)
			}
			m.mutGlobals = append(m.mutGlobals, m.globalImports+i)
		}
	}
	r.done("global section")
}

// noReset records the first reason why the module's instances cannot be
// reset (Result.NoReset).
func (m *module) noReset(format string, args ...any) {
	if m.res.NoReset == "" {
		m.res.NoReset = fmt.Sprintf(format, args...)
	}
}

// exportList reads the export names.
func (m *module) exportList(r *reader) {
	m.exports = r.count(3)
	m.exportNames = make(map[string]bool, m.exports)
	for i := uint32(0); i < m.exports && r.err == nil; i++ {
		m.exportNames[string(r.name())] = true
		r.byte()
		r.u32()
	}
	r.done("export section")
}

// appendVector appends section id made of the vector of section s (nil:
// none), which holds n elements, followed by the elements in extra.
func (m *module) appendVector(out []byte, id byte, s *section, n uint32, extra []byte) []byte {
	var rest []byte
	if s != nil {
		r := m.reader(s.start, s.end)
		r.u32()
		rest = m.b[r.off:s.end]
	}
	var tmp [5]byte
	count := appendU32(tmp[:0], n)
	out = append(out, id)
	out = appendU32(out, uint32(len(count)+len(rest)+len(extra)))
	out = append(out, count...)
	out = append(out, rest...)
	return append(out, extra...)
}

// appendTypes adds the slow path's type, () -> (), last.
func (m *module) appendTypes(out []byte, s *section) []byte {
	return m.appendVector(out, secType, s, uint32(len(m.types))+1, []byte{0x60, 0x00, 0x00})
}

// appendFunctions adds the slow path function last.
func (m *module) appendFunctions(out []byte, s *section) []byte {
	return m.appendVector(out, secFunction, s, uint32(len(m.funcTypes))+1, appendU32(nil, uint32(len(m.types))))
}

// appendGlobals adds the stop flag, an i32 initialized to 0, and the
// budget, an i32 initialized to Budget, both mutable, last.
func (m *module) appendGlobals(out []byte, s *section) []byte {
	g := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41}
	g = appendS32(g, Budget)
	g = append(g, 0x0b)
	return m.appendVector(out, secGlobal, s, m.globals+2, g)
}

// appendExports adds the stop flag, the start function if any, and the
// mutable globals, last.
func (m *module) appendExports(out []byte, s *section) []byte {
	added := appendName(nil, StopExport)
	added = append(added, 0x03)
	added = appendU32(added, m.res.Stop)
	n := m.exports + 1
	if m.start >= 0 {
		added = appendName(added, StartExport)
		added = append(added, 0x00)
		added = appendU32(added, uint32(m.start))
		n++
	}
	for _, g := range m.res.Globals {
		added = appendName(added, GlobalExport(g))
		added = append(added, 0x03)
		added = appendU32(added, g)
		n++
	}
	return m.appendVector(out, secExport, s, n, added)
}

// appendTables appends the table section s with every table's maximum at
// most m.opts.TableMax.
func (m *module) appendTables(out []byte, s *section) ([]byte, error) {
	r := m.reader(s.start, s.end)
	n := r.count(2)
	body := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		at := r.off
		init := r.off+1 < len(r.b) && r.b[r.off] == 0x40 && r.b[r.off+1] == 0x00
		if init {
			r.skip(2) // a table with an initializer (function references)
		}
		r.valType()
		body = append(body, m.b[at:r.off]...)
		lim := r.tableLimits()
		if r.err != nil {
			break
		}
		if lim.min > uint64(m.opts.TableMax) {
			return nil, &Error{Offset: at, Reason: fmt.Sprintf("table %d starts at %d elements, more than %d", i, lim.min, m.opts.TableMax)}
		}
		max := uint64(m.opts.TableMax)
		if lim.hasMax && lim.max <= max {
			max = lim.max
		} else {
			m.res.TablesCapped++
		}
		body = append(body, lim.flags|1)
		body = appendU64(body, lim.min)
		body = appendU64(body, max)
		if init {
			at := r.off
			r.constExpr()
			body = append(body, m.b[at:r.off]...)
		}
	}
	r.done("table section")
	if r.err != nil {
		return nil, r.err
	}
	out = append(out, secTable)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...), nil
}

// slowBody is the slow path: refill the budget, call into Go, trap if the
// host set the stop flag.
func (m *module) slowBody() []byte {
	b := []byte{0x00, 0x41} // no locals; i32.const Budget
	b = appendS32(b, Budget)
	b = append(b, 0x24) // global.set $budget
	b = appendU32(b, m.res.Budget)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a, 0x23) // memory.grow 0; drop; global.get $stop
	b = appendU32(b, m.res.Stop)
	return append(b, 0x04, 0x40, 0x00, 0x0b, 0x0b) // if unreachable end; end
}

// appendCode appends the code section s (nil: none) with the checks
// inserted and the slow path added last.
func (m *module) appendCode(out []byte, s *section) ([]byte, error) {
	// The section's size is known only once every body is rewritten:
	// write it after the bodies and move them.
	out = append(out, secCode)
	sizeAt := len(out)
	out = appendU32(out, uint32(len(m.funcTypes))+1)
	if s != nil {
		r := m.reader(s.start, s.end)
		r.u32()
		for i := range m.funcTypes {
			size := r.u32()
			if r.err != nil {
				return nil, r.err
			}
			if uint64(size) > uint64(s.end-r.off) {
				return nil, &Error{Offset: r.off, Reason: fmt.Sprintf("body of function %d overruns the code section", int(m.funcImports)+i)}
			}
			body, err := m.rewrite(r.off, r.off+int(size), uint32(i))
			if err != nil {
				return nil, err
			}
			out = appendU32(out, uint32(len(body)))
			out = append(out, body...)
			r.off += int(size)
		}
		if r.off != s.end {
			return nil, &Error{Offset: r.off, Reason: "bytes after the last function body"}
		}
	}
	slow := m.slowBody()
	out = appendU32(out, uint32(len(slow)))
	out = append(out, slow...)
	body := len(out) - sizeAt
	size := appendU32(nil, uint32(body))
	out = append(out, size...)
	copy(out[sizeAt+len(size):], out[sizeAt:sizeAt+body])
	copy(out[sizeAt:], size)
	return out, nil
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendU64(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}

// uleb32 decodes a valid unsigned LEB128 number at the start of b.
func uleb32(b []byte) (uint32, int) {
	r := reader{b: b}
	v := r.u32()
	return v, r.off
}
