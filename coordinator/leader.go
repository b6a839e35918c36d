package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// LeaderBucket is the JetStream key-value bucket that holds the
// coordinators' lease (key leaderKey): the one coordinator that holds it
// leads the cluster; the others are standbys.
const LeaderBucket = "wstream_leader"

const leaderKey = "coordinator"

// DefaultLease is the lease period of a coordinator when Config.Lease is
// zero: a leader renews a third of the way through it, and a standby takes
// over once it has seen the lease unchanged for that long.
const DefaultLease = 10 * time.Second

// errDeposed says that a coordinator lost its lease to another: it must not
// act any more.
var errDeposed = errors.New("this coordinator no longer leads: another took the lease")

// errNotLeading says that a coordinator has not (yet) taken the lease.
var errNotLeading = errors.New("this coordinator is a standby")

// LeaderInfo names the coordinator that leads.
type LeaderInfo struct {
	// ID is the leading coordinator's id (Config.ServerID).
	ID string `json:"id"`
	// HTTP is the base URL of its web UI and REST API ("" when it serves
	// none).
	HTTP string `json:"http,omitempty"`
	// Epoch is its leadership epoch: the revision of the write that took
	// the lease (0 when not known yet).
	Epoch uint64 `json:"epoch,omitempty"`
	// LeaseMillis is the period it renews its lease within.
	LeaseMillis int64 `json:"leaseMs,omitempty"`
}

// leader keeps one coordinator's lease: it takes it, renews it, and says
// whether the coordinator may act now (check), with the epoch that fences
// its writes and commands.
type leader struct {
	kv  jetstream.KeyValue
	log *slog.Logger
	now func() time.Time

	// mu guards what follows; renewals hold it during their write, so that
	// a check waits for one under way instead of writing another.
	mu     sync.Mutex
	l      lease
	self   LeaderInfo
	holder LeaderInfo // the holder last read (self while leading)
	// epochNow is the epoch while leading (0: not), read without mu,
	// which a renewal holds during its I/O.
	epochNow atomic.Uint64
}

// openLeader opens (creating it on first use) the lease bucket.
func openLeader(ctx context.Context, nc *nats.Conn, self string, ttl time.Duration, replicas int, log *slog.Logger) (*leader, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeaderBucket,
		Description: "wstream: the lease of the leading coordinator",
		Storage:     jetstream.FileStorage,
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the leader bucket %s: %w", LeaderBucket, transport.ReplicasError(err, replicas))
	}
	return &leader{kv: kv, log: log, now: time.Now, l: lease{ttl: ttl},
		self: LeaderInfo{ID: self, LeaseMillis: ttl.Milliseconds()}}, nil
}

// value is what the leader writes into the lease key.
func (ld *leader) value() []byte {
	v := ld.self
	if ld.l.leading() {
		v.Epoch = ld.l.epoch
	}
	b, _ := json.Marshal(v)
	return b
}

// read reads the lease key (present false: absent).
func (ld *leader) read(ctx context.Context) (leaseView, LeaderInfo, error) {
	e, err := ld.kv.Get(ctx, leaderKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return leaseView{}, LeaderInfo{}, nil
	}
	if err != nil {
		return leaseView{}, LeaderInfo{}, fmt.Errorf("reading the lease in bucket %s: %w", LeaderBucket, err)
	}
	var h LeaderInfo
	if json.Unmarshal(e.Value(), &h) != nil {
		// Unreadable: it is still a holder's, and lapses like one.
		h = LeaderInfo{ID: "?"}
	}
	if h.Epoch == 0 {
		h.Epoch = e.Revision()
	}
	return leaseView{Present: true, Rev: e.Revision(), TTL: time.Duration(h.LeaseMillis) * time.Millisecond}, h, nil
}

