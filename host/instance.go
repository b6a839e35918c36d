package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host/instrument"
	"github.com/wstream/wstream/operator"
)

// phase says which guest callback is in progress; host functions check it.
type phase uint8

const (
	phaseIdle    phase = iota // no callback: alloc, abi_version, plan, _initialize
	phaseOpen                 // wstream_open: the only phase allowing state_register
	phaseProcess              // wstream_process
	phaseTimer                // wstream_on_timer
	phaseClose                // wstream_close
	phaseBarrier              // wstream_pre_barrier
	phaseNotify               // checkpoint_complete / checkpoint_aborted: no output
	phaseMigrate              // wstream_migrate: no operator slot; fail works
	numPhases
)

// minArena is the smallest argument buffer requested from wstream_alloc.
const minArena = 4 << 10

// maxGuestMessage bounds what is kept from a guest's log or fail message
// (Limits.MaxMessageBytes may lower it).
const maxGuestMessage = 64 << 10

// Instance is one module instance, serving the operators of one subtask.
// It is not safe for concurrent use.
type Instance struct {
	r     *Runtime
	label string
	api   api.Module
	mem   api.Memory

	// fns are the handles of the exports the host calls (fn), taken on
	// first use; exports says which of them the module has, and noFetch
	// that none may be taken (dropFunctions).
	fns     [numExports]api.Function
	exports uint16
	noFetch bool

	cc    callCtx
	stack [16]uint64 // parameters and results of the call in progress

	limits Limits // resolved
	q      quotas

	memPages uint32     // the memory limit in force, in pages
	grow     memLimiter // backs the memory and enforces memPages

	// Accounting of the call in progress, reset by call.
	inputs      int   // records or timers passed to it; 0 when it has none
	inputTimers bool  // its inputs are timers
	timerDomain int32 // time domain of the timers it fires; -1 when none
	emitted     int   // records emitted
	emitBytes   int   // their encoded size
	stateBytes  int   // state written, as MaxStateBytesPerCall counts it

	// hostCalls counts the host functions called during the call in
	// progress (by index in hostFuncs), for the slot's CallStats.
	hostCalls [numHostFuncs]int64

	timers timerBook   // timers registered and not yet fired or deleted
	logs   logThrottle // guest-triggered log lines

	arenaPtr, arenaCap uint32

	slots []*slot
	owner *slot // first opened slot: names the instance in logs

	// The call in progress.
	cur     *slot
	phase   phase
	out     operator.Collector
	failed  bool   // the guest called fail
	failMsg []byte // its message
	fatal   error  // first host-side failure (collector, state backend)

	// Host-side buffers reused across calls.
	scratch  []byte     // state_get values
	refs     *stateRefs // state_get_many's refs, for state_write_batch
	iterArgs []byte     // state_iter arguments, copied out of guest memory
	iterOut  []byte
	iterN    int
	iterFull bool
	iterFn   func(ns, value []byte) bool
	// migrateArgs holds the arguments of wstream_migrate before they are
	// written into the guest's arena.
	migrateArgs []byte

	stdout, stderr lineWriter

	broken *GuestError // set when a trap or deadline made the instance unusable
	closed bool

	// Reset (reset.go): why the module's instances cannot be reset ("":
	// they can), the indices of its mutable globals and, once Snapshot
	// took them, their exports; the snapshot; trapped: broken by a trap
	// that left the module open for Reset; resets: Resets.
	noReset   string
	globalIdx []uint32
	globals   []api.MutableGlobal
	snap      *snapshot
	inMem     []byte        // memLimiter.resident's vector, reused
	track     *writeTracker // the pages written since the snapshot, or nil
	trapped   bool
	resets    int

	// progress is the address the guest named with progress_at (0: none);
	// failedAt the index it held when the last batch call failed (-1:
	// unknown).
	progress uint32
	failedAt int
	inBatch  bool // a wstream_process or wstream_on_timer call is running
	// commitEvery is the interval between commit points the collector of
	// the batch call in progress asked for (0: none; commit), committed
	// how many of its records the guest said were done.
	commitEvery int
	committed   int
}

