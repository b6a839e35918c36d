package instrument

import (
	"cmp"
	"slices"
)

// maxDataGap is the longest run of zero bytes between two data segments
// that the rewrite fills in to join them. Go's linker ends a segment at
// every run of more than 8 zero bytes: the Go wordcount example has 33,138
// segments, which wazero applies one by one (evaluating each offset) on
// every instantiation, half of its cost. Joined across gaps of at most 64
// bytes they are 11, for 0.6 MB of zeros in the module. A gap shorter than
// a page touches no page of memory that its neighbours do not.
const maxDataGap = 64

// dataSegment is an active data segment of memory 0 at a constant offset.
type dataSegment struct {
	offset, size uint64
	enc          [2]int // its encoding in the module
	data         int    // where its bytes start in the module
}

// appendData appends the data section s with runs of consecutive segments
// joined where only zeros lie between them. It leaves the section as it is
// when that could change what instantiation writes or what instructions
// refer to: a segment other than an active one of memory 0 at an i32.const
// offset, an imported memory (which need not be zero), a data count
// section (memory.init and data.drop name segments by index), or names of
// segments in the name section.
func (m *module) appendData(out []byte, s *section) []byte {
	segs := m.dataSegments(s)
	if segs == nil {
		return append(out, m.b[s.headerStart:s.end]...)
	}
	written := writtenRanges(segs)
	// runs of segments [i, j) that become one, and the section's size.
	var runs [][2]int
	size := 0
	var tmp [10]byte
	for i := 0; i < len(segs); {
		j := i + 1
		for j < len(segs) {
			end := segs[j-1].offset + segs[j-1].size
			next := segs[j].offset
			// A gap is filled only when no segment writes into it: fresh
			// memory is zero there then, whichever segments come before or
			// after.
			if next < end || next-end > maxDataGap || (next > end && written(end, next, j)) {
				break
			}
			j++
		}
		runs = append(runs, [2]int{i, j})
		if j == i+1 {
			size += segs[i].enc[1] - segs[i].enc[0]
		} else {
			n := segs[j-1].offset + segs[j-1].size - segs[i].offset
			size += 3 + len(appendS32(tmp[:0], int32(uint32(segs[i].offset)))) + len(appendU32(tmp[:0], uint32(n))) + int(n)
		}
		i = j
	}
	if len(runs) == len(segs) {
		return append(out, m.b[s.headerStart:s.end]...)
	}
	m.res.DataJoined = len(segs) - len(runs)
	count := appendU32(tmp[:0], uint32(len(runs)))
	out = append(out, secData)
	out = appendU32(out, uint32(len(count)+size))
	out = append(out, count...)
	out = slices.Grow(out, size)
	for _, r := range runs {
		i, j := r[0], r[1]
		if j == i+1 {
			out = append(out, m.b[segs[i].enc[0]:segs[i].enc[1]]...)
			continue
		}
		first, last := segs[i], segs[j-1]
		out = append(out, 0x00, 0x41) // active, memory 0; i32.const
		out = appendS32(out, int32(uint32(first.offset)))
		out = append(out, opEnd)
		out = appendU32(out, uint32(last.offset+last.size-first.offset))
		for k := i; k < j; k++ {
			if k > i {
				gap := int(segs[k].offset - (segs[k-1].offset + segs[k-1].size))
				out = out[:len(out)+gap]
				clear(out[len(out)-gap:])
			}
			out = append(out, m.b[segs[k].data:segs[k].data+int(segs[k].size)]...)
		}
	}
	return out
}

// writtenRanges returns a function that reports whether a segment writes
// into [from, to), where to is the offset of segment j.
func writtenRanges(segs []dataSegment) func(from, to uint64, j int) bool {
	// The segments by offset, each with the largest end of the segments up
	// to it, and where each segment is in that order.
	order := make([]int32, len(segs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(segs[a].offset, segs[b].offset) })
	maxEnd := make([]uint64, len(segs))
	pos := make([]int32, len(segs))
	for k, i := range order {
		pos[i] = int32(k)
		maxEnd[k] = segs[i].offset + segs[i].size
		if k > 0 {
			maxEnd[k] = max(maxEnd[k], maxEnd[k-1])
		}
	}
	return func(from, to uint64, j int) bool {
		// The first segment at offset to or past it.
		k := int(pos[j])
		for k > 0 && segs[order[k-1]].offset == to {
			k--
		}
		return k > 0 && maxEnd[k-1] > from
	}
}

// dataSegments decodes the data section s, or returns nil when it holds
// segments that appendData must leave alone, or none.
func (m *module) dataSegments(s *section) []dataSegment {
	if m.memImports > 0 || m.dataCount || m.dataNames {
		return nil
	}
	r := m.reader(s.start, s.end)
	n := r.count(2)
	segs := make([]dataSegment, 0, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		start := r.off
		flag := r.u32()
		if flag == 2 && r.u32() != 0 || flag != 0 && flag != 2 { // 2: memory index given
			return nil
		}
		if r.byte() != 0x41 { // i32.const
			return nil
		}
		offset := uint32(int32(r.sleb(32)))
		if r.byte() != opEnd {
			return nil
		}
		size := r.u32()
		data := r.off
		r.skip(int(size))
		if r.err != nil {
			return nil
		}
		segs = append(segs, dataSegment{offset: uint64(offset), size: uint64(size), enc: [2]int{start, r.off}, data: data})
	}
	if r.err != nil || r.off != s.end || len(segs) == 0 {
		return nil
	}
	return segs
}

// hasDataNames reports whether the name section that r reads (its name
// read already) has a subsection of data segment names. A malformed one
// counts as having them.
func hasDataNames(r *reader) bool {
	r.name()
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.u32()
		if id == 9 {
			return true
		}
		r.skip(int(size))
	}
	return r.err != nil
}
