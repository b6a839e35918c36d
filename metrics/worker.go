package metrics

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/transport"
	"github.com/wstream/wstream/worker"
)

// WorkerSource is what the worker collector reads (a *worker.Worker).
type WorkerSource interface {
	ID() string
	SubtaskMetrics() []transport.SubtaskMetrics
	GuestCalls() []worker.GuestCalls
	StateStats() []worker.JobStateStats
	BlockCache() (size, hits, misses int64)
}

var (
	// job_id and job_name, not job: Prometheus gives every scraped series
	// the label job of its scrape configuration.
	subtaskLabels = []string{"worker", "job_id", "job_name", "tenant", "vertex", "subtask"}
	vertexLabels  = []string{"worker", "job_id", "job_name", "tenant", "vertex"}
	jobLabels     = []string{"worker", "job_id", "job_name", "tenant"}
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// workerDescs are the worker collector's metrics.
var workerDescs = struct {
	recordsIn, recordsOut, bytesIn, bytesOut     *prometheus.Desc
	deadLetters                                  *prometheus.Desc
	busy, backpressured, idle                    *prometheus.Desc
	watermark, watermarkLag, stateBytes          *prometheus.Desc
	stateWritten, statePaced                     *prometheus.Desc
	exchangeLag, exchangeInFlight                *prometheus.Desc
	guestCalls, hostCalls                        *prometheus.Desc
	pebbleDisk, pebbleMemtable, pebbleReadAmp    *prometheus.Desc
	pebbleCompactions, pebbleFlushes, pebbleWAL  *prometheus.Desc
	pebbleStores                                 *prometheus.Desc
	blockCacheBytes, blockCacheHits, blockMisses *prometheus.Desc
}{
	recordsIn:  desc("wstream_subtask_records_in_total", "Records a vertex's subtask took in (its current attempt).", subtaskLabels...),
	recordsOut: desc("wstream_subtask_records_out_total", "Records a vertex's subtask emitted (its current attempt).", subtaskLabels...),
	deadLetters: desc("wstream_subtask_dead_letters_total",
		"Records and timers the vertex's operator sent to the dead-letter sink (--on-guest-error dead-letter), its current attempt.", subtaskLabels...),
	bytesIn:  desc("wstream_subtask_bytes_in_total", "Bytes of record batches (ABI encoding) a vertex's subtask took in.", subtaskLabels...),
	bytesOut: desc("wstream_subtask_bytes_out_total", "Bytes of record batches (ABI encoding) a vertex's subtask emitted.", subtaskLabels...),
	busy:     desc("wstream_subtask_busy_seconds_total", "Time the subtask spent processing (guest calls and host work); chained vertices share their subtask's.", subtaskLabels...),
	backpressured: desc("wstream_subtask_backpressured_seconds_total",
		"Time the subtask spent blocked sending downstream (backpressure).", subtaskLabels...),
	idle:         desc("wstream_subtask_idle_seconds_total", "Time the subtask spent waiting for input.", subtaskLabels...),
	watermark:    desc("wstream_subtask_watermark_seconds", "The subtask's event-time watermark, Unix seconds (absent before its first).", subtaskLabels...),
	watermarkLag: desc("wstream_subtask_watermark_lag_seconds", "How far the subtask's watermark is behind the worker's clock (absent before its first).", subtaskLabels...),
	stateBytes:   desc("wstream_subtask_state_bytes", "Estimated size of the keyed state of the vertex's subtask (Pebble files and memtables).", subtaskLabels...),
	stateWritten: desc("wstream_subtask_state_written_bytes_total",
		"Bytes the keyed state of the vertex's subtask wrote to Pebble (committed batches, before compactions rewrite them).", subtaskLabels...),
	statePaced: desc("wstream_subtask_state_write_paced_seconds_total",
		"Time the subtask waited between inputs because its tenant wrote keyed state faster than its state write rate quota.", subtaskLabels...),
	exchangeLag: desc("wstream_exchange_lag_seconds",
		"Largest age, over the subtask's input channels from other workers, of the oldest message received and not yet taken, since JetStream stored it.", subtaskLabels...),
	exchangeInFlight: desc("wstream_exchange_in_flight_messages",
		"Messages the subtask's output channels to other workers published that their consumers have not taken.", subtaskLabels...),
	guestCalls: desc("wstream_guest_call_duration_seconds", "Duration of guest calls of a vertex's operator, by kind of call.", vertexLabels[0], vertexLabels[1], vertexLabels[2], vertexLabels[3], vertexLabels[4], "call"),
	hostCalls:  desc("wstream_host_calls_total", "Host functions the guest of a vertex's operator called, by function.", vertexLabels[0], vertexLabels[1], vertexLabels[2], vertexLabels[3], vertexLabels[4], "function"),
	pebbleDisk: desc("wstream_pebble_disk_bytes", "Disk space of the job's keyed-state stores on this worker.", jobLabels...),
	pebbleMemtable: desc("wstream_pebble_memtable_bytes",
		"Bytes held in the memtables of the job's keyed-state stores on this worker.", jobLabels...),
	pebbleReadAmp: desc("wstream_pebble_read_amplification",
		"Largest read amplification among the job's keyed-state stores on this worker.", jobLabels...),
	pebbleCompactions: desc("wstream_pebble_compactions_total", "Compactions of the job's keyed-state stores on this worker.", jobLabels...),
	pebbleFlushes:     desc("wstream_pebble_flushes_total", "Memtable flushes of the job's keyed-state stores on this worker.", jobLabels...),
	pebbleWAL:         desc("wstream_pebble_wal_written_bytes_total", "Bytes written to the write-ahead logs of the job's keyed-state stores on this worker.", jobLabels...),
	pebbleStores:      desc("wstream_pebble_stores", "Keyed-state stores (one per subtask with keyed state) of the job on this worker.", jobLabels...),
	blockCacheBytes:   desc("wstream_pebble_block_cache_bytes", "Bytes in the Pebble block cache the worker's subtasks share.", "worker"),
	blockCacheHits:    desc("wstream_pebble_block_cache_hits_total", "Hits of the worker's shared Pebble block cache.", "worker"),
	blockMisses:       desc("wstream_pebble_block_cache_misses_total", "Misses of the worker's shared Pebble block cache.", "worker"),
}

// WorkerCollector collects the figures of a process's workers.
type WorkerCollector struct {
	ws  []WorkerSource
	now func() time.Time
}

// NewWorkerCollector returns the collector of ws.
func NewWorkerCollector(ws ...WorkerSource) *WorkerCollector {
	return &WorkerCollector{ws: ws, now: time.Now}
}

// Describe implements prometheus.Collector.
func (c *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	d := workerDescs
	for _, x := range []*prometheus.Desc{d.recordsIn, d.recordsOut, d.deadLetters, d.bytesIn, d.bytesOut, d.busy, d.backpressured, d.idle,
		d.watermark, d.watermarkLag, d.stateBytes, d.stateWritten, d.statePaced, d.exchangeLag, d.exchangeInFlight, d.guestCalls, d.hostCalls,
		d.pebbleDisk, d.pebbleMemtable, d.pebbleReadAmp, d.pebbleCompactions, d.pebbleFlushes, d.pebbleWAL, d.pebbleStores,
		d.blockCacheBytes, d.blockCacheHits, d.blockMisses} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	d := workerDescs
	now := c.now()
	for _, w := range c.ws {
		id := w.ID()
		for _, m := range w.SubtaskMetrics() {
			l := []string{id, m.JobID, JobName(m.JobID), m.Tenant, m.Vertex, strconv.Itoa(m.Subtask)}
			counter := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
			}
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
			}
			counter(d.recordsIn, float64(m.RecordsIn))
			counter(d.recordsOut, float64(m.RecordsOut))
			if m.DeadLetters > 0 {
				counter(d.deadLetters, float64(m.DeadLetters))
			}
			counter(d.bytesIn, float64(m.BytesIn))
			counter(d.bytesOut, float64(m.BytesOut))
			counter(d.busy, float64(m.BusyMillis)/1000)
			counter(d.backpressured, float64(m.BackpressuredMillis)/1000)
			counter(d.idle, float64(m.IdleMillis)/1000)
			if m.HasWatermark {
				gauge(d.watermark, float64(m.Watermark)/1000)
				if m.Watermark >= MinWallClockMillis {
					gauge(d.watermarkLag, float64(now.UnixMilli()-m.Watermark)/1000)
				}
			}
			if m.StateBytes > 0 {
				gauge(d.stateBytes, float64(m.StateBytes))
			}
			if m.StateWrittenBytes > 0 {
				counter(d.stateWritten, float64(m.StateWrittenBytes))
			}
			if m.StatePacedMillis > 0 {
				counter(d.statePaced, float64(m.StatePacedMillis)/1000)
			}
			if m.RemoteInputs > 0 {
				gauge(d.exchangeLag, float64(m.ExchangeLagMillis)/1000)
			}
			if m.RemoteOutputs > 0 {
				gauge(d.exchangeInFlight, float64(m.ExchangeInFlight))
			}
		}
		for _, g := range w.GuestCalls() {
			for _, call := range g.Calls {
				ch <- prometheus.MustNewConstHistogram(d.guestCalls, call.Count, call.Sum, buckets(host.CallBuckets, call.Buckets),
					id, g.JobID, JobName(g.JobID), g.Tenant, g.Vertex, call.Call)
			}
			fns := make([]string, 0, len(g.HostCalls))
			for f := range g.HostCalls {
				fns = append(fns, f)
			}
			sort.Strings(fns)
			for _, f := range fns {
				ch <- prometheus.MustNewConstMetric(d.hostCalls, prometheus.CounterValue, float64(g.HostCalls[f]), id, g.JobID, JobName(g.JobID), g.Tenant, g.Vertex, f)
			}
		}
		for _, s := range w.StateStats() {
			l := []string{id, s.JobID, JobName(s.JobID), s.Tenant}
			ch <- prometheus.MustNewConstMetric(d.pebbleDisk, prometheus.GaugeValue, float64(s.DiskBytes), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleMemtable, prometheus.GaugeValue, float64(s.MemTableBytes), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleReadAmp, prometheus.GaugeValue, float64(s.ReadAmp), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleCompactions, prometheus.CounterValue, float64(s.Compactions), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleFlushes, prometheus.CounterValue, float64(s.Flushes), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleWAL, prometheus.CounterValue, float64(s.WALBytes), l...)
			ch <- prometheus.MustNewConstMetric(d.pebbleStores, prometheus.GaugeValue, float64(s.Stores), l...)
		}
		size, hits, misses := w.BlockCache()
		ch <- prometheus.MustNewConstMetric(d.blockCacheBytes, prometheus.GaugeValue, float64(size), id)
		ch <- prometheus.MustNewConstMetric(d.blockCacheHits, prometheus.CounterValue, float64(hits), id)
		ch <- prometheus.MustNewConstMetric(d.blockMisses, prometheus.CounterValue, float64(misses), id)
	}
}

// buckets pairs upper bounds with cumulative counts, as const histograms
// take them.
func buckets(bounds []float64, counts []uint64) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	for k, le := range bounds {
		if k < len(counts) {
			out[le] = counts[k]
		}
	}
	return out
}

// MinWallClockMillis is the least watermark (Unix ms, 2000-01-01) taken
// as wall-clock event time: a watermark before it is synthetic event
// time, such as gen's, which counts from 0 unless its start says
// otherwise, and a lag behind the clock would be decades of nothing.
const MinWallClockMillis = 946684800000

// JobName is the job_name label of a job: the name its id begins with
// (a job's id is its name, with characters an id cannot hold replaced,
// then "-" and eight hex digits).
func JobName(id string) string {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || len(id)-i-1 != 8 {
		return id
	}
	for _, r := range id[i+1:] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return id
		}
	}
	return id[:i]
}
