package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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

// TestUnboundedJobStopsOnInterrupt runs an unbounded job, waits until its
// output flows, interrupts it as Ctrl-C would, and expects a clean stop: exit
// 0, a summary, and output that ends with whole lines.
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
		if err != nil {
			t.Fatalf("interrupted job exited with %v\n%s", err, stderr.String())
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
