package cexamples_test

import (
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests drive the C examples through wasmtest, a minimal wstream host
// over in-memory state and timers. They check the C SDK against the ABI (and
// run the Go twins of the examples, to compare); the worker's host is tested
// on its own.

// lang builds "NAME" as the C module examples/wasm/c/NAME and "go/NAME" as
// the Go one in examples/wasm/go/NAME; "NAME-nosimd" is NAME built without
// wasm's SIMD instructions, for the code an example has for that case, and
// "NAME-unbatched" NAME with the SDK's state cache off
// (WSTREAM_UNBATCHED_STATE), every state call crossing the ABI at once.
var lang = wasmtest.Lang{Name: "C", Build: func(tb testing.TB, name string) []byte {
	tb.Helper()
	if base, ok := strings.CutSuffix(name, "-nosimd"); ok {
		return wasmtest.CModuleFlags(tb, "examples/wasm/c/"+base, "-mno-simd128")
	}
	if base, ok := strings.CutSuffix(name, "-unbatched"); ok {
		return wasmtest.CModuleFlags(tb, "examples/wasm/c/"+base, "-DWSTREAM_UNBATCHED_STATE")
	}
	return wasmtest.CModule(tb, "examples/wasm/c/"+name)
}}

// newHost instantiates the named module (see lang) against a wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return lang.New(tb, name, opts...)
}
