package job

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const upgradeBase = `{"name":"wc","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":10}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count","states":[{"name":"count","kind":"value"},{"name":"seen","kind":"map","version":2}]},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

func upgradePlan(t *testing.T, edit func(p *Plan)) *Plan {
	t.Helper()
	p, err := Parse([]byte(upgradeBase))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(p)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("the test's plan is invalid: %v", err)
	}
	return p
}

// TestCheckUpgrade walks every rule of CheckUpgrade, each alone, and a
// refusal that lists several differences.
func TestCheckUpgrade(t *testing.T) {
	countStates := func(p *Plan) *Vertex { return p.Vertex("count") }
	for _, tc := range []struct {
		name string
		edit func(p *Plan)
		want []string // substrings of the differences, in order; none: accepted
	}{
		{name: "same plan"},
		{name: "rescaled", edit: func(p *Plan) { p.Parallelism = 4; p.Normalize() }},
		{name: "operator renamed in the module", edit: func(p *Plan) { countStates(p).Operator = "count_v2" }},
		{name: "vertex added", edit: func(p *Plan) {
			p.Vertices = append(p.Vertices, Vertex{ID: "audit", Kind: KindSink, Connector: "discard"})
			p.Edges = append(p.Edges, Edge{From: "split", To: "audit", Partition: PartitionRebalance})
			p.Normalize()
		}},
		{name: "state version raised", edit: func(p *Plan) { countStates(p).States[0].Version = 3 }},
		{name: "state added", edit: func(p *Plan) {
			v := countStates(p)
			v.States = append(v.States, StateDecl{Name: "last", Kind: StateValue, Version: 1})
		}},
		{name: "states no longer declared", edit: func(p *Plan) { countStates(p).States = nil }},
		{name: "max parallelism", edit: func(p *Plan) { p.MaxParallelism = 256 },
			want: []string{"max parallelism 128 of the running job differs from the new plan's 256"}},
		{name: "vertex removed", edit: func(p *Plan) {
			p.Vertices = slices.DeleteFunc(p.Vertices, func(v Vertex) bool { return v.ID == "split" })
			p.Edges = []Edge{{From: "source", To: "count", Partition: PartitionKey}, {From: "count", To: "sink", Partition: PartitionRebalance}}
		}, want: []string{`vertex "split" (operator) of the running job is missing from the new plan`}},
		{name: "vertex id renamed", edit: func(p *Plan) {
			countStates(p).ID = "counter"
			p.Edges[1].To, p.Edges[2].From = "counter", "counter"
		}, want: []string{`vertex "count" (operator) of the running job is missing`}},
		{name: "kind changed", edit: func(p *Plan) {
			// split becomes a sink fed by the source; count is fed by a
			// new operator vertex.
			p.Vertices[1] = Vertex{ID: "split", Kind: KindSink, Connector: "discard"}
			p.Vertices = append(p.Vertices, Vertex{ID: "split2", Kind: KindOperator, Operator: "split"})
			p.Edges = []Edge{{From: "source", To: "split", Partition: PartitionRebalance}, {From: "source", To: "split2", Partition: PartitionRebalance},
				{From: "split2", To: "count", Partition: PartitionKey}, {From: "count", To: "sink", Partition: PartitionRebalance}}
			p.Normalize()
		}, want: []string{`vertex "split" is of kind operator in the running job and sink in the new plan`}},
		{name: "source connector", edit: func(p *Plan) {
			p.Vertices[0].Connector, p.Vertices[0].Config = "file", []byte(`{"path":"in.txt"}`)
		}, want: []string{`source "source" uses connector "gen" in the running job and "file" in the new plan`}},
		{name: "sink connector", edit: func(p *Plan) { p.Vertices[3].Connector = "discard" },
			want: []string{`sink "sink" uses connector "stdout" in the running job and "discard"`}},
		{name: "state kind", edit: func(p *Plan) { countStates(p).States[0].Kind = StateMap },
			want: []string{`state "count" of vertex "count" is a value state in the running job and a map state in the new plan`}},
		{name: "state version lowered", edit: func(p *Plan) { countStates(p).States[1].Version = 1 },
			want: []string{`state "seen" of vertex "count" goes back from layout version 2 to 1`}},
		{name: "state dropped", edit: func(p *Plan) { countStates(p).States = countStates(p).States[1:] },
			want: []string{`state "count" of vertex "count" is not declared by the new plan`}},
		{name: "several", edit: func(p *Plan) {
			p.MaxParallelism = 64
			countStates(p).States[0].Kind = StateMap
			p.Vertices[3].Connector = "discard"
		}, want: []string{"max parallelism 128", `state "count" of vertex "count" is a value state`, `sink "sink" uses connector`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := upgradePlan(t, nil)
			next := upgradePlan(t, tc.edit)
			err := CheckUpgrade(old, next)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ue *UpgradeError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v, want an *UpgradeError", err)
			}
			if len(ue.Differences) != len(tc.want) {
				t.Fatalf("differences %q, want %d of them", ue.Differences, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(ue.Differences[i], w) {
					t.Errorf("difference %d is %q, want it to contain %q", i, ue.Differences[i], w)
				}
			}
			if !strings.Contains(err.Error(), tc.want[0]) {
				t.Errorf("message %q does not name the difference", err)
			}
		})
	}
}

func TestMigrations(t *testing.T) {
	old := upgradePlan(t, nil)
	next := upgradePlan(t, func(p *Plan) {
		v := p.Vertex("count")
		v.Operator = "count2"
		v.States[0].Version = 2 // count: 1 → 2
		// seen stays at 2; a new state at version 3 counts as coming from 1.
		v.States = append(v.States, StateDecl{Name: "fresh", Kind: StateValue, Version: 3})
	})
	got := Migrations(old, next)
	want := []Migration{
		{Vertex: "count", Operator: "count2", State: "count", From: 1, To: 2},
		{Vertex: "count", Operator: "count2", State: "fresh", From: 1, To: 3},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Migrations = %+v, want %+v", got, want)
	}
	if m := Migrations(old, old); m != nil {
		t.Fatalf("Migrations of a plan to itself = %+v, want none", m)
	}
}

func TestStateDeclarations(t *testing.T) {
	for _, tc := range []struct{ states, want string }{
		{`[{"name":"count","kind":"value"}]`, ""},
		{`[{"name":"count","kind":"value","version":0}]`, ""}, // the default
		{`[{"name":"","kind":"value"}]`, `states[0].name: missing`},
		{`[{"name":"a","kind":"list"}]`, `states[0].kind: "list" must be one of value, map`},
		{`[{"name":"a","kind":"value","version":-1}]`, `states[0].version: -1 must be ≥ 1`},
		{`[{"name":"a","kind":"value"},{"name":"a","kind":"map"}]`, `states[1].name: "a" is also states[0]`},
		{`[{"name":"a","kind":"value","layout":2}]`, `unknown field "layout"`},
	} {
		src := strings.Replace(upgradeBase, `"states":[{"name":"count","kind":"value"},{"name":"seen","kind":"map","version":2}]`, `"states":`+tc.states, 1)
		p, err := Parse([]byte(src))
		if err == nil {
			err = p.Validate()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.states, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.states, err, tc.want)
		case err == nil:
			// The declarations survive the plan's JSON.
			back, perr := Parse(p.JSON())
			if perr != nil || len(back.Vertex("count").States) != 1 || back.Vertex("count").States[0].Version != 1 {
				t.Errorf("%s: through JSON: %v %+v", tc.states, perr, back)
			}
		}
	}
	src := strings.Replace(upgradeBase, `"connector":"stdout","parallelism":1}`, `"connector":"stdout","parallelism":1,"states":[{"name":"x","kind":"value"}]}`, 1)
	p, err := Parse([]byte(src))
	if err == nil {
		err = p.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "only operator vertices have keyed state") {
		t.Errorf("states on a sink: got %v", err)
	}
}
