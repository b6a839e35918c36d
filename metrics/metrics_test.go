package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
	"github.com/wstream/wstream/worker"
)

type fakeWorker struct {
	id    string
	subs  []transport.SubtaskMetrics
	calls []worker.GuestCalls
	state []worker.JobStateStats
}

func (f *fakeWorker) ID() string                                 { return f.id }
func (f *fakeWorker) SubtaskMetrics() []transport.SubtaskMetrics { return f.subs }
func (f *fakeWorker) GuestCalls() []worker.GuestCalls            { return f.calls }
func (f *fakeWorker) StateStats() []worker.JobStateStats         { return f.state }
func (f *fakeWorker) BlockCache() (int64, int64, int64)          { return 4096, 7, 3 }

func TestWorkerCollector(t *testing.T) {
	buckets := make([]uint64, len(host.CallBuckets))
	for k := range buckets {
		if host.CallBuckets[k] >= 1e-4 {
			buckets[k] = 3
		} else if host.CallBuckets[k] >= 1e-5 {
			buckets[k] = 1
		}
	}
	w := &fakeWorker{id: "w0",
		subs: []transport.SubtaskMetrics{
			{JobID: "j1", Tenant: "acme", Vertex: "count", Subtask: 1, RecordsIn: 1000, RecordsOut: 10, BytesIn: 32000, BytesOut: 320,
				BusyMillis: 1500, BackpressuredMillis: 250, IdleMillis: 4000, Watermark: 1_700_000_090_000, HasWatermark: true,
				StateBytes: 1 << 20, RemoteInputs: 2, ExchangeLagMillis: 40},
			{JobID: "j1", Tenant: "acme", Vertex: "source", Subtask: 0, RecordsOut: 1000, RemoteOutputs: 1, ExchangeInFlight: 5},
		},
		calls: []worker.GuestCalls{{JobID: "j1", Tenant: "acme", Vertex: "count",
			Calls:     []host.CallSnapshot{{Call: "process", Count: 3, Sum: 0.0005, Buckets: buckets}},
			HostCalls: map[string]int64{"state_get": 1000, "emit_batch": 3}}},
		state: []worker.JobStateStats{{JobID: "j1", Tenant: "acme", StoreMetrics: state.StoreMetrics{DiskBytes: 5000, MemTableBytes: 256, Compactions: 2, Flushes: 3, WALBytes: 77, ReadAmp: 4, Stores: 1}}},
	}
	c := NewWorkerCollector(w)
	c.now = func() time.Time { return time.UnixMilli(1_700_000_100_000) }
	want := `
# HELP wstream_subtask_records_in_total Records a vertex's subtask took in (its current attempt).
# TYPE wstream_subtask_records_in_total counter
wstream_subtask_records_in_total{job_id="j1",job_name="j1",subtask="0",tenant="acme",vertex="source",worker="w0"} 0
wstream_subtask_records_in_total{job_id="j1",job_name="j1",subtask="1",tenant="acme",vertex="count",worker="w0"} 1000
# HELP wstream_subtask_backpressured_seconds_total Time the subtask spent blocked sending downstream (backpressure).
# TYPE wstream_subtask_backpressured_seconds_total counter
wstream_subtask_backpressured_seconds_total{job_id="j1",job_name="j1",subtask="0",tenant="acme",vertex="source",worker="w0"} 0
wstream_subtask_backpressured_seconds_total{job_id="j1",job_name="j1",subtask="1",tenant="acme",vertex="count",worker="w0"} 0.25
# HELP wstream_subtask_watermark_lag_seconds How far the subtask's watermark is behind the worker's clock (absent before its first).
# TYPE wstream_subtask_watermark_lag_seconds gauge
wstream_subtask_watermark_lag_seconds{job_id="j1",job_name="j1",subtask="1",tenant="acme",vertex="count",worker="w0"} 10
# HELP wstream_subtask_state_bytes Estimated size of the keyed state of the vertex's subtask (Pebble files and memtables).
# TYPE wstream_subtask_state_bytes gauge
wstream_subtask_state_bytes{job_id="j1",job_name="j1",subtask="1",tenant="acme",vertex="count",worker="w0"} 1.048576e+06
# HELP wstream_exchange_lag_seconds Largest age, over the subtask's input channels from other workers, of the oldest message received and not yet taken, since JetStream stored it.
# TYPE wstream_exchange_lag_seconds gauge
wstream_exchange_lag_seconds{job_id="j1",job_name="j1",subtask="1",tenant="acme",vertex="count",worker="w0"} 0.04
# HELP wstream_exchange_in_flight_messages Messages the subtask's output channels to other workers published that their consumers have not taken.
# TYPE wstream_exchange_in_flight_messages gauge
wstream_exchange_in_flight_messages{job_id="j1",job_name="j1",subtask="0",tenant="acme",vertex="source",worker="w0"} 5
# HELP wstream_host_calls_total Host functions the guest of a vertex's operator called, by function.
# TYPE wstream_host_calls_total counter
wstream_host_calls_total{function="emit_batch",job_id="j1",job_name="j1",tenant="acme",vertex="count",worker="w0"} 3
wstream_host_calls_total{function="state_get",job_id="j1",job_name="j1",tenant="acme",vertex="count",worker="w0"} 1000
# HELP wstream_pebble_read_amplification Largest read amplification among the job's keyed-state stores on this worker.
# TYPE wstream_pebble_read_amplification gauge
wstream_pebble_read_amplification{job_id="j1",job_name="j1",tenant="acme",worker="w0"} 4
# HELP wstream_pebble_block_cache_misses_total Misses of the worker's shared Pebble block cache.
# TYPE wstream_pebble_block_cache_misses_total counter
wstream_pebble_block_cache_misses_total{worker="w0"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"wstream_subtask_records_in_total", "wstream_subtask_backpressured_seconds_total", "wstream_subtask_watermark_lag_seconds",
		"wstream_subtask_state_bytes", "wstream_exchange_lag_seconds", "wstream_exchange_in_flight_messages",
		"wstream_host_calls_total", "wstream_pebble_read_amplification", "wstream_pebble_block_cache_misses_total"); err != nil {
		t.Error(err)
	}
	// The histogram: 3 calls, one of them ≤ 25µs (≥ 10µs bound), all ≤ 100µs.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() != "wstream_guest_call_duration_seconds" {
			continue
		}
		found = true
		h := f.Metric[0].Histogram
		if h.GetSampleCount() != 3 || h.GetSampleSum() != 0.0005 {
			t.Errorf("histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
		}
		for _, b := range h.Bucket {
			want := uint64(0)
			switch {
			case b.GetUpperBound() >= 1e-4:
				want = 3
			case b.GetUpperBound() >= 1e-5:
				want = 1
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
	}
	if !found {
		t.Error("no guest call histogram")
	}
	// Every name follows the conventions Prometheus' linter checks.
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	// A job that ended leaves no series.
	w.subs, w.calls, w.state = nil, nil, nil
	if n := testutil.CollectAndCount(c, "wstream_subtask_records_in_total", "wstream_guest_call_duration_seconds", "wstream_pebble_disk_bytes"); n != 0 {
		t.Errorf("%d series left after the job ended", n)
	}
}

type fakeCoord struct{ st coordinator.Stats }

func (f fakeCoord) MetricsStats() coordinator.Stats { return f.st }

func TestCoordinatorCollector(t *testing.T) {
	b := make([]uint64, len(coordinator.CheckpointBuckets))
	for k, le := range coordinator.CheckpointBuckets {
		if le >= 0.25 {
			b[k] = 2
		}
	}
	c := NewCoordinatorCollector(fakeCoord{coordinator.Stats{
		JobsByState: map[string]int{"RUNNING": 1, "FINISHED": 3},
		Workers:     2, LiveWorkers: 1,
		Jobs: []coordinator.JobStats{{JobID: "j1", Tenant: "acme", State: "RUNNING", Restarts: 2,
			Checkpoints: coordinator.CheckpointMetrics{Completed: 2, Aborted: 1, DurationCount: 2, DurationSum: 0.4, DurationBuckets: b,
				Last: coordinator.HistoryEntry{ID: 7, Duration: 200 * time.Millisecond, StateSize: 12345, Uploaded: 100, Done: 1_700_000_000_000}}}},
	}})
	want := `
# HELP wstream_jobs Jobs the coordinator knows, by state (Flink's names: RUNNING, RESTARTING, FINISHED, …).
# TYPE wstream_jobs gauge
wstream_jobs{state="FINISHED"} 3
wstream_jobs{state="RUNNING"} 1
# HELP wstream_job_restarts_total Restarts the job's restart strategy made.
# TYPE wstream_job_restarts_total counter
wstream_job_restarts_total{job_id="j1",job_name="j1",tenant="acme"} 2
# HELP wstream_checkpoints_completed_total Checkpoints and savepoints of the job that completed.
# TYPE wstream_checkpoints_completed_total counter
wstream_checkpoints_completed_total{job_id="j1",job_name="j1",tenant="acme"} 2
# HELP wstream_checkpoints_failed_total Checkpoints and savepoints of the job that were aborted (declined, expired, or cut short by a failure).
# TYPE wstream_checkpoints_failed_total counter
wstream_checkpoints_failed_total{job_id="j1",job_name="j1",tenant="acme"} 1
# HELP wstream_checkpoint_last_state_bytes State size of the job's latest completed checkpoint, summed over subtasks.
# TYPE wstream_checkpoint_last_state_bytes gauge
wstream_checkpoint_last_state_bytes{job_id="j1",job_name="j1",tenant="acme"} 12345
# HELP wstream_checkpoint_last_completion_timestamp_seconds When the job's latest checkpoint completed, Unix seconds.
# TYPE wstream_checkpoint_last_completion_timestamp_seconds gauge
wstream_checkpoint_last_completion_timestamp_seconds{job_id="j1",job_name="j1",tenant="acme"} 1.7e+09
# HELP wstream_workers_live Registered workers heard from within the worker timeout.
# TYPE wstream_workers_live gauge
wstream_workers_live 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "wstream_jobs", "wstream_job_restarts_total",
		"wstream_checkpoints_completed_total", "wstream_checkpoints_failed_total", "wstream_checkpoint_last_state_bytes",
		"wstream_checkpoint_last_completion_timestamp_seconds", "wstream_workers_live"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "wstream_checkpoint_duration_seconds"); n != 1 {
		t.Errorf("%d duration histograms, want 1", n)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestRegistryHandler serves a registry with a worker collector and checks
// the exposition and the Go and process collectors.
func TestRegistryHandler(t *testing.T) {
	r := New()
	if err := r.Register(NewWorkerCollector(&fakeWorker{id: "w0", subs: []transport.SubtaskMetrics{{JobID: "j", Vertex: "v", RecordsIn: 5}}})); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, s := range []string{`wstream_subtask_records_in_total{job_id="j",job_name="j",subtask="0",tenant="",vertex="v",worker="w0"} 5`, "go_goroutines ", "process_cpu_seconds_total "} {
		if !strings.Contains(body, s) {
			t.Errorf("the exposition lacks %q", s)
		}
	}
}

// TestSyntheticWatermarkHasNoLag: a watermark of synthetic event time
// (gen's default counts from 1970) is exported, its lag behind the clock
// is not: it would be decades.
func TestSyntheticWatermarkHasNoLag(t *testing.T) {
	c := NewWorkerCollector(&fakeWorker{id: "w0", subs: []transport.SubtaskMetrics{
		{JobID: "gen-0a1b2c3d", Vertex: "v", Watermark: 90_000, HasWatermark: true},
		{JobID: "gen-0a1b2c3d", Vertex: "v", Subtask: 1, Watermark: MinWallClockMillis + 5000, HasWatermark: true},
	}})
	c.now = func() time.Time { return time.UnixMilli(MinWallClockMillis + 7000) }
	want := `
# HELP wstream_subtask_watermark_lag_seconds How far the subtask's watermark is behind the worker's clock (absent before its first).
# TYPE wstream_subtask_watermark_lag_seconds gauge
wstream_subtask_watermark_lag_seconds{job_id="gen-0a1b2c3d",job_name="gen",subtask="1",tenant="",vertex="v",worker="w0"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "wstream_subtask_watermark_lag_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "wstream_subtask_watermark_seconds"); n != 2 {
		t.Errorf("%d watermark series, want 2", n)
	}
}

func TestJobName(t *testing.T) {
	for id, want := range map[string]string{"wordcount-0a1b2c3d": "wordcount", "a-b-ffffffff": "a-b", "j1": "j1", "x-123": "x-123", "x-0a1b2c3g": "x-0a1b2c3g"} {
		if got := JobName(id); got != want {
			t.Errorf("JobName(%q) = %q, want %q", id, got, want)
		}
	}
}
