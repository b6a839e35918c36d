package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wstream/wstream/abi"
)

// LSM shape, tuned for incremental checkpoints; see the Pebble options in
// Open.
const (
	// l0CompactionDepth is the number of L0 sublevels (flushes: one per
	// checkpoint when the writes between checkpoints fit the memtable)
	// that trigger an L0 compaction. The state is rewritten, and uploaded
	// again, once per that many checkpoints: 1/56 ≈ 1.8% of the state per
	// checkpoint on average, plus the changed entries themselves. Deeper
	// L0s cost point reads more bloom-filter probes; at 56 the keyed
	// pipeline benchmark shows no slowdown.
	l0CompactionDepth = 56
	// lbaseMaxBytes is the largest base level (the level L0 is compacted
	// into): a state below it lives in L0 and the bottom level only. A
	// larger state gets intermediate levels, which bounds the size of one
	// L0 compaction.
	lbaseMaxBytes = 4 << 30
	// maxManifestFileSize bounds the MANIFEST, which every checkpoint
	// copies in full.
	maxManifestFileSize = 256 << 10
	// budgetMemTableSize is the memtable of a store on a worker's budget
	// without a tenant's memory bound. Every memtable flush is an L0
	// sublevel that a point read of a key not in the cache looks in until
	// L0 is compacted: with Pebble's 4 MiB, a keyed count growing its
	// state flushed every few seconds and its reads of new keys looked in
	// up to 56 tables each. Pebble starts a memtable small and grows it
	// to this as writes come, so a small store does not hold it.
	budgetMemTableSize = 64 << 20
)

// ErrClosed is returned by every call on a Store, or on one of its
// VertexStates, after Close.
var ErrClosed = errors.New("state: store closed")

// DefaultCacheEntries is the hot-key cache size when Options.CacheEntries
// is 0.
const DefaultCacheEntries = 16384

// Options configure Open.
type Options struct {
	// Dir is the Pebble directory of this subtask; it is created if missing.
	Dir string
	// MaxParallelism is the number of key groups (abi.DefaultMaxParallelism
	// when 0).
	MaxParallelism int
	// KeyGroups are the key groups this subtask owns.
	KeyGroups abi.KeyGroupRange
	// Cache is an optional block cache shared by a worker's stores. Pebble
	// takes its own reference; the caller keeps and releases theirs.
	Cache *pebble.Cache
	// CacheEntries bounds the hot-key cache (entries, DefaultCacheEntries
	// when 0). Entries written since the last Flush are held in addition;
	// values over 64 KiB are cached only until they are flushed. With a
	// Budget and CacheEntries 0, the cache is bounded by the store's
	// share of the budget, in bytes, instead.
	CacheEntries int
	// Budget, when set, is the worker's state memory budget that the
	// store's cache shares with the other stores on it; its block cache
	// is the store's when Cache is nil.
	Budget *Budget
	// Logger receives Pebble's log messages; they are discarded when nil.
	Logger pebble.Logger
	// MaxBytes, when positive, bounds the store's size on disk (a tenant's
	// state quota): a Flush that finds the store larger fails with a
	// *QuotaError, and the store stays failed.
	MaxBytes int64
	// MemoryBytes, when positive, bounds the memory the store holds for
	// the subtask beyond Pebble's memtables (a tenant's memory quota): the
	// changes written since the last Flush reach Pebble as soon as their
	// bytes come to half of it, within a guest call too, and the clean
	// entries the cache keeps after a flush hold at most the other half.
	// When 0, changes wait for the caller's Flush and clean entries hold
	// up to 16 MiB.
	MemoryBytes int64
	// Admit, when set, puts the store's work in Pebble's background on its
	// owner's share of the cores (a tenant's, on a worker the tenants
	// share): each compaction waits for a grant of Admit and holds it while
	// it runs, one at a time, and the memtable is flushed by the writer,
	// which waits for the flush inside its own share, every half memtable
	// it commits, rather than by Pebble beside it. Without it, Pebble
	// flushes and compacts on its own goroutines, which no share counts.
	Admit Admit

	// eventListener, when set, receives Pebble's events (tests use it to
	// wait for compactions).
	eventListener *pebble.EventListener
	// Lazy, when the directory is new (missing or empty), leaves Pebble
	// unopened until a call needs it. Opening a new store creates a dozen
	// files and ratchets its format version a step at a time: 3-5 ms of
	// CPU, which a job's first record waited for (opened on another
	// goroutine instead, it took the cores the starting subtasks needed).
	// A new store is empty, so until the first write reaches Pebble its
	// reads need nothing from it: they are answered from the cache, and
	// only a Flush with changes, iteration, checkpoints, imports and Close
	// open it; timers are kept in memory until then. A failure to open is
	// then theirs, and sticky.
	Lazy bool

	// fs, when set, is the filesystem under the store (tests count its
	// syncs); vfs.Default otherwise.
	fs vfs.FS
}

