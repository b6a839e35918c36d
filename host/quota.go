package host

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// chargeOutput counts n records of size encoded bytes that the call in
// progress emits, before they reach the collector, and stops the call when
// they exceed a quota.
func (i *Instance) chargeOutput(n, size int) {
	i.emitted += n
	i.emitBytes += size
	q := &i.q
	if i.inputs > 0 && i.emitted > satMul(q.recordsPerInput, i.inputs) {
		what := plural(i.inputs, "input record", "input records")
		if i.inputTimers {
			what = plural(i.inputs, "timer", "timers")
		}
		overQuota("MaxRecordsPerInput", q.recordsPerInput, "emitted %d records for %s", i.emitted, what)
	}
	if i.emitted > q.recordsPerCall {
		overQuota("MaxRecordsPerCall", q.recordsPerCall, "emitted %d records in one call", i.emitted)
	}
	if i.emitBytes > q.outputBytes {
		overQuota("MaxOutputBytesPerCall", q.outputBytes, "emitted %d bytes of records in one call", i.emitBytes)
	}
}

// chargeState counts a state write of n bytes.
func (i *Instance) chargeState(n int) {
	i.stateBytes += n + StateWriteOverhead
	if i.stateBytes > i.q.stateBytes {
		overQuota("MaxStateBytesPerCall", i.q.stateBytes, "wrote %d bytes of state in one call", i.stateBytes)
	}
}

// keyTooLong reports whether key or ns exceeds a MaxStateKeyBytes lowered
// below the ABI's maximum; at the maximum the state backend checks sizes
// itself, in the order abi/ABI.md gives.
func (i *Instance) keyTooLong(key, ns []byte) bool {
	lim := i.q.keyBytes
	return lim < operator.MaxKeySize && (len(key) > lim || len(ns) > lim)
}

func satMul(a, b int) int {
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}

// timerBook tracks the timers an instance registered that have not fired
// or been deleted, by a 64-bit hash of (slot, domain, time, key,
// namespace), for the timer count quotas (MaxTimersPerKey,
// MaxTimersPerSubtask, MaxTimerBytesPerSubtask). It holds about 50 bytes a
// timer in host memory, so it is kept only when one of them is set: by
// default timers are bounded by their bytes on disk (a tenant's state
// quota), as the state backend keeps them in Pebble. Timers restored from
// a checkpoint are not in the book until the guest registers them again.
type timerBook struct {
	seed    maphash.Seed
	buf     []byte
	pending map[uint64]pendingTimer
	perKey  map[uint64]int32 // by hash of (slot, key)
	bytes   int              // key and namespace bytes of pending
}

type pendingTimer struct {
	key  uint64
	size int32
}

// ids hashes a timer and its key.
func (b *timerBook) ids(slot, domain int32, ts int64, key, ns []byte) (id, keyID uint64) {
	if b.pending == nil {
		b.seed = maphash.MakeSeed()
		b.pending = map[uint64]pendingTimer{}
		b.perKey = map[uint64]int32{}
	}
	buf := binary.LittleEndian.AppendUint32(b.buf[:0], uint32(slot))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(key)))
	buf = append(buf, key...)
	keyID = maphash.Bytes(b.seed, buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(domain))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(ts))
	buf = append(buf, ns...)
	b.buf = buf
	if cap(b.buf) > 1<<20 {
		b.buf = nil
	}
	return maphash.Bytes(b.seed, buf), keyID
}

func (b *timerBook) has(id uint64) bool {
	_, ok := b.pending[id]
	return ok
}

func (b *timerBook) add(id, keyID uint64, size int) {
	b.pending[id] = pendingTimer{key: keyID, size: int32(size)}
	b.perKey[keyID]++
	b.bytes += size
}

func (b *timerBook) remove(id uint64) {
	t, ok := b.pending[id]
	if !ok {
		return
	}
	delete(b.pending, id)
	if n := b.perKey[t.key] - 1; n > 0 {
		b.perKey[t.key] = n
	} else {
		delete(b.perKey, t.key)
	}
	b.bytes -= int(t.size)
}

