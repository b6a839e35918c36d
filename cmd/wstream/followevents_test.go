package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

func TestJobEvents(t *testing.T) {
	row := func(state string, attempt, restarts int, cause string) transport.JobInfo {
		return transport.JobInfo{JobID: "j", State: state, Attempt: attempt, Restarts: restarts, Cause: cause}
	}
	ck := func(id int64, status string) coordinator.HistoryEntry {
		return coordinator.HistoryEntry{ID: id, Kind: checkpoint.KindCheckpoint, Status: status, Duration: 120 * time.Millisecond,
			StateSize: 2048, Reason: "expired"}
	}
	sp := coordinator.HistoryEntry{ID: 4, Kind: checkpoint.KindSavepoint, Status: "completed", Duration: time.Second, StateSize: 1 << 20}
	for _, c := range []struct {
		name      string
		prev, cur jobSeen
		want      []string
	}{
		{"nothing new", jobSeen{row: row("RUNNING", 0, 0, "")}, jobSeen{row: row("RUNNING", 0, 0, "")}, nil},
		{"first state", jobSeen{}, jobSeen{row: row("RUNNING", 0, 0, "")}, []string{"RUNNING (attempt 0)"}},
		{"restart", jobSeen{row: row("RUNNING", 0, 0, "")}, jobSeen{row: row("RESTARTING", 1, 1, "worker w1 lost")},
			[]string{"restart 1 (attempt 1): worker w1 lost", "RESTARTING (attempt 1)"}},
		{"back to running", jobSeen{row: row("RESTARTING", 1, 1, "x")}, jobSeen{row: row("RUNNING", 1, 1, "x")}, []string{"RUNNING (attempt 1)"}},
		{"checkpoints", jobSeen{row: row("RUNNING", 0, 0, ""), checkpoints: []coordinator.HistoryEntry{ck(1, "completed")}},
			jobSeen{row: row("RUNNING", 0, 0, ""), checkpoints: []coordinator.HistoryEntry{ck(1, "completed"), ck(2, "completed"), ck(3, "aborted"), sp}},
			[]string{"checkpoint 2 completed in 120ms, 2.0KiB", "checkpoint 3 failed: expired", "savepoint 4 completed in 1s, 1.0MiB"}},
		{"ended", jobSeen{row: row("RUNNING", 0, 0, "")}, jobSeen{row: row("FINISHED", 0, 0, "")}, []string{"FINISHED (attempt 0)"}},
	} {
		got := jobEvents(c.prev, c.cur)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestOutcomeLine(t *testing.T) {
	for state, want := range map[string]string{
		transport.JobFinished: "exit 0", transport.JobFailed: "exit 1", transport.JobCanceled: "exit 3", transport.JobStopped: "exit 3",
	} {
		if got := outcomeLine(&transport.JobResult{JobID: "j", State: state}); !strings.HasSuffix(got, want) {
			t.Errorf("%s: %q, want it to end with %q", state, got, want)
		}
	}
}

// TestRunEvents: the loop prints the state at once, the checkpoints that
// existed before it started not at all, and what changes afterwards.
func TestRunEvents(t *testing.T) {
	var mu sync.Mutex
	seen := jobSeen{row: transport.JobInfo{JobID: "j", State: "RUNNING"}, checkpoints: []coordinator.HistoryEntry{{ID: 7, Status: "completed"}}}
	poll := func() (jobSeen, bool) {
		mu.Lock()
		defer mu.Unlock()
		return seen, true
	}
	clock := func() time.Time { return time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC) }
	var w syncBuffer
	stop := runEvents(&w, 10*time.Millisecond, poll, clock)
	defer stop()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(w.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in:\n%s", what, w.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("12:00:00 RUNNING (attempt 0)\n")
	mu.Lock()
	seen.checkpoints = append(seen.checkpoints, coordinator.HistoryEntry{ID: 8, Status: "completed", Kind: checkpoint.KindCheckpoint})
	seen.row.State = "FINISHED"
	mu.Unlock()
	waitFor("FINISHED (attempt 0)")
	stop()
	out := w.String()
	if strings.Contains(out, "checkpoint 7") || !strings.Contains(out, "checkpoint 8 completed") || strings.Count(out, "RUNNING") != 1 {
		t.Errorf("events:\n%s", out)
	}
}
