package connector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/wstream/wstream/abi"
)

// Rescaling source offsets.
//
// Both sources split their input by a global index i (gen: the record,
// file: the line): subtask s of p takes the indices i ≡ s (mod p), in
// increasing order. After a change of parallelism the new subtasks must
// together emit exactly the indices no old subtask had emitted.
//
// Representation. What one subtask s of p has emitted is described by a
// layout: a period P, a multiple of p, and for each residue r ≡ s (mod p)
// of P (r = s + k·p, k < P/p) its gap g_k: the first index ≡ r (mod P) not
// emitted yet, with g_k ≡ r (mod P). The subtask has emitted exactly
//
//	E_s = { i ≡ s (mod p) : i < g_k where k = ((i mod P) − s)/p }.
//
// A plain offset (no "period"/"gaps") is the layout with P = p and one gap:
// gen's next, or the first index of the class at or after file's line. Both sources emit the indices of their class that are not in
// E_s in increasing order, so after emitting up to index x the layout is
// the old one with every gap raised to the first index of its residue ≥ x
// (layout.advance): again a layout, with the same period.
//
// Rescaling from p to p′ (combine). The old subtasks' union E = ∪ E_s is
// described with the period P′ = lcm(p′, P_0, …, P_{p−1}): for a residue r
// of P′, every i ≡ r (mod P′) has i mod p = r mod p =: s and i mod P_s =
// r mod P_s, so E ∩ (r mod P′) = { i ≡ r (mod P′) : i < g } where g is the
// gap of r mod P_s in subtask s's layout, which is the same set as
// { i ≡ r (mod P′) : i < alignUp(g, r, P′) }. New subtask s′ gets the gaps
// of the residues r ≡ s′ (mod p′) of P′: a layout of s′ of p′. Every index
// lies in exactly one new class, and each new subtask emits exactly the
// indices of its class outside E, so nothing is lost and nothing is
// emitted twice; the result is again a layout, so rescaling repeats
// (1→4→2→…) without a chain of earlier layouts.
//
// Size. A layout has P/p gaps. layout.reduce replaces P by the smallest
// d (p | d | P) for which every class c mod d inside s mod p is a prefix of
// that class — which holds exactly when the gaps g of the residues ≡ c
// (mod d) satisfy max g − min g < P: those P/d distinct residues of P then
// fill the window [min g, min g + P), one index each, so every index ≡ c
// (mod d) below min g is emitted and none above it is — and the gap of c
// becomes min g. Once a rescaled subtask has passed every gap it started
// with, all its gaps lie in one window of length P and its offset is plain
// again (d = p). So the gaps only grow while a subtask lags behind another
// across several rescales with parallelisms that do not divide each other;
// they are capped at maxRescaleGaps per offset (RescaleOffsets refuses
// beyond), which bounds an offset to about 20 KB.

// maxRescaleGaps bounds the gaps of one offset.
const maxRescaleGaps = 1024

// maxRescaleIndex bounds the indices an offset may name, so that aligning a
// gap up to a period can never overflow.
const maxRescaleIndex = 1 << 62

// layout describes what subtask of parallelism has emitted; see above.
type layout struct {
	subtask, parallelism int64
	period               int64   // a multiple of parallelism
	gaps                 []int64 // period/parallelism gaps
}

// offsetLayout checks the layout part of an offset (gen's and the
// jetstream source's) and returns what its subtask has handled: without
// Period and Gaps, next must be of the subtask's class; with them, they
// must make a layout (check) whose smallest gap is next. noun names what
// next counts ("record"), index what is taken modulo the parallelism.
func offsetLayout(h offsetHeader, next, period int64, gaps []int64, noun, index string) (layout, error) {
	s, p := int64(h.Subtask), int64(h.Parallelism)
	if period == 0 && gaps == nil {
		if next < s || (next-s)%p != 0 {
			return layout{}, fmt.Errorf("next %s %d is not one of subtask %d of parallelism %d (%s mod %d must be %d)",
				noun, next, s, p, index, p, s)
		}
		l := layout{subtask: s, parallelism: p, period: p, gaps: []int64{next}}
		return l, l.check()
	}
	l := layout{subtask: s, parallelism: p, period: period, gaps: gaps}
	if err := l.check(); err != nil {
		return layout{}, err
	}
	if m := l.minGap(); next != m {
		return layout{}, fmt.Errorf("next %s %d is not the smallest gap %d", noun, next, m)
	}
	return l, nil
}

// residue is the residue of period whose gap is gaps[k].
func (l *layout) residue(k int) int64 { return l.subtask + int64(k)*l.parallelism }

// gapIndex is the position in gaps of the residue of i, an index of the
// subtask's class.
func (l *layout) gapIndex(i int64) int { return int(((i % l.period) - l.subtask) / l.parallelism) }

