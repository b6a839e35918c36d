package subtask

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDeadLetterProperties drives dead-letter calls on random batches with
// random bad records, failure kinds (a trap, a usable instance, a failure
// that may be the call's size), guests that say or do not say where they
// failed and guests that mark commit points, and runs the ranges of each
// Ready as a driver would. Whatever the order of the settling:
//
//   - every good record's work is kept exactly once (in a range that
//     succeeded, or before the commit point of one that failed) and never
//     dead-lettered;
//   - every bad record is dead-lettered exactly once, with the cause of a
//     Trap that it was in;
//   - every failure is undone, and renewed when it was a trap;
//   - a call that keeps failing turns wary: a later call of more than
//     WaryPiece records runs in pieces, unless the guest marks commit
//     points.
func TestDeadLetterProperties(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
		if err := runDeadLetterProperty(r); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// guestModel is a guest as the driver sees it fail.
type guestModel struct {
	hints, trap, sizeBound bool
	commitEvery            int // 0: marks no commit points
}

func runDeadLetterProperty(r *rand.Rand) error {
	m, err := NewMachine(Config{DeadLetters: true, MaxDeadLetters: -1})
	if err != nil {
		return err
	}
	g := guestModel{hints: r.IntN(2) == 0, trap: r.IntN(2) == 0, sizeBound: r.IntN(4) == 0}
	if r.IntN(3) == 0 {
		g.commitEvery = 1 + r.IntN(16)
		m.MarksCommitPoints()
	}
	failedCalls := 0
	for call := range 12 {
		n := r.IntN(300)
		bad := map[int]bool{}
		switch r.IntN(4) {
		case 0: // none
		case 1:
			for range 1 + r.IntN(3) {
				if n > 0 {
					bad[r.IntN(n)] = true
				}
			}
		case 2:
			for i := range n {
				if r.IntN(10) == 0 {
					bad[i] = true
				}
			}
		case 3:
			for i := range n {
				bad[i] = r.IntN(3) > 0
			}
		}
		pieces, err := settleModel(m, g, call, n, bad)
		if err != nil {
			return fmt.Errorf("call %d of %d records, guest %+v: %w", call, n, g, err)
		}
		wary := failedCalls >= WaryFails && g.commitEvery == 0
		if want := wary && n > WaryPiece; pieces != want {
			return fmt.Errorf("call %d of %d records after %d failed calls (guest %+v): in pieces %v, want %v",
				call, n, failedCalls, g, pieces, want)
		}
		for i := range n {
			if bad[i] {
				failedCalls++
				break
			}
		}
	}
	return nil
}

// settleModel runs one call of n records with the bad ones, and reports
// whether its first range was a piece.
func settleModel(m *Machine, g guestModel, stage, n int, bad map[int]bool) (bool, error) {
	if err := m.Call(stage, n); err != nil {
		return false, err
	}
	kept := make([]int, n)
	dead := make([]int, n)
	var traps [][2]int // each Trap's range
	pieces, first := false, true
	undo, renew := 0, 0
	for steps := 0; ; steps++ {
		if steps > 100*(n+1) {
			return false, fmt.Errorf("no end to the settling after %d steps", steps)
		}
		actions := m.Ready()
		if len(actions) == 0 {
			break
		}
		for _, a := range actions {
			switch a := a.(type) {
			case RunRange:
				if a.Stage != stage || a.Lo < 0 || a.Hi > n || a.Lo > a.Hi {
					return false, fmt.Errorf("%v of a call of %d records at stage %d", a, n, stage)
				}
				if first {
					pieces, first = a.Hi-a.Lo < n, false
				}
				at := -1
				for i := a.Lo; i < a.Hi && at < 0; i++ {
					if bad[i] {
						at = i
					}
				}
				if at < 0 {
					for i := a.Lo; i < a.Hi; i++ {
						kept[i]++
					}
					if err := m.RangeDone(stage, a.Lo, a.Hi); err != nil {
						return false, err
					}
					continue
				}
				f := Failure{Stage: stage, Lo: a.Lo, Hi: a.Hi, At: -1, Trap: g.trap, SizeBound: g.sizeBound, Err: "bad"}
				if g.hints {
					f.At = at
				}
				if g.commitEvery > 0 {
					f.Done = (at - a.Lo) / g.commitEvery * g.commitEvery
					for i := a.Lo; i < a.Lo+f.Done; i++ {
						kept[i]++
					}
				}
				traps = append(traps, [2]int{a.Lo, a.Hi})
				if err := m.Trap(f); err != nil {
					return false, err
				}
			case Undo:
				undo++
			case RenewInstance:
				renew++
			case DeadLetter:
				if a.Record < 0 || a.Record >= n || a.Cause < 0 || a.Cause >= len(traps) {
					return false, fmt.Errorf("%v with %d traps in a call of %d records", a, len(traps), n)
				}
				if c := traps[a.Cause]; a.Record < c[0] || a.Record >= c[1] {
					return false, fmt.Errorf("%v: record not in the range %v of its cause", a, c)
				}
				dead[a.Record]++
			default:
				return false, fmt.Errorf("unexpected %v while settling", a)
			}
		}
	}
	for i := range n {
		switch {
		case bad[i] && (dead[i] != 1 || kept[i] != 0):
			return false, fmt.Errorf("bad record %d: dead-lettered %d times, kept %d", i, dead[i], kept[i])
		case !bad[i] && (dead[i] != 0 || kept[i] != 1):
			return false, fmt.Errorf("good record %d: dead-lettered %d times, kept %d", i, dead[i], kept[i])
		}
	}
	if undo != len(traps) || (g.trap && renew != len(traps)) || (!g.trap && renew != 0) {
		return false, fmt.Errorf("%d undone and %d renewed for %d failures (traps: %v)", undo, renew, len(traps), g.trap)
	}
	return pieces, nil
}

// BenchmarkCleanCall is what the machine adds to a guest call that
// succeeds in dead-letter mode: Call, Ready, RangeDone.
func BenchmarkCleanCall(b *testing.B) {
	m, err := NewMachine(Config{DeadLetters: true, MaxDeadLetters: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Call(0, 1000); err != nil {
			b.Fatal(err)
		}
		for _, a := range m.Ready() {
			r := a.(RunRange)
			if err := m.RangeDone(0, r.Lo, r.Hi); err != nil {
				b.Fatal(err)
			}
		}
	}
}
