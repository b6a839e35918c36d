// Package state keeps the keyed state and timers of a subtask in Pebble.
//
// A worker opens one Store per subtask (one Pebble instance each, so that
// snapshots, restores and rescales stay independent; a worker may share one
// block cache among them). Each operator (vertex) of the subtask gets a
// VertexState from Store.Vertex; it implements the state and timer methods of
// operator.Services with the semantics of abi/ABI.md, and the runtime embeds
// it in its own Services value together with the watermark, clock and log.
//
// # Key layout
//
// Every Pebble key starts with its key group, so the keys of a key-group
// range form one contiguous span (KeyGroupSpan) that a rescale can move and
// an export can read. Variable-length fields are prefixed with their length
// as a uvarint, so no two tuples share an encoding; the namespace comes last
// and unprefixed, so the entries of one (vertex, state, key) whose namespaces
// share a prefix are one Pebble prefix scan, in namespace byte order.
//
//	state entry (value = state value):
//
//	┌──────────┬──────┬────────┬────────┬────────┬───────┬────────┬─────┬───────────┐
//	│ kg u16be │ 0x01 │ len(v) │ vertex │ len(s) │ state │ len(k) │ key │ namespace │
//	└──────────┴──────┴────────┴────────┴────────┴───────┴────────┴─────┴───────────┘
//
//	timer (value empty):
//
//	┌──────────┬──────┬────────┬────────┬────────┬────────────────────┬────────┬─────┬───────────┐
//	│ kg u16be │ 0x02 │ len(v) │ vertex │ domain │ time u64be^(1<<63) │ len(k) │ key │ namespace │
//	└──────────┴──────┴────────┴────────┴────────┴────────────────────┴────────┴─────┴───────────┘
//
//	len(x): uvarint, minimal encoding    domain: 1 byte, 0 event time, 1 processing time
//	time:   the signed timestamp with its sign bit flipped, so byte order is time order
//
// State names are stored as names, not handles: a state entry (vertex id,
// state name, key group, key, namespace, value) is the portable unit that
// savepoints export, and it must not depend on registration order.
// DecodeKey is the inverse of AppendEntryKey and AppendTimerKey.
//
// # Writes, reads and flushes
//
// StatePut and StateDelete go to an in-memory write-back cache: repeated
// writes to a hot key between flushes cost one Pebble write. Store.Flush,
// which the runtime calls when the cache fills up and before every
// snapshot, writes all of them (and the timer changes) as one Pebble batch.
// Durability comes from checkpoints: the store runs without a write-ahead
// log (a snapshot flushes the memtable first, and Close flushes it, so a
// store reopened after Close sees every write). A store syncs nothing
// (nosyncfs.go): its directory is never reopened after its subtask ends,
// and checkpoint directories are staging that checkpoint storage copies and
// makes durable itself. StateGet reads
// the cache first; entries read from Pebble, including absent ones, stay
// cached in a bounded set of hot keys (clock eviction). StateGetMany, which answers a
// guest's state_get_many, reads the cache slots and entries of a chunk of
// keys in loops whose reads do not depend on each other before it looks
// each key up, so that the chunk's cache misses overlap instead of coming
// one lookup after another. It gives the host a StateRef per pair, the
// cache entry it found; StatePutRef, which a put of the pair in the
// guest's state_write_batch comes through, checks that the entry still
// holds the pair (its Pebble key but for the key group, which the key
// decides) and writes there, without building, hashing and looking up
// the key again.
// StateIter flushes first when the iterated key has unflushed writes and
// then reads Pebble, so it sees every earlier put and delete.
//
// # Memory budget
//
// A worker's stores share its state memory budget (Budget, wstream
// worker --state-memory, DefaultMemoryBudget): a quarter is the one block
// cache, a quarter bounds the changed entries each store gathers between
// flushes (CacheEntries, which callers flush at), and half the clean
// entries the caches keep, in bytes, entry overhead included; the stores
// open at a flush split both evenly; the changes may also take what the
// clean entries leave of their share (CacheEntries grows by it), so that a
// state that fits the budget, a keyed count over 1M keys on the default,
// changes every key between two checkpoints without a flush in between,
// while the clean entries and the changes stay within the two shares
// together. A tenant's memory quota
// (Options.MemoryBytes) bounds its store further. A store that started
// empty knows every entry it wrote to Pebble was in its cache: until the
// cache evicts one, a key it does not hold is absent, and reading it costs
// no Pebble lookup (a keyed count whose state fits the budget reads Pebble
// for none of its new keys). After that, a Bloom filter of the keys it has
// flushed (absent.go: 10 to 20 bits a key, outside the budget) answers
// most reads of keys that never reached Pebble. Beyond the budget, misses read Pebble, whose
// memtables on a budget are 64 MiB, so that a growing state makes few L0
// sublevels for the reads to look in, and a store whose reads have come to
// cost more than a rewrite of its state compacts L0 (readcompact.go).
//
// A store opened with Options.Lazy in a new directory leaves Pebble
// unopened until it needs it: the store is empty, so reads are answered
// from the cache, and timer changes wait in memory. The first Flush with
// changes, iteration, checkpoint, export or import opens it, and Close
// opens it only to keep changes. A subtask's first records then do not wait
// for Pebble to create its files (3-5 ms of CPU). Store.Discard closes a
// store whose files nobody opens again (a worker's subtask: the next
// attempt starts from a checkpoint) without flushing, and without opening
// Pebble at all when it never did.
//
// # Timers
//
// Timers are Pebble keys like state entries (the layout above), so they are
// in every checkpoint, savepoint, restore and rescale by key group exactly
// as the entries are, and only a window of them is in memory
// (timerwindow.go). Within one key group and time domain, the layout
// orders a vertex's timers by time, then record key length, then record
// key, then namespace: the firing order. Per vertex and domain a
// timerQueue keeps the timers registered one by one in a min-heap in that
// order, with a set by Pebble key for de-duplication, and a window read
// from Pebble in a sorted run (found by binary search). A queue with few timers holds them all,
// as a store that started empty begins. Past 32,768 timers at a Flush, it
// keeps the earlier half and becomes partial: it holds exactly the timers
// before its bound B (the first timer it let go), and Pebble, which holds
// every timer, the rest. A timer registered at or past B is written to
// Pebble alone, blindly (registering it twice writes one key twice: still
// one timer), and a deletion likewise; Store.outTimers records those
// changes until the next Flush, so that an undo journal can tell whether
// such a timer existed. When a partial queue runs empty, PopTimers and
// NextTimer write the timer changes out of the windows
// (Store.writeOutTimers: not the changed entries, which wait for the next
// Flush, as this runs inside a guest call) and read the next 32,768 timers
// from B on, merged from the owned key groups through one Pebble
// iterator, and B moves up; when Pebble holds no more, the queue holds
// them all again. Each key group's timers come from a run read ahead,
// 2,048 timers a seek, kept for the refills that follow until a change
// past B or a window that shrinks drops the runs: a queue of ten million
// timers seeks a key group once every few windows, not once a window. Open and ImportCanonical load
// no timers: a store that did not start empty reads them as it needs
// them, so a subtask with ten million pending timers opens at once and
// holds 5-10 MiB of them per operator and domain, and up to 8 MiB of
// runs read ahead.
//
// PopTimers hands due timers to the runtime as an abi timer batch, at most
// MaxTimersPerPop a call. The deletions of fired timers wait in a buffer
// until the next Flush (or until a refill finds 4 MiB of their keys
// there; a refill reads past the bound, where no fired timer is), which
// stages them: per key group and queue one range deletion, from the first
// fired timer to just past the last (a span kept as they fire), when
// every timer the queue still holds sorts after every timer it fired
// (Pebble holds no other timer before the bound, so the range holds only
// fired timers); otherwise one point deletion a timer, grouped by key
// group in key order, which Pebble's memtable inserts next to each other. A
// registration stages them first, as it may register a timer that just
// fired again (its write then follows the deletion); as a timer is only
// fired from the front of its queue, this also keeps the condition true
// for every registration, and the point deletions are a guard.
//
// The host bounds timers as it bounds state: per call by the state bytes a
// call writes, and for a tenant by the state quota on disk (Options.MaxBytes),
// which counts the timer keys with the entries.
//
// # Snapshots, restores and rescales
//
// Store.Checkpoint is a snapshot's synchronous phase: it writes the
// cached changes, flushes the memtable (what changed since the last
// snapshot) and hard-links Pebble's files into a checkpoint directory, so
// it costs what changed, not what the store holds. A restore with the
// same key groups opens the restored files as they are. A rescale moves
// key groups between stores without writing a key through a memtable:
// ImportStore reads the span of the owned key groups from a restored
// snapshot of another subtask, in key order, into SST files that Pebble
// ingests in one step; ImportCanonical does the same with a canonical
// stream, whose records ExportCanonical writes in key order. Either
// holds a block of each file in memory, whatever the state's size, and
// ImportProgress counts the bytes moved.
//
// A Store and its VertexStates are not safe for concurrent use: the
// subtask's goroutine owns them.
//
// # Undoing a call
//
// Store.BeginUndo opens a journal of the old value of every state entry and
// timer changed afterwards; RollbackUndo puts them back (as ordinary writes,
// so a Flush in between does not matter) and CommitUndo keeps the changes.
// The runtime opens one around each guest call in dead-letter mode, so that
// a failed call leaves no trace in keyed state (undo.go).
package state
