package subtask

import "fmt"

// Dead letters (docs/dead-letters.md): in dead-letter mode a guest failure
// does not fail the subtask. Each guest call of a stage on a batch (its
// records, or its due timers) is one Call: the machine asks for the batch
// whole or, wary, in pieces (RunRange), and the driver reports each range
// it ran (RangeDone, or Trap for one that failed) until a Ready holds no
// action. A failed range is undone (Undo, and RenewInstance when a trap
// left the instance unusable), then settled; each single record that
// fails is dead-lettered, counted against the budget.
//
// How a failed range [lo, hi) is settled:
//   - the records before the guest's last commit point (Failure.Done) are
//     done and stay so: the failure is in the rest, [lo+Done, hi);
//   - one record: dead-lettered;
//   - the guest said which record it was at (At, for a failure that is a
//     property of a record): [lo, At) runs again, At is dead-lettered,
//     then [At+1, hi) runs;
//   - a trap (the instance was renewed, which costs milliseconds where a
//     call of one record costs microseconds): record by record, and the
//     rest of the range whole after each bad record; when every record but
//     the last succeeded, the last is the bad one, without running it;
//   - otherwise by halves: when the left half succeeds, the right half of
//     a range known to fail is known to fail too, and is split without
//     running it.
//
// A failure that may depend on the call's size (Failure.SizeBound: the
// deadline, a quota, the memory limit) is never taken to be a record's:
// it ignores At and is run again each time rather than known to fail.
//
// While failures are frequent (WaryFails of the last WaryWindow calls
// failed), a guest that marks no commit points is fed its batches in
// pieces of WaryPiece records, so that a bad record costs half a piece
// rather than half a batch. After a failure in the last WaryWindow calls,
// the guest is asked for commit points (RunRange.CommitPoints).
//
// Whether pieces pay: they cost about (n/p - 1) more calls per batch of n
// records in pieces of p, and save about (n - p)/2 records per failed
// batch, so they pay when more than 2c/(p·r) of the batches fail, whatever
// n, for a call that costs c more than its records at r each. With a Go
// guest (c about as much as 6 records) and p = 128 that is about one batch
// in 10, the rate at which BenchmarkPoisonRecords found pieces neither
// gaining nor losing (BENCHMARKS.md). Poison records often come in runs (a
// bad producer, a bad day of data), and then nearly every batch fails.
// Counting 8 failures rather than fewer tells the rates apart better: at
// one failed batch in 15 the subtask is wary about a sixth of the time, at
// one in 4 always.
const (
	WaryFails  = 8
	WaryWindow = 80
	WaryPiece  = 128
)

// Failure describes a failed guest call on records [Lo, Hi) of the batch
// at Stage: the range of the RunRange running.
type Failure struct {
	Stage, Lo, Hi int
	// Done: the guest marked the first Done records of the range done
	// (its last commit point); their work was kept.
	Done int
	// At is the record the guest was at (progress_at), -1 if unknown; an
	// At outside [Lo+Done, Hi) is unknown too.
	At int
	// Trap: the instance is unusable and must be renewed.
	Trap bool
	// SizeBound: the failure may depend on the call's size (the deadline,
	// a quota, the memory limit), not only on a record.
	SizeBound bool
	Err       string
}

// settleRange is a range of the call still to run or settle.
type settleRange struct {
	lo, hi int
	// bad: a right half known to fail, split without running it; dead: a
	// record known to fail, dead-lettered without running it; oneByOne:
	// settle record by record (after a trap).
	bad, dead, oneByOne bool
	// cause numbers the Trap of the call that the range is known to fail
	// by (bad, dead) or that started the record by record settling.
	cause int
}

type deadLetterState struct {
	max     int64
	perCkpt bool
	count   int64
	// batches counts the calls; fails holds the numbers of the last
	// WaryFails that failed, the oldest at fails[next] once nfails is
	// WaryFails.
	batches int64
	fails   [WaryFails]int64
	next    int
	nfails  int
	// commits: the guest marks commit points, which bound what a failure
	// costs better than pieces do.
	commits bool
	// The call in progress: whether it failed, whether its guest is asked
	// for commit points, the Traps it had, its stage, the last failure's
	// kind, the ranges left (a stack: the last runs first) and the range
	// running now.
	failed       bool
	commitPoints bool
	causes       int
	stage        int
	sizeBound    bool
	left         []settleRange
	running      settleRange
	isRunning    bool
}

