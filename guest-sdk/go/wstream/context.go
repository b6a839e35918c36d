package wstream

import (
	"encoding/json"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// Level is a log level.
type Level int32

// Log levels.
const (
	LevelDebug Level = Level(abi.LogDebug)
	LevelInfo  Level = Level(abi.LogInfo)
	LevelWarn  Level = Level(abi.LogWarn)
	LevelError Level = Level(abi.LogError)
)

// flushThreshold is the output buffer size past which Emit hands the buffer
// to the host before the callback ends, so that a callback emitting a lot
// keeps guest memory bounded.
const flushThreshold = 64 << 10

// firstOut is the output buffer made at open (module.warm).
const firstOut = 16 << 10

// Context is an operator's view of the host: configuration, output, time,
// logging, keyed state and timers. The SDK creates one per opened operator
// and passes it to every callback; it is only valid inside callbacks and must
// not be shared across goroutines.
type Context struct {
	name   string
	config []byte

	opening bool
	states  map[string]stateInfo
	outputs map[string]int

	wm      int64
	wmValid bool

	getBuf []byte
	iters  []*iterScratch
	depth  int
	num    [8]byte // PutInt64's encoding; a field so it never escapes per call

	sc stateCache
}

type stateInfo struct {
	h    int32
	kind int32
}

func newContext(name string, config []byte) *Context {
	return &Context{
		name:    name,
		config:  append([]byte(nil), config...),
		states:  make(map[string]stateInfo),
		outputs: make(map[string]int),
		getBuf:  make([]byte, 0, 256),
	}
}

// begin resets what is valid for one callback only.
func (c *Context) begin() {
	c.wmValid = false
}

// Operator is the name the operator was opened under.
func (c *Context) Operator() string { return c.name }

// Config is the operator's configuration from the job plan (JSON by
// convention), empty when the plan gives none. It stays valid while the
// operator is open; do not modify it.
func (c *Context) Config() []byte { return c.config }

// UnmarshalConfig decodes the JSON configuration into v. An empty
// configuration leaves v unchanged, so v may carry defaults.
func (c *Context) UnmarshalConfig(v any) error {
	if len(c.config) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.config, v); err != nil {
		return fmt.Errorf("operator %q: config %s: %w", c.name, abbreviate(c.config), err)
	}
	return nil
}

// Key is the current key: the record's key in Process, the timer's key in
// OnTimer, nil elsewhere. Keyed state and timers act on it.
func (c *Context) Key() []byte { return c.sc.key() }

// Emit sends a record to the main output (index 0). The SDK copies key and
// value into its output buffer and hands the buffer to the host once, when
// the callback returns, or earlier, at the first emit after the buffer
// passed 64 KiB. Errors the host reports for buffered output fail the
// callback.
func (c *Context) Emit(key, value []byte, ts int64) {
	mod.emit(0, key, value, ts)
}

// EmitTo sends a record to the output with the given index (see Output).
func (c *Context) EmitTo(output int, key, value []byte, ts int64) {
	if output < 0 {
		mod.setEmitErr(fmt.Errorf("EmitTo: negative output index %d", output))
		return
	}
	mod.emit(uint32(output), key, value, ts)
}

// EmitReserve appends a record to output whose value the caller writes in
// place: it returns valueLen bytes of the output buffer (their content is
// unspecified), valid until the next emit of any kind or the end of the
// callback. It saves the copy of a value the operator computes, and the
// buffer to compute it in. A negative output or length, like an output
// failure, fails the callback when it returns; the slice returned is then
// still valueLen bytes (none for a negative length) that go nowhere.
func (c *Context) EmitReserve(output int, key []byte, valueLen int, ts int64) []byte {
	return mod.reserve(output, key, valueLen, ts)
}

// EmitUnbuffered sends one record to output at once, through the host's
// per-record emit call, and reports the host's verdict. It first flushes the
// buffered output so that records keep their order. It costs one host call
// per record: prefer Emit and EmitTo.
func (c *Context) EmitUnbuffered(output int, key, value []byte, ts int64) error {
	if output < 0 {
		return fmt.Errorf("EmitUnbuffered: negative output index %d", output)
	}
	if err := mod.flush(); err != nil {
		return err
	}
	if st := hostEmit(uint32(output), ts, key, value); st < 0 {
		return fmt.Errorf("emit to output %d: %w", output, statusErr(st))
	}
	return nil
}

// Output returns the index of the named output of this operator's vertex
// (its position in the plan's "outputs", default ["main"]). Look outputs up
// in Open and keep the index.
func (c *Context) Output(name string) (int, error) {
	if i, ok := c.outputs[name]; ok {
		return i, nil
	}
	st := hostOutputIndex(name)
	if st < 0 {
		return 0, callErr("output", name, st)
	}
	c.outputs[name] = int(st)
	return int(st), nil
}

// Watermark is the subtask's event-time watermark: the minimum over its
// inputs, math.MinInt64 before the first one, math.MaxInt64 once the input
// ended. It is fetched once per callback.
func (c *Context) Watermark() int64 {
	if !c.wmValid {
		c.wm = hostWatermark()
		c.wmValid = true
	}
	return c.wm
}

// ProcessingTime is the host's wall clock in milliseconds since the Unix epoch.
func (c *Context) ProcessingTime() int64 { return hostProcessingTime() }

// Log writes msg to the worker's log, tagged with the operator and subtask.
func (c *Context) Log(level Level, msg string) { hostLog(int32(level), msg) }

// Logf is Log with fmt.Sprintf formatting.
func (c *Context) Logf(level Level, format string, args ...any) {
	hostLog(int32(level), fmt.Sprintf(format, args...))
}

// RegisterEventTimer registers a timer for the current key that fires when
// the watermark reaches ts. ns distinguishes timers of one key (for example
// a window); registering the same (key, ns, ts) twice makes one timer.
func (c *Context) RegisterEventTimer(ts int64, ns []byte) error {
	return c.timer(true, EventTime, ts, ns)
}

// RegisterProcessingTimer registers a timer for the current key that fires
// when the host's wall clock reaches ts.
func (c *Context) RegisterProcessingTimer(ts int64, ns []byte) error {
	return c.timer(true, ProcessingTime, ts, ns)
}

// DeleteEventTimer removes an event-time timer of the current key; removing
// an absent timer is not an error.
func (c *Context) DeleteEventTimer(ts int64, ns []byte) error {
	return c.timer(false, EventTime, ts, ns)
}

// DeleteProcessingTimer removes a processing-time timer of the current key.
func (c *Context) DeleteProcessingTimer(ts int64, ns []byte) error {
	return c.timer(false, ProcessingTime, ts, ns)
}

func (c *Context) timer(register bool, d TimeDomain, ts int64, ns []byte) error {
	var st int32
	if register {
		st = hostTimerRegister(int32(d), c.Key(), ns, ts)
	} else {
		st = hostTimerDelete(int32(d), c.Key(), ns, ts)
	}
	if st < 0 {
		verb := "register"
		if !register {
			verb = "delete"
		}
		return fmt.Errorf("%s %s timer at %d: %w", verb, d, ts, statusErr(st))
	}
	return nil
}

// abbreviate quotes b for an error message, cut to a readable length.
func abbreviate(b []byte) string {
	const max = 64
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
