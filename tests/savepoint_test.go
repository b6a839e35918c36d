package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func savepointPlan(rate int) string {
	return fmt.Sprintf(`{"name":"rescale","parallelism":1,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":30000,"keys":60,"rate":%d}},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"file","config":{"path":"out"}}],
 "edges":[
  {"from":"source","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, rate)
}

var jobLine = regexp.MustCompile(`job (\S+) running`)

// deployAndStop starts a deploy in dir, waits until it committed more than
// minParts part files, stops it with a savepoint under spDir and returns the
// savepoint's directory.
func deployAndStop(t *testing.T, dir, spDir string, minParts int, args ...string) string {
	t.Helper()
	return deployAndStopWhen(t, dir, spDir, func(string) bool { return len(partFiles(t, dir)) > minParts }, args...)
}

// deployAndStopWhen starts a deploy in dir, waits until ready(job id) holds,
// stops the job with a savepoint under spDir and returns the savepoint's
// directory.
func deployAndStopWhen(t *testing.T, dir, spDir string, ready func(job string) bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(wstreamBin(t), append([]string{"deploy"}, args...)...)
	cmd.Dir = dir
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	var id string
	for {
		if m := jobLine.FindStringSubmatch(stderr.String()); m != nil && ready(m[1]) {
			id = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the job ended before it could be stopped: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no progress:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	r := runCLI(t, dir, "stop", "--savepoint", spDir, id)
	if r.code != 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("stop: exit %d\n%s", r.code, r.stderr)
	}
	select {
	case err := <-done:
		// Stopped from outside: exit 3 (docs/cli.md).
		if code := exitCodeOf(err); code != 3 {
			t.Fatalf("the stopped job exited with %v, want exit 3\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the job did not end after stop")
	}
	if !strings.Contains(stderr.String(), "stopped") {
		t.Fatalf("no summary of a stopped job:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`: (\S+)\n`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("stop printed no savepoint directory: %q", r.stdout)
	}
	return m[1]
}

// TestSavepointRescale stops a keyed job with a savepoint, restores it at
// parallelism 4, stops it again, moves that savepoint elsewhere (deleting the
// original) and finishes it at parallelism 2: the committed output equals an
// uninterrupted run's.
func TestSavepointRescale(t *testing.T) {
	for _, format := range []string{"canonical", "native"} {
		t.Run(format, func(t *testing.T) { testSavepointRescale(t, format) })
	}
}

func testSavepointRescale(t *testing.T, format string) {
	mod := module(t, "testops")
	want := referenceOutput(t, mod, savepointPlan(0))

	dir := t.TempDir()
	writePlan(t, dir, savepointPlan(6000))
	sp1 := deployAndStop(t, dir, filepath.Join(dir, "sp"), 3, "--plan", "plan.json", "-p", "1", "--savepoint-format", format, mod)
	sp2 := deployAndStop(t, dir, filepath.Join(dir, "sp"), len(partFiles(t, dir))+6, "--plan", "plan.json", "-p", "4", "--from-savepoint", sp1, "--savepoint-format", format, mod)

	// The savepoint is self-contained: move it and delete the original.
	moved := filepath.Join(t.TempDir(), "moved")
	if out, err := exec.Command("cp", "-r", sp2, moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.RemoveAll(sp2); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "inspect", "--verify", moved)
	shows := "count/n" // a canonical savepoint's state names
	if format == "native" {
		shows = ".sst"
	}
	if r.code != 0 || !strings.Contains(r.stdout, "savepoint") || !strings.Contains(r.stdout, shows) || !strings.Contains(r.stdout, "verified") {
		t.Fatalf("inspect: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, dir, "inspect", "--verify", "-o", "json", moved)
	var insp struct {
		JobID    string `json:"jobId"`
		Kind     string `json:"kind"`
		Subtasks []any  `json:"subtasks"`
		Verified *bool  `json:"verified"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &insp); r.code != 0 || err != nil || insp.JobID == "" || insp.Kind != "savepoint" || len(insp.Subtasks) == 0 || insp.Verified == nil || !*insp.Verified {
		t.Fatalf("inspect -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = runCLI(t, dir, "deploy", "--plan", "plan.json", "-p", "2", "--from-savepoint", moved, mod)
	if r.code != 0 {
		t.Fatalf("restore at parallelism 2: exit %d\n%s", r.code, r.stderr)
	}
	got := committed(t, filepath.Join(dir, "out"))
	if !bytes.Equal([]byte(strings.Join(got, "\n")), []byte(strings.Join(want, "\n"))) {
		t.Fatalf("output after 1→4→2 differs from the uninterrupted run: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
}

// TestSavepointErrors checks that a savepoint that does not fit is refused
// with a clear error before anything runs.
func TestSavepointErrors(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	writePlan(t, dir, savepointPlan(6000))
	sp := deployAndStop(t, dir, filepath.Join(dir, "sp"), 2, "--plan", "plan.json", mod)
	other := strings.Replace(savepointPlan(6000), `"id":"count"`, `"id":"counter"`, 1)
	other = strings.Replace(other, `"to":"count"`, `"to":"counter"`, 1)
	other = strings.Replace(other, `"from":"count"`, `"from":"counter"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--plan", "plan.json", "--max-parallelism", "64", "--from-savepoint", sp}, "max parallelism"},
		{[]string{"--plan", "other.json", "--from-savepoint", sp}, `vertex "count"`},
		{[]string{"--plan", "plan.json", "--from-savepoint", filepath.Join(dir, "nope")}, "no such savepoint"},
	}
	for _, c := range cases {
		r := runCLI(t, dir, append(append([]string{"deploy"}, c.args...), mod)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("deploy %v: exit %d, stderr %q; want an error mentioning %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// A damaged savepoint file is named.
	files, _ := filepath.Glob(filepath.Join(sp, "chk-*", "tasks", "*", "state", "canonical.zst"))
	if len(files) == 0 {
		t.Fatal("no canonical state file in the savepoint")
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)/2] ^= 0x55
	_ = os.WriteFile(files[0], b, 0o644)
	r := runCLI(t, dir, "deploy", "--plan", "plan.json", "--from-savepoint", sp, mod)
	if r.code == 0 || !strings.Contains(r.stderr, "canonical.zst") {
		t.Fatalf("a damaged savepoint: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRestoreRetainedCheckpointRescaled kills a keyed job at parallelism 2
// and starts it again from its retained checkpoint at parallelism 3: the
// checkpoint's native state files are redistributed by key group, and the
// committed output equals an uninterrupted run's.
func TestRestoreRetainedCheckpointRescaled(t *testing.T) {
	mod := module(t, "testops")
	want := referenceOutput(t, mod, savepointPlan(0))

	dir := t.TempDir()
	writePlan(t, dir, savepointPlan(6000))
	code, stderr := runUntil(t, dir, []string{"deploy", "--plan", "plan.json", "-p", "2", mod}, func() bool { return len(partFiles(t, dir)) >= 8 })
	if code != -1 {
		t.Fatalf("the job ended (exit %d) before it was killed\n%s", code, stderr)
	}
	roots, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints"))
	if len(roots) != 1 {
		t.Fatalf("checkpoint roots %v", roots)
	}
	r := runCLI(t, dir, "deploy", "--plan", "plan.json", "-p", "3", "--from-checkpoint", roots[0], mod)
	if r.code != 0 {
		t.Fatalf("restore at parallelism 3: exit %d\n%s", r.code, r.stderr)
	}
	got := committed(t, filepath.Join(dir, "out"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output after 2→3 from a checkpoint differs: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
}

// exitCodeOf is the exit status of a command that Wait returned err for (0
// for nil, -1 when it did not exit).
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
