package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wstream/wstream/coordinator"
)

// CoordinatorSource is what the coordinator collector reads (a
// *coordinator.Coordinator).
type CoordinatorSource interface {
	MetricsStats() coordinator.Stats
}

var ckptLabels = []string{"job_id", "job_name", "tenant"}

var coordDescs = struct {
	jobs, restarts, workers, liveWorkers                  *prometheus.Desc
	completed, failed, duration                           *prometheus.Desc
	lastDuration, lastSize, lastUploaded, lastInFlight    *prometheus.Desc
	lastAlignment, lastSync, lastAsync, lastCompletedTime *prometheus.Desc
	lastID                                                *prometheus.Desc
}{
	jobs:          desc("wstream_jobs", "Jobs the coordinator knows, by state (Flink's names: RUNNING, RESTARTING, FINISHED, …).", "state"),
	restarts:      desc("wstream_job_restarts_total", "Restarts the job's restart strategy made.", ckptLabels...),
	workers:       desc("wstream_workers", "Workers registered with the coordinator."),
	liveWorkers:   desc("wstream_workers_live", "Registered workers heard from within the worker timeout."),
	completed:     desc("wstream_checkpoints_completed_total", "Checkpoints and savepoints of the job that completed.", ckptLabels...),
	failed:        desc("wstream_checkpoints_failed_total", "Checkpoints and savepoints of the job that were aborted (declined, expired, or cut short by a failure).", ckptLabels...),
	duration:      desc("wstream_checkpoint_duration_seconds", "Duration of the job's completed checkpoints, trigger to completion.", ckptLabels...),
	lastDuration:  desc("wstream_checkpoint_last_duration_seconds", "Duration of the job's latest completed checkpoint.", ckptLabels...),
	lastSize:      desc("wstream_checkpoint_last_state_bytes", "State size of the job's latest completed checkpoint, summed over subtasks.", ckptLabels...),
	lastUploaded:  desc("wstream_checkpoint_last_uploaded_bytes", "Bytes the job's latest completed checkpoint uploaded (less than its state when incremental).", ckptLabels...),
	lastInFlight:  desc("wstream_checkpoint_last_in_flight_bytes", "In-flight data captured by the job's latest completed checkpoint (unaligned).", ckptLabels...),
	lastAlignment: desc("wstream_checkpoint_last_alignment_seconds", "Slowest subtask's barrier alignment in the job's latest completed checkpoint.", ckptLabels...),
	lastSync:      desc("wstream_checkpoint_last_sync_seconds", "Slowest subtask's synchronous snapshot phase in the job's latest completed checkpoint.", ckptLabels...),
	lastAsync:     desc("wstream_checkpoint_last_async_seconds", "Slowest subtask's asynchronous snapshot phase in the job's latest completed checkpoint.", ckptLabels...),
	lastCompletedTime: desc("wstream_checkpoint_last_completion_timestamp_seconds",
		"When the job's latest checkpoint completed, Unix seconds.", ckptLabels...),
	lastID: desc("wstream_checkpoint_last_id", "Id of the job's latest completed checkpoint.", ckptLabels...),
}

// CoordinatorCollector collects the coordinator's figures.
type CoordinatorCollector struct{ c CoordinatorSource }

// NewCoordinatorCollector returns the collector of c.
func NewCoordinatorCollector(c CoordinatorSource) *CoordinatorCollector {
	return &CoordinatorCollector{c: c}
}

// Describe implements prometheus.Collector.
func (c *CoordinatorCollector) Describe(ch chan<- *prometheus.Desc) {
	d := coordDescs
	for _, x := range []*prometheus.Desc{d.jobs, d.restarts, d.workers, d.liveWorkers, d.completed, d.failed, d.duration,
		d.lastDuration, d.lastSize, d.lastUploaded, d.lastInFlight, d.lastAlignment, d.lastSync, d.lastAsync,
		d.lastCompletedTime, d.lastID} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *CoordinatorCollector) Collect(ch chan<- prometheus.Metric) {
	d := coordDescs
	st := c.c.MetricsStats()
	states := make([]string, 0, len(st.JobsByState))
	for s := range st.JobsByState {
		states = append(states, s)
	}
	sort.Strings(states)
	for _, s := range states {
		ch <- prometheus.MustNewConstMetric(d.jobs, prometheus.GaugeValue, float64(st.JobsByState[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(d.workers, prometheus.GaugeValue, float64(st.Workers))
	ch <- prometheus.MustNewConstMetric(d.liveWorkers, prometheus.GaugeValue, float64(st.LiveWorkers))
	for _, j := range st.Jobs {
		l := []string{j.JobID, JobName(j.JobID), j.Tenant}
		metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, l...)
		}
		metric(d.restarts, prometheus.CounterValue, float64(j.Restarts))
		cp := j.Checkpoints
		metric(d.completed, prometheus.CounterValue, float64(cp.Completed))
		metric(d.failed, prometheus.CounterValue, float64(cp.Aborted))
		ch <- prometheus.MustNewConstHistogram(d.duration, cp.DurationCount, cp.DurationSum, buckets(coordinator.CheckpointBuckets, cp.DurationBuckets), l...)
		if last := cp.Last; last.ID != 0 {
			metric(d.lastID, prometheus.GaugeValue, float64(last.ID))
			metric(d.lastDuration, prometheus.GaugeValue, last.Duration.Seconds())
			metric(d.lastSize, prometheus.GaugeValue, float64(last.StateSize))
			metric(d.lastUploaded, prometheus.GaugeValue, float64(last.Uploaded))
			metric(d.lastInFlight, prometheus.GaugeValue, float64(last.InFlightBytes))
			metric(d.lastAlignment, prometheus.GaugeValue, last.Alignment.Seconds())
			metric(d.lastSync, prometheus.GaugeValue, last.Sync.Seconds())
			metric(d.lastAsync, prometheus.GaugeValue, last.Async.Seconds())
			metric(d.lastCompletedTime, prometheus.GaugeValue, float64(last.Done)/1000)
		}
	}
}
