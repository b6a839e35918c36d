package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	// KindBarrier carries checkpoint barrier Checkpoint of CheckpointKind.
	KindBarrier
	// KindCancel is a cancel marker: drop checkpoint Checkpoint.
	KindCancel
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindWatermark:
		return "watermark"
	case KindEnd:
		return "end"
	case KindBarrier:
		return "barrier"
	case KindCancel:
		return "cancel"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Message is one unit on a channel. A receiver owns Data once it has it.
type Message struct {
	Kind      Kind
	Data      []byte // KindData: an encoded abi batch
	Watermark int64  // KindWatermark
	// Checkpoint is the checkpoint id of KindBarrier and KindCancel;
	// CheckpointKind is the checkpoint.Kind of a barrier and Timestamp its
	// trigger time (unix ms).
	Checkpoint     int64
	CheckpointKind uint8
	Timestamp      int64
}

// ErrClosed is returned by TrySend and Send on a channel whose consumer has
// gone away.
var ErrClosed = errors.New("transport: channel closed")

// OutputChannel is the producer side of a channel. One goroutine sends on it.
type OutputChannel interface {
	// TrySend enqueues m if the channel has room, without blocking. It
	// returns false when the channel is full (backpressure): the caller
	// waits on Room and tries again. An error (closed, broken, a failed
	// publish) means the channel takes nothing more.
	TrySend(m Message) (bool, error)
	// Room receives when room may have appeared since a TrySend returned
	// false. It is a hint: a wake-up may be spurious, so the caller tries
	// TrySend again. It also receives when the channel closes or breaks,
	// so that a waiter learns it from TrySend instead of sleeping forever.
	Room() <-chan struct{}
	// WaitStored returns once every message sent so far is kept where the
	// consumer reads it (at once for an in-memory channel; a JetStream
	// channel waits for the stream's acknowledgements). A producer calls it
	// after sending KindEnd: its output is then complete.
	WaitStored(ctx context.Context) error
	// Overtake puts m at the head of the queue, ahead of every message
	// already queued, without blocking (an unaligned checkpoint's barrier
	// overtakes in-flight data). It returns the data batches it overtook,
	// in queue order: they are still delivered, after m, and the caller
	// persists them as the channel's state.
	Overtake(m Message) ([][]byte, error)
}

