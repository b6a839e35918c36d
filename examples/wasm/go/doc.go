// Package goexamples holds the Go example operator modules, one main package
// per directory (wordcount, mapfilter, window, testops), built for
// GOOS=wasip1 GOARCH=wasm with -buildmode=c-shared. Its tests build each
// module and drive it through wazero with a minimal in-memory host, as a
// check of the Go guest SDK; the worker's real host lives in package host.
package goexamples
