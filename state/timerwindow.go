package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/wstream/wstream/abi"
)

// The timers of a vertex and time domain live in Pebble, in firing order
// within each key group (the timer key layout in doc.go); memory holds a
// window of the earliest of them, in a timerQueue. A queue that is not
// partial holds them all: a store that started empty begins so, and a
// vertex with few timers stays so, at the cost it always had. Past
// timerWindowMax timers at a Flush, it becomes partial: the later timers leave
// memory (they are in Pebble already) and the queue's bound moves down to
// the first of them. A timer at or past the bound is written to Pebble
// blindly (a second registration is the same key: still one timer) and a
// deletion likewise. When a partial queue runs empty, the next window
// comes from a merge of the owned key groups' timers, from the bound on,
// after the timer changes out of the windows are written (writeOutTimers:
// Pebble then holds every timer from the bound on).
//
// The bound moves only in a Flush or right after the timer changes are
// written (flushTimers, writeOutTimers), so a timer changed
// out of the window since the last Flush was out of it when it changed:
// Store.outTimers records those changes, so that an undo journal can tell
// whether a timer out of the window existed before without a Flush.

// Variables for the tests, which make windows small.
var (
	// timerWindowMax is the timers a queue holds in memory at a Flush
	// before its later half leaves; a queue may hold twice as many between
	// two flushes, after which registering writes the timers (flushTimers)
	// and the window shrinks. At about 160 bytes a
	// timer, a queue holds 5 MiB at a Flush, 10 MiB at most between two.
	timerWindowMax = 32768
	// timerRefill is the timers one refill brings into memory: each
	// refill seeks one iterator per owned key group through every level of
	// the LSM, which a larger window shares among more timers.
	timerRefill = 32768
)

// inWindow reports whether a timer whose key suffix (timerSuffix) is sfx
// belongs in memory.
func (q *timerQueue) inWindow(sfx []byte) bool {
	return !q.partial || (q.bound != nil && bytes.Compare(sfx, q.bound) < 0)
}

// RegisterTimer registers a timer for (domain, key, ns, ts); registering one
// that exists is a no-op.
func (v *VertexState) RegisterTimer(domain int32, key, ns []byte, ts int64) error {
	pk, err := v.timerKey(domain, key, ns, ts)
	if err != nil {
		return err
	}
	return v.registerTimer(domain, pk, ts, len(key), len(ns))
}

// registerTimer is RegisterTimer of the timer with Pebble key pk.
func (v *VertexState) registerTimer(domain int32, pk []byte, ts int64, keyLen, nsLen int) error {
	s := v.s
	q := &v.timers[domain]
	if !q.inWindow(timerSuffix(pk, keyLen, nsLen)) {
		if present, ok := s.outTimers[string(pk)]; ok && present {
			return nil // registered since the last Flush
		}
		if s.undo.open {
			existed, err := s.timerExists(pk)
			if err != nil {
				return err
			}
			if !existed {
				s.journalTimerKey(undoTimerAdded, v, domain, pk, ts, keyLen, nsLen)
			}
		}
		if err := s.stageSet(pk); err != nil {
			return err
		}
		q.ahead = nil // Pebble past the bound changes
		s.noteOutTimer(pk, true)
		return s.written()
	}
	if q.find(pk) != nil {
		return nil
	}
	if err := s.stageSet(pk); err != nil {
		return err
	}
	if s.undo.open {
		s.journalNewTimer(v, domain, pk, ts, keyLen, nsLen)
	}
	q.add(newTimer(ts, pk, keyLen, nsLen))
	if q.len() > 2*timerWindowMax {
		// Writing the timers moves the later ones out of memory.
		return s.flushTimers()
	}
	return s.written()
}

// DeleteTimer removes a timer; removing an absent timer is not an error.
func (v *VertexState) DeleteTimer(domain int32, key, ns []byte, ts int64) error {
	pk, err := v.timerKey(domain, key, ns, ts)
	if err != nil {
		return err
	}
	return v.deleteTimer(domain, pk, ts, len(key), len(ns))
}

