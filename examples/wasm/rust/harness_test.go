package rustexamples_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests drive the Rust examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the Rust SDK against the ABI
// and run the Go twins of the examples, to compare; the worker's host is
// tested on its own.

// moduleBytes builds a module once per test binary: "NAME" is the Rust
// module examples/wasm/rust/NAME, "go/NAME" the Go one in examples/wasm/go/NAME.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		return wasmtest.GoModule(tb, "examples/wasm/go/"+goName)
	}
	return wasmtest.RustModule(tb, "examples/wasm/rust/"+name)
}

// newHost instantiates the named module (see moduleBytes) against a wasmtest
// host. A Rust module imports nothing but the wstream module; a Go one is a
// WASI reactor.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	if strings.HasPrefix(name, "go/") {
		opts = append([]wasmtest.Option{wasmtest.WithWASI()}, opts...)
	}
	return wasmtest.New(tb, name, moduleBytes(tb, name), opts...)
}

// format writes records as "PORT KEY=VALUE@TS".
func format(recs []abi.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %s=%s@%d", r.Port, r.Key, r.Value, r.Timestamp))
	}
	return out
}

func wantRecords(t *testing.T, what string, got []abi.Record, want ...string) {
	t.Helper()
	if g := format(got); !slices.Equal(g, want) {
		t.Fatalf("%s emitted\n%.3000s\nwant\n%.3000s", what, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// wantFailure checks that a call failed with status and exactly one fail
// message containing want.
func wantFailure(t *testing.T, h *wasmtest.Host, what string, st int32, err error, status int32, want string) {
	t.Helper()
	if err != nil || st != status {
		t.Fatalf("%s: status %d (%s), error %v; want %d (%s)", what, st, abi.StatusText(st), err, status, abi.StatusText(status))
	}
	if len(h.Failures) != 1 || !strings.Contains(h.Failures[0], want) {
		t.Fatalf("%s: failures %q, want one containing %q", what, h.Failures, want)
	}
	h.Failures = nil
}
