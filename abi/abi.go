package abi

// Version is the ABI version this host speaks. A module's wstream_abi_version
// export must return it exactly: the host refuses any other value at deploy.
const Version = 1

// ImportModule is the wasm import module name of every host function.
const ImportModule = "wstream"

// Names of the functions a module exports to the host.
const (
	ExportABIVersion   = "wstream_abi_version"
	ExportAlloc        = "wstream_alloc"
	ExportOpen         = "wstream_open"
	ExportProcess      = "wstream_process"
	ExportOnTimer      = "wstream_on_timer"
	ExportClose        = "wstream_close"
	ExportPlan         = "wstream_plan"
	ExportPreBarrier   = "wstream_pre_barrier"
	ExportCkptComplete = "wstream_checkpoint_complete"
	ExportCkptAborted  = "wstream_checkpoint_aborted"
	ExportMigrate      = "wstream_migrate"
	ExportMemory       = "memory"
)

// RequiredExports are the exports a module must have to be deployed.
var RequiredExports = []string{
	ExportABIVersion, ExportAlloc, ExportOpen, ExportProcess, ExportOnTimer, ExportClose, ExportMemory,
}

// PlanSection is the name of the optional custom section that carries the
// module's job plan as JSON (an alternative to the wstream_plan export for
// toolchains that can emit custom sections).
const PlanSection = "wstream.plan"

// Names of the functions the host provides in module ImportModule.
const (
	ImportEmit          = "emit"
	ImportEmitBatch     = "emit_batch"
	ImportOutputIndex   = "output_index"
	ImportStateRegister = "state_register"
	ImportStateGet      = "state_get"
	ImportStatePut      = "state_put"
	ImportStateDelete   = "state_delete"
	ImportStateIter     = "state_iter"
	ImportTimerRegister = "timer_register"
	ImportTimerDelete   = "timer_delete"
	ImportWatermark     = "current_watermark"
	ImportProcTime      = "processing_time"
	ImportLog           = "log"
	ImportFail          = "fail"
	// ImportProgressAt is optional: the guest names where it keeps the
	// index of the record or timer its batch callback is at (ABI.md).
	ImportProgressAt = "progress_at"
	// ImportCommit is optional: the guest marks the records of its batch
	// callback that are done, whose work a later failure of the call
	// then keeps (ABI.md).
	ImportCommit = "commit"
)

// Status codes. Host functions return them (negative values) instead of
// trapping when the guest can recover; guest exports return them to the host.
const (
	StatusOK            int32 = 0
	StatusNotFound      int32 = -1 // state entry or timer absent
	StatusBadPointer    int32 = -2 // a pointer/length pair lies outside guest memory
	StatusBadHandle     int32 = -3 // unknown state handle or operator slot
	StatusBadOutput     int32 = -4 // unknown output index or name
	StatusBadArgument   int32 = -5 // malformed batch, bad kind, empty name...
	StatusKeyGroup      int32 = -6 // key belongs to a key group this subtask does not own
	StatusNoKeyedState  int32 = -7 // keyed state used by an operator that is not keyed
	StatusStateError    int32 = -8 // the state backend failed
	StatusLimit         int32 = -9 // a size limit was exceeded
	StatusUnknownOp     int32 = -10
	StatusGuestError    int32 = -11 // the guest failed; its message came through fail
	StatusNotInCallback int32 = -12 // call made outside open/process/on_timer/close
)

// StatusText names a status code for error messages.
func StatusText(s int32) string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotFound:
		return "not found"
	case StatusBadPointer:
		return "pointer out of bounds"
	case StatusBadHandle:
		return "bad handle"
	case StatusBadOutput:
		return "bad output"
	case StatusBadArgument:
		return "bad argument"
	case StatusKeyGroup:
		return "key group not owned by this subtask"
	case StatusNoKeyedState:
		return "keyed state outside a keyed context"
	case StatusStateError:
		return "state backend error"
	case StatusLimit:
		return "limit exceeded"
	case StatusUnknownOp:
		return "unknown operator"
	case StatusGuestError:
		return "guest error"
	case StatusNotInCallback:
		return "host call outside a callback"
	}
	return "status " + itoa(int(s))
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// State kinds for state_register.
const (
	StateValue int32 = 1 // one value per (key, namespace)
	StateMap   int32 = 2 // namespace is the map key; iterable by prefix
)

// Timer domains.
const (
	TimeEvent      int32 = 0
	TimeProcessing int32 = 1
)

// Log levels.
const (
	LogDebug int32 = 0
	LogInfo  int32 = 1
	LogWarn  int32 = 2
	LogError int32 = 3
)

// Watermark bounds. MaxWatermark is sent when an input ends: it fires every
// pending event-time timer.
const (
	MinWatermark int64 = -1 << 63
	MaxWatermark int64 = 1<<63 - 1
)

// DefaultMaxParallelism is the default number of key groups.
const DefaultMaxParallelism = 128

// MaxMaxParallelism bounds key groups so a key group fits in two bytes of the
// state key layout.
const MaxMaxParallelism = 1 << 15
