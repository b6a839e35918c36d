// Package testmod builds the example and test WASM modules that tests run.
// Builds are cached by the Go build cache and by content under the user cache
// dir, so a test suite compiles each module once.
package testmod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
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
func BuildGo(pkg string) (string, error) { return BuildGoTags(pkg) }

// BuildGoTags is BuildGo with build tags, for variants of a module:
// BuildGoTags(pkg, "wstream_unbatched") builds it without the SDK's state
// cache, as a module of ABI v1 without the batched imports.
func BuildGoTags(pkg string, tags ...string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := pkg
	if len(tags) > 0 {
		key += "+" + strings.Join(tags, ",")
	}
	if p, ok := built[key]; ok {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	// Per checkout (two checkouts' suites may run at once and build
	// different SDKs), and written under a temporary name then renamed, so
	// that a concurrent test process never deploys another's half-written
	// or different module.
	sum := sha256.Sum256([]byte(Root()))
	out := filepath.Join(dir, "wstream-testmod", "go-"+hex.EncodeToString(sum[:6]), filepath.FromSlash(key)+".wasm")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "build-*.wasm")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	args := []string{"build", "-buildmode=c-shared", "-o", tmp.Name()}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command(goBin, append(args, "./"+filepath.ToSlash(pkg))...)
	cmd.Dir = Root()
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	built[key] = out
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
