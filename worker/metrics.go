package worker

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// What a subtask is doing, for timeSplit.
const (
	timeBusy int = iota
	timeBackpressured
	timeIdle
)

// timeSplit divides a subtask's time into busy (processing: guest calls
// and host work), backpressured (blocked sending downstream) and idle
// (waiting for input), as Flink's busyTimeMsPerSecond,
// backPressuredTimeMsPerSecond and idleTimeMsPerSecond do. The subtask's
// goroutine switches it where it starts and stops waiting, so the cost is
// per batch or per send, never per record; a switch to the state it is
// already in costs a lock and no clock read. Readers see the period in
// progress too, so a subtask blocked for a minute shows a minute of
// backpressure while it is still blocked.
type timeSplit struct {
	mu    sync.Mutex
	state int
	since time.Time
	acc   [3]time.Duration
	// read is what the last read returned: reads never go back, even when
	// charge moves a period in progress to another state.
	read [3]time.Duration
	// clock is time.Now, or a test's clock.
	clock func() time.Time
}

func (s *timeSplit) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

func (s *timeSplit) start(now time.Time) {
	s.mu.Lock()
	s.state, s.since = timeBusy, now
	s.mu.Unlock()
}

// to makes st the current state from now on.
func (s *timeSplit) to(st int) {
	s.mu.Lock()
	if s.state != st && !s.since.IsZero() {
		now := s.now()
		s.acc[s.state] += now.Sub(s.since)
		s.state, s.since = st, now
	}
	s.mu.Unlock()
}

// charge gives the period in progress to st, and starts a new one in the
// current state.
func (s *timeSplit) charge(st int) {
	s.mu.Lock()
	if !s.since.IsZero() {
		now := s.now()
		s.acc[st] += now.Sub(s.since)
		s.since = now
	}
	s.mu.Unlock()
}

// totals returns the time spent busy, backpressured and idle so far.
func (s *timeSplit) totals() (busy, backpressured, idle time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.acc
	if !s.since.IsZero() {
		cur[s.state] += s.now().Sub(s.since)
	}
	for k := range cur {
		s.read[k] = max(s.read[k], cur[k])
	}
	return s.read[timeBusy], s.read[timeBackpressured], s.read[timeIdle]
}

// stateMeasureEvery is how often a subtask measures its keyed state on disk
// (state.Store.Metrics walks Pebble's metrics).
const stateMeasureEvery = time.Second

// measureState measures the keyed state when the last measurement is older
// than stateMeasureEvery. It runs on the subtask's goroutine, which owns
// the store: a reader on another goroutine could race with its closing.
func (t *task) measureState(now time.Time) {
	if t.store == nil || now.Before(t.nextMeasure) {
		return
	}
	t.nextMeasure = now.Add(stateMeasureEvery)
	m := t.store.Metrics()
	t.statsMu.Lock()
	t.storeStats = m
	t.statsMu.Unlock()
}

// samples returns the subtask's figures, one per vertex of its chain.
// Records and bytes are the vertex's; the time split and watermark are the
// subtask's (chained vertices share one thread, as in Flink); the keyed
// state is on the vertex that holds it, the exchange's input figures on the
// chain's first vertex and its output figures on the last.
func (t *task) samples(base transport.SubtaskMetrics) []transport.SubtaskMetrics {
	busy, bp, idle := t.split.totals()
	base.Subtask = t.subtask
	base.BusyMillis, base.BackpressuredMillis, base.IdleMillis = busy.Milliseconds(), bp.Milliseconds(), idle.Milliseconds()
	if wm := t.wmPub.Load(); wm != abi.MinWatermark && wm != abi.MaxWatermark {
		base.Watermark, base.HasWatermark = wm, true
	}
	var lag, inFlight int64
	outs := 0
	for _, in := range t.remoteIns {
		lag = max(lag, in.Lag().Milliseconds())
	}
	for _, o := range t.outs {
		for _, c := range o.chans {
			if jo, ok := c.(*transport.JetStreamOutput); ok {
				outs++
				inFlight += jo.InFlight()
			}
		}
	}
	t.statsMu.Lock()
	stateBytes := t.storeStats.DiskBytes + t.storeStats.MemTableBytes
	written := t.storeStats.Committed
	t.statsMu.Unlock()
	paced := t.turn.pacedFor().Milliseconds()

	out := make([]transport.SubtaskMetrics, 0, len(t.chain.Vertices))
	k := 0
	for i, v := range t.chain.Vertices {
		m := base
		m.Vertex = v.ID
		if i == 0 {
			m.RemoteInputs, m.ExchangeLagMillis = len(t.remoteIns), lag
		}
		if i == len(t.chain.Vertices)-1 {
			m.RemoteOutputs, m.ExchangeInFlight = outs, inFlight
		}
		switch {
		case i == 0 && t.source != nil:
			m.RecordsOut, m.BytesOut = t.srcOut.Load(), t.srcOutBytes.Load()
		case v.Kind == job.KindSink:
			m.RecordsIn, m.BytesIn = t.sinkIn.Load(), t.sinkInBytes.Load()
		default:
			s := t.stages[k]
			k++
			m.RecordsIn, m.RecordsOut = s.in.Load(), s.out.Load()
			m.BytesIn, m.BytesOut = s.inBytes.Load(), s.outBytes.Load()
			m.DeadLetters = s.dead.Load()
			if s.keyed {
				m.StateBytes, m.StateWrittenBytes, m.StatePacedMillis = stateBytes, written, paced
			}
		}
		out = append(out, m)
	}
	return out
}

