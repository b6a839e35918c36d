//go:build linux && (amd64 || arm64)

package host

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux's interfaces for tracking writes without a fault handler
// (include/uapi/linux/userfaultfd.h and fs.h, 6.7 and later). The ioctl
// numbers are _IOWR/_IOR encodings, the same on amd64 and arm64.
const (
	uffdUserModeOnly   = 1 // UFFD_USER_MODE_ONLY: allowed without privileges
	uffdAPI            = 0xAA
	uffdFeatWPUnpopul  = 1 << 13 // UFFD_FEATURE_WP_UNPOPULATED
	uffdFeatWPAsync    = 1 << 15 // UFFD_FEATURE_WP_ASYNC
	uffdioAPI          = 0xC018AA3F
	uffdioRegister     = 0xC020AA00
	uffdioUnregister   = 0x8010AA01
	uffdioWriteProtect = 0xC018AA06
	uffdRegisterModeWP = 2
	uffdWriteProtectWP = 1
	pagemapScan        = 0xC0606610
	pageIsWritten      = 1 << 1
	scanRegions        = 64
	scanCheckWPAsync   = 1 << 1 // PM_SCAN_CHECK_WPASYNC
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdRange struct{ start, len uint64 }

type uffdioRegisterArg struct {
	rng    uffdRange
	mode   uint64
	ioctls uint64
}

type uffdioWriteProtectArg struct {
	rng  uffdRange
	mode uint64
}

type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages   uint64
	categoryInverted, categoryMask, categoryAnyOf, returnMask uint64
}

type pageRegion struct{ start, end, categories uint64 }

// tracking is the process's userfaultfd in asynchronous write-protect mode
// and its page map, or -1 for both when the kernel cannot track writes
// (before 6.7, or userfaultfd forbidden): one of each serves every tracked
// range.
var tracking = sync.OnceValues(func() (uffd, pagemap int) {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	if e != 0 {
		return -1, -1
	}
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatWPAsync | uffdFeatWPUnpopul}
	if ioctl(int(fd), uffdioAPI, unsafe.Pointer(&api)) != nil {
		unix.Close(int(fd))
		return -1, -1
	}
	pm, err := unix.Open("/proc/self/pagemap", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(int(fd))
		return -1, -1
	}
	return int(fd), pm
})

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// writeTracker lists the pages of a range of a private anonymous mapping
// written since it was write-protected. The kernel resolves a write to a
// protected page itself (no fault handler runs) and marks the page written,
// and PAGEMAP_SCAN lists the pages so marked. A page stays unprotected once
// written: protecting it again would cost an ioctl with a TLB shootdown, and
// its next write a fault (16–28 µs on the virtual machines measured), where
// comparing a page a guest keeps writing costs less than a microsecond.
type writeTracker struct {
	uffd, pagemap int
	mem           []byte
	regions       []pageRegion
}

// trackWrites registers mem, a page-aligned range of a private anonymous
// mapping that nothing else tracks, and write-protects it. It returns nil
// when the kernel cannot track writes, or when turned off.
func trackWrites(mem []byte) *writeTracker {
	uffd, pm := tracking()
	if uffd < 0 || noWriteTracking || len(mem) == 0 || len(mem)%hostPage != 0 {
		return nil
	}
	t := &writeTracker{uffd: uffd, pagemap: pm, mem: mem}
	reg := uffdioRegisterArg{rng: t.rng(), mode: uffdRegisterModeWP}
	if ioctl(uffd, uffdioRegister, unsafe.Pointer(&reg)) != nil {
		return nil
	}
	if !t.protect() {
		t.stop()
		return nil
	}
	return t
}

func (t *writeTracker) rng() uffdRange {
	return uffdRange{uint64(uintptr(unsafe.Pointer(&t.mem[0]))), uint64(len(t.mem))}
}

// protect write-protects the whole range again: no page of it counts as
// written afterwards. It reports success.
func (t *writeTracker) protect() bool {
	wp := uffdioWriteProtectArg{rng: t.rng(), mode: uffdWriteProtectWP}
	return ioctl(t.uffd, uffdioWriteProtect, unsafe.Pointer(&wp)) == nil
}

// written calls fn with the offsets of each run of pages written since the
// range was protected, in order. It reports whether the list was complete;
// when it is not, fn may have seen part of it.
func (t *writeTracker) written(fn func(lo, hi int)) bool {
	if cap(t.regions) < scanRegions {
		t.regions = make([]pageRegion, scanRegions)
	}
	base := uint64(uintptr(unsafe.Pointer(&t.mem[0])))
	end := base + uint64(len(t.mem))
	for start := base; start < end; {
		arg := pmScanArg{
			size: uint64(unsafe.Sizeof(pmScanArg{})), flags: scanCheckWPAsync,
			start: start, end: end,
			vec: uint64(uintptr(unsafe.Pointer(&t.regions[0]))), vecLen: uint64(len(t.regions)),
			categoryMask: pageIsWritten, returnMask: pageIsWritten,
		}
		n, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.pagemap), pagemapScan, uintptr(unsafe.Pointer(&arg)))
		if e != 0 || arg.walkEnd <= start || arg.walkEnd > end {
			return false
		}
		for _, r := range t.regions[:n] {
			if r.start < start || r.end > end || r.start >= r.end {
				return false
			}
			fn(int(r.start-base), int(r.end-base))
		}
		start = arg.walkEnd
	}
	return true
}

// stop unregisters the range. Unmapping it does as much.
func (t *writeTracker) stop() {
	rng := t.rng()
	_ = ioctl(t.uffd, uffdioUnregister, unsafe.Pointer(&rng))
}
