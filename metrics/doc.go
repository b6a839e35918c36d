// Package metrics serves a process's Prometheus metrics: one registry per
// process (Registry), with collectors for what the process runs.
//
//   - Workers: per subtask, records and bytes in and out, busy,
//     backpressured and idle time, watermark lag, keyed state size and the
//     exchange's lag between workers; per guest operator vertex, a
//     histogram of guest call durations and the host functions called; per
//     job, the Pebble figures of its keyed state, and the worker's shared
//     block cache.
//   - The coordinator: jobs by state, restarts, checkpoints completed and
//     failed, a histogram of checkpoint durations and the latest
//     checkpoint's sizes, and the registered workers.
//   - The embedded NATS server, when the process runs one: its traffic and
//     connections (varz) and JetStream's streams, consumers and storage
//     (jsz).
//   - Go's runtime and the process (CPU, memory, file descriptors).
//
// Every collector reads its figures when Prometheus scrapes: the worker's
// subtasks keep plain atomic counters and time their batches, never their
// records, and nothing is pushed to Prometheus types on the data path. A
// job's series are present while the job runs and leave with it, so that
// finished jobs do not pile up labels. docs/metrics.md lists every metric.
package metrics
