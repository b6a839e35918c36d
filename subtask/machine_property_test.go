package subtask

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMachineProperties drives Machines with random interleavings of the
// input channels, random ticks and random snapshot failures, carries out
// their actions as a driver would, and checks them against a simple model
// of the channels' contents:
//
//   - every record is delivered once, and never from a blocked channel;
//   - the pre-barrier hooks, then the forwarded barrier, then the
//     synchronous snapshot, in that order, once per checkpoint, with ids
//     increasing;
//   - an aligned (exactly-once) snapshot of n holds exactly the records
//     before barrier n on every channel; at-least-once, at least those;
//     unaligned (or switched by the timeout), the snapshot plus the
//     captured channel state hold exactly those, and nothing twice;
//     savepoints are never unaligned (in unaligned mode they align);
//   - a failed synchronous phase declines and cancels downstream, never
//     fails the subtask, and so does an abort of the coordinator (without
//     the decline); a checkpoint is persisted only after its synchronous
//     phase and its captures, and acked only after that;
//   - once every channel has ended, the input ends once and the machine
//     waits for its final checkpoint.
func TestMachineProperties(t *testing.T) {
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		modes := []Mode{ExactlyOnce, AtLeastOnce, Unaligned}
		cfg := Config{Channels: 1 + r.IntN(4), Mode: modes[r.IntN(3)]}
		if cfg.Mode == ExactlyOnce && r.IntN(2) == 0 {
			cfg.AlignedTimeout = int64(1 + r.IntN(20))
		}
		if err := runProperty(r, cfg); err != nil {
			t.Fatalf("seed %d, %+v: %v", seed, cfg, err)
		}
	}
}

// propMsg is a message of a channel: a record (id > 0 in rec), a barrier
// (bar > 0) or the end.
type propMsg struct {
	rec int
	bar int64
	end bool
}

type propRun struct {
	m        *Machine
	cfg      Config
	chans    [][]propMsg
	before   map[int64]map[int]bool // records before barrier n, all channels
	blocked  []bool
	done     map[int]bool // delivered records
	snaps    map[int64]map[int]bool
	unalign  map[int64]bool
	captured map[int64]map[int]bool
	order    map[int64][]string
	persist  map[int64]bool
	syncDone map[int64]bool
	failed   map[int64]bool
	lastFwd  int64
	current  int // record being delivered
	ended    bool
	kinds    map[int64]Kind
}

// propTrace prints a run's steps when debugging it.
var propTrace = func(string) {}

func runProperty(r *rand.Rand, cfg Config) error {
	m, err := NewMachine(cfg)
	if err != nil {
		return err
	}
	p := &propRun{m: m, cfg: cfg, blocked: make([]bool, cfg.Channels), done: map[int]bool{},
		before: map[int64]map[int]bool{}, snaps: map[int64]map[int]bool{}, unalign: map[int64]bool{},
		captured: map[int64]map[int]bool{}, order: map[int64][]string{}, persist: map[int64]bool{},
		syncDone: map[int64]bool{}, failed: map[int64]bool{}}
	nbar := int64(1 + r.IntN(4))
	kinds := map[int64]Kind{}
	for n := int64(1); n <= nbar; n++ {
		kinds[n] = KindCheckpoint
		if r.IntN(4) == 0 {
			kinds[n] = KindSavepoint
		}
	}
	p.kinds = kinds
	rec := 0
	for range cfg.Channels {
		var msgs []propMsg
		for n := int64(1); n <= nbar; n++ {
			for range r.IntN(4) {
				rec++
				msgs = append(msgs, propMsg{rec: rec})
			}
			if r.IntN(12) == 0 {
				break // the channel ends early
			}
			msgs = append(msgs, propMsg{bar: n})
		}
		for range r.IntN(3) {
			rec++
			msgs = append(msgs, propMsg{rec: rec})
		}
		msgs = append(msgs, propMsg{end: true})
		p.chans = append(p.chans, msgs)
		// Records before barrier n: all up to barrier n, or all if the
		// channel ends first.
		for n := int64(1); n <= nbar; n++ {
			if p.before[n] == nil {
				p.before[n] = map[int]bool{}
			}
			for _, msg := range msgs {
				if msg.bar == n {
					break
				}
				if msg.rec > 0 {
					p.before[n][msg.rec] = true
				}
			}
		}
	}
	now := int64(0)
	for steps := 0; ; steps++ {
		if steps > 10000 {
			return fmt.Errorf("no progress")
		}
		var ready []int
		for c, msgs := range p.chans {
			if len(msgs) > 0 && !p.blocked[c] {
				ready = append(ready, c)
			}
		}
		if len(ready) == 0 {
			if slices.ContainsFunc(p.chans, func(ms []propMsg) bool { return len(ms) > 0 }) {
				if _, ok := m.NextWake(); !ok {
					return fmt.Errorf("every channel with input is blocked and nothing wakes the subtask")
				}
				now += 5
				if err := p.run(r, m.Tick(now)); err != nil {
					return err
				}
				continue
			}
			break
		}
		now += int64(r.IntN(3))
		if r.IntN(5) == 0 {
			if err := p.run(r, m.Tick(now)); err != nil {
				return err
			}
		}
		if r.IntN(40) == 0 {
			// The coordinator aborts a checkpoint (expired, or declined
			// elsewhere).
			id := 1 + r.Int64N(nbar)
			if err := p.run(r, m.Control(Control{Action: Abort, ID: id, Reason: "expired"})); err != nil {
				return err
			}
		}
		c := ready[r.IntN(len(ready))]
		msg := p.chans[c][0]
		p.chans[c] = p.chans[c][1:]
		propTrace(fmt.Sprintf("ch %d: %+v", c, msg))
		switch {
		case msg.rec > 0:
			p.current = msg.rec
			err = m.Data(c, 1)
		case msg.bar > 0:
			err = m.Barrier(now, c, msg.bar, kinds[msg.bar])
		default:
			err = m.EndOfInput(now, c)
		}
		if err := p.run(r, err); err != nil {
			return err
		}
	}
	if len(p.done) != rec {
		return fmt.Errorf("%d of %d records delivered", len(p.done), rec)
	}
	if !p.ended || m.Wait() != WaitControl {
		return fmt.Errorf("every input ended, but end of input %t and the machine waits for %v", p.ended, m.Wait())
	}
	return p.check()
}

