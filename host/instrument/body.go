package instrument

import "fmt"

// The rewrite of one function body: where its checks go (scan) and the
// code of each check.

// rewrite returns the body of defined function i, m.b[start:end], with its
// checks.
func (m *module) rewrite(start, end int, i uint32) ([]byte, error) {
	fn := m.funcImports + i
	r := m.reader(start, end)
	nl := r.count(2)
	locals := uint64(m.types[m.funcTypes[i]])
	for j := uint32(0); j < nl && r.err == nil; j++ {
		locals += uint64(r.u32())
		r.valType()
	}
	if r.err != nil {
		return nil, r.err
	}
	if locals >= 1<<32-1 {
		return nil, &Error{Offset: start, Reason: fmt.Sprintf("function %d has too many locals", fn)}
	}
	declEnd := r.off
	m.local = uint32(locals)
	m.fnW = weight(end - declEnd)
	entry, loops, bulk, err := m.scan(r, fn)
	if err != nil {
		return nil, err
	}
	points := m.points
	if !loops {
		// Without loops nothing exits with a count to charge.
		k := 0
		for _, p := range points {
			if p.kind != checkExit {
				points[k] = p
				k++
			}
		}
		points = points[:k]
	}
	if !entry {
		points = points[1:]
	}

	b := m.body[:0]
	extra := uint32(0) // i32 locals: the counter, then the size
	if loops {
		extra++
	}
	m.size = m.local + extra
	if bulk {
		extra++
	}
	if extra > 0 {
		if uint64(m.local)+uint64(extra) >= 1<<32-1 {
			return nil, &Error{Offset: start, Reason: fmt.Sprintf("function %d has too many locals", fn)}
		}
		b = appendU32(b, nl+1)
		_, k := uleb32(m.b[start:declEnd])
		b = append(b, m.b[start+k:declEnd]...)
		b = append(b, byte(extra), 0x7f)
	} else {
		b = append(b, m.b[start:declEnd]...)
	}
	at := declEnd
	for _, p := range points {
		b = append(b, m.b[at:p.off]...)
		b = m.appendCheck(b, p)
		at = p.off
	}
	b = append(b, m.b[at:end]...)
	m.body = b
	return b, nil
}

// scan decodes a function body from its first instruction and records in
// m.points where checks go: first a provisional entry check, then the
// others in code order. It reports whether the entry check is needed, and
// whether the function has loops and bulk instructions.
func (m *module) scan(r *reader, fn uint32) (entry, loops, bulk bool, err error) {
	end := len(r.b)
	m.points = append(m.points[:0], point{off: r.off, kind: checkEntry})
	m.open = append(m.open[:0], -1) // the function's own block
	prefix := true                  // in straight-line code from the entry
	reached := false                // a loop header in that code
	calls := false                  // calls a module function
	small := false                  // the last instruction pushed a constant under 1<<bulkShift
	for r.err == nil {
		if r.off >= end {
			r.fail(0, "function %d: body ends inside a block", fn)
			break
		}
		at := r.off
		op := r.b[r.off]
		r.off++
		if isExit(op) {
			m.points = append(m.points, point{off: at, kind: checkExit})
		}
		r.target = uint32(len(m.open) - 1) // the function's label, for br_table
		idx := r.instr(op)
		pushedSmall := small
		small = false
		if prefix {
			switch {
			case op == opLoop:
				reached, prefix = true, false
			case op == opCall && idx < m.funcImports, op == opBlock, op == opEnd && len(m.open) > 1:
			case !straight[op]:
				prefix = false
			}
		}
		switch op {
		case opLoop:
			loops = true
			m.open = append(m.open, len(m.points))
			noParams := idx == noType || (idx < uint32(len(m.types)) && m.types[idx] == 0)
			m.points = append(m.points, point{off: r.off, kind: checkLoop, reenter: noParams})
		case opBlock, opIf, opTry, opTryTable:
			m.open = append(m.open, -1)
		case opEnd, opDelegate: // delegate ends a legacy try block
			if op == opDelegate && len(m.open) == 1 {
				r.fail(-1, "function %d: delegate outside a try block", fn)
				break
			}
			if k := m.open[len(m.open)-1]; k >= 0 {
				// The loop's weight covers its whole body.
				m.points[k].weight = weight(at - m.points[k].off)
			}
			m.open = m.open[:len(m.open)-1]
			if len(m.open) == 0 && op == opEnd {
				m.points = append(m.points, point{off: at, kind: checkExit})
			}
		case opCall, opReturnCall:
			// Imported functions are the host's: they cannot call back.
			calls = calls || idx >= m.funcImports
			if op == opCall && idx < m.funcImports {
				m.points = append(m.points, point{off: r.off, kind: checkCall})
			}
		case opCallIndirect, opReturnCallIndirect, opCallRef, opReturnCallRef:
			calls = true
			if op == opCallIndirect || op == opCallRef {
				m.points = append(m.points, point{off: r.off, kind: checkCall})
			}
		case opTableSet:
			m.noReset("function %d uses table.set", fn)
		case prefixMisc:
			bulk = m.misc(r, fn, at, pushedSmall) || bulk
		case 0x41: // i32.const
			v := (&reader{b: r.b, off: at + 1}).sleb(32)
			small = v >= 0 && v < 1<<bulkShift
		case opBr, opBrIf, opBrOnNull, opBrOnNonNull:
			if idx == uint32(len(m.open)-1) {
				m.points = append(m.points, point{off: at, kind: checkExit})
			}
		case opBrTable:
			if r.hit {
				m.points = append(m.points, point{off: at, kind: checkExit})
			}
		}
		if len(m.open) == 0 && r.err == nil {
			if r.off != end {
				r.fail(0, "function %d: %d bytes after the end of its body", fn, end-r.off)
			}
			break
		}
	}
	if r.err != nil {
		return false, false, false, r.err
	}
	entry = !reached && (calls || m.fnW >= bigFunction)
	return entry, loops, bulk, nil
}

