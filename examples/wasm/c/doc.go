// Package cexamples holds the C example operator modules, one directory of C
// sources per module (wordcount, mapfilter, testops), built with clang
// --target=wasm32 against the C guest SDK in guest-sdk/c. Its tests build
// each module and drive it through wazero with a minimal in-memory host, as a
// check of the C guest SDK; the worker's real host lives in package host.
package cexamples
