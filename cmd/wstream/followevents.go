package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

// jobSeen is what a follower knows of a job at one poll: its row from the
// cluster and, when the job's data directory is on this host, its
// checkpoint history.
type jobSeen struct {
	row         transport.JobInfo
	checkpoints []coordinator.HistoryEntry
}

// jobEvents says what happened to a job between two polls, one line per
// event, oldest first: a state change (with the attempt), a restart (with
// its cause), a checkpoint or savepoint that completed or failed. It is
// pure: the follower's loop feeds it.
func jobEvents(prev, cur jobSeen) []string {
	var out []string
	if cur.row.Restarts > prev.row.Restarts {
		line := fmt.Sprintf("restart %d (attempt %d)", cur.row.Restarts, cur.row.Attempt)
		if cur.row.Cause != "" {
			line += ": " + oneLine(cur.row.Cause, 200)
		}
		out = append(out, line)
	}
	if cur.row.State != prev.row.State || cur.row.Attempt != prev.row.Attempt {
		out = append(out, fmt.Sprintf("%s (attempt %d)", cur.row.State, cur.row.Attempt))
	}
	var last int64
	for _, e := range prev.checkpoints {
		last = max(last, e.ID)
	}
	for _, e := range cur.checkpoints {
		if e.ID <= last {
			continue
		}
		kind := e.Kind.String()
		if e.Kind == 0 {
			kind = "checkpoint"
		}
		if e.Status == "completed" {
			out = append(out, fmt.Sprintf("%s %d completed in %s, %s", kind, e.ID, e.Duration.Round(time.Millisecond), humanBytes(e.StateSize)))
		} else {
			out = append(out, fmt.Sprintf("%s %d failed: %s", kind, e.ID, oneLine(e.Reason, 200)))
		}
	}
	return out
}

// outcomeLine is the follower's last event: how the job ended and the
// exit status that tells it.
func outcomeLine(res *transport.JobResult) string {
	code := 0
	switch res.State {
	case transport.JobFinished:
	case transport.JobStopped, transport.JobCanceled:
		code = exitSuspended
	default:
		code = exitFailed
	}
	return fmt.Sprintf("job %s %s: exit %d", res.JobID, res.State, code)
}

// followEvents prints a job's events to w as they happen (one line each,
// with the time) until stop is called; the first poll's state is an
// event too. dataDir, when the job's files are there, adds checkpoints.
func followEvents(w io.Writer, nc *nats.Conn, id, dataDir string, every time.Duration) (stop func()) {
	poll := func() (jobSeen, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		row, err := findJob(ctx, nc, id)
		if err != nil {
			return jobSeen{}, false
		}
		s := jobSeen{row: row}
		if dataDir != "" {
			s.checkpoints, _ = coordinator.ReadHistory(dataDir, id)
		}
		return s, true
	}
	return runEvents(w, every, poll, time.Now)
}

// runEvents is followEvents' loop with its source and clock given.
func runEvents(w io.Writer, every time.Duration, poll func() (jobSeen, bool), now func() time.Time) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var prev jobSeen
		first := true
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if cur, ok := poll(); ok {
				if first {
					// The state is news; the checkpoints before it are not.
					prev.checkpoints, first = cur.checkpoints, false
				}
				for _, e := range jobEvents(prev, cur) {
					fmt.Fprintf(w, "%s %s\n", now().Format("15:04:05"), e)
				}
				prev = cur
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}
