package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUnboundedJobStopsOnInterrupt runs an unbounded job that does not
// checkpoint, waits until its output flows, interrupts it as Ctrl-C would,
// and expects it canceled: exit 130 (128 + SIGINT), a summary, and output
// that ends with whole lines.
func TestUnboundedJobStopsOnInterrupt(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	plan := `{"name":"endless","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":0,"rate":5000,"words":2}},
 {"id":"upper","kind":"operator","operator":"upper"},
 {"id":"out","kind":"sink","connector":"stdout"}],
 "edges":[{"from":"src","to":"upper"},{"from":"upper","to":"out"}]}`
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wstreamBin(t), "deploy", "--plan", "plan.json", mod)
	cmd.Dir = dir
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(stdout.String(), "\n") < 100 {
		select {
		case err := <-done:
			t.Fatalf("unbounded job exited by itself: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no output after a minute:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Fatalf("interrupted job exited with %v, want exit status 130\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("job did not stop within a minute of SIGINT:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "canceled") || !strings.Contains(stderr.String(), "records in:") {
		t.Fatalf("no summary of a cancelled job:\n%s", stderr.String())
	}
	out := stdout.String()
	if !strings.HasSuffix(out, "\n") {
		t.Fatal("output ends in a partial line")
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// key<TAB>value: gen's key is the first word, upper changes the value.
		k, v, ok := strings.Cut(l, "\t")
		if !ok || v != strings.ToUpper(v) || !strings.HasPrefix(v, strings.ToUpper(k)+" ") {
			t.Fatalf("unexpected line %q", l)
		}
	}
}

// TestInterruptSuspends interrupts a checkpointed keyed job (SIGTERM, as a
// service manager stops it) while it runs at full speed: it stops with a
// savepoint and exits 3, and deploy --resume continues it to the end. The
// committed output is checked against what exactly-once means for a
// running count, computed here from the input: every key's counts are 1..n
// once each, and the counts add up to the records of the input.
func TestInterruptSuspends(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	const n = 200000
	writePlan(t, dir, fmt.Sprintf(`{"name":"suspend","parallelism":2,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":60,"rate":40000}},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"file","config":{"path":"out"}}],
 "edges":[
  {"from":"source","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, n))
	p := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	p.until(t, "committed output", false, func() bool { return len(partFiles(t, dir)) >= 2 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 3 || !strings.Contains(p.stderr.String(), "suspended with a savepoint") {
		t.Fatalf("deploy after SIGTERM: exit %d, want 3 (suspended)\n%s", code, p.stderr.String())
	}
	m := regexp.MustCompile(`job (\S+) suspended`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no job id in\n%s", p.stderr.String())
	}
	// Its checkpoint history, as JSON: checkpoints, then the savepoint.
	r := runCLI(t, dir, "checkpoints", "-o", "json", m[1])
	var hist struct {
		Job     string `json:"jobId"`
		History []struct {
			Kind   string `json:"kind"`
			Status string `json:"status"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &hist); r.code != 0 || err != nil || hist.Job != m[1] || len(hist.History) < 2 {
		t.Fatalf("checkpoints -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if last := hist.History[len(hist.History)-1]; last.Status != "completed" {
		t.Fatalf("the suspension's savepoint is %+v", last)
	}
	if r := runCLI(t, dir, "checkpoints", "-o", "yaml", m[1]); r.code != 2 || !strings.Contains(r.stderr, "table and json") {
		t.Fatalf("checkpoints -o yaml: exit %d\n%s", r.code, r.stderr)
	}
	before := len(committed(t, filepath.Join(dir, "out")))
	if before == 0 || before >= n {
		t.Fatalf("%d of %d records committed at the suspension: the job was not interrupted mid-way", before, n)
	}
	r = runCLI(t, dir, "deploy", "--resume", "-")
	if r.code != 0 || !strings.Contains(r.stderr, "suspended with") {
		t.Fatalf("deploy --resume: exit %d\n%s", r.code, r.stderr)
	}
	counts := map[string][]int{}
	for _, l := range committed(t, filepath.Join(dir, "out")) {
		k, v, ok := strings.Cut(l, "\t")
		c, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("line %q", l)
		}
		counts[k] = append(counts[k], c)
	}
	total := 0
	for k, cs := range counts {
		sort.Ints(cs)
		for i, c := range cs {
			if c != i+1 {
				t.Fatalf("key %s: counts %v… are not 1..%d once each: a record was lost or counted twice across the suspension", k, cs[:min(len(cs), i+3)], len(cs))
			}
		}
		total += len(cs)
	}
	if total != n {
		t.Fatalf("%d records counted, want %d", total, n)
	}
	// A suspended job resumes once.
	if r := runCLI(t, dir, "deploy", "--resume", "-"); r.code == 0 {
		t.Fatalf("a second --resume ran:\n%s", r.stderr)
	}
}

// TestResumeHintAndStaleURL: the resume command a suspended deploy prints
// keeps its --data; and after a deploy was killed (SIGKILL, its nats.url
// left behind) list says what it tried and what to do.
func TestResumeHintAndStaleURL(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	writePlan(t, dir, endlessPlan)
	started := func(p *edgeProc) string {
		var id string
		re := regexp.MustCompile(`job (\S+) running`)
		clusterPoll(t, time.Minute, "deploy did not start its job", func() bool {
			if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
				id = m[1]
				return true
			}
			return p.exited()
		})
		if id == "" {
			t.Fatalf("deploy exited: %s", p.stderr.String())
		}
		return id
	}
	p := startEdge(t, dir, "deploy", "--data", "d2", "--plan", "plan.json", mod)
	id := started(p)
	// A checkpoint first: the suspension is a savepoint after one.
	clusterPoll(t, time.Minute, "no checkpoint", func() bool {
		ids, _ := filepath.Glob(filepath.Join(dir, "d2", "jobs", id, "checkpoints", "chk-*"))
		return len(ids) > 0
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 3 || !strings.Contains(p.stderr.String(), "wstream deploy --resume "+id+" --data d2") {
		t.Fatalf("deploy after Ctrl-C: exit %d, want 3 and a resume hint with --data d2\n%s", code, p.stderr.String())
	}

	p = startEdge(t, dir, "deploy", "--data", "d3", "--plan", "plan.json", mod)
	started(p)
	p.kill(t)
	r := runCLI(t, dir, "list", "--data", "d3")
	if r.code != 1 || !strings.Contains(r.stderr, "tried nats://127.0.0.1:") || !strings.Contains(r.stderr, "no longer running") || !strings.Contains(r.stderr, "--nats URL") {
		t.Fatalf("list on a killed deploy's data: exit %d\n%s", r.code, r.stderr)
	}
}
