// Package wasmtest is a minimal wstream host for driving guest modules in
// tests. It implements every import of abi/ABI.md over in-memory state and
// timers, without key groups, limits, checkpoints or persistence, and records
// what the guest emits, logs and fails with so that tests can check a guest
// SDK and its example modules against the ABI.
//
// It is not the worker's host: the real host lives in package host and is
// tested on its own. Only tests may import this package.
//
// A test builds a module (GoModule, CModule), instantiates it with New and
// calls its exports through the Host's methods (MustOpen, MustProcess,
// Advance, Fire, MustClose), then inspects the Host's fields (Out via Take,
// State, Timers, Failures, Logs, Stderr and the call counters). A Lang
// names the modules of one guest language next to their Go twins. The
// checks in twins.go, compare.go, window.go, exports.go, conformance.go and
// testops.go are written once here for the example packages of every
// language.
package wasmtest
