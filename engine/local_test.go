package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/transport"
)

// localPlan is a keyed job whose output shows any loss or repetition (a
// running count per key through the two-phase file sink into out). With
// chaos, the chaos operator traps 600–800 ms after every start, so each
// attempt fails once until what is left of the input takes less.
func localPlan(out string, chaos, localRecovery bool) string {
	failAfter := "[0,0]"
	if chaos {
		failAfter = "[600,800]"
	}
	return fmt.Sprintf(`{"name":"local","parallelism":2,
 "checkpoint":{"interval":100,"retain":1,"localRecovery":%t},
 "restart":{"strategy":"fixed-delay","attempts":100,"delay":10},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":6000,"keys":60,"rate":4000}},
  {"id":"chaos","kind":"operator","operator":"chaos","config":{"failAfterMs":%s,"exitShare":0}},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"file","config":{"path":%q}}],
 "edges":[
  {"from":"source","to":"chaos"},
  {"from":"chaos","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, localRecovery, failAfter, out)
}

// committedLines returns the sorted lines of the committed part files in dir.
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	parts, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
	}
	sort.Strings(lines)
	return lines
}

// TestLocalRecovery restarts a keyed job after failures with local
// recovery on: its output equals a failure-free run, and its keyed state
// came back from the worker's local snapshots, not from checkpoint storage.
func TestLocalRecovery(t *testing.T) {
	e, _ := startEngine(t, host.Config{})
	w := e.Workers()[0]

	refOut := filepath.Join(t.TempDir(), "out")
	r := run(t, e, prepare(t, e, "testops", localPlan(refOut, false, false)))
	if r.State != transport.JobFinished || r.Restarts != 0 {
		t.Fatalf("reference run: %s after %d restarts: %s", r.State, r.Restarts, r.Error)
	}
	want := committedLines(t, refOut)
	if len(want) != 6000 {
		t.Fatalf("reference run committed %d lines, want 6000", len(want))
	}

	out := filepath.Join(t.TempDir(), "out")
	r = run(t, e, prepare(t, e, "testops", localPlan(out, true, true)))
	if r.State != transport.JobFinished {
		t.Fatalf("job %s: %s", r.State, r.Error)
	}
	if r.Restarts < 1 {
		t.Fatal("the job never restarted")
	}
	got := committedLines(t, out)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("committed output differs from the failure-free run: %d lines vs %d", len(got), len(want))
	}
	if n := w.RestoreBytesRead(); n != 0 {
		t.Fatalf("restores read %d bytes of keyed state from checkpoint storage, want 0", n)
	}
	if w.LocalRestoreBytes() == 0 {
		t.Fatal("no keyed state was restored from a local snapshot")
	}
	t.Logf("%d restarts, %d bytes restored locally", r.Restarts, w.LocalRestoreBytes())
}
