//go:build linux || darwin

package host

import (
	"errors"
	"math"
	"syscall"
)

// reserve maps n bytes of address space that fault until committed, and
// that count against no memory limit until then.
func reserve(n uint64) (*reservation, error) {
	if n == 0 || n > math.MaxInt {
		return nil, errors.New("host: no address space to reserve")
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	return &reservation{mem: b}, nil
}

func protect(b []byte) error { return syscall.Mprotect(b, syscall.PROT_READ|syscall.PROT_WRITE) }

func unmap(b []byte) { _ = syscall.Munmap(b) }
