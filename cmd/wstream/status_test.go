package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStatusOffTerminal: off a terminal, a job's state changes are logged,
// a restart at warn level, and nothing repeats while nothing changes.
func TestStatusOffTerminal(t *testing.T) {
	rows := []transport.JobInfo{
		{JobID: "j", State: "RUNNING"},
		{JobID: "j", State: "RUNNING"},
		{JobID: "j", State: "RESTARTING", Attempt: 1, Restarts: 1, Cause: "boom"},
		{JobID: "j", State: "RUNNING", Attempt: 1, Restarts: 1},
	}
	var mu sync.Mutex
	n := 0
	get := func() (transport.JobInfo, bool) {
		mu.Lock()
		defer mu.Unlock()
		r := rows[min(n, len(rows)-1)]
		n++
		return r, true
	}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var out lockedBuffer
	stop := pollStatus(&out, false, log, time.Millisecond, time.Hour, get)
	waitFor(t, "not every row was read", func() bool { mu.Lock(); defer mu.Unlock(); return n > len(rows)+5 })
	stop()
	got := logs.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "job j RUNNING, attempt 0") ||
		!strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[1], "RESTARTING, attempt 1, 1 restarts") || !strings.Contains(lines[1], "boom") ||
		!strings.Contains(lines[2], "RUNNING, attempt 1") {
		t.Fatalf("status lines:\n%s", got)
	}
	if out.String() != "" {
		t.Fatalf("off a terminal the status went to the writer: %q", out.String())
	}
}

// TestBusy: on a terminal a spinner names the operation and is cleared at
// the end; off one, log lines at info level.
func TestBusy(t *testing.T) {
	var out lockedBuffer
	stop := busyEvery(&out, true, nil, "compiling m.wasm", time.Millisecond, time.Hour)
	waitFor(t, "no spinner", func() bool { return strings.Count(out.String(), "compiling m.wasm") >= 2 })
	stop()
	if s := out.String(); !strings.HasSuffix(s, "\r\033[K") || !strings.ContainsAny(s, string(spinnerFrames)) {
		t.Fatalf("spinner output %q", s)
	}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	out = lockedBuffer{}
	stop = busyEvery(&out, false, log, "stopping job j", time.Millisecond, time.Millisecond)
	waitFor(t, "no log line", func() bool { return strings.Contains(logs.String(), `msg="stopping job j" elapsed=`) })
	stop()
	if out.String() != "" {
		t.Fatalf("off a terminal the spinner was drawn: %q", out.String())
	}
	// A quick operation shows nothing.
	out = lockedBuffer{}
	busyEvery(&out, true, nil, "quick", time.Millisecond, time.Hour)()
	if out.String() != "" {
		t.Fatalf("a quick operation drew %q", out.String())
	}
}
