package state

import (
	"fmt"

	"github.com/wstream/wstream/operator"
)

// An undo journal makes the state changes of one guest call revocable: the
// runtime opens it before a call whose failure it means to survive
// (dead-letter mode), and either keeps the changes (Commit) or puts back
// what every changed entry and timer held when the journal opened
// (Rollback). Only the first change of an entry in a journal records its
// old value, so a hot key written a thousand times in one batch costs one
// record.
//
// Rollback writes the old values back as ordinary changes (dirty cache
// entries, timer writes in the next batch), so it does not matter whether a
// Flush reached Pebble in between (StateIter flushes, for one): the next
// Flush overwrites what the call wrote. A snapshot is never taken while a
// journal is open, since the runtime opens one around a single guest call.

// undoKind says what an undo record restores.
type undoKind uint8

const (
	undoEntry        undoKind = iota // a state entry: its old value or absence
	undoTimerAdded                   // a timer the call registered: delete it
	undoTimerDeleted                 // a timer the call deleted: register it again
)

// undoRecord is one change to revert. Byte fields are ranges of the
// journal's buffer, so that recording allocates nothing once warm.
type undoRecord struct {
	kind    undoKind
	present bool // undoEntry: the entry existed
	v       *VertexState
	domain  int32
	ts      int64
	keyLen  int // timers: record key and namespace lengths at the end of the pk
	nsLen   int
	pk, val [2]int
}

type undoJournal struct {
	open  bool
	epoch uint32 // cache entries journaled in this journal carry it
	recs  []undoRecord
	buf   []byte
}

// maxKeptJournal bounds the journal buffer kept for the next call.
const maxKeptJournal = 4 << 20

// BeginUndo opens an undo journal: until Commit or Rollback, every state and
// timer change of the store's vertices can be reverted. Opening a journal
// while one is open starts over (the changes so far stay).
func (s *Store) BeginUndo() {
	j := &s.undo
	j.open = true
	j.epoch++
	if j.epoch == 0 {
		// The counter wrapped: an entry last journaled 2^32 journals ago
		// carries an epoch that comes round again, and would not be
		// journaled in it. Once in 2^32 journals, every entry starts over
		// at 0, which marks entries never journaled.
		for k := range s.cache.entries {
			s.cache.entries[k].undo = 0
		}
		j.epoch = 1
	}
	j.recs = j.recs[:0]
	if cap(j.buf) > maxKeptJournal {
		j.buf = nil
	}
	j.buf = j.buf[:0]
}

// CommitUndo closes the journal and keeps the changes made since BeginUndo.
func (s *Store) CommitUndo() {
	s.undo.open = false
	s.undo.recs = s.undo.recs[:0]
}

// RollbackUndo closes the journal and reverts every change made since
// BeginUndo: state entries get back their values (or absence), timers that
// were registered are deleted and timers that were deleted or fired are
// registered again. Timers popped by PopTimers before BeginUndo stay popped.
func (s *Store) RollbackUndo() error {
	j := &s.undo
	if !j.open {
		return nil
	}
	j.open = false
	if s.err != nil {
		return s.err
	}
	c := s.cache
	// Newest first: an entry journaled twice (evicted by a flush in
	// between, then changed again) ends with its oldest value.
	for i := len(j.recs) - 1; i >= 0; i-- {
		r := &j.recs[i]
		pk := j.buf[r.pk[0]:r.pk[1]]
		switch r.kind {
		case undoEntry:
			h := c.hash(pk)
			idx := c.lookup(pk, h)
			if idx == noSlot {
				idx = c.insert(pk, h)
			}
			s.markDirty(idx, pk, r.nsLen)
			val := j.buf[r.val[0]:r.val[1]]
			c.setVal(idx, val)
			c.entries[idx].present = r.present
			s.pendingBytes += len(val)
		case undoTimerAdded:
			if err := r.v.deleteTimer(r.domain, pk, r.ts, r.keyLen, r.nsLen); err != nil {
				return err
			}
		case undoTimerDeleted:
			if err := r.v.registerTimer(r.domain, pk, r.ts, r.keyLen, r.nsLen); err != nil {
				return err
			}
		}
	}
	j.recs = j.recs[:0]
	return nil
}

// journalEntry records the value of cache entry idx (Pebble key pk, of
// which the last nsLen bytes are the namespace) before its first change in
// the open journal.
func (s *Store) journalEntry(idx int32, pk []byte, nsLen int) {
	j := &s.undo
	e := &s.cache.entries[idx]
	if e.undo == j.epoch {
		return
	}
	e.undo = j.epoch
	r := undoRecord{kind: undoEntry, present: e.present, nsLen: nsLen}
	r.pk[0] = len(j.buf)
	j.buf = append(j.buf, pk...)
	r.pk[1] = len(j.buf)
	r.val[0] = r.pk[1]
	j.buf = append(j.buf, s.cache.val(idx)...)
	r.val[1] = len(j.buf)
	j.recs = append(j.recs, r)
}

// journalBound refuses a change once the open journal holds more than the
// store's memory bound (Options.MemoryBytes) of old values: a call that
// overwrites many large entries would otherwise make the host hold them
// all until it returns.
func (s *Store) journalBound() error {
	if s.flushAt <= 0 || len(s.undo.buf) <= 2*s.flushAt {
		return nil
	}
	return &operator.MemoryQuotaError{What: fmt.Sprintf("the undo journal of one call in dead-letter mode holds %d bytes of old state values", len(s.undo.buf))}
}

// journalTimer records a timer change in the open journal.
func (s *Store) journalTimer(kind undoKind, v *VertexState, domain int32, t *timer) {
	j := &s.undo
	r := undoRecord{kind: kind, v: v, domain: domain, ts: t.ts, keyLen: len(t.key), nsLen: len(t.ns)}
	r.pk[0] = len(j.buf)
	j.buf = append(j.buf, t.pk...)
	r.pk[1] = len(j.buf)
	j.recs = append(j.recs, r)
}

// journalNewTimer records the registration of a timer not yet created.
func (s *Store) journalNewTimer(v *VertexState, domain int32, pk []byte, ts int64, keyLen, nsLen int) {
	j := &s.undo
	r := undoRecord{kind: undoTimerAdded, v: v, domain: domain, ts: ts, keyLen: keyLen, nsLen: nsLen}
	r.pk[0] = len(j.buf)
	j.buf = append(j.buf, pk...)
	r.pk[1] = len(j.buf)
	j.recs = append(j.recs, r)
}
