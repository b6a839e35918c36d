package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// InputGate merges a subtask's input channels. It reads them round-robin so
// that no channel starves another, and it can stop reading single channels
// (Block) — what barrier alignment needs.
type InputGate struct {
	chans   []InputChannel
	blocked []bool
	ended   []bool
	failing []FailingChannel
	open    int
	next    int
	wake    chan struct{}
	// interrupted is set by Interrupt, from any goroutine.
	interrupted atomic.Bool
}

// NewInputGate returns a gate over chans; channel i is reported as index i.
func NewInputGate(chans []InputChannel) *InputGate {
	g := &InputGate{
		chans:   chans,
		blocked: make([]bool, len(chans)),
		ended:   make([]bool, len(chans)),
		open:    len(chans),
		wake:    make(chan struct{}, 1),
	}
	for _, c := range chans {
		c.Notify(g.wake)
		if f, ok := c.(FailingChannel); ok {
			g.failing = append(g.failing, f)
		}
	}
	return g
}

// Len is the number of channels.
func (g *InputGate) Len() int { return len(g.chans) }

// Open is the number of channels that have not delivered KindEnd.
func (g *InputGate) Open() int { return g.open }

// Block stops delivering messages from channel i until Unblock.
func (g *InputGate) Block(i int) { g.blocked[i] = true }

// Unblock resumes channel i.
func (g *InputGate) Unblock(i int) {
	g.blocked[i] = false
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// errTimer is returned by Next when the timer fired before any message.
var errTimer = timerFired{}

type timerFired struct{}

func (timerFired) Error() string { return "transport: timer fired" }

// IsTimer reports whether err is Next's timer signal.
func IsTimer(err error) bool { _, ok := err.(timerFired); return ok }

// ErrInterrupted is returned by Next after Interrupt.
var ErrInterrupted = errors.New("transport: gate interrupted")

// Interrupt makes the current or next call of Next return ErrInterrupted,
// so that the subtask can handle control messages (checkpoint triggers and
// notifications) while it waits for input. Safe from any goroutine.
func (g *InputGate) Interrupt() {
	g.interrupted.Store(true)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Next returns the next message and the index of its channel. It blocks
// until a message arrives, timer (which may be nil) fires — then it returns
// an error for which IsTimer is true —, a channel breaks (FailingChannel) or
// ctx is done. KindEnd is delivered once per channel; after it the channel is
// not read again.
func (g *InputGate) Next(ctx context.Context, timer <-chan time.Time) (int, Message, error) {
	for {
		if g.interrupted.Load() && g.interrupted.CompareAndSwap(true, false) {
			return -1, Message{}, ErrInterrupted
		}
		// A broken channel fails the gate, blocked or not.
		for _, f := range g.failing {
			if err := f.Err(); err != nil {
				return -1, Message{}, err
			}
		}
		n := len(g.chans)
		for k := 0; k < n; k++ {
			i := g.next
			g.next++
			if g.next == n {
				g.next = 0
			}
			if g.blocked[i] || g.ended[i] {
				continue
			}
			if m, ok := g.chans[i].TryRecv(); ok {
				if m.Kind == KindEnd {
					g.ended[i] = true
					g.open--
				}
				return i, m, nil
			}
		}
		select {
		case <-g.wake:
		case <-timer:
			return -1, Message{}, errTimer
		case <-ctx.Done():
			return -1, Message{}, ctx.Err()
		}
	}
}

// NotifyPriority makes every channel signal prio when a message overtakes
// its queue.
func (g *InputGate) NotifyPriority(prio chan<- struct{}) {
	for _, c := range g.chans {
		c.NotifyPriority(prio)
	}
}

// TakePriority returns a message that overtook the queue of a channel that
// is neither blocked nor ended, when take accepts it, without blocking.
func (g *InputGate) TakePriority(take func(Message) bool) (int, Message, bool) {
	for i, c := range g.chans {
		if g.blocked[i] || g.ended[i] {
			continue
		}
		if m, ok := c.TryRecvPriority(take); ok {
			if m.Kind == KindEnd {
				g.ended[i] = true
				g.open--
			}
			return i, m, true
		}
	}
	return -1, Message{}, false
}

// Close closes every channel so that blocked producers return ErrClosed.
func (g *InputGate) Close() {
	for _, c := range g.chans {
		c.Close()
	}
}
