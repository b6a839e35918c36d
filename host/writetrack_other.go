//go:build !(linux && (amd64 || arm64))

package host

// writeTracker is Linux's (writetrack_linux.go); elsewhere Reset compares
// every page.
type writeTracker struct{ mem []byte }

func trackWrites([]byte) *writeTracker { return nil }

func (*writeTracker) protect() bool                 { return false }
func (*writeTracker) written(func(lo, hi int)) bool { return false }
func (*writeTracker) stop()                         {}

func tracking() (uffd, pagemap int) { return -1, -1 }
