package connector

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsPullHeartbeat is the idle heartbeat a source's consumer asks the server
// for with each pull (nats.go accepts 500 ms at the least). A pull parked on
// a lost or paused server, or on a consumer leader that moved, is noticed
// after two missed heartbeats, about a second, and the ordered consumer is
// recreated where it was.
const jsPullHeartbeat = 500 * time.Millisecond

// msgPump reads an ordered consumer's messages on its own goroutine, with
// calls of Next that block. nats.go watches a pull's heartbeats only while
// one call of Next waits, so the short waits of jsSource.Next (100 ms, so
// that checkpoint triggers reach an idle source) would never notice a lost
// pull: the source would wait for ever.
type msgPump struct {
	msgs jetstream.MessagesContext
	out  chan pumped
	done chan struct{}
	err  error // the iterator's error, once the pump has stopped on it
}

type pumped struct {
	m   jetstream.Msg
	err error
}

func startPump(msgs jetstream.MessagesContext) *msgPump {
	p := &msgPump{msgs: msgs, out: make(chan pumped, 256), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *msgPump) run() {
	for {
		m, err := p.msgs.Next()
		select {
		case p.out <- pumped{m, err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// next returns the next message. It waits until ctx is done (its error),
// or with wait > 0 at most wait (nats.ErrTimeout). An error of the
// consumer (one it could not recreate) is returned from then on.
func (p *msgPump) next(ctx context.Context, wait time.Duration) (jetstream.Msg, error) {
	if p.err != nil {
		return nil, p.err
	}
	var r pumped
	select {
	case r = <-p.out:
	default:
		var timeout <-chan time.Time
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case r = <-p.out:
		case <-timeout:
			return nil, nats.ErrTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.err != nil {
		p.err = r.err
	}
	return r.m, r.err
}

// stop ends the pump and the iterator; messages it read and did not hand
// out are dropped (the source subscribes again from its position).
func (p *msgPump) stop() {
	close(p.done)
	p.msgs.Stop()
}