// run carries out the machine's actions, reporting snapshot phases at once
// (a fifth of synchronous phases fail).
func (p *propRun) run(r *rand.Rand, err error) error {
	if err != nil {
		return err
	}
	for q := p.m.Ready(); len(q) > 0; q = append(q[1:], p.m.Ready()...) {
		propTrace("  " + q[0].String())
		switch a := q[0].(type) {
		case Deliver:
			if p.blocked[a.Ch] {
				return fmt.Errorf("delivered from blocked channel %d", a.Ch)
			}
			if p.done[p.current] {
				return fmt.Errorf("record %d delivered twice", p.current)
			}
			p.done[p.current] = true
			if a.Capture > 0 {
				if p.snaps[a.Capture] == nil {
					return fmt.Errorf("capture for %d, which has no snapshot", a.Capture)
				}
				p.captured[a.Capture][p.current] = true
			}
		case Block:
			if p.blocked[a.Ch] {
				return fmt.Errorf("%v: blocked already", a)
			}
			p.blocked[a.Ch] = true
		case Unblock:
			if !p.blocked[a.Ch] {
				return fmt.Errorf("%v: not blocked", a)
			}
			p.blocked[a.Ch] = false
		case PreBarrier:
			p.order[a.ID] = append(p.order[a.ID], "pre")
		case ForwardBarrier:
			if a.ID <= p.lastFwd {
				return fmt.Errorf("barrier %d forwarded after %d", a.ID, p.lastFwd)
			}
			p.lastFwd = a.ID
			p.order[a.ID] = append(p.order[a.ID], "forward")
		case SnapshotSync:
			p.order[a.ID] = append(p.order[a.ID], "sync")
			p.snaps[a.ID] = copySet(p.done)
			p.unalign[a.ID] = a.Unaligned
			p.captured[a.ID] = map[int]bool{}
			out := Outcome{}
			if r.IntN(5) == 0 {
				out.Err = "injected"
				p.failed[a.ID] = true
			}
			if err := p.m.SnapshotDone(a.ID, PhaseSync, out); err != nil {
				return err
			}
			p.syncDone[a.ID] = true
		case Persist:
			if !p.syncDone[a.ID] || p.failed[a.ID] || p.persist[a.ID] {
				return fmt.Errorf("persist %d: synced %t, failed %t, persisted %t", a.ID, p.syncDone[a.ID], p.failed[a.ID], p.persist[a.ID])
			}
			p.persist[a.ID] = true
			if err := p.m.SnapshotDone(a.ID, PhaseAsync, Outcome{}); err != nil {
				return err
			}
		case Ack:
			if !p.persist[a.ID] {
				return fmt.Errorf("ack %d before persist", a.ID)
			}
		case ForwardCancel:
			if p.persist[a.ID] {
				return fmt.Errorf("cancel of %d after persist", a.ID)
			}
			p.failed[a.ID] = true
		case EndOfInput:
			if p.ended {
				return fmt.Errorf("end of input twice")
			}
			p.ended = true
		case Decline:
			if p.persist[a.ID] {
				return fmt.Errorf("decline %d after persist", a.ID)
			}
			p.failed[a.ID] = true // dropped: subsumed, or its sync failed
		case Finish:
			if a.Err != "" {
				return fmt.Errorf("the subtask failed: %s", a.Err)
			}
		}
	}
	return nil
}

func (p *propRun) check() error {
	for id, snap := range p.snaps {
		if got := p.order[id]; !slices.Equal(got, []string{"pre", "forward", "sync"}) {
			return fmt.Errorf("checkpoint %d: actions in order %v", id, got)
		}
		if p.failed[id] {
			continue
		}
		want := p.before[id]
		if p.kinds[id] == KindSavepoint && p.unalign[id] {
			return fmt.Errorf("savepoint %d taken unaligned", id)
		}
		switch {
		case p.unalign[id]:
			for rec := range p.captured[id] {
				if snap[rec] {
					return fmt.Errorf("checkpoint %d: record %d both in the snapshot and captured", id, rec)
				}
				snap[rec] = true
			}
			if !mapsEqual(snap, want) {
				return fmt.Errorf("unaligned checkpoint %d: snapshot and channel state %v, want %v", id, keys(snap), keys(want))
			}
		case p.cfg.Mode == AtLeastOnce:
			for rec := range want {
				if !snap[rec] {
					return fmt.Errorf("at-least-once checkpoint %d: record %d missing", id, rec)
				}
			}
		default:
			if !mapsEqual(snap, want) {
				return fmt.Errorf("aligned checkpoint %d: snapshot %v, want %v", id, keys(snap), keys(want))
			}
		}
		if !p.persist[id] {
			return fmt.Errorf("checkpoint %d never persisted", id)
		}
	}
	return nil
}

func copySet(m map[int]bool) map[int]bool {
	c := make(map[int]bool, len(m))
	for k := range m {
		c[k] = true
	}
	return c
}

func mapsEqual(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[int]bool) []int {
	var k []int
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return k
}
