package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

func TestCheckHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want string // "" = ok
	}{
		{"ok", []byte("\x00asm\x01\x00\x00\x00"), ""},
		{"empty", nil, "not a WebAssembly module: the file is empty"},
		{"elf", []byte("\x7fELF\x02\x01\x01\x00"), `starts with "\x7fELF" (hex 7f454c46)`},
		{"text", []byte("(module)"), "not a WebAssembly module"},
		{"magic only", []byte("\x00asm"), "truncated WebAssembly module: 4 bytes"},
		{"version 2", []byte("\x00asm\x02\x00\x00\x00"), "unsupported WebAssembly binary version 0x2"},
		{"component", []byte("\x00asm\x0d\x00\x01\x00"), "components are not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHeader(tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReadU32(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		v    uint32
		n    int
		fail bool
	}{
		{[]byte{0}, 0, 1, false},
		{[]byte{0x7f}, 127, 1, false},
		{[]byte{0x80, 0x01}, 128, 2, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0xffffffff, 5, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 0, 0, true}, // 33 bits
		{[]byte{0x80}, 0, 0, true},                         // truncated
		{nil, 0, 0, true},
	} {
		v, n, err := readU32(tc.in)
		if tc.fail {
			if err == nil {
				t.Errorf("readU32(%x) = %d, want an error", tc.in, v)
			}
			continue
		}
		if err != nil || v != tc.v || n != tc.n {
			t.Errorf("readU32(%x) = %d, %d, %v; want %d, %d", tc.in, v, n, err, tc.v, tc.n)
		}
	}
}

// section encodes one section with id and payload.
func section(id byte, payload []byte) []byte {
	b := []byte{id}
	b = appendU32(b, uint32(len(payload)))
	return append(b, payload...)
}