// callCtx is the context of every guest call of one instance. It is reused
// across calls so a call allocates nothing: the deadline is a per-instance
// timer re-armed per call, and the Done channel closes at most once, since
// an expired or cancelled call closes the instance for good. Host functions
// recover the instance from it with a type assertion.
type callCtx struct {
	inst  *Instance
	done  chan struct{}
	timer *time.Timer
	ended atomic.Int32 // ctxLive, ctxExpired or ctxCanceled
	// mu guards the call's budget below, which the timer's goroutine reads
	// when it fires.
	mu       sync.Mutex
	armed    bool // a call is running under the deadline
	start    time.Time
	budget   time.Duration
	deadline time.Time
	// waiter tells the call's storage waits, which do not count against
	// the budget (operator.StorageWaiter); waited0 is its reading at the
	// call's start. nil: every moment counts.
	waiter  operator.StorageWaiter
	waited0 time.Duration
	// unwatch stops watching the context the instance was created with.
	unwatch func() bool
	// stop is the instance's stop flag (instrument.StopExport), set once
	// the context is done; nil when wazero's own checks stop the guest.
	stop api.MutableGlobal
}

// States of callCtx.ended.
const (
	ctxLive int32 = iota
	ctxExpired
	ctxCanceled
)

// instanceKey finds the Instance in a context that is not a *callCtx
// (instantiation, or a context wrapped by wazero).
type instanceKey struct{}

func (c *callCtx) init(i *Instance) {
	c.inst = i
	c.done = make(chan struct{})
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
}

func (c *callCtx) expire() { c.end(ctxExpired) }

// cancel runs when the instance's context is done: a call in progress
// stops at its next loop iteration or function call, and later calls are
// refused.
func (c *callCtx) cancel() { c.end(ctxCanceled) }

// end makes the context done, at most once, and stops the guest.
//
// The stop flag is written here, on the timer's or the watched context's
// goroutine, and read by the guest's compiled code on another thread without
// synchronization. That is sound enough for its purpose: the write is a
// plain store, made through wazero's API so that the race detector sees only
// Go code, which is ordered; the guest reads the flag with a fresh load after
// every call that may reach the host and each time it takes its slow path
// (at least every instrument.Budget units of work, after a call into Go,
// where the scheduler can run this goroutine even while the world stops),
// and the hardware makes the store visible to such a load within a short
// time. The flag carries no data and never goes back to 0, so no ordering
// with other memory is needed: a guest that sees it traps, and failure tells
// that trap from the guest's own by c.ended, which is atomic.
func (c *callCtx) end(why int32) {
	if c.ended.CompareAndSwap(ctxLive, why) {
		// Before done closes: a host function that done wakes (WASI's
		// sleep) returns to a guest that sees the flag at once.
		if c.stop != nil {
			c.stop.Set(1)
		}
		close(c.done)
	}
}

func (c *callCtx) canceled() bool { return c.ended.Load() == ctxCanceled }

// armAt starts the deadline of a call that started at now; w (nil for
// none) tells the storage waits that the deadline leaves out.
func (c *callCtx) armAt(now time.Time, d time.Duration, w operator.StorageWaiter) {
	c.mu.Lock()
	c.armed, c.start, c.budget, c.deadline = true, now, d, now.Add(d)
	c.waiter, c.waited0 = w, 0
	if w != nil {
		c.waited0 = w.StorageWait()
	}
	c.timer.Reset(d)
	c.mu.Unlock()
}

// maxStorageCredit bounds what storage waits give a call: at most this
// many budgets more. A guest that reads keys beyond the state cache in a
// loop makes the host wait on Pebble for it (reading blocks is CPU too), so
// without a bound it could stretch one call without end; with it, a call
// lasts at most (1+maxStorageCredit) budgets, which still rides out a
// loaded disk's stalls.
const maxStorageCredit = 5

// leftLocked is what remains of the call's budget at now: the time since
// its start, less the storage waits since (up to maxStorageCredit
// budgets), counts against it.
func (c *callCtx) leftLocked(now time.Time) time.Duration {
	used := now.Sub(c.start)
	if c.waiter != nil {
		used -= min(c.waiter.StorageWait()-c.waited0, maxStorageCredit*c.budget)
	}
	return c.budget - used
}

