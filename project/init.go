package project

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/wstream/wstream"
)

// templates holds each language's files (templates/LANG) and the files of
// every project (templates/common). A file whose name ends in .tmpl is a
// text/template with the delimiters <% and %> (no operator source uses
// them) and loses the suffix; "gitignore" becomes ".gitignore".
//
//go:embed templates
var templates embed.FS

// GoVersion is the go directive of a Go project's go.mod: the first Go
// with //go:wasmexport, which the Go SDK needs.
const GoVersion = "1.24"

// InitOptions says what Init writes where.
type InitOptions struct {
	// Dir is the project's directory: created when missing, refused when
	// it holds anything.
	Dir string
	// Name is the project's name (CheckName).
	Name string
	// Lang is the operators' language.
	Lang Language
	// Version is the wstream version recorded in the project's README.
	Version string
}

// Init writes a new project into opts.Dir and returns the paths it wrote,
// relative to it, sorted. It refuses a directory that is not empty and
// removes what it wrote (and the directory, when it made it) when a write
// fails.
func Init(opts InitOptions) (files []string, err error) {
	if err := CheckName(opts.Name); err != nil {
		return nil, err
	}
	if _, err := ParseLanguage(string(opts.Lang)); err != nil {
		return nil, err
	}
	contents, err := render(opts)
	if err != nil {
		return nil, err
	}
	made, err := emptyDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			return
		}
		if made {
			os.RemoveAll(opts.Dir)
			return
		}
		for _, f := range files {
			os.Remove(filepath.Join(opts.Dir, filepath.FromSlash(f)))
		}
	}()
	for _, name := range sortedKeys(contents) {
		p := filepath.Join(opts.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return files, err
		}
		if err := os.WriteFile(p, contents[name], 0o644); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

// emptyDir makes sure dir is an empty directory, creating it when it does
// not exist (made reports that it did).
func emptyDir(dir string) (made bool, err error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, err
		}
		return true, nil
	case err != nil:
		return false, err
	case !st.IsDir():
		return false, fmt.Errorf("%s exists and is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	if len(ents) > 0 {
		names := make([]string, 0, 3)
		for _, e := range ents[:min(len(ents), 3)] {
			names = append(names, e.Name())
		}
		more := ""
		if len(ents) > 3 {
			more = fmt.Sprintf(" and %d more", len(ents)-3)
		}
		return false, fmt.Errorf("%s is not empty (it holds %s%s): wstream init writes a project into a new or empty directory only", dir, strings.Join(names, ", "), more)
	}
	return false, nil
}

// templateData is what the templates see.
type templateData struct {
	Name, Lang, LangTitle, Version string
	GoVersion, ASCVersion          string
	CFlags, ASFlags                string
	RustFlags, RustModuleFlags     string
	Source, SDKDir                 string
}

// render returns every file of the project, by slash-separated path.
func render(opts InitOptions) (map[string][]byte, error) {
	asc, err := ascVersion()
	if err != nil {
		return nil, err
	}
	lang := opts.Lang
	d := templateData{
		Name: opts.Name, Lang: string(lang), LangTitle: lang.title(), Version: opts.Version,
		GoVersion: GoVersion, ASCVersion: asc,
		CFlags: strings.Join(CFlags, " "), ASFlags: strings.Join(ASFlags, " "),
		RustFlags: strings.Join(RustFlags, " "), RustModuleFlags: strings.Join(RustModuleFlags, " "),
		Source: "`" + sourceFile[lang] + "`", SDKDir: sdkDir[lang],
	}
	out := map[string][]byte{}
	for _, root := range []string{"templates/common", "templates/" + string(lang)} {
		err := fs.WalkDir(templates, root, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			name := strings.TrimPrefix(p, root+"/")
			if name == "gitignore" {
				name = ".gitignore"
			}
			if strings.HasSuffix(name, ".tmpl") {
				name = strings.TrimSuffix(name, ".tmpl")
				t, err := template.New(p).Delims("<%", "%>").Option("missingkey=error").Parse(string(b))
				if err != nil {
					return err
				}
				var buf bytes.Buffer
				if err := t.Execute(&buf, d); err != nil {
					return fmt.Errorf("template %s: %w", p, err)
				}
				b = buf.Bytes()
			}
			out[name] = b
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sdk, err := sdkFiles(lang)
	if err != nil {
		return nil, err
	}
	for name, b := range sdk {
		out[name] = b
	}
	return out, nil
}

// sourceFile is where a language's operators are, for the README.
var sourceFile = map[Language]string{
	Go: "main.go", C: "main.c", Rust: "src/lib.rs", AssemblyScript: "assembly/index.ts", WAT: "main.wat",
}

// sdkDir is a language's SDK directory under guest-sdk/.
var sdkDir = map[Language]string{
	Go: "go", C: "c", Rust: "rust", AssemblyScript: "assemblyscript", WAT: "wat",
}

// sdkFiles returns the SDK files a project of lang carries, by their
// paths in the project, copied from the sources embedded in package
// wstream (test files left out).
func sdkFiles(lang Language) (map[string][]byte, error) {
	// copies maps a directory of the embedded sources to the project's.
	var copies [][2]string
	out := map[string][]byte{}
	switch lang {
	case Go:
		// A module of the same path as wstream's, so that the SDK's own
		// imports (github.com/wstream/wstream/abi) resolve in it, and the
		// operators import the SDK by the path its documentation uses.
		copies = [][2]string{{"abi", "sdk/go/abi"}, {"guest-sdk/go/wstream", "sdk/go/guest-sdk/go/wstream"}}
		out["sdk/go/go.mod"] = []byte("module github.com/wstream/wstream\n\ngo " + GoVersion + "\n")
	case C:
		copies = [][2]string{{"guest-sdk/c", "sdk/c"}}
	case Rust:
		copies = [][2]string{{"guest-sdk/rust/src", "sdk/rust"}}
	case AssemblyScript:
		copies = [][2]string{{"guest-sdk/assemblyscript/assembly", "sdk/assemblyscript"}}
	case WAT:
		return out, nil
	}
	for _, c := range copies {
		ents, err := fs.ReadDir(wstream.SDK, c[0])
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || strings.HasSuffix(n, "_test.go") {
				continue
			}
			b, err := wstream.SDK.ReadFile(path.Join(c[0], n))
			if err != nil {
				return nil, err
			}
			out[path.Join(c[1], n)] = b
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no SDK sources for %s embedded in this binary", lang)
	}
	return out, nil
}

// ascVersion is the AssemblyScript compiler version the SDK pins in its
// package.json.
func ascVersion() (string, error) {
	b, err := wstream.SDK.ReadFile("guest-sdk/assemblyscript/package.json")
	if err != nil {
		return "", err
	}
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", fmt.Errorf("guest-sdk/assemblyscript/package.json: %w", err)
	}
	v := pkg.DevDependencies["assemblyscript"]
	if v == "" {
		return "", errors.New("guest-sdk/assemblyscript/package.json pins no assemblyscript version")
	}
	return v, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