// deleteTimer is DeleteTimer of the timer with Pebble key pk.
func (v *VertexState) deleteTimer(domain int32, pk []byte, ts int64, keyLen, nsLen int) error {
	s := v.s
	q := &v.timers[domain]
	if !q.inWindow(timerSuffix(pk, keyLen, nsLen)) {
		if present, ok := s.outTimers[string(pk)]; ok && !present {
			return nil // deleted since the last Flush
		}
		if s.undo.open {
			existed, err := s.timerExists(pk)
			if err != nil {
				return err
			}
			if existed {
				s.journalTimerKey(undoTimerDeleted, v, domain, pk, ts, keyLen, nsLen)
			}
		}
		if err := s.stageTimer(pk, true); err != nil {
			return err
		}
		q.ahead = nil // Pebble past the bound changes
		s.noteOutTimer(pk, false)
		return s.written()
	}
	t := q.find(pk)
	if t == nil {
		return nil
	}
	if err := s.stageTimer(pk, true); err != nil {
		return err
	}
	if s.undo.open {
		s.journalTimer(undoTimerDeleted, v, domain, t)
	}
	q.remove(t)
	return nil
}

// PopTimers removes every timer of domain with time <= upTo, in firing
// order (time, then key: shorter first, then in byte order, then
// namespace), and appends each to b as a timer record (port = domain,
// timestamp = time, key, value = namespace). It returns how many it
// appended, at most MaxTimersPerPop. Timers registered later with time <=
// upTo are found by the next call, so the runtime calls it until it
// returns 0.
func (v *VertexState) PopTimers(domain int32, upTo int64, b *abi.Builder) (int, error) {
	if err := v.s.err; err != nil {
		return 0, err
	}
	if domain != abi.TimeEvent && domain != abi.TimeProcessing {
		return 0, v.badDomain(domain)
	}
	q := &v.timers[domain]
	q.pfxLen = 3 + len(v.timerMid)
	n := 0
	// At most MaxTimersPerPop per call: the end of input fires a timer per
	// key, and one guest call must not carry them all.
	for n < MaxTimersPerPop {
		t := q.peek()
		if t == nil {
			if !q.partial {
				break
			}
			if err := v.refill(domain); err != nil {
				return n, err
			}
			if q.len() == 0 {
				break
			}
			continue
		}
		if t.ts > upTo {
			break
		}
		v.s.fire(q, t)
		if v.s.undo.open {
			v.s.journalTimer(undoTimerDeleted, v, domain, t)
		}
		q.remove(t)
		b.Add(uint32(domain), t.ts, t.key, t.ns)
		n++
	}
	return n, nil
}

// MaxTimersPerPop bounds the timers one PopTimers call returns.
const MaxTimersPerPop = 1024

// NextTimer returns the earliest timer time of domain; ok is false when
// there is none (or domain is not a time domain). It may read the next
// window of timers from Pebble; a failure to is the store's (sticky), and
// reports none.
func (v *VertexState) NextTimer(domain int32) (ts int64, ok bool) {
	if domain != abi.TimeEvent && domain != abi.TimeProcessing {
		return 0, false
	}
	q := &v.timers[domain]
	if q.len() == 0 && q.partial && v.s.err == nil {
		if v.refill(domain) != nil {
			return 0, false
		}
	}
	t := q.peek()
	if t == nil {
		return 0, false
	}
	return t.ts, true
}

// refill fills the empty, partial queue of domain with the next window of
// timers from Pebble: the first timerRefill from its bound on, in firing
// order, merged from the owned key groups. When they are all, the queue
// holds every timer and is no longer partial.
//
// Each key group's timers come from a run read ahead (aheadRun): one
// iterator seek reads the next timerAheadRun of them, and later refills
// take what is left of it before they seek again, so that a queue of
// millions of timers seeks a key group once every few windows rather than
// once every window (a seek that misses the block cache reads index and
// data blocks of every level from the files).
func (v *VertexState) refill(domain int32) error {
	s := v.s
	q := &v.timers[domain]
	if err := s.writeOutTimers(); err != nil {
		return err
	}
	if s.db == nil {
		return ErrClosed
	}
	n := s.groups.End - s.groups.Start + 1
	if len(q.ahead) != n {
		q.ahead = make([]aheadRun, n)
	}
	pfx := make([]byte, 0, 3+len(v.timerMid))
	pfx = append(append(append(pfx, 0, 0), v.timerMid...), byte(domain))
	rd := aheadReader{pfx: pfx}
	err := v.fillRun(q, &rd)
	if cerr := rd.close(); err == nil && cerr != nil {
		err = s.fail("read timers", cerr)
	}
	return err
}

