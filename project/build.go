package project

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/job"
)

// CFlags are the clang flags of a C project: a freestanding wasm32 module
// without libc and without an entry point (the SDK marks its exports with
// export_name), with the stack below the data so that an overflow traps
// instead of overwriting data. -msimd128 lets operators (and clang's
// vectorizer) use wasm's 128-bit SIMD instructions, which wazero compiles to
// the processor's. The repository's own builds add -Werror.
var CFlags = []string{
	"--target=wasm32", "-msimd128", "-O2", "-flto", "-nostdlib", "-ffreestanding", "-Wall", "-Wextra",
	"-Wl,--no-entry", "-Wl,--stack-first", "-Wl,-z,stack-size=1048576", "-Wl,--strip-debug",
}

// RustFlags are the rustc flags of the SDK crate and of a Rust project:
// wasm32-unknown-unknown (no WASI: the module imports nothing but the
// wstream host functions), optimized, and panic=abort, so a panic reports
// through the SDK's panic hook and then traps.
var RustFlags = []string{
	"--edition", "2021", "--target", "wasm32-unknown-unknown",
	"-C", "opt-level=3", "-C", "panic=abort",
}

// RustModuleFlags are added when linking the module: link-time
// optimization across the SDK, and no DWARF (the name section stays, for
// trap traces).
var RustModuleFlags = []string{"--crate-type", "cdylib", "-C", "lto", "-C", "strip=debuginfo"}

// ASFlags are the asc flags of an AssemblyScript project: optimized, with
// the incremental garbage collector (a job runs for days), and with aborts
// routed through the SDK's wstreamAbort, so that the module imports nothing
// but the wstream host functions.
var ASFlags = []string{"-O3", "--runtime", "incremental", "--use", "abort=wstreamAbort"}

// MissingToolError reports a compiler that a project needs and that is not
// installed.
type MissingToolError struct {
	// Tool is the program that is missing ("clang", "rustc", ...).
	Tool string
	// Detail says what was looked at, when more than PATH.
	Detail string
	// Install says how to install it.
	Install string
}

func (e *MissingToolError) Error() string {
	msg := e.Tool + " not found"
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	} else {
		msg += " on PATH"
	}
	return msg + ": " + e.Install
}

// BuildOptions are Build's settings.
type BuildOptions struct {
	// Stderr receives the compilers' output (warnings, errors); nil
	// discards it.
	Stderr io.Writer
	// Logf, when set, is told every command Build runs.
	Logf func(format string, args ...any)
}

// Result is what Build made.
type Result struct {
	// Project is the project file's content.
	Project *Config
	// Module is the path of the module written.
	Module string
	// Size is the module's size in bytes.
	Size int64
	// Plan reports that the module carries the project's plan.
	Plan bool
}

// Build builds the project in dir: it checks the plan, compiles the module
// with the language's compiler, adds the plan as the module's wstream.plan
// custom section and writes the module to the project's output path (in
// place of the previous one only once everything succeeded).
func Build(ctx context.Context, dir string, opts BuildOptions) (*Result, error) {
	p, err := Load(dir)
	if err != nil {
		return nil, err
	}
	var plan []byte
	if p.Plan != "" {
		if plan, err = loadPlan(dir, p.Plan); err != nil {
			return nil, err
		}
	}
	out := filepath.Join(dir, filepath.FromSlash(p.Output))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(out), ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "module.wasm")
	b := &builder{ctx: ctx, dir: dir, p: p, opts: opts}
	switch p.Language {
	case Go:
		err = b.goModule(tmp)
	case C:
		err = b.cModule(tmp)
	case Rust:
		err = b.rustModule(tmp)
	case AssemblyScript:
		err = b.asModule(tmp)
	case WAT:
		err = b.watModule(tmp)
	default:
		err = fmt.Errorf("no builder for language %q", p.Language)
	}
	if err != nil {
		return nil, err
	}
	mod, err := os.ReadFile(tmp)
	if err != nil {
		return nil, fmt.Errorf("the compiler wrote no module: %w", err)
	}
	if len(mod) < 8 || string(mod[:4]) != "\x00asm" {
		return nil, fmt.Errorf("the compiler's output %s is not a WebAssembly module", tmp)
	}
	if plan != nil {
		mod = appendCustomSection(mod, abi.PlanSection, plan)
	}
	if err := os.WriteFile(tmp, mod, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, err
	}
	return &Result{Project: p, Module: out, Size: int64(len(mod)), Plan: plan != nil}, nil
}

