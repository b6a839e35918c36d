package asexamples_test

import "testing"

// The tests below run the operator "conform" of tests/conformance/SPEC.md
// through wasmtest, next to the Go reference module, with the checks
// wasmtest writes once for every language; the suite in tests/conformance
// runs the module through the real host.

// TestConformanceBatch checks replies in input order for many commands in
// one call, and that the SDK reads and writes their state in a few batched
// host calls.
func TestConformanceBatch(t *testing.T) { lang.CheckConformanceBatch(t) }

// TestConformanceBatchedState checks state read and written many times in
// one call, through the SDK's per-callback state cache: reads see earlier
// writes, an iteration and a timer see them, and the host holds them.
func TestConformanceBatchedState(t *testing.T) { lang.CheckConformanceBatchedState(t) }

// TestProgress checks that the SDK tells the host which record a failed
// callback was at (progress_at), for dead-letter mode.
func TestProgress(t *testing.T) { lang.CheckProgress(t) }

// TestCommits checks that the SDK marks the commit points the host asks for
// (commit), each after handing the host the output and state writes of the
// records before it.
func TestCommits(t *testing.T) { lang.CheckCommits(t) }
