package asexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests drive the AssemblyScript examples through wasmtest, a minimal
// wstream host over in-memory state and timers. They check the SDK against
// the ABI and run the Go twins of the examples, to compare.

// lang builds "NAME" as the AssemblyScript module examples/wasm/as/NAME and
// "go/NAME" as the Go one in examples/wasm/go/NAME.
var lang = wasmtest.Lang{Name: "AssemblyScript", Build: func(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmtest.ASModule(tb, "examples/wasm/as/"+name)
}}

// newHost instantiates the named module (see lang) against a wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return lang.New(tb, name, opts...)
}
