package host

import (
	"bytes"
	"errors"
	"fmt"
	"maps"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/host/instrument"
)

// ErrNoReset reports that an instance cannot be reset: its module cannot
// be (instrument.Result.NoReset), it holds no snapshot, or its last
// failure was not one that a reset undoes. The instance must be replaced.
var ErrNoReset = errors.New("host: the instance cannot be reset")

// snapshot is an instance's state saved by Snapshot: the guest's (its
// memory and mutable globals) and the host's that must agree with it.
type snapshot struct {
	// size is the memory's size; mem holds its pages that are not all
	// zero (a Go guest's memory after open is about 40% zero pages), and
	// at says, per page of resetPage bytes, where in mem it is (-1: zero).
	size    uint32
	mem     []byte
	at      []int32
	globals []uint64
	// The host side: the argument arena that the guest allocated, the
	// progress_at address it named, the timers it registered (for the
	// quotas) and its operator slots.
	arenaPtr, arenaCap uint32
	progress           uint32
	timers             timerBook
	slots              []slotSnapshot
}

type slotSnapshot struct {
	state         slotState
	cascade       int
	cascadeDomain int32
	cascadeWM     int64
}

// Snapshot saves the instance's state, so that Reset can bring it back
// after a trap instead of a new instance being made and its operators
// opened again. It copies the guest's whole memory (MemoryBytes), and has
// the kernel track the writes to it where it can: take it once the
// operators are open, between calls. It fails with ErrNoReset,
// wrapped, when the module's instances cannot be reset, and when the
// instance is not idle and usable.
func (i *Instance) Snapshot() error {
	if i.noReset != "" {
		return fmt.Errorf("%w: %s", ErrNoReset, i.noReset)
	}
	if err := i.usable(nil, "snapshot"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoReset, err)
	}
	if i.cur != nil {
		return fmt.Errorf("%w: a call is in progress", ErrNoReset)
	}
	if i.globals == nil {
		gs := make([]api.MutableGlobal, len(i.globalIdx))
		for k, g := range i.globalIdx {
			mg, ok := i.api.ExportedGlobal(instrument.GlobalExport(g)).(api.MutableGlobal)
			if !ok {
				return fmt.Errorf("%w: the module does not export global %d", ErrNoReset, g)
			}
			gs[k] = mg
		}
		i.globals = gs
	}
	buf, ok := i.mem.Read(0, i.mem.Size())
	if !ok {
		return fmt.Errorf("%w: its memory cannot be read", ErrNoReset)
	}
	sn := i.snap
	if sn == nil {
		sn = &snapshot{}
	}
	sn.size = uint32(len(buf))
	// The pages to keep are found first, so that the copy goes into one
	// allocation of the right size: grown page by page, the copy of a Go
	// guest's 2 MiB took a dozen milliseconds of doubling and page faults,
	// on the first trap of every subtask that meets one.
	sn.at = sn.at[:0]
	kept := int32(0)
	in := i.grow.resident(buf, i.inMem)
	i.inMem = in
	for off := 0; off < len(buf); off += resetPage {
		if (in != nil && in[off/hostPage]&1 == 0) || isZero(buf[off:min(off+resetPage, len(buf))]) {
			sn.at = append(sn.at, -1)
			continue
		}
		sn.at = append(sn.at, kept)
		kept++
	}
	if n := int(kept) * resetPage; cap(sn.mem) >= n {
		sn.mem = sn.mem[:n]
	} else {
		sn.mem = make([]byte, n)
	}
	for k, at := range sn.at {
		if at < 0 {
			continue
		}
		// A short last page is padded with zeros, so that every kept page
		// starts at a multiple of resetPage.
		dst := sn.mem[int(at)*resetPage : int(at+1)*resetPage]
		clear(dst[copy(dst, buf[k*resetPage:min((k+1)*resetPage, len(buf))]):])
	}
	sn.globals = sn.globals[:0]
	for _, g := range i.globals {
		sn.globals = append(sn.globals, g.Get())
	}
	i.trackWrites(sn.size)
	sn.arenaPtr, sn.arenaCap, sn.progress = i.arenaPtr, i.arenaCap, i.progress
	sn.timers = i.timers.clone()
	sn.slots = sn.slots[:0]
	for _, s := range i.slots {
		sn.slots = append(sn.slots, slotSnapshot{s.state, s.cascade, s.cascadeDomain, s.cascadeWM})
	}
	i.snap = sn
	return nil
}

// SnapshotBytes is the size of the instance's snapshot: the memory it
// holds on to for Reset (0 without one).
func (i *Instance) SnapshotBytes() int {
	if i.snap == nil {
		return 0
	}
	return len(i.snap.mem) + 4*len(i.snap.at)
}

// CanReset reports whether Reset would bring the instance back: it holds a
// snapshot, its last failure was a trap (not a deadline, cancellation,
// quota or exit, after which the instance is closed), and its memory is
// below its maximum (see shrinkMemory).
func (i *Instance) CanReset() bool {
	if i.snap == nil || !i.trapped || i.closed || i.cc.ended.Load() != ctxLive || len(i.slots) != len(i.snap.slots) {
		return false
	}
	// shrinkMemory grows the memory by a page, which its maximum must allow.
	max, _ := i.mem.Definition().Max()
	return i.mem.Size() <= i.snap.size || uint64(i.mem.Size()/pageSize)+1 <= uint64(max)
}

