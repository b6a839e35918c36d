package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/job"
)

// jobProgress shows, on a terminal, how far a job running in this process
// has read its input: records, rate, and, when every source says how many
// records it has (gen's count), a bar and the time left. Off a terminal,
// with -q, or when the job's workers are elsewhere (--nats), it shows
// nothing: logs and pipes get the summary only.
type jobProgress struct {
	mu   sync.Mutex
	id   string
	stop chan struct{}
	done chan struct{}
}

// startJobProgress starts the display; call started with the job's id once
// it is known, and the returned stop before printing anything else.
func startJobProgress(w io.Writer, e *engine.Engine, p *job.Plan, quiet bool) (jp *jobProgress, stop func()) {
	jp = &jobProgress{stop: make(chan struct{}), done: make(chan struct{})}
	if quiet || !isTerminal(w) || len(e.Workers()) == 0 {
		close(jp.done)
		return jp, func() {}
	}
	sources := map[string]bool{}
	for _, v := range p.Vertices {
		if v.Kind == job.KindSource {
			sources[v.ID] = true
		}
	}
	read := func() int64 {
		jp.mu.Lock()
		id := jp.id
		jp.mu.Unlock()
		var n int64
		if id == "" {
			return 0
		}
		for _, wk := range e.Workers() {
			for _, m := range wk.Metrics(id) {
				if sources[m.Vertex] {
					n += m.RecordsOut
				}
			}
		}
		return n
	}
	go jp.run(w, inputSize(p), read, 250*time.Millisecond)
	var once sync.Once
	return jp, func() {
		once.Do(func() { close(jp.stop) })
		<-jp.done
	}
}

func (jp *jobProgress) started(id string) {
	jp.mu.Lock()
	jp.id = id
	jp.mu.Unlock()
}

// run updates a progress bar of total records (-1: unknown, a counter and a
// rate) from read every interval until stopped, then clears it. The bar
// starts, and its clock with it, once the job has an id: before, the
// deployment prints its own lines.
func (jp *jobProgress) run(w io.Writer, total int64, read func() int64, interval time.Duration) {
	defer close(jp.done)
	var bar *progressbar.ProgressBar
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-jp.stop:
			if bar != nil {
				_ = bar.Clear()
			}
			return
		case <-t.C:
			if bar == nil {
				jp.mu.Lock()
				known := jp.id != ""
				jp.mu.Unlock()
				if !known {
					continue
				}
				bar = progressbar.NewOptions64(total,
					progressbar.OptionSetWriter(w),
					progressbar.OptionSetDescription("records"),
					progressbar.OptionShowCount(),
					progressbar.OptionShowIts(),
					progressbar.OptionSetItsString("records"),
					progressbar.OptionSetPredictTime(total > 0),
					progressbar.OptionSetWidth(30),
					progressbar.OptionThrottle(interval),
					progressbar.OptionSetRenderBlankState(true),
				)
				continue
			}
			// A restart counts the new attempt from its restored position:
			// the count may go back.
			_ = bar.Set64(read())
		}
	}
}

// inputSize is the number of records the job's sources will emit, or -1
// when one of them cannot say (gen with a count can; files and streams
// cannot).
func inputSize(p *job.Plan) int64 {
	var total int64
	for _, v := range p.Vertices {
		if v.Kind != job.KindSource {
			continue
		}
		var cfg struct {
			Count int64 `json:"count"`
		}
		if v.Connector != "gen" || json.Unmarshal(v.Config, &cfg) != nil || cfg.Count <= 0 {
			return -1
		}
		total += cfg.Count
	}
	if total == 0 {
		return -1
	}
	return total
}
