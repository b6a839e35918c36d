package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chaosPlan is a keyed job whose output shows any loss or repetition: a
// running count per key, written by the two-phase file sink. The chaos
// operator traps and kills its subtask at random records.
func chaosPlan(trap, exit float64, rate int, mode string, alignedTimeout int) string {
	return chaosPlanSlow(trap, exit, rate, mode, alignedTimeout, 0, 24000, trap > 0)
}

// chaosPlanSlow is chaosPlan with a count that stalls 5 ms every slowEvery
// records (0: never), backing up its input channels (unaligned checkpoints
// are then taken while senders are blocked), and n records. With timed,
// the chaos operator also fails at a random time 300–500 ms after it opens,
// so that every run has a steady number of failures.
func chaosPlanSlow(trap, exit float64, rate int, mode string, alignedTimeout, slowEvery, n int, timed bool) string {
	failAfter := "[0,0]"
	if timed {
		failAfter = "[300,500]"
	}
	stall := 0
	if rate > 0 {
		// Stalls make one input of the count lag behind the other now and
		// then, so alignments take time (and time out).
		stall = 40
	}
	cp := fmt.Sprintf(`{"interval":200,"mode":%q`, mode)
	if alignedTimeout > 0 {
		cp += fmt.Sprintf(`,"alignedTimeout":%d`, alignedTimeout)
	}
	cp += "}"
	return fmt.Sprintf(`{"name":"chaos","parallelism":2,
 "checkpoint":%s,
 "restart":{"strategy":"fixed-delay","attempts":1000,"delay":10},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":60,"rate":%d}},
  {"id":"chaos","kind":"operator","operator":"chaos","config":{"trap":%g,"exit":%g,"seed":7,"stallEvery":400,"stallMs":%d,
   "failAfterMs":%s,"exitShare":0.3}},
  {"id":"count","kind":"operator","operator":"runcount","config":{"stallEvery":%d,"stallMs":5}},
  {"id":"sink","kind":"sink","connector":"file","config":{"path":"out"}}],
 "edges":[
  {"from":"source","to":"chaos"},
  {"from":"chaos","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, cp, n, rate, trap, exit, stall, failAfter, slowEvery)
}

// committed returns the sorted lines of every committed part file in dir.
func committed(t *testing.T, dir string) []string {
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

// jobAttempt reads the attempt number the coordinator recorded for the
// only job in dataDir: every attempt after the first followed a failure.
func jobAttempt(t *testing.T, dataDir string) int {
	t.Helper()
	recs, err := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "job.json"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("job records in %s: %v %v", dataDir, recs, err)
	}
	b, err := os.ReadFile(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Attempt int    `json:"attempt"`
		State   string `json:"state"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.State != "finished" {
		t.Fatalf("job ended %s", r.State)
	}
	return r.Attempt
}

// TestChaos runs the keyed job under injected failures — guest traps and
// dying subtasks at random records, and the whole process killed with
// SIGKILL at random points and resumed — and requires the committed output
// to equal a failure-free run exactly (at-least-once: nothing lost).
func TestChaos(t *testing.T) {
	mod := module(t, "testops")
	seed := time.Now().UnixNano()
	if s := os.Getenv("WSTREAM_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set WSTREAM_CHAOS_SEED to repeat the kill points)", seed)
	rng := rand.New(rand.NewSource(seed))

	refs := map[int][]string{}
	reference := func(n int) []string {
		if want, ok := refs[n]; ok {
			return want
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(chaosPlanSlow(0, 0, 0, "aligned", 0, 0, n, false)), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := runCLI(t, dir, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
			t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
		}
		want := committed(t, filepath.Join(dir, "out"))
		if len(want) != n {
			t.Fatalf("reference run committed %d lines, want %d", len(want), n)
		}
		refs[n] = want
		return want
	}

	for _, m := range []struct {
		name, mode     string
		alignedTimeout int
		// rate of the source (0: as fast as it goes) and how often the
		// count stalls (0: never).
		rate, slowEvery int
		// records of the run
		n int
		// failures per record besides the timed ones: trap, exit
		trap, exit float64
	}{
		{"aligned", "aligned", 0, 4000, 0, 24000, 0.0001, 0.00005},
		{"unaligned", "unaligned", 0, 4000, 0, 24000, 0.0001, 0.00005},
		{"unaligned-backpressure", "unaligned", 0, 0, 40, 64000, 0, 0},
		{"aligned-timeout", "aligned", 1, 4000, 0, 24000, 0.0001, 0.00005},
		{"at-least-once", "at-least-once", 0, 4000, 0, 24000, 0.0001, 0.00005},
	} {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			want := reference(m.n)
			// Random failures per record, and one timed failure 300–500 ms
			// after every start of the chaos operator.
			plan := chaosPlanSlow(m.trap, m.exit, m.rate, m.mode, m.alignedTimeout, m.slowEvery, m.n, true)
			if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
				t.Fatal(err)
			}
			kills := 0
			args := []string{"deploy", "--plan", "plan.json", mod}
			for {
				// Kill the process at a random point of progress, measured
				// in committed part files, up to three times.
				killAt := -1
				if kills < 3 {
					killAt = len(partFiles(t, dir)) + 2 + rng.Intn(8)
				}
				code, stderr := runUntil(t, dir, args, func() bool {
					return killAt >= 0 && len(partFiles(t, dir)) >= killAt
				})
				if code == -1 {
					kills++
					args = []string{"deploy", "--resume", "-"}
					continue
				}
				if code != 0 {
					t.Fatalf("exit %d\n%s", code, stderr)
				}
				break
			}
			attempts := jobAttempt(t, filepath.Join(dir, "wstream-data"))
			t.Logf("%d process kills, %d attempts", kills, attempts)
			if kills < 1 {
				t.Fatal("the process was never killed")
			}
			if attempts < 10 {
				t.Fatalf("only %d failures were injected, want at least 10", attempts)
			}
			if m.alignedTimeout > 0 {
				hist, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "history.jsonl"))
				b, err := os.ReadFile(hist[0])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(`"unaligned":true`)) {
					t.Fatalf("no aligned checkpoint switched to unaligned after its %dms timeout", m.alignedTimeout)
				}
			}
			if m.slowEvery > 0 {
				hist, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "history.jsonl"))
				b, err := os.ReadFile(hist[0])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(`"inFlightBytes":`)) || bytes.Count(b, []byte(`"inFlightBytes":0,`)) == bytes.Count(b, []byte(`"status":"completed"`)) {
					t.Fatal("no unaligned checkpoint under backpressure persisted in-flight data")
				}
			}
			got := committed(t, filepath.Join(dir, "out"))
			if m.mode == "at-least-once" {
				have := map[string]bool{}
				for _, l := range got {
					have[l] = true
				}
				for _, l := range want {
					if !have[l] {
						t.Fatalf("at-least-once lost %q (%d lines committed)", l, len(got))
					}
				}
				return
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("committed output differs from the failure-free run: %d lines vs %d; first difference %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func partFiles(t *testing.T, dir string) []string {
	p, _ := filepath.Glob(filepath.Join(dir, "out", "part-*"))
	return p
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("at line %d: %q vs %q", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("after %d common lines", min(len(a), len(b)))
}

// runUntil runs wstream in dir; when kill reports true (polled) it kills the
// process with SIGKILL and returns -1.
func runUntil(t *testing.T, dir string, args []string, kill func() bool) (int, string) {
	t.Helper()
	cmd := exec.Command(wstreamBin(t), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(3 * time.Minute)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				return 0, stderr.String()
			}
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), stderr.String()
			}
			t.Fatal(err)
		case <-poll.C:
			if kill() {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done
				return -1, stderr.String()
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("wstream %v did not finish within 3 minutes (%s)\n%s", args, progressOf(dir), stderr.String())
		}
	}
}

// progressOf summarizes the job records under dir: attempts and checkpoint
// outcomes tell a livelock (failing before any checkpoint completes) from a
// hang.
func progressOf(dir string) string {
	var out []string
	recs, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "job.json"))
	for _, rec := range recs {
		var r struct {
			Attempt int    `json:"attempt"`
			State   string `json:"state"`
		}
		if b, err := os.ReadFile(rec); err == nil {
			_ = json.Unmarshal(b, &r)
		}
		h, _ := os.ReadFile(filepath.Join(filepath.Dir(rec), "checkpoints", "history.jsonl"))
		out = append(out, fmt.Sprintf("%s: %s, attempt %d, %d checkpoints completed, %d aborted",
			filepath.Base(filepath.Dir(rec)), r.State, r.Attempt,
			bytes.Count(h, []byte(`"status":"completed"`)), bytes.Count(h, []byte(`"status":"aborted"`))))
	}
	return strings.Join(out, "; ")
}