// misc records what a 0xfc instruction at at needs, and reports whether
// it is a bulk instruction that needs a size check.
func (m *module) misc(r *reader, fn uint32, at int, pushedSmall bool) bool {
	if name := miscNoReset[r.sub]; name != "" {
		m.noReset("function %d uses %s", fn, name)
	}
	s := r.sub
	if !(s == 8 || s == 10 || s == 11 || s == 12 || s == 14 || s == 17) || pushedSmall {
		return false
	}
	// memory.init, memory.copy, memory.fill, table.init, table.copy,
	// table.fill: their size is on top of the stack. One that an i32.const
	// just put there, and that weighs nothing, costs no check (Go's
	// compiler copies and clears every value over 16 bytes with one).
	m.points = append(m.points, point{off: at, kind: checkBulkSize}, point{off: r.off, kind: checkBulkCharge})
	return true
}

// miscNoReset names the 0xfc instructions that change tables or segments
// after instantiation (Result.NoReset), by sub-opcode.
var miscNoReset = map[uint32]string{9: "data.drop", 12: "table.init", 13: "elem.drop", 14: "table.copy", 15: "table.grow", 17: "table.fill"}

// isExit reports whether op ends the function's activation, always or
// when its label is the function's (checked by the caller).
func isExit(op byte) bool {
	return op == opReturn || op == opReturnCall || op == opReturnCallIndirect || op == opReturnCallRef
}

