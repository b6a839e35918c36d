package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCorruptCheckpointFallsBack kills a checkpointing job, damages a state
// file of its newest checkpoint, and resumes it: the damage is detected by
// checksum, the error names the file, the job resumes from the previous
// retained checkpoint, and its committed output is still exact.
func TestCorruptCheckpointFallsBack(t *testing.T) {
	mod := module(t, "testops")
	refDir := t.TempDir()
	write := func(dir, plan string) {
		if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(rate int) string {
		return strings.Replace(chaosPlan(0, 0, rate, "aligned", 0), `"interval":200`, `"interval":100,"retain":3`, 1)
	}
	write(refDir, plan(0))
	if r := runCLI(t, refDir, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("reference: exit %d\n%s", r.code, r.stderr)
	}
	want := committed(t, filepath.Join(refDir, "out"))

	dir := t.TempDir()
	write(dir, plan(3000))
	root := func() string {
		m, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints"))
		if len(m) != 1 {
			return ""
		}
		return m[0]
	}
	complete := func() []string {
		r := root()
		if r == "" {
			return nil
		}
		m, _ := filepath.Glob(filepath.Join(r, "chk-*", "_metadata"))
		sort.Strings(m)
		return m
	}
	code, stderr := runUntil(t, dir, []string{"deploy", "--plan", "plan.json", mod}, func() bool { return len(complete()) >= 3 })
	if code != -1 {
		t.Fatalf("the job ended (exit %d) before three checkpoints were retained\n%s", code, stderr)
	}
	retained := complete()
	newest := filepath.Dir(retained[len(retained)-1])
	files, _ := filepath.Glob(filepath.Join(newest, "tasks", "*", "state", "*.sst"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(newest, "tasks", "*", "state", "MANIFEST-*"))
	}
	if len(files) == 0 {
		t.Fatalf("no state file in %s", newest)
	}
	victim := files[0]
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "deploy", "--resume", "-")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	rel, _ := filepath.Rel(root(), victim)
	if !strings.Contains(r.stderr, "skipping an unusable checkpoint") || !strings.Contains(r.stderr, rel) {
		t.Fatalf("the resume does not name the damaged file %s:\n%s", rel, r.stderr)
	}
	prev, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(filepath.Dir(retained[len(retained)-2])), "chk-"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("from checkpoint %d\n", prev); !strings.Contains(r.stderr, want) {
		t.Fatalf("did not resume from the previous checkpoint (%q):\n%s", want, r.stderr)
	}
	if got := committed(t, filepath.Join(dir, "out")); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("committed output after the fallback differs: %d lines vs %d; %s", len(got), len(want), firstDiff(got, want))
	}
}
