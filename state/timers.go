package state

import (
	"bytes"
	"slices"
	"unsafe"
)

// timer is one registered timer of a timerQueue.
type timer struct {
	ts  int64
	pk  []byte // encoded Pebble key; never modified, so the queue's set may alias it
	sfx []byte // pk from the time on: its bytes sort in firing order
	key []byte // record key, a sub-slice of pk
	ns  []byte // namespace, a sub-slice of pk
	// index is the position in the heap.
	index int
}

// newTimer copies pk, the Pebble key of a timer whose record key and
// namespace are its last keyLen+nsLen bytes, into a new timer.
func newTimer(ts int64, pk []byte, keyLen, nsLen int) *timer {
	t := &timer{}
	t.set(ts, append([]byte(nil), pk...), keyLen, nsLen)
	return t
}

// set makes t the timer of Pebble key pk, which it keeps (not a copy).
func (t *timer) set(ts int64, pk []byte, keyLen, nsLen int) {
	nsAt := len(pk) - nsLen
	keyAt := nsAt - keyLen
	t.ts = ts
	t.pk = pk
	t.sfx = pk[keyAt-uvarintLen(uint64(keyLen))-8:]
	t.key = pk[keyAt:nsAt:nsAt]
	t.ns = pk[nsAt:]
}

// timerSuffix is the part of a timer's Pebble key pk, whose record key and
// namespace are keyLen and nsLen bytes, that orders timers: time, record
// key length, record key, namespace.
func timerSuffix(pk []byte, keyLen, nsLen int) []byte {
	return pk[len(pk)-nsLen-keyLen-uvarintLen(uint64(keyLen))-8:]
}

// timerBefore is the firing order: time, then key (the shorter first, then
// in byte order), then namespace. It is the order of the timer keys of one
// key group and time domain in Pebble, so that the timers beyond the
// in-memory window come back from Pebble in it (timerwindow.go).
func timerBefore(a, b *timer) bool {
	return bytes.Compare(a.sfx, b.sfx) < 0
}

// timerQueue is the timers of one vertex and time domain that are in
// memory: a binary min-heap in firing order plus a set by Pebble key for
// de-duplication and O(log n) deletion. The zero value holds every timer
// and is ready to use; once partial, the rest are in Pebble alone
// (timerwindow.go).
type timerQueue struct {
	heap []*timer
	// run holds the timers a refill read from Pebble, in firing order,
	// from head on; a removed one stays, with index -1, and head moves
	// past it. A window of timers fires from it without a sift each;
	// timers registered later go to the heap, and peek takes the earlier
	// of both. find looks a run's timers up by binary search, so that
	// filling and firing a window costs no map insert or delete a timer.
	run  []*timer
	head int
	runN int // timers in run
	// set holds the heap's timers by Pebble key.
	set map[string]*timer
	// partial: the heap holds exactly the timers whose suffix sorts
	// before bound (none when bound is nil), and Pebble every timer.
	// Otherwise it holds every timer of the vertex and domain.
	partial bool
	bound   []byte
	// ahead is the timers read ahead from Pebble past the bound, a run
	// per owned key group, for the refills to come (refill).
	ahead []aheadRun
	// fired is, per owned key group, the first and the last by key of
	// the timers fired since the last Flush (indexes into the store's
	// fired keys), firedN how many: stageFired deletes them with one
	// range deletion per key group when every timer left in the queue
	// sorts after the last of them.
	fired   []firedSpan
	firedN  int
	pfxLen  int  // timer key bytes before the suffix, set by PopTimers
	rangeOK bool // stageFired's verdict for this queue
}

func (q *timerQueue) len() int { return len(q.heap) + q.runN }

// find returns the timer with Pebble key pk, or nil.
func (q *timerQueue) find(pk []byte) *timer {
	// The conversion in a map index expression does not allocate.
	if t := q.set[string(pk)]; t != nil {
		return t
	}
	if q.runN == 0 {
		return nil
	}
	// Every timer of the queue has the same key bytes before its suffix.
	r := q.run[q.head]
	sfx := pk[min(len(pk), len(r.pk)-len(r.sfx)):]
	live := q.run[q.head:]
	i, _ := slices.BinarySearchFunc(live, sfx, func(t *timer, sfx []byte) int { return bytes.Compare(t.sfx, sfx) })
	if i < len(live) && live[i].index != -1 && bytes.Equal(live[i].pk, pk) {
		return live[i]
	}
	return nil
}

// peek returns the earliest timer, or nil.
func (q *timerQueue) peek() *timer {
	var h *timer
	if len(q.heap) > 0 {
		h = q.heap[0]
	}
	if q.runN > 0 {
		if r := q.run[q.head]; h == nil || timerBefore(r, h) {
			return r
		}
	}
	return h
}

// addRun appends t, which must sort after every timer in the queue and
// not be in it yet, to the run.
func (q *timerQueue) addRun(t *timer) {
	t.index = runIndex(len(q.run))
	q.run = append(q.run, t)
	q.runN++
}

// runIndex is the index of a timer at position p of the run: below -1,
// which marks a timer in no queue.
func runIndex(p int) int { return -2 - p }

// removeRun deletes t, which is in the run.
func (q *timerQueue) removeRun(t *timer) {
	t.index = -1
	if q.runN--; q.runN == 0 {
		clear(q.run)
		q.run, q.head = q.run[:0], 0
		return
	}
	for q.run[q.head].index == -1 {
		q.head++
	}
}

// unrun moves the run's timers into the heap.
func (q *timerQueue) unrun() {
	for _, t := range q.run[q.head:] {
		if t.index != -1 {
			if q.set == nil {
				q.set = make(map[string]*timer)
			}
			q.set[unsafe.String(unsafe.SliceData(t.pk), len(t.pk))] = t
			t.index = len(q.heap)
			q.heap = append(q.heap, t)
			q.up(t.index)
		}
	}
	clear(q.run)
	q.run, q.head, q.runN = q.run[:0], 0, 0
}

// add inserts t, whose Pebble key must not be in the queue yet.
func (q *timerQueue) add(t *timer) {
	if q.set == nil {
		q.set = make(map[string]*timer)
	}
	q.set[unsafe.String(unsafe.SliceData(t.pk), len(t.pk))] = t
	t.index = len(q.heap)
	q.heap = append(q.heap, t)
	q.up(t.index)
}

// remove deletes t, which must be in the queue.
func (q *timerQueue) remove(t *timer) {
	if t.index < -1 {
		q.removeRun(t)
		return
	}
	delete(q.set, string(t.pk))
	last := len(q.heap) - 1
	i := t.index
	if i != last {
		q.swap(i, last)
	}
	q.heap[last] = nil
	q.heap = q.heap[:last]
	if i != last {
		if !q.down(i) {
			q.up(i)
		}
	}
	t.index = -1
}

// pop removes and returns the earliest timer, or nil.
func (q *timerQueue) pop() *timer {
	t := q.peek()
	if t != nil {
		q.remove(t)
	}
	return t
}

func (q *timerQueue) swap(i, j int) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.heap[i].index = i
	q.heap[j].index = j
}

func (q *timerQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !timerBefore(q.heap[i], q.heap[p]) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

// down sifts element i towards the leaves and reports whether it moved.
func (q *timerQueue) down(i int) bool {
	start := i
	n := len(q.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && timerBefore(q.heap[r], q.heap[l]) {
			m = r
		}
		if !timerBefore(q.heap[m], q.heap[i]) {
			break
		}
		q.swap(i, m)
		i = m
	}
	return i > start
}
