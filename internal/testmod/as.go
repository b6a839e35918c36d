package testmod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
)

// ASSDKDir is the AssemblyScript guest SDK's directory, relative to the
// repository root. Its node_modules holds the compiler (scripts/setup.sh
// installs it from the package-lock.json there).
const ASSDKDir = "guest-sdk/assemblyscript"

// ASFlags are the asc flags of an AssemblyScript guest module: optimized,
// with the incremental garbage collector (a long-running job must not grow
// its memory for ever, as the stub runtime would), and with aborts routed
// through the SDK's wstreamAbort, so that the module imports nothing but
// the wstream host functions.
var ASFlags = []string{"-O3", "--runtime", "incremental", "--use", "abort=wstreamAbort"}

func init() {
	registerBuilder("as", func(name string) (string, error) { return BuildAS("examples/wasm/as/" + name) })
}

// ASModule builds the AssemblyScript guest module whose entry file is
// dir/index.ts (dir relative to the repository root, e.g.
// "examples/wasm/as/wordcount") and returns the path of the .wasm file.
func ASModule(tb testing.TB, dir string) string {
	tb.Helper()
	p, err := BuildAS(dir)
	if err != nil {
		tb.Fatalf("building %s: %v", dir, err)
	}
	return p
}

// BuildAS is ASModule for callers without a testing.TB. It compiles with
// the SDK's pinned asc under node and caches the module by the content of
// its sources, the SDK, the compiler version and the flags, so a module is
// compiled once until one of them changes.
func BuildAS(dir string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := "as:" + dir
	if p, ok := built[key]; ok {
		return p, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node not found: run scripts/setup.sh (it installs Node.js and the AssemblyScript compiler)")
	}
	root := Root()
	sdk := filepath.Join(root, filepath.FromSlash(ASSDKDir))
	asc := filepath.Join(sdk, "node_modules", "assemblyscript", "bin", "asc.js")
	ascPkg, err := os.ReadFile(filepath.Join(sdk, "node_modules", "assemblyscript", "package.json"))
	if err != nil {
		return "", fmt.Errorf("the AssemblyScript compiler is not installed in %s/node_modules: run scripts/setup.sh", ASSDKDir)
	}
	src := filepath.Join(root, filepath.FromSlash(dir))
	entry := filepath.Join(src, "index.ts")
	if _, err := os.Stat(entry); err != nil {
		return "", fmt.Errorf("no index.ts in %s", dir)
	}

	// The cache key covers every input: the module's and the SDK's sources,
	// the compiler's package.json (its version), the flags.
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%s\n", ASFlags, node)
	h.Write(ascPkg)
	inputs, err := filepath.Glob(filepath.Join(src, "*.ts"))
	if err != nil {
		return "", err
	}
	sdkSrcs, err := filepath.Glob(filepath.Join(sdk, "assembly", "*.ts"))
	if err != nil {
		return "", err
	}
	inputs = append(inputs, sdkSrcs...)
	sort.Strings(inputs)
	for _, f := range inputs {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	out := filepath.Join(cacheDir, "wstream-testmod", filepath.FromSlash(dir), hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
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
	// asc runs from the repository root with a relative entry path: the
	// SDK's internal module names, and so the module's, do not depend on
	// where the checkout is.
	args := append([]string{asc, filepath.ToSlash(filepath.Join(dir, "index.ts"))}, ASFlags...)
	args = append(args, "-o", tmp.Name())
	cmd := exec.Command(node, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("asc %s: %v\n%s", dir, err, stderr.String())
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}
