package subtask

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestMachineScenarios runs the scenario files under testdata/machine. Each
// file drives one Machine (or several, one per "new") and prints the
// actions of Ready after each command:
//
//	new channels=2 [mode=aligned] [timeout=0] [dead-letters=MAX [per-checkpoint]] [sink-can-abort]
//	data ch=0 [bytes=100]
//	barrier ch=0 id=1 now=10 [kind=savepoint]
//	cancel ch=1 id=1 [now=20]
//	end ch=1 [now=30]
//	tick now=50
//	trigger id=1 [kind=savepoint] [stop] [drain]
//	complete id=1 [kind=savepoint] [stop]
//	abort id=1 [reason=why]
//	stop
//	sync id=1 [err=why] [precommit]
//	async id=1 [err=why]
//	call [stage=0] n=8
//	trap [stage=0] lo=0 hi=8 [done=2] [at=3] [trap] [size-bound] [err=why]
//	range-done [stage=0] lo=0 hi=4
//	calls n=300 count=70
//	commits
//	restore-dead-letters n=3
//	dead-letter-count
//	wait
//
// Hold actions (the fair-share slot) are printed only by files that ask
// for them with "new ... holds". Run with -rewrite to regenerate the
// expected output, then review the diff.
func TestMachineScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		var m *Machine
		holds := false
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && m == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var err error
			switch d.Cmd {
			case "new":
				var cfg Config
				if d.HasArg("mode") {
					var mode string
					d.ScanArgs(t, "mode", &mode)
					if cfg.Mode, err = ParseMode(mode); err != nil {
						return "error: " + err.Error() + "\n"
					}
				}
				d.MaybeScanArgs(t, "channels", &cfg.Channels)
				d.MaybeScanArgs(t, "timeout", &cfg.AlignedTimeout)
				if d.HasArg("dead-letters") {
					cfg.DeadLetters = true
					d.ScanArgs(t, "dead-letters", &cfg.MaxDeadLetters)
					cfg.DeadLettersPerCheckpoint = d.HasArg("per-checkpoint")
				}
				cfg.SinkCanAbort = d.HasArg("sink-can-abort")
				holds = d.HasArg("holds")
				nm, err := NewMachine(cfg)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				m = nm
				return "ok\n"
			case "data":
				var ch, n int
				d.ScanArgs(t, "ch", &ch)
				d.MaybeScanArgs(t, "bytes", &n)
				err = m.Data(ch, n)
			case "barrier":
				var ch int
				var id, now int64
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "now", &now)
				err = m.Barrier(now, ch, id, scanKind(t, d))
			case "cancel":
				var ch int
				var id, now int64
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				d.MaybeScanArgs(t, "now", &now)
				err = m.CancelMarker(now, ch, id)
			case "end":
				var ch int
				var now int64
				d.MaybeScanArgs(t, "ch", &ch)
				d.MaybeScanArgs(t, "now", &now)
				err = m.EndOfInput(now, ch)
			case "tick":
				var now int64
				d.ScanArgs(t, "now", &now)
				err = m.Tick(now)
			case "trigger", "complete", "abort", "stop":
				c := Control{Kind: scanKind(t, d), Stop: d.HasArg("stop"), Drain: d.HasArg("drain"), Reason: "aborted by the coordinator"}
				c.Action = map[string]ControlAction{"trigger": Trigger, "complete": Complete, "abort": Abort, "stop": Stop}[d.Cmd]
				d.MaybeScanArgs(t, "id", &c.ID)
				d.MaybeScanArgs(t, "reason", &c.Reason)
				err = m.Control(c)
			case "sync", "async":
				var id int64
				var out Outcome
				d.ScanArgs(t, "id", &id)
				d.MaybeScanArgs(t, "err", &out.Err)
				out.SinkPreCommit = d.HasArg("precommit")
				phase := PhaseSync
				if d.Cmd == "async" {
					phase = PhaseAsync
				}
				err = m.SnapshotDone(id, phase, out)
			case "trap":
				f := Failure{At: -1, Trap: d.HasArg("trap"), SizeBound: d.HasArg("size-bound"), Err: "guest failed"}
				d.MaybeScanArgs(t, "stage", &f.Stage)
				d.ScanArgs(t, "lo", &f.Lo)
				d.ScanArgs(t, "hi", &f.Hi)
				d.MaybeScanArgs(t, "done", &f.Done)
				d.MaybeScanArgs(t, "at", &f.At)
				d.MaybeScanArgs(t, "err", &f.Err)
				err = m.Trap(f)
			case "range-done":
				var stage, lo, hi int
				d.MaybeScanArgs(t, "stage", &stage)
				d.ScanArgs(t, "lo", &lo)
				d.ScanArgs(t, "hi", &hi)
				err = m.RangeDone(stage, lo, hi)
			case "call":
				var stage, n int
				d.MaybeScanArgs(t, "stage", &stage)
				d.ScanArgs(t, "n", &n)
				err = m.Call(stage, n)
			case "calls":
				return runCalls(t, d, m)
			case "commits":
				m.MarksCommitPoints()
			case "restore-dead-letters":
				var n int64
				d.ScanArgs(t, "n", &n)
				m.RestoreDeadLetters(n)
			case "dead-letter-count":
				return fmt.Sprintf("%d\n", m.DeadLetterCount())
			case "wait":
				s := "wait " + m.Wait().String()
				if at, ok := m.NextWake(); ok {
					s += fmt.Sprintf(" wake=%d", at)
				}
				return s + "\n"
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			out := formatActions(m.Ready(), holds)
			if err != nil {
				out = "error: " + err.Error() + "\n" + out
			}
			return out
		})
	})
}

// runCalls runs count calls of n records on stage 0, each answering every
// RunRange with RangeDone (no failure), and prints how many calls went in
// pieces or asked for commit points, and the actions of the last.
func runCalls(t *testing.T, d *datadriven.TestData, m *Machine) string {
	var n, count int
	d.ScanArgs(t, "n", &n)
	d.ScanArgs(t, "count", &count)
	var last string
	pieces, commitPoints := 0, 0
	for i := 0; i < count; i++ {
		if err := m.Call(0, n); err != nil {
			d.Fatalf(t, "call %d: %v", i, err)
		}
		var b strings.Builder
		ranges, asked := 0, false
		for actions := m.Ready(); len(actions) > 0; actions = m.Ready() {
			for _, a := range actions {
				b.WriteString(a.String() + "\n")
				r, ok := a.(RunRange)
				if !ok {
					continue
				}
				ranges++
				asked = asked || r.CommitPoints
				if err := m.RangeDone(r.Stage, r.Lo, r.Hi); err != nil {
					d.Fatalf(t, "call %d: %v", i, err)
				}
			}
		}
		if ranges > 1 {
			pieces++
		}
		if asked {
			commitPoints++
		}
		last = b.String()
	}
	return fmt.Sprintf("%d calls: %d in pieces, %d asking for commit points; the last:\n%s", count, pieces, commitPoints, last)
}

func scanKind(t *testing.T, d *datadriven.TestData) Kind {
	if !d.HasArg("kind") {
		return KindCheckpoint
	}
	var k string
	d.ScanArgs(t, "kind", &k)
	switch k {
	case "checkpoint":
		return KindCheckpoint
	case "savepoint":
		return KindSavepoint
	}
	d.Fatalf(t, "unknown kind %q", k)
	return 0
}

func formatActions(actions []Action, holds bool) string {
	var b strings.Builder
	for _, a := range actions {
		if _, ok := a.(Hold); ok && !holds {
			continue
		}
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "(no actions)\n"
	}
	return b.String()
}
