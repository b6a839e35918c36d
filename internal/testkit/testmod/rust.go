package testmod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/wstream/wstream/project"
)

// RustSDKDir is the Rust guest SDK's directory, relative to the repository
// root; its crate root is src/lib.rs.
const RustSDKDir = "guest-sdk/rust"

// Rustc is the compiler of Rust guest modules: Debian's rustc with its
// wasm32 standard library, installed by scripts/setup.sh. It is called by
// path because a rustup toolchain earlier on PATH may lack the wasm32 target.
const Rustc = "/usr/bin/rustc"

// RustFlags are the rustc flags of the SDK crate and of the repository's
// Rust guest modules: those of a user's project (project.RustFlags), with
// warnings as errors.
var RustFlags = append(slices.Clone(project.RustFlags), "-D", "warnings")

// RustModuleFlags are added when linking a module (project.RustModuleFlags).
var RustModuleFlags = project.RustModuleFlags

func init() {
	registerBuilder("rust", func(name string) (string, error) { return BuildRust("examples/wasm/rust/" + name) })
}

// RustModule builds the Rust guest module whose crate root is dir/main.rs
// (dir relative to the repository root, e.g. "examples/wasm/rust/wordcount"),
// linked with the Rust SDK, and returns the path of the .wasm file.
func RustModule(tb testing.TB, dir string) string {
	tb.Helper()
	p, err := BuildRust(dir)
	if err != nil {
		tb.Fatalf("building %s: %v", dir, err)
	}
	return p
}

// BuildRust is RustModule for callers without a testing.TB. It compiles the
// SDK crate to an rlib and the module to a cdylib with --extern, and caches
// both by the content of their sources, the flags and the compiler, so a
// source is compiled once until it changes.
func BuildRust(dir string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := "rust:" + dir
	if p, ok := built[key]; ok {
		return p, nil
	}
	st, err := os.Stat(Rustc)
	if err != nil {
		return "", fmt.Errorf("%s not found: run scripts/setup.sh (it installs rustc and libstd-rust-dev-wasm32)", Rustc)
	}
	if m, _ := filepath.Glob("/usr/lib/rustlib/wasm32-unknown-unknown/lib/libstd-*.rlib"); len(m) == 0 {
		return "", fmt.Errorf("the wasm32 standard library of %s is missing: run scripts/setup.sh (it installs libstd-rust-dev-wasm32)", Rustc)
	}
	root := Root()
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	cacheDir = filepath.Join(cacheDir, "wstream-testmod")
	// A change of compiler changes its size or time; both are in the keys,
	// and so is the root that runRustc strips from file names.
	compiler := fmt.Sprintf("%s %d %d %s", Rustc, st.Size(), st.ModTime().UnixNano(), root)

	sdkSum, err := hashTree(filepath.Join(root, filepath.FromSlash(RustSDKDir), "src"), compiler, RustFlags)
	if err != nil {
		return "", err
	}
	rlib, err := buildRustSDK(root, filepath.Join(cacheDir, filepath.FromSlash(RustSDKDir), sdkSum[:16]))
	if err != nil {
		return "", err
	}

	src := filepath.Join(root, filepath.FromSlash(dir))
	if _, err := os.Stat(filepath.Join(src, "main.rs")); err != nil {
		return "", fmt.Errorf("no main.rs in %s", dir)
	}
	modSum, err := hashTree(src, sdkSum, RustModuleFlags)
	if err != nil {
		return "", err
	}
	out, err := cachedBuild(dir, modSum, func(wasm string) error {
		args := append(append(append([]string{}, RustFlags...), RustModuleFlags...),
			"--extern", "wstream="+rlib, "-L", filepath.Dir(rlib), "-o", wasm, filepath.Join(src, "main.rs"))
		return runRustc(root, dir, args)
	})
	if err != nil {
		return "", err
	}
	built[key] = out
	return out, nil
}

// buildRustSDK compiles the SDK crate into dir/libwstream.rlib unless it is
// there, and returns its path.
func buildRustSDK(root, dir string) (string, error) {
	rlib := filepath.Join(dir, "libwstream.rlib")
	if _, err := os.Stat(rlib); err == nil {
		return rlib, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "libwstream.rlib")
	args := append(append([]string{}, RustFlags...), "--crate-type", "rlib", "--crate-name", "wstream",
		"-o", out, filepath.Join(root, filepath.FromSlash(RustSDKDir), "src", "lib.rs"))
	if err := runRustc(root, RustSDKDir, args); err != nil {
		return "", err
	}
	if err := os.Rename(out, rlib); err != nil {
		return "", err
	}
	return rlib, nil
}

func runRustc(root, what string, args []string) error {
	// Panic locations name files relative to the repository, not to the
	// machine that built the module.
	args = append([]string{"--remap-path-prefix", root + string(filepath.Separator) + "="}, args...)
	cmd := exec.Command(Rustc, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rustc %s: %v\n%s", what, err, stderr.String())
	}
	return nil
}

// hashTree returns the hex SHA-256 of prefix, flags and every .rs file
// under dir (names and contents, in name order).
func hashTree(dir, prefix string, flags []string) (string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(p) == ".rs" {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n", prefix, flags)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(dir, f)
		fmt.Fprintf(h, "%s\n", filepath.ToSlash(rel))
		n, err := io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\n%d\n", n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
