package job

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestParseConnectorSpec(t *testing.T) {
	field := func(k, v string) ConfigField { return ConfigField{Key: k, Value: json.RawMessage(v)} }
	for _, tc := range []struct {
		spec string
		want ConnectorSpec
		err  string
	}{
		{spec: "stdout", want: ConnectorSpec{Connector: "stdout"}},
		{spec: "gen:", want: ConnectorSpec{Connector: "gen"}},
		{spec: "gen:count=1000,keys=10,seed=7", want: ConnectorSpec{Connector: "gen",
			Fields: []ConfigField{field("count", "1000"), field("keys", "10"), field("seed", "7")}}},
		{spec: "sink=file:path=out.txt", want: ConnectorSpec{ID: "sink", Connector: "file", Fields: []ConfigField{field("path", `"out.txt"`)}}},
		{spec: "file:path=C:/data/in.txt,format=tsv", want: ConnectorSpec{Connector: "file",
			Fields: []ConfigField{field("path", `"C:/data/in.txt"`), field("format", `"tsv"`)}}},
		{spec: "gen:rate=0.5,start=-3,flag=true,off=false,name=,id=007,hex=0x10,e=1e3,q=say \"hi\"", want: ConnectorSpec{Connector: "gen",
			Fields: []ConfigField{field("rate", "0.5"), field("start", "-3"), field("flag", "true"), field("off", "false"), field("name", `""`),
				field("id", `"007"`), field("hex", `"0x10"`), field("e", "1e3"), field("q", `"say \"hi\""`)}}},
		{spec: "", err: "missing connector name"},
		{spec: "src=", err: "missing connector name"},
		{spec: ":count=1", err: "missing connector name"},
		{spec: "=gen", err: "empty vertex id before '='"},
		{spec: "gen:count", err: `"count" is not key=value`},
		{spec: "gen:count=1,", err: `"" is not key=value`},
		{spec: "gen:=1", err: `"=1" is not key=value`},
		{spec: "gen:count=1,count=2", err: `key "count" given twice`},
	} {
		got, err := ParseConnectorSpec(tc.spec)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseConnectorSpec(%q) error = %v, want %s", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseConnectorSpec(%q) = %+v, %v\nwant %+v", tc.spec, got, err, tc.want)
		}
	}
}

func TestIsJSONNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-0": true, "12": true, "-12": true, "1.5": true, "0.25": true, "1e3": true, "1E+3": true, "2.5e-7": true,
		"": false, "-": false, "01": false, "1.": false, ".5": false, "1e": false, "1e+": false, "+1": false, "0x1": false,
		"1_000": false, "NaN": false, "Infinity": false, "1 ": false, " 1": false, "--1": false,
	} {
		if got := isJSONNumber(s); got != want {
			t.Errorf("isJSONNumber(%q) = %v, want %v", s, got, want)
		}
		if want && !json.Valid([]byte(s)) {
			t.Errorf("%q accepted but not valid JSON", s)
		}
	}
}

func TestApplyConnectors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		source     []string
		sink       []string
		wantSource string // connector and config of vertex "source"
		wantSink   string // connector and config of vertex "sink"
	}{
		{name: "merge keys into the same connector", source: []string{"gen:count=1000,keys=10,seed=7"},
			wantSource: `gen {"count":1000,"keys":10,"seed":7,"words":4}`, wantSink: `stdout `},
		{name: "replace the connector and its config", source: []string{"file:path=in.txt"}, sink: []string{"sink=file:path=out.txt"},
			wantSource: `file {"path":"in.txt"}`, wantSink: `file {"path":"out.txt"}`},
		{name: "bare connector", sink: []string{"discard"}, wantSource: `gen {"count":100000,"keys":1000,"seed":1,"words":4}`, wantSink: `discard `},
		{name: "specs apply in order", source: []string{"file:path=a", "file:format=tsv", "source=file:path=b"},
			wantSource: `file {"format":"tsv","path":"b"}`, wantSink: `stdout `},
		{name: "same connector without keys keeps the config", source: []string{"gen"},
			wantSource: `gen {"count":100000,"keys":1000,"seed":1,"words":4}`, wantSink: `stdout `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, wordcount)
			if err := p.Apply(Overrides{Source: tc.source, Sink: tc.sink}); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]string{"source": tc.wantSource, "sink": tc.wantSink} {
				v := p.Vertex(id)
				if got := v.Connector + " " + string(v.Config); got != want {
					t.Errorf("%s = %s, want %s", id, got, want)
				}
			}
			if err := p.Validate(); err != nil {
				t.Errorf("plan after overrides: %v", err)
			}
		})
	}
}

