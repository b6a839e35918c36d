package project

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Language is a guest language of a project.
type Language string

// The guest languages a project can be written in.
const (
	Go             Language = "go"
	Rust           Language = "rust"
	C              Language = "c"
	AssemblyScript Language = "assemblyscript"
	WAT            Language = "wat"
)

// Languages lists every Language, in the order help texts list them.
var Languages = []Language{Go, Rust, C, AssemblyScript, WAT}

// aliases are other names people give the languages.
var aliases = map[string]Language{
	"golang": Go, "rs": Rust, "as": AssemblyScript, "wasm-text": WAT, "wast": WAT,
}

// title is a language's name in prose.
func (l Language) title() string {
	switch l {
	case Go:
		return "Go"
	case Rust:
		return "Rust"
	case C:
		return "C"
	case AssemblyScript:
		return "AssemblyScript"
	case WAT:
		return "WebAssembly text (WAT)"
	}
	return string(l)
}

// LanguageNames is the languages as one string for messages:
// "go, rust, c, assemblyscript, wat".
func LanguageNames() string {
	s := make([]string, len(Languages))
	for i, l := range Languages {
		s[i] = string(l)
	}
	return strings.Join(s, ", ")
}

// ParseLanguage returns the language named s (case-insensitively, with the
// aliases golang, rs, as). An unknown name is an error listing the
// languages, with a suggestion when s is close to one of them.
func ParseLanguage(s string) (Language, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for _, l := range Languages {
		if n == string(l) {
			return l, nil
		}
	}
	if l, ok := aliases[n]; ok {
		return l, nil
	}
	msg := fmt.Sprintf("unknown language %q: want one of %s", s, LanguageNames())
	if sug := suggest(n); sug != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", sug)
	}
	return "", errors.New(msg)
}

// suggest returns the language (or alias) nearest to s within an edit
// distance of two, or "" when none is that near.
func suggest(s string) string {
	cands := make([]string, 0, len(Languages)+len(aliases))
	for _, l := range Languages {
		cands = append(cands, string(l))
	}
	for a := range aliases {
		cands = append(cands, a)
	}
	sort.Strings(cands)
	best, bestD := "", 3
	for _, c := range cands {
		d := editDistance(s, c)
		// A one-letter name is near to every other short one: ask for
		// more than half of it to be right.
		if d < bestD && d*2 < len(c) {
			best, bestD = c, d
		}
	}
	if l, ok := aliases[best]; ok {
		return string(l)
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, counting an
// adjacent transposition ("rsut") as one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// MaxNameLen bounds a project's name.
const MaxNameLen = 64

// CheckName checks a project name. It names the project's directory, its
// module file, the job and the Go module, Rust crate and npm package, so it
// is what all of them accept: a lowercase letter, then lowercase letters,
// digits, '-' and '_', at most MaxNameLen bytes.
func CheckName(name string) error {
	if name == "" {
		return errors.New("the project name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("project name %q is %d bytes long: at most %d", name, len(name), MaxNameLen)
	}
	if c := name[0]; c < 'a' || c > 'z' {
		return fmt.Errorf("project name %q must start with a lowercase letter (a-z)", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("project name %q: %q at byte %d is not allowed: use lowercase letters, digits, '-' and '_'", name, c, i)
		}
	}
	return nil
}

// FileName is the project file's name.
const FileName = "wstream.json"

// Config is a project file: what `wstream build` needs to know.
type Config struct {
	// Name is the project's name (CheckName).
	Name string `json:"name"`
	// Language is the guest language of the operators.
	Language Language `json:"language"`
	// Plan is the plan file, relative to the project; "" for a module
	// without a plan (deploy then needs --plan).
	Plan string `json:"plan"`
	// Output is the module build writes, relative to the project.
	Output string `json:"output"`
}

// ErrNoProject is returned by Load for a directory without a project file.
var ErrNoProject = errors.New("not a wstream project")

// Load reads and checks the project file of dir.
func Load(dir string) (*Config, error) {
	path := filepath.Join(dir, FileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s (create a project with wstream init --lang LANG NAME)", ErrNoProject, dir, FileName)
	}
	if err != nil {
		return nil, err
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %v (want the fields name, language, plan, output)", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the JSON object", path)
	}
	if err := CheckName(c.Name); err != nil {
		return nil, fmt.Errorf("%s: name: %v", path, err)
	}
	lang, err := ParseLanguage(string(c.Language))
	if err != nil {
		return nil, fmt.Errorf("%s: language: %v", path, err)
	}
	c.Language = lang
	if c.Output == "" {
		c.Output = filepath.ToSlash(filepath.Join("build", c.Name+".wasm"))
	}
	for field, p := range map[string]string{"plan": c.Plan, "output": c.Output} {
		if p != "" && !filepath.IsLocal(filepath.FromSlash(p)) {
			return nil, fmt.Errorf("%s: %s %q must be a path inside the project", path, field, p)
		}
	}
	return &c, nil
}
