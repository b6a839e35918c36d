package wasmtest

import (
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// Lang is the guest language of one package of example modules. The tests
// of every such package run its modules next to their Go twins in
// examples/wasm/go, so the helpers on Lang take module names as those tests
// write them: "NAME" is the language's own module NAME, "go/NAME" the Go
// example examples/wasm/go/NAME.
type Lang struct {
	// Name is the language in failure messages, e.g. "C" or "Rust".
	Name string
	// Build returns the bytes of the language's module NAME, built once per
	// test binary.
	Build func(tb testing.TB, name string) []byte
	// WASI says the language's own modules are WASI reactors, as Go's are;
	// the others import nothing but the wstream module.
	WASI bool
	// NoStateCache says the language's conformance module reads and writes
	// state entry by entry, without an SDK's per-callback state cache
	// (abi/ABI.md, "How the SDKs use them"): WAT's.
	NoStateCache bool
}

// Module returns the bytes of the module name (see Lang).
func (l Lang) Module(tb testing.TB, name string) []byte {
	tb.Helper()
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		return GoModule(tb, "examples/wasm/go/"+goName)
	}
	return l.Build(tb, name)
}

// New instantiates the module name (see Lang) against a new Host, with
// WASI for a Go module.
func (l Lang) New(tb testing.TB, name string, opts ...Option) *Host {
	tb.Helper()
	if l.WASI || strings.HasPrefix(name, "go/") {
		opts = append([]Option{WithWASI()}, opts...)
	}
	return New(tb, name, l.Module(tb, name), opts...)
}

// ASModule returns the bytes of the AssemblyScript guest module whose entry
// file is dir/index.ts (relative to the repository root, e.g.
// "examples/wasm/as/wordcount"), built with the AssemblyScript SDK once per
// test binary.
func ASModule(tb testing.TB, dir string) []byte {
	tb.Helper()
	return moduleBytes(tb, "as:"+dir, func() (string, error) { return testmod.BuildAS(dir) })
}

// WATModule returns the bytes of the module assembled from the WAT file
// (relative to the repository root, e.g. "examples/wasm/wat/window.wat"),
// assembling it once per test binary.
func WATModule(tb testing.TB, file string) []byte {
	tb.Helper()
	return moduleBytes(tb, "wat:"+file, func() (string, error) { return testmod.BuildWAT(file) })
}