func (d *deadLetterState) wary() bool {
	return !d.commits && d.nfails == WaryFails && d.batches+1-d.fails[d.next] <= WaryWindow
}

// failedLately: one of the last WaryWindow calls failed.
func (d *deadLetterState) failedLately() bool {
	if d.nfails == 0 {
		return false
	}
	last := d.fails[(d.next+WaryFails-1)%WaryFails]
	return d.batches+1-last <= WaryWindow
}

func (d *deadLetterState) failedBatch() {
	if d.failed {
		return
	}
	d.failed = true
	d.fails[d.next] = d.batches
	d.next = (d.next + 1) % WaryFails
	d.nfails = min(d.nfails+1, WaryFails)
}

// Call starts a guest call of stage on a batch of n records (or timers)
// in dead-letter mode: RunRange for the batch whole or, wary, for each
// piece of it.
func (m *Machine) Call(stage, n int) error {
	d := &m.dl
	switch {
	case m.failed:
		return ErrFinished
	case !m.cfg.DeadLetters:
		return fmt.Errorf("subtask: a guarded call of stage %d without dead letters", stage)
	case d.isRunning || len(d.left) > 0:
		return fmt.Errorf("subtask: a call of stage %d while stage %d is settling", stage, d.stage)
	case n < 0:
		return fmt.Errorf("subtask: a call of stage %d on %d records", stage, n)
	}
	wary := d.wary()
	d.commitPoints = d.failedLately()
	d.batches++
	d.failed, d.causes, d.stage, d.sizeBound = false, 0, stage, false
	if !wary || n <= WaryPiece {
		d.running, d.isRunning = settleRange{lo: 0, hi: n}, true
		m.emit(RunRange{Stage: stage, Lo: 0, Hi: n, CommitPoints: d.commitPoints})
		return nil
	}
	for lo := (n - 1) / WaryPiece * WaryPiece; lo >= 0; lo -= WaryPiece {
		d.push(settleRange{lo: lo, hi: min(lo+WaryPiece, n)})
	}
	m.next()
	return nil
}

// MarksCommitPoints tells the machine that the guest marked a commit
// point: it is never fed in pieces from then on.
func (m *Machine) MarksCommitPoints() { m.dl.commits = true }

// RestoreDeadLetters sets the budget's count restored from a checkpoint
// (a budget over the job's life).
func (m *Machine) RestoreDeadLetters(n int64) { m.dl.count = n }

// DeadLetterCount is what the budget counts: the dead letters since the
// last snapshot (a budget per checkpoint) or over the job's life.
func (m *Machine) DeadLetterCount() int64 { return m.dl.count }

// Trap handles a failed guest call. Without dead letters it fails the
// subtask; with them the call is undone and its records settled.
func (m *Machine) Trap(f Failure) error {
	if m.failed {
		return ErrFinished
	}
	if f.Lo < 0 || f.Hi < f.Lo || f.Done < 0 || (f.Hi > f.Lo && f.Done >= f.Hi-f.Lo) {
		return fmt.Errorf("subtask: failure on records [%d,%d) with %d done", f.Lo, f.Hi, f.Done)
	}
	if !m.cfg.DeadLetters {
		m.finish(Finish{Err: f.Err})
		return nil
	}
	d := &m.dl
	if r := d.running; !d.isRunning || d.stage != f.Stage || r.lo != f.Lo || r.hi != f.Hi {
		return fmt.Errorf("subtask: failure on records [%d,%d) of stage %d, but they are not running", f.Lo, f.Hi, f.Stage)
	}
	m.emit(Undo{Stage: f.Stage})
	if f.Trap {
		m.emit(RenewInstance{})
	}
	d.failedBatch()
	d.sizeBound = f.SizeBound
	cause := d.causes
	d.causes++
	r := d.running
	d.isRunning = false
	if n := len(d.left); n > 0 && d.left[n-1].bad && d.left[n-1].lo == f.Hi {
		// A left half failed: its right half is no longer known to.
		d.left[n-1].bad = false
	}
	lo, at := f.Lo+f.Done, f.At
	if at < lo || at >= f.Hi || f.SizeBound {
		at = -1
	}
	switch {
	case f.Hi == lo:
		// A call of no records: nothing to settle.
	case f.Hi-lo == 1:
		m.deadLetter(lo, cause)
		if n := len(d.left); r.oneByOne && n > 0 && d.left[n-1].oneByOne && d.left[n-1].lo == f.Hi {
			// After a bad record, the rest of the range whole.
			d.left[n-1].oneByOne = false
		}
	case at >= 0:
		d.push(settleRange{lo: at + 1, hi: f.Hi})
		d.push(settleRange{lo: at, hi: at + 1, dead: true, cause: cause})
		d.push(settleRange{lo: lo, hi: at})
	case f.Trap:
		d.push(settleRange{lo: lo + 1, hi: f.Hi, oneByOne: true, cause: cause})
		d.push(settleRange{lo: lo, hi: lo + 1, oneByOne: true, cause: cause})
	default:
		d.split(settleRange{lo: lo, hi: f.Hi, cause: cause})
	}
	m.next()
	return nil
}