// take writes the lease: force puts it whatever it holds (a server that
// embeds the NATS server: no other coordinator can have acted on it
// before this process started it); otherwise it is created, or taken over
// on revision rev.
func (ld *leader) take(ctx context.Context, force bool, create bool, rev uint64) (bool, error) {
	sent := ld.now()
	var (
		got uint64
		err error
	)
	switch {
	case force:
		got, err = ld.kv.Put(ctx, leaderKey, ld.value())
	case create:
		got, err = ld.kv.Create(ctx, leaderKey, ld.value())
	default:
		got, err = ld.kv.Update(ctx, leaderKey, ld.value(), rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
		// Another server was quicker.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("taking the lease in bucket %s: %w", LeaderBucket, err)
	}
	ld.l.took(sent, got)
	ld.epochNow.Store(got)
	ld.holder = ld.self
	ld.holder.Epoch = got
	// The key names the epoch from the first renewal on; write it at once
	// so that standbys and clients see it.
	if err := ld.renewLocked(ctx); err != nil && !errors.Is(err, errDeposed) {
		ld.log.Warn("renewing the lease just taken", "err", err)
	}
	return ld.l.leading(), nil
}

// step reads the lease and takes it if it is free or has lapsed; it
// reports whether this server leads. force takes it whatever it holds.
func (ld *leader) step(ctx context.Context, force bool) (bool, error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.l.leading() {
		return true, nil
	}
	if force {
		return ld.take(ctx, true, false, 0)
	}
	v, h, err := ld.read(ctx)
	if err != nil {
		return false, err
	}
	now := ld.now()
	switch ld.l.observe(now, v) {
	case leaseCreate:
		return ld.take(ctx, false, true, 0)
	case leaseTakeOver:
		return ld.take(ctx, false, false, v.Rev)
	}
	ld.holder = h
	return false, nil
}

// renewLocked renews the lease by compare-and-set on the revision last
// written; ld.mu is held. It returns errDeposed when another server has
// taken the lease meanwhile.
func (ld *leader) renewLocked(ctx context.Context) error {
	if !ld.l.leading() {
		if ld.l.deposed {
			return errDeposed
		}
		return errNotLeading
	}
	sent := ld.now()
	rev, err := ld.kv.Update(ctx, leaderKey, ld.value(), ld.l.rev)
	if isWrongSequence(err) || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound) {
		ld.l.lost()
		ld.epochNow.Store(0)
		if _, h, rerr := ld.read(ctx); rerr == nil {
			ld.holder = h
		}
		return errDeposed
	}
	if err != nil {
		return fmt.Errorf("renewing the lease in bucket %s: %w", LeaderBucket, err)
	}
	ld.l.renewed(sent, rev)
	return nil
}

// renew renews the lease if a renewal is due.
func (ld *leader) renew(ctx context.Context) error {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.l.leading() && !ld.l.renewDue(ld.now()) {
		return nil
	}
	return ld.renewLocked(ctx)
}

// check returns the epoch to fence a write or a command with, once the
// lease is sure to be held: a leader whose lease has run out (it could not
// renew, or its process was paused) renews first, and is deposed if
// another server took the lease meanwhile.
func (ld *leader) check() (uint64, error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.l.held(ld.now()) {
		return ld.l.epoch, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	if err := ld.renewLocked(ctx); err != nil {
		return 0, err
	}
	if !ld.l.held(ld.now()) {
		// The renewal took longer than the lease: its write may not count.
		return 0, fmt.Errorf("renewing the lease took longer than its period %s", ld.l.ttl)
	}
	return ld.l.epoch, nil
}

// release deletes the lease of a leader that shuts down, so that a standby
// takes over at once: conditioned on the revision last written, it deletes
// nothing of a later leader's.
func (ld *leader) release() {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if !ld.l.leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := ld.kv.Delete(ctx, leaderKey, jetstream.LastRevision(ld.l.rev)); err != nil {
		ld.log.Warn("releasing the lease", "err", err)
	}
	ld.l.lost()
	ld.epochNow.Store(0)
}

// info returns the holder last known, and whether this server leads.
func (ld *leader) info() (LeaderInfo, bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.holder, ld.l.leading()
}

// setHTTP sets the URL of this server's REST API, written with the next
// renewal.
func (ld *leader) setHTTP(u string) {
	ld.mu.Lock()
	ld.self.HTTP = u
	if ld.l.leading() {
		ld.holder.HTTP = u
	}
	ld.mu.Unlock()
}

// leaderAnnouncement tells workers the current epoch (transport.SubjectLeader).
func (ld *leader) announcement() []byte {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	b, _ := json.Marshal(transport.LeaderAnnouncement{ID: ld.self.ID, Epoch: ld.l.epoch})
	return b
}

// serverID is the coordinator's id in the lease.
func (c *Coordinator) serverID() string {
	if c.cfg.ServerID != "" {
		return c.cfg.ServerID
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "coordinator"
	}
	c.cfg.ServerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	return c.cfg.ServerID
}

func (c *Coordinator) leasePeriod() time.Duration {
	if c.cfg.Lease > 0 {
		return c.cfg.Lease
	}
	return DefaultLease
}

// fence returns the epoch that the coordinator's next write or command
// carries, or an error when it must not act: it has not taken the lease,
// or lost it (it is then deposed). A coordinator without JetStream leads
// alone, at epoch 0.
func (c *Coordinator) fence() (uint64, error) {
	if c.lead == nil {
		return 0, nil
	}
	epoch, err := c.lead.check()
	if errors.Is(err, errDeposed) {
		c.depose(err)
	}
	return epoch, err
}

// depose reports, once, that the coordinator lost its lease.
func (c *Coordinator) depose(err error) {
	c.deposeOnce.Do(func() {
		h := LeaderInfo{}
		if c.lead != nil {
			h, _ = c.lead.info()
		}
		c.cfg.Log.Error("this coordinator stops acting: it does not lead", "err", err, "leader", h.ID, "epoch", h.Epoch)
		if c.cfg.Deposed != nil {
			go c.cfg.Deposed(err)
		}
	})
}

// leaseStep is how often a leader looks whether its renewal is due, and a
// standby reads the lease.
func (c *Coordinator) leaseStep() time.Duration { return max(c.leasePeriod()/12, 10*time.Millisecond) }

// everyLeaseStep calls step every lease step until quit closes or step
// returns false; the goroutine that runs it counts in c.elector.
func (c *Coordinator) everyLeaseStep(quit <-chan struct{}, step func() bool) {
	defer c.elector.Done()
	t := time.NewTicker(c.leaseStep())
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		if !step() {
			return
		}
	}
}

