//go:build !linux && !darwin

package host

import "errors"

// reserve fails: without mmap, linear memories are Go slices.
func reserve(uint64) (*reservation, error) {
	return nil, errors.New("host: reserving address space is not supported on this system")
}

func protect([]byte) error { return errors.New("host: not supported") }

func unmap([]byte) {}