// RangeDone reports that RunRange [lo, hi) at stage succeeded.
func (m *Machine) RangeDone(stage, lo, hi int) error {
	if m.failed {
		return ErrFinished
	}
	d := &m.dl
	if r := d.running; !d.isRunning || d.stage != stage || r.lo != lo || r.hi != hi {
		return fmt.Errorf("subtask: range [%d,%d) of stage %d done, but it is not running", lo, hi, stage)
	}
	r := d.running
	d.isRunning = false
	if n := len(d.left); r.oneByOne && r.hi-r.lo == 1 && n > 0 && d.left[n-1].oneByOne && d.left[n-1].lo == r.hi {
		// Good record: go on one by one. When only the last is left,
		// every record before it succeeded: it is the bad one, unless
		// the failure may depend on the call's size.
		rest := d.left[n-1]
		d.left = d.left[:n-1]
		if rest.hi-rest.lo == 1 && !d.sizeBound {
			rest.dead = true
			d.push(rest)
		} else {
			d.push(settleRange{lo: rest.lo + 1, hi: rest.hi, oneByOne: true, cause: rest.cause})
			d.push(settleRange{lo: rest.lo, hi: rest.lo + 1, oneByOne: true, cause: rest.cause})
		}
	}
	m.next()
	return nil
}

// split halves a failed range: the left half runs first; the right half is
// known to fail if the left succeeds (it is unmarked if the left fails),
// unless the failure may depend on the call's size.
func (d *deadLetterState) split(r settleRange) {
	mid := r.lo + (r.hi-r.lo)/2
	d.push(settleRange{lo: mid, hi: r.hi, bad: !d.sizeBound, cause: r.cause})
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
	for len(d.left) > 0 && !m.failed {
		r := d.left[len(d.left)-1]
		d.left = d.left[:len(d.left)-1]
		switch {
		case r.dead || (r.bad && r.hi-r.lo == 1):
			m.deadLetter(r.lo, r.cause)
		case r.bad:
			d.split(r)
		default:
			d.running, d.isRunning = r, true
			m.emit(RunRange{Stage: d.stage, Lo: r.lo, Hi: r.hi, CommitPoints: d.commitPoints})
			return
		}
	}
}

// deadLetter sends record i to the dead-letter sink; one past the budget
// is written too, then fails the subtask.
func (m *Machine) deadLetter(i, cause int) {
	d := &m.dl
	d.count++
	over := d.max >= 0 && d.count > d.max
	m.emit(DeadLetter{Stage: d.stage, Record: i, Cause: cause, Over: over})
	if over {
		d.left, d.isRunning = nil, false
		m.finish(Finish{Err: fmt.Sprintf("more than %d dead letters", d.max)})
	}
}

// snapshotted: the dead letters went into a snapshot; a budget per
// checkpoint starts again.
func (d *deadLetterState) snapshotted() {
	if d.perCkpt {
		d.count = 0
	}
}
