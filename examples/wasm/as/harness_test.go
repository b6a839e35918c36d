package asexamples_test

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests drive the AssemblyScript examples through wasmtest, a minimal
// wstream host over in-memory state and timers. They check the SDK against
// the ABI and run the Go twins of the examples, to compare.

var (
	binsMu sync.Mutex
	bins   = map[string][]byte{}
)

// moduleBytes builds a module once per test binary: "NAME" is the
// AssemblyScript module examples/wasm/as/NAME, "go/NAME" the Go one in
// examples/wasm/go/NAME.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		return wasmtest.GoModule(tb, "examples/wasm/go/"+goName)
	}
	binsMu.Lock()
	defer binsMu.Unlock()
	if b, ok := bins[name]; ok {
		return b
	}
	path, err := testmod.Build("as", name)
	if err != nil {
		tb.Fatalf("building the AssemblyScript module %s: %v", name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	bins[name] = b
	return b
}

// newHost instantiates the named module (see moduleBytes) against a wasmtest
// host. An AssemblyScript module imports nothing but the wstream module; a
// Go one is a WASI reactor.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	if strings.HasPrefix(name, "go/") {
		opts = append([]wasmtest.Option{wasmtest.WithWASI()}, opts...)
	}
	return wasmtest.New(tb, name, moduleBytes(tb, name), opts...)
}
