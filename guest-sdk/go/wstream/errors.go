package wstream

import (
	"errors"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// Errors for the host's status codes. Every error the SDK returns from a
// host call wraps one of them, so callers test with errors.Is.
var (
	ErrNotFound       = errors.New("wstream: not found")
	ErrBadPointer     = errors.New("wstream: pointer out of bounds")
	ErrBadHandle      = errors.New("wstream: bad state handle or operator slot")
	ErrBadOutput      = errors.New("wstream: bad output")
	ErrBadArgument    = errors.New("wstream: bad argument")
	ErrKeyGroup       = errors.New("wstream: key belongs to a key group this subtask does not own")
	ErrNoKeyedState   = errors.New("wstream: keyed state and timers need a key-partitioned input")
	ErrStateError     = errors.New("wstream: state backend error")
	ErrLimit          = errors.New("wstream: size limit exceeded")
	ErrUnknownOp      = errors.New("wstream: unknown operator")
	ErrGuestError     = errors.New("wstream: guest error")
	ErrNotInCallback  = errors.New("wstream: host call outside a callback")
	ErrUnknownStatus  = errors.New("wstream: unknown host status")
	errMalformedState = errors.New("wstream: malformed state entry")
)

// statusErr maps a negative host status code to its sentinel error.
func statusErr(st int32) error {
	switch st {
	case abi.StatusNotFound:
		return ErrNotFound
	case abi.StatusBadPointer:
		return ErrBadPointer
	case abi.StatusBadHandle:
		return ErrBadHandle
	case abi.StatusBadOutput:
		return ErrBadOutput
	case abi.StatusBadArgument:
		return ErrBadArgument
	case abi.StatusKeyGroup:
		return ErrKeyGroup
	case abi.StatusNoKeyedState:
		return ErrNoKeyedState
	case abi.StatusStateError:
		return ErrStateError
	case abi.StatusLimit:
		return ErrLimit
	case abi.StatusUnknownOp:
		return ErrUnknownOp
	case abi.StatusGuestError:
		return ErrGuestError
	case abi.StatusNotInCallback:
		return ErrNotInCallback
	}
	return fmt.Errorf("%w %d", ErrUnknownStatus, st)
}

// callErr describes a failed host call: what was attempted, on what, and the
// host's verdict. It runs only on the error path, so it may allocate.
func callErr(what, name string, st int32) error {
	if name == "" {
		return fmt.Errorf("%s: %w", what, statusErr(st))
	}
	return fmt.Errorf("%s %q: %w", what, name, statusErr(st))
}
