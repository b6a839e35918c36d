// Package bench holds the throughput benchmarks recorded in BENCHMARKS.md.
// Each runs the same pipeline through the real engine (embedded NATS,
// coordinator, worker, Pebble, wazero) with native Go operators and with the
// WASM operators of the Go examples, side by side in one run, and reports
// records/s; the ratio is the figure the targets are stated in.
//
//	go test -run '^$' -bench . -benchtime 3x ./bench/
package bench
