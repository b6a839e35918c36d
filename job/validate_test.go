package job

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// base is a valid plan that the validation cases break one rule at a time:
// a -> op (forward) -> out, plus b -> op (key).
const base = `{"name":"v","parallelism":2,"vertices":[
 {"id":"a","kind":"source","connector":"gen"},
 {"id":"b","kind":"source","connector":"gen","config":{"count":10}},
 {"id":"op","kind":"operator","operator":"join","outputs":["main","side"]},
 {"id":"out","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
 {"from":"a","to":"op"},
 {"from":"b","to":"op","partition":"key"},
 {"from":"op","to":"out","partition":"rebalance"}]}`

func TestValidateBase(t *testing.T) {
	if err := mustParse(t, base).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   string      // a whole plan; base when empty
		mutate func(*Plan) // applied after Parse
		want   string
	}{
		{name: "name missing", mutate: func(p *Plan) { p.Name = "" },
			want: `plan: name: missing`},
		{name: "name chars", mutate: func(p *Plan) { p.Name = "word count" },
			want: `plan: name: "word count" may only hold letters, digits, '_' and '-'`},
		{name: "maxParallelism 0", json: `{"name":"v","maxParallelism":0}`,
			want: `plan: maxParallelism: 0 must be in [1, 32768]`},
		{name: "maxParallelism too big", mutate: func(p *Plan) { p.MaxParallelism = 1 << 16 },
			want: `plan: maxParallelism: 65536 must be in [1, 32768]`},
		{name: "parallelism 0", json: `{"name":"v","parallelism":0}`,
			want: `plan: parallelism: 0 must be ≥ 1`},
		{name: "parallelism over max", json: `{"name":"v","maxParallelism":4,"parallelism":5}`,
			want: `plan: parallelism: 5 must be ≤ maxParallelism 4`},
		{name: "no vertices", json: `{"name":"v"}`,
			want: `plan: vertices: empty: a plan needs at least a source and a sink`},
		{name: "id missing", mutate: func(p *Plan) { p.Vertices[1].ID = "" },
			want: `plan: vertices[1] ("").id: missing`},
		{name: "id chars", mutate: func(p *Plan) { p.Vertices[1].ID = "b.c" },
			want: `plan: vertices[1] ("b.c").id: "b.c" may only hold letters, digits, '_' and '-'`},
		{name: "id too long", mutate: func(p *Plan) { p.Vertices[0].ID = strings.Repeat("x", 129) },
			want: `plan: vertices[0] ("` + strings.Repeat("x", 128) + `…").id: "` + strings.Repeat("x", 128) + `…" (129 bytes) exceeds the MaxIDBytes limit of 128`},
		{name: "id duplicate", mutate: func(p *Plan) { p.Vertices[2].ID = "a" },
			want: `plan: vertices[2] ("a").id: "a" is also the id of vertices[0]`},
		{name: "kind", mutate: func(p *Plan) { p.Vertices[2].Kind = "map" },
			want: `plan: vertices[2] ("op").kind: "map" must be one of source, operator, sink`},
		{name: "kind missing", mutate: func(p *Plan) { p.Vertices[2].Kind = "" },
			want: `plan: vertices[2] ("op").kind: "" must be one of source, operator, sink`},
		{name: "source without connector", mutate: func(p *Plan) { p.Vertices[0].Connector = "" },
			want: `plan: vertices[0] ("a").connector: missing: a source needs a connector (one of file, gen, jetstream)`},
		{name: "unknown source connector", mutate: func(p *Plan) { p.Vertices[0].Connector = "kafka" },
			want: `plan: vertices[0] ("a").connector: "kafka" is not a source connector (known: file, gen, jetstream)`},
		{name: "sink connector as source", mutate: func(p *Plan) { p.Vertices[0].Connector = "stdout" },
			want: `plan: vertices[0] ("a").connector: "stdout" is not a source connector (known: file, gen, jetstream)`},
		{name: "source with operator", mutate: func(p *Plan) { p.Vertices[0].Operator = "split" },
			want: `plan: vertices[0] ("a").operator: "split" is only for operator vertices`},
		{name: "sink without connector", mutate: func(p *Plan) { p.Vertices[3].Connector = "" },
			want: `plan: vertices[3] ("out").connector: missing: a sink needs a connector (one of discard, file, jetstream, stdout)`},
		{name: "unknown sink connector", mutate: func(p *Plan) { p.Vertices[3].Connector = "gen" },
			want: `plan: vertices[3] ("out").connector: "gen" is not a sink connector (known: discard, file, jetstream, stdout)`},
		{name: "operator without name", mutate: func(p *Plan) { p.Vertices[2].Operator = "" },
			want: `plan: vertices[2] ("op").operator: missing: an operator vertex names the operator to run`},
		{name: "operator with connector", mutate: func(p *Plan) { p.Vertices[2].Connector = "gen" },
			want: `plan: vertices[2] ("op").connector: "gen" is only for source and sink vertices`},
		{name: "sink with outputs", mutate: func(p *Plan) { p.Vertices[3].Outputs = []string{"main"} },
			want: `plan: vertices[3] ("out").outputs: ["main"]: a sink has no outputs`},
		{name: "source with two outputs", mutate: func(p *Plan) { p.Vertices[0].Outputs = []string{"x", "y"} },
			want: `plan: vertices[0] ("a").outputs: ["x" "y"]: a source has exactly one output`},
		{name: "empty output", mutate: func(p *Plan) { p.Vertices[2].Outputs = []string{"main", ""} },
			want: `plan: vertices[2] ("op").outputs[1]: missing`},
		{name: "duplicate output", mutate: func(p *Plan) { p.Vertices[2].Outputs = []string{"main", "side", "main"} },
			want: `plan: vertices[2] ("op").outputs[2]: "main" is also outputs[0]`},
		{name: "long output", mutate: func(p *Plan) { p.Vertices[2].Outputs = []string{strings.Repeat("o", 257)} },
			want: `plan: vertices[2] ("op").outputs[0]: "` + strings.Repeat("o", 128) + `…" (257 bytes) exceeds the MaxNameBytes limit of 256`},
		{name: "vertex parallelism 0", json: `{"name":"v","vertices":[{"id":"a","kind":"source","connector":"gen"},{"id":"b","kind":"sink","connector":"discard"},{"id":"count","kind":"operator","operator":"c","parallelism":0}]}`,
			want: `plan: vertices[2] ("count").parallelism: 0 must be ≥ 1`},
		{name: "vertex parallelism over max", mutate: func(p *Plan) { p.Vertices[3].Parallelism = 129 },
			want: `plan: vertices[3] ("out").parallelism: 129 must be ≤ maxParallelism 128`},
		{name: "connector config", mutate: func(p *Plan) { p.Vertices[1].Config = json.RawMessage(`{"count":-1}`) },
			want: `plan: vertices[1] ("b").config.count: -1 must be ≥ 0`},
		{name: "connector config unknown field", mutate: func(p *Plan) { p.Vertices[3].Config = json.RawMessage(`{"colour":1}`) },
			want: `plan: vertices[3] ("out").config.colour: unknown field (the connector takes no configuration)`},
		{name: "connector config not an object", mutate: func(p *Plan) { p.Vertices[0].Config = json.RawMessage(`"x"`) },
			want: `plan: vertices[0] ("a").config: must be a JSON object, not string`},
		{name: "operator config invalid", mutate: func(p *Plan) { p.Vertices[2].Config = json.RawMessage(`{x`) },
			want: `plan: vertices[2] ("op").config: invalid JSON "{x"`},
		{name: "edge from missing", mutate: func(p *Plan) { p.Edges[1].From = "" },
			want: `plan: edges[1] (→op).from: missing`},
		{name: "edge from unknown", mutate: func(p *Plan) { p.Edges[1].From = "c" },
			want: `plan: edges[1] (c→op).from: "c" is not a vertex`},
		{name: "edge to unknown", mutate: func(p *Plan) { p.Edges[2].To = "stdout" },
			want: `plan: edges[2] (op→stdout).to: "stdout" is not a vertex`},
		{name: "self loop", mutate: func(p *Plan) { p.Edges = append(p.Edges, Edge{From: "op", To: "op", Partition: "key", Output: "side"}) },
			want: `plan: edges[3] (op→op): an edge may not connect a vertex to itself`},
		{name: "edge from sink", mutate: func(p *Plan) { p.Edges = append(p.Edges, Edge{From: "out", To: "op", Partition: "key"}) },
			want: `plan: edges[3] (out→op).from: "out" is a sink: sinks have no outputs`},
		{name: "edge into source", mutate: func(p *Plan) { p.Edges = append(p.Edges, Edge{From: "op", To: "a", Output: "side"}) },
			want: `plan: edges[3] (op→a).to: "a" is a source: sources have no inputs`},
		{name: "unknown output", mutate: func(p *Plan) { p.Edges[2].Output = "errors" },
			want: `plan: edges[2] (op→out).output: "errors" is not an output of "op" (outputs: main, side)`},
		{name: "bad partition", mutate: func(p *Plan) { p.Edges[1].Partition = "hash" },
			want: `plan: edges[1] (b→op).partition: "hash" must be one of forward, key, rebalance, broadcast`},
		{name: "forward parallelism", mutate: func(p *Plan) { p.Edges[2].Partition = "forward" },
			want: `plan: edges[2] (op→out).partition: forward needs equal parallelism, but "op" has 2 and "out" has 1 (use rebalance or key)`},
		{name: "duplicate edge", mutate: func(p *Plan) { p.Edges = append(p.Edges, Edge{From: "b", To: "op", Partition: "rebalance"}) },
			want: `plan: edges[3] (b→op): duplicates edges[1] (same from, to and output)`},
		{name: "source without output", mutate: func(p *Plan) { p.Edges = p.Edges[1:] },
			want: `plan: vertices[0] ("a"): no output edge: a source needs at least one`},
		{name: "operator without input", mutate: func(p *Plan) {
			p.Vertices = append(p.Vertices, Vertex{ID: "lonely", Kind: KindOperator, Operator: "x"})
		}, want: `plan: vertices[4] ("lonely"): no input edge: an operator needs at least one`},
		{name: "sink without input", mutate: func(p *Plan) { p.Edges = p.Edges[:2] },
			want: `plan: vertices[3] ("out"): no input edge: a sink needs at least one`},
		{name: "cycle", mutate: func(p *Plan) {
			p.Vertices = append(p.Vertices, Vertex{ID: "x", Kind: KindOperator, Operator: "x"}, Vertex{ID: "y", Kind: KindOperator, Operator: "y"})
			p.Edges = append(p.Edges, Edge{From: "op", To: "x", Partition: "key", Output: "side"}, Edge{From: "x", To: "y", Partition: "key"}, Edge{From: "y", To: "op", Partition: "key"})
		}, want: `plan: edges: cycle op → x → y → op`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.json
			if src == "" {
				src = base
			}
			p := mustParse(t, src)
			if tc.mutate != nil {
				tc.mutate(p)
			}
			err := p.Validate()
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Validate() = %v, want a *job.Error", err)
			}
			if err.Error() != tc.want {
				t.Errorf("Validate()\n got  %s\n want %s", err, tc.want)
			}
		})
	}
}

func TestValidateDeterministic(t *testing.T) {
	// Several problems at once: the first in the documented order wins, every
	// time.
	p := mustParse(t, base)
	p.Edges[1].Partition = "hash"
	p.Vertices[3].Connector = "nope"
	for range 20 {
		if err := p.Validate(); err == nil || !strings.HasPrefix(err.Error(), `plan: vertices[3] ("out").connector`) {
			t.Fatalf("Validate() = %v, want the vertex error before the edge error", err)
		}
	}
}
