package testmod

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// contentKey returns the hex SHA-256 of salt (flags, compiler) and of every
// file in files, by its path relative to the repository root and its
// content, in path order: the cache key of a module built from them.
func contentKey(salt string, files []string) (string, error) {
	root := Root()
	files = append([]string(nil), files...)
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", salt)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			rel = f
		}
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

// cachedBuild returns the module cached for key under the user cache
// directory (wstream-testmod/REL/KEY.wasm), producing it first with build
// when it is missing. build writes the module to the path it is given, in
// a fresh temporary directory next to the cache entry; the module is renamed
// into place only when build succeeded, so that a concurrent test binary
// never reads a half-written module. The caller holds mu.
func cachedBuild(rel, key string, build func(out string) error) (string, error) {
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	out := filepath.Join(cacheDir, "wstream-testmod", filepath.FromSlash(rel), key[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	wasm := filepath.Join(tmp, "module.wasm")
	if err := build(wasm); err != nil {
		return "", err
	}
	if err := os.Rename(wasm, out); err != nil {
		return "", err
	}
	return out, nil
}