// Reset brings an instance that trapped back to its snapshot, as if the
// calls since had not run: the guest's memory (its size too) and mutable
// globals, and the host's view of the guest (argument arena, progress_at
// address, registered timers, operator slots). Its operators then take
// calls again without being opened. It fails with ErrNoReset when
// CanReset is false, and the instance stays unusable.
func (i *Instance) Reset() error {
	if !i.CanReset() {
		return ErrNoReset
	}
	sn := i.snap
	size := sn.size
	if i.mem.Size() > size && !i.shrinkMemory(size) {
		return ErrNoReset
	}
	buf, ok := i.mem.Read(0, size)
	if !ok {
		return ErrNoReset
	}
	// Page by page, writing only the pages that changed: between two
	// traps a guest touches a fraction of its memory, and comparing reads
	// at memory speed where copying would also write every page. Where
	// the kernel tracks writes, only the pages written since the snapshot
	// are compared; elsewhere every page is, but that a page zero at the
	// snapshot and still not in memory was not written since: it is not
	// read (a Go guest's memory has a third of its pages so).
	if i.track == nil || !i.track.written(func(lo, hi int) {
		for off := lo - lo%resetPage; off < hi; off += resetPage {
			sn.restore(buf, off)
		}
	}) {
		in := i.grow.resident(buf, i.inMem)
		i.inMem = in
		for off := 0; off < len(buf); off += resetPage {
			if in != nil && sn.at[off/resetPage] < 0 && in[off/hostPage]&1 == 0 {
				continue
			}
			sn.restore(buf, off)
		}
	}
	for k, g := range i.globals {
		g.Set(sn.globals[k])
	}
	i.arenaPtr, i.arenaCap, i.progress = sn.arenaPtr, sn.arenaCap, sn.progress
	i.timers = sn.timers.clone()
	for k, s := range i.slots {
		ss := sn.slots[k]
		s.state, s.cascade, s.cascadeDomain, s.cascadeWM = ss.state, ss.cascade, ss.cascadeDomain, ss.cascadeWM
	}
	i.broken, i.trapped = nil, false
	i.cur, i.phase, i.out, i.inBatch = nil, phaseIdle, nil, false
	i.failed, i.failMsg, i.fatal = false, i.failMsg[:0], nil
	i.grow.refused = 0
	i.resets++
	i.fetchFunctions()
	return nil
}

// restore puts back the page of buf, the memory, at off as the snapshot
// holds it, writing it only where it differs.
func (sn *snapshot) restore(buf []byte, off int) {
	page := buf[off:min(off+resetPage, len(buf))]
	at := sn.at[off/resetPage]
	if at < 0 {
		if !isZero(page) {
			clear(page)
		}
		return
	}
	if src := sn.mem[int(at)*resetPage:][:len(page)]; !bytes.Equal(page, src) {
		copy(page, src)
	}
}

// trackWrites has the kernel track the writes to the first size bytes of
// the memory from now on, where it can (writeTracker): the pages a reset
// must compare are then the pages written since.
func (i *Instance) trackWrites(size uint32) {
	if t := i.track; t != nil {
		if len(t.mem) == int(size) && t.protect() {
			return
		}
		t.stop()
		i.track = nil
	}
	if i.grow.res != nil && uint64(size) <= i.grow.res.committed {
		i.track = trackWrites(i.grow.res.mem[:size])
	}
}

// noWriteTracking turns writeTracker off, for tests of the other path.
var noWriteTracking bool

// shrinkMemory gives the memory back its size at the snapshot, zeroing
// what lies past it, as fresh memory reads when it grows again. Memory
// never shrinks in WebAssembly, and the restored guest knows nothing of
// the pages past the snapshot: a C allocator would grow past them, a Go
// runtime would grow the memory as much again and lose the difference,
// and every reset would leave the instance with less room. wazero has no
// call for it, but takes as the memory whatever buffer the allocator's
// Reallocate returns when it grows one (wazero 1.12,
// internal/wasm/memory.go, MemoryInstance.Grow; TestResetWAT checks it):
// so the instance asks to grow by a page, and memLimiter returns the
// smaller buffer.
func (i *Instance) shrinkMemory(size uint32) bool {
	buf, ok := i.mem.Read(0, i.mem.Size())
	if !ok {
		return false
	}
	i.grow.zero(buf[size:], keepPastSnapshot)
	i.grow.shrink = uint64(size)
	_, ok = i.mem.Grow(1)
	i.grow.shrink = 0
	return ok && i.mem.Size() == size
}

// keepPastSnapshot bounds the memory past its size at the snapshot that a
// reset instance keeps (zeroed) rather than hands back to the system: a Go
// guest regrows its heap after every reset, and pages handed back fault
// again (memLimiter.zero). An instance that grew further before it trapped
// (a flood) gives the rest back.
const keepPastSnapshot = 16 << 20

// resetPage is the unit Reset compares and copies, and Snapshot leaves out
// when it is all zero.
const resetPage = 4 << 10

var zeroPage [resetPage]byte

// isZero reports whether page, at most resetPage bytes, is all zero.
func isZero(page []byte) bool { return bytes.Equal(page, zeroPage[:len(page)]) }

// Resets counts the times Reset brought the instance back.
func (i *Instance) Resets() int { return i.resets }

// clone returns a copy of the book that shares nothing with it.
func (b *timerBook) clone() timerBook {
	return timerBook{seed: b.seed, pending: maps.Clone(b.pending), perKey: maps.Clone(b.perKey), bytes: b.bytes}
}