// fillRun is refill's merge of the key groups' runs into the queue's run.
func (v *VertexState) fillRun(q *timerQueue, rd *aheadReader) error {
	s := v.s
	pfxLen := len(rd.pfx)
	m := &aheadMerge{runs: q.ahead, pfxLen: pfxLen}
	for g := range q.ahead {
		if err := v.readAhead(q, g, rd); err != nil {
			return err
		}
		if q.ahead[g].left() > 0 {
			m.push(g)
		}
	}
	// The loaded timers come in firing order, the queue's run; they share
	// one buffer for their keys and one for themselves.
	ts := make([]timer, 0, timerRefill)
	var keys []byte
	for len(m.heads) > 0 && len(ts) < timerRefill {
		g := int(m.heads[0].g)
		r := &q.ahead[g]
		k := r.key(r.pos)
		t, keyLen, nsLen, ok := parseTimerSuffix(k[pfxLen:])
		if !ok {
			return s.fail("read timers", fmt.Errorf("%w: timer time or key truncated (%x)", ErrMalformedKey, k))
		}
		if len(keys)+len(k) > cap(keys) {
			keys = make([]byte, 0, max(64<<10, len(k)))
		}
		at := len(keys)
		keys = append(keys, k...)
		ts = append(ts, timer{})
		ts[len(ts)-1].set(t, keys[at:len(keys):len(keys)], keyLen, nsLen)
		r.pos++
		if r.left() == 0 {
			if err := v.readAhead(q, g, rd); err != nil {
				return err
			}
		}
		if r.left() > 0 {
			m.advance()
		} else {
			m.drop()
		}
	}
	for i := range ts {
		q.addRun(&ts[i])
	}
	if len(m.heads) == 0 {
		q.partial, q.bound, q.ahead = false, nil, nil
		return nil
	}
	r := &q.ahead[m.heads[0].g]
	q.bound = append(q.bound[:0], r.key(r.pos)[pfxLen:]...)
	return nil
}

// aheadReader is the one Pebble iterator that a refill reads every key
// group's run with, its bounds set to the key group at each read: an
// iterator made for each read cost as much as its seek at 10M timers (the
// memtable's range deletions fragmented again, every level's file opened).
type aheadReader struct {
	pfx []byte // the timers' prefix, its key group overwritten at each read
	it  *pebble.Iterator
	up  []byte
}

func (rd *aheadReader) close() error {
	if rd.it == nil {
		return nil
	}
	err := rd.it.Close()
	rd.it = nil
	return err
}

// timerAheadRun is how many timers of one key group a read ahead takes:
// eight windows' worth spread over 128 key groups, so that a key group is
// sought about once every eight refills (a seek through every level costs
// some 200 µs when the index blocks left the block cache), while a queue's
// runs hold at most twice its window.
var timerAheadRun = 2048

// timerAheadBytes bounds the keys of one run read ahead, so that a queue's
// runs hold at most 8 MiB over 128 key groups whatever its keys' size.
const timerAheadBytes = 64 << 10

// aheadRun is the timers of one key group read ahead from Pebble for the
// refills of a queue, from pos on, in key order: every timer of the key
// group from the queue's bound up to the last one read, and none of them
// in the window. A registration or a deletion out of the window, or a
// window shrinking, drops every run (timerQueue.ahead): what Pebble holds
// past the bound may then differ from what the runs say.
type aheadRun struct {
	keys []byte  // their Pebble keys, one after another
	ends []int32 // where each ends in keys
	pos  int
	read bool // read at least once: the next read starts past the last key
	done bool // Pebble holds no timer of the key group past the last key
}