// SubtaskMetrics samples every subtask this worker runs, one row per vertex
// of each subtask's chain, ordered by job, vertex and subtask.
func (w *Worker) SubtaskMetrics() []transport.SubtaskMetrics {
	now := time.Now().UnixMilli()
	var out []transport.SubtaskMetrics
	for _, j := range w.runs() {
		base := transport.SubtaskMetrics{JobID: j.id, Attempt: j.attempt, Worker: w.cfg.ID, Tenant: j.tenant, SampledAt: now}
		for _, t := range j.tasks {
			out = append(out, t.samples(base)...)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if x.JobID != y.JobID {
			return x.JobID < y.JobID
		}
		if x.Vertex != y.Vertex {
			return x.Vertex < y.Vertex
		}
		return x.Subtask < y.Subtask
	})
	return out
}

// runs returns the job attempts the worker runs whose subtasks are built.
func (w *Worker) runs() []*jobRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*jobRun, 0, len(w.jobs))
	for _, j := range w.jobs {
		if j.tasks != nil {
			out = append(out, j)
		}
	}
	return out
}

// GuestCalls is one operator vertex's guest calls on this worker, summed
// over its subtasks here.
type GuestCalls struct {
	JobID, Tenant, Vertex string
	// Calls holds a histogram per kind of call; HostCalls counts the host
	// functions called, by name.
	Calls     []host.CallSnapshot
	HostCalls map[string]int64
}

// GuestCalls returns the guest call figures of every guest operator vertex
// this worker runs, ordered by job and vertex.
func (w *Worker) GuestCalls() []GuestCalls {
	type key struct{ job, vertex string }
	sum := map[key]*GuestCalls{}
	for _, j := range w.runs() {
		for _, t := range j.tasks {
			for _, s := range t.stages {
				if s.calls == nil {
					continue
				}
				k := key{j.id, s.vertex.ID}
				g := sum[k]
				if g == nil {
					g = &GuestCalls{JobID: j.id, Tenant: j.tenant, Vertex: s.vertex.ID, HostCalls: map[string]int64{}}
					sum[k] = g
				}
				for _, c := range s.calls.Calls() {
					found := false
					for n := range g.Calls {
						if g.Calls[n].Call == c.Call {
							g.Calls[n].Merge(c)
							found = true
						}
					}
					if !found {
						g.Calls = append(g.Calls, c)
					}
				}
				for f, n := range s.calls.HostCalls() {
					g.HostCalls[f] += n
				}
			}
		}
	}
	out := make([]GuestCalls, 0, len(sum))
	for _, g := range sum {
		sort.Slice(g.Calls, func(a, b int) bool { return g.Calls[a].Call < g.Calls[b].Call })
		out = append(out, *g)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].JobID != out[b].JobID {
			return out[a].JobID < out[b].JobID
		}
		return out[a].Vertex < out[b].Vertex
	})
	return out
}

// JobStateStats is the keyed state of one job's subtasks on this worker,
// as their last measurements found it.
type JobStateStats struct {
	JobID, Tenant string
	state.StoreMetrics
}

// StateStats sums the Pebble figures of each job's subtasks on this
// worker, ordered by job.
func (w *Worker) StateStats() []JobStateStats {
	var out []JobStateStats
	for _, j := range w.runs() {
		s := JobStateStats{JobID: j.id, Tenant: j.tenant}
		any := false
		for _, t := range j.tasks {
			if t.store == nil {
				continue
			}
			any = true
			t.statsMu.Lock()
			s.StoreMetrics.Add(t.storeStats)
			t.statsMu.Unlock()
		}
		if any {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].JobID < out[b].JobID })
	return out
}

// BlockCache returns the figures of the Pebble block cache that the
// worker's subtasks share (zeros once the worker is closed).
func (w *Worker) BlockCache() (size, hits, misses int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cacheGone {
		return 0, 0, 0
	}
	m := w.cache.Metrics()
	return m.Size, m.Hits, m.Misses
}

// publishMetrics sends the coordinator the latest samples of the worker's
// subtasks (transport.SubjectMetrics). It is called with the heartbeat; a
// worker that runs nothing sends nothing.
func (w *Worker) publishMetrics() {
	ms := w.SubtaskMetrics()
	// A sample is about 400 bytes of JSON: reports of at most
	// metricsPerReport samples stay far below NATS's default 1 MiB
	// payload limit however many subtasks the worker runs.
	for len(ms) > 0 {
		n := min(len(ms), metricsPerReport)
		b, err := json.Marshal(transport.MetricsReport{Worker: w.cfg.ID, Subtasks: ms[:n]})
		if err == nil {
			_ = w.cfg.NATS.Publish(transport.SubjectMetrics, b)
		}
		ms = ms[n:]
	}
}

// metricsPerReport bounds the samples of one MetricsReport.
const metricsPerReport = 500
