package coordinator

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestLeaseObserve: a server that does not lead creates an absent lease at
// once, waits while the revision changes, and takes over only once one
// revision stayed unchanged for a whole period (the longer of its own and
// the holder's), counted from when it first saw it.
func TestLeaseObserve(t *testing.T) {
	const ttl = 10 * time.Second
	type read struct {
		at   time.Duration
		view leaseView
		want leaseMove
	}
	held := func(rev uint64) leaseView { return leaseView{Present: true, Rev: rev, TTL: ttl} }
	for _, tc := range []struct {
		name  string
		reads []read
	}{
		{"absent at start: create at once", []read{{0, leaseView{}, leaseCreate}}},
		{"held at start: wait, however old it is", []read{{0, held(5), leaseWait}, {ttl - time.Millisecond, held(5), leaseWait}}},
		{"unchanged for a period: take over", []read{{0, held(5), leaseWait}, {ttl, held(5), leaseTakeOver}}},
		{"renewed: the period starts again", []read{
			{0, held(5), leaseWait}, {9 * time.Second, held(6), leaseWait}, {ttl, held(6), leaseWait},
			{19*time.Second - time.Millisecond, held(6), leaseWait}, {19 * time.Second, held(6), leaseTakeOver}}},
		{"deleted after being seen: create", []read{{0, held(5), leaseWait}, {time.Second, leaseView{}, leaseCreate}}},
		{"seen again after it was absent: wait a whole period", []read{
			{0, held(5), leaseWait}, {time.Second, leaseView{}, leaseCreate}, {2 * time.Second, held(9), leaseWait},
			{11 * time.Second, held(9), leaseWait}, {12 * time.Second, held(9), leaseTakeOver}}},
		{"the holder's longer period counts", []read{
			{0, leaseView{Present: true, Rev: 3, TTL: 30 * time.Second}, leaseWait},
			{ttl, leaseView{Present: true, Rev: 3, TTL: 30 * time.Second}, leaseWait},
			{30 * time.Second, leaseView{Present: true, Rev: 3, TTL: 30 * time.Second}, leaseTakeOver}}},
		{"a holder's shorter period does not shorten the wait", []read{
			{0, leaseView{Present: true, Rev: 3, TTL: time.Second}, leaseWait},
			{5 * time.Second, leaseView{Present: true, Rev: 3, TTL: time.Second}, leaseWait},
			{ttl, leaseView{Present: true, Rev: 3, TTL: time.Second}, leaseTakeOver}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lease{ttl: ttl}
			for i, r := range tc.reads {
				if got := l.observe(at(r.at), r.view); got != r.want {
					t.Fatalf("read %d at %s of %+v: %d, want %d", i, r.at, r.view, got, r.want)
				}
			}
		})
	}
}

