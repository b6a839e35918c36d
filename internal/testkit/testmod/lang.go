package testmod

import (
	"fmt"
	"sort"
	"sync"
)

// Languages are the guest languages whose examples every language-wide test
// (conformance, identical output, savepoint portability) runs, in the order
// tables list them. Each has a builder registered by its own file.
var Languages = []string{"go", "c", "rust", "as", "wat"}

var (
	buildersMu sync.Mutex
	builders   = map[string]func(name string) (string, error){}
)

// registerBuilder makes Build(lang, name) call build(name). A language's
// file registers its builder in an init function.
func registerBuilder(lang string, build func(name string) (string, error)) {
	buildersMu.Lock()
	defer buildersMu.Unlock()
	builders[lang] = build
}

func init() {
	registerBuilder("go", func(name string) (string, error) { return BuildGo("examples/wasm/go/" + name) })
	registerBuilder("c", func(name string) (string, error) { return BuildC("examples/wasm/c/" + name) })
}

// Build builds the example NAME (wordcount, window, conformance) of guest
// language lang and returns the path of its .wasm file.
func Build(lang, name string) (string, error) {
	buildersMu.Lock()
	build, ok := builders[lang]
	buildersMu.Unlock()
	if !ok {
		have := make([]string, 0, len(builders))
		for l := range builders {
			have = append(have, l)
		}
		sort.Strings(have)
		return "", fmt.Errorf("no builder for guest language %q (have %v)", lang, have)
	}
	return build(name)
}
