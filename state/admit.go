package state

import (
	"context"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Admit is Options.Admit: it waits for a grant to run background work on
// the owner's share of the cores and returns the function that gives it
// back. It fails only when ctx ends first.
type Admit func(ctx context.Context) (release func(), err error)

// admittedScheduler runs a store's compactions one at a time, each holding
// a grant of Admit for as long as it runs. It implements Pebble's
// CompactionScheduler: Pebble asks with TrySchedule when it has picked a
// compaction; the answer is always "not now", and a goroutine waits for the
// grant, then hands it to Pebble through GetWaitingCompaction and Schedule,
// the way Pebble's own scheduler grants a backlog.
//
// Locking follows Pebble's rule: Pebble holds its mutex when it calls
// TrySchedule, so s.mu is never held while calling into the DB.
type admittedScheduler struct {
	admit  Admit
	ctx    context.Context
	cancel context.CancelFunc
	db     pebble.DBForCompaction
	wg     sync.WaitGroup

	mu      sync.Mutex
	waiting bool // a goroutine waits for a grant
	running bool // a compaction holds one
	closed  bool
	granted int // compactions granted, for tests
}

func newAdmittedScheduler(admit Admit) *admittedScheduler {
	ctx, cancel := context.WithCancel(context.Background())
	return &admittedScheduler{admit: admit, ctx: ctx, cancel: cancel}
}

func (s *admittedScheduler) Register(_ int, db pebble.DBForCompaction) { s.db = db }

// Unregister stops waiting for grants; Pebble calls it when it closes, and
// waits for no compaction of ours, since it has finished them by then.
func (s *admittedScheduler) Unregister() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

func (s *admittedScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return false, nil
}

// UpdateGetAllowedWithoutPermission is Pebble telling that a flush may
// have made a compaction due.
func (s *admittedScheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
}

// startLocked starts waiting for a grant unless a compaction runs or a
// wait is under way.
func (s *admittedScheduler) startLocked() {
	if s.closed || s.waiting || s.running {
		return
	}
	s.waiting = true
	s.wg.Add(1)
	go s.grant()
}

// grant waits for a grant and gives it to Pebble's waiting compaction, if
// Pebble still has one.
func (s *admittedScheduler) grant() {
	defer s.wg.Done()
	release, err := s.admit(s.ctx)
	if err != nil {
		s.mu.Lock()
		s.waiting = false
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	accepted := false
	if !closed {
		if waiting, _ := s.db.GetWaitingCompaction(); waiting {
			s.mu.Lock()
			s.running = true
			s.mu.Unlock()
			h := &admittedGrant{s: s, release: release}
			accepted = s.db.Schedule(h)
		}
	}
	s.mu.Lock()
	s.waiting = false
	if accepted {
		s.granted++
		if !s.running {
			// The compaction ended before Schedule returned, while this
			// wait still counted: its Done started none.
			s.startLocked()
		}
	} else {
		s.running = false
	}
	s.mu.Unlock()
	if !accepted {
		release()
	}
}

// admittedGrant is one compaction's grant.
type admittedGrant struct {
	s       *admittedScheduler
	release func()
	once    sync.Once
}

func (g *admittedGrant) Started()                                          {}
func (g *admittedGrant) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (g *admittedGrant) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done gives the grant back and, since more compactions may be due, asks
// for the next one.
func (g *admittedGrant) Done() {
	g.once.Do(func() {
		g.release()
		s := g.s
		s.mu.Lock()
		s.running = false
		s.startLocked()
		s.mu.Unlock()
	})
}