// Store is the keyed state of one subtask: one Pebble instance, a write-back
// cache of recently used entries, and the timers of the subtask's operators.
// It is not safe for concurrent use: the subtask's goroutine owns it.
type Store struct {
	io     ioClock
	dir    string
	db     *pebble.DB
	maxPar int
	groups abi.KeyGroupRange

	// batch collects the writes of one Flush: the dirty cache entries at
	// Flush time and the timer changes as they happen.
	batch *pebble.Batch
	cache *hotCache
	// dirtyBases holds hashes of the (vertex, state, key) prefixes that
	// have dirty entries, so StateIter flushes only when its range has
	// unflushed writes. A hash collision costs a needless flush, never a
	// wrong answer. It is built by the first StateIter after a flush
	// (basesBuilt) and kept from then on: a map insert per changed entry
	// cost a keyed count over 1M keys a tenth of its time, for
	// iterations it never made.
	dirtyBases map[uint64]struct{}
	basesBuilt bool
	// sortRefs and staged are Flush's scratch: the changed entries in key
	// order, and their keys and values (stageDirty).
	sortRefs []sortRef
	staged   []byte
	vertices map[string]*VertexState
	// pendingBytes counts value bytes put since the last Flush.
	pendingBytes int
	// flushAt, when positive, is the pending bytes at which a write
	// flushes (Options.MemoryBytes); memHalf is the half of it that
	// bounds clean cached entries.
	flushAt int
	memHalf int
	// flushN is the changed entries past which callers flush
	// (CacheEntries) when the clean entries fill their share; roomBytes,
	// on a budget, is what the clean entries and the changes may hold
	// together, so that the changes take the share the clean entries
	// leave unused (CacheEntries).
	flushN    int
	roomBytes int
	// whole: the store started empty and every state entry written to
	// Pebble since went through the cache, so while the cache has lost
	// none (hotCache.lost) a key it does not hold is absent, and a read
	// needs no Pebble lookup. A keyed count whose keys fit the budget
	// then reads Pebble for none of its new keys.
	whole bool
	// filter holds the state keys written to Pebble while the
	// store is whole: with it, a key the cache does not hold is known
	// absent without a Pebble lookup unless the filter may have it.
	filter keyFilter
	// budget is the worker's budget the store has a share of (nil once
	// closed, or without one).
	budget *Budget
	// undo is the journal of revocable changes (BeginUndo).
	undo undoJournal

	// rcomp compacts L0 when reads have come to cost more than a rewrite
	// (readcompact.go).
	rcomp readCompactor

	keyBuf []byte // scratch for the Pebble key of the current call
	err    error  // sticky: set when Pebble failed a commit, or by Close

	// maxBytes is Options.MaxBytes; sinceCheck counts the bytes committed
	// since the size on disk was last measured.
	maxBytes   int64
	sinceCheck int64
	// flushEvery, when positive (Options.Admit), is the bytes committed
	// after which the writer flushes the memtable itself; sinceFlush counts
	// them.
	flushEvery int64
	sinceFlush int64
	// committed counts the bytes of every batch committed (Committed).
	committed int64

	// lazy holds the options to open Pebble with while it is not open yet
	// (Options.Lazy); db and batch are nil until ready opens it. early
	// holds the timer writes staged meanwhile, in order, and earlyBytes
	// the memory they hold (keys and entries), which counts toward
	// PendingBytes as a batch's bytes do: ready replays them into the batch.
	lazy       *pebble.Options
	early      []earlyTimer
	earlyBytes int

	// timersPartial: the store did not start empty, so the timer queues
	// of a new VertexState start with nothing in memory and read their
	// timers from Pebble (timerwindow.go). outTimers holds the timer
	// changes made out of the queues' windows since the last Flush (true:
	// registered).
	timersPartial bool
	outTimers     map[string]bool
	// firedKeys holds the Pebble keys of the timers fired since the last
	// Flush, back to back, each ending at its firedEnds entry: their
	// deletions reach the batch together at the Flush (Store.fire).
	firedKeys []byte
	firedEnds []int
	firedQ    []*timerQueue // each fired timer's queue
	spanEnd   []byte        // stageFired's range deletion end key
	// firedRanges and firedPoints count the range deletions of fired
	// timers and the fired timers deleted one by one, for the tests.
	firedRanges, firedPoints int
}