// appendCheck appends the check of p.
func (m *module) appendCheck(b []byte, p point) []byte {
	switch p.kind {
	case checkEntry:
		m.res.Entries++
		// budget -= 1+fnW; if budget < 0: slow
		b = m.appendGlobal(b, 0x23)
		b = append(b, 0x41)
		b = appendS32(b, int32(1+m.fnW))
		b = append(b, 0x6b) // i32.sub
		b = m.appendGlobal(b, 0x24)
		b = m.appendGlobal(b, 0x23)
		b = append(b, 0x41, 0x00, 0x4e) // i32.const 0; i32.ge_s
		return m.appendSlowElse(b, false, false)
	case checkLoop:
		m.res.Loops++
		// n += 1+loop weight; if n > Budget: n = 0, slow
		b = m.appendLocal(b, 0x20)
		b = append(b, 0x41)
		b = appendS32(b, int32(1+p.weight))
		b = append(b, 0x6a) // i32.add
		b = m.appendLocal(b, 0x22)
		b = append(b, 0x41)
		b = appendS32(b, Budget)
		b = append(b, 0x4d) // i32.le_u
		return m.appendSlowElse(b, true, p.reenter)
	case checkCall:
		m.res.Calls++
		// if stop: unreachable
		b = append(b, 0x23)
		b = appendU32(b, m.res.Stop)
		return append(b, 0x45, 0x04, 0x40, 0x05, 0x00, opEnd) // i32.eqz; if else unreachable end
	case checkBulkSize:
		m.res.Bulk++
		return appendU32(append(b, 0x22), m.size) // local.tee $size
	case checkBulkCharge:
		// budget -= size>>bulkShift; if budget < 0: slow
		b = m.appendGlobal(b, 0x23)
		b = appendU32(append(b, 0x20), m.size)
		b = append(b, 0x41, bulkShift, 0x76, 0x6b) // i32.const; i32.shr_u; i32.sub
		b = m.appendGlobal(b, 0x24)
		b = m.appendGlobal(b, 0x23)
		b = append(b, 0x41, 0x00, 0x4e) // i32.const 0; i32.ge_s
		return m.appendSlowElse(b, false, false)
	default:
		m.res.Exits++
		// budget -= n + fnW; n = 0; if budget < 0: slow
		b = m.appendGlobal(b, 0x23)
		b = m.appendLocal(b, 0x20)
		b = append(b, 0x6b) // i32.sub
		if m.fnW > 0 {
			b = append(b, 0x41)
			b = appendS32(b, int32(m.fnW))
			b = append(b, 0x6b)
		}
		b = m.appendGlobal(b, 0x24)
		b = append(b, 0x41, 0x00) // n = 0: a br_if not taken goes on
		b = m.appendLocal(b, 0x21)
		b = m.appendGlobal(b, 0x23)
		b = append(b, 0x41, 0x00, 0x4e) // i32.const 0; i32.ge_s
		return m.appendSlowElse(b, false, false)
	}
}

// appendSlowElse appends: if else [n = 0] call $slow [br 1] end. The slow
// path goes in the else branch, which wazero lays out after the then
// branch: an empty then branch lets the usual case fall through, about a
// cycle faster per loop iteration than a taken jump over the slow path.
//
// With reenter, a loop check's slow path ends with a branch back to the
// loop's header (label 1, around the if), which checks again and goes on:
// then only the usual case reaches the code after the check. When the two
// paths joined there instead, wazero's code for every iteration of the loop
// got slower: the Go mapfilter operators by 3-5% (BENCHMARKS.md).
func (m *module) appendSlowElse(b []byte, reset, reenter bool) []byte {
	b = append(b, 0x04, 0x40, 0x05) // if else
	if reset {
		b = append(b, 0x41, 0x00)
		b = m.appendLocal(b, 0x21)
	}
	b = append(b, opCall)
	b = appendU32(b, m.res.Slow)
	if reenter {
		b = append(b, opBr, 1)
	}
	return append(b, opEnd)
}

func (m *module) appendGlobal(b []byte, op byte) []byte {
	return appendU32(append(b, op), m.res.Budget)
}

func (m *module) appendLocal(b []byte, op byte) []byte {
	return appendU32(append(b, op), m.local)
}

// weight is the weight of n bytes of code, at most Budget.
func weight(n int) uint32 {
	return uint32(min(n>>unitShift, Budget))
}

// straight lists the one-byte opcodes that neither transfer control nor
// call: code made of them (and of blocks) runs from its start to its end.
var straight = func() (s [256]bool) {
	for op := range s {
		s[op] = true
	}
	for _, op := range []byte{0x00, opBlock, opLoop, opIf, 0x05, opTry, 0x07, 0x08, 0x09, 0x0a, opEnd,
		opBr, opBrIf, opBrTable, opReturn, opCall, opCallIndirect, opReturnCall, opReturnCallIndirect, opCallRef,
		opReturnCallRef, opDelegate, 0x19, opTryTable, opBrOnNull, opBrOnNonNull} {
		s[op] = false
	}
	return s
}()
