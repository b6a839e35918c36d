package goexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests drive the Go examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the Go SDK against the ABI;
// the worker's host is tested on its own.

// lang builds examples/wasm/go/NAME, a WASI reactor.
var lang = wasmtest.Lang{Name: "Go", WASI: true, Build: func(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmtest.GoModule(tb, "examples/wasm/go/"+name)
}}

// newHost instantiates the named example module against a wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return lang.New(tb, name, opts...)
}