// Send enqueues m on c, waiting while c is full until there is room or ctx
// is done; after KindEnd it waits until c has stored everything (WaitStored).
// It is for producers with nothing else to do while they wait: a subtask
// that takes checkpoints while blocked waits on Room itself.
func Send(ctx context.Context, c OutputChannel, m Message) error {
	for {
		ok, err := c.TrySend(m)
		if err != nil {
			return err
		}
		if ok {
			if m.Kind == KindEnd {
				return c.WaitStored(ctx)
			}
			return nil
		}
		select {
		case <-c.Room():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// InputChannel is the consumer side of a channel, read through an InputGate.
type InputChannel interface {
	// TryRecv returns the next message without blocking.
	TryRecv() (Message, bool)
	// Notify registers a channel that receives a value (without blocking)
	// whenever a message is enqueued; the gate waits on it.
	Notify(wake chan<- struct{})
	// NotifyPriority registers a channel that receives a value (without
	// blocking) whenever a message overtakes the queue (Overtake).
	NotifyPriority(prio chan<- struct{})
	// TryRecvPriority returns the message at the head of the queue when it
	// satisfies take (a barrier that overtook the data), without blocking.
	TryRecvPriority(take func(Message) bool) (Message, bool)
	// Close tells producers that nobody will read any more.
	Close()
}

// FailingChannel is an input channel that can break: a JetStream channel
// whose sequence has a gap has lost a message, and delivering what follows
// would drop its records. The gate returns Err's error (the subtask fails and
// its attempt restarts from the latest checkpoint) once it is non-nil. Err
// is called for every message, so it must be cheap while the channel is whole.
type FailingChannel interface {
	Err() error
}

// LocalChannel is a bounded in-memory FIFO between two subtasks of one
// worker. It implements both sides.
type LocalChannel struct {
	mu       sync.Mutex
	q        []Message // ring buffer
	head     int
	n        int
	capacity int
	// space receives a value when a message leaves the queue or the
	// channel closes (Room).
	space  chan struct{}
	wake   chan<- struct{}
	prio   chan<- struct{}
	closed chan struct{}
}

// NewLocalChannel returns a channel that holds at most capacity messages.
// Producers flush batches of bounded size (tens of KiB), so capacity bounds
// the channel's memory.
func NewLocalChannel(capacity int) *LocalChannel {
	if capacity < 1 {
		capacity = 1
	}
	return &LocalChannel{
		q:        make([]Message, capacity+4),
		capacity: capacity,
		space:    make(chan struct{}, 1),
		closed:   make(chan struct{}),
	}
}

// Send is Send on c.
func (c *LocalChannel) Send(ctx context.Context, m Message) error { return Send(ctx, c, m) }

// TrySend implements OutputChannel. A channel with room takes m even after
// its consumer closed it: only a producer that would wait learns of it.
func (c *LocalChannel) TrySend(m Message) (bool, error) {
	c.mu.Lock()
	if c.n < c.capacity {
		c.push(m)
		c.mu.Unlock()
		c.notify()
		return true, nil
	}
	c.mu.Unlock()
	select {
	case <-c.closed:
		return false, ErrClosed
	default:
		return false, nil
	}
}

// Room implements OutputChannel.
func (c *LocalChannel) Room() <-chan struct{} { return c.space }

// WaitStored implements OutputChannel: what a LocalChannel holds is where
// its consumer reads it.
func (c *LocalChannel) WaitStored(context.Context) error { return nil }

// Overtake implements OutputChannel. A priority message may exceed the
// capacity: it must never wait behind the data it overtakes.
func (c *LocalChannel) Overtake(m Message) ([][]byte, error) {
	select {
	case <-c.closed:
		return nil, ErrClosed
	default:
	}
	c.mu.Lock()
	var over [][]byte
	for k := 0; k < c.n; k++ {
		if q := c.q[(c.head+k)%len(c.q)]; q.Kind == KindData {
			over = append(over, q.Data)
		}
	}
	if c.n == len(c.q) {
		c.grow()
	}
	c.head = (c.head - 1 + len(c.q)) % len(c.q)
	c.q[c.head] = m
	c.n++
	prio := c.prio
	c.mu.Unlock()
	c.notify()
	if prio != nil {
		select {
		case prio <- struct{}{}:
		default:
		}
	}
	return over, nil
}

// push appends m; c.mu is held.
func (c *LocalChannel) push(m Message) {
	if c.n == len(c.q) {
		c.grow()
	}
	c.q[(c.head+c.n)%len(c.q)] = m
	c.n++
}

func (c *LocalChannel) grow() {
	q := make([]Message, 2*len(c.q))
	for k := 0; k < c.n; k++ {
		q[k] = c.q[(c.head+k)%len(c.q)]
	}
	c.q, c.head = q, 0
}

func (c *LocalChannel) notify() {
	if c.wake != nil {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// TryRecv implements InputChannel.
func (c *LocalChannel) TryRecv() (Message, bool) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return Message{}, false
	}
	m := c.q[c.head]
	c.q[c.head] = Message{}
	c.head = (c.head + 1) % len(c.q)
	c.n--
	c.mu.Unlock()
	c.wakeRoom()
	return m, true
}

// Notify implements InputChannel. It must be called before the first Send.
func (c *LocalChannel) Notify(wake chan<- struct{}) { c.wake = wake }

// NotifyPriority implements InputChannel.
func (c *LocalChannel) NotifyPriority(prio chan<- struct{}) {
	c.mu.Lock()
	c.prio = prio
	c.mu.Unlock()
}

// TryRecvPriority implements InputChannel.
func (c *LocalChannel) TryRecvPriority(take func(Message) bool) (Message, bool) {
	c.mu.Lock()
	if c.n == 0 || !take(c.q[c.head]) {
		c.mu.Unlock()
		return Message{}, false
	}
	m := c.q[c.head]
	c.q[c.head] = Message{}
	c.head = (c.head + 1) % len(c.q)
	c.n--
	c.mu.Unlock()
	c.wakeRoom()
	return m, true
}

// Close implements InputChannel. It wakes a producer waiting on Room.
func (c *LocalChannel) Close() {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	c.wakeRoom()
}

// wakeRoom tells a producer waiting on Room to try again.
func (c *LocalChannel) wakeRoom() {
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// Len is the number of queued messages (for tests and metrics).
func (c *LocalChannel) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
