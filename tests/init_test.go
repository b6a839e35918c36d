package tests

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// runEnv is runCLI with env added to the environment of wstream.
func runEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	return runWith(t, dir, env, 5*time.Minute, args...)
}

// TestInitBuildDeploy starts a project in every language with wstream init,
// builds it with wstream build, outside the repository and with nothing but
// what init wrote (and, for AssemblyScript, the compiler npm install would
// put in node_modules), and deploys the module: on a generated text file
// instead of the plan's source, with exact counts computed from the file,
// and with the plan the build stored in the module, whose total the plan
// fixes (count × words).
func TestInitBuildDeploy(t *testing.T) {
	wstreamBin(t)
	for i, lang := range []string{"go", "rust", "c", "assemblyscript", "wat"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			name := "wc-" + lang
			proj := filepath.Join(dir, name)
			r := runCLI(t, dir, "init", "--lang", lang, name)
			if r.code != 0 {
				t.Fatalf("init: exit %d\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "wstream deploy build/"+name+".wasm") {
				t.Errorf("init does not say what to do next:\n%s", r.stdout)
			}
			if lang == "assemblyscript" {
				// What npm install does in the project: the pinned compiler
				// in node_modules (the repository's copy, installed from
				// the same version pin by scripts/setup.sh).
				nm := filepath.Join(testmod.Root(), filepath.FromSlash(testmod.ASSDKDir), "node_modules")
				if err := os.Symlink(nm, filepath.Join(proj, "node_modules")); err != nil {
					t.Fatal(err)
				}
			}
			r = runCLI(t, proj, "build")
			if r.code != 0 {
				t.Fatalf("build: exit %d\n%s", r.code, r.stderr)
			}
			mod := filepath.Join("build", name+".wasm")
			if !strings.Contains(r.stdout, "built "+mod) || !strings.Contains(r.stdout, "with its plan") {
				t.Errorf("build printed %q", r.stdout)
			}
			if _, err := os.Stat(filepath.Join(proj, mod)); err != nil {
				t.Fatal(err)
			}

			// A file source and a file sink replace the plan's: the counts
			// must be the file's, each word once.
			in := genWordInput(t, t.TempDir(), 4000, 300, uint64(100+i))
			// One data directory for both runs: the second reuses the
			// compiled module from its cache.
			data := filepath.Join(dir, "data")
			out := filepath.Join(dir, "counts.txt")
			r = runCLI(t, proj, "deploy", "-q", "-p", "3", "--data", data,
				"--source", "file:path="+in.path, "--sink", "file:path="+out, mod)
			if r.code != 0 {
				t.Fatalf("deploy on a file: exit %d\n%s", r.code, r.stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got := parseCounts(t, string(b))
			if len(got) != len(in.want) {
				t.Errorf("%d words counted, the file has %d", len(got), len(in.want))
			}
			for w, n := range in.want {
				if got[w] != n {
					t.Errorf("%q: %d, want %d", w, got[w], n)
				}
			}

			// The module's own plan: 10000 lines of 4 words w0…w99.
			r = runCLI(t, proj, "deploy", "-q", "--data", data, mod)
			if r.code != 0 {
				t.Fatalf("deploy with the module's plan: exit %d\n%s", r.code, r.stderr)
			}
			var total int64
			word := regexp.MustCompile(`^w([0-9]|[1-9][0-9])$`)
			for w, n := range parseCounts(t, r.stdout) {
				if !word.MatchString(w) {
					t.Errorf("the plan's gen source made the word %q", w)
				}
				total += n
			}
			if total != 10000*4 {
				t.Errorf("the plan's job counted %d words, want 10000 lines × 4", total)
			}
		})
	}
}

// parseCounts reads word<TAB>count lines, failing on a malformed line and
// on a word that appears twice.
func parseCounts(t *testing.T, s string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, l := range sortedLines(s) {
		w, n, ok := strings.Cut(l, "\t")
		c, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			t.Fatalf("line %q is not word<TAB>count", l)
		}
		if _, dup := got[w]; dup {
			t.Errorf("%q counted on two lines", w)
		}
		got[w] = c
	}
	return got
}

// TestInitBuildErrors: what wstream init and wstream build refuse, with
// the exit code and a message that says what to do.
func TestInitBuildErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", "--lang", "rsut", "x"}, 2, `unknown language "rsut": want one of go, rust, c, assemblyscript, wat (did you mean "rust"?)`},
		{[]string{"init", "--lang", "cobol", "x"}, 2, `unknown language "cobol"`},
		{[]string{"init", "x"}, 2, "--lang is required"},
		{[]string{"init", "--lang", "go"}, 2, "want one argument"},
		{[]string{"init", "--lang", "go", "My Op"}, 2, `project name "My Op" must start with a lowercase letter`},
		{[]string{"build"}, 1, "not a wstream project: . has no wstream.json (create a project with wstream init"},
		{[]string{"build", "a", "b"}, 2, "at most one argument"},
	} {
		r := runCLI(t, dir, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("wstream %s: exit %d, %q; want exit %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused commands wrote %d entries", len(ents))
	}

	// A directory that is not empty is never written to.
	if r := runCLI(t, dir, "init", "--lang", "wat", "wc"); r.code != 0 {
		t.Fatalf("init: exit %d\n%s", r.code, r.stderr)
	}
	readme := filepath.Join(dir, "wc", "README.md")
	if err := os.WriteFile(readme, []byte("my notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "init", "--lang", "go", "wc")
	if r.code != 1 || !strings.Contains(r.stderr, "wc is not empty") {
		t.Errorf("init into a project: exit %d, %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(readme); string(b) != "my notes" {
		t.Errorf("init overwrote README.md: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "wc", "main.go")); err == nil {
		t.Errorf("init wrote main.go into a non-empty directory")
	}

	// A missing compiler: named, with how to install it, and no module.
	empty := t.TempDir()
	r = runEnv(t, dir, []string{"PATH=" + empty}, "build", "wc")
	if r.code != 1 || !strings.Contains(r.stderr, "wat2wasm not found on PATH: install wabt") {
		t.Errorf("build without wat2wasm: exit %d, %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "wc", "build", "wc.wasm")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed build left a module: %v", err)
	}
	if r := runCLI(t, dir, "init", "--lang", "c", "--dir", "cproj", "wcc"); r.code != 0 {
		t.Fatalf("init --dir: exit %d\n%s", r.code, r.stderr)
	}
	r = runEnv(t, dir, []string{"PATH=" + empty}, "build", "cproj")
	if r.code != 1 || !strings.Contains(r.stderr, "clang not found on PATH") || !strings.Contains(r.stderr, "apt-get install clang lld") {
		t.Errorf("build without clang: exit %d, %q", r.code, r.stderr)
	}
	// With the compiler the same project builds.
	if r := runCLI(t, dir, "build", "wc"); r.code != 0 {
		t.Errorf("build with wat2wasm: exit %d\n%s", r.code, r.stderr)
	}
}