// fire runs when the timer fires: the call expires, unless storage waits
// give it more time, for which the timer is set again.
func (c *callCtx) fire() {
	c.mu.Lock()
	if !c.armed {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	if left := c.leftLocked(now); left > 0 {
		c.deadline = now.Add(left)
		c.timer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.expire()
}

// disarm stops the deadline timer and reports whether the call expired. A
// timer that fired after the guest returned, or is firing now, still counts
// when the call used its whole budget: the context is done for good.
func (c *callCtx) disarm() bool {
	c.mu.Lock()
	c.armed = false
	if !c.timer.Stop() && c.ended.Load() == ctxLive && c.leftLocked(time.Now()) <= 0 {
		c.mu.Unlock()
		c.expire()
	} else {
		c.mu.Unlock()
	}
	return c.ended.Load() == ctxExpired
}

// sleep serves WASI's poll_oneoff clock subscriptions: it sleeps, but no
// longer than the call's deadline, so a sleeping guest is closed in time.
func (c *callCtx) sleep(ns int64) {
	t := time.NewTimer(time.Duration(ns))
	select {
	case <-t.C:
	case <-c.done:
		t.Stop()
	}
}

func (c *callCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}
func (c *callCtx) Done() <-chan struct{} { return c.done }
func (c *callCtx) Err() error {
	switch c.ended.Load() {
	case ctxExpired:
		return context.DeadlineExceeded
	case ctxCanceled:
		return context.Canceled
	}
	return nil
}
func (c *callCtx) Value(key any) any {
	if _, ok := key.(instanceKey); ok {
		return c.inst
	}
	return nil
}

// instanceOf returns the instance whose call ctx belongs to, or nil.
func instanceOf(ctx context.Context) *Instance {
	if c, ok := ctx.(*callCtx); ok {
		return c.inst
	}
	i, _ := ctx.Value(instanceKey{}).(*Instance)
	return i
}

// instantiate creates an instance of cc whose memory is bounded by memPages
// when that is below the runtime's limit (0: the runtime's limit).
func (r *Runtime) instantiate(ctx context.Context, cc code, label string, lim Limits, memPages uint32) (_ *Instance, err error) {
	cm := cc.cm
	i := &Instance{r: r, label: label, limits: lim, q: lim.quotas(), timerDomain: -1, memPages: r.limit, failedAt: -1,
		noReset: cc.noReset, globalIdx: cc.globals, exports: cc.exports}
	defer func() {
		if err != nil {
			i.grow.release()
		}
	}()
	if memPages != 0 && memPages < r.limit {
		i.memPages = memPages
		// Validation admits one memory, defined and exported by the module.
		for _, d := range cm.ExportedMemories() {
			if d.Min() > memPages {
				return nil, &GuestError{Operator: label, Subtask: -1, Call: "instantiate", Err: ErrMemoryLimit,
					Message: fmt.Sprintf("the module's memory starts at %s, above the instance's memory limit of %s",
						pagesText(d.Min()), pagesText(memPages))}
			}
		}
	}
	i.cc.init(i)
	i.iterFn = i.iterEntry
	i.stdout.init(func(line string) { i.logLine(abi.LogInfo, line) }, false)
	i.stderr.init(func(line string) { i.logLine(abi.LogWarn, line) }, true)
	// The host calls _initialize itself, as a guest call under the call
	// deadline, once the instance's stop flag is known.
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithStdout(&i.stdout).
		WithStderr(&i.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(i.cc.sleep).
		WithRandSource(rand.Reader)

	// Instantiation honours the caller's ctx as well as the call deadline:
	// wazero runs the start function of a module that was not instrumented
	// (an instrumented module's start function is exported instead).
	ictx, cancel := context.WithTimeout(ctx, r.timeout)
	mctx := context.WithValue(ictx, instanceKey{}, i)
	// wazero reads the allocator from the context once, when it creates
	// the instance's memory.
	i.grow.limit = uint64(i.memPages) * pageSize
	mctx = experimental.WithMemoryAllocator(mctx, &i.grow)
	mod, err := cc.rt.InstantiateModule(mctx, cm, cfg)
	expired := errors.Is(ictx.Err(), context.DeadlineExceeded)
	cancel()
	if err == nil && !expired && i.grow.over {
		_ = mod.Close(context.Background())
		i.closed = true
		i.cc.timer.Stop()
		return nil, &GuestError{Operator: label, Subtask: -1, Call: "instantiate", Err: ErrMemoryLimit,
			Message: fmt.Sprintf("the module's initial memory exceeds the instance's memory limit of %s", pagesText(i.memPages))}
	}
	i.stdout.flush()
	i.stderr.flush()
	if err != nil || expired {
		if mod != nil {
			_ = mod.Close(context.Background())
		}
		ge := i.failure(nil, "instantiate", err, expired)
		i.closed = true
		i.cc.timer.Stop()
		return nil, ge
	}
	if cc.stop {
		g, ok := mod.ExportedGlobal(instrument.StopExport).(api.MutableGlobal)
		if !ok {
			_ = mod.Close(context.Background())
			i.closed = true
			i.cc.timer.Stop()
			return nil, fmt.Errorf("host: instance %s: the instrumented module has no stop flag", label)
		}
		i.cc.stop = g
	}
	// Cancelling ctx (the job's) stops the instance even inside a call.
	i.cc.unwatch = context.AfterFunc(ctx, i.cc.cancel)
	i.api = mod
	i.mem = mod.ExportedMemory(abi.ExportMemory)
	i.fetchFunctions()
	if err := i.runStart(mod, cc.start); err != nil {
		return nil, err
	}
	return i, nil
}

// runStart runs the start function, then the WASI reactor's initializer,
// as wazero would have run them inside InstantiateModule. On an error the
// instance is closed.
func (i *Instance) runStart(mod api.Module, hasStart bool) error {
	for _, start := range [...]struct{ export, call string }{
		{instrument.StartExport, "start"},
		{exportInitialize, exportInitialize},
	} {
		if start.export == instrument.StartExport && !hasStart {
			continue
		}
		fn := mod.ExportedFunction(start.export)
		if fn == nil {
			continue
		}
		if _, err := i.call(nil, phaseIdle, nil, fn, start.call, 0); err != nil {
			if i.broken == nil { // refused before running: failure closed nothing
				_ = mod.Close(context.Background())
			}
			i.closed = true
			i.cc.timer.Stop()
			i.cc.unwatch()
			return err
		}
	}
	return nil
}

// Limits are the limits in force for this instance: Config.Limits with
// the instance's WithLimits applied and defaults filled in (a lifted quota
// is -1).
func (i *Instance) Limits() Limits { return i.limits }

// The exports the host calls, as indices of Instance.fns.
const (
	expAlloc = iota
	expOpen
	expProcess
	expOnTimer
	expClose
	expPreBarrier
	expCkptComplete
	expCkptAborted
	expMigrate
	numExports
)

var exportNames = [numExports]string{abi.ExportAlloc, abi.ExportOpen, abi.ExportProcess, abi.ExportOnTimer,
	abi.ExportClose, abi.ExportPreBarrier, abi.ExportCkptComplete, abi.ExportCkptAborted, abi.ExportMigrate}

// exportMask says which of exportNames cm exports, a bit per index.
func exportMask(cm wazero.CompiledModule) uint16 {
	defs := cm.ExportedFunctions()
	var m uint16
	for k, name := range exportNames {
		if _, ok := defs[name]; ok {
			m |= 1 << k
		}
	}
	return m
}

// fn returns the handle of export k (expAlloc…), taking it on first use:
// each handle holds a call stack of its own (10 KiB to start, zeroed), and
// most operators never call half of the exports, so taking them all made
// up half of an instance's start. It is nil when the module does not
// export k, or while the handles are dropped.
func (i *Instance) fn(k int) api.Function {
	f := i.fns[k]
	if f == nil && !i.noFetch && i.exports&(1<<k) != 0 {
		f = i.api.ExportedFunction(exportNames[k])
		i.fns[k] = f
	}
	return f
}

// fetchFunctions lets fn take handles again (after dropFunctions or
// dropLargeStacks).
func (i *Instance) fetchFunctions() { i.noFetch = false }

// dropLargeStacks forgets the handles whose call stacks grew past
// maxRetainedStack, as a call that returns does (call), and takes no new
// ones until fetchFunctions.
func (i *Instance) dropLargeStacks() {
	for k, f := range i.fns {
		if f != nil && retainedStack(f) > maxRetainedStack {
			i.fns[k] = nil
		}
	}
	i.noFetch = true
}

// dropFunctions forgets the export handles, and takes no new ones until
// fetchFunctions: each holds wazero's call stack for its export, which
// deep recursion may have grown to tens of MB.
func (i *Instance) dropFunctions() {
	i.fns = [numExports]api.Function{}
	i.noFetch = true
}

// renewFunction replaces the handle of export name by a fresh one, whose
// call stack starts small again.
func (i *Instance) renewFunction(name string) {
	for k, n := range exportNames {
		if n == name {
			i.fns[k] = i.api.ExportedFunction(name)
		}
	}
}

// Label is the label given to NewInstance.
func (i *Instance) Label() string { return i.label }

// MemoryLimitPages is the limit of the instance's memory in 64 KiB pages:
// its WithMemoryLimit, or the runtime's Config.MemoryLimitPages.
func (i *Instance) MemoryLimitPages() uint32 { return i.memPages }

// MemoryBytes is the current size of the instance's memory, at most
// MemoryLimitPages×64 KiB; 0 once the instance is closed or unusable.
func (i *Instance) MemoryBytes() uint32 {
	if i.mem == nil || i.closed || i.broken != nil {
		return 0
	}
	return i.mem.Size()
}

// Operator returns a new operator slot in this instance (slots 0, 1, 2…).
// Slots share the instance's memory and deadline; a trap in one makes all
// of them unusable.
func (i *Instance) Operator() operator.Operator {
	s := &slot{inst: i, index: int32(len(i.slots))}
	i.slots = append(i.slots, s)
	return s
}

// Close releases the instance. It does not call wstream_close: close the
// operators first when they should flush.
func (i *Instance) Close(ctx context.Context) error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.cc.timer.Stop()
	if i.cc.unwatch != nil {
		i.cc.unwatch()
	}
	i.stdout.flush()
	i.stderr.flush()
	i.logs.flush(i, nil)
	i.dropFunctions()
	i.snap, i.globals = nil, nil
	err := i.api.Close(ctx)
	i.grow.release()
	if err != nil {
		return fmt.Errorf("host: closing instance %s: %w", i.label, err)
	}
	return nil
}

// who names the operator of slot s, or of the instance when s is nil.
func (i *Instance) who(s *slot) (string, int) {
	if s == nil {
		s = i.owner
	}
	if s == nil || s.who == "" {
		return i.label, -1
	}
	return s.who, s.spec.Subtask
}

// logLine writes a line of the guest's stdout or stderr, already escaped
// by the lineWriter, to Config.Log.
func (i *Instance) logLine(level int32, line string) {
	if !i.logs.allow(i) {
		return
	}
	op, sub := i.who(i.cur)
	i.r.log(level, op, sub, line)
}

// logf logs a host diagnostic that the guest caused: through the
// operator's Services inside a callback, else through Config.Log. It
// counts against the guest's log rate, since a guest can cause any number
// of them.
func (i *Instance) logf(level int32, format string, args ...any) {
	if !i.logs.allow(i) {
		return
	}
	i.writeLog(level, fmt.Sprintf(format, args...))
}

// writeLog writes msg through the operator's Services inside a callback,
// else through Config.Log.
func (i *Instance) writeLog(level int32, msg string) {
	if s := i.cur; s != nil && s.svc != nil {
		s.svc.Log(level, msg)
		return
	}
	op, sub := i.who(nil)
	i.r.log(level, op, sub, msg)
}

// usable returns the error for a call on an instance that cannot run one.
func (i *Instance) usable(s *slot, call string) error {
	if i.cc.canceled() && !i.closed {
		op, sub := i.who(s)
		return &GuestError{Operator: op, Subtask: sub, Call: call, Err: ErrCanceled,
			Message: "the instance was stopped: its context was cancelled"}
	}
	if i.broken != nil {
		op, sub := i.who(s)
		return &GuestError{Operator: op, Subtask: sub, Call: call, Err: ErrInstanceClosed,
			Message: "the instance is unusable after an earlier failure in " + i.broken.Call + ": " + firstLine(i.broken.Message)}
	}
	if i.closed {
		op, sub := i.who(s)
		return &GuestError{Operator: op, Subtask: sub, Call: call, Err: ErrInstanceClosed, Message: "the instance is closed"}
	}
	return nil
}

// call runs fn with parameters i.stack[:n] on behalf of slot s (nil for
// module-level calls) in phase ph, with out receiving emitted records. It
// returns the i32 result; i.stack[0] holds the raw result (every export
// the host calls has at most one).
func (i *Instance) call(s *slot, ph phase, out operator.Collector, fn api.Function, name string, n int) (int32, error) {
	if err := i.usable(s, name); err != nil {
		return 0, err
	}
	i.cur, i.phase, i.out = s, ph, out
	i.failed, i.failMsg, i.fatal = false, i.failMsg[:0], nil
	i.grow.refused = 0
	i.emitted, i.emitBytes, i.stateBytes = 0, 0, 0
	i.stderr.resetTail()
	start := time.Now()
	var waiter operator.StorageWaiter
	if s != nil {
		waiter = s.waiter
	}
	i.cc.armAt(start, i.r.timeout, waiter)
	err := fn.CallWithStack(&i.cc, i.stack[:max(n, 1)])
	expired := i.cc.disarm()
	if s != nil && s.stats != nil {
		s.stats.observe(ph, time.Since(start), &i.hostCalls)
	} else {
		i.hostCalls = [numHostFuncs]int64{}
	}
	i.phase, i.out = phaseIdle, nil
	i.inputs, i.inputTimers, i.timerDomain = 0, false, -1
	if err != nil || expired {
		ge := i.failure(s, name, err, expired)
		i.cur = nil
		return 0, ge
	}
	if i.grow.refused != 0 && s != nil && name != abi.ExportAlloc {
		i.refusedGrowth(name)
	}
	i.logs.flushDue(i, s)
	i.cur = nil
	if retainedStack(fn) > maxRetainedStack {
		i.renewFunction(name)
	}
	return int32(uint32(i.stack[0])), nil
}

// failure turns a failed call into a GuestError and retires the instance:
// after a trap the guest's own state cannot be trusted, and a guest stopped
// by a deadline or cancellation did not finish its call (wazero closed it
// already when it was compiled with wazero's own checks). An instance that
// holds a snapshot stays open after a trap, for Reset: wazero can call a
// module again after a trap (its call engines start each call afresh).
func (i *Instance) failure(s *slot, call string, err error, expired bool) *GuestError {
	i.readProgress()
	op, sub := i.who(s)
	ge := &GuestError{Operator: op, Subtask: sub, Call: call, Err: err}
	var exit *sys.ExitError
	var quota *QuotaError
	trap := false // a trap of the guest's own, which Reset undoes
	switch {
	case errors.As(err, &quota):
		ge.Message = quota.Error()
		ge.Err = quota
	case i.cc.canceled() || (errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeContextCanceled):
		ge.Message = "stopped: the instance's context was cancelled"
		ge.Err = ErrCanceled
	case expired || (errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded):
		ge.Message = fmt.Sprintf("exceeded the call deadline of %s; the instance was closed", i.r.timeout)
		ge.Err = ErrDeadlineExceeded
	case errors.As(err, &exit):
		ge.Message = fmt.Sprintf("the guest exited with code %d", exit.ExitCode())
	case err == nil:
		ge.Message = "failed without an error"
	case strings.HasPrefix(err.Error(), "stack overflow") || strings.HasPrefix(err.Error(), "wasm error: stack overflow"):
		ge.Message = "stack overflow: " + stackOverflowText
		ge.Err = errors.Join(ErrStackOverflow, err)
		trap = true
	default:
		// Trap messages quote the guest's function names, which are data.
		ge.Message = EscapeGuestText([]byte(err.Error()), i.q.messageBytes, true)
		trap = true
	}
	if i.failed && !expired && quota == nil && ge.Err != ErrCanceled {
		// The guest said why before it trapped (a Rust panic hook, an
		// AssemblyScript abort): that is the message users need.
		ge.Message = string(i.failMsg) + " (then: " + ge.Message + ")"
	}
	if note := i.memoryNote(); note != "" {
		// On the first line, before wazero's stack trace, where it is seen
		// and where later calls quote it from (usable).
		first := firstLine(ge.Message)
		ge.Message = first + " (" + note + ")" + ge.Message[len(first):]
		if i.grow.refused != 0 && quota == nil && ge.Err != ErrCanceled && ge.Err != ErrDeadlineExceeded {
			ge.Err = errors.Join(ErrMemoryLimit, ge.Err)
		}
	}
	i.stdout.flush()
	i.stderr.flush()
	if tail := i.stderr.tailString(); tail != "" {
		ge.Message += "\nstderr:\n" + tail
	}
	i.broken = ge
	i.trapped = trap && i.snap != nil && !expired && !i.cc.canceled()
	if i.api != nil && !i.trapped {
		_ = i.api.Close(context.Background())
	}
	i.logs.flush(i, s)
	if i.trapped {
		// Kept for Reset: wazero's call engines are reusable after a
		// trap, and fresh ones would grow their stacks again, one copy
		// at a time, in the first calls after it.
		i.dropLargeStacks()
	} else {
		i.dropFunctions()
	}
	return ge
}

// memoryNote says how the memory limit took part in a failure: a
// memory.grow refused by the instance's limit during the call, or memory
// already at the limit (wazero refuses growth past the runtime's limit
// without telling the host, and a growth past the instance's limit
// sometimes exceeds the runtime's too). "" when neither.
func (i *Instance) memoryNote() string {
	if i.grow.refused != 0 {
		return fmt.Sprintf("the instance hit its memory limit of %s: growing memory to %s was refused",
			pagesText(i.memPages), plural(int(i.grow.refused), "page", "pages"))
	}
	if i.mem != nil && !i.closed && i.broken == nil && uint64(i.mem.Size()) >= uint64(i.memPages)*pageSize {
		return fmt.Sprintf("guest memory is at its limit of %d pages, %s", i.memPages, memorySize(i.memPages))
	}
	return ""
}

// refusedGrowth adds to the error of a call that returned after the
// instance's limit refused a memory.grow, as a guest whose allocator
// reports failure instead of trapping does, that the limit was the cause.
// It fills what slot.result reports: fail's message, else the status.
func (i *Instance) refusedGrowth(call string) {
	st := int32(uint32(i.stack[0]))
	switch {
	case i.failed:
		i.failMsg = fmt.Appendf(i.failMsg, " (%s)", i.memoryNote())
	case st != abi.StatusOK && (call != abi.ExportOpen || st != abi.StatusUnknownOp):
		i.failed = true
		i.failMsg = fmt.Appendf(i.failMsg[:0], "returned status %d (%s) (%s)", st, abi.StatusText(st), i.memoryNote())
	}
}

// write copies str followed by b into the instance's argument arena,
// asking the guest for a bigger one when needed, and returns its address.
func (i *Instance) write(s *slot, call, str string, b []byte) (uint32, error) {
	n := len(str) + len(b)
	if n > math.MaxInt32 {
		op, sub := i.who(s)
		return 0, fmt.Errorf("host: operator %s subtask %d: %s: %d argument bytes exceed the guest address space", op, sub, call, n)
	}
	if uint64(n) > uint64(i.memPages)*pageSize {
		// No allocation can succeed: say so rather than have the guest
		// grow its memory to the limit first.
		op, sub := i.who(s)
		return 0, &GuestError{Operator: op, Subtask: sub, Call: call, Err: ErrMemoryLimit,
			Message: fmt.Sprintf("%d argument bytes exceed the instance's memory limit of %s", n, pagesText(i.memPages))}
	}
	if uint32(n) > i.arenaCap || i.arenaPtr == 0 {
		if err := i.growArena(s, uint32(n)); err != nil {
			return 0, err
		}
	}
	if !i.mem.WriteString(i.arenaPtr, str) || !i.mem.Write(i.arenaPtr+uint32(len(str)), b) {
		return 0, i.allocError(s, uint32(n), fmt.Sprintf("its buffer at %#x no longer fits in memory (%d bytes)", i.arenaPtr, i.mem.Size()))
	}
	return i.arenaPtr, nil
}

// growArena asks wstream_alloc for at least n bytes, requesting room to
// double so that growing batches do not call alloc every time.
func (i *Instance) growArena(s *slot, n uint32) error {
	want := uint64(max(n, minArena))
	if d := 2 * uint64(i.arenaCap); d > want {
		want = d
	}
	want = min(want, math.MaxInt32, uint64(i.memPages)*pageSize)
	ptr, err := i.alloc(s, uint32(want))
	if err != nil {
		return err
	}
	if ptr == 0 && want > uint64(n) {
		want = uint64(n)
		if ptr, err = i.alloc(s, n); err != nil {
			return err
		}
	}
	if ptr == 0 {
		if note := i.memoryNote(); note != "" {
			return i.allocError(s, n, "it returned 0: "+note)
		}
		return i.allocError(s, n, "it returned 0 (out of memory)")
	}
	if uint64(ptr)+want > uint64(i.mem.Size()) {
		return i.allocError(s, uint32(want), fmt.Sprintf("it returned %#x, a region past the end of memory (%d bytes)", ptr, i.mem.Size()))
	}
	i.arenaPtr, i.arenaCap = ptr, uint32(want)
	return nil
}

func (i *Instance) alloc(s *slot, n uint32) (uint32, error) {
	fn := i.fn(expAlloc)
	if fn == nil {
		return 0, i.usable(s, abi.ExportAlloc)
	}
	i.stack[0] = uint64(n)
	if _, err := i.call(s, phaseIdle, nil, fn, abi.ExportAlloc, 1); err != nil {
		return 0, err
	}
	return uint32(i.stack[0]), nil
}

func (i *Instance) allocError(s *slot, n uint32, what string) error {
	op, sub := i.who(s)
	var err error = ErrGuestFailed
	if i.grow.refused != 0 {
		err = errors.Join(ErrGuestFailed, ErrMemoryLimit)
	}
	return &GuestError{Operator: op, Subtask: sub, Call: abi.ExportAlloc, Err: err,
		Message: fmt.Sprintf("%s(%d) failed: %s", abi.ExportAlloc, n, what)}
}

func firstLine(s string) string {
	for j := 0; j < len(s); j++ {
		if s[j] == '\n' {
			return s[:j]
		}
	}
	return s
}

// Broken reports whether a trap, a deadline, a quota or a cancellation
// left the instance unusable (or it was closed): its operators must be
// opened again in a new instance to go on.
func (i *Instance) Broken() bool { return i.broken != nil || i.closed }

// FailedAt returns the index, within the batch, of the record or timer
// that the guest reported in progress (progress_at) when its last
// wstream_process or wstream_on_timer call failed, or -1 when it did not
// report one. The guest says so: a hint for finding the record, not a
// fact.
func (i *Instance) FailedAt() int { return i.failedAt }

// readProgress records in failedAt the index the guest reported in
// progress, if it names where it keeps one.
func (i *Instance) readProgress() {
	i.failedAt = -1
	if i.progress == 0 || i.mem == nil || !i.inBatch {
		return
	}
	if v, ok := i.mem.ReadUint32Le(i.progress); ok && v != math.MaxUint32 {
		i.failedAt = int(v)
	}
}
