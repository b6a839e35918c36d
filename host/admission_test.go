package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wstream/wstream/host/instrument"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// compileTenant compiles src as a tenant's module.
func compileTenant(r *Runtime, src []byte) (*Module, error) {
	m, err := r.Compile(context.Background(), "tenant.wasm", src, TenantModule())
	if err == nil {
		_ = m.Close(context.Background())
	}
	return m, err
}

// limitErr returns the *instrument.LimitError a tenant's compile failed
// with, failing the test unless it is one inside a *ValidationError.
func limitErr(t *testing.T, err error) *instrument.LimitError {
	t.Helper()
	var ve *ValidationError
	var le *instrument.LimitError
	if !errors.As(err, &ve) || !errors.As(err, &le) {
		t.Fatalf("got %T %v, want a *ValidationError for an *instrument.LimitError", err, err)
	}
	return le
}

// TestTenantModuleLimits: a tenant's module over a limit is refused
// before it is compiled, with an error naming the limit and where; the
// same bytes compile for the admin.
func TestTenantModuleLimits(t *testing.T) {
	r := newTestRuntime(t, Config{ModuleLimits: instrument.Limits{LocalsPerFunction: 100}})
	for _, n := range []int{100, 101} {
		src := testmod.WAT(t, moduleWAT(nil, fmt.Sprintf(`(func $big (local %s))`, strings.Repeat("i64 ", n))))
		_, err := compileTenant(r, src)
		if n == 100 {
			if err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			continue
		}
		le := limitErr(t, err)
		if le.Limit != "LocalsPerFunction" || !strings.HasPrefix(le.Where, "code section, function ") ||
			!strings.Contains(err.Error(), "101 locals, over the admission limit of 100 (LocalsPerFunction)") ||
			!strings.Contains(err.Error(), "module tenant.wasm") {
			t.Errorf("got %v", err)
		}
		m, err := r.Compile(context.Background(), "admin.wasm", src)
		if err != nil {
			t.Fatalf("the admin's: %v", err)
		}
		_ = m.Close(context.Background())
		// Compiled for the admin, the module is not a tenant's without
		// passing admission.
		if m := r.Compiled(m.Digest(), "tenant.wasm", TenantModule()); m != nil {
			t.Error("Compiled found the admin's compilation for a tenant")
		}
		if _, err := compileTenant(r, src); err == nil {
			t.Error("compiled for the admin first, the module passed for a tenant")
		}
	}
}

// TestTenantReservedName: a tenant's module exporting a name the rewrite
// reserves is refused (an admin's runs with wazero's checks,
// TestStopFallback), even where uninstrumented modules are allowed.
func TestTenantReservedName(t *testing.T) {
	for _, name := range []string{instrument.StopExport, instrument.StartExport, instrument.GlobalExport(3)} {
		src := testmod.WAT(t, moduleWAT(nil, `(func (export "`+name+`"))`))
		r := newTestRuntime(t, Config{AllowUninstrumented: true})
		_, err := compileTenant(r, src)
		if le := limitErr(t, err); le.Limit != "ReservedNames" || !strings.Contains(err.Error(), fmt.Sprintf("%q is reserved", name)) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// TestTenantUninstrumented: a tenant's module that cannot be instrumented
// is refused unless the admin allows it; allowed, it runs with wazero's
// checks.
func TestTenantUninstrumented(t *testing.T) {
	src := testmod.WAT(t, passWAT)
	r := newTestRuntime(t, Config{})
	r.noInstrument = true
	_, err := compileTenant(r, src)
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "cannot be instrumented (instrumentation disabled)") ||
		!strings.Contains(err.Error(), "--allow-uninstrumented") {
		t.Errorf("got %v", err)
	}
	// An invalid module says so rather than that it cannot be
	// instrumented.
	// A function of type () -> (i32) that returns nothing.
	bad := []byte("\x00asm\x01\x00\x00\x00\x01\x05\x01\x60\x00\x01\x7f\x03\x02\x01\x00\x0a\x04\x01\x02\x00\x0b")
	if _, err := compileTenant(r, bad); err == nil || strings.Contains(err.Error(), "instrumented") {
		t.Errorf("invalid module: got %v", err)
	}

	r = newTestRuntime(t, Config{AllowUninstrumented: true})
	r.noInstrument = true
	m, err := r.Compile(context.Background(), "tenant.wasm", src, TenantModule())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if m.c.stop || m.c.rt == r.rt {
		t.Error("the module was instrumented")
	}
}

// TestTenantTableCap: a tenant's tables get the capped maximum, and
// table.grow past it returns -1; the admin's grow as wasm allows.
func TestTenantTableCap(t *testing.T) {
	src := testmod.WAT(t, moduleWAT(nil, `(table $t 1 funcref)
  (func (export "t_grow") (param i32) (result i32) (table.grow $t (ref.null func) (local.get 0)))`))
	r := newTestRuntime(t, Config{ModuleLimits: instrument.Limits{TableElements: 1000}})
	grow := func(opts []CompileOption, n uint64) int32 {
		t.Helper()
		m, err := r.Compile(context.Background(), "t.wasm", src, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		inst, err := m.NewInstance(context.Background(), "v/0")
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(context.Background())
		res, err := inst.api.ExportedFunction("t_grow").Call(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		return int32(res[0])
	}
	tenant := []CompileOption{TenantModule()}
	for _, c := range []struct {
		opts []CompileOption
		n    uint64
		want int32
	}{
		{tenant, 999, 1}, // to exactly the cap
		{tenant, 1000, -1},
		{tenant, 1 << 27, -1},
		{tenant, 0xfffffff0, -1},
		{nil, 5000, 1},
	} {
		if got := grow(c.opts, c.n); got != c.want {
			t.Errorf("tenant %v, grow by %d: %d, want %d", c.opts != nil, c.n, got, c.want)
		}
	}
	// A table that starts above the cap is refused.
	src = testmod.WAT(t, moduleWAT(nil, `(table 1001 funcref)`))
	_, err := compileTenant(r, src)
	if le := limitErr(t, err); le.Limit != "TableElements" || le.Where != "table section, table 0" {
		t.Errorf("got %v", err)
	}
	// One whose maximum is under the cap keeps it.
	src = testmod.WAT(t, moduleWAT(nil, `(table $t 1 10 funcref)
  (func (export "t_grow") (param i32) (result i32) (table.grow $t (ref.null func) (local.get 0)))`))
	if got := grow(tenant, 10); got != -1 {
		t.Errorf("grow past a declared maximum of 10: %d", got)
	}
	if got := grow(tenant, 9); got != 1 {
		t.Errorf("grow to a declared maximum of 10: %d", got)
	}
}

// TestTenantNoDeadlines: without deadlines a tenant's module is still
// instrumented, so its tables are capped.
func TestTenantNoDeadlines(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: -1})
	m, err := r.Compile(context.Background(), "t.wasm", testmod.WAT(t, passWAT), TenantModule())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if !m.c.stop {
		t.Error("a tenant's module was not instrumented")
	}
	if _, err := m.NewInstance(context.Background(), "v/0"); err != nil {
		t.Fatal(err)
	}
}
