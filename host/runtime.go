package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/host/instrument"
)

// Defaults and bounds of Config.
const (
	DefaultMemoryLimitPages = 256 // 16 MiB
	MaxMemoryLimitPages     = 65536
	DefaultCallTimeout      = 10 * time.Second
	noDeadline              = 100 * 365 * 24 * time.Hour
)

const wasiModuleName = wasi_snapshot_preview1.ModuleName

// Config configures a Runtime.
type Config struct {
	// CacheDir holds the on-disk compilation cache; "" keeps compiled code
	// in memory only.
	CacheDir string
	// MemoryLimitPages bounds each instance's memory in 64 KiB pages:
	// DefaultMemoryLimitPages when 0, at most MaxMemoryLimitPages.
	// NewInstance's WithMemoryLimit lowers it per instance.
	MemoryLimitPages uint32
	// CallTimeout is the deadline of every guest call (including
	// _initialize); DefaultCallTimeout when 0. Deadlines and cancellation
	// stop a running guest through a stop flag that Compile adds to the
	// module (package instrument): the guest counts its loop iterations and
	// calls in registers and, every instrument.Budget units of work, calls
	// into Go and checks the flag, which costs a few percent at most. A
	// negative CallTimeout turns deadlines off: guests then run unmodified,
	// and a guest that never returns blocks its subtask even when its
	// context is cancelled, and holds its thread so that garbage collections
	// wait for it. Only for trusted modules.
	CallTimeout time.Duration
	// Log receives guest log calls made outside an operator's callback,
	// guest stdout and stderr line by line, and host diagnostics. nil
	// discards them. It is called from the goroutine driving the instance.
	// Guest text reaches it escaped (EscapeGuestText) and rate-limited
	// (Limits.LogLinesPerSecond).
	Log func(level int32, operator string, subtask int, msg string)
	// Limits bound what each guest can make the host do; zero fields take
	// their defaults. NewInstance's WithLimits overrides them per instance.
	Limits Limits
	// ModuleLimits bound what a tenant's module (Compile with TenantModule)
	// may declare, checked on its bytes before wazero decodes or compiles
	// anything (instrument.Admit); zero fields take their defaults
	// (instrument.DefaultLimits).
	ModuleLimits instrument.Limits
	// AllowUninstrumented lets a tenant's module that package instrument
	// cannot rewrite run with wazero's own termination checks, which stop a
	// guest only at loop headers: a loop-free call tree then runs for as long
	// as it likes past its deadline, and holds its thread so that garbage
	// collections wait for it; and its tables are not capped (their
	// minimum still is, by ModuleLimits). Off, such a module is refused.
	AllowUninstrumented bool
}

// CompileOption adjusts one Compile.
type CompileOption func(*compileOptions)

type compileOptions struct {
	tenant bool
}

// TenantModule compiles a tenant's module: Config.ModuleLimits are checked
// on its bytes before anything else, its tables are capped at
// ModuleLimits.TableElements, it is instrumented even when deadlines are
// off, and it is refused when it cannot be (unless
// Config.AllowUninstrumented). Its compiled code is kept apart from that of
// the same bytes compiled without the option.
func TenantModule() CompileOption { return func(o *compileOptions) { o.tenant = true } }

// Runtime is a worker's wazero runtime. It is safe for concurrent use.
type Runtime struct {
	cfg      Config
	timeout  time.Duration
	limit    uint32
	limits   Limits // cfg.Limits resolved
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	provided map[string]map[string]api.FunctionDefinition
	// deadlines is false when CallTimeout turned them off.
	deadlines bool
	// rc configures rt: wazero's own termination checks off, since
	// instrumented modules stop through their flag.
	rc wazero.RuntimeConfig

	mu      sync.Mutex
	closed  bool
	modules map[string]*compiled // by digest, shared by Modules of identical bytes
	// legacy runs, with wazero's termination checks (a call into Go at
	// every loop iteration), the modules that package instrument cannot
	// rewrite. Created on first use.
	legacy wazero.Runtime
	// noInstrument makes every module take the legacy runtime (tests).
	noInstrument bool
}