// keepLease renews the lease until quit closes, and tells the workers the
// epoch at every renewal (one that missed the announcement at the
// take-over, in a reconnection, learns it so).
func (c *Coordinator) keepLease(quit <-chan struct{}) {
	failing := false
	c.everyLeaseStep(quit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		defer cancel()
		c.lead.mu.Lock()
		due := c.lead.l.renewDue(c.lead.now())
		c.lead.mu.Unlock()
		err := c.lead.renew(ctx)
		switch {
		case errors.Is(err, errDeposed):
			c.depose(err)
			return false
		case err != nil:
			if !failing {
				c.cfg.Log.Warn("renewing the lease (trying again)", "err", err)
			}
			failing = true
		default:
			if failing {
				c.cfg.Log.Info("the lease is renewed again")
			}
			failing = false
			if due {
				_ = c.cfg.NATS.Publish(transport.SubjectLeader, c.lead.announcement())
			}
		}
		return true
	})
}

// standby reads the lease every lease step and takes over once it lapses:
// the coordinator then activates as one started with the lease would,
// resuming the jobs of the bucket.
func (c *Coordinator) standby(quit <-chan struct{}) {
	last := ""
	c.everyLeaseStep(quit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		leading, err := c.lead.step(ctx, false)
		cancel()
		if err != nil {
			if msg := err.Error(); msg != last {
				c.cfg.Log.Warn("standby: reading the lease", "err", err)
				last = msg
			}
			return true
		}
		if !leading {
			return true
		}
		h, _ := c.lead.info()
		c.cfg.Log.Info("the leader's lease lapsed: this coordinator leads now", "epoch", h.Epoch)
		ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.activate(ctx); err != nil {
			c.depose(fmt.Errorf("taking over: %w", err))
		}
		// activate started keepLease, which counts in c.elector itself.
		return false
	})
}

// Leader names the coordinator that leads, as this one knows it, and
// whether it is this one.
func (c *Coordinator) Leader() (LeaderInfo, bool) {
	if c.lead == nil {
		return LeaderInfo{ID: c.serverID()}, true
	}
	return c.lead.info()
}

// SetHTTPURL tells the lease the base URL of this coordinator's REST API:
// standbys redirect requests there while it leads.
func (c *Coordinator) SetHTTPURL(u string) {
	if c.lead != nil {
		c.lead.setHTTP(u)
	}
}

// epoch is the coordinator's leadership epoch as it stands (0: none), for
// the records it queues; the write itself is fenced (jobStore.write).
func (c *Coordinator) epoch() uint64 {
	if c.lead == nil {
		return 0
	}
	return c.lead.epochNow.Load()
}
