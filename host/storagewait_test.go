package host

import (
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// The tests in this file cover how the call deadline leaves out the time a
// guest's state waits on storage (operator.StorageWaiter): the deadline
// bounds the guest's own work, not a loaded disk's.

// storageWaitWAT's process registers a state and reads it N times for a
// batch of one record whose value is "N_" (a digit), or reads N times and
// then spins for ever for "Ns".
const storageWaitWAT = `(data (i32.const 32) "s")
  (func (export "wstream_process") (param $slot i32) (param $ptr i32) (param $len i32) (result i32)
    (local $h i32) (local $n i32)
    (local.set $h (call $state_register (i32.const 32) (i32.const 1) (i32.const 1)))
    ;; the batch's one record: its value is the last bytes of the batch.
    (local.set $n (i32.sub (i32.load8_u (i32.sub (i32.add (local.get $ptr) (local.get $len)) (i32.const 2))) (i32.const 48)))
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (drop (call $state_get (local.get $h) (i32.const 32) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 48) (i32.const 8)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l)))
    (if (i32.eq (i32.load8_u (i32.sub (i32.add (local.get $ptr) (local.get $len)) (i32.const 1))) (i32.const 115))
      (then (loop $spin (br $spin))))
    (i32.const 0))`

// slowStorage is a state whose every read waits on "storage" for delay.
type slowStorage struct {
	*leanServices
	delay time.Duration
}

func (s *slowStorage) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	time.Sleep(s.delay)
	return s.leanServices.StateGet(h, key, ns, dst)
}

// waitingStorage is slowStorage that tells its waits, a wait in progress
// included, as the state package does.
type waitingStorage struct {
	slowStorage
	mu    sync.Mutex
	total time.Duration
	since time.Time
}

func (s *waitingStorage) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	s.mu.Lock()
	s.since = time.Now()
	s.mu.Unlock()
	v, err := s.slowStorage.StateGet(h, key, ns, dst)
	s.mu.Lock()
	s.total += time.Since(s.since)
	s.since = time.Time{}
	s.mu.Unlock()
	return v, err
}

func (s *waitingStorage) StorageWait() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.total
	if !s.since.IsZero() {
		t += time.Since(s.since)
	}
	return t
}

func TestDeadlineLeavesOutStorageWaits(t *testing.T) {
	const budget = time.Second
	src := moduleWAT(map[string]string{abi.ExportProcess: storageWaitWAT}, "")
	r := newTestRuntime(t, Config{CallTimeout: budget})
	m := compileWAT(t, r, src)
	slow := func(d time.Duration) slowStorage { return slowStorage{newLeanServices(), d} }
	cases := []struct {
		name  string
		value string
		svc   func() operator.Services
		fails bool
	}{
		// Eight reads of 400 ms: 3.2 s of waits in a 1 s budget.
		{"many waits", "8_", func() operator.Services { return &waitingStorage{slowStorage: slow(400 * time.Millisecond)} }, false},
		// One read of 3 s: the timer fires while the wait is in progress.
		{"one long wait", "1_", func() operator.Services { return &waitingStorage{slowStorage: slow(3 * time.Second)} }, false},
		// The same waits untold count against the budget.
		{"waits untold", "8_", func() operator.Services { s := slow(400 * time.Millisecond); return &s }, true},
		// Waits give at most maxStorageCredit budgets more: a guest
		// that makes the host read for it without end still expires.
		{"waits past the credit", "1_", func() operator.Services { return &waitingStorage{slowStorage: slow((maxStorageCredit + 2) * budget)} }, true},
		// The guest's own work still expires, after its waits.
		{"wait then spin", "1s", func() operator.Services { return &waitingStorage{slowStorage: slow(1500 * time.Millisecond)} }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, s := hostileOp(t, t.Context(), m, c.svc())
			errc := make(chan error, 1)
			go func() { errc <- s.Process(batchOf(rec(0, 1, "k", c.value)), &builderCollector{}) }()
			err := wait(t, errc, "the deadline")
			if !c.fails {
				if err != nil {
					t.Fatalf("Process failed although its waits on storage are left out of the deadline: %v", err)
				}
				return
			}
			checkNamed(t, err, abi.ExportProcess, ErrDeadlineExceeded, "exceeded the call deadline of 1s")
		})
	}
}
