package rustexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests below run the operator "conform" of tests/conformance/SPEC.md
// in examples/wasm/rust/conformance through wasmtest, next to the Go reference
// module (examples/wasm/go/conformance), which must answer, keep state and
// fail alike; the checks are wasmtest's, written once for every language.
// The suite in tests/conformance runs the module through the real host.

// TestConformance runs every command of the SPEC on the Rust module and on
// the Go one, checks each reply and that both modules emit, keep and log
// the same.
func TestConformance(t *testing.T) { lang.CheckConformance(t) }

// TestConformanceBatch checks that replies come in input order, after the
// records a command emits, for many commands and records in one call, with
// the output flushed early past 64 KiB.
func TestConformanceBatch(t *testing.T) { lang.CheckConformanceBatch(t) }

// TestConformanceFailures checks every way a command fails: the call fails
// with GUEST_ERROR and the same message as the Go module's, naming the
// record, and emits nothing. The Rust SDK quotes a command that is not
// UTF-8 as Go does, which the C one does not: only Rust checks it.
func TestConformanceFailures(t *testing.T) {
	lang.CheckConformanceFailures(t, wasmtest.ConformFailure{Cmd: "\xffbad\u00a0", Want: `unknown command "\xffbad\u00a0"`})
}

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
