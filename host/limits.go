package host

import (
	"errors"
	"fmt"
	"math"

	"github.com/wstream/wstream/operator"
)

// Limits bound what a guest can make the host do besides using its linear
// memory and its call deadline: output buffered per call, state written per
// call, pending timers, timer cascades, log volume and message sizes. They
// are set per runtime (Config.Limits) and may be overridden per instance
// (WithLimits), for per-job quotas.
//
// A zero field takes its default (the Default* constants), which a real job
// should never reach but which keep the host memory one hostile guest can
// claim to tens of MiB. A negative field lifts a volume quota (for trusted
// modules); for the size fields (MaxStateKeyBytes, MaxStateValueBytes,
// MaxMessageBytes), which are capped at the ABI's maxima, a negative value
// means the ABI maximum.
//
// Exceeding a quota marked "hard" fails the call at once with a GuestError
// whose Err is a *QuotaError (matching ErrQuotaExceeded), and the instance
// becomes unusable like after a trap. Size limits make the host function
// return LIMIT, as abi/ABI.md specifies. The log rate throttles and message
// sizes truncate; neither fails anything.
type Limits struct {
	// MaxRecordsPerInput bounds the records one wstream_process or
	// wstream_on_timer call may emit per record (or timer) it was passed:
	// a call with n inputs may emit n×MaxRecordsPerInput. Hard.
	MaxRecordsPerInput int
	// MaxRecordsPerCall bounds the records any one call may emit (including
	// wstream_close and wstream_pre_barrier, which have no input). Hard.
	MaxRecordsPerCall int
	// MaxOutputBytesPerCall bounds the encoded size (abi/ABI.md "Batch
	// encoding", 20 bytes per record plus key and value) of what one call
	// emits: the host buffers a call's whole output. Hard.
	MaxOutputBytesPerCall int
	// MaxTimersPerKey bounds the timers of one key of one operator that were
	// registered and have not fired or been deleted. Hard. Off by default:
	// the state backend keeps timers in Pebble with a bounded window in
	// memory, so a subtask holds millions, bounded by their bytes on disk
	// (a tenant's state quota) and, per call, by MaxStateBytesPerCall.
	// Setting any of the three timer count quotas makes the host count the
	// instance's timers in its own memory, about 50 bytes a timer.
	MaxTimersPerKey int
	// MaxTimersPerSubtask bounds the timers of an instance (every operator
	// of the subtask) that were registered and have not fired or been
	// deleted. Hard. Off by default, as MaxTimersPerKey.
	MaxTimersPerSubtask int
	// MaxTimerBytesPerSubtask bounds the key and namespace bytes of those
	// timers. Hard. Off by default, as MaxTimersPerKey.
	MaxTimerBytesPerSubtask int
	// MaxCascadedTimers bounds the timers that wstream_on_timer registers
	// already due (at or before the watermark, or the wall clock, of their
	// domain) in consecutive on_timer calls of one operator and domain:
	// such timers fire in the same advance of time, so a callback that keeps
	// registering them would never let the advance end. The count restarts
	// when the operator processes input or closes, or the watermark moves.
	// Hard.
	MaxCascadedTimers int
	// MaxStateKeyBytes bounds a key or namespace passed to a state or timer
	// call (status LIMIT). At most operator.MaxKeySize.
	MaxStateKeyBytes int
	// MaxStateValueBytes bounds a value passed to state_put (status
	// LIMIT). At most operator.MaxValueSize.
	MaxStateValueBytes int
	// MaxStateBytesPerCall bounds the state one call writes: keys,
	// namespaces and values of state_put and state_delete, and keys and
	// namespaces of timer_register and timer_delete, plus
	// StateWriteOverhead bytes per write. Writes wait in the subtask's
	// write-back cache until the subtask flushes between calls. Hard.
	MaxStateBytesPerCall int
	// LogLinesPerSecond bounds the lines an instance writes to the log: its
	// log calls, its stdout and stderr lines, and the host's warnings about
	// its bad pointers. Excess lines are dropped and counted; once per
	// second at most, one line says how many were suppressed.
	LogLinesPerSecond int
	// MaxMessageBytes bounds a log or fail message after escaping; longer
	// messages are cut and marked. At most 64 KiB.
	MaxMessageBytes int
}

// Defaults of Limits.
const (
	DefaultMaxRecordsPerInput      = 100_000
	DefaultMaxRecordsPerCall       = 1_000_000
	DefaultMaxOutputBytesPerCall   = 32 << 20
	DefaultMaxTimersPerKey         = -1 // no bound: see Limits.MaxTimersPerKey
	DefaultMaxTimersPerSubtask     = -1
	DefaultMaxTimerBytesPerSubtask = -1
	DefaultMaxCascadedTimers       = 1_000_000
	DefaultMaxStateKeyBytes        = operator.MaxKeySize
	DefaultMaxStateValueBytes      = operator.MaxValueSize
	DefaultMaxStateBytesPerCall    = 32 << 20
	DefaultLogLinesPerSecond       = 1000
	DefaultMaxMessageBytes         = maxGuestMessage
)