// TestLeaseHeld: a leader acts only within its period (less the margin)
// after the write that took or renewed the lease was sent; a renewal
// extends it, never shortens it; once deposed it never acts again.
func TestLeaseHeld(t *testing.T) {
	const ttl = 10 * time.Second
	l := lease{ttl: ttl}
	if l.leading() || l.held(at(0)) || l.renewDue(at(0)) {
		t.Fatal("a server that never took the lease leads")
	}
	l.took(at(0), 7)
	if !l.leading() || l.epoch != 7 || l.rev != 7 {
		t.Fatalf("after taking at revision 7: leading %v epoch %d rev %d", l.leading(), l.epoch, l.rev)
	}
	valid := ttl - ttl/10
	for _, c := range []struct {
		at   time.Duration
		held bool
		due  bool
	}{
		{0, true, false}, {ttl/3 - time.Millisecond, true, false}, {ttl / 3, true, true},
		{valid - time.Millisecond, true, true}, {valid, false, true}, {time.Hour, false, true},
	} {
		if got := l.held(at(c.at)); got != c.held {
			t.Errorf("held at %s: %v, want %v", c.at, got, c.held)
		}
		if got := l.renewDue(at(c.at)); got != c.due {
			t.Errorf("renewDue at %s: %v, want %v", c.at, got, c.due)
		}
	}
	// A renewal sent at 5s counts from 5s; the epoch stays.
	l.renewed(at(5*time.Second), 12)
	if l.epoch != 7 || l.rev != 12 || !l.held(at(5*time.Second+valid-time.Millisecond)) || l.held(at(5*time.Second+valid)) {
		t.Fatalf("after renewal: epoch %d rev %d validUntil %s", l.epoch, l.rev, l.validUntil.Sub(t0))
	}
	// A late answer to an older renewal does not shorten the lease.
	l.renewed(at(time.Second), 13)
	if !l.held(at(5*time.Second + valid - time.Millisecond)) {
		t.Fatal("an older renewal shortened the lease")
	}
	// A paused leader: past its period it does not hold the lease, and
	// must renew before it acts.
	if l.held(at(time.Minute)) || !l.renewDue(at(time.Minute)) {
		t.Fatal("a leader paused past its period holds the lease")
	}
	l.lost()
	if l.leading() || l.held(at(5*time.Second)) || l.renewDue(at(time.Minute)) {
		t.Fatal("a deposed leader still leads")
	}
	l.renewed(at(6*time.Second), 20)
	if l.leading() || l.held(at(6*time.Second)) {
		t.Fatal("a renewal after deposition brought the leadership back")
	}
	// Taking the lease again is a new epoch.
	l.took(at(time.Minute), 40)
	if !l.leading() || l.epoch != 40 || !l.held(at(time.Minute)) {
		t.Fatal("taking the lease again did not lead at the new epoch")
	}
}

// TestLeaseLostWithoutLeading: losing a lease never taken changes nothing.
func TestLeaseLostWithoutLeading(t *testing.T) {
	l := lease{ttl: time.Second}
	l.lost()
	if l.deposed || l.leading() {
		t.Fatal("a standby was deposed")
	}
	l.renewed(at(0), 3)
	if l.leading() || l.rev != 0 {
		t.Fatal("a renewal made a standby lead")
	}
}

// TestLeaseStandbyAfterLeaderEnds: a standby's take-over comes after the
// leader's lease ended, whatever the delays of the write and its reading:
// the leader counts from sending, the standby from seeing.
func TestLeaseStandbyAfterLeaderEnds(t *testing.T) {
	const ttl = 4 * time.Second
	for _, delay := range []time.Duration{0, time.Millisecond, time.Second, 3 * time.Second} {
		leader, standby := lease{ttl: ttl}, lease{ttl: ttl}
		leader.took(at(0), 1)
		// The standby first reads the lease delay after the write was
		// sent (leader and standby each on its own clock; only
		// durations matter).
		standby.observe(at(delay), leaseView{Present: true, Rev: 1, TTL: ttl})
		var takeOver time.Duration
		for d := delay; d < time.Minute; d += 10 * time.Millisecond {
			if standby.observe(at(d), leaseView{Present: true, Rev: 1, TTL: ttl}) == leaseTakeOver {
				takeOver = d
				break
			}
		}
		if takeOver == 0 || leader.held(at(takeOver)) {
			t.Fatalf("delay %s: the standby takes over at %s while the leader holds the lease", delay, takeOver)
		}
	}
}

// TestFenced: a write is refused only when a later leader wrote the record.
func TestFenced(t *testing.T) {
	for _, c := range []struct {
		stored, ours uint64
		want         bool
	}{{0, 0, false}, {0, 5, false}, {5, 5, false}, {4, 5, false}, {6, 5, true}, {1, 0, true}} {
		if got := fenced(c.stored, c.ours); got != c.want {
			t.Errorf("fenced(%d, %d) = %v, want %v", c.stored, c.ours, got, c.want)
		}
	}
}