// earlyTimer is a timer write staged before Pebble was open: the timer's
// key, and whether it is a deletion.
type earlyTimer struct {
	pk  []byte
	del bool
}

// QuotaError says a store grew beyond Options.MaxBytes.
type QuotaError struct {
	Dir        string
	Size, Most int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("keyed state uses %d bytes on disk, over the state quota of %d bytes (a tenant's --state-bytes)", e.Size, e.Most)
}

// sizeCheckEvery is how many committed bytes pass between two measurements
// of the size on disk: measuring costs a walk of Pebble's metrics.
const sizeCheckEvery = 1 << 20

// checkSize measures the store on disk when enough was written since the
// last measurement.
func (s *Store) checkSize(committed int) error {
	if s.maxBytes <= 0 {
		return nil
	}
	s.sinceCheck += int64(committed)
	if s.sinceCheck < sizeCheckEvery {
		return nil
	}
	s.sinceCheck = 0
	m := s.db.Metrics()
	// The memtables hold what is not in files yet.
	size := int64(m.DiskSpaceUsage()) + int64(m.MemTable.Size)
	if size > s.maxBytes {
		s.err = &QuotaError{Dir: s.dir, Size: size, Most: s.maxBytes}
		return s.err
	}
	return nil
}

// Open opens (creating if needed) the Pebble directory o.Dir. The timers of
// the key groups in o.KeyGroups are read from it as they are needed
// (timerwindow.go).
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("state: Options.Dir is empty")
	}
	maxPar := o.MaxParallelism
	if maxPar == 0 {
		maxPar = abi.DefaultMaxParallelism
	}
	if maxPar < 1 || maxPar > abi.MaxMaxParallelism {
		return nil, fmt.Errorf("state: max parallelism %d is outside [1, %d]", maxPar, abi.MaxMaxParallelism)
	}
	if g := o.KeyGroups; g.Start < 0 || g.End >= maxPar || g.Start > g.End {
		return nil, fmt.Errorf("state: key-group range [%d, %d] is empty or outside [0, %d]", g.Start, g.End, maxPar-1)
	}
	if o.CacheEntries < 0 {
		return nil, fmt.Errorf("state: cache entries %d is negative", o.CacheEntries)
	}
	if o.Cache == nil && o.Budget != nil {
		o.Cache = o.Budget.Cache()
	}
	if o.MemoryBytes < 0 {
		return nil, fmt.Errorf("state: memory bound %d is negative", o.MemoryBytes)
	}
	entries := o.CacheEntries
	if entries == 0 {
		entries = DefaultCacheEntries
	}
	po := pebbleOptions(o)
	s := &Store{
		dir:        o.Dir,
		maxBytes:   o.MaxBytes,
		maxPar:     maxPar,
		groups:     o.KeyGroups,
		cache:      newHotCache(entries),
		dirtyBases: make(map[uint64]struct{}),
		vertices:   make(map[string]*VertexState),
		flushN:     entries,
	}
	if o.Budget != nil && o.CacheEntries == 0 {
		// Bounded in bytes by the store's share of the budget instead.
		s.cache.capacity = math.MaxInt32
		s.budget = o.Budget
	}
	if o.Admit != nil {
		po.EnsureDefaults()
		s.flushEvery = int64(max(po.MemTableSize/2, 1))
	}
	if o.MemoryBytes > 0 {
		half := int(min(o.MemoryBytes/2, math.MaxInt32))
		s.flushAt = max(half, 1)
		s.memHalf = half
	}
	s.setCleanBytes()
	s.whole = isNewDir(o.Dir)
	s.timersPartial = !s.whole
	if o.Lazy && s.whole {
		// A new store holds no timers to load.
		s.lazy = po
		s.joinBudget()
		return s, nil
	}
	db, err := pebble.Open(o.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("state: open pebble in %s: %w", o.Dir, err)
	}
	s.db, s.batch = db, db.NewBatch()
	s.joinBudget()
	return s, nil
}

