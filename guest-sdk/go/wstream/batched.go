//go:build !wstream_unbatched

package wstream

// batchedState turns on the per-callback state cache and with it the
// batched state imports (cache.go). Build with -tags wstream_unbatched for
// a module that imports neither, for hosts without them.
const batchedState = true