// NewRuntime creates a runtime: one per worker.
func NewRuntime(ctx context.Context, c Config) (*Runtime, error) {
	r := &Runtime{cfg: c, timeout: c.CallTimeout, limit: c.MemoryLimitPages, limits: c.Limits.resolve(), modules: map[string]*compiled{}}
	switch {
	case r.limit == 0:
		r.limit = DefaultMemoryLimitPages
	case r.limit > MaxMemoryLimitPages:
		return nil, fmt.Errorf("host: MemoryLimitPages %d exceeds the WebAssembly maximum of %d pages (4 GiB)", r.limit, MaxMemoryLimitPages)
	}
	r.deadlines = true
	switch {
	case r.timeout == 0:
		r.timeout = DefaultCallTimeout
	case r.timeout < 0:
		// Timers still run (they cost nothing per guest instruction) but
		// can never fire in practice; without a stop flag they could not
		// stop the guest anyway.
		r.deadlines = false
		r.timeout = noDeadline
	}
	// Guests are stopped through the flag that package instrument adds, not
	// by wazero, whose checks call into Go at every loop iteration.
	//
	// wazero's own memory limit is WebAssembly's maximum: an instance's
	// limit is enforced by its allocator (memLimiter), which so sees every
	// growth the limit refuses. With wazero's limit at the instance's,
	// wazero refused a growth past it without calling the allocator: a
	// guest that ran out of memory short of the limit (a Go runtime asking
	// for a whole heap arena) got an error that did not name the limit, and
	// an instance at the limit could not be reset (shrinkMemory grows by a
	// page). compile refuses a module whose memory starts above r.limit.
	r.rc = wazero.NewRuntimeConfig().
		WithMemoryLimitPages(MaxMemoryLimitPages).
		WithCloseOnContextDone(false)
	if c.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(c.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("host: compilation cache in %s: %w", c.CacheDir, err)
		}
		r.cache = cache
		r.rc = r.rc.WithCompilationCache(cache)
	}
	var err error
	if r.rt, err = r.newRuntime(ctx, r.rc); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	return r, nil
}

// newRuntime creates a wazero runtime with the host modules, and fills
// r.provided on the first call.
func (r *Runtime) newRuntime(ctx context.Context, rc wazero.RuntimeConfig) (wazero.Runtime, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	hostMod, err := instantiateHostModule(ctx, rt)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("host: instantiating the %s host module: %w", abi.ImportModule, err)
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("host: instantiating %s: %w", wasiModuleName, err)
	}
	if r.provided == nil {
		r.provided = map[string]map[string]api.FunctionDefinition{
			abi.ImportModule: hostMod.ExportedFunctionDefinitions(),
			wasiModuleName:   rt.Module(wasiModuleName).ExportedFunctionDefinitions(),
		}
	}
	return rt, nil
}

// legacyRuntime returns the runtime for modules that cannot be
// instrumented, creating it on first use. It shares the compilation cache:
// wazero keys compiled code by its termination checks too.
func (r *Runtime) legacyRuntime(ctx context.Context) (wazero.Runtime, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrRuntimeClosed
	}
	if r.legacy == nil {
		rt, err := r.newRuntime(ctx, r.rc.WithCloseOnContextDone(true))
		if err != nil {
			return nil, err
		}
		r.legacy = rt
	}
	return r.legacy, nil
}

// Close closes every module and instance of the runtime and the
// compilation cache handle (the cache directory stays).
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.modules = map[string]*compiled{}
	legacy := r.legacy
	r.mu.Unlock()
	var errs []error
	if r.rt != nil {
		errs = append(errs, r.rt.Close(ctx))
	}
	if legacy != nil {
		errs = append(errs, legacy.Close(ctx))
	}
	if r.cache != nil {
		errs = append(errs, r.cache.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host: closing runtime: %w", err)
	}
	return nil
}

func (r *Runtime) log(level int32, operator string, subtask int, msg string) {
	if r.cfg.Log != nil {
		r.cfg.Log(level, operator, subtask, msg)
	}
}

// compiled is a validated, compiled module shared by every Module handle of
// the same bytes: wazero keys compiled code by content, so closing one of
// two separate compilations would break the other.
type compiled struct {
	ready chan struct{} // closed when code, plan and err are set
	code
	plan   []byte
	err    error
	digest string // of the module as given to Compile, not as instrumented
	key    string // in Runtime.modules: the digest, and whether a tenant's
	refs   int    // guarded by Runtime.mu
}

// moduleKey is the key in Runtime.modules of the module with digest,
// compiled as a tenant's or not: the two compile different code.
func moduleKey(digest string, o compileOptions) string {
	if o.tenant {
		return digest + " tenant"
	}
	return digest
}