// joinBudget counts the store in its budget's share.
func (s *Store) joinBudget() {
	if s.budget != nil {
		s.budget.join()
		s.setCleanBytes()
	}
}

// leaveBudget gives the store's share back, once.
func (s *Store) leaveBudget() {
	if s.budget != nil {
		s.budget.leave()
		s.budget = nil
	}
}

// setCleanBytes bounds the cache's clean entries by the store's memory
// bound and its share of the budget, as they are now.
func (s *Store) setCleanBytes() {
	b := maxCleanBytes
	if s.budget != nil {
		b = s.budget.share()
		s.flushN = s.budget.changes()
	}
	if s.memHalf > 0 {
		b = min(b, s.memHalf)
		// The changes' entries count toward the memory bound too.
		s.flushN = min(s.flushN, max(s.memHalf/changeBytes, DefaultCacheEntries))
	}
	s.cache.cleanBytes = b
	if s.budget != nil {
		s.roomBytes = b + s.flushN*changeBytes
	}
}

// pebbleOptions are the Pebble options of a store opened with o.
func pebbleOptions(o Options) *pebble.Options {
	logger := o.Logger
	if logger == nil {
		logger = quietLogger{}
	}
	po := &pebble.Options{
		Cache:              o.Cache,
		Logger:             logger,
		FormatMajorVersion: pebble.FormatNewest,
		// No write-ahead log: state is durable through checkpoints, which
		// flush the memtable first, and Close flushes too. A WAL would
		// only be copied into every checkpoint (Pebble's checkpoint copies
		// it) and re-uploaded each time.
		DisableWAL: true,
		// Every checkpoint flushes the memtable into new L0 files, and an
		// incremental checkpoint uploads the files that are new since the
		// previous one: what compactions rewrite is uploaded again. With
		// updates spread over all keys, every L0 file overlaps the whole
		// key space, so whatever level L0 is compacted into is rewritten
		// as a whole each time. The LSM is therefore kept to two tiers: L0
		// and, below it, the bottom level holding the state (see
		// lbaseMaxBytes), and L0 is compacted only once l0CompactionDepth
		// flushes have gathered, so the state is rewritten once per that
		// many checkpoints. A multi-level LSM rewrites less per compaction
		// but pushes every byte through each level, and each level's
		// rewrite is uploaded again: several times more upload per
		// checkpoint.
		LBaseMaxBytes: lbaseMaxBytes,
		// Pebble compacts L0 when its sublevel count reaches half of
		// L0CompactionThreshold. Bloom filters keep point reads over many
		// L0 sublevels cheap.
		L0CompactionThreshold: 2 * l0CompactionDepth,
		// A safety net only: flushes are split into a few files each (at
		// the bottom level's file boundaries), so the depth bound is
		// reached first.
		L0CompactionFileThreshold: 1000,
		L0StopWritesThreshold:     256,
		// The MANIFEST is copied into every checkpoint (it is the one
		// file Pebble appends to), and Pebble starts a new one only past
		// this size: with the default of 128 MB a long-running job would
		// upload megabytes of file history with every checkpoint.
		MaxManifestFileSize: maxManifestFileSize,
	}
	// Most reads that miss the hot-key cache are of keys a batch sees for
	// the first time, often absent: bloom filters answer those without
	// reading data blocks.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if o.eventListener != nil {
		po.EventListener = o.eventListener
	}
	if o.Admit != nil {
		po.Experimental.CompactionScheduler = newAdmittedScheduler(o.Admit)
	}
	if o.Budget != nil && o.MemoryBytes == 0 {
		po.MemTableSize = budgetMemTableSize
	}
	base := o.fs
	if base == nil {
		base = vfs.Default
	}
	po.FS = noSyncFS{FS: base}
	return po
}

