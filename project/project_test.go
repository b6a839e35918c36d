package project

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLanguage(t *testing.T) {
	for in, want := range map[string]Language{
		"go": Go, "Go": Go, "golang": Go, " rust ": Rust, "rs": Rust, "c": C, "C": C,
		"assemblyscript": AssemblyScript, "as": AssemblyScript, "AssemblyScript": AssemblyScript, "wat": WAT,
	} {
		got, err := ParseLanguage(in)
		if err != nil || got != want {
			t.Errorf("ParseLanguage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, hint := range map[string]string{
		"rsut":           `did you mean "rust"?`,
		"ruts":           `did you mean "rust"?`,
		"assemblyscipt":  `did you mean "assemblyscript"?`,
		"golnag":         `did you mean "go"?`,
		"wast2":          `did you mean "wat"?`,
		"python":         "",
		"x":              "",
		"":               "",
		"typescript-ish": "",
	} {
		_, err := ParseLanguage(in)
		if err == nil {
			t.Errorf("ParseLanguage(%q) succeeded", in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "go, rust, c, assemblyscript, wat") {
			t.Errorf("ParseLanguage(%q): %q does not list the languages", in, msg)
		}
		if hint != "" && !strings.Contains(msg, hint) {
			t.Errorf("ParseLanguage(%q): %q, want the hint %s", in, msg, hint)
		}
		if hint == "" && strings.Contains(msg, "did you mean") {
			t.Errorf("ParseLanguage(%q): %q suggests a language for a name far from all", in, msg)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"wordcount", "a", "my-op_2", strings.Repeat("a", MaxNameLen)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"":                                "empty",
		"Word":                            "lowercase letter",
		"1st":                             "lowercase letter",
		"-x":                              "lowercase letter",
		"a b":                             `' ' at byte 1`,
		"a/b":                             `'/' at byte 1`,
		"a.b":                             `'.' at byte 1`,
		"wörd":                            "at byte 1",
		strings.Repeat("a", MaxNameLen+1): "at most 64",
	} {
		err := CheckName(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckName(%q) = %v, want an error with %q", bad, err, want)
		}
	}
}

// TestInitFiles checks what Init writes for every language: the project
// file names the language, the plan names the project, every SDK source is
// byte for byte the repository's (the binary embeds them from guest-sdk
// and abi, so this catches a pattern that misses a file), and no test file
// of the SDK goes along.
func TestInitFiles(t *testing.T) {
	root := filepath.Join("..")
	for _, lang := range Languages {
		t.Run(string(lang), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wc")
			files, err := Init(InitOptions{Dir: dir, Name: "wc", Lang: lang, Version: "1.2.3"})
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, f := range files {
				have[f] = true
			}
			for _, f := range []string{"wstream.json", "plan.json", "README.md", ".gitignore", "input.txt", sourceFile[lang]} {
				if !have[f] {
					t.Errorf("no %s among %v", f, files)
				}
			}
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != "wc" || c.Language != lang || c.Plan != "plan.json" || c.Output != "build/wc.wasm" {
				t.Errorf("project file: %+v", c)
			}
			if _, err := loadPlan(dir, c.Plan); err != nil {
				t.Errorf("the plan written is not valid: %v", err)
			}
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"wstream build", "wstream deploy build/wc.wasm", "--dry-run", "wstream 1.2.3", "`" + sourceFile[lang] + "`"} {
				if !bytes.Contains(readme, []byte(want)) {
					t.Errorf("README.md lacks %q", want)
				}
			}
			var sdk int
			for _, f := range files {
				if strings.Contains(string(mustRead(t, filepath.Join(dir, f))), "<%") {
					t.Errorf("%s holds an unexpanded template action", f)
				}
				if !strings.HasPrefix(f, "sdk/") || f == "sdk/go/go.mod" {
					continue
				}
				sdk++
				if strings.HasSuffix(f, "_test.go") {
					t.Errorf("%s: an SDK test file went into the project", f)
				}
				src := repoPath(lang, f)
				if !bytes.Equal(mustRead(t, filepath.Join(dir, f)), mustRead(t, filepath.Join(root, src))) {
					t.Errorf("%s differs from %s", f, src)
				}
			}
			// Every non-test source of the SDK goes into the project.
			want := 0
			for _, d := range sdkSourceDirs(lang) {
				ents, err := os.ReadDir(filepath.Join(root, d.dir))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if strings.HasSuffix(e.Name(), d.ext) && !strings.HasSuffix(e.Name(), "_test.go") {
						want++
					}
				}
			}
			if sdk != want {
				t.Errorf("%d SDK files in the project, the repository has %d", sdk, want)
			}
		})
	}
}

type srcDir struct{ dir, ext string }

func sdkSourceDirs(lang Language) []srcDir {
	switch lang {
	case Go:
		return []srcDir{{"abi", ".go"}, {"guest-sdk/go/wstream", ".go"}}
	case C:
		return []srcDir{{"guest-sdk/c", ".h"}, {"guest-sdk/c", ".c"}}
	case Rust:
		return []srcDir{{"guest-sdk/rust/src", ".rs"}}
	case AssemblyScript:
		return []srcDir{{"guest-sdk/assemblyscript/assembly", ".ts"}}
	}
	return nil
}

// repoPath maps a project's SDK file back to the repository's.
func repoPath(lang Language, f string) string {
	switch lang {
	case Go:
		return strings.TrimPrefix(f, "sdk/go/")
	case C:
		return "guest-sdk/c/" + strings.TrimPrefix(f, "sdk/c/")
	case Rust:
		return "guest-sdk/rust/src/" + strings.TrimPrefix(f, "sdk/rust/")
	case AssemblyScript:
		return "guest-sdk/assemblyscript/assembly/" + strings.TrimPrefix(f, "sdk/assemblyscript/")
	}
	return f
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInitRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Init(InitOptions{Dir: dir, Name: "wc", Lang: Go})
	if err == nil || !strings.Contains(err.Error(), "is not empty (it holds notes.txt)") {
		t.Fatalf("Init into a non-empty directory: %v", err)
	}
	if b := mustRead(t, keep); string(b) != "mine" {
		t.Fatalf("the file there was changed: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("Init wrote into the directory: %d entries", len(ents))
	}
	// A file in the way.
	_, err = Init(InitOptions{Dir: keep, Name: "wc", Lang: Go})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Init onto a file: %v", err)
	}
	// An empty directory is fine.
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(InitOptions{Dir: empty, Name: "wc", Lang: C}); err != nil {
		t.Fatalf("Init into an empty directory: %v", err)
	}
	// Bad names and languages are refused before anything is written.
	for _, o := range []InitOptions{{Name: "Bad", Lang: Go}, {Name: "ok", Lang: "cobol"}} {
		o.Dir = filepath.Join(dir, "new")
		if _, err := Init(o); err == nil {
			t.Errorf("Init(%+v) succeeded", o)
		}
		if _, err := os.Stat(o.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Init(%+v) made its directory: %v", o, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrNoProject) || !strings.Contains(err.Error(), "wstream init") {
		t.Fatalf("Load of a directory without a project: %v", err)
	}
	for content, want := range map[string]string{
		`{"name":"wc","language":"go","extra":1}`:          `unknown field "extra"`,
		`{"name":"wc","language":"rsut"}`:                  `did you mean "rust"?`,
		`{"name":"W C","language":"go"}`:                   "name:",
		`{"name":"wc","language":"go","plan":"../p.json"}`: "inside the project",
		`{"name":"wc","language":"go","output":"/tmp/x"}`:  "inside the project",
		`{"name":"wc","language":"go"} {}`:                 "data after",
		`{"name":"wc",`:                                    "wstream.json",
	} {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load of %s: %v, want an error with %q", content, err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"name":"wc","language":"as"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil || c.Language != AssemblyScript || c.Output != "build/wc.wasm" || c.Plan != "" {
		t.Fatalf("Load with defaults: %+v, %v", c, err)
	}
}

// TestBuildErrors covers what Build refuses before and instead of a
// compile: no project, a plan that is not valid (named by file and path),
// and compilers missing from PATH, each named with how to install it.
func TestBuildErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Build(ctx, t.TempDir(), BuildOptions{}); !errors.Is(err, ErrNoProject) {
		t.Fatalf("Build without a project: %v", err)
	}
	projects := map[Language]string{}
	for _, lang := range Languages {
		dir := filepath.Join(t.TempDir(), "wc")
		if _, err := Init(InitOptions{Dir: dir, Name: "wc", Lang: lang}); err != nil {
			t.Fatal(err)
		}
		projects[lang] = dir
	}

	bad := filepath.Join(projects[WAT], "plan.json")
	plan := mustRead(t, bad)
	if err := os.WriteFile(bad, bytes.Replace(plan, []byte(`"partition":"key"`), []byte(`"partition":"keyed"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(ctx, projects[WAT], BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "plan.json") || !strings.Contains(err.Error(), "edges[1]") {
		t.Fatalf("Build with a bad plan: %v", err)
	}
	if err := os.WriteFile(bad, plan, 0o644); err != nil {
		t.Fatal(err)
	}

	t.Setenv("PATH", t.TempDir())
	t.Setenv("RUSTC", "")
	for lang, want := range map[Language][]string{
		Go:             {"go not found on PATH", "https://go.dev/dl/"},
		C:              {"clang not found on PATH", "apt-get install clang lld"},
		Rust:           {"rustc not found on PATH", "rustup target add wasm32-unknown-unknown"},
		AssemblyScript: {"node not found on PATH", "Node.js"},
		WAT:            {"wat2wasm not found on PATH", "apt-get install wabt"},
	} {
		_, err := Build(ctx, projects[lang], BuildOptions{})
		var mt *MissingToolError
		if !errors.As(err, &mt) {
			t.Errorf("%s without its compiler: %v, want a MissingToolError", lang, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s without its compiler: %q lacks %q", lang, err, w)
			}
		}
		if _, err := os.Stat(filepath.Join(projects[lang], "build", "wc.wasm")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a failed build left a module: %v", lang, err)
		}
	}
}

// TestAppendCustomSection appends a plan to the smallest module and reads
// it back by walking the sections as a WebAssembly reader does.
func TestAppendCustomSection(t *testing.T) {
	header := []byte("\x00asm\x01\x00\x00\x00")
	for _, n := range []int{0, 1, 100, 200, 20000} {
		payload := bytes.Repeat([]byte("p"), n)
		mod := appendCustomSection(append([]byte(nil), header...), "wstream.plan", payload)
		b := mod[8:]
		if b[0] != 0 {
			t.Fatalf("section id %d", b[0])
		}
		size, k := binary.Uvarint(b[1:])
		body := b[1+k:]
		if uint64(len(body)) != size {
			t.Fatalf("payload %d: section size %d, %d bytes follow", n, size, len(body))
		}
		nl, k := binary.Uvarint(body)
		name := string(body[k : k+int(nl)])
		if name != "wstream.plan" || !bytes.Equal(body[k+int(nl):], payload) {
			t.Fatalf("payload %d: section %q holds %d bytes", n, name, len(body[k+int(nl):]))
		}
	}
}
