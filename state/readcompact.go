package state

import (
	"context"
	"sync"
)

// Read-triggered L0 compaction.
//
// L0 is compacted by depth (l0CompactionDepth flushes), which keeps
// incremental checkpoints small while state is being written. A store that
// filled fast and then mostly reads (a keyed count over more keys than its
// cache holds, once every key has been seen: its changes stay in the cache
// and Pebble sees no more flushes) keeps a deep L0 for good, and every read
// that misses the cache probes each L0 sublevel's filter and index: with
// 98 tables over 20 sublevels, a keyed count over 5M keys read Pebble at
// under 10K gets/s, its blocks evicted by one another. Compacting L0 into
// one level made the same reads 3–4× faster (BENCHMARKS.md, "Read-triggered
// L0 compaction").
//
// The store compacts when the reads since L0 last changed shape have cost
// more than rewriting the state would: reads × sublevels × readProbeBytes
// ≥ the state's size. A probe (a filter and an index block looked at)
// costs a few microseconds, as much CPU as rewriting a few hundred bytes;
// readProbeBytes is set below that, since a rewrite is uploaded again by
// the next incremental checkpoint too. Only reads between two looks at an
// unchanged L0 count: while L0 keeps growing (a flush per checkpoint), the
// count starts again at each new sublevel, so a store that writes steadily
// is compacted by depth as before unless a single interval's reads
// outweigh a rewrite (at 2 GB of state, 100,000 reads an interval never
// do; at 200 MB they do from about 22 sublevels on).
const (
	// readProbeBytes is the rewrite a probe of one sublevel is worth.
	readProbeBytes = 256
	// readCompactMinSublevels: below it, reads are cheap enough.
	readCompactMinSublevels = 4
	// readCheckEvery is how many Pebble reads pass between looks at L0
	// (a look at Pebble's metrics takes its lock and allocates).
	readCheckEvery = 4096
)

// readCompactor decides and runs read-triggered compactions of one store.
// Its fields are the owner goroutine's, but for the compaction's own
// goroutine (wg, done).
type readCompactor struct {
	reads     int64 // Pebble reads since the last look
	sublevels int32 // L0's sublevels at the last look
	probes    int64 // sublevel probes since L0 last changed shape
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	running   bool
	done      chan struct{} // closed when the compaction under way ends
	runs      int           // compactions started (tests)
}

// readHit counts one Pebble read and, every readCheckEvery, decides.
func (s *Store) readHit() {
	rc := &s.rcomp
	if rc.reads++; rc.reads < readCheckEvery {
		return
	}
	n := rc.reads
	rc.reads = 0
	if rc.running {
		select {
		case <-rc.done:
			rc.running = false
		default:
			return
		}
	}
	m := s.db.Metrics()
	var size int64
	for i := range m.Levels {
		size += m.Levels[i].TablesSize
	}
	if rc.look(n, m.Levels[0].Sublevels, size) {
		s.startReadCompaction()
	}
}

// look takes in the n Pebble reads since the last look, L0's sublevels and
// the state's size now, and says whether to compact.
func (rc *readCompactor) look(n int64, sub int32, size int64) bool {
	if sub != rc.sublevels {
		// The reads since the last look straddle two shapes: count
		// from here.
		rc.sublevels, rc.probes = sub, 0
		return false
	}
	if sub < readCompactMinSublevels {
		return false
	}
	rc.probes += n * int64(sub)
	return rc.probes*readProbeBytes >= size
}

// startReadCompaction compacts the whole key space on a goroutine of its
// own; reads and writes go on meanwhile (Pebble swaps the new tables in).
func (s *Store) startReadCompaction() {
	rc := &s.rcomp
	it, err := s.db.NewIter(nil)
	if err != nil {
		return
	}
	var lo, hi []byte
	if it.First() {
		lo = append([]byte(nil), it.Key()...)
	}
	if it.Last() {
		hi = append(append([]byte(nil), it.Key()...), 0)
	}
	if it.Close() != nil || lo == nil || hi == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel, rc.running, rc.done = cancel, true, make(chan struct{})
	rc.probes = 0
	rc.runs++
	db, done := s.db, rc.done
	rc.wg.Add(1)
	go func() {
		defer rc.wg.Done()
		defer close(done)
		// A failure leaves L0 as it was: the next look may try again.
		_ = db.Compact(ctx, lo, hi, false)
	}()
}

// stopReadCompaction cancels a compaction under way and waits for it:
// Pebble must not be closed under it.
func (s *Store) stopReadCompaction() {
	rc := &s.rcomp
	if rc.cancel != nil {
		rc.cancel()
	}
	rc.wg.Wait()
	rc.running = false
}