// isNewDir reports whether dir is missing or empty: a store opened there
// starts empty.
func isNewDir(dir string) bool {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// ready opens Pebble when the store was opened lazily (Options.Lazy) and
// has not yet; it returns why it could not, which the store keeps.
// Everything that needs Pebble calls it first.
func (s *Store) ready() error {
	if s.lazy == nil {
		return nil
	}
	po := s.lazy
	s.lazy = nil
	s.io.enter()
	defer s.io.leave()
	db, err := pebble.Open(s.dir, po)
	if err != nil {
		s.err = fmt.Errorf("state: open pebble in %s: %w", s.dir, err)
		return s.err
	}
	s.db, s.batch = db, db.NewBatch()
	for _, e := range s.early {
		if err := s.stageTimer(e.pk, e.del); err != nil {
			return err
		}
	}
	s.early, s.earlyBytes = nil, 0
	return nil
}

// stageTimer stages the write of timer key pk (its deletion with del) for
// the next Flush: in the batch, or while Pebble is not open yet, in early.
func (s *Store) stageTimer(pk []byte, del bool) error {
	if s.lazy != nil {
		s.early = append(s.early, earlyTimer{bytes.Clone(pk), del})
		s.earlyBytes += len(pk) + int(unsafe.Sizeof(earlyTimer{}))
		return nil
	}
	if del {
		if err := s.batch.Delete(pk, nil); err != nil {
			return s.fail("stage timer deletion", err)
		}
		return nil
	}
	if err := s.batch.Set(pk, nil, nil); err != nil {
		return s.fail("stage timer", err)
	}
	return nil
}

// Dir is the store's Pebble directory.
func (s *Store) Dir() string { return s.dir }

// KeyGroups is the key-group range the store serves.
func (s *Store) KeyGroups() abi.KeyGroupRange { return s.groups }

// MaxParallelism is the number of key groups keys are hashed into.
func (s *Store) MaxParallelism() int { return s.maxPar }

// Vertex returns the state of operator vertexID; the same id returns the
// same value. keyed tells whether the operator's input is key-partitioned:
// when false, every state and timer call returns operator.ErrNoKeyedState.
// Asking for one vertex as both keyed and not keyed is a programming error
// and panics.
func (s *Store) Vertex(vertexID string, keyed bool) *VertexState {
	v, ok := s.vertices[vertexID]
	if !ok {
		v = newVertexState(s, vertexID)
		s.vertices[vertexID] = v
	}
	if !v.declared {
		v.declared = true
		v.keyed = keyed
	} else if v.keyed != keyed {
		panic(fmt.Sprintf("state: vertex %q requested with keyed=%t after keyed=%t", vertexID, keyed, v.keyed))
	}
	return v
}

// Pending is the number of changes (state entries and timer writes) not yet
// flushed. Callers flush when it grows large rather than after every input
// batch: repeated writes to a hot key between flushes cost one Pebble write.
func (s *Store) Pending() int {
	if s.batch == nil {
		return len(s.cache.dirty) + len(s.early) + len(s.firedEnds)
	}
	return len(s.cache.dirty) + int(s.batch.Count()) + len(s.firedEnds)
}

// PendingBytes bounds the value bytes written since the last Flush (a value
// written twice counts twice), for callers that bound unflushed memory.
func (s *Store) PendingBytes() int {
	if s.batch == nil {
		return s.pendingBytes + s.earlyBytes + len(s.firedKeys)
	}
	return s.pendingBytes + len(s.batch.Repr()) + len(s.firedKeys)
}

// HeldBytes is the memory the store holds for its subtask outside Pebble:
// the cache's entries in use, which hold short keys and values, the
// buffers of longer ones (changed, clean and kept for reuse) and the batch
// not yet committed. It walks the cache's spills, for tests and metrics
// rather than the hot path.
func (s *Store) HeldBytes() int {
	n := s.earlyBytes
	if s.batch != nil {
		n = cap(s.batch.Repr())
	}
	c := s.cache
	n += c.live * int(unsafe.Sizeof(cacheEntry{}))
	for i := range c.spills {
		n += cap(c.spills[i].key) + cap(c.spills[i].val)
	}
	return n
}

// CacheEntries is the number of changed entries the cache is meant to
// hold between flushes (Options.CacheEntries, DefaultCacheEntries when 0):
// callers flush once Pending reaches it. Without a Budget it is also the
// cache's capacity. On a budget it grows by the share of the budget the
// clean entries leave unused, at changeBytes a change: a keyed count whose
// keys fit the budget (1M keys on the default) then changes every key
// between two checkpoints without writing to Pebble in between, and a
// store whose clean entries fill their share flushes at its share of the
// changes' quarter, as before. Either way the clean entries and the
// changes together stay within the clean share and the changes' share.
func (s *Store) CacheEntries() int {
	if s.roomBytes == 0 {
		return s.flushN
	}
	return max(s.flushN, (s.roomBytes-s.cache.cleanHeld)/changeBytes)
}

// Flush writes every change since the last Flush to Pebble, in batches of
// up to commitChunk, without syncing: durability comes from checkpoints.
func (s *Store) Flush() error {
	if s.err != nil {
		return s.err
	}
	c := s.cache
	if err := s.stageFired(); err != nil {
		return err
	}
	if s.lazy != nil && len(c.dirty) == 0 && len(s.early) == 0 {
		return nil // nothing to write: Pebble can stay unopened
	}
	if err := s.ready(); err != nil {
		return err
	}
	// In key order, the memtable's skiplist inserts each entry next to the
	// previous one (its splice hint) instead of searching from the top.
	s.stageDirty()
	for _, r := range s.sortRefs {
		key, val, present := r.kv(c, s.staged)
		// Committed before the entry would take the batch past the chunk:
		// its buffer then never grows past commitChunk, and Pebble keeps
		// it for the next batch (it drops a larger one, and the next grows
		// its own by doubling: a state flood allocated 2.8 GB so in 3 s).
		if !s.batch.Empty() && len(s.batch.Repr())+len(key)+len(val)+batchEntryOverhead > commitChunk {
			if err := s.commit(); err != nil {
				return err
			}
		}
		var err error
		if present {
			err = s.batch.Set(key, val, nil)
		} else {
			err = s.batch.Delete(key, nil)
		}
		if err != nil {
			return s.fail("stage write", err)
		}
	}
	if err := s.commit(); err != nil {
		return err
	}
	if cap(s.sortRefs) > maxKeptSortRefs {
		s.sortRefs = nil
	}
	if cap(s.staged) > maxKeptStaged {
		s.staged = nil
	}
	if s.budget != nil {
		s.setCleanBytes() // the share follows the stores open now
	}
	c.flushed()
	clear(s.dirtyBases)
	s.basesBuilt = false
	s.pendingBytes = 0
	s.timersFlushed()
	return nil
}

// commitChunk bounds the batches Flush commits. Pebble copies a batch of
// up to half a memtable into the memtable and reuses the batch's buffer;
// it keeps a larger one as it is, in memory until its own flush, and the
// next batch grows a new buffer: committed in chunks, a flush of many
// megabytes costs Pebble no more memory than its memtables.
const commitChunk = 1 << 20

// batchEntryOverhead bounds what a batch adds to an entry's key and value:
// its kind and two varint lengths.
const batchEntryOverhead = 1 + 2*binary.MaxVarintLen32

// commit writes the batch to Pebble, if it holds anything.
func (s *Store) commit() error {
	if s.batch.Empty() {
		return nil
	}
	n := len(s.batch.Repr())
	s.io.enter()
	defer s.io.leave()
	if err := s.batch.Commit(pebble.NoSync); err != nil {
		return s.fail("commit batch", err)
	}
	s.batch.Reset()
	s.committed += int64(n)
	if s.flushEvery > 0 {
		if s.sinceFlush += int64(n); s.sinceFlush >= s.flushEvery {
			s.sinceFlush = 0
			if err := s.db.Flush(); err != nil {
				return s.fail("flush memtable", err)
			}
		}
	}
	return s.checkSize(n)
}

// Committed is the bytes of the batches the store has committed to Pebble
// since it was opened: what its writes have cost the disk before
// compactions rewrite them (a tenant's state write rate is paced by it).
func (s *Store) Committed() int64 { return s.committed }

// written flushes once the changes since the last Flush reach the store's
// memory bound (Options.MemoryBytes).
func (s *Store) written() error {
	if s.flushAt > 0 && s.PendingBytes() >= s.flushAt {
		return s.Flush()
	}
	return nil
}

// fail makes a Pebble write failure sticky: the cache and Pebble may no
// longer agree, so nothing may be read or written after it.
func (s *Store) fail(what string, err error) error {
	s.err = fmt.Errorf("state: %s in %s: %w", what, s.dir, err)
	return s.err
}

// Close flushes and closes Pebble. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.leaveBudget()
	if s.lazy != nil && len(s.cache.dirty) == 0 && len(s.early) == 0 {
		// Never written to: there is no store to make.
		s.lazy, s.err = nil, ErrClosed
		return nil
	}
	if err := s.ready(); err != nil {
		s.err = ErrClosed
		return err
	}
	if s.db == nil {
		if s.err == ErrClosed {
			return ErrClosed
		}
		// Pebble failed to open (Options.Lazy), which an earlier call
		// reported.
		s.err = ErrClosed
		return nil
	}
	var ferr error
	if s.err == nil {
		ferr = s.Flush()
		if ferr == nil {
			// Without a WAL, what is still in the memtable would be lost.
			ferr = s.db.Flush()
		}
	}
	s.stopReadCompaction()
	berr := s.batch.Close()
	cerr := s.db.Close()
	s.db, s.batch = nil, nil
	s.err = ErrClosed
	if cerr != nil {
		cerr = fmt.Errorf("state: close pebble in %s: %w", s.dir, cerr)
	}
	return errors.Join(ferr, berr, cerr)
}

