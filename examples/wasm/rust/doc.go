// Package rustexamples holds the Rust example operator modules, one
// directory per module with its crate root main.rs (wordcount, window,
// conformance, and testops for the SDK's tests), built with Debian's rustc
// for wasm32-unknown-unknown against the Rust guest SDK in guest-sdk/rust.
// Its tests build each module and drive it through wazero with a minimal
// in-memory host, next to the Go twins, as a check of the Rust guest SDK;
// the worker's real host lives in package host.
package rustexamples
