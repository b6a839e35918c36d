package transport

import (
	"context"
	"strconv"
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

// GateEventKind says what ended a wait of Next.
type GateEventKind uint8

const (
	// GateMessage: a message arrived on channel Ch.
	GateMessage GateEventKind = iota + 1
	// GateTimer: the timer passed to Next fired before any message.
	GateTimer
	// GateInterrupt: Interrupt was called (control messages wait).
	GateInterrupt
)

func (k GateEventKind) String() string {
	switch k {
	case GateMessage:
		return "message"
	case GateTimer:
		return "timer"
	case GateInterrupt:
		return "interrupt"
	}
	return "gate-event(" + strconv.Itoa(int(k)) + ")"
}

// GateEvent is what Next returns: a message and its channel, the timer, or
// an interrupt. None of them is an error.
type GateEvent struct {
	Kind GateEventKind
	Ch   int // GateMessage: the channel's index
	Msg  Message
}

// Interrupt makes the current or next call of Next return a GateInterrupt,
// so that the subtask can handle control messages (checkpoint triggers and
// notifications) while it waits for input. Safe from any goroutine.
func (g *InputGate) Interrupt() {
	g.interrupted.Store(true)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Next returns the next event: a message and the index of its channel, the
// firing of timer (which may be nil) before any message, or an interrupt.
// It blocks until one of them happens; its error is ctx's when ctx is done
// first, or a broken channel's (FailingChannel). KindEnd is delivered once per channel; after it the channel is not
// read again.
func (g *InputGate) Next(ctx context.Context, timer <-chan time.Time) (GateEvent, error) {
	for {
		if g.interrupted.Load() && g.interrupted.CompareAndSwap(true, false) {
			return GateEvent{Kind: GateInterrupt, Ch: -1}, nil
		}
		// A broken channel fails the gate, blocked or not.
		for _, f := range g.failing {
			if err := f.Err(); err != nil {
				return GateEvent{Ch: -1}, err
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
				return GateEvent{Kind: GateMessage, Ch: i, Msg: m}, nil
			}
		}
		select {
		case <-g.wake:
		case <-timer:
			return GateEvent{Kind: GateTimer, Ch: -1}, nil
		case <-ctx.Done():
			return GateEvent{}, ctx.Err()
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
