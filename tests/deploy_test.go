package tests

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestWordcountParallelism runs the Go wordcount at parallelism 1, 2 and 4
// over a text file and compares every run with counts computed here.
func TestWordcountParallelism(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(7))
	want := map[string]int{}
	var text strings.Builder
	for line := 0; line < 3000; line++ {
		n := 1 + rng.Intn(8)
		for i := 0; i < n; i++ {
			w := fmt.Sprintf("word%d", rng.Intn(400))
			if i > 0 {
				text.WriteString([]string{" ", "  ", "\t"}[rng.Intn(3)])
			}
			text.WriteString(w)
			want[w]++
		}
		text.WriteByte('\n')
	}
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var wantLines []string
	for w, n := range want {
		wantLines = append(wantLines, fmt.Sprintf("%s\t%d", w, n))
	}
	sort.Strings(wantLines)

	for _, p := range []string{"1", "2", "4"} {
		t.Run("p="+p, func(t *testing.T) {
			r := runCLI(t, dir, "deploy", "--data", filepath.Join(dir, "data-"+p), "-p", p,
				"--source", "file:path="+in, mod)
			if r.code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
			}
			got := sortedLines(r.stdout)
			if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
				t.Fatalf("p=%s: %d lines, want %d; first got %q, first want %q", p, len(got), len(wantLines), first(got), first(wantLines))
			}
			if !strings.Contains(r.stderr, "records in: 3000,") || !strings.Contains(r.stderr, fmt.Sprintf("records out: %d", len(want))) {
				t.Fatalf("summary missing or wrong:\n%s", r.stderr)
			}
		})
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestWordcountDefaultPlan runs the module exactly as the README's quickstart
// does: its own plan, gen source, stdout sink.
func TestWordcountDefaultPlan(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	r := runCLI(t, dir, "deploy", mod)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	lines := sortedLines(r.stdout)
	if len(lines) == 0 {
		t.Fatal("no output")
	}
	total := 0
	for _, l := range lines {
		var w string
		var n int
		if _, err := fmt.Sscanf(strings.Replace(l, "\t", " ", 1), "%s %d", &w, &n); err != nil || !strings.HasPrefix(w, "w") || n < 1 {
			t.Fatalf("bad output line %q", l)
		}
		total += n
	}
	if !strings.Contains(r.stderr, "finished") {
		t.Fatalf("no summary:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "wstream-data")); err != nil {
		t.Fatalf("default data directory not created: %v", err)
	}
	if total == 0 {
		t.Fatal("counts sum to zero")
	}
}

// TestWindowOutOfOrder feeds out-of-order events with a watermark delay and
// checks the windows and the late record.
func TestWindowOutOfOrder(t *testing.T) {
	mod := module(t, "window")
	dir := t.TempDir()
	// ts, key, value. Window size 1000 ms, watermark delay 2000 ms.
	events := []string{
		"100\ts1\t1",
		"1500\ts1\t2",
		"900\ts1\t4", // out of order, within the delay
		"2100\ts2\t8",
		"1200\ts2\t16",
		"5000\ts1\t32",  // watermark → 2999: windows up to [2000,3000) close
		"400\ts1\t64",   // late: window [0,1000) is closed
		"2500\ts1\t128", // late: window [2000,3000) closed at watermark 2999
		"7000\ts2\t256",
	}
	in := filepath.Join(dir, "in.tsv")
	if err := os.WriteFile(in, []byte(strings.Join(events, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One record per source batch, so a watermark follows every record and
	// lateness does not depend on batching. Late records go to a second sink
	// through the window's "late" output.
	plan := `{"name":"window","parallelism":2,
	  "vertices":[
	    {"id":"source","kind":"source","connector":"file","parallelism":1,
	     "config":{"path":"in.tsv","format":"tsv","watermarkDelay":2000,"batch":1}},
	    {"id":"window","kind":"operator","operator":"window","config":{"size":1000},"outputs":["main","late"]},
	    {"id":"out","kind":"sink","connector":"stdout","parallelism":1},
	    {"id":"late","kind":"sink","connector":"file","parallelism":1,"config":{"path":"late.txt"}}],
	  "edges":[
	    {"from":"source","to":"window","partition":"key"},
	    {"from":"window","to":"out","partition":"rebalance"},
	    {"from":"window","to":"late","partition":"rebalance","output":"late"}]}`
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "deploy", "--plan", "plan.json", mod)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	want := []string{
		"s1\t0,1000,5",
		"s1\t1000,2000,2",
		"s1\t5000,6000,32",
		"s2\t1000,2000,16",
		"s2\t2000,3000,8",
		"s2\t7000,8000,256",
	}
	got := sortedLines(r.stdout)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("windows:\n%s\nwant:\n%s\nstderr:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), r.stderr)
	}
	late, err := os.ReadFile(filepath.Join(dir, "late.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sortedLines(string(late)), ","); got != "s1\t128,s1\t64" {
		t.Fatalf("late records = %q, want s1 64 and s1 128", got)
	}
}

// TestSourceOverrideWithCommas checks the documented flag syntax: commas
// separate connector settings within one --source value.
func TestSourceOverrideWithCommas(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	r := runCLI(t, dir, "deploy", "--source", "gen:count=500,keys=5,words=2,seed=3", mod)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := sortedLines(r.stdout)
	total := 0
	for _, l := range lines {
		var w string
		var n int
		if _, err := fmt.Sscanf(strings.Replace(l, "\t", " ", 1), "%s %d", &w, &n); err != nil {
			t.Fatalf("bad line %q", l)
		}
		total += n
	}
	if len(lines) > 5 || total != 1000 {
		t.Fatalf("%d words summing to %d; want at most 5 words summing to 1000 (500 records × 2)", len(lines), total)
	}
}