func customPayload(name, data string) []byte {
	b := appendU32(nil, uint32(len(name)))
	return append(append(b, name...), data...)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func TestCustomSection(t *testing.T) {
	header := []byte("\x00asm\x01\x00\x00\x00")
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	long := strings.Repeat("x", 300) // a two-byte size
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		none bool
		err  bool
	}{
		{name: "no sections", in: header, none: true},
		{name: "only", in: cat(header, section(0, customPayload("wstream.plan", `{"a":1}`))), want: `{"a":1}`},
		{name: "after others", in: cat(header, section(1, []byte{0}), section(0, customPayload("name", "zz")),
			section(0, customPayload("wstream.plan", long))), want: long},
		{name: "first of two", in: cat(header, section(0, customPayload("wstream.plan", "1")), section(0, customPayload("wstream.plan", "2"))), want: "1"},
		{name: "other names", in: cat(header, section(0, customPayload("wstream.planX", "1"))), none: true},
		{name: "empty payload", in: cat(header, section(0, customPayload("wstream.plan", ""))), want: ""},
		{name: "short header", in: header[:6], err: true},
		{name: "size overruns", in: cat(header, []byte{0, 10, 1, 2}), err: true},
		{name: "size truncated", in: cat(header, []byte{0, 0x80}), err: true},
		{name: "name overruns", in: cat(header, section(0, []byte{9, 'a'})), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := customSection(tc.in, abi.PlanSection)
			switch {
			case tc.err:
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
			case err != nil:
				t.Fatal(err)
			case tc.none:
				if got != nil {
					t.Fatalf("got %q, want none", got)
				}
			case got == nil || string(got) != tc.want:
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewRuntimeConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := NewRuntime(ctx, Config{MemoryLimitPages: 65537}); err == nil || !strings.Contains(err.Error(), "MemoryLimitPages 65537") {
		t.Errorf("limit 65537: got %v", err)
	}
	// A negative timeout turns deadlines off (no termination checks).
	nd := newTestRuntime(t, Config{CallTimeout: -1})
	if nd.timeout != noDeadline {
		t.Errorf("negative timeout: deadline %s, want none", nd.timeout)
	}
	r := newTestRuntime(t, Config{})
	if r.limit != DefaultMemoryLimitPages || r.timeout != DefaultCallTimeout {
		t.Errorf("defaults: limit %d timeout %s", r.limit, r.timeout)
	}
	r2 := newTestRuntime(t, Config{MemoryLimitPages: MaxMemoryLimitPages, CallTimeout: time.Second})
	if r2.limit != MaxMemoryLimitPages || r2.timeout != time.Second {
		t.Errorf("explicit: limit %d timeout %s", r2.limit, r2.timeout)
	}
}

func TestCompileValid(t *testing.T) {
	r := newTestRuntime(t, Config{})
	wasm := testmod.WAT(t, moduleWAT(nil, ""))
	m, err := r.Compile(context.Background(), "ok.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	sum := sha256.Sum256(wasm)
	if want := "sha256:" + hex.EncodeToString(sum[:]); m.Digest() != want {
		t.Errorf("Digest = %s, want %s", m.Digest(), want)
	}
	if m.Plan() != nil {
		t.Errorf("Plan = %q, want none", m.Plan())
	}
	if m.Name() != "ok.wasm" {
		t.Errorf("Name = %q", m.Name())
	}
}

// validationCase is a module Compile must refuse, and what the error says.
type validationCase struct {
	name string
	wasm func(t *testing.T) []byte
	want []string
}

func watCase(name string, overrides map[string]string, extra string, want ...string) validationCase {
	return validationCase{name, func(t *testing.T) []byte { return testmod.WAT(t, moduleWAT(overrides, extra)) }, want}
}

func validationCases() []validationCase {
	cases := []validationCase{
		{"bad magic", func(*testing.T) []byte { return []byte("\x7fELF\x02\x01\x01\x00\x00\x00") }, []string{"not a WebAssembly module"}},
		{"empty", func(*testing.T) []byte { return nil }, []string{"not a WebAssembly module"}},
		{"truncated", func(t *testing.T) []byte {
			b := testmod.WAT(t, moduleWAT(nil, ""))
			return b[:len(b)*2/3]
		}, []string{"invalid or truncated WebAssembly module"}},
		{"garbage after header", func(*testing.T) []byte { return []byte("\x00asm\x01\x00\x00\x00\x01\xff\xff\xff\xff\x0f") }, []string{"invalid or truncated WebAssembly module"}},
		watCase("wrong process signature", map[string]string{
			abi.ExportProcess: `(func (export "wstream_process") (param i32 i32) (result i32) (i32.const 0))`,
		}, "", `export "wstream_process" has signature (i32, i32) -> (i32), expected (i32, i32, i32) -> (i32)`),
		watCase("wrong abi version signature", map[string]string{
			abi.ExportABIVersion: `(func (export "wstream_abi_version") (result i64) (i64.const 1))`,
		}, "", `export "wstream_abi_version" has signature () -> (i64), expected () -> (i32)`),
		watCase("wrong optional export signature", nil,
			`(func (export "wstream_pre_barrier") (param i32 i32) (result i32) (i32.const 0))`,
			`export "wstream_pre_barrier" has signature (i32, i32) -> (i32), expected (i32, i64) -> (i32)`),
		watCase("wrong _initialize signature", nil, `(func (export "_initialize") (result i32) (i32.const 0))`,
			`export "_initialize" has signature () -> (i32), expected () -> ()`),
		watCase("memory is a function", map[string]string{
			abi.ExportMemory: `(memory 2) (func (export "memory"))`,
		}, "", `export "memory" is a function, expected a memory`),
		watCase("abi version 2", map[string]string{
			abi.ExportABIVersion: `(func (export "wstream_abi_version") (result i32) (i32.const 2))`,
		}, "", "wstream_abi_version() returned 2, expected 1"),
		watCase("abi version traps", map[string]string{
			abi.ExportABIVersion: `(func (export "wstream_abi_version") (result i32) unreachable)`,
		}, "", "wstream_abi_version failed", "unreachable"),
		watCase("unknown import module", map[string]string{partImports: `(import "env" "now" (func (result i64)))`}, "",
			`imports function "now" from module "env"; only "wstream" and "wasi_snapshot_preview1" are provided`),
		watCase("unknown wstream import", map[string]string{partImports: `(import "wstream" "sleep" (func (param i64)))`}, "",
			"imports unknown function wstream.sleep"),
		watCase("wrong wstream import signature", map[string]string{partImports: `(import "wstream" "emit_batch" (func (param i32) (result i32)))`}, "",
			"imports wstream.emit_batch with signature (i32) -> (i32), expected (i32, i32) -> (i32)"),
		watCase("unknown wasi import", map[string]string{partImports: `(import "wasi_snapshot_preview1" "sock_magic" (func (param i32) (result i32)))`}, "",
			"imports unknown function wasi_snapshot_preview1.sock_magic"),
		watCase("wrong wasi import signature", map[string]string{partImports: `(import "wasi_snapshot_preview1" "proc_exit" (func (param i64)))`}, "",
			"imports wasi_snapshot_preview1.proc_exit with signature (i64) -> (), expected (i32) -> ()"),
		watCase("imported memory", map[string]string{
			abi.ExportMemory: `(import "env" "mem" (memory 2)) (export "memory" (memory 0))`,
		}, "", "imports memory env.mem"),
		watCase("memory over the limit", map[string]string{
			abi.ExportMemory: `(memory (export "memory") 300)`,
		}, "", "its memory starts at 19200 KiB (300 pages), above this runtime's memory limit of 16 MiB (256 pages) (--memory-limit)"),
		watCase("_initialize traps", nil, `(func (export "_initialize") unreachable)`,
			"instantiating: _initialize", "unreachable"),
		watCase("plan out of bounds", nil, `(func (export "wstream_plan") (result i64) (i64.const 0x00fffff000000010))`,
			"wstream_plan() returned the region [0xfffff0, +16), outside guest memory"),
		watCase("plan not JSON", nil, `(data (i32.const 16) "{not json")
			(func (export "wstream_plan") (result i64) (i64.const 0x0000001000000009))`,
			"plan is not valid JSON"),
	}
	for _, name := range abi.RequiredExports {
		overrides := map[string]string{name: ""}
		if name == abi.ExportMemory {
			overrides[abi.ExportAlloc] = `(func (export "wstream_alloc") (param i32) (result i32) (i32.const 0))`
		}
		cases = append(cases, watCase("missing "+name, overrides, "", `missing required export "`+name+`"`))
	}
	return cases
}

func TestCompileRejects(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 5 * time.Second})
	for _, tc := range validationCases() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Compile(context.Background(), tc.name+".wasm", tc.wasm(t))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %T %v, want a *ValidationError", err, err)
			}
			if ve.Module != tc.name+".wasm" || !strings.Contains(err.Error(), tc.name+".wasm") {
				t.Errorf("error does not name the module: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
	// The runtime still compiles and runs good modules afterwards.
	m := compileWAT(t, r, moduleWAT(nil, ""))
	newInstance(t, m)
}

func TestCompileReportsEveryProblem(t *testing.T) {
	r := newTestRuntime(t, Config{})
	_, err := r.Compile(context.Background(), "many.wasm", testmod.WAT(t, moduleWAT(map[string]string{
		abi.ExportOpen:  "",
		abi.ExportClose: "",
		partImports:     `(import "env" "x" (func))`,
	}, "")))
	for _, w := range []string{`missing required export "wstream_open"`, `missing required export "wstream_close"`, `module "env"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not contain %q", err, w)
		}
	}
}

func TestCompileDeadlineInInitialize(t *testing.T) {
	r := newTestRuntime(t, Config{CallTimeout: 50 * time.Millisecond})
	start := time.Now()
	_, err := r.Compile(context.Background(), "spin.wasm", testmod.WAT(t, moduleWAT(nil,
		`(func (export "_initialize") (loop $l (br $l)))`)))
	if err == nil || !strings.Contains(err.Error(), "_initialize") || !strings.Contains(err.Error(), "deadline of 50ms") {
		t.Fatalf("got %v, want a deadline error in _initialize", err)
	}
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("error %v does not wrap ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestPlanFromExport(t *testing.T) {
	r := newTestRuntime(t, Config{})
	plan := `{"vertices":[{"id":"a"}]}`
	m := compileWAT(t, r, moduleWAT(nil, `(data (i32.const 100) "`+strings.ReplaceAll(plan, `"`, `\"`)+`")
		(func (export "wstream_plan") (result i64) (i64.or (i64.shl (i64.const 100) (i64.const 32)) (i64.const `+strconv.Itoa(len(plan))+`)))`))
	if string(m.Plan()) != plan {
		t.Errorf("Plan = %q, want %q", m.Plan(), plan)
	}
	// A plan export that returns 0 means none.
	m0 := compileWAT(t, r, moduleWAT(nil, `(func (export "wstream_plan") (result i64) (i64.const 0))`))
	if m0.Plan() != nil {
		t.Errorf("Plan = %q, want none", m0.Plan())
	}
}

func TestPlanFromCustomSection(t *testing.T) {
	r := newTestRuntime(t, Config{})
	plan := `{"operators":["x"]}`
	wasm := append(testmod.WAT(t, moduleWAT(nil, "")), section(0, customPayload(abi.PlanSection, plan))...)
	m, err := r.Compile(context.Background(), "plan.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if string(m.Plan()) != plan {
		t.Errorf("Plan = %q, want %q", m.Plan(), plan)
	}
	bad := append(testmod.WAT(t, moduleWAT(nil, "")), section(0, customPayload(abi.PlanSection, "{"))...)
	if _, err := r.Compile(context.Background(), "badplan.wasm", bad); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("got %v, want a JSON error", err)
	}
}

func TestCompileSharesIdenticalModules(t *testing.T) {
	r := newTestRuntime(t, Config{})
	ctx := context.Background()
	wasm := testmod.WAT(t, moduleWAT(nil, ""))
	m1, err := r.Compile(ctx, "a.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := r.Compile(ctx, "b.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if m1.c != m2.c || m1.Digest() != m2.Digest() {
		t.Fatal("identical modules were compiled twice")
	}
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m1.NewInstance(ctx, "x"); !errors.Is(err, ErrModuleClosed) {
		t.Errorf("NewInstance on a closed module: got %v", err)
	}
	inst, err := m2.NewInstance(ctx, "x")
	if err != nil {
		t.Fatalf("the other handle broke when the first closed: %v", err)
	}
	_ = inst.Close(ctx)
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.modules) != 0 {
		t.Errorf("%d compiled modules left after closing every handle", len(r.modules))
	}
	// A failed compilation is not cached, and each caller sees its own name.
	bad := testmod.WAT(t, moduleWAT(map[string]string{abi.ExportClose: ""}, ""))
	for _, name := range []string{"x.wasm", "y.wasm"} {
		_, err := r.Compile(ctx, name, bad)
		if err == nil || !strings.Contains(err.Error(), "module "+name+":") {
			t.Errorf("got %v, want an error naming %s", err, name)
		}
	}
}

func TestCompileConcurrently(t *testing.T) {
	r := newTestRuntime(t, Config{})
	wasm := testmod.WAT(t, moduleWAT(nil, ""))
	mods := make([]*Module, 4)
	errs := make([]error, len(mods))
	var wg sync.WaitGroup
	for j := range mods {
		wg.Go(func() { mods[j], errs[j] = r.Compile(context.Background(), "c.wasm", wasm) })
	}
	wg.Wait()
	for j, m := range mods {
		if errs[j] != nil {
			t.Fatal(errs[j])
		}
		if m.c != mods[0].c {
			t.Error("concurrent compilations of the same bytes were not shared")
		}
	}
	for _, m := range mods {
		inst, err := m.NewInstance(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		_ = inst.Close(context.Background())
		_ = m.Close(context.Background())
	}
	if len(r.modules) != 0 {
		t.Errorf("%d compiled modules left", len(r.modules))
	}
}

func TestCompilationCacheDir(t *testing.T) {
	dir := t.TempDir()
	wasm := testmod.WAT(t, moduleWAT(nil, ""))
	for round := 0; round < 2; round++ {
		r := newTestRuntime(t, Config{CacheDir: dir})
		m, err := r.Compile(context.Background(), "cached.wasm", wasm)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		inst, err := m.NewInstance(context.Background(), "v/0")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		_ = inst.Close(context.Background())
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("the compilation cache directory is empty")
	}
}

func TestRuntimeClosed(t *testing.T) {
	r, err := NewRuntime(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := compileWAT(t, r, moduleWAT(nil, ""))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Compile(context.Background(), "x.wasm", testmod.WAT(t, moduleWAT(nil, ""))); !errors.Is(err, ErrRuntimeClosed) {
		t.Errorf("Compile after Close: got %v", err)
	}
	if _, err := m.NewInstance(context.Background(), "x"); !errors.Is(err, ErrRuntimeClosed) {
		t.Errorf("NewInstance after Close: got %v", err)
	}
}

// TestCompilationCacheUnwritable: a module whose code cannot be written to
// the compilation cache is not called invalid.
func TestCompilationCacheUnwritable(t *testing.T) {
	dir := t.TempDir()
	r := newTestRuntime(t, Config{CacheDir: dir})
	// wazero writes below a directory per version, created with the cache:
	// a file in its place makes every write fail, even for root.
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || !entries[0].IsDir() {
		t.Fatalf("cache directory %s: %v %v", dir, entries, err)
	}
	sub := filepath.Join(dir, entries[0].Name())
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sub, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.Compile(context.Background(), "fine.wasm", testmod.WAT(t, moduleWAT(nil, "")))
	var ve *ValidationError
	if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "writing the compilation cache") || !strings.Contains(err.Error(), "fine.wasm") {
		t.Fatalf("compiling with an unwritable cache: %v", err)
	}
}