func TestApplyParallelism(t *testing.T) {
	p := mustParse(t, wordcount) // parallelism 2; count sets 4, sink sets 1
	if err := p.Apply(Overrides{Parallelism: 6, VertexParallelism: map[string]int{"split": 3}, MaxParallelism: 64}); err != nil {
		t.Fatal(err)
	}
	if p.Parallelism != 6 || p.MaxParallelism != 64 {
		t.Errorf("plan parallelism %d max %d, want 6 and 64", p.Parallelism, p.MaxParallelism)
	}
	for id, want := range map[string]int{"source": 6, "split": 3, "count": 4, "sink": 1} {
		if got := p.Vertex(id).Parallelism; got != want {
			t.Errorf("%s parallelism %d, want %d", id, got, want)
		}
	}
	if !p.Vertex("source").InheritsParallelism() || p.Vertex("split").InheritsParallelism() {
		t.Error("source should follow the plan's parallelism and split have its own")
	}
	// The vertex override sticks through a later plan-wide one.
	if err := p.Apply(Overrides{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	if s, sp := p.Vertex("source").Parallelism, p.Vertex("split").Parallelism; s != 1 || sp != 3 {
		t.Errorf("after -p 1: source %d split %d, want 1 and 3", s, sp)
	}
	// And through a stored plan.
	q := mustParse(t, string(p.JSON()))
	if err := q.Apply(Overrides{Parallelism: 5}); err != nil {
		t.Fatal(err)
	}
	if s, sp := q.Vertex("source").Parallelism, q.Vertex("split").Parallelism; s != 5 || sp != 3 {
		t.Errorf("stored plan after -p 5: source %d split %d, want 5 and 3", s, sp)
	}
}

func TestApplyErrors(t *testing.T) {
	twoSources := mustParse(t, base)
	for _, tc := range []struct {
		name string
		plan *Plan
		o    Overrides
		want string
	}{
		{"parallelism", nil, Overrides{Parallelism: -1}, `plan: parallelism override -1 must be ≥ 1`},
		{"max parallelism", nil, Overrides{MaxParallelism: -4}, `plan: max parallelism override -4 must be ≥ 1`},
		{"vertex parallelism unknown", nil, Overrides{VertexParallelism: map[string]int{"cnt": 2}},
			`plan: parallelism override cnt=2: no vertex "cnt" (vertices: source, split, count, sink)`},
		{"vertex parallelism 0", nil, Overrides{VertexParallelism: map[string]int{"split": 0}},
			`plan: parallelism override split=0: 0 must be ≥ 1`},
		{"vertex parallelism sorted", nil, Overrides{VertexParallelism: map[string]int{"zz": 1, "aa": 1}},
			`plan: parallelism override aa=1: no vertex "aa" (vertices: source, split, count, sink)`},
		{"bad spec", nil, Overrides{Source: []string{"gen:count"}}, `plan: source override "gen:count": "count" is not key=value`},
		{"unknown connector", nil, Overrides{Source: []string{"kafka:topic=x"}},
			`plan: source override "kafka:topic=x": unknown source connector "kafka" (known: file, gen, jetstream)`},
		{"sink connector as source", nil, Overrides{Source: []string{"stdout"}},
			`plan: source override "stdout": unknown source connector "stdout" (known: file, gen, jetstream)`},
		{"unknown id", nil, Overrides{Sink: []string{"out=file:path=x"}},
			`plan: sink override "out=file:path=x": no vertex "out" (sinks: sink)`},
		{"wrong kind", nil, Overrides{Sink: []string{"count=discard"}},
			`plan: sink override "count=discard": vertex "count" is of kind operator, not sink`},
		{"ambiguous", twoSources, Overrides{Source: []string{"gen:count=5"}},
			`plan: source override "gen:count=5": the plan has 2 sources (a, b): name one as ID=CONNECTOR`},
		{"none", &Plan{Name: "x", Vertices: []Vertex{{ID: "s", Kind: KindSource, Connector: "gen"}}}, Overrides{Sink: []string{"stdout"}},
			`plan: sink override "stdout": the plan has no sink`},
		{"merge into a non-object", &Plan{Name: "x", Vertices: []Vertex{{ID: "s", Kind: KindSource, Connector: "gen", Config: json.RawMessage(`[1]`)}}},
			Overrides{Source: []string{"gen:count=1"}},
			`plan: source override "gen:count=1": cannot merge into the configuration of "s", which is not a JSON object: [1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.plan
			if p == nil {
				p = mustParse(t, wordcount)
			}
			before := string(p.JSON())
			// A valid change first, to check that a failed Apply undoes it.
			if tc.o.Parallelism == 0 && tc.o.MaxParallelism == 0 {
				tc.o.Parallelism = 7
			}
			err := p.Apply(tc.o)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Apply = %v, want a *job.Error", err)
			}
			if err.Error() != tc.want {
				t.Errorf("Apply\n got  %s\n want %s", err, tc.want)
			}
			if after := string(p.JSON()); after != before {
				t.Errorf("a failed Apply changed the plan:\n%s", after)
			}
		})
	}
}
