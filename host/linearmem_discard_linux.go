package host

import (
	"bytes"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// dropPages drops the pages of b, a page-aligned range of a private
// anonymous mapping: they read as zero afterwards. It reports success.
func dropPages(b []byte) bool { return syscall.Madvise(b, syscall.MADV_DONTNEED) == nil }

// residentPages fills vec with one byte per page of b, a page-aligned range
// of a mapping, whose low bit says whether the page is in memory. It
// reports success.
func residentPages(b, vec []byte) bool {
	_, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	return e == 0
}

// swapChecked is when swapOn last read /proc/swaps (UnixNano), swapSeen
// what it found.
var (
	swapChecked atomic.Int64
	swapSeen    atomic.Bool
)

// swapOn reports whether the system may swap, as /proc/swaps said at most
// a second ago: a page that is not in memory is then not known to be zero
// (never written, or dropped), as it may be swapped out. An unreadable
// /proc/swaps counts as swap.
func swapOn() bool {
	now := time.Now().UnixNano()
	if now-swapChecked.Load() < int64(time.Second) {
		return swapSeen.Load()
	}
	b, err := os.ReadFile("/proc/swaps")
	// A header line, and a line per swap area.
	on := err != nil || bytes.Count(bytes.TrimSpace(b), []byte("\n")) > 0
	swapSeen.Store(on)
	swapChecked.Store(now)
	return on
}