// loadPlan reads the project's plan file and checks it as deploy will
// (strict decoding, then validation), so that a mistake shows at build
// time with the file's name.
func loadPlan(dir, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	pl, err := job.Parse(data)
	if err == nil {
		err = pl.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return bytes.TrimSpace(data), nil
}

// appendCustomSection appends a custom section (id 0) called name holding
// payload to the module mod. Custom sections may come anywhere after the
// header; the host reads the first wstream.plan section (abi/ABI.md).
func appendCustomSection(mod []byte, name string, payload []byte) []byte {
	body := binaryAppendUleb(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, payload...)
	mod = append(mod, 0)
	mod = binaryAppendUleb(mod, uint64(len(body)))
	return append(mod, body...)
}

func binaryAppendUleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

// builder runs one project's compilers.
type builder struct {
	ctx  context.Context
	dir  string
	p    *Config
	opts BuildOptions
}

// run runs name with args in the project's directory, with env added to
// the environment, its output to opts.Stderr.
func (b *builder) run(env []string, name string, args ...string) error {
	if b.opts.Logf != nil {
		b.opts.Logf("%s", strings.Join(append(append([]string{}, env...), append([]string{name}, args...)...), " "))
	}
	cmd := exec.CommandContext(b.ctx, name, args...)
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), env...)
	var tail bytes.Buffer
	w := io.Writer(&tail)
	if b.opts.Stderr != nil {
		w = io.MultiWriter(b.opts.Stderr, &tail)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		if b.opts.Stderr == nil && tail.Len() > 0 {
			return fmt.Errorf("%s failed: %v\n%s", filepath.Base(name), err, tail.String())
		}
		return fmt.Errorf("%s failed: %v", filepath.Base(name), err)
	}
	return nil
}

func lookPath(tool, install string) (string, error) {
	p, err := exec.LookPath(tool)
	if err != nil {
		return "", &MissingToolError{Tool: tool, Install: install}
	}
	return p, nil
}

// rel returns the path of out relative to the project's directory, where
// the compilers run.
func (b *builder) rel(out string) string {
	r, err := filepath.Rel(b.dir, out)
	if err != nil {
		abs, _ := filepath.Abs(out)
		return abs
	}
	return r
}

const installGo = "install Go " + GoVersion + " or later from https://go.dev/dl/"

func (b *builder) goModule(out string) error {
	goBin, err := lookPath("go", installGo)
	if err != nil {
		return err
	}
	// GOWORK=off: the project is its own module even inside a workspace.
	return b.run([]string{"GOOS=wasip1", "GOARCH=wasm", "GOWORK=off"}, goBin, "build", "-buildmode=c-shared", "-o", b.rel(out), ".")
}

const installClang = "install clang and lld with the wasm32 target (Debian/Ubuntu: apt-get install clang lld; macOS: brew install llvm lld)"

func (b *builder) cModule(out string) error {
	clang, err := lookPath("clang", installClang)
	if err != nil {
		return err
	}
	if _, err := lookPath("wasm-ld", installClang); err != nil {
		return err
	}
	srcs, err := filepath.Glob(filepath.Join(b.dir, "*.c"))
	if err != nil {
		return err
	}
	if len(srcs) == 0 {
		return fmt.Errorf("no .c files in %s", b.dir)
	}
	sort.Strings(srcs)
	args := append(append([]string{}, CFlags...), "-I", filepath.Join("sdk", "c"), "-o", b.rel(out))
	for _, s := range srcs {
		args = append(args, filepath.Base(s))
	}
	args = append(args, filepath.Join("sdk", "c", "wstream.c"))
	return b.run(nil, clang, args...)
}

const installRust = "install Rust with the wasm32-unknown-unknown target (rustup: rustup target add wasm32-unknown-unknown; Debian/Ubuntu: apt-get install rustc libstd-rust-dev-wasm32), or set RUSTC to such a rustc"

// rustc returns the compiler to use: $RUSTC when set, else the first rustc
// on PATH whose sysroot has the wasm32-unknown-unknown standard library (a
// rustup toolchain first on PATH may lack it while a distribution's rustc
// further on has it).
func (b *builder) rustc() (string, error) {
	if r := os.Getenv("RUSTC"); r != "" {
		if !hasWasm32(b.ctx, r) {
			return "", &MissingToolError{Tool: "rustc", Detail: "RUSTC=" + r + " has no wasm32-unknown-unknown standard library", Install: installRust}
		}
		return r, nil
	}
	var without []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, "rustc")
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			continue
		}
		if hasWasm32(b.ctx, p) {
			return p, nil
		}
		without = append(without, p)
	}
	if len(without) > 0 {
		verb := " lacks it"
		if len(without) > 1 {
			verb = " lack it"
		}
		return "", &MissingToolError{Tool: "rustc with the wasm32-unknown-unknown target", Detail: strings.Join(without, ", ") + verb, Install: installRust}
	}
	return "", &MissingToolError{Tool: "rustc", Install: installRust}
}

