//go:build !linux

package host

// dropPages does nothing: other systems' MADV_DONTNEED need not zero the
// pages (darwin's does not), so the caller clears them.
func dropPages([]byte) bool { return false }

// residentPages reports nothing: the caller reads every page.
func residentPages(b, vec []byte) bool { return false }

// swapOn reports swap: the caller reads every page.
func swapOn() bool { return true }
