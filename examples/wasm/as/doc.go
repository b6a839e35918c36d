// Package asexamples holds the AssemblyScript example operator modules, one
// directory per module (wordcount, window, conformance) with its entry file
// index.ts, built with asc against the AssemblyScript guest SDK in
// guest-sdk/assemblyscript. Its tests build each module and drive it through
// wazero with a minimal in-memory host, as a check of the SDK, and compare
// every output with the Go twin's; the worker's real host lives in package
// host.
package asexamples
