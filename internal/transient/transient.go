// Package transient tells a fault of the moment from an answer, and tries
// an operation again, a bounded number of times with exponential backoff
// and jitter, on the former only.
//
// A JetStream server that syncs every write (the embedded default) answers
// a burst of publishes on a busy machine with 429 "too many requests", and
// its requests can time out; a cluster answers "no responders" or
// "temporarily unavailable" while a stream's leader moves; a connection
// that is reconnecting refuses requests. The same call may succeed a moment
// later. Not found, a digest that does not match, a bad request are
// answers: asking again gets the same one.
package transient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsClusterNotAvail is JetStream's "JetStream system temporarily
// unavailable" (503), which nats.go has no constant for.
const jsClusterNotAvail jetstream.ErrorCode = 10008

// Is reports whether err is a fault of the moment: a 429 or a "temporarily
// unavailable" from JetStream, a timeout, no responders, no stream
// response, too many stalled publishes, or a connection that is
// reconnecting or was disconnected. A closed connection is not: it stays
// closed; nor is an error marked Permanent.
func Is(err error) bool {
	var perm *permanentError
	if err == nil || errors.As(err, &perm) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 429 || apiErr.ErrorCode == jsClusterNotAvail
	}
	for _, t := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, jetstream.ErrAsyncPublishTimeout,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse, jetstream.ErrTooManyStalledMsgs,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrStaleConnection,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// Policy bounds the attempts of Do.
type Policy struct {
	// Attempts is how many times Do calls the operation, at least once.
	Attempts int
	// Base is the first backoff; each later one doubles, up to Max. Each
	// wait is drawn between half the backoff and the whole of it, so that
	// writers refused together do not come back together.
	Base, Max time.Duration
}

// Default rides out a burst a busy server refused (3 to 6 s of waiting
// in all) without keeping a checkpoint or a deploy waiting long for a
// server that is gone.
var Default = Policy{Attempts: 6, Base: 200 * time.Millisecond, Max: 3 * time.Second}

// Exhausted is the error of the last attempt of an operation whose every
// attempt met a fault of the moment. It wraps that error, so errors.Is
// finds its cause.
type Exhausted struct {
	Attempts int
	Err      error
}

func (e *Exhausted) Error() string {
	return fmt.Sprintf("%v (gave up after %d attempts)", e.Err, e.Attempts)
}

func (e *Exhausted) Unwrap() error { return e.Err }

// Do calls op until it returns nil or an error that is not a fault of the
// moment (returned as it is), p.Attempts calls met faults of the moment
// (then an *Exhausted), or ctx ends (then the last error, or ctx's). A
// timeout is a fault of the moment only while ctx is live: op gives its
// calls their own deadlines below ctx's.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error) error {
	attempts := max(p.Attempts, 1)
	backoff := p.Base
	var err error
	for i := range attempts {
		if err = op(ctx); err == nil || !Is(err) || ctx.Err() != nil {
			return err
		}
		if i == attempts-1 {
			break
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, p.Max)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return &Exhausted{Attempts: attempts, Err: err}
}

// Permanent marks err, which Is would take for a fault of the moment, as
// an answer that Do returns at once: a failure of the caller's own part of
// an operation (the reader a put copies from) that trying again would not
// mend. errors.Is and errors.As still find err through it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