// code is compiled code and how its instances are stopped.
type code struct {
	cm wazero.CompiledModule
	rt wazero.Runtime // the runtime that compiled cm, which instantiates it
	// stop: cm was instrumented, and instances are stopped by setting their
	// instrument.StopExport global; otherwise wazero stops them.
	stop bool
	// start: the module's start function is exported as
	// instrument.StartExport, to be called after instantiation.
	start bool
	// globals are the indices of the mutable globals that cm exports for
	// Instance.Snapshot; noReset says why its instances cannot be reset
	// ("": they can).
	globals []uint32
	noReset string
	// exports says which exports the host calls cm has (exportMask).
	exports uint16
}

// Module is a validated, compiled operator module.
type Module struct {
	r      *Runtime
	c      *compiled
	name   string
	closed atomic.Bool
}

// Compile validates and compiles a module. name is used in error messages
// (usually the file name). Validation errors are *ValidationError; a
// tenant's module over a limit of Config.ModuleLimits fails with one whose
// Err is an *instrument.LimitError.
func (r *Runtime) Compile(ctx context.Context, name string, wasm []byte, opts ...CompileOption) (*Module, error) {
	var o compileOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkHeader(wasm); err != nil {
		return nil, &ValidationError{Module: name, Reason: err.Error()}
	}
	if o.tenant {
		// Before anything holds memory in proportion to what the module
		// declares, and whether or not the same bytes were compiled
		// already: the limits are the tenant's.
		if err := instrument.Admit(wasm, r.cfg.ModuleLimits); err != nil {
			return nil, &ValidationError{Module: name, Reason: EscapeGuestText([]byte(err.Error()), maxGuestMessage, false), Err: err}
		}
	}
	sum := sha256.Sum256(wasm)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	key := moduleKey(digest, o)

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrRuntimeClosed
	}
	c := r.modules[key]
	if c != nil {
		c.refs++
		r.mu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
			r.release(ctx, c)
			return nil, fmt.Errorf("host: compiling %s: %w", name, ctx.Err())
		}
		if c.err != nil {
			return nil, renamed(c.err, name)
		}
		return &Module{r: r, c: c, name: name}, nil
	}
	c = &compiled{ready: make(chan struct{}), digest: digest, key: key, refs: 1}
	r.modules[key] = c
	r.mu.Unlock()

	c.code, c.plan, c.err = r.compile(ctx, name, wasm, o)
	if c.err != nil {
		r.mu.Lock()
		if r.modules[key] == c {
			delete(r.modules, key)
		}
		r.mu.Unlock()
	}
	close(c.ready)
	if c.err != nil {
		return nil, c.err
	}
	return &Module{r: r, c: c, name: name}, nil
}

// Compiled returns the module with digest when a Module of the runtime
// holds it compiled, as Compile of its bytes under name with opts would,
// without needing the bytes; nil otherwise.
func (r *Runtime) Compiled(digest, name string, opts ...CompileOption) *Module {
	var o compileOptions
	for _, opt := range opts {
		opt(&o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.modules[moduleKey(digest, o)]
	if r.closed || c == nil {
		return nil
	}
	select {
	case <-c.ready:
	default:
		return nil // still compiling
	}
	if c.err != nil {
		return nil
	}
	c.refs++
	return &Module{r: r, c: c, name: name}
}

// renamed returns err as seen by a Compile of the same bytes under another
// name.
func renamed(err error, name string) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		cp := *ve
		cp.Module = name
		return &cp
	}
	return err
}

func (r *Runtime) release(ctx context.Context, c *compiled) {
	r.mu.Lock()
	c.refs--
	last := c.refs == 0 && r.modules[c.key] == c
	if last {
		delete(r.modules, c.key)
	}
	r.mu.Unlock()
	if last && c.cm != nil {
		_ = c.cm.Close(ctx)
	}
}

// memoryOverLimit is wazero's error for a module whose minimum memory is
// above the runtime's limit.
var memoryOverLimit = regexp.MustCompile(`section memory: min (\d+) pages \(.*\) over limit of \d+ pages`)

