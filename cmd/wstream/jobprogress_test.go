package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wstream/wstream/job"
)

// TestJobProgress: the bar follows the records read, shows the count of a
// known input, and is cleared when stopped.
func TestJobProgress(t *testing.T) {
	var w syncBuffer
	var n atomic.Int64
	jp := &jobProgress{stop: make(chan struct{}), done: make(chan struct{})}
	jp.started("job")
	go jp.run(&w, 1000, n.Load, 5*time.Millisecond)
	n.Store(250)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(w.String(), "250/1000") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress shown for 250 of 1000 records:\n%q", w.String())
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if !strings.Contains(w.String(), "25%") {
		t.Fatalf("no percentage:\n%q", w.String())
	}
	close(jp.stop)
	<-jp.done
	out := w.String()
	// Cleared: the last thing written returns to the start of an empty line.
	if i := strings.LastIndex(out, "250/1000"); !strings.Contains(out[i:], "\r") {
		t.Fatalf("the bar was not cleared:\n%q", out)
	}
}

// TestJobProgressOffTerminal: nothing is shown when stderr is not a
// terminal (a pipe, a file, a test's buffer).
func TestJobProgressOffTerminal(t *testing.T) {
	var w syncBuffer
	jp, stop := startJobProgress(&w, nil, &job.Plan{}, false)
	jp.started("job")
	stop()
	if w.String() != "" {
		t.Fatalf("progress off a terminal: %q", w.String())
	}
}

func TestInputSize(t *testing.T) {
	plan := func(sources ...string) *job.Plan {
		p := &job.Plan{}
		for i, s := range sources {
			conn, cfg, _ := strings.Cut(s, " ")
			p.Vertices = append(p.Vertices, job.Vertex{ID: string(rune('a' + i)), Kind: job.KindSource, Connector: conn, Config: []byte(cfg)})
		}
		p.Vertices = append(p.Vertices, job.Vertex{ID: "op", Kind: job.KindOperator, Operator: "x"})
		return p
	}
	for _, c := range []struct {
		p    *job.Plan
		want int64
	}{
		{plan(`gen {"count":1000}`), 1000},
		{plan(`gen {"count":1000}`, `gen {"count":24}`), 1024},
		{plan(`gen {"count":0}`), -1},
		{plan(`gen {"count":10}`, `file {"path":"x"}`), -1},
		{plan(`gen {}`), -1},
	} {
		if got := inputSize(c.p); got != c.want {
			t.Errorf("inputSize(%v) = %d, want %d", c.p.Vertices, got, c.want)
		}
	}
}
