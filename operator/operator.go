// Package operator is the contract between the runtime and an operator
// implementation: a WASM module instance (package host) or a native Go
// operator. The runtime drives an Operator one batch at a time from a single
// goroutine; the operator reaches state, timers and time through Services.
package operator

import (
	"errors"
	"time"

	"github.com/wstream/wstream/abi"
)

// Errors that Services return. Host functions map them to ABI status codes
// with Status.
var (
	ErrNotFound     = errors.New("operator: not found")
	ErrBadHandle    = errors.New("operator: unknown state handle")
	ErrBadOutput    = errors.New("operator: unknown output")
	ErrBadArgument  = errors.New("operator: bad argument")
	ErrKeyGroup     = errors.New("operator: key belongs to a key group this subtask does not own")
	ErrNoKeyedState = errors.New("operator: keyed state and timers need a key-partitioned input")
	ErrLimit        = errors.New("operator: size limit exceeded")
	// ErrMemoryQuota matches a *MemoryQuotaError.
	ErrMemoryQuota = errors.New("operator: over the memory quota")
)

// MemoryQuotaError is a change the keyed state refused because what it
// would hold for the call exceeds the tenant's memory quota; the host stops
// the call with a quota error.
type MemoryQuotaError struct {
	What string // what it would hold, e.g. "the undo journal of one call holds 20971520 bytes"
}

func (e *MemoryQuotaError) Error() string        { return e.What + ", over the memory quota" }
func (e *MemoryQuotaError) Is(target error) bool { return target == ErrMemoryQuota }

// Status maps an error from Services to an ABI status code. Errors it does not
// know become StatusStateError.
func Status(err error) int32 {
	switch {
	case err == nil:
		return abi.StatusOK
	case errors.Is(err, ErrNotFound):
		return abi.StatusNotFound
	case errors.Is(err, ErrBadHandle):
		return abi.StatusBadHandle
	case errors.Is(err, ErrBadOutput):
		return abi.StatusBadOutput
	case errors.Is(err, ErrBadArgument):
		return abi.StatusBadArgument
	case errors.Is(err, ErrKeyGroup):
		return abi.StatusKeyGroup
	case errors.Is(err, ErrNoKeyedState):
		return abi.StatusNoKeyedState
	case errors.Is(err, ErrLimit):
		return abi.StatusLimit
	}
	return abi.StatusStateError
}

// Limits on what one call may pass, enforced by Services implementations.
const (
	MaxKeySize   = 64 << 10
	MaxValueSize = 16 << 20
	MaxNameSize  = 256
)

// Services is what an operator may use besides its input. One value serves
// one operator (vertex) in one subtask; it is not safe for concurrent use.
// Byte slices passed in are not retained; byte slices returned stay valid
// only until the next call.
type Services interface {
	KeyedState
	// Watermark is the subtask's current event-time watermark.
	Watermark() int64
	// ProcessingTime is the wall clock in milliseconds since the Unix epoch.
	ProcessingTime() int64
	// Log writes a message to the worker's log, tagged with the operator.
	Log(level int32, msg string)
}

// KeyedState is the keyed state and timers of one operator.
type KeyedState interface {
	// RegisterState declares a state by name and kind (abi.StateValue,
	// abi.StateMap) and returns its handle. Registering the same name twice
	// returns the same handle; the same name with another kind is
	// ErrBadArgument.
	RegisterState(name string, kind int32) (int32, error)
	// StateGet appends the value stored for (key, ns) to dst[:0] and
	// returns it, or ErrNotFound.
	StateGet(h int32, key, ns, dst []byte) ([]byte, error)
	StatePut(h int32, key, ns, value []byte) error
	// StateDelete removes (key, ns); deleting an absent entry is not an error.
	StateDelete(h int32, key, ns []byte) error
	// StateIter calls fn for each entry of key whose namespace starts with
	// prefix and, when after is non-nil, sorts strictly after it, in
	// namespace order, until fn returns false.
	StateIter(h int32, key, prefix, after []byte, fn func(ns, value []byte) bool) error
	// RegisterTimer registers a timer for (domain, key, ns, ts); registering
	// one that exists is a no-op.
	RegisterTimer(domain int32, key, ns []byte, ts int64) error
	// DeleteTimer removes a timer; deleting an absent timer is not an error.
	DeleteTimer(domain int32, key, ns []byte, ts int64) error
}