// Discard closes the store without keeping what it has not written to
// Pebble yet: for a store whose files nobody opens again. A subtask's
// working store is one (the next attempt clears it and starts from a
// checkpoint's files), so its end does not pay for flushing its changes,
// nor, when it was opened lazily, for making a Pebble store only to close
// it.
func (s *Store) Discard() error {
	if s.err == ErrClosed {
		return ErrClosed
	}
	s.leaveBudget()
	s.lazy, s.err = nil, ErrClosed
	s.early, s.earlyBytes = nil, 0
	s.firedKeys, s.firedEnds, s.firedQ = nil, nil, nil
	if s.db == nil {
		return nil
	}
	s.stopReadCompaction()
	berr := s.batch.Close()
	cerr := s.db.Close()
	s.db, s.batch = nil, nil
	if cerr != nil {
		cerr = fmt.Errorf("state: close pebble in %s: %w", s.dir, cerr)
	}
	return errors.Join(berr, cerr)
}

// keyGroup returns the key group of key and whether this store owns it.
func (s *Store) keyGroup(key []byte) (int, bool) {
	kg := abi.KeyGroup(key, s.maxPar)
	return kg, s.groups.Contains(kg)
}

// get finds the cache entry of pk (hash h), loading it from Pebble when
// the cache does not hold it, and records the use. The entry may be one
// known absent (not present). The caller reads the value, then calls
// cache.gotten.
func (s *Store) get(pk []byte, h uint64) (int32, error) {
	c := s.cache
	idx := c.lookup(pk, h)
	if idx == noSlot {
		var err error
		if idx, err = s.load(pk, h); err != nil {
			return noSlot, err
		}
	} else {
		c.touch(idx)
	}
	return idx, nil
}

