package wasmtest

import (
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// RustModule returns the bytes of the Rust guest module whose crate root is
// dir/main.rs (relative to the repository root, e.g.
// "examples/wasm/rust/wordcount"), linked with the Rust SDK, building it
// once per test binary.
func RustModule(tb testing.TB, dir string) []byte {
	tb.Helper()
	return moduleBytes(tb, "rust:"+dir, func() (string, error) { return testmod.BuildRust(dir) })
}
