package coordinator

import "time"

// lease is the pure logic of leader election: what a server does with the
// lease key it reads, when a leader renews, how long it may act, and
// whether a write of a job record is fenced off. It does no I/O and reads
// no clock: every step takes the time (a monotonic reading of the
// process's own clock; no two servers compare clocks) as input.
//
// The lease is one key of a JetStream key-value bucket. A leader renews it
// by compare-and-set on the revision it last wrote; a standby takes it by
// compare-and-set on the revision it saw unchanged for a whole lease
// period, or creates it when it is absent. The revision of the write that
// took the lease is the leadership epoch: stream sequences only grow, so a
// later leader's epoch is higher than every earlier one's.
//
// A leader counts its lease from when it sent the write that renewed it, a
// standby from when it first saw that write: the leader's lease ends
// before a standby may take it, whatever either clock reads.
type lease struct {
	ttl time.Duration

	// As leader: the epoch (0: not leading), the revision of its latest
	// write, and until when it may act without renewing.
	epoch      uint64
	rev        uint64
	validUntil time.Time
	// deposed: a renewal lost against another server's write.
	deposed bool

	// As standby: the revision last seen, since when, and the period its
	// holder announced.
	seen    bool
	seenRev uint64
	seenAt  time.Time
	seenTTL time.Duration
}

// leaseView is what a read of the lease key found.
type leaseView struct {
	// Present is false when the key is absent (never taken, or deleted).
	Present bool
	Rev     uint64
	// TTL is the period its holder renews within (0: unknown).
	TTL time.Duration
}

// leaseMove is what a server not leading does after a read.
type leaseMove int

const (
	// leaseWait: someone holds the lease; read it again later.
	leaseWait leaseMove = iota
	// leaseCreate: the key is absent; create it.
	leaseCreate
	// leaseTakeOver: the holder has not renewed for a whole period;
	// update the key on the revision seen.
	leaseTakeOver
)

// leaseMargin is the part of the period a leader does not use: it stops
// acting that much before a standby may take over.
func (l *lease) leaseMargin() time.Duration { return l.ttl / 10 }

// observe decides, for a server that does not lead, what to do about the
// lease key as read at now.
func (l *lease) observe(now time.Time, v leaseView) leaseMove {
	if !v.Present {
		l.seen = false
		return leaseCreate
	}
	if !l.seen || v.Rev != l.seenRev {
		// Renewed (or first seen): the period starts again from now.
		l.seen, l.seenRev, l.seenAt, l.seenTTL = true, v.Rev, now, v.TTL
		return leaseWait
	}
	period := max(l.ttl, l.seenTTL)
	if now.Sub(l.seenAt) >= period {
		return leaseTakeOver
	}
	return leaseWait
}

// took records that a write sent at sent took the lease at revision rev:
// rev is the new epoch.
func (l *lease) took(sent time.Time, rev uint64) {
	l.epoch, l.rev, l.deposed, l.seen = rev, rev, false, false
	l.validUntil = sent.Add(l.ttl - l.leaseMargin())
}

// renewed records that a renewal sent at sent was written at revision rev.
func (l *lease) renewed(sent time.Time, rev uint64) {
	if l.epoch == 0 || l.deposed {
		return
	}
	l.rev = rev
	if v := sent.Add(l.ttl - l.leaseMargin()); v.After(l.validUntil) {
		l.validUntil = v
	}
}

// lost records that a renewal (or a read) found the lease taken by
// another server: the leader is deposed for good.
func (l *lease) lost() {
	if l.epoch != 0 {
		l.deposed = true
	}
}

// leading reports whether the server leads (it may have to renew before it
// acts: held).
func (l *lease) leading() bool { return l.epoch != 0 && !l.deposed }

// held reports whether the leader may act at now without renewing first.
func (l *lease) held(now time.Time) bool {
	return l.leading() && now.Before(l.validUntil)
}

// renewDue reports whether the leader should renew at now: a third of the
// period after its latest renewal, so that two renewals may fail before the
// lease lapses.
func (l *lease) renewDue(now time.Time) bool {
	if !l.leading() {
		return false
	}
	return !now.Before(l.validUntil.Add(-(l.ttl - l.leaseMargin()) + l.ttl/3))
}

// fenced reports whether a write by the leader of epoch ours must be
// refused because the record holds a write of a later leader (stored).
// Epoch 0 is a record written before leases (or without JetStream).
func fenced(stored, ours uint64) bool { return stored > ours }
