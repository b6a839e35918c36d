// Package testmod builds the example and test WASM modules that tests run.
// Builds are cached by the Go build cache and by content under the user cache
// dir, so a test suite compiles each module once.
package testmod

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Root returns the repository root (the directory holding go.mod).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// GoModule builds the Go guest package at pkg (relative to the repository
// root, e.g. "examples/wasm/go/wordcount") with GOOS=wasip1 GOARCH=wasm
// -buildmode=c-shared and returns the path of the .wasm file.
func GoModule(tb testing.TB, pkg string) string {
	tb.Helper()
	p, err := BuildGo(pkg)
	if err != nil {
		tb.Fatalf("building %s: %v", pkg, err)
	}
	return p
}

// BuildGo is GoModule for callers without a testing.TB (benchmarks, tools).
func BuildGo(pkg string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[pkg]; ok {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	out := filepath.Join(dir, "wstream-testmod", filepath.FromSlash(pkg)+".wasm")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, "./"+filepath.ToSlash(pkg))
	cmd.Dir = Root()
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	built[pkg] = out
	return out, nil
}

// WAT assembles WebAssembly text with wat2wasm (installed by scripts/setup.sh)
// and returns the binary.
func WAT(tb testing.TB, src string) []byte {
	tb.Helper()
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		tb.Fatalf("wat2wasm not found: run scripts/setup.sh (it installs wabt)")
	}
	dir := tb.TempDir()
	in := filepath.Join(dir, "m.wat")
	out := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "--enable-all", "-o", out, in)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