// hasWasm32 reports whether rustc's sysroot holds the wasm32 standard
// library.
func hasWasm32(ctx context.Context, rustc string) bool {
	out, err := exec.CommandContext(ctx, rustc, "--print", "sysroot").Output()
	if err != nil {
		return false
	}
	lib := filepath.Join(strings.TrimSpace(string(out)), "lib", "rustlib", "wasm32-unknown-unknown", "lib")
	m, _ := filepath.Glob(filepath.Join(lib, "libstd-*.rlib"))
	return len(m) > 0
}

func (b *builder) rustModule(out string) error {
	rustc, err := b.rustc()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(b.dir, "src", "lib.rs")); err != nil {
		return fmt.Errorf("no src/lib.rs in %s: it is the crate root of a Rust project", b.dir)
	}
	rlib, err := b.rustSDK(rustc)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(b.dir)
	if err != nil {
		return err
	}
	args := append(append(append([]string{}, RustFlags...), RustModuleFlags...),
		// Panic locations name files of the project, not of the machine.
		"--remap-path-prefix", abs+string(filepath.Separator)+"=",
		"--crate-name", strings.ReplaceAll(b.p.Name, "-", "_"),
		"--extern", "wstream="+rlib, "-L", filepath.Dir(rlib), "-o", b.rel(out), filepath.Join("src", "lib.rs"))
	return b.run(nil, rustc, args...)
}

// rustSDK compiles sdk/rust into build/.sdk/libwstream.rlib unless the one
// there was compiled from the same sources by the same compiler with the
// same flags (a stamp file next to it records them), and returns its path
// relative to the project.
func (b *builder) rustSDK(rustc string) (string, error) {
	sdk := filepath.Join(b.dir, "sdk", "rust")
	ver, err := exec.CommandContext(b.ctx, rustc, "-vV").Output()
	if err != nil {
		return "", fmt.Errorf("%s -vV: %w", rustc, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%q\n", rustc, ver, RustFlags)
	files, err := filepath.Glob(filepath.Join(sdk, "*.rs"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no Rust SDK in %s (wstream init writes it)", sdk)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(data))
		h.Write(data)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	cache := filepath.Join("build", ".sdk")
	rlib := filepath.Join(cache, "libwstream.rlib")
	stamp := filepath.Join(b.dir, cache, "libwstream.stamp")
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		if _, err := os.Stat(filepath.Join(b.dir, rlib)); err == nil {
			return rlib, nil
		}
	}
	if err := os.MkdirAll(filepath.Join(b.dir, cache), 0o755); err != nil {
		return "", err
	}
	os.Remove(stamp)
	tmp := rlib + ".tmp"
	args := append(append([]string{}, RustFlags...), "--crate-type", "rlib", "--crate-name", "wstream",
		"-o", tmp, filepath.Join("sdk", "rust", "lib.rs"))
	if err := b.run(nil, rustc, args...); err != nil {
		return "", fmt.Errorf("the Rust SDK: %w", err)
	}
	if err := os.Rename(filepath.Join(b.dir, tmp), filepath.Join(b.dir, rlib)); err != nil {
		return "", err
	}
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		return "", err
	}
	return rlib, nil
}

func (b *builder) asModule(out string) error {
	node, err := lookPath("node", "install Node.js 20 or later from https://nodejs.org (Debian/Ubuntu: apt-get install nodejs)")
	if err != nil {
		return err
	}
	asc, _ := ascVersion()
	installAsc := fmt.Sprintf("run npm install in %s (package.json pins assemblyscript %s), or npm install -g assemblyscript@%s", b.dir, asc, asc)
	var argv []string
	local := filepath.Join("node_modules", "assemblyscript", "bin", "asc.js")
	if _, err := os.Stat(filepath.Join(b.dir, local)); err == nil {
		argv = []string{node, local}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	} else if p, err := exec.LookPath("asc"); err == nil {
		argv = []string{p}
	} else {
		return &MissingToolError{Tool: "asc (the AssemblyScript compiler)", Detail: "neither in " + filepath.Join(b.dir, "node_modules") + " nor on PATH", Install: installAsc}
	}
	// asc runs in the project with a relative entry path, so the module's
	// internal names do not depend on where the project is.
	args := append(append(argv[1:], filepath.ToSlash(filepath.Join("assembly", "index.ts"))), ASFlags...)
	args = append(args, "-o", b.rel(out))
	return b.run(nil, argv[0], args...)
}

func (b *builder) watModule(out string) error {
	w2w, err := lookPath("wat2wasm", "install wabt (Debian/Ubuntu: apt-get install wabt; macOS: brew install wabt)")
	if err != nil {
		return err
	}
	return b.run(nil, w2w, "-o", b.rel(out), "main.wat")
}
