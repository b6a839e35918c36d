// Package cexamples holds the C example operator modules, one directory of C
// sources per module (wordcount, mapfilter, window, testops, conformance),
// built with clang --target=wasm32 against the C guest SDK in guest-sdk/c.
// Its tests build each module and drive it through wazero with a minimal
// in-memory host, as a check of the C guest SDK; the worker's real host
// lives in package host. wordcount, mapfilter and window are twins of the Go
// examples and must emit the same records and keep the same state bytes;
// conformance is the operator of tests/conformance/SPEC.md, which the suite
// in tests/conformance runs through the real host.
package cexamples