// check reports what is wrong with a layout read from an offset.
func (l *layout) check() error {
	if l.period < l.parallelism || l.period%l.parallelism != 0 {
		return fmt.Errorf("period %d is not a multiple of the parallelism %d", l.period, l.parallelism)
	}
	if m := l.period / l.parallelism; int64(len(l.gaps)) != m {
		return fmt.Errorf("period %d at parallelism %d needs %d gaps, got %d", l.period, l.parallelism, m, len(l.gaps))
	}
	if len(l.gaps) > maxRescaleGaps {
		return fmt.Errorf("%d gaps are more than the %d an offset may hold", len(l.gaps), maxRescaleGaps)
	}
	for k, g := range l.gaps {
		r := l.residue(k)
		if g < r || g > maxRescaleIndex || g%l.period != r {
			return fmt.Errorf("gap %d (%d) is not an index ≡ %d (mod %d) in [%d, 2^62]", k, g, r, l.period, r)
		}
	}
	return nil
}

func (l *layout) minGap() int64 {
	m := int64(math.MaxInt64)
	for _, g := range l.gaps {
		m = min(m, g)
	}
	return m
}

func (l *layout) maxGap() int64 {
	m := int64(math.MinInt64)
	for _, g := range l.gaps {
		m = max(m, g)
	}
	return m
}

// alignUp is the smallest index ≥ x that is ≡ r (mod m), for x ≥ 0 and
// 0 ≤ r < m.
func alignUp(x, r, m int64) int64 {
	return x + ((r-x%m)%m+m)%m
}

// advance is the layout after the subtask has also handled (emitted or
// skipped as emitted) every index of its class below x.
func (l layout) advance(x int64) layout {
	gaps := make([]int64, len(l.gaps))
	for k, g := range l.gaps {
		gaps[k] = max(g, alignUp(x, l.residue(k), l.period))
	}
	l.gaps = gaps
	return l
}

// reduce returns the layout with the smallest period that describes the
// same set (see the comment at the top of the file).
func (l layout) reduce() layout {
	m := len(l.gaps)
	for e := 1; e < m; e++ {
		if m%e != 0 {
			continue
		}
		gaps := make([]int64, e)
		ok := true
		for j := 0; j < e && ok; j++ {
			lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
			for k := j; k < m; k += e {
				lo, hi = min(lo, l.gaps[k]), max(hi, l.gaps[k])
			}
			ok = hi-lo < l.period
			gaps[j] = lo
		}
		if ok {
			return layout{subtask: l.subtask, parallelism: l.parallelism, period: l.parallelism * int64(e), gaps: gaps}
		}
	}
	return l
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// lcmOfPeriods is the least common multiple of the layouts' periods, if it
// is at most maxRescaleIndex.
func lcmOfPeriods(ls []layout) (int64, bool) {
	l := int64(1)
	for _, o := range ls {
		f := o.period / gcd(l, o.period)
		if f > maxRescaleIndex/l {
			return 0, false
		}
		l *= f
	}
	return l, true
}

// combine describes, for subtask newSubtask of newParallelism, what the old
// subtasks (old[s] is subtask s's layout) emitted in its class.
func combine(old []layout, newSubtask, newParallelism int64) (layout, error) {
	p := int64(len(old))
	period := newParallelism
	limit := newParallelism * maxRescaleGaps
	for _, o := range old {
		f := o.period / gcd(period, o.period)
		if f > limit/period {
			hint := "restore at another parallelism"
			if l, ok := lcmOfPeriods(old); ok {
				hint = fmt.Sprintf("restore at a parallelism that is a multiple of %d (one gap) or shares more factors with it", l)
			}
			return layout{}, fmt.Errorf("from parallelism %d to %d the offsets would need more than %d gaps per subtask "+
				"(old subtasks lag behind others across rescalings with parallelisms that do not divide each other): "+
				"%s, or let the source run until its subtasks catch up", p, newParallelism, maxRescaleGaps, hint)
		}
		period *= f
	}
	m := int(period / newParallelism)
	gaps := make([]int64, m)
	for k := range m {
		r := newSubtask + int64(k)*newParallelism
		o := &old[r%p]
		gaps[k] = alignUp(o.gaps[o.gapIndex(r)], r, period)
	}
	l := layout{subtask: newSubtask, parallelism: newParallelism, period: period, gaps: gaps}
	return l.reduce(), nil
}

// checkRescaleTarget checks the arguments of a rescale of p old offsets
// to subtask newSubtask of newParallelism (every source's).
func checkRescaleTarget(what string, p, newSubtask, newParallelism int) error {
	if newParallelism < 1 || newSubtask < 0 || newSubtask >= newParallelism {
		return fmt.Errorf("%s: subtask %d of parallelism %d is out of range", what, newSubtask, newParallelism)
	}
	if p == 0 {
		return fmt.Errorf("%s: no offsets: give one per subtask of the old parallelism", what)
	}
	return nil
}

// checkOldOffset checks the header of raw, the offset at position s of p
// old offsets of a kind source (every source's).
func checkOldOffset(what, kind string, raw []byte, s, p int) error {
	if raw == nil {
		return fmt.Errorf("%s: the offset of subtask %d of %d is missing (a finished subtask has one too: take it before Close)", what, s, p)
	}
	var h offsetHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("%s: offset of subtask %d %q is not a source offset: %v", what, s, truncate(raw), err)
	}
	if h.Version != offsetVersion {
		return fmt.Errorf("%s: offset of subtask %d: version %d is not supported (this build reads version %d)", what, s, h.Version, offsetVersion)
	}
	if h.Kind != kind {
		return fmt.Errorf("%s: the offset of subtask %d belongs to a %q source, not a %q source", what, s, h.Kind, kind)
	}
	if h.Parallelism != p {
		return fmt.Errorf("%s: the offset of subtask %d was taken at parallelism %d, but %d offsets were given (one per old subtask, all of the same checkpoint)",
			what, s, h.Parallelism, p)
	}
	if h.Subtask != s {
		return fmt.Errorf("%s: offset %d of %d belongs to subtask %d: give subtask s's offset at position s, each once", what, s, p, h.Subtask)
	}
	return nil
}

