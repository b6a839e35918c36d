package tests

import (
	"encoding/json"
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
	// State files are shared (by content) between checkpoints: the victim
	// is one that only the newest references, so that the one before it
	// is intact.
	refs := map[string]int{}
	for _, m := range retained {
		for _, p := range stateFiles(t, m) {
			refs[p]++
		}
	}
	var files []string
	for _, p := range stateFiles(t, retained[len(retained)-1]) {
		if refs[p] == 1 {
			files = append(files, filepath.Join(root(), filepath.FromSlash(p)))
		}
	}
	if len(files) == 0 {
		t.Fatalf("no state file of %s that the checkpoints before it do not have", newest)
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

// stateFiles lists the keyed-state files a checkpoint's _metadata names,
// relative to the job's checkpoint root.
func stateFiles(t *testing.T, metadata string) []string {
	t.Helper()
	b, err := os.ReadFile(metadata)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tasks []struct {
			State []struct {
				Path   string
				Shared bool
			}
		}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Base(filepath.Dir(metadata))
	var out []string
	for _, task := range m.Tasks {
		for _, f := range task.State {
			if f.Shared {
				out = append(out, f.Path)
			} else {
				out = append(out, dir+"/"+f.Path)
			}
		}
	}
	return out
}
