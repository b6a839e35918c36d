package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/transport"
)

func TestMetricsBoardRatesAndAttempts(t *testing.T) {
	var b metricsBoard
	s := func(att int, v string, sub int, in, out, at int64) transport.SubtaskMetrics {
		return transport.SubtaskMetrics{JobID: "j", Attempt: att, Vertex: v, Subtask: sub, RecordsIn: in, RecordsOut: out, SampledAt: at}
	}
	b.put([]transport.SubtaskMetrics{s(1, "b", 0, 0, 0, 1000), s(1, "a", 1, 10, 10, 1000), s(1, "a", 0, 0, 0, 1000)})
	b.put([]transport.SubtaskMetrics{s(1, "a", 0, 500, 250, 1500)})
	got := b.get("j")
	if len(got) != 3 || got[0].Vertex != "a" || got[0].Subtask != 0 || got[1].Subtask != 1 || got[2].Vertex != "b" {
		t.Fatalf("order: %+v", got)
	}
	if got[0].RecordsInPerSec != 1000 || got[0].RecordsOutPerSec != 500 {
		t.Fatalf("rates %v/%v, want 1000/500", got[0].RecordsInPerSec, got[0].RecordsOutPerSec)
	}
	// A repeated sample keeps its rates; an older attempt's is dropped.
	b.put([]transport.SubtaskMetrics{s(1, "a", 0, 500, 250, 1500), s(0, "a", 0, 9, 9, 2000)})
	if got := b.get("j"); got[0].RecordsInPerSec != 1000 || got[0].RecordsIn != 500 {
		t.Fatalf("after repeat and stale: %+v", got[0])
	}
	// A new attempt replaces every sample of the old one.
	b.put([]transport.SubtaskMetrics{s(2, "a", 0, 1, 1, 3000)})
	if got := b.get("j"); len(got) != 1 || got[0].Attempt != 2 || got[0].RecordsInPerSec != 0 {
		t.Fatalf("after new attempt: %+v", got)
	}
	b.drop("j")
	if got := b.get("j"); len(got) != 0 {
		t.Fatalf("after drop: %+v", got)
	}
}

// TestOnMetricsKeepsCurrentAttempts feeds worker reports to onMetrics: only
// samples of the current attempt of a job that has not ended reach the
// board, with the worker and tenant the coordinator knows; an ended job
// gets none back.
func TestOnMetricsKeepsCurrentAttempts(t *testing.T) {
	c := &Coordinator{jobs: map[string]*jobState{
		"run":  {info: transport.JobInfo{JobID: "run", Tenant: "acme"}, attempt: 2},
		"done": {info: transport.JobInfo{JobID: "done"}, done: true},
	}}
	report := func(worker string, ms ...transport.SubtaskMetrics) {
		b, _ := json.Marshal(transport.MetricsReport{Worker: worker, Subtasks: ms})
		c.onMetrics(&nats.Msg{Data: b})
	}
	report("w1",
		transport.SubtaskMetrics{JobID: "run", Attempt: 2, Vertex: "v", Subtask: 0, RecordsIn: 7, Tenant: "forged", SampledAt: 1000},
		transport.SubtaskMetrics{JobID: "run", Attempt: 1, Vertex: "v", Subtask: 1, RecordsIn: 9, SampledAt: 1000},
		transport.SubtaskMetrics{JobID: "done", Vertex: "v", SampledAt: 1000},
		transport.SubtaskMetrics{JobID: "unknown", Vertex: "v", SampledAt: 1000})
	report("bad worker id", transport.SubtaskMetrics{JobID: "run", Attempt: 2, Vertex: "v", Subtask: 2, SampledAt: 1000})
	c.onMetrics(&nats.Msg{Data: []byte("{not json")})
	got := c.SubtaskMetrics("run")
	if len(got) != 1 || got[0].RecordsIn != 7 || got[0].Worker != "w1" || got[0].Tenant != "acme" {
		t.Fatalf("samples of run: %+v", got)
	}
	for _, id := range []string{"done", "unknown"} {
		if got := c.SubtaskMetrics(id); len(got) != 0 {
			t.Errorf("samples of %s: %+v", id, got)
		}
	}
}

func TestCheckpointStats(t *testing.T) {
	var b metricsBoard
	b.checkpoint("j", HistoryEntry{ID: 1, Status: "completed", Duration: 30 * time.Millisecond, StateSize: 10})
	b.checkpoint("j", HistoryEntry{ID: 2, Status: "aborted"})
	b.checkpoint("j", HistoryEntry{ID: 3, Status: "completed", Duration: 2 * time.Second, StateSize: 20})
	st := b.checkpointStats("j")
	if st.Completed != 2 || st.Aborted != 1 || st.DurationCount != 2 || st.Last.ID != 3 || st.Last.StateSize != 20 {
		t.Fatalf("stats %+v", st)
	}
	if want := 2.03; st.DurationSum < want-1e-9 || st.DurationSum > want+1e-9 {
		t.Errorf("duration sum %v, want %v", st.DurationSum, want)
	}
	for k, le := range CheckpointBuckets {
		want := uint64(0)
		switch {
		case le >= 2.5:
			want = 2
		case le >= 0.05:
			want = 1
		}
		if st.DurationBuckets[k] != want {
			t.Errorf("bucket le=%v: %d, want %d", le, st.DurationBuckets[k], want)
		}
	}
	b.drop("j")
	if st := b.checkpointStats("j"); st.Completed != 0 || len(st.DurationBuckets) != len(CheckpointBuckets) {
		t.Errorf("after drop: %+v", st)
	}
}
