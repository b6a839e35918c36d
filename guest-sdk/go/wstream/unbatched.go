//go:build wstream_unbatched

package wstream

// batchedState is off: every state call crosses the ABI at once (cache.go).
const batchedState = false
