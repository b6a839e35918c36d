package wasmtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

var (
	cacheOnce sync.Once
	cache     wazero.CompilationCache
	wasmMu    sync.Mutex
	wasmBins  = map[string][]byte{}
)

// RuntimeConfig is the runtime configuration of a Host: a compilation cache
// shared by the test binary, and calls that stop when their context is done.
func RuntimeConfig() wazero.RuntimeConfig {
	cacheOnce.Do(func() { cache = wazero.NewCompilationCache() })
	return wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(true)
}

// GoModule returns the bytes of the Go guest module built from pkg (relative
// to the repository root, e.g. "examples/wasm/go/wordcount"), building it
// once per test binary. Instantiate it with WithWASI.
func GoModule(tb testing.TB, pkg string) []byte {
	tb.Helper()
	return moduleBytes(tb, "go:"+pkg, func() (string, error) { return testmod.BuildGo(pkg) })
}

// CModule returns the bytes of the C guest module built from the .c files
// of dir (relative to the repository root, e.g. "examples/wasm/c/wordcount")
// and the C SDK, building it once per test binary.
func CModule(tb testing.TB, dir string) []byte {
	tb.Helper()
	return moduleBytes(tb, "c:"+dir, func() (string, error) { return testmod.BuildC(dir) })
}

// CModuleFlags is CModule built with extra clang flags (testmod.BuildCFlags).
func CModuleFlags(tb testing.TB, dir string, extra ...string) []byte {
	tb.Helper()
	return moduleBytes(tb, fmt.Sprintf("c:%s%q", dir, extra), func() (string, error) { return testmod.BuildCFlags(dir, extra...) })
}

func moduleBytes(tb testing.TB, key string, build func() (string, error)) []byte {
	tb.Helper()
	wasmMu.Lock()
	defer wasmMu.Unlock()
	if b, ok := wasmBins[key]; ok {
		return b
	}
	path, err := build()
	if err != nil {
		tb.Fatalf("building the %s module: %v", key, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	wasmBins[key] = b
	return b
}

// Compile compiles wasm in a runtime of RuntimeConfig that closes when the
// test ends.
func Compile(tb testing.TB, wasm []byte) wazero.CompiledModule {
	tb.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, RuntimeConfig())
	tb.Cleanup(func() { rt.Close(context.Background()) })
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		tb.Fatal(err)
	}
	return compiled
}