// StateManyGetter is KeyedState that answers many gets at once, as the host
// does for a guest's state_get_many: knowing every key up front, it can
// overlap the memory accesses of the whole batch instead of waiting for
// each in turn.
type StateManyGetter interface {
	// StateGetMany calls fn(j, value, ref, err) for j = 0 … n-1, in order,
	// with what StateGet(h, key, ns, nil) would return for pair(j)'s key
	// and ns, and a StateRef for a StatePutRef of the pair (zero for
	// none). value is valid during fn only. It stops at fn's first error
	// and returns it.
	StateGetMany(h int32, n int, pair func(j int) (key, ns []byte), fn func(j int, value []byte, ref StateRef, err error) error) error
}

// StateRef is what StateGetMany tells of where it found a pair, so that a
// put of the pair soon after (StatePutRef) can skip finding it again. It
// is a hint: a ref that no longer leads to its pair, or never did, makes
// the put find the pair as StatePut does. Zero is none.
type StateRef uint32

// StorageWaiter is Services that tells how long its state has waited on
// storage (reads that missed memory, writes a full memtable stalled) in
// the operator's calls. A guest's call deadline leaves that time out: the
// deadline bounds the guest's own work, and a loaded disk is not the
// guest's doing. StorageWait is safe for concurrent use.
type StorageWaiter interface {
	// StorageWait is the time waited so far, since the state was opened,
	// a wait in progress included; it never decreases.
	StorageWait() time.Duration
}

// StateRefPutter is KeyedState that takes the StateRef of a pair with a
// put, as the host does for a guest's state_write_batch after the
// state_get_many that read the pair.
type StateRefPutter interface {
	// StatePutRef is StatePut(h, key, ns, value), for a pair a
	// StateGetMany gave ref for.
	StatePutRef(h int32, key, ns, value []byte, ref StateRef) error
}

// Collector receives an operator's output. Port is the index of the
// operator's output (Spec.Outputs).
type Collector interface {
	Emit(port uint32, ts int64, key, value []byte) error
	// EmitBatch takes an encoded abi batch whose record ports are output
	// indexes. The collector does not retain b.
	EmitBatch(b []byte) error
}

// CheckedCollector is a Collector that can take a batch its caller has
// already checked, sparing it a second pass over every record: the host
// checks each batch a guest emits before anything of it is forwarded.
type CheckedCollector interface {
	Collector
	// EmitCheckedBatch is EmitBatch for a batch known to decode, whose
	// largest record port is maxPort (0 for an empty batch).
	EmitCheckedBatch(b []byte, maxPort uint32) error
}

// Committer is a Collector that keeps what a batch call (Process,
// OnTimers) of a guest did up to the last commit point the guest marked
// (the optional import commit, abi/ABI.md): when the call fails after
// one, only what came after it is undone. Dead-letter mode collects so.
type Committer interface {
	Collector
	// CommitInterval is how many records (or timers) the guest should
	// process between commit points in the batch call about to run; 0
	// asks for none.
	CommitInterval() int
	// Commit says that the first n records (or timers) of the batch call
	// in progress are done: their output has been emitted and their state
	// written.
	Commit(n int) error
}

// Spec describes the operator instance the runtime asks for.
type Spec struct {
	VertexID       string // stable user-assigned vertex id
	Operator       string // operator name inside the module (or native registry)
	Config         []byte // operator configuration, opaque to the runtime (JSON by convention)
	Outputs        []string
	Subtask        int
	Parallel       int
	MaxParallelism int
	Keyed          bool // the input is key-partitioned: keyed state and timers are allowed
}

// Operator processes batches. All methods are called from one goroutine.
// Batches are encoded with package abi and are only valid during the call.
type Operator interface {
	Open(spec Spec, svc Services) error
	// Process handles one batch of input records (port = input index).
	Process(batch []byte, out Collector) error
	// OnTimers handles a batch of fired timers: port = time domain,
	// timestamp = timer time, key = timer key, value = timer namespace.
	OnTimers(timers []byte, out Collector) error
	// PreBarrier is called before a checkpoint barrier is forwarded: the
	// operator flushes what it buffers (emitting into out).
	PreBarrier(checkpoint int64, out Collector) error
	CheckpointComplete(checkpoint int64) error
	CheckpointAborted(checkpoint int64) error
	// Close ends processing after all input; it may emit final output.
	Close(out Collector) error
}
