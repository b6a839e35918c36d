//go:build !linux

package state

import "unsafe"

// adviseHuge does nothing where there is no madvise(MADV_HUGEPAGE).
func adviseHuge(p unsafe.Pointer, n int) {}
