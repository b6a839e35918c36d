// Package testkit holds the harnesses that tests, benchmarks and build
// scripts use, kept apart from the production helpers in internal/ so that
// the binary never links them:
//
//   - natstest starts embedded NATS JetStream servers for tests.
//   - natsleaf starts a JetStream hub behind a leaf node, so a test can lose
//     the pulls parked on the hub without its clients being told.
//   - objfault wraps a real object store so that its requests meet faults
//     of the moment (429, timeouts, no responders), deterministically.
//   - testmod builds the example and test WASM modules (Go, C, Rust,
//     AssemblyScript, WAT) and caches them by content.
//   - wasmtest is a minimal host that drives guest modules next to their Go
//     twins (exports, imports, conformance).
//   - buildexamples (a command, `make examples`) builds every example module.
//   - benchreport (a command, `make bench`) prints each performance target
//     against its bound.
//
// TestProductionImportsNoHarness keeps the rule: no non-test build of a
// package outside internal/testkit imports it.
package testkit
