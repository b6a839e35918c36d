package tests

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// langModule builds example name of guest language lang.
func langModule(t *testing.T, lang, name string) string {
	t.Helper()
	p, err := testmod.Build(lang, name)
	if err != nil {
		t.Fatalf("building the %s %s example: %v", lang, name, err)
	}
	return p
}

// TestExamplesIdenticalAcrossLanguages deploys the wordcount and window
// examples of every guest language with their own plans and requires output
// byte-identical to the Go modules'.
func TestExamplesIdenticalAcrossLanguages(t *testing.T) {
	dir := t.TempDir()
	// The window plan reads input.tsv from the working directory: events
	// of 20 sensors, out of order by up to 3 s (the plan's watermark delay is
	// 2 s, so some are late), negative values and timestamps included.
	rng := rand.New(rand.NewSource(11))
	var in strings.Builder
	for i := 0; i < 3000; i++ {
		ts := int64(i)*10 - 3000 + rng.Int63n(3000)
		fmt.Fprintf(&in, "%d\tsensor-%d\t%d\n", ts, rng.Intn(20), rng.Intn(2001)-1000)
	}
	if err := os.WriteFile(filepath.Join(dir, "input.tsv"), []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, lang, example string) string {
		t.Helper()
		r := runCLI(t, dir, "deploy", "-q", "--data", filepath.Join(dir, "data-"+lang+"-"+example), langModule(t, lang, example))
		if r.code != 0 {
			t.Fatalf("%s %s: exit %d\n%s", lang, example, r.code, r.stderr)
		}
		// Sinks of parallelism 1 but several upstream subtasks interleave
		// their records: compare sorted lines.
		return strings.Join(sortedLines(r.stdout), "\n")
	}
	for _, example := range []string{"wordcount", "window"} {
		t.Run(example, func(t *testing.T) {
			want := run(t, "go", example)
			if strings.Count(want, "\n") < 100 {
				t.Fatalf("the Go %s printed only %q", example, want)
			}
			for _, lang := range testmod.Languages[1:] {
				t.Run(lang, func(t *testing.T) {
					if got := run(t, lang, example); got != want {
						g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
						t.Fatalf("%s %s: %d lines, Go: %d; %s", lang, example, len(g), len(w), firstDiff(g, w))
					}
				})
			}
		})
	}
}

// crossPlan is a wordcount over generated text, slow enough to be stopped
// with a savepoint in its middle, whose counts go to a transactional file
// sink.
const crossPlan = `{"name":"wordcount","maxParallelism":128,"parallelism":2,
 "checkpoint":{"interval":150},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":60000,"keys":500,"words":4,"seed":3,"rate":%d}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"file","parallelism":1,"config":{"path":"out"}}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

// TestSavepointAcrossLanguages stops each language's wordcount with a
// savepoint in the middle of its input and finishes the job with the Go
// wordcount (same vertex ids and state names): the counts equal an
// uninterrupted Go run's. The state is the host's, encoded the same way by
// every SDK (a count is an int64, 8 bytes little-endian), so it does not
// matter which language wrote it.
func TestSavepointAcrossLanguages(t *testing.T) {
	goMod := langModule(t, "go", "wordcount")
	ref := t.TempDir()
	if err := os.WriteFile(filepath.Join(ref, "plan.json"), []byte(fmt.Sprintf(crossPlan, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ref, "deploy", "-q", "--plan", "plan.json", goMod); r.code != 0 {
		t.Fatalf("reference: exit %d\n%s", r.code, r.stderr)
	}
	want := committed(t, filepath.Join(ref, "out"))
	if len(want) != 500 {
		t.Fatalf("the reference run counted %d words, want 500", len(want))
	}
	for _, lang := range testmod.Languages[1:] {
		t.Run(lang, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(fmt.Sprintf(crossPlan, 15000)), 0o644); err != nil {
				t.Fatal(err)
			}
			sp := stopAfterCheckpoints(t, dir, 3, "--plan", "plan.json", langModule(t, lang, "wordcount"))
			if got := committed(t, filepath.Join(dir, "out")); len(got) != 0 {
				t.Fatalf("the %s run emitted %d counts before its input ended", lang, len(got))
			}
			r := runCLI(t, dir, "deploy", "--plan", "plan.json", "-p", "3", "--from-savepoint", sp, goMod)
			if r.code != 0 {
				t.Fatalf("restoring the %s savepoint into the Go wordcount: exit %d\n%s", lang, r.code, r.stderr)
			}
			got := committed(t, filepath.Join(dir, "out"))
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%s → Go: %d counts, want %d; %s", lang, len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// stopAfterCheckpoints deploys in dir, waits until the job completed n
// checkpoints, stops it with a savepoint under dir/sp and returns the
// savepoint's directory.
func stopAfterCheckpoints(t *testing.T, dir string, n int, args ...string) string {
	t.Helper()
	return deployAndStopWhen(t, dir, filepath.Join(dir, "sp"), func(job string) bool {
		// Only the latest checkpoints are retained: read the newest id.
		done, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", job, "checkpoints", "chk-*", "_metadata"))
		newest := 0
		for _, p := range done {
			var c int
			if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(p)), "chk-%d", &c); err == nil {
				newest = max(newest, c)
			}
		}
		return newest >= n
	}, args...)
}
