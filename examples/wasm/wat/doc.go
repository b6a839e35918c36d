// Package watexamples holds the example operator modules written by hand in
// WebAssembly text against the raw ABI, without an SDK: wordcount.wat,
// window.wat and conformance.wat, assembled with wat2wasm
// (internal/testkit/testmod.BuildWAT). Its tests assemble each module and drive it
// through wazero with a minimal in-memory host (internal/testkit/wasmtest), and
// compare what it emits with the Go twins in examples/wasm/go; the skeleton
// every module starts from, guest-sdk/wat/reference.wat, is tested here too.
package watexamples
