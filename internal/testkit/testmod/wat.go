package testmod

import (
	"bytes"
	"fmt"
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
	sum, err := contentKey(fmt.Sprintf("%q\n%s", WATFlags, wat2wasm), []string{filepath.Join(Root(), filepath.FromSlash(file))})
	if err != nil {
		return "", err
	}
	out, err := cachedBuild(file, sum, func(wasm string) error {
		args := append(append([]string{}, WATFlags...), "-o", wasm, filepath.FromSlash(file))
		cmd := exec.Command(wat2wasm, args...)
		cmd.Dir = Root()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("wat2wasm %s: %v\n%s", file, err, stderr.String())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}
