//go:build !wasm

package main

// unreachable stands in for the wasm trap on other architectures, where the
// module is only compiled, never run.
func unreachable() { panic("testops: unreachable") }
