package transport

import (
	"context"
	"errors"
	"fmt"
)

// Kind says what a Message carries.
type Kind uint8

const (
	// KindData carries an encoded abi batch.
	KindData Kind = iota + 1
	// KindWatermark carries the producer's event-time watermark.
	KindWatermark
	// KindEnd says the producer will send nothing more on this channel.
	KindEnd
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindWatermark:
		return "watermark"
	case KindEnd:
		return "end"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Message is one unit on a channel. A receiver owns Data once it has it.
type Message struct {
	Kind      Kind
	Data      []byte // KindData: an encoded abi batch
	Watermark int64  // KindWatermark
}

// ErrClosed is returned by Send on a channel whose consumer has gone away.
var ErrClosed = errors.New("transport: channel closed")

// OutputChannel is the producer side of a channel.
type OutputChannel interface {
	// Send enqueues m, blocking while the channel is full (backpressure)
	// until there is room or ctx is done.
	Send(ctx context.Context, m Message) error
}

// InputChannel is the consumer side of a channel, read through an InputGate.
type InputChannel interface {
	// TryRecv returns the next message without blocking.
	TryRecv() (Message, bool)
	// Notify registers a channel that receives a value (without blocking)
	// whenever a message is enqueued; the gate waits on it.
	Notify(wake chan<- struct{})
	// Close tells producers that nobody will read any more.
	Close()
}

// LocalChannel is a bounded in-memory FIFO between two subtasks of one
// worker. It implements both sides.
type LocalChannel struct {
	q      chan Message
	wake   chan<- struct{}
	closed chan struct{}
}

// NewLocalChannel returns a channel that holds at most capacity messages.
// Producers flush batches of bounded size (tens of KiB), so capacity bounds
// the channel's memory.
func NewLocalChannel(capacity int) *LocalChannel {
	if capacity < 1 {
		capacity = 1
	}
	return &LocalChannel{q: make(chan Message, capacity), closed: make(chan struct{})}
}

// Send implements OutputChannel.
func (c *LocalChannel) Send(ctx context.Context, m Message) error {
	select {
	case c.q <- m:
	default:
		select {
		case c.q <- m:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closed:
			return ErrClosed
		}
	}
	if c.wake != nil {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// TryRecv implements InputChannel.
func (c *LocalChannel) TryRecv() (Message, bool) {
	select {
	case m := <-c.q:
		return m, true
	default:
		return Message{}, false
	}
}

// Notify implements InputChannel. It must be called before the first Send.
func (c *LocalChannel) Notify(wake chan<- struct{}) { c.wake = wake }

// Close implements InputChannel.
func (c *LocalChannel) Close() {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
}

// Len is the number of queued messages (for tests and metrics).
func (c *LocalChannel) Len() int { return len(c.q) }
