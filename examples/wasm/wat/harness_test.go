package watexamples_test

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/internal/testkit/wasmtest"
)

// The tests drive the WAT modules through wasmtest, a minimal wstream host
// over in-memory state and timers, and run the Go twins of the examples to
// compare; the worker's host is tested on its own.

// referenceFile is the skeleton module of guest-sdk/wat.
const referenceFile = "guest-sdk/wat/reference.wat"

// watFile is the source of the module name: "reference" is the skeleton,
// anything else examples/wasm/wat/NAME.wat.
func watFile(name string) string {
	if name == "reference" {
		return referenceFile
	}
	return testmod.WATDir + "/" + name + ".wat"
}

// lang assembles "NAME" from watFile(NAME) and builds "go/NAME" as the Go
// module in examples/wasm/go/NAME.
var lang = wasmtest.Lang{Name: "WAT", NoStateCache: true, Build: func(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmtest.WATModule(tb, watFile(name))
}}

// newHost instantiates the named module (see lang) against a wasmtest host.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	return lang.New(tb, name, opts...)
}
