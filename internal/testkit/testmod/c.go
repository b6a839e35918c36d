package testmod

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/wstream/wstream/project"
)

// CSDKDir is the C guest SDK's directory, relative to the repository root.
const CSDKDir = "guest-sdk/c"

// CFlags are the clang flags of the repository's C guest modules: those of
// a user's project (project.CFlags), with warnings as errors.
var CFlags = append(slices.Clone(project.CFlags), "-Werror")

// CModule builds the C guest module whose sources are the .c files of dir
// (relative to the repository root, e.g. "examples/wasm/c/wordcount"),
// linked with the C SDK, and returns the path of the .wasm file.
func CModule(tb testing.TB, dir string) string {
	tb.Helper()
	p, err := BuildC(dir)
	if err != nil {
		tb.Fatalf("building %s: %v", dir, err)
	}
	return p
}

// BuildC is CModule for callers without a testing.TB (benchmarks, tools).
// It compiles with clang (installed by scripts/setup.sh) and caches the
// module by the content of its sources, the SDK and the flags, so a source
// is compiled once until it changes.
func BuildC(dir string) (string, error) { return BuildCFlags(dir) }

// BuildCFlags is BuildC with extra clang flags, for variants of a module:
// BuildCFlags(dir, "-DWSTREAM_UNBATCHED_STATE") builds it without the
// SDK's state cache, as a module of ABI v1 without the batched imports.
func BuildCFlags(dir string, extra ...string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	flags := append(append([]string{}, CFlags...), extra...)
	key := fmt.Sprintf("c:%s%q", dir, extra)
	if p, ok := built[key]; ok {
		return p, nil
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		return "", fmt.Errorf("clang not found: run scripts/setup.sh (it installs clang and lld)")
	}
	if _, err := exec.LookPath("wasm-ld"); err != nil {
		return "", fmt.Errorf("wasm-ld not found: run scripts/setup.sh (it installs clang and lld)")
	}
	root := Root()
	srcs, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.c"))
	if err != nil {
		return "", err
	}
	if len(srcs) == 0 {
		return "", fmt.Errorf("no .c files in %s", dir)
	}
	sdk := filepath.Join(root, filepath.FromSlash(CSDKDir))
	srcs = append(srcs, filepath.Join(sdk, "wstream.c"))
	sort.Strings(srcs)

	// The cache key covers every input: the sources, the headers they may
	// include, the flags and the compiler.
	inputs, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.h"))
	if err != nil {
		return "", err
	}
	inputs = append(inputs, filepath.Join(sdk, "wstream.h"))
	inputs = append(inputs, srcs...)
	sum, err := contentKey(fmt.Sprintf("%q\n%s", flags, clang), inputs)
	if err != nil {
		return "", err
	}
	out, err := cachedBuild(dir, sum, func(wasm string) error {
		args := append(append([]string{}, flags...), "-I", sdk, "-o", wasm)
		args = append(args, srcs...)
		cmd := exec.Command(clang, args...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("clang %s: %v\n%s", dir, err, stderr.String())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}
