package subtask

import "fmt"

// Dead letters (docs/dead-letters.md): in dead-letter mode a guest failure
// in a batch does not fail the subtask. The failed call is undone (Undo,
// and RenewInstance when a trap left the instance unusable), then the
// batch is settled: the driver runs the ranges the machine asks for
// (RunRange) and reports each (RangeDone, or Trap for a range that failed
// too) until a Ready holds no RunRange; each single record that fails is
// dead-lettered, counted against the budget.
//
// How a failed range [lo, hi) is settled:
//   - the guest said which record it was at (at >= 0): that record is
//     dead-lettered, [lo, at) and [at+1, hi) run again;
//   - one record: dead-lettered;
//   - a trap (the instance was renewed): record by record, and the rest of
//     the range whole after each bad record;
//   - otherwise by halves; when the left half succeeds, the right half of a
//     range known to fail is known to fail too (unless the failure may
//     depend on the call's size), so it is split without running it.
//
// While failures are frequent (waryFails of the last waryWindow batches
// failed), batches go to the guest in pieces of waryPiece records.
const (
	waryFails  = 8
	waryWindow = 80
	waryPiece  = 128
)

// Failure describes a failed guest call on records [Lo, Hi) of the batch
// at Stage.
type Failure struct {
	Stage, Lo, Hi int
	// At is the record the guest was at (progress_at), -1 if unknown.
	At int
	// Trap: the instance is unusable and must be renewed.
	Trap bool
	// SizeBound: the failure may depend on the call's size (the deadline,
	// a quota, the memory limit), not only on a record.
	SizeBound bool
	Err       string
}

// settleRange is a range of the batch still to settle.
type settleRange struct {
	lo, hi int
	// bad: known to fail, without running it; oneByOne: settle record by
	// record (after a trap).
	bad, oneByOne bool
}

type deadLetterState struct {
	max     int64
	count   int64
	batches int64
	fails   [waryFails]int64
	next    int
	nfails  int
	failed  bool // the current batch had a failure
	// settling: the stage being settled, the failure's kind, the ranges
	// left (a stack: the last runs first) and the range running now.
	stage     int
	sizeBound bool
	left      []settleRange
	running   *settleRange
}

// begin starts a batch; it returns the piece size for a wary subtask.
func (d *deadLetterState) begin(enabled bool) int {
	if !enabled {
		return 0
	}
	wary := d.wary()
	d.batches++
	d.failed = false
	if wary {
		return waryPiece
	}
	return 0
}

func (d *deadLetterState) wary() bool {
	return d.nfails == waryFails && d.batches+1-d.fails[d.next] <= waryWindow
}

func (d *deadLetterState) failedBatch() {
	if d.failed {
		return
	}
	d.failed = true
	d.fails[d.next] = d.batches
	d.next = (d.next + 1) % waryFails
	d.nfails = min(d.nfails+1, waryFails)
}

// Trap handles a failed guest call. Without dead letters it fails the
// subtask; with them the call is undone and its records settled.
func (m *Machine) Trap(f Failure) error {
	if m.finished {
		return ErrFinished
	}
	if f.Lo < 0 || f.Hi <= f.Lo || (f.At >= 0 && (f.At < f.Lo || f.At >= f.Hi)) {
		return fmt.Errorf("subtask: failure on records [%d,%d) at %d", f.Lo, f.Hi, f.At)
	}
	if !m.cfg.DeadLetters {
		m.finish(Finish{Err: f.Err})
		return nil
	}
	d := &m.dl
	if d.running != nil && d.stage != f.Stage {
		return fmt.Errorf("subtask: failure at stage %d while stage %d is settling", f.Stage, d.stage)
	}
	m.emit(Undo{Stage: f.Stage})
	if f.Trap {
		m.emit(RenewInstance{})
	}
	d.failedBatch()
	d.stage, d.sizeBound = f.Stage, f.SizeBound
	r := settleRange{lo: f.Lo, hi: f.Hi}
	if d.running != nil {
		r.oneByOne = d.running.oneByOne
		d.running = nil
		if n := len(d.left); n > 0 && d.left[n-1].lo == f.Hi {
			// A left half failed: its right half is no longer known to.
			d.left[n-1].bad = false
		}
	}
	switch {
	case f.At >= 0:
		m.deadLetter(f.At)
		d.push(settleRange{lo: f.At + 1, hi: f.Hi})
		d.push(settleRange{lo: f.Lo, hi: f.At})
	case f.Hi-f.Lo == 1:
		m.deadLetter(f.Lo)
		if r.oneByOne {
			// After a bad record, the rest of the range whole.
			if n := len(d.left); n > 0 && d.left[n-1].oneByOne {
				d.left[n-1].oneByOne = false
			}
		}
	case f.Trap:
		d.push(settleRange{lo: f.Lo + 1, hi: f.Hi, oneByOne: true})
		d.push(settleRange{lo: f.Lo, hi: f.Lo + 1, oneByOne: true})
	default:
		d.split(r)
	}
	m.next()
	return nil
}

// RangeDone reports that RunRange [lo, hi) at stage succeeded.
func (m *Machine) RangeDone(stage, lo, hi int) error {
	d := &m.dl
	if r := d.running; r == nil || d.stage != stage || r.lo != lo || r.hi != hi {
		return fmt.Errorf("subtask: range [%d,%d) of stage %d done, but it is not running", lo, hi, stage)
	}
	r := *d.running
	d.running = nil
	if r.oneByOne && r.hi-r.lo == 1 {
		// Good record: go on one by one.
		if n := len(d.left); n > 0 && d.left[n-1].oneByOne && d.left[n-1].lo == r.hi {
			rest := d.left[n-1]
			d.left = d.left[:n-1]
			if rest.hi-rest.lo > 1 {
				d.push(settleRange{lo: rest.lo + 1, hi: rest.hi, oneByOne: true})
			}
			d.push(settleRange{lo: rest.lo, hi: rest.lo + 1, oneByOne: true})
		}
	}
	m.next()
	return nil
}

// split halves a failed range: the left half runs first; the right half is
// known to fail if the left succeeds (marked when it does, in next).
func (d *deadLetterState) split(r settleRange) {
	mid := r.lo + (r.hi-r.lo)/2
	d.push(settleRange{lo: mid, hi: r.hi, bad: !d.sizeBound})
	d.push(settleRange{lo: r.lo, hi: mid})
}

func (d *deadLetterState) push(r settleRange) {
	if r.hi > r.lo {
		d.left = append(d.left, r)
	}
}

// next runs the next range to settle, dead-lettering or splitting the ranges
// known to fail without running them.
func (m *Machine) next() {
	d := &m.dl
	for len(d.left) > 0 && !m.finished {
		r := d.left[len(d.left)-1]
		d.left = d.left[:len(d.left)-1]
		if r.bad {
			if r.hi-r.lo == 1 {
				m.deadLetter(r.lo)
				continue
			}
			d.split(r)
			continue
		}
		d.running = &r
		m.emit(RunRange{Stage: d.stage, Lo: r.lo, Hi: r.hi})
		return
	}
}

// deadLetter sends record i to the dead-letter sink, within the budget.
func (m *Machine) deadLetter(i int) {
	d := &m.dl
	d.count++
	if d.max >= 0 && d.count > d.max {
		m.finish(Finish{Err: fmt.Sprintf("more than %d dead letters", d.max)})
		return
	}
	m.emit(DeadLetter{Stage: d.stage, Record: i})
}