// StateWriteOverhead is what MaxStateBytesPerCall charges per state write
// besides its bytes: the write-back cache keeps an entry per written key.
const StateWriteOverhead = 64

// unlimited stands for a lifted quota inside the host.
const unlimited = math.MaxInt

// DefaultLimits returns the limits a zero Limits stands for.
func DefaultLimits() Limits { return Limits{}.resolve() }

// resolve fills zero fields with their defaults and caps the size fields.
// Lifted quotas stay negative (-1).
func (l Limits) resolve() Limits {
	quota := func(v *int, def int) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = -1
		}
	}
	size := func(v *int, def, most int) {
		if *v == 0 {
			*v = def
		}
		if *v < 0 || *v > most {
			*v = most
		}
	}
	quota(&l.MaxRecordsPerInput, DefaultMaxRecordsPerInput)
	quota(&l.MaxRecordsPerCall, DefaultMaxRecordsPerCall)
	quota(&l.MaxOutputBytesPerCall, DefaultMaxOutputBytesPerCall)
	quota(&l.MaxTimersPerKey, DefaultMaxTimersPerKey)
	quota(&l.MaxTimersPerSubtask, DefaultMaxTimersPerSubtask)
	quota(&l.MaxTimerBytesPerSubtask, DefaultMaxTimerBytesPerSubtask)
	quota(&l.MaxCascadedTimers, DefaultMaxCascadedTimers)
	size(&l.MaxStateKeyBytes, DefaultMaxStateKeyBytes, operator.MaxKeySize)
	size(&l.MaxStateValueBytes, DefaultMaxStateValueBytes, operator.MaxValueSize)
	quota(&l.MaxStateBytesPerCall, DefaultMaxStateBytesPerCall)
	quota(&l.LogLinesPerSecond, DefaultLogLinesPerSecond)
	size(&l.MaxMessageBytes, DefaultMaxMessageBytes, maxGuestMessage)
	return l
}

// over returns l with its zero fields taken from base.
func (l Limits) over(base Limits) Limits {
	pick := func(v *int, b int) {
		if *v == 0 {
			*v = b
		}
	}
	pick(&l.MaxRecordsPerInput, base.MaxRecordsPerInput)
	pick(&l.MaxRecordsPerCall, base.MaxRecordsPerCall)
	pick(&l.MaxOutputBytesPerCall, base.MaxOutputBytesPerCall)
	pick(&l.MaxTimersPerKey, base.MaxTimersPerKey)
	pick(&l.MaxTimersPerSubtask, base.MaxTimersPerSubtask)
	pick(&l.MaxTimerBytesPerSubtask, base.MaxTimerBytesPerSubtask)
	pick(&l.MaxCascadedTimers, base.MaxCascadedTimers)
	pick(&l.MaxStateKeyBytes, base.MaxStateKeyBytes)
	pick(&l.MaxStateValueBytes, base.MaxStateValueBytes)
	pick(&l.MaxStateBytesPerCall, base.MaxStateBytesPerCall)
	pick(&l.LogLinesPerSecond, base.LogLinesPerSecond)
	pick(&l.MaxMessageBytes, base.MaxMessageBytes)
	return l
}

// quotas are resolved Limits as the host functions compare against them:
// a lifted quota is unlimited.
type quotas struct {
	recordsPerInput, recordsPerCall, outputBytes int
	timersPerKey, timersPerSubtask, timerBytes   int
	cascadedTimers                               int
	keyBytes, valueBytes, stateBytes             int
	logLines, messageBytes                       int
}

// timerBook reports whether a timer count quota is set: only then does the
// instance keep its timerBook.
func (q *quotas) timerBook() bool {
	return q.timersPerKey != unlimited || q.timersPerSubtask != unlimited || q.timerBytes != unlimited
}

func (l Limits) quotas() quotas {
	q := func(v int) int {
		if v < 0 {
			return unlimited
		}
		return v
	}
	return quotas{
		recordsPerInput: q(l.MaxRecordsPerInput), recordsPerCall: q(l.MaxRecordsPerCall), outputBytes: q(l.MaxOutputBytesPerCall),
		timersPerKey: q(l.MaxTimersPerKey), timersPerSubtask: q(l.MaxTimersPerSubtask), timerBytes: q(l.MaxTimerBytesPerSubtask),
		cascadedTimers: q(l.MaxCascadedTimers),
		keyBytes:       l.MaxStateKeyBytes, valueBytes: l.MaxStateValueBytes, stateBytes: q(l.MaxStateBytesPerCall),
		logLines: q(l.LogLinesPerSecond), messageBytes: l.MaxMessageBytes,
	}
}

// InstanceOption configures one instance (Module.NewInstance).
type InstanceOption func(*instanceOptions)

type instanceOptions struct {
	limits      Limits
	memoryPages uint32 // 0: the runtime's Config.MemoryLimitPages
}

// WithLimits overrides the runtime's Config.Limits for one instance: its
// non-zero fields replace the runtime's, so a job's quotas need to name
// only what they change.
func WithLimits(l Limits) InstanceOption {
	return func(o *instanceOptions) { o.limits = l.over(o.limits) }
}

