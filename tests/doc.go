// Package tests holds end-to-end tests: they build the wstream binary and the
// example modules, run real jobs on the embedded default (NATS JetStream,
// Pebble, wazero) and check what a user sees: output, summaries, errors and
// exit codes.
package tests
