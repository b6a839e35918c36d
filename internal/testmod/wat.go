package testmod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// WATDir is the directory of the example modules written in WebAssembly
// text, one NAME.wat file per module, relative to the repository root.
const WATDir = "examples/wasm/wat"

// WATFlags are the wat2wasm flags of a WAT guest module. wabt's defaults
// already enable what the modules use (bulk memory, multi-value), which
// wazero's default features include too; nothing experimental is enabled.
var WATFlags = []string{}

func init() {
	registerBuilder("wat", func(name string) (string, error) {
		return BuildWAT(WATDir + "/" + name + ".wat")
	})
}

// WATModule assembles the WAT module at file (relative to the repository
// root, e.g. "examples/wasm/wat/wordcount.wat") and returns the path of the
// .wasm file.
func WATModule(tb testing.TB, file string) string {
	tb.Helper()
	p, err := BuildWAT(file)
	if err != nil {
		tb.Fatalf("assembling %s: %v", file, err)
	}
	return p
}

// BuildWAT is WATModule for callers without a testing.TB (benchmarks,
// tools). It assembles with wat2wasm (installed by scripts/setup.sh) and
// caches the module by the content of the source and the flags, so a source
// is assembled once until it changes.
func BuildWAT(file string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := "wat:" + file
	if p, ok := built[key]; ok {
		return p, nil
	}
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		return "", fmt.Errorf("wat2wasm not found: run scripts/setup.sh (it installs wabt)")
	}
	src, err := os.ReadFile(filepath.Join(Root(), filepath.FromSlash(file)))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%s\n%d\n", WATFlags, wat2wasm, len(src))
	h.Write(src)
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	out := filepath.Join(cacheDir, "wstream-testmod", filepath.FromSlash(file), hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		built[key] = out
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// Write to a temporary name and rename, so that a concurrent test binary
	// never reads a half-written module.
	tmp, err := os.CreateTemp(filepath.Dir(out), "build-*.wasm")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append(append([]string{}, WATFlags...), "-o", tmp.Name(), filepath.FromSlash(file))
	cmd := exec.Command(wat2wasm, args...)
	cmd.Dir = Root()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("wat2wasm %s: %v\n%s", file, err, stderr.String())
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}