func (r *aheadRun) left() int { return len(r.ends) - r.pos }

func (r *aheadRun) key(i int) []byte {
	start := int32(0)
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.keys[start:r.ends[i]]
}

// readAhead reads the next timerAheadRun timers of owned key group g (an
// index from the first) into its run, unless the run holds some or Pebble
// holds no more.
func (v *VertexState) readAhead(q *timerQueue, g int, rd *aheadReader) error {
	s := v.s
	r := &q.ahead[g]
	if r.left() > 0 || r.done {
		return nil
	}
	s.io.enter()
	defer s.io.leave()
	kg := s.groups.Start + g
	pfx := rd.pfx
	pfx[0], pfx[1] = byte(kg>>8), byte(kg)
	var from []byte
	switch {
	case r.read:
		// Just past the last key read: its successor in byte order (a
		// copy: the run's buffer is read into next).
		last := r.key(len(r.ends) - 1)
		from = append(append(make([]byte, 0, len(last)+1), last...), 0)
	case q.bound != nil:
		from = append(pfx[:len(pfx):len(pfx)], q.bound...)
	}
	if rd.it == nil {
		it, err := s.db.NewIter(nil)
		if err != nil {
			return s.fail("read timers", err)
		}
		rd.it = it
	}
	it := rd.it
	// SetBounds copies the bounds: pfx is overwritten at the next read.
	rd.up = prefixSuccessor(rd.up[:0], pfx)
	it.SetBounds(pfx, rd.up)
	var ok bool
	if from != nil {
		ok = it.SeekGE(from)
	} else {
		ok = it.First()
	}
	r.keys, r.ends, r.pos, r.read = r.keys[:0], r.ends[:0], 0, true
	for ; ok && len(r.ends) < timerAheadRun && len(r.keys) < timerAheadBytes; ok = it.Next() {
		r.keys = append(r.keys, it.Key()...)
		r.ends = append(r.ends, int32(len(r.keys)))
	}
	r.done = !ok
	if err := it.Error(); err != nil {
		return s.fail("read timers", err)
	}
	return nil
}

// aheadMerge is a min-heap of the key groups whose runs hold timers, by
// their next timer's suffix. Each head caches the suffix's first 16 bytes
// as two big-endian words (zero-padded), which tell most timers apart
// without a byte comparison: the time, then the key's length and first
// bytes.
type aheadMerge struct {
	runs   []aheadRun
	heads  []aheadHead
	pfxLen int
}

type aheadHead struct {
	hi, lo uint64
	g      int32
}

// head is the head of key group g's run as it stands.
func (m *aheadMerge) head(g int) aheadHead {
	r := &m.runs[g]
	sfx := r.key(r.pos)[m.pfxLen:]
	var w [16]byte
	copy(w[:], sfx)
	return aheadHead{binary.BigEndian.Uint64(w[:8]), binary.BigEndian.Uint64(w[8:]), int32(g)}
}

func (m *aheadMerge) less(a, b *aheadHead) bool {
	if a.hi != b.hi {
		return a.hi < b.hi
	}
	if a.lo != b.lo {
		return a.lo < b.lo
	}
	ra, rb := &m.runs[a.g], &m.runs[b.g]
	return bytes.Compare(ra.key(ra.pos)[m.pfxLen:], rb.key(rb.pos)[m.pfxLen:]) < 0
}

// push adds key group g, whose run holds timers.
func (m *aheadMerge) push(g int) {
	m.heads = append(m.heads, m.head(g))
	for i := len(m.heads) - 1; i > 0; {
		p := (i - 1) / 2
		if !m.less(&m.heads[i], &m.heads[p]) {
			break
		}
		m.heads[i], m.heads[p] = m.heads[p], m.heads[i]
		i = p
	}
}

// advance re-reads the first key group's head, its run having moved on.
func (m *aheadMerge) advance() {
	m.heads[0] = m.head(int(m.heads[0].g))
	m.down()
}

