package watexamples_test

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/internal/wasmtest"
)

// The tests drive the WAT modules through wasmtest, a minimal wstream host
// over in-memory state and timers, and run the Go twins of the examples to
// compare; the worker's host is tested on its own.

// referenceFile is the skeleton module of guest-sdk/wat.
const referenceFile = "guest-sdk/wat/reference.wat"

var (
	watMu   sync.Mutex
	watBins = map[string][]byte{}
)

// watFile is the source of the module name: "reference" is the skeleton,
// anything else examples/wasm/wat/NAME.wat.
func watFile(name string) string {
	if name == "reference" {
		return referenceFile
	}
	return testmod.WATDir + "/" + name + ".wat"
}

// moduleBytes assembles a module once per test binary: "NAME" is the WAT
// module (see watFile), "go/NAME" the Go one in examples/wasm/go/NAME.
func moduleBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	if goName, ok := strings.CutPrefix(name, "go/"); ok {
		return wasmtest.GoModule(tb, "examples/wasm/go/"+goName)
	}
	watMu.Lock()
	defer watMu.Unlock()
	if b, ok := watBins[name]; ok {
		return b
	}
	b, err := os.ReadFile(testmod.WATModule(tb, watFile(name)))
	if err != nil {
		tb.Fatal(err)
	}
	watBins[name] = b
	return b
}

// newHost instantiates the named module (see moduleBytes) against a wasmtest
// host. A WAT module imports nothing but the wstream module; a Go one is a
// WASI reactor.
func newHost(tb testing.TB, name string, opts ...wasmtest.Option) *wasmtest.Host {
	tb.Helper()
	if strings.HasPrefix(name, "go/") {
		opts = append([]wasmtest.Option{wasmtest.WithWASI()}, opts...)
	}
	return wasmtest.New(tb, name, moduleBytes(tb, name), opts...)
}
