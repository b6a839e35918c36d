package job

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const wordcount = `{"name":"wordcount","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":100000,"keys":1000,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count","parallelism":4,"outputs":["main"]},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance","output":"main"}]}`

func mustParse(t testing.TB, s string) *Plan {
	t.Helper()
	p, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func TestParseWordcount(t *testing.T) {
	p := mustParse(t, wordcount)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Name != "wordcount" || p.MaxParallelism != 128 || p.Parallelism != 2 || len(p.Vertices) != 4 || len(p.Edges) != 3 {
		t.Fatalf("plan = %+v", p)
	}
	src := p.Vertex("source")
	if src == nil || src.Kind != KindSource || src.Connector != "gen" || src.Parallelism != 2 || !src.InheritsParallelism() {
		t.Errorf("source = %+v", src)
	}
	if got, want := string(src.Config), `{"count":100000,"keys":1000,"seed":1,"words":4}`; got != want {
		t.Errorf("source config = %s, want canonical %s", got, want)
	}
	if !slices.Equal(src.Outputs, []string{"main"}) {
		t.Errorf("source outputs = %q, want the default [main]", src.Outputs)
	}
	if c := p.Vertex("count"); c.Parallelism != 4 || c.InheritsParallelism() {
		t.Errorf("count parallelism = %d (inherited %v), want its own 4", c.Parallelism, c.InheritsParallelism())
	}
	if s := p.Vertex("sink"); s.Outputs != nil || s.Parallelism != 1 {
		t.Errorf("sink = %+v, want no outputs and parallelism 1", s)
	}
	if p.Vertex("nope") != nil {
		t.Error("Vertex(nope) is not nil")
	}
	if e := p.Edges[1]; e.Output != "main" || e.Partition != PartitionKey {
		t.Errorf("edge 1 = %+v, want output defaulted to main", e)
	}
	if in := p.Inputs("count"); len(in) != 1 || in[0].From != "split" {
		t.Errorf("Inputs(count) = %+v", in)
	}
	if out := p.Outputs("count"); len(out) != 1 || out[0].To != "sink" {
		t.Errorf("Outputs(count) = %+v", out)
	}
	if in := p.Inputs("source"); in != nil {
		t.Errorf("Inputs(source) = %+v, want none", in)
	}
}

func TestDefaults(t *testing.T) {
	p := mustParse(t, `{"name":"j","vertices":[{"id":"a","kind":"source","connector":"gen"},{"id":"b","kind":"sink","connector":"discard"}],"edges":[{"from":"a","to":"b"}]}`)
	if p.MaxParallelism != 128 || p.Parallelism != 1 {
		t.Errorf("maxParallelism %d parallelism %d, want 128 and 1", p.MaxParallelism, p.Parallelism)
	}
	if e := p.Edges[0]; e.Partition != PartitionForward || e.Output != "main" {
		t.Errorf("edge = %+v, want forward from main", e)
	}
	for _, v := range p.Vertices {
		if v.Parallelism != 1 || !v.InheritsParallelism() {
			t.Errorf("vertex %s parallelism %d inherited %v", v.ID, v.Parallelism, v.InheritsParallelism())
		}
	}
	// A plan built in Go gets the same defaults.
	q := &Plan{Name: "j", Vertices: []Vertex{{ID: "a", Kind: KindSource, Connector: "gen"}, {ID: "b", Kind: KindSink, Connector: "discard", Parallelism: 3}},
		Edges: []Edge{{From: "a", To: "b", Partition: PartitionRebalance}}}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	if q.MaxParallelism != 128 || q.Vertices[0].Parallelism != 1 || q.Vertices[1].Parallelism != 3 || q.Edges[0].Output != "main" {
		t.Errorf("Go-built plan after Validate = %+v", q)
	}
	before := string(q.JSON())
	q.Normalize()
	if string(q.JSON()) != before {
		t.Error("Normalize is not idempotent")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, src := range []string{wordcount, chainPlan, `{"name":"x","vertices":[{"id":"a","kind":"source","connector":"file","config":{"path":"a<b>&c.txt"}}]}`} {
		p := mustParse(t, src)
		out := p.JSON()
		q := mustParse(t, string(out))
		if string(q.JSON()) != string(out) {
			t.Errorf("JSON is not stable:\n%s\n%s", out, q.JSON())
		}
		if !reflect.DeepEqual(exported(p), exported(q)) {
			t.Errorf("parsed back plan differs:\n%+v\n%+v", p, q)
		}
	}
}

// exported drops what only records how a plan was written (JSON always
// writes the plan-level parallelism), keeping whether vertices inherit it.
func exported(p *Plan) *Plan {
	c := p.Clone()
	c.maxParallelismSet, c.parallelismSet = false, false
	for i := range c.Vertices {
		c.Vertices[i].parallelismSet = false
	}
	return c
}

func TestJSONCanonical(t *testing.T) {
	p := mustParse(t, wordcount)
	want := `{
  "name": "wordcount",
  "maxParallelism": 128,
  "parallelism": 2,
  "vertices": [
    {
      "id": "source",
      "kind": "source",
      "connector": "gen",
      "config": {"count":100000,"keys":1000,"seed":1,"words":4},
      "outputs": ["main"]
    },
    {
      "id": "split",
      "kind": "operator",
      "operator": "split",
      "outputs": ["main"]
    },
    {
      "id": "count",
      "kind": "operator",
      "operator": "count",
      "parallelism": 4,
      "outputs": ["main"]
    },
    {
      "id": "sink",
      "kind": "sink",
      "connector": "stdout",
      "parallelism": 1
    }
  ],
  "edges": [
    {
      "from": "source",
      "to": "split",
      "partition": "rebalance",
      "output": "main"
    },
    {
      "from": "split",
      "to": "count",
      "partition": "key",
      "output": "main"
    },
    {
      "from": "count",
      "to": "sink",
      "partition": "rebalance",
      "output": "main"
    }
  ]
}
`
	if got := string(p.JSON()); got != want {
		t.Errorf("JSON() =\n%s\nwant\n%s", got, want)
	}
	// Rescaling the stored plan moves the inherited vertices only.
	q := mustParse(t, string(p.JSON()))
	if err := q.Apply(Overrides{Parallelism: 8}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"source": 8, "split": 8, "count": 4, "sink": 1} {
		if got := q.Vertex(id).Parallelism; got != want {
			t.Errorf("after -p 8 %s has parallelism %d, want %d", id, got, want)
		}
	}
}

func TestJSONInvalidConfig(t *testing.T) {
	p := &Plan{Name: "x", Vertices: []Vertex{{ID: "op", Kind: KindOperator, Operator: "o", Config: json.RawMessage(`{bad`)}}}
	p.Normalize()
	out := p.JSON()
	if !json.Valid(out) || !strings.Contains(string(out), `"config": "{bad"`) {
		t.Errorf("JSON() with an invalid config = %s", out)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"name":"x","vertexes":[]}`, `plan: unknown field "vertexes" (known: checkpoint, edges, maxParallelism, name, onGuestError, parallelism, restart, vertices)`},
		{`{"name":"x","vertices":[{"id":"a","kind":"source","parallelsim":2}]}`, `plan: vertices[0]: unknown field "parallelsim" (known: config, connector, id, kind, operator, outputs, parallelism, states)`},
		{`{"edges":[{"from":"a","to":"b"},{"from":"a","too":"b"}]}`, `plan: edges[1]: unknown field "too" (known: from, output, partition, to)`},
		{`{"parallelism":"2"}`, `plan: parallelism: JSON string is not a valid integer`},
		{`{"maxParallelism":1.5}`, `plan: maxParallelism: JSON number 1.5 is not a valid integer`},
		{`{"vertices":[{"id":"a","parallelism":true}]}`, `plan: vertices[0].parallelism: JSON bool is not a valid integer`},
		{`{"vertices":[{"id":"a","outputs":"main"}]}`, `plan: vertices[0].outputs: JSON string is not a valid list of strings`},
		{`{"vertices":[{"id":7}]}`, `plan: vertices[0].id: JSON number is not a valid string`},
		{`{"vertices":{}}`, `plan: vertices: JSON object is not a valid list`},
		{`{"vertices":[1]}`, `plan: vertices[0]: must be a JSON object, not number`},
		{`[]`, `plan: must be a JSON object, not array`},
		{"{\n  \"name\": \"x\",\n  \"vertices\": [,]\n}", `plan: invalid JSON at line 3, column 16: invalid character ',' looking for beginning of value`},
		{`{"name":"x"} {}`, `plan: unexpected data after the JSON value`},
		{`{"name":"x"`, `plan: truncated JSON`},
		{``, `plan: truncated JSON`},
	} {
		_, err := Parse([]byte(tc.in))
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%s) error = %v, want a *job.Error", tc.in, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Parse(%s)\n got  %s\n want %s", tc.in, err, tc.want)
		}
	}
}

func TestPosition(t *testing.T) {
	data := []byte("ab\ncd\n\nef")
	for _, tc := range []struct {
		offset    int64
		line, col int
	}{{1, 1, 1}, {2, 1, 2}, {4, 2, 1}, {7, 3, 1}, {9, 4, 2}, {0, 1, 1}, {100, 4, 3}} {
		if line, col := position(data, tc.offset); line != tc.line || col != tc.col {
			t.Errorf("position(%d) = %d:%d, want %d:%d", tc.offset, line, col, tc.line, tc.col)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "wordcount.json")
	if err := os.WriteFile(good, []byte(wordcount), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil || p.Name != "wordcount" {
		t.Fatalf("Load = %v, %v", p, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"nam":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var pe *Error
	if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), bad+`: plan: unknown field "nam"`) {
		t.Errorf("Load(bad) = %v, want the file name then the plan error", err)
	}
	_, err = Load(filepath.Join(dir, "missing.json"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestClone(t *testing.T) {
	p := mustParse(t, wordcount)
	c := p.Clone()
	c.Vertices[0].Config[1] = 'X'
	c.Vertices[2].Outputs[0] = "other"
	c.Edges[0].Partition = PartitionKey
	if p.Vertices[0].Config[1] == 'X' || p.Vertices[2].Outputs[0] != "main" || p.Edges[0].Partition != PartitionRebalance {
		t.Error("Clone shares memory with the original")
	}
}
