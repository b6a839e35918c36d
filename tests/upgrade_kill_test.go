package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestUpgradeKill kills the job's `wstream deploy` process with SIGKILL at
// a random moment of a `wstream upgrade` (before, during or after the
// upgrade's savepoint, the switch, the new module's first checkpoint),
// then resumes the job with `deploy --resume -`. The upgrade command must
// notice that the process is gone and end at once, non-zero, with the
// resume command; the resumed job must finish, and everything its sink
// ever committed, kept by a reader that polls the output while the job
// runs, must be exactly the running counts of the input computed here:
// nothing twice (a part deleted and written again, a message republished
// under a new id), nothing missing. With the file sink and with the
// exactly-once JetStream sink. WSTREAM_UPGRADE_KILLS=N runs N kills per
// sink (default 2); WSTREAM_UPGRADE_KILL_SEED replays a printed seed.
func TestUpgradeKill(t *testing.T) {
	kills := 2
	if s := os.Getenv("WSTREAM_UPGRADE_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WSTREAM_UPGRADE_KILLS=%q: want a count ≥ 1", s)
		}
		kills = n
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("WSTREAM_UPGRADE_KILL_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("WSTREAM_UPGRADE_KILL_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with WSTREAM_UPGRADE_KILL_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	mod := module(t, "testops")
	for i := 0; i < kills; i++ {
		for _, sink := range []string{"file", "jetstream"} {
			// About 5 s of input: the upgrade compiles its module first,
			// and the kill may come up to 3 s after it starts.
			g := genSpec{count: 15000, keys: 40, words: 1, seed: rng.Int64N(1 << 30), rate: 3000}
			// Half the kills come at a moment of the whole upgrade (its
			// compilation, barrier, switch and probation take about a
			// second here); half just after its savepoint was written,
			// where the sinks commit on it and the new attempt starts.
			k := killAt{afterSavepoint: rng.IntN(2) == 0}
			if k.afterSavepoint {
				k.delay = time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
			} else {
				k.delay = time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
			}
			t.Run(fmt.Sprintf("%s-%d", sink, i), func(t *testing.T) {
				t.Logf("gen seed %d, kill %s", g.seed, k)
				dir := t.TempDir()
				want := g.runningCounts()
				if sink == "file" {
					out := filepath.Join(dir, "out")
					writePlan(t, dir, countPlan(g, 300, fileSink))
					r := keepParts(out)
					upgradeThenKill(t, dir, mod, k)
					got, errs := r.stop()
					for _, e := range errs {
						t.Error(e)
					}
					sameLines(t, "every part ever committed", got, want)
					return
				}
				url, js := startNATS(t)
				createStreams(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
				writePlan(t, dir, countPlan(g, 300, jetstreamSink(url, "OUT", "out")))
				upgradeThenKill(t, dir, mod, k)
				// The stream keeps every message published; outputLines
				// fails on a message id seen twice.
				got, _ := outputLines(t, js, "OUT")
				sameLines(t, "every message ever published", got, asMessages(want, "out"))
			})
		}
	}
}

// killAt is when a kill comes: delay after the upgrade started, or after
// its savepoint's metadata was written.
type killAt struct {
	afterSavepoint bool
	delay          time.Duration
}

func (k killAt) String() string {
	from := "the upgrade starts"
	if k.afterSavepoint {
		from = "the upgrade's savepoint is written"
	}
	return fmt.Sprintf("%s after %s", k.delay.Round(time.Millisecond), from)
}

// upgradeThenKill deploys plan.json in dir, upgrades the job to the same
// module and plan once a checkpoint completed, kills the deploy as k says,
// and resumes the job to its end.
func upgradeThenKill(t *testing.T, dir, mod string, k killAt) {
	data := filepath.Join(dir, "wstream-data")
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	d.until(t, "completed checkpoint", false, func() bool { _, id := newestCheckpoint(data); return id >= 1 })
	up := startEdge(t, dir, "upgrade", "--plan", "plan.json", job, mod)
	if k.afterSavepoint {
		d.until(t, "the upgrade's savepoint", true, func() bool {
			m, _ := filepath.Glob(filepath.Join(data, "savepoints", "savepoint-"+job+"-*", "chk-*", "_metadata"))
			return len(m) > 0 || up.exited()
		})
	}
	deadline := time.Now().Add(k.delay)
	for time.Now().Before(deadline) && !d.exited() {
		time.Sleep(time.Millisecond)
	}
	if d.exited() {
		// The job finished first: nothing to resume, and the upgrade
		// must have ended with it.
		t.Logf("the job ended before the kill (upgrade: %v)", up.exited())
		if code := d.code(); code != 0 {
			t.Fatalf("the deploy exited %d:\n%s", code, d.stderr.String())
		}
		up.wait(t, edgeWait)
		return
	}
	upDone := up.exited()
	d.kill(t)
	start := time.Now()
	code := up.wait(t, edgeWait)
	took := time.Since(start)
	switch {
	case upDone && code == 0:
		t.Logf("the upgrade ended before the kill: %s", strings.TrimSpace(up.stdout.String()))
	case code == 0:
		t.Logf("the upgrade answered as the process died: %s", strings.TrimSpace(up.stdout.String()))
	case upDone:
		t.Fatalf("the upgrade failed before the kill: exit %d\n%s", code, up.stderr.String())
	default:
		msg := up.stderr.String()
		if !strings.Contains(msg, "is gone") || !strings.Contains(msg, "wstream deploy --resume "+job+" --data wstream-data") {
			t.Errorf("the upgrade of a killed job exited %d without the resume command:\n%s", code, msg)
		}
		// It polls the process every 0.5 s; the bound leaves room for a
		// loaded machine, far below the 10-minute timeout.
		if took > 30*time.Second {
			t.Errorf("the upgrade took %s to notice the process was gone", took)
		}
		t.Logf("the upgrade noticed the kill in %s", took.Round(time.Millisecond))
	}
	r := startEdge(t, dir, "deploy", "--resume", "-")
	r.mustExit0(t, edgeWait)
}

// partKeeper keeps every committed part of a file sink's output directory
// that it ever saw, polling it, and notes a part that disappeared or
// changed: committed output is never deleted or rewritten.
type partKeeper struct {
	out  string
	mu   sync.Mutex
	seen map[string]string
	errs []string
	done chan struct{}
	wg   sync.WaitGroup
}

func keepParts(out string) *partKeeper {
	k := &partKeeper{out: out, seen: map[string]string{}, done: make(chan struct{})}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			k.poll()
			select {
			case <-k.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return k
}

func (k *partKeeper) poll() {
	parts, _ := filepath.Glob(filepath.Join(k.out, "part-*"))
	now := map[string]bool{}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // removed since the glob: noted below on the next poll
		}
		name := filepath.Base(p)
		now[name] = true
		if old, ok := k.seen[name]; ok && old != string(b) {
			k.errs = append(k.errs, fmt.Sprintf("committed part %s was rewritten", name))
		} else if !ok {
			k.seen[name] = string(b)
		}
	}
	for name := range k.seen {
		if !now[name] && !strings.Contains(strings.Join(k.errs, "\n"), name+" was deleted") {
			k.errs = append(k.errs, fmt.Sprintf("committed part %s was deleted", name))
		}
	}
}

// stop polls a last time and returns the lines of every part ever seen,
// sorted, and what went wrong.
func (k *partKeeper) stop() ([]string, []string) {
	close(k.done)
	k.wg.Wait()
	k.poll()
	var lines []string
	for _, b := range k.seen {
		for _, l := range strings.Split(b, "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
	}
	sort.Strings(lines)
	return lines, k.errs
}