// manyGet is StateGetMany's scratch for one chunk: every pair's Pebble
// key, packed, and per pair the end of its key in keys, its hash, its error
// and the cache slot its hash leads to (hotCache.warm). Calls borrow one
// from manyGetPool, so that a store does not hold one.
type manyGet struct {
	keys   []byte
	ends   []int
	hashes []uint64
	errs   []error
	slots  []int32
}

var manyGetPool = sync.Pool{New: func() any { return new(manyGet) }}

// maxKeptManyGet bounds the key bytes of a pooled manyGet: a chunk stops
// taking pairs at manyGetKeyBytes, so only a chunk whose last key is
// near the largest allowed passes it.
const maxKeptManyGet = 1 << 20

func getManyGet() *manyGet { return manyGetPool.Get().(*manyGet) }

func (m *manyGet) release() {
	if cap(m.keys) > maxKeptManyGet {
		return
	}
	clear(m.errs) // the errors may hold keys
	manyGetPool.Put(m)
}

// load reads the entry with Pebble key pk (hash h), which is not cached,
// into the cache.
func (s *Store) load(pk []byte, h uint64) (int32, error) {
	if s.lazy != nil || (s.whole && (!s.cache.lost || !s.filter.mayHave(h))) {
		// Not open yet: nothing has reached Pebble, which is empty; or
		// everything that has is in the cache (Store.whole), or the key
		// never reached Pebble (Store.filter).
		return s.cache.insert(pk, h), nil
	}
	s.io.enter()
	defer s.io.leave()
	s.readHit()
	val, closer, err := s.db.Get(pk)
	if err != nil {
		if errors.Is(err, pebble.ErrNotFound) {
			return s.cache.insert(pk, h), nil
		}
		return noSlot, fmt.Errorf("state: read %x in %s: %w", pk, s.dir, err)
	}
	idx := s.cache.insert(pk, h)
	s.cache.setVal(idx, val)
	e := &s.cache.entries[idx]
	e.present = true
	e.filtered = true
	s.cache.recount(idx)
	if err := closer.Close(); err != nil {
		return noSlot, fmt.Errorf("state: read %x in %s: %w", pk, s.dir, err)
	}
	return idx, nil
}

