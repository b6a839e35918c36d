package coordinator

import (
	"testing"

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