// WithMemoryLimit bounds the instance's linear memory to pages 64 KiB
// pages, for per-job memory quotas under the runtime's
// Config.MemoryLimitPages, which stays in force when pages is 0 or not
// below it: the option can lower the limit, never raise it.
//
// A memory.grow past the limit returns -1 to the guest, and a call that
// then fails says the instance hit its memory limit (the GuestError
// matches ErrMemoryLimit when the call trapped). A module whose memory
// starts above the limit fails to instantiate with ErrMemoryLimit.
// Instance.MemoryLimitPages reports the limit in force.
func WithMemoryLimit(pages uint32) InstanceOption {
	return func(o *instanceOptions) { o.memoryPages = pages }
}

// ErrMemoryLimit is matched by the error of NewInstance for a module whose
// memory starts above the instance's limit (WithMemoryLimit), by a
// GuestError for a call that trapped, or a host allocation in guest memory
// that failed, after the instance's limit refused a memory.grow, and by
// the GuestError of a call whose arguments exceed the memory limit.
var ErrMemoryLimit = errors.New("host: guest memory limit reached")

// pageSize is the WebAssembly page size.
const pageSize = 65536

// pagesText states a memory size given in pages, e.g. "16 MiB (256 pages)".
func pagesText(pages uint32) string {
	return memorySize(pages) + " (" + plural(int(pages), "page", "pages") + ")"
}

// memorySize is pages as MiB, or KiB when not a whole number of MiB.
func memorySize(pages uint32) string {
	b := uint64(pages) * pageSize
	if b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// ErrQuotaExceeded is matched by the Err of a GuestError for a call that
// exceeded a hard quota of Limits (a *QuotaError).
var ErrQuotaExceeded = errors.New("host: guest exceeded a quota")

// QuotaError says which quota a guest call exceeded. The call that exceeded
// it was stopped at once.
type QuotaError struct {
	Quota string // the Limits field, e.g. "MaxRecordsPerInput"
	Flag  string // the command-line flag that sets it, e.g. "--max-records-per-input"
	Limit int    // the quota in force
	What  string // what the guest did, e.g. "emitted 100001 records for 1 input record"
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s, over the quota of %s (%s)", e.What, e.limitText(), e.Flag)
}

// limitText states the quota with its unit.
func (e *QuotaError) limitText() string {
	switch e.Quota {
	case "MaxRecordsPerInput":
		return fmt.Sprintf("%d records per input record", e.Limit)
	case "MaxRecordsPerCall":
		return fmt.Sprintf("%d records per call", e.Limit)
	case "MaxOutputBytesPerCall":
		return fmt.Sprintf("%s of output per call", bytesText(e.Limit))
	case "MaxStateBytesPerCall":
		return fmt.Sprintf("%s of state writes per call", bytesText(e.Limit))
	case "MaxTimersPerKey":
		return fmt.Sprintf("%d pending timers per key", e.Limit)
	case "MaxTimersPerSubtask":
		return fmt.Sprintf("%d pending timers per subtask", e.Limit)
	case "MaxTimerBytesPerSubtask":
		return fmt.Sprintf("%s of pending timer keys and namespaces per subtask", bytesText(e.Limit))
	case "MaxCascadedTimers":
		return fmt.Sprintf("%d already-due timers per firing", e.Limit)
	case "MemoryBytes":
		return fmt.Sprintf("%s of memory per instance", bytesText(e.Limit))
	}
	return fmt.Sprint(e.Limit)
}

func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// bytesText is n bytes with a readable unit in parentheses when it has one.
func bytesText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d bytes (%d MiB)", n, n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d bytes (%d KiB)", n, n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Flags naming each quota in QuotaError; the command line uses the same
// names.
var quotaFlags = map[string]string{
	"MaxRecordsPerInput":      "--max-records-per-input",
	"MaxRecordsPerCall":       "--max-records-per-call",
	"MaxOutputBytesPerCall":   "--max-output-bytes-per-call",
	"MaxTimersPerKey":         "--max-timers-per-key",
	"MaxTimersPerSubtask":     "--max-timers-per-subtask",
	"MaxTimerBytesPerSubtask": "--max-timer-bytes-per-subtask",
	"MaxCascadedTimers":       "--max-cascaded-timers",
	"MaxStateBytesPerCall":    "--max-state-bytes-per-call",
	"LogLinesPerSecond":       "--guest-log-lines-per-second",
	// A tenant's memory quota (wstream tenant add|update --memory).
	"MemoryBytes": "--memory",
}

// overQuota stops the guest call in progress: wazero turns the panic of a
// host function into a trap whose error wraps the *QuotaError, and the
// call fails with it (Instance.failure). Continuing the guest would only
// let it spend its deadline ignoring LIMIT statuses.
func overQuota(quota string, limit int, format string, args ...any) {
	panic(&QuotaError{Quota: quota, Flag: quotaFlags[quota], Limit: limit, What: fmt.Sprintf(format, args...)})
}

// plural is "1 record" or "n records".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