// quietLogger drops Pebble's messages: a worker must not have its output
// interleaved with storage-engine chatter unless it asks for it.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}

// Fatalf panics: Pebble calls it on invariant violations and expects it not
// to return.
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// StoreMetrics are a store's figures from Pebble, for the metrics endpoint.
// Counters count since the store was opened.
type StoreMetrics struct {
	// DiskBytes is the space its files take on disk, MemTableBytes what
	// its memtables hold (not in files yet).
	DiskBytes     int64
	MemTableBytes int64
	// Compactions and Flushes count Pebble's compactions and memtable
	// flushes; WALBytes is what was written to the write-ahead log.
	Compactions int64
	Flushes     int64
	WALBytes    int64
	// ReadAmp is the read amplification (sub-levels of L0 plus non-empty
	// levels): how many files a read may look in.
	ReadAmp int64
	// Committed is the bytes of the batches committed to Pebble
	// (Store.Committed).
	Committed int64
	// Stores is how many stores are summed (1 for one store).
	Stores int
}

// Add sums o into m; ReadAmp takes the largest.
func (m *StoreMetrics) Add(o StoreMetrics) {
	m.DiskBytes += o.DiskBytes
	m.MemTableBytes += o.MemTableBytes
	m.Compactions += o.Compactions
	m.Flushes += o.Flushes
	m.WALBytes += o.WALBytes
	m.Committed += o.Committed
	m.ReadAmp = max(m.ReadAmp, o.ReadAmp)
	m.Stores += o.Stores
}

// Metrics reads the store's figures from Pebble. It walks Pebble's
// metrics (microseconds): call it at most every second or so, and not
// concurrently with Close.
func (s *Store) Metrics() StoreMetrics {
	if s.db == nil {
		// Not open yet (Options.Lazy): nothing is on disk.
		return StoreMetrics{Committed: s.committed, Stores: 1}
	}
	m := s.db.Metrics()
	return StoreMetrics{
		DiskBytes:     int64(m.DiskSpaceUsage()),
		MemTableBytes: int64(m.MemTable.Size),
		Compactions:   m.Compact.Count,
		Flushes:       m.Flush.Count,
		WALBytes:      int64(m.WAL.BytesWritten),
		ReadAmp:       int64(m.ReadAmp()),
		Committed:     s.committed,
		Stores:        1,
	}
}
