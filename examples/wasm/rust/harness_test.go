package rustexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests drive the Rust examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the Rust SDK against the ABI
// and run the Go twins of the examples, to compare; the worker's host is
// tested on its own.

// lang builds "NAME" as the Rust module examples/wasm/rust/NAME and
// "go/NAME" as the Go one in examples/wasm/go/NAME.
var lang = wasmtest.Lang{Name: "Rust", Build: func(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmtest.RustModule(tb, "examples/wasm/rust/"+name)
}}

// newHost instantiates the named module (see lang) against a wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return lang.New(tb, name, opts...)
}
