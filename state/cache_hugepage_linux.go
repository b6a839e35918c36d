package state

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back the whole 2 MiB pages within the n
// bytes at p with huge pages (transparent huge pages in "madvise" mode, the
// common default, give them only to memory advised so). A large cache is
// read at random: with 4 KiB pages nearly every lookup also misses the
// processor's page translation cache, and the page-table walk that follows
// is another dependent memory read. The advice is only a hint; where the
// kernel refuses it the memory stays as it is.
func adviseHuge(p unsafe.Pointer, n int) {
	const huge = 2 << 20
	at := uintptr(p)
	from := int((at+huge-1)&^(huge-1) - at)
	to := int((at+uintptr(n))&^(huge-1) - at)
	if to <= from {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(p), n)[from:to], syscall.MADV_HUGEPAGE)
}
