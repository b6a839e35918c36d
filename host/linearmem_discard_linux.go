package host

import (
	"syscall"
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
