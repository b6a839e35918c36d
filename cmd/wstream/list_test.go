package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

func TestPrintJobs(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	err := printJobs(&b, []transport.JobInfo{
		{JobID: "wc-1", State: "RESTARTING", Attempt: 2, Restarts: 2, Cause: "worker w1 lost: no heartbeat for 10s", Started: started},
		{JobID: "wc-2", State: "FAILED", Attempt: 0, Started: started, Error: "subtask op[0]: guest\ttrapped\nline 2"},
		{JobID: "wc-3", State: "RUNNING", Started: started},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"JOB   STATE       ATTEMPT  RESTARTS  STARTED               LAST RESTART CAUSE / ERROR\n" +
		"wc-1  RESTARTING  2        2         2026-11-29T10:00:00Z  worker w1 lost: no heartbeat for 10s\n" +
		"wc-2  FAILED      0        0         2026-11-29T10:00:00Z  error: subtask op[0]: guest trapped line 2\n" +
		"wc-3  RUNNING     0        0         2026-11-29T10:00:00Z\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	if got := oneLine(strings.Repeat("x", 300), 200); len([]rune(got)) != 200 {
		t.Fatalf("oneLine kept %d runes", len([]rune(got)))
	}
}