// drop removes the first key group, its run exhausted.
func (m *aheadMerge) drop() {
	last := len(m.heads) - 1
	m.heads[0] = m.heads[last]
	m.heads = m.heads[:last]
	m.down()
}

// down sifts the first key group down to its place.
func (m *aheadMerge) down() {
	h := m.heads
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && m.less(&h[r], &h[l]) {
			c = r
		}
		if !m.less(&h[c], &h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// parseTimerSuffix decodes a timer key's suffix (timerSuffix): the time,
// and the lengths of the record key and the namespace that follow.
func parseTimerSuffix(sfx []byte) (ts int64, keyLen, nsLen int, ok bool) {
	if len(sfx) < 9 {
		return 0, 0, 0, false
	}
	ts = int64(binary.BigEndian.Uint64(sfx) ^ timeBias)
	n, w := binary.Uvarint(sfx[8:])
	rest := len(sfx) - 8 - w
	if w <= 0 || n > uint64(rest) {
		return 0, 0, 0, false
	}
	return ts, int(n), rest - int(n), true
}

// timerExists reports whether the timer with Pebble key pk, which is out
// of its queue's window, is registered.
func (s *Store) timerExists(pk []byte) (bool, error) {
	if present, ok := s.outTimers[string(pk)]; ok {
		return present, nil
	}
	// Every other change of pk is in Pebble: it was made out of the window
	// before the last Flush, or in it, and the window moved at a Flush.
	if err := s.ready(); err != nil {
		return false, err
	}
	s.io.enter()
	defer s.io.leave()
	_, closer, err := s.db.Get(pk)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, s.fail("read timer", err)
	}
	return true, closer.Close()
}

// noteOutTimer records a change of a timer out of its queue's window.
func (s *Store) noteOutTimer(pk []byte, present bool) {
	if s.outTimers == nil {
		s.outTimers = make(map[string]bool)
	}
	s.outTimers[string(pk)] = present
}

// flushTimers writes the timer changes since the last Flush to Pebble, and
// not the changed state entries: what a window that moves timers out of
// memory needs. It runs inside guest calls (a registration that fills the
// window; a pop that empties it writes only the changes out of the
// windows, writeOutTimers), which a Flush of a million changed entries
// would hold up for seconds; the entries wait for the next Flush.
func (s *Store) flushTimers() error {
	if s.err != nil {
		return s.err
	}
	if err := s.stageFired(); err != nil {
		return err
	}
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.commit(); err != nil {
		return err
	}
	s.timersFlushed()
	return nil
}

// writeOutTimers writes the timer changes out of the windows since the
// last Flush to Pebble, for a refill that reads past a bound. The fired
// timers' deletions wait for the next Flush (or flushTimers): they sort
// before every bound, where no refill reads, and a refill that wrote them
// would make a range deletion per key group each window, which every later
// iterator's seek and the memtable's fragmenting pay for. Windows shrink
// at the next Flush or flushTimers, after the fired deletions are staged:
// a bound moved down past a fired timer left in Pebble would read it
// again.
func (s *Store) writeOutTimers() error {
	if s.err != nil {
		return s.err
	}
	if len(s.firedKeys) >= firedStageBytes {
		// Staged now rather than at the Flush: the buffer of fired keys
		// stays within a few MiB whatever the store's change bound, and
		// its range deletions still cover four or five windows each.
		if err := s.stageFired(); err != nil {
			return err
		}
	}
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.commit(); err != nil {
		return err
	}
	clear(s.outTimers)
	return nil
}

// firedStageBytes is the fired timers' keys a refill lets wait for the
// next Flush: about 150,000 timers, four or five windows, whose deletions
// then make one range deletion per key group. A variable for the tests.
var firedStageBytes = 4 << 20

// timersFlushed runs at the end of every Flush: the changes out of the
// windows are in Pebble now, and a queue holding more than timerWindowMax
// timers keeps its earlier half.
func (s *Store) timersFlushed() {
	clear(s.outTimers)
	if len(s.outTimers) == 0 && s.outTimers != nil {
		s.outTimers = nil // let a large map go
	}
	for _, v := range s.vertices {
		for d := range v.timers {
			if q := &v.timers[d]; q.len() > timerWindowMax {
				q.shrink(timerWindowMax / 2)
			}
		}
	}
}

// shrink keeps the earliest keep timers in memory and makes the queue
// partial, with its bound at the first timer it lets go.
func (q *timerQueue) shrink(keep int) {
	q.unrun()
	slices.SortFunc(q.heap, func(a, b *timer) int { return bytes.Compare(a.sfx, b.sfx) })
	// A sorted slice is a valid heap.
	gone := q.heap[keep:]
	q.bound = append([]byte(nil), gone[0].sfx...)
	q.partial = true
	q.ahead = nil // the runs start at the old bound
	for _, t := range gone {
		delete(q.set, string(t.pk))
		t.index = -1
	}
	clear(gone)
	q.heap = q.heap[:keep]
	for i, t := range q.heap {
		t.index = i
	}
}

// unloadTimers makes every queue partial with nothing in memory, after
// timers reached Pebble past the queues (an import): the next pop or
// NextTimer reads them from Pebble. The caller flushed: Pebble holds every
// timer the queues held.
func (s *Store) unloadTimers() {
	s.timersPartial = true
	for _, v := range s.vertices {
		for d := range v.timers {
			v.timers[d] = timerQueue{partial: true}
		}
	}
}

// fire records the deletion of fired timer t, of queue q, for the next
// Flush. The deletions of a window's timers then reach the batch together:
// as one range deletion per key group when nothing else of the queue lies
// in the range (stageFired), from the span fire keeps per key group, else
// as point deletions grouped by key group, each group in firing order,
// which is its key order, which Pebble's memtable inserts each next to the
// one before (its splice hint) instead of searching its skiplist from the
// top.
func (s *Store) fire(q *timerQueue, t *timer) {
	i := int32(len(s.firedEnds))
	s.firedKeys = append(s.firedKeys, t.pk...)
	s.firedEnds = append(s.firedEnds, len(s.firedKeys))
	s.firedQ = append(s.firedQ, q)
	if q.fired == nil {
		q.fired = make([]firedSpan, s.groups.End-s.groups.Start+1)
	}
	sp := &q.fired[int(binary.BigEndian.Uint16(t.pk))-s.groups.Start]
	switch {
	case sp.n == 0:
		sp.lo, sp.hi = i, i
	case bytes.Compare(t.pk, s.firedKey(sp.hi)) > 0:
		sp.hi = i // firing order: nearly always
	case bytes.Compare(t.pk, s.firedKey(sp.lo)) < 0:
		sp.lo = i
	}
	sp.n++
	q.firedN++
}

// firedSpan is the fired timers of one queue in one key group since the
// last Flush: n of them, from lo to hi by key (indexes of fired timers).
type firedSpan struct {
	lo, hi, n int32
}

// timerRangeDeletes lets stageFired delete fired timers by range; the
// benchmark turns it off to compare with point deletions.
var timerRangeDeletes = true

// stageSet stages the registration of timer key pk. The deletions of fired
// timers go first: one of them may be pk's, fired and now registered again.
func (s *Store) stageSet(pk []byte) error {
	if len(s.firedEnds) > 0 {
		if err := s.stageFired(); err != nil {
			return err
		}
	}
	return s.stageTimer(pk, false)
}

// stageFired stages the deletions of the timers fired since the last
// Flush.
//
// The fired timers of a queue in one key group are deleted with one range
// deletion, from the first of them to just past the last, when every timer
// the queue still holds sorts after every timer it fired since the last
// Flush: the range then holds no live timer. Every timer of the queue
// before its bound is in memory, and every one at or past it sorts after
// every fired timer, which came from memory. A timer registered since at
// or before the fired ones (a time at or before the watermark, or an undo
// of a fire) and not fired yet breaks the condition, and the queue's
// timers are deleted one by one, grouped by key group (a stable counting
// sort); one registered and fired again is in the range, deleted, and its
// registration, staged after, wins.
func (s *Store) stageFired() error {
	if len(s.firedEnds) == 0 {
		return nil
	}
	ranges := timerRangeDeletes && s.lazy == nil
	points := false
	for _, v := range s.vertices {
		for d := range v.timers {
			q := &v.timers[d]
			if q.firedN == 0 {
				continue
			}
			q.rangeOK = ranges && (q.len() == 0 || bytes.Compare(q.firedMax(s), q.peek().sfx) < 0)
			if q.rangeOK {
				if err := s.stageSpans(q); err != nil {
					return err
				}
			} else {
				points = true
			}
			clear(q.fired)
			q.firedN = 0
		}
	}
	if points {
		for _, i := range s.firedOrder() {
			if s.firedQ[i].rangeOK {
				continue
			}
			if err := s.stageTimer(s.firedKey(i), true); err != nil {
				return err
			}
			s.firedPoints++
		}
	}
	clear(s.firedQ)
	s.firedKeys, s.firedEnds, s.firedQ = s.firedKeys[:0], s.firedEnds[:0], s.firedQ[:0]
	// Kept for the next fires unless a Flush's gathering made it large.
	if cap(s.firedKeys) > 2*firedStageBytes {
		s.firedKeys, s.firedEnds, s.firedQ = nil, nil, nil
	}
	return nil
}

// firedMax is the suffix of the last by key of the timers q fired since
// the last Flush.
func (q *timerQueue) firedMax(s *Store) []byte {
	var m []byte
	for _, sp := range q.fired {
		if sp.n == 0 {
			continue
		}
		if sfx := s.firedKey(sp.hi)[q.pfxLen:]; m == nil || bytes.Compare(sfx, m) > 0 {
			m = sfx
		}
	}
	return m
}

// stageSpans stages the deletions of q's fired timers, a range per key
// group from the first to just past the last (a point deletion for one).
func (s *Store) stageSpans(q *timerQueue) error {
	for _, sp := range q.fired {
		switch {
		case sp.n == 0:
		case sp.lo == sp.hi:
			if err := s.stageTimer(s.firedKey(sp.lo), true); err != nil {
				return err
			}
		default:
			s.spanEnd = append(append(s.spanEnd[:0], s.firedKey(sp.hi)...), 0)
			if err := s.batch.DeleteRange(s.firedKey(sp.lo), s.spanEnd, nil); err != nil {
				return s.fail("stage fired timers' deletion", err)
			}
			s.firedRanges++
		}
	}
	return nil
}

// firedKey is the Pebble key of the i-th fired timer since the last Flush.
func (s *Store) firedKey(i int32) []byte {
	start := 0
	if i > 0 {
		start = s.firedEnds[i-1]
	}
	return s.firedKeys[start:s.firedEnds[i]]
}

// firedGroup is the key group of the i-th fired timer, less the store's
// first.
func (s *Store) firedGroup(i int) int {
	return int(binary.BigEndian.Uint16(s.firedKey(int32(i)))) - s.groups.Start
}

// firedOrder is the indexes of the fired timers grouped by key group, in
// the order they fired within a group (a counting sort).
func (s *Store) firedOrder() []int32 {
	ends := s.firedEnds
	counts := make([]int, s.groups.End-s.groups.Start+2)
	for i := range ends {
		counts[s.firedGroup(i)+1]++
	}
	for g := 1; g < len(counts); g++ {
		counts[g] += counts[g-1]
	}
	order := make([]int32, len(ends))
	for i := range ends {
		g := s.firedGroup(i)
		order[counts[g]] = int32(i)
		counts[g]++
	}
	return order
}

// journalTimerKey records a timer change, of kind undoTimerAdded or
// undoTimerDeleted, of the timer with Pebble key pk, in the open journal.
func (s *Store) journalTimerKey(kind undoKind, v *VertexState, domain int32, pk []byte, ts int64, keyLen, nsLen int) {
	j := &s.undo
	r := undoRecord{kind: kind, v: v, domain: domain, ts: ts, keyLen: keyLen, nsLen: nsLen}
	r.pk[0] = len(j.buf)
	j.buf = append(j.buf, pk...)
	r.pk[1] = len(j.buf)
	j.recs = append(j.recs, r)
}