func (r *Runtime) compile(ctx context.Context, name string, wasm []byte, o compileOptions) (code, []byte, error) {
	cc, err := r.compileCode(ctx, name, wasm, o)
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return code{}, nil, err
		}
		if m := memoryOverLimit.FindStringSubmatch(err.Error()); m != nil {
			// A valid module that asks for more memory than this worker
			// gives an instance.
			pages, _ := strconv.Atoi(m[1])
			return code{}, nil, &ValidationError{Module: name, Reason: fmt.Sprintf("its memory starts at %s, above this runtime's memory limit of %s (--memory-limit)",
				pagesText(uint32(pages)), pagesText(r.limit)), Err: err}
		}
		if errors.Is(err, ErrRuntimeClosed) {
			return code{}, nil, err
		}
		// The module compiled, but its code could not be written to the
		// compilation cache (a full disk, a read-only directory): the
		// module is not at fault.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return code{}, nil, fmt.Errorf("host: module %s: writing the compilation cache: %w", name, err)
		}
		// wazero's decoder quotes names from the module.
		return code{}, nil, &ValidationError{Module: name, Reason: "invalid or truncated WebAssembly module: " +
			EscapeGuestText([]byte(err.Error()), maxGuestMessage, false), Err: err}
	}
	cm := cc.cm
	cc.exports = exportMask(cm)
	for _, d := range cm.ExportedMemories() {
		if d.Min() > r.limit {
			_ = cm.Close(ctx)
			// A valid module that asks for more memory than this worker
			// gives an instance.
			return code{}, nil, &ValidationError{Module: name, Reason: fmt.Sprintf("its memory starts at %s, above this runtime's memory limit of %s (--memory-limit)",
				pagesText(d.Min()), pagesText(r.limit))}
		}
	}
	problems := checkExports(cm)
	if p := checkNames(wasm); p != "" {
		problems = append(problems, p)
	}
	problems = append(problems, checkImports(cm, r.provided)...)
	if len(problems) > 0 {
		_ = cm.Close(ctx)
		return code{}, nil, &ValidationError{Module: name, Reason: strings.Join(problems, "; ")}
	}
	plan, err := r.probe(ctx, name, cc)
	if err == nil && plan == nil {
		var sec []byte
		if sec, err = customSection(wasm, abi.PlanSection); err != nil {
			err = &ValidationError{Module: name, Reason: "reading the " + abi.PlanSection + " custom section: " + err.Error()}
		} else if sec != nil {
			plan = append([]byte(nil), sec...)
		}
	}
	if err == nil && plan != nil && !json.Valid(plan) {
		err = &ValidationError{Module: name, Reason: "the module's plan is not valid JSON"}
	}
	if err != nil {
		_ = cm.Close(ctx)
		return code{}, nil, err
	}
	return cc, plan, nil
}

// compileCode compiles the module, instrumented with a stop flag when
// deadlines are on or it is a tenant's. A module that package instrument
// cannot rewrite, or whose rewrite wazero refuses, is compiled as it is by
// the legacy runtime instead: slower with deadlines, and stopped only at
// loop headers; an invalid module fails there with wazero's error about
// the bytes given. A tenant's is refused instead, unless
// Config.AllowUninstrumented.
func (r *Runtime) compileCode(ctx context.Context, name string, wasm []byte, o compileOptions) (code, error) {
	if !r.deadlines && !o.tenant {
		cm, err := r.rt.CompileModule(ctx, wasm)
		return code{cm: cm, rt: r.rt, noReset: notInstrumented}, err
	}
	why := errors.New("instrumentation disabled")
	if !r.noInstrument {
		var io instrument.Options
		if o.tenant {
			io.TableMax = r.cfg.ModuleLimits.Resolve().TableElements
		}
		// The rewrite is deterministic, so wazero's cache, keyed by the
		// bytes it compiles, finds the instrumented code again.
		res, err := instrument.InstrumentWith(wasm, io)
		if err == nil {
			cm, cerr := r.rt.CompileModule(ctx, res.Wasm)
			if cerr == nil {
				return code{cm: cm, rt: r.rt, stop: true, start: res.Start, globals: res.Globals, noReset: res.NoReset}, nil
			}
			err = cerr
		}
		why = err
	}
	if o.tenant && !r.cfg.AllowUninstrumented {
		// Its calls could not be stopped between loop headers: a loop-free
		// call tree would outlive its deadline by as long as it likes.
		cm, err := r.rt.CompileModule(ctx, wasm)
		if err != nil {
			return code{}, err // invalid: wazero's error about the bytes given
		}
		_ = cm.Close(ctx)
		return code{}, &ValidationError{Module: name, Reason: "the module cannot be instrumented (" +
			EscapeGuestText([]byte(why.Error()), 512, false) + "), so its calls could not be stopped at their deadline: " +
			"a tenant's module must be (an admin may allow such modules: --allow-uninstrumented)", Err: why}
	}
	legacy, err := r.legacyRuntime(ctx)
	if err != nil {
		return code{}, err
	}
	cm, err := legacy.CompileModule(ctx, wasm)
	if err == nil && !r.noInstrument {
		r.log(abi.LogWarn, name, -1, "host: the module cannot take a stop flag ("+
			EscapeGuestText([]byte(why.Error()), 512, false)+"): deadlines will slow its loops down")
	}
	return code{cm: cm, rt: legacy, noReset: notInstrumented}, err
}

