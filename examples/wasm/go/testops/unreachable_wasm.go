package main

// unreachable executes the wasm unreachable instruction: a trap that no Go
// recover can catch.
func unreachable()
