package job

import (
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse, Validate, JSON or Build panic,
// that JSON's output stays in proportion to the input, and that a valid
// plan survives a JSON round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		wordcount, base, chainPlan,
		`{}`, `[]`, `null`, `{"name":"x","vertices":null}`,
		`{"name":"x","parallelism":0,"maxParallelism":-1}`,
		`{"name":"x","vertices":[{"id":"a","kind":"source","connector":"gen","config":{"count":-1}}]}`,
		`{"name":"x","vertices":[{"id":"a","kind":"operator","operator":"o"}],"edges":[{"from":"a","to":"a"}]}`,
		`{"name":"c","vertices":[{"id":"s","kind":"source","connector":"gen"},{"id":"a","kind":"operator","operator":"o"},{"id":"b","kind":"operator","operator":"o"}],"edges":[{"from":"s","to":"a"},{"from":"a","to":"b","partition":"key"},{"from":"b","to":"a","partition":"key"}]}`,
		`{"name":"x","vertices":[{"id":"a","kind":"source","connector":"file","config":{"path":"in.txt","format":"tsv"}},{"id":"b","kind":"sink","connector":"file","config":{"path":"o"}}],"edges":[{"from":"a","to":"b"}]}`,
		`{"name":"x","vertices":[{"id":"a","unknown":1}]}`,
		`{"name":"x",`,
		// Deep nesting: refused by the depth limit before decoding, in a
		// config, an edge, the settings, unterminated; at the limit, and
		// brackets that are only data in strings.
		configPlan(strings.Repeat("[", 100) + strings.Repeat("]", 100)),
		configPlan(strings.Repeat(`{"a":`, 61) + "1" + strings.Repeat("}", 61)),
		configPlan(strings.Repeat(`{"a":[`, 40) + "1" + strings.Repeat("]}", 40)),
		configPlan(strings.Repeat("[", 10_000)),
		configPlan(`{"s":"` + strings.Repeat("[", 100) + `\"[[[["}`),
		`{"name":"x","vertices":[{"config":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `,"id":"late"}]}`,
		`{"name":"x","edges":[{"from":"a","x":` + strings.Repeat("[", 70) + `}]}`,
		`{"name":"x","checkpoint":` + strings.Repeat(`{"a":`, 70) + `}`,
		strings.Repeat("[", 100_000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		out := p.JSON()
		// The defaults JSON writes out cost a bounded number of bytes per
		// byte of input; nesting must not multiply them.
		if len(out) > 64*len(data)+4096 {
			t.Fatalf("JSON of a %d-byte plan is %d bytes", len(data), len(out))
		}
		if p.Validate() != nil {
			return
		}
		g, err := Build(p)
		if err != nil {
			t.Fatalf("Build of a valid plan: %v", err)
		}
		_ = g.String()
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("JSON of a valid plan does not parse: %v\n%s", err, out)
		}
		if again := q.JSON(); string(again) != string(out) {
			t.Fatalf("JSON round trip changed the plan:\n%s\n%s", out, again)
		}
	})
}
