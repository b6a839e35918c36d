package testmod

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/wstream/wstream/project"
)

// ASSDKDir is the AssemblyScript guest SDK's directory, relative to the
// repository root. Its node_modules holds the compiler (scripts/setup.sh
// installs it from the package-lock.json there).
const ASSDKDir = "guest-sdk/assemblyscript"

// ASFlags are the asc flags of an AssemblyScript guest module, as for a
// user's project.
var ASFlags = project.ASFlags

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
	inputs, err := filepath.Glob(filepath.Join(src, "*.ts"))
	if err != nil {
		return "", err
	}
	sdkSrcs, err := filepath.Glob(filepath.Join(sdk, "assembly", "*.ts"))
	if err != nil {
		return "", err
	}
	inputs = append(inputs, sdkSrcs...)
	sum, err := contentKey(fmt.Sprintf("%q\n%s\n%s", ASFlags, node, ascPkg), inputs)
	if err != nil {
		return "", err
	}
	out, err := cachedBuild(dir, sum, func(wasm string) error {
		// asc runs from the repository root with a relative entry path: the
		// SDK's internal module names, and so the module's, do not depend
		// on where the checkout is.
		args := append([]string{asc, filepath.ToSlash(filepath.Join(dir, "index.ts"))}, ASFlags...)
		args = append(args, "-o", wasm)
		cmd := exec.Command(node, args...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stdout = &stderr
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("asc %s: %v\n%s", dir, err, stderr.String())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}
