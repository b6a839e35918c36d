package wstream

import (
	"fmt"
	"sort"

	"github.com/wstream/wstream/abi"
)

// Operator is what a module implements for each operator it offers. The host
// opens one instance per operator slot of a subtask and then calls it from a
// single thread, one input batch at a time.
type Operator interface {
	// Open prepares the operator. It is the only place where states may be
	// registered (Context.ValueState, Context.MapState). An error fails the job.
	Open(ctx *Context) error
	// Process handles one input record. The record's slices alias the input
	// batch and are valid only during the call: copy what must outlive it.
	// The Context's current key is r.Key.
	Process(ctx *Context, r Record) error
}

// TimerHandler is implemented by operators that register timers.
type TimerHandler interface {
	// OnTimer handles one fired timer. The Context's current key is t.Key.
	// The timer's slices are valid only during the call.
	OnTimer(ctx *Context, t Timer) error
}

// Closer is implemented by operators with work to do after the last input
// record and the last timer; Close may still emit.
type Closer interface {
	Close(ctx *Context) error
}

// CheckpointListener is implemented by operators that take part in
// checkpoints beyond their keyed state (for example transactional sinks).
type CheckpointListener interface {
	// PreBarrier runs before checkpoint id's barrier is forwarded: flush
	// what the operator buffers by emitting it.
	PreBarrier(ctx *Context, id int64) error
	// CheckpointComplete reports that checkpoint id completed on every subtask.
	CheckpointComplete(ctx *Context, id int64) error
	// CheckpointAborted reports that checkpoint id will never complete.
	CheckpointAborted(ctx *Context, id int64) error
}

// Record is one input record. Key and Value alias the host's input batch:
// they are valid only during the Process call that received them.
type Record struct {
	Key       []byte
	Value     []byte
	Timestamp int64 // event time, milliseconds since the Unix epoch
	Input     int   // index of the input edge, in plan order; 0 for a single input
}

// TimeDomain says which clock a timer follows.
type TimeDomain int32

// Time domains.
const (
	EventTime      TimeDomain = TimeDomain(abi.TimeEvent)      // fires when the watermark reaches the timer
	ProcessingTime TimeDomain = TimeDomain(abi.TimeProcessing) // fires when the host's wall clock does
)

// String names the domain.
func (d TimeDomain) String() string {
	switch d {
	case EventTime:
		return "event time"
	case ProcessingTime:
		return "processing time"
	}
	return fmt.Sprintf("time domain %d", int32(d))
}

// Timer is a fired timer. Key and Namespace are valid only during the
// OnTimer call that received them.
type Timer struct {
	Domain    TimeDomain
	Timestamp int64
	Key       []byte // the key the timer was registered under
	Namespace []byte // the namespace it was registered with (for example a window)
}

// Register makes an operator available to job plans under name. Call it from
// an init function: a module built with -buildmode=c-shared never runs main.
// Registering an empty or duplicate name, or a nil factory, panics.
func Register(name string, factory func() Operator) {
	switch {
	case name == "":
		panic("wstream: Register: empty operator name")
	case len(name) > maxNameSize:
		panic(fmt.Sprintf("wstream: Register: operator name %.32q... is longer than %d bytes", name, maxNameSize))
	case factory == nil:
		panic(fmt.Sprintf("wstream: Register(%q): nil factory", name))
	}
	if mod.factories == nil {
		mod.factories = make(map[string]func() Operator)
	}
	if _, dup := mod.factories[name]; dup {
		panic(fmt.Sprintf("wstream: Register: operator %q registered twice", name))
	}
	mod.factories[name] = factory
}

// SetPlan sets the job plan (JSON) that the module exports through
// wstream_plan. Call it from an init function; flags and plan files given to
// the deploy command override it.
func SetPlan(json string) {
	mod.plan = []byte(json)
}

// operatorNames lists the registered operators, for error messages.
func operatorNames() []string {
	names := make([]string, 0, len(mod.factories))
	for n := range mod.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

const maxNameSize = 256