// notInstrumented is why the instances of a module that package instrument
// did not rewrite cannot be reset: wazero exports none of their globals.
const notInstrumented = "the module is not instrumented, so its globals cannot be saved"

// probe runs one short-lived instance to check wstream_abi_version and to
// read the plan from wstream_plan when the module exports it.
func (r *Runtime) probe(ctx context.Context, name string, cc code) ([]byte, error) {
	inst, err := r.instantiate(ctx, cc, name, r.limits, 0)
	if err != nil {
		var ge *GuestError
		if errors.As(err, &ge) {
			return nil, &ValidationError{Module: name, Reason: "instantiating: " + ge.Call + ": " + ge.Message, Err: err}
		}
		return nil, &ValidationError{Module: name, Reason: "instantiating: " + err.Error(), Err: err}
	}
	defer inst.Close(ctx)
	fail := func(call string, err error) error {
		var ge *GuestError
		if errors.As(err, &ge) {
			return &ValidationError{Module: name, Reason: call + " failed: " + ge.Message, Err: err}
		}
		return &ValidationError{Module: name, Reason: call + " failed: " + err.Error(), Err: err}
	}
	v, err := inst.call(nil, phaseIdle, nil, inst.api.ExportedFunction(abi.ExportABIVersion), abi.ExportABIVersion, 0)
	if err != nil {
		return nil, fail(abi.ExportABIVersion, err)
	}
	if v != abi.Version {
		return nil, &ValidationError{Module: name, Reason: fmt.Sprintf(
			"%s() returned %d, expected %d: the module was built for another ABI version; rebuild it with a guest SDK for ABI v%d",
			abi.ExportABIVersion, v, abi.Version, abi.Version)}
	}
	fn := inst.api.ExportedFunction(abi.ExportPlan)
	if fn == nil {
		return nil, nil
	}
	if _, err := inst.call(nil, phaseIdle, nil, fn, abi.ExportPlan, 0); err != nil {
		return nil, fail(abi.ExportPlan, err)
	}
	pl := inst.stack[0]
	if pl == 0 {
		return nil, nil
	}
	ptr, n := uint32(pl>>32), uint32(pl)
	b, ok := inst.mem.Read(ptr, n)
	if !ok {
		return nil, &ValidationError{Module: name, Reason: fmt.Sprintf(
			"%s() returned the region [%#x, +%d), outside guest memory (%d bytes)", abi.ExportPlan, ptr, n, inst.mem.Size())}
	}
	return append([]byte{}, b...), nil
}

// Digest is "sha256:<hex>" of the module bytes.
func (m *Module) Digest() string { return m.c.digest }

// Name is the name the module was compiled under.
func (m *Module) Name() string { return m.name }

// Plan is the module's plan JSON, from its wstream_plan export or its
// "wstream.plan" custom section; nil when it has none. The caller must not
// modify it.
func (m *Module) Plan() []byte { return m.c.plan }

// Close releases the compiled module. Instances already created keep
// running until closed.
func (m *Module) Close(ctx context.Context) error {
	if m.closed.Swap(true) {
		return nil
	}
	m.r.release(ctx, m.c)
	return nil
}

// NewInstance instantiates the module for one subtask. label names it in
// errors and logs until an operator is opened ("vertex/subtask").
//
// ctx bounds the instance's life, not only its instantiation: once ctx is
// done, a guest call in progress is stopped (within instrument.Budget loop
// iterations or function calls of the guest, typically under a millisecond,
// or at once when wazero's own checks serve a module that cannot be
// instrumented) and fails with ErrCanceled, and later calls are refused.
// Pass the job's context, not a short-lived one.
//
// Options override the runtime's Config.Limits (WithLimits) and lower its
// memory limit (WithMemoryLimit) for this instance.
func (m *Module) NewInstance(ctx context.Context, label string, opts ...InstanceOption) (*Instance, error) {
	if m.closed.Load() {
		return nil, fmt.Errorf("host: module %s: %w", m.name, ErrModuleClosed)
	}
	m.r.mu.Lock()
	closed := m.r.closed
	m.r.mu.Unlock()
	if closed {
		return nil, ErrRuntimeClosed
	}
	o := instanceOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	return m.r.instantiate(ctx, m.c.code, label, o.limits.over(m.r.cfg.Limits).resolve(), o.memoryPages)
}