// RescaleOffsets combines the offsets of every subtask of a source taken at
// parallelism len(old) — old[s] is subtask s's offset, as its Offset
// returned it — into the offset for subtask newSubtask of newParallelism,
// so that the new subtasks together emit exactly the records the old ones
// had not emitted yet: nothing lost, nothing twice. The result is accepted
// by Seek of a source opened as newSubtask of newParallelism, and what that
// source's Offset later returns can be rescaled again.
//
// Every old subtask's offset is required, a finished one's too (a source
// still returns its offset after it reported done, until Close): a nil
// offset is an error, since what that subtask emitted is unknown. The new
// subtask's watermark continues from the largest timestamp of all old
// offsets, so watermarks never go back.
//
// Errors name the problem: an unknown connector, a missing or malformed
// offset, offsets of another kind of source, of different files, of another
// parallelism than len(old) or out of subtask order, or a rescaling whose
// offset would exceed the size bound (see maxRescaleGaps).
func RescaleOffsets(connector string, old [][]byte, newSubtask, newParallelism int) ([]byte, error) {
	what := "connector " + connector + ": rescale"
	if connector == "jetstream" {
		return rescaleJSOffsets(old, newSubtask, newParallelism)
	}
	if connector != "gen" && connector != "file" {
		return nil, fmt.Errorf("connector: rescale: source %q has no rescalable offsets (known: file, gen, jetstream)", connector)
	}
	p := len(old)
	if err := checkRescaleTarget(what, p, newSubtask, newParallelism); err != nil {
		return nil, err
	}
	layouts := make([]layout, p)
	maxTs := int64(abi.MinWatermark)
	var (
		files []fileOffset
		path  string
	)
	for s, raw := range old {
		if err := checkOldOffset(what, connector, raw, s, p); err != nil {
			return nil, err
		}
		var (
			l   layout
			err error
		)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if connector == "gen" {
			var o genOffset
			if err := dec.Decode(&o); err != nil {
				return nil, fmt.Errorf("%s: malformed gen offset of subtask %d %q: %v", what, s, truncate(raw), err)
			}
			l, err = o.layout()
			maxTs = max(maxTs, o.MaxTs)
		} else {
			var o fileOffset
			if err := dec.Decode(&o); err != nil {
				return nil, fmt.Errorf("%s: malformed file offset of subtask %d %q: %v", what, s, truncate(raw), err)
			}
			if s == 0 {
				path = o.Path
			} else if o.Path != path {
				return nil, fmt.Errorf("%s: the offsets are of different files: %s (subtask 0) and %s (subtask %d)", what, path, o.Path, s)
			}
			l, err = o.layout()
			maxTs = max(maxTs, o.MaxTs)
			files = append(files, o)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: offset of subtask %d: %v", what, s, err)
		}
		layouts[s] = l
	}
	l, err := combine(layouts, int64(newSubtask), int64(newParallelism))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	h := offsetHeader{Version: offsetVersion, Kind: connector, Subtask: newSubtask, Parallelism: newParallelism}
	if connector == "gen" {
		return json.Marshal(genOffset{offsetHeader: h, Next: l.minGap(), MaxTs: maxTs, Period: l.period, Gaps: l.gaps})
	}
	// The new subtask reads the file from the furthest position an old
	// subtask had reached that is not past its own first unread line: every
	// old position is at or before that subtask's gaps, and the new gaps are
	// at or after old ones, so some old position always qualifies.
	first := l.minGap()
	var line, pos int64
	for _, o := range files {
		if o.Line <= first && o.Line > line {
			line, pos = o.Line, o.Byte
		}
	}
	return json.Marshal(fileOffset{offsetHeader: h, Path: path, Line: line, Byte: pos, MaxTs: maxTs, Period: l.period, Gaps: l.gaps})
}
