package cexamples_test

import (
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests drive the C examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the C SDK against the ABI (and
// run the Go twins of the examples, to compare); the worker's host is tested
// on its own.

// moduleBytes builds a module once per test binary: "NAME" is the C module
// examples/wasm/c/NAME, "go/NAME" the Go one in examples/wasm/go/NAME.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		return wasmtest.GoModule(tb, "examples/wasm/go/"+goName)
	}
	return wasmtest.CModule(tb, "examples/wasm/c/"+name)
}

// newHost instantiates the named module (see moduleBytes) against a wasmtest
// host. A C module imports nothing but the wstream module; a Go one is a
// WASI reactor.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	if strings.HasPrefix(name, "go/") {
		opts = append([]wasmtest.Option{wasmtest.WithWASI()}, opts...)
	}
	return wasmtest.New(tb, name, moduleBytes(tb, name), opts...)
}
