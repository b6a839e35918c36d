package tests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDeployWorkers runs the wordcount with `deploy --workers N`: the
// subtasks spread over N in-process workers exchange data through JetStream,
// and the output is the same as with one worker.
func TestDeployWorkers(t *testing.T) {
	mod := module(t, "wordcount")
	var want []string
	for _, n := range []string{"1", "2", "3"} {
		r := runCLI(t, t.TempDir(), "deploy", "-q", "-p", "3", "--source", "gen:count=20000,keys=500,words=3", "--workers", n, mod)
		if r.code != 0 {
			t.Fatalf("--workers %s: exit %d\n%s", n, r.code, r.stderr)
		}
		got := sortedLines(r.stdout)
		if len(got) != 500 {
			t.Fatalf("--workers %s: %d counts, want 500", n, len(got))
		}
		if n == "1" {
			want = got
		} else if !slices.Equal(got, want) {
			t.Fatalf("--workers %s: output differs from one worker's", n)
		}
	}
	r := runCLI(t, t.TempDir(), "deploy", "--workers", "0", mod)
	if r.code != 2 || !strings.Contains(r.stderr, "--workers") {
		t.Fatalf("--workers 0: exit %d, %q", r.code, r.stderr)
	}
}

// TestDeployWorkersChaos runs the keyed chaos job on two workers with
// aligned checkpoints and injected failures: the committed output equals a
// failure-free run's.
func TestDeployWorkersChaos(t *testing.T) {
	mod := module(t, "testops")
	ref := t.TempDir()
	if err := os.WriteFile(filepath.Join(ref, "plan.json"), []byte(chaosPlanSlow(0, 0, 0, "aligned", 0, 0, 8000, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ref, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}
	want := committed(t, filepath.Join(ref, "out"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(chaosPlanSlow(0, 0, 8000, "aligned", 0, 0, 8000, true)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "deploy", "-q", "--plan", "plan.json", "--workers", "2", mod)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := committed(t, filepath.Join(dir, "out")); !slices.Equal(got, want) {
		t.Fatalf("committed %d lines, want %d identical to a run without failures", len(got), len(want))
	}
	if a := jobAttempt(t, filepath.Join(dir, "wstream-data")); a == 0 {
		t.Fatal("the job never failed: the test proves nothing")
	}
}
