package host

import (
	"os"
	"runtime"

	"github.com/tetratelabs/wazero/experimental"
)

// memLimiter backs the linear memory of an instance and enforces its memory
// limit. wazero calls Allocate when it creates the memory and Reallocate for
// its initial size and from memory.grow (compiled code exits to Go for it),
// and uses the returned buffer directly, so loads and stores cost the same
// as with wazero's own buffer.
//
// The buffer lies in a reservation of address space as large as the memory
// may grow (the limit, or the module's declared maximum when lower), made
// readable and writable up to the memory's size: growing never moves or
// copies the memory, and a page costs resident memory only once the guest
// touches it. wazero's own buffer is a Go slice, which every growth copies,
// and whose pages Go zeroes (with the capacity rounded past them) whenever
// it reuses memory: a module's whole memory was resident, although a C or
// Rust guest touches a few hundred KiB of its 1 MiB stack and data. Where
// nothing can be reserved, the buffer is a Go slice.
//
// The reservation is released by release, from Instance.Close, or, for an
// instance dropped without Close, once the Instance is collected (no call
// can be running in its memory then); never by Free, which wazero also
// calls from Runtime.Close, whatever the instance's goroutine is doing.
//
// It serves one instance, used from one goroutine at a time.
type memLimiter struct {
	limit   uint64 // bytes
	buf     []byte
	res     *reservation // nil when buf is a Go slice
	cleanup runtime.Cleanup
	// refused is the size in pages of the last growth refused during the
	// call in progress (Instance.call resets it), or 0.
	refused uint32
	// over is set when the module's initial memory exceeded limit.
	// Instantiation checks the declared minimum first; this catches what
	// that check could miss, since wazero cannot take a refusal there.
	over bool
	used bool // the initial allocation was made
	// shrink, when not 0, is the size that the next Reallocate returns,
	// below the memory's: Instance.shrinkMemory.
	shrink uint64
}

var (
	_ experimental.MemoryAllocator = (*memLimiter)(nil)
	_ experimental.LinearMemory    = (*memLimiter)(nil)
)

// Allocate implements experimental.MemoryAllocator: the limiter is its own
// single LinearMemory.
func (m *memLimiter) Allocate(capacity, most uint64) experimental.LinearMemory {
	if r, err := reserve(min(most, m.limit)); err == nil {
		m.res = r
		m.cleanup = runtime.AddCleanup(m, (*reservation).release, r)
		return m
	}
	m.buf = make([]byte, 0, min(capacity, m.limit))
	return m
}

// Reallocate implements experimental.LinearMemory. Returning nil makes
// memory.grow return -1.
func (m *memLimiter) Reallocate(size uint64) []byte {
	first := !m.used
	m.used = true
	if m.shrink != 0 && m.shrink <= uint64(len(m.buf)) {
		// The bytes past it are zero already, as Reallocate expects of
		// the capacity past the length.
		if m.res != nil {
			m.buf = m.res.mem[:m.shrink:m.shrink]
		} else {
			m.buf = m.buf[:m.shrink]
		}
		return m.buf
	}
	if size > m.limit {
		if first {
			// wazero slices the initial buffer to the minimum without a nil
			// check, so a refusal would panic in the host: serve it, and let
			// instantiate reject the instance.
			m.over = true
			m.release()
			m.buf = make([]byte, size)
			return m.buf
		}
		m.refused = uint32((size + pageSize - 1) / pageSize)
		return nil
	}
	if m.res != nil {
		if err := m.res.commit(size); err == nil {
			m.buf = m.res.mem[:size:size]
			return m.buf
		}
		if !first {
			return nil // out of memory: memory.grow fails as it would in wazero
		}
		m.release()
	}
	if size <= uint64(cap(m.buf)) {
		// Memory never shrinks, so the capacity past the old length was
		// never exposed to the guest and is still zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	// Grow geometrically, so that a guest growing a page at a time is not
	// copied at every step, but never reserve past the limit.
	nb := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.limit))
	copy(nb, m.buf)
	m.buf = nb
	return m.buf
}

// Free implements experimental.LinearMemory. It keeps the reservation: see
// memLimiter.
func (m *memLimiter) Free() { m.buf = nil }

// release unmaps the reservation. The memory must not be used after it.
func (m *memLimiter) release() {
	if m.res == nil {
		return
	}
	m.cleanup.Stop()
	m.res.release()
	m.res, m.buf = nil, nil
}

// hostPage is the system's page size, the unit of residentPages.
var hostPage = os.Getpagesize()

// reservation is a range of address space of which the first committed
// bytes are readable and writable; the rest faults.
type reservation struct {
	mem       []byte
	committed uint64
}

// commit makes the first n bytes readable and writable. Pages that no one
// has written to read as zero and take no memory.
func (r *reservation) commit(n uint64) error {
	if n <= r.committed {
		return nil
	}
	if err := protect(r.mem[r.committed:n]); err != nil {
		return err
	}
	r.committed = n
	return nil
}

func (r *reservation) release() {
	if r.mem != nil {
		unmap(r.mem)
		r.mem = nil
	}
}

// resident returns one byte per host page of b, a page-aligned part of the
// reservation, whose low bit is clear for a page that is not in memory and
// so reads as zero (never written since the reservation was made, or
// dropped by dropPages); vec is reused when large enough. It returns nil
// when that cannot be known: without a reservation, off Linux, or when the
// system may swap (swapOn), as a swapped-out page is not in memory either.
// Knowing it spares reading such pages, which costs a page fault (mapping
// the zero page) the first time and a TLB miss every time after.
func (m *memLimiter) resident(b, vec []byte) []byte {
	if m.res == nil || len(b) == 0 || swapOn() {
		return nil
	}
	n := (len(b) + hostPage - 1) / hostPage
	if cap(vec) < n {
		vec = make([]byte, n)
	}
	vec = vec[:n]
	if !residentPages(b, vec) {
		return nil
	}
	return vec
}

// zero clears b, a part of the memory past what the guest uses, whose
// start and end are multiples of the page size. Its first keep bytes are
// cleared page by page where they are not zero already: the guest is
// likely to grow into them again soon (a reset guest regrows its heap), and
// a page handed back costs a page fault and the kernel's zeroing when it is
// touched again, several times a clear of a page in the cache. Past keep,
// where the memory is a reservation, its pages go back to the system (they
// read as zero and take no memory until touched again).
func (m *memLimiter) zero(b []byte, keep int) {
	if len(b) == 0 {
		return
	}
	keep = min(keep, len(b))
	// Pages never touched are skipped: writing one would give it memory,
	// and even a read maps a zero page (a huge one, with transparent huge
	// pages) that counts as resident.
	var in []byte
	if keep > 0 {
		in = m.resident(b[:keep], nil)
	}
	for off := 0; off < keep; off += resetPage {
		if in != nil && in[off/hostPage]&1 == 0 {
			continue
		}
		if page := b[off:min(off+resetPage, keep)]; !isZero(page) {
			clear(page)
		}
	}
	b = b[keep:]
	if len(b) == 0 {
		return
	}
	if m.res != nil && dropPages(b) {
		return
	}
	clear(b)
}
