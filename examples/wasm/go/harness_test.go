package goexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests drive the Go examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the Go SDK against the ABI;
// the worker's host is tested on its own.

// moduleBytes builds examples/wasm/go/<name> once per test binary.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmtest.GoModule(tb, "examples/wasm/go/"+name)
}

// newHost instantiates the named example module, a WASI reactor, against a
// wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return wasmtest.New(tb, name, moduleBytes(tb, name), append([]wasmtest.Option{wasmtest.WithWASI()}, opts...)...)
}
