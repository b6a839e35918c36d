package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, wrapped by the errors this package returns.
var (
	// ErrDeadlineExceeded is the Err of a GuestError for a guest call that
	// ran past Config.CallTimeout. It matches context.DeadlineExceeded too.
	ErrDeadlineExceeded = fmt.Errorf("host: guest call deadline exceeded: %w", context.DeadlineExceeded)
	// ErrInstanceClosed is returned by calls on an instance that was closed,
	// or that a trap or deadline left unusable.
	ErrInstanceClosed = errors.New("host: instance closed")
	// ErrModuleClosed is returned by NewInstance on a closed Module.
	ErrModuleClosed = errors.New("host: module closed")
	// ErrRuntimeClosed is returned by calls on a closed Runtime.
	ErrRuntimeClosed = errors.New("host: runtime closed")
	// ErrGuestFailed is the Err of a GuestError for a guest export that
	// returned a non-zero status or called fail.
	ErrGuestFailed = errors.New("host: guest reported failure")
	// ErrCanceled is the Err of a GuestError for a call stopped, or refused,
	// because the context the instance was created with is done. It
	// matches context.Canceled.
	ErrCanceled = fmt.Errorf("host: instance stopped: %w", context.Canceled)
	// ErrStackOverflow is matched by a GuestError for a guest whose call
	// stack reached wazero's ceiling (abi/ABI.md, "Limits").
	ErrStackOverflow = errors.New("host: guest call stack overflow")
)

// GuestError is a failure inside a guest: a trap, a call to fail, a non-zero
// status from an export, the call deadline, the memory limit, a stack
// overflow, a quota of Limits (Err is a *QuotaError), or cancellation.
type GuestError struct {
	Operator string // vertex id and operator name, or the instance label
	Subtask  int    // -1 when no operator was opened yet
	Call     string // the guest export that failed, e.g. "wstream_process"
	Status   int32  // the status the export returned; 0 for traps and deadlines
	Message  string // the guest's or wazero's message, with the stderr tail
	Err      error  // ErrDeadlineExceeded, ErrGuestFailed, ErrInstanceClosed or wazero's error
}

func (e *GuestError) Error() string {
	where := e.Operator
	if e.Subtask >= 0 {
		where = fmt.Sprintf("%s subtask %d", e.Operator, e.Subtask)
	}
	// A guest that names the call itself (the SDKs' "wstream_open: …")
	// is not prefixed with it twice.
	if e.Call != "" && !strings.HasPrefix(e.Message, e.Call+":") {
		where += ": " + e.Call
	}
	return "host: operator " + where + ": " + e.Message
}

func (e *GuestError) Unwrap() error { return e.Err }

// ValidationError is a deploy-time problem with a module.
type ValidationError struct {
	Module string // the name given to Compile, usually the file name
	Reason string
	Err    error // the underlying error (wazero's), if any
}

func (e *ValidationError) Error() string {
	return "host: module " + e.Module + ": " + e.Reason
}

func (e *ValidationError) Unwrap() error { return e.Err }
