package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckpointsInObjectStore runs the chaos job (failures injected, a
// restart strategy) with its checkpoints in a JetStream object store of the
// embedded server, then resumes a killed run from them: the committed output
// is exactly the failure-free run's, and no checkpoint directory was ever
// written on the filesystem.
func TestCheckpointsInObjectStore(t *testing.T) {
	mod := module(t, "testops")
	want := referenceOutput(t, mod, chaosPlanSlow(0, 0, 0, "aligned", 0, 0, 12000, false))

	dir := t.TempDir()
	writePlan(t, dir, chaosPlanSlow(0.0004, 0, 8000, "aligned", 0, 0, 12000, true))
	args := []string{"deploy", "--plan", "plan.json", "--checkpoint-storage", "nats-obj://wstream_ckpt/chaos", mod}
	r := runCLI(t, dir, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if attempts := jobAttempt(t, filepath.Join(dir, "wstream-data")); attempts < 1 {
		t.Fatalf("no failure was injected:\n%s", r.stderr)
	}
	got := committed(t, filepath.Join(dir, "out"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output differs from the failure-free run: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
	dirs, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "chk-*"))
	shared, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "shared", "*"))
	if len(dirs)+len(shared) > 0 {
		t.Fatalf("checkpoint files on the filesystem: %v %v", dirs, shared)
	}
	if r := runCLI(t, dir, "checkpoints"); r.code != 0 || !strings.Contains(r.stdout, "completed") {
		t.Fatalf("checkpoints: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestResumeFromObjectStore kills a job (SIGKILL) after checkpoints landed
// in the object store and resumes it: the restore reads them from the
// object store, and the output is exactly the failure-free run's.
func TestResumeFromObjectStore(t *testing.T) {
	mod := module(t, "testops")
	want := referenceOutput(t, mod, chaosPlanSlow(0, 0, 0, "aligned", 0, 0, 12000, false))

	dir := t.TempDir()
	writePlan(t, dir, chaosPlanSlow(0, 0, 4000, "aligned", 0, 0, 12000, false))
	completed := func() int {
		hist, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "history.jsonl"))
		n := 0
		for _, h := range hist {
			b, _ := os.ReadFile(h)
			n += strings.Count(string(b), `"completed"`)
		}
		return n
	}
	code, stderr := runUntil(t, dir, []string{"deploy", "--plan", "plan.json", "--checkpoint-storage", "nats-obj://ckpt", mod},
		func() bool { return completed() >= 3 })
	if code != -1 {
		t.Fatalf("the job ended (exit %d) before it could be killed:\n%s", code, stderr)
	}
	r := runCLI(t, dir, "deploy", "--resume", "-")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	// Restored, not started over: the source goes on from its offset.
	var in int
	if i := strings.Index(r.stderr, "records in: "); i < 0 {
		t.Fatalf("no summary:\n%s", r.stderr)
	} else if _, err := fmt.Sscanf(r.stderr[i:], "records in: %d", &in); err != nil || in <= 0 || in >= 12000 {
		t.Fatalf("the resumed run read %d records (%v), want fewer than 12000: it did not restore\n%s", in, err, r.stderr)
	}
	if !strings.Contains(r.stderr, "nats-obj://ckpt") {
		t.Errorf("resume did not say where its checkpoints are:\n%s", r.stderr)
	}
	got := committed(t, filepath.Join(dir, "out"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output after kill and resume differs from the failure-free run: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
	if dirs, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints", "chk-*")); len(dirs) > 0 {
		t.Fatalf("checkpoint directories on the filesystem: %v", dirs)
	}
}

// TestSavepointInObjectStore stops a job with a savepoint written to the
// object store and restores it at another parallelism from there.
func TestSavepointInObjectStore(t *testing.T) {
	mod := module(t, "testops")
	want := referenceOutput(t, mod, savepointPlan(0))

	dir := t.TempDir()
	writePlan(t, dir, savepointPlan(6000))
	sp := deployAndStop(t, dir, "nats-obj://savepoints", 3, "--plan", "plan.json", "-p", "1", "--checkpoint-storage", "nats-obj://ckpt", mod)
	if !strings.HasPrefix(sp, "nats-obj://savepoints/savepoint-") {
		t.Fatalf("savepoint location %q", sp)
	}
	r := runCLI(t, dir, "deploy", "--plan", "plan.json", "-p", "3", "--from-savepoint", sp, mod)
	if r.code != 0 {
		t.Fatalf("restore from %s at parallelism 3: exit %d\n%s", sp, r.code, r.stderr)
	}
	got := committed(t, filepath.Join(dir, "out"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output after the object-store savepoint differs from the uninterrupted run: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
	if dirs, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "savepoints", "*")); len(dirs) > 0 {
		t.Fatalf("savepoint directories on the filesystem: %v", dirs)
	}

	// inspect reads the savepoint through a server on the data directory
	// that holds the object store.
	data := filepath.Join(dir, "wstream-data")
	srv := startEdge(t, dir, "server", "--tenants=false", "--data", data, "--listen", "127.0.0.1:0")
	srv.until(t, "server URL", false, func() bool {
		_, err := os.Stat(filepath.Join(data, "nats.url"))
		return err == nil
	})
	r = runCLI(t, dir, "inspect", "--verify", "--data", data, sp)
	if r.code != 0 || !strings.Contains(r.stdout, "savepoint") || !strings.Contains(r.stdout, "key groups") {
		t.Fatalf("inspect %s: exit %d\n%s\n%s", sp, r.code, r.stdout, r.stderr)
	}
	if dirs, _ := filepath.Glob(filepath.Join(dir, "nats-obj*")); len(dirs) > 0 {
		t.Fatalf("inspect created %v", dirs)
	}
}

// TestInspectMissing: inspecting a directory that does not exist says so,
// and creates nothing.
func TestInspectMissing(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, dir, "inspect", "no-such-savepoint")
	if r.code == 0 || !strings.Contains(r.stderr, "no-such-savepoint") || !strings.Contains(r.stderr, "no such file or directory") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "no-such-savepoint")); err == nil {
		t.Fatal("inspect created the directory it was asked to read")
	}
}