// checkTimer checks a new timer of slot s against the timer quotas and
// stops the call when it would exceed one. due says that it is already due while s fires timers of its
// domain: it prolongs the firing (MaxCascadedTimers).
func (i *Instance) checkTimer(s *slot, keyID uint64, size int, due, book bool) {
	q := &i.q
	b := &i.timers
	if !book {
		// No count quota is set.
	} else if n := int(b.perKey[keyID]) + 1; n > q.timersPerKey {
		overQuota("MaxTimersPerKey", q.timersPerKey, "registered a timer that makes %d pending timers for one key", n)
	}
	if n := len(b.pending) + 1; book && n > q.timersPerSubtask {
		overQuota("MaxTimersPerSubtask", q.timersPerSubtask, "registered a timer that makes %d pending timers in the subtask", n)
	}
	if n := b.bytes + size; book && n > q.timerBytes {
		overQuota("MaxTimerBytesPerSubtask", q.timerBytes, "registered a timer that makes %d bytes of pending timer keys and namespaces in the subtask", n)
	}
	if due {
		if n := s.cascade + 1; n > q.cascadedTimers {
			overQuota("MaxCascadedTimers", q.cascadedTimers,
				"registered %d already-due %s timers while firing timers", n, domainName(i.timerDomain))
		}
	}
}

func domainName(d int32) string {
	if d == abi.TimeProcessing {
		return "processing-time"
	}
	return "event-time"
}

// firedTimers takes the timers of an on_timer batch off the book before
// the call, and returns their domain (-1 for an empty or malformed batch).
func (i *Instance) firedTimers(s *slot, batch []byte) int32 {
	r, err := abi.NewReader(batch)
	if err != nil {
		return -1
	}
	domain := int32(-1)
	var rec abi.Record
	for {
		ok, err := r.Next(&rec)
		if err != nil || !ok {
			return domain
		}
		domain = int32(rec.Port)
		if len(i.timers.pending) > 0 {
			id, _ := i.timers.ids(s.index, domain, rec.Timestamp, rec.Key, rec.Value)
			i.timers.remove(id)
		}
	}
}

// logThrottle limits the guest-triggered lines an instance logs to
// Limits.LogLinesPerSecond, in windows of one second.
type logThrottle struct {
	start      time.Time // of the current window
	lines      int       // written in it
	suppressed int       // dropped since the last notice
}

// allow reports whether one more line may be written now. When a new
// window starts it first writes the notice for lines suppressed in the last.
func (l *logThrottle) allow(i *Instance) bool {
	if i.q.logLines == unlimited {
		return true
	}
	now := time.Now()
	if now.Sub(l.start) >= time.Second {
		l.notice(i)
		l.start, l.lines = now, 0
	}
	if l.lines >= i.q.logLines {
		l.suppressed++
		return false
	}
	l.lines++
	return true
}

// flushDue writes the notice at the end of a call once its window is over,
// so a guest that stops logging still gets its count reported.
func (l *logThrottle) flushDue(i *Instance, s *slot) {
	if l.suppressed > 0 && time.Since(l.start) >= time.Second {
		l.flush(i, s)
	}
}

// flush writes the notice whatever the window (on failure and Close).
func (l *logThrottle) flush(i *Instance, s *slot) {
	if l.suppressed == 0 {
		return
	}
	cur := i.cur
	i.cur = s
	l.notice(i)
	i.cur = cur
}

func (l *logThrottle) notice(i *Instance) {
	if l.suppressed == 0 {
		return
	}
	n := l.suppressed
	l.suppressed = 0
	i.writeLog(abi.LogWarn, fmt.Sprintf("%d guest log lines suppressed (over the limit of %d lines per second, %s)",
		n, i.q.logLines, quotaFlags["LogLinesPerSecond"]))
}
