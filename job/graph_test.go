package job

import (
	"slices"
	"strings"
	"testing"
)

const chainPlan = `{"name":"chains","parallelism":2,"vertices":[{"id":"src","kind":"source","connector":"gen"},{"id":"map","kind":"operator","operator":"m"},{"id":"out","kind":"sink","connector":"discard"}],"edges":[{"from":"src","to":"map"},{"from":"map","to":"out"}]}`

func mustBuild(t *testing.T, plan string) *Graph {
	t.Helper()
	g, err := Build(mustParse(t, plan))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkInvariants(t, g)
	return g
}

// checkInvariants checks what every graph must satisfy.
func checkInvariants(t *testing.T, g *Graph) {
	t.Helper()
	internal := 0
	for i, c := range g.Chains {
		if c.Index != i {
			t.Errorf("chain %s has Index %d at position %d", c.ID, c.Index, i)
		}
		ids := make([]string, len(c.Vertices))
		for j, v := range c.Vertices {
			ids[j] = v.ID
			if v.Parallelism != c.Parallelism {
				t.Errorf("chain %s ×%d holds %s ×%d", c.ID, c.Parallelism, v.ID, v.Parallelism)
			}
		}
		if c.ID != strings.Join(ids, "+") {
			t.Errorf("chain ID %q, vertices %v", c.ID, ids)
		}
		internal += len(c.Vertices) - 1
		for _, e := range c.Outputs {
			if e.From != c || e.FromVertex != c.Tail().ID {
				t.Errorf("chain %s output edge %d leaves from %s, not its tail", c.ID, e.Index, e.FromVertex)
			}
		}
		for j, e := range c.Inputs {
			if e.To != c || e.ToVertex != c.Head().ID {
				t.Errorf("chain %s input edge %d enters %s, not its head", c.ID, e.Index, e.ToVertex)
			}
			if j > 0 && c.Inputs[j-1].InputIndex >= e.InputIndex {
				t.Errorf("chain %s inputs not in input order", c.ID)
			}
		}
		if sourceRank(c) == 0 && i > 0 && sourceRank(g.Chains[i-1]) != 0 {
			t.Errorf("source chain %s after a non-source chain", c.ID)
		}
	}
	for i, e := range g.Edges {
		if e.Index != i {
			t.Errorf("edge %d has Index %d", i, e.Index)
		}
		if e.From.Index >= e.To.Index {
			t.Errorf("edge %s→%s goes from chain %d to chain %d: not topological", e.FromVertex, e.ToVertex, e.From.Index, e.To.Index)
		}
		if i > 0 && g.Edges[i-1].From.Index > e.From.Index {
			t.Errorf("edges not ordered by upstream chain")
		}
		from := g.Plan.Vertex(e.FromVertex)
		if from.Outputs[e.OutputIndex] != e.Output {
			t.Errorf("edge %d output %q at index %d of %q", i, e.Output, e.OutputIndex, from.Outputs)
		}
		if in := g.Plan.Inputs(e.ToVertex); in[e.InputIndex].From != e.FromVertex || in[e.InputIndex].Output != e.Output {
			t.Errorf("edge %d input index %d is not its position among %s's inputs", i, e.InputIndex, e.ToVertex)
		}
	}
	if internal+len(g.Edges) != len(g.Plan.Edges) {
		t.Errorf("%d chained + %d channel edges, plan has %d", internal, len(g.Edges), len(g.Plan.Edges))
	}
}

func chainIDs(g *Graph) []string {
	ids := make([]string, len(g.Chains))
	for i, c := range g.Chains {
		ids[i] = c.ID
	}
	return ids
}

func TestChaining(t *testing.T) {
	const src = `{"id":"src","kind":"source","connector":"gen"}`
	const src2 = `{"id":"src2","kind":"source","connector":"gen"}`
	const op = `{"id":"op","kind":"operator","operator":"o"}`
	const op2 = `{"id":"op2","kind":"operator","operator":"o"}`
	const out = `{"id":"out","kind":"sink","connector":"discard"}`
	const out2 = `{"id":"out2","kind":"sink","connector":"discard"}`
	plan := func(vertices, edges string) string {
		return `{"name":"c","parallelism":2,"vertices":[` + vertices + `],"edges":[` + edges + `]}`
	}
	for _, tc := range []struct {
		name string
		plan string
		want []string
	}{
		{"all forward", chainPlan, []string{"src+map+out"}},
		{"key edge breaks", plan(src+","+op+","+out, `{"from":"src","to":"op","partition":"key"},{"from":"op","to":"out"}`),
			[]string{"src", "op+out"}},
		{"rebalance breaks", plan(src+","+op+","+out, `{"from":"src","to":"op"},{"from":"op","to":"out","partition":"rebalance"}`),
			[]string{"src+op", "out"}},
		{"broadcast breaks", plan(src+","+op+","+out, `{"from":"src","to":"op","partition":"broadcast"},{"from":"op","to":"out"}`),
			[]string{"src", "op+out"}},
		{"parallelism mismatch", plan(src+`,{"id":"op","kind":"operator","operator":"o","parallelism":3},`+out,
			`{"from":"src","to":"op","partition":"rebalance"},{"from":"op","to":"out","partition":"rebalance"}`),
			[]string{"src", "op", "out"}},
		{"fan-out breaks", plan(src+","+op+","+op2+","+out, `{"from":"src","to":"op"},{"from":"src","to":"op2"},{"from":"op","to":"out","partition":"rebalance"},{"from":"op2","to":"out","partition":"rebalance"}`),
			[]string{"src", "op", "op2", "out"}},
		{"fan-in breaks", plan(src+","+src2+","+op+","+out, `{"from":"src","to":"op"},{"from":"src2","to":"op"},{"from":"op","to":"out"}`),
			[]string{"src", "src2", "op+out"}},
		{"two outputs of one vertex", plan(src+`,{"id":"op","kind":"operator","operator":"o","outputs":["main","err"]},`+out+","+out2,
			`{"from":"src","to":"op"},{"from":"op","to":"out"},{"from":"op","to":"out2","output":"err"}`),
			[]string{"src+op", "out", "out2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := mustBuild(t, tc.plan)
			if got := chainIDs(g); !slices.Equal(got, tc.want) {
				t.Errorf("chains %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChainable(t *testing.T) {
	// Validate refuses a forward edge between different parallelisms;
	// Chainable must not chain one either.
	p := mustParse(t, chainPlan)
	p.Vertices[1].Parallelism, p.Vertices[1].inherited = 3, false
	if p.Chainable(&p.Edges[0]) {
		t.Error("forward edge between parallelism 2 and 3 is chainable")
	}
	if p.Chainable(&Edge{From: "src", To: "nope", Partition: PartitionForward}) {
		t.Error("edge to a missing vertex is chainable")
	}
}

func TestBuildWordcount(t *testing.T) {
	g := mustBuild(t, wordcount)
	if got, want := chainIDs(g), []string{"source", "split", "count", "sink"}; !slices.Equal(got, want) {
		t.Fatalf("chains %v, want %v", got, want)
	}
	for i, want := range []int{2, 2, 4, 1} {
		if got := g.Chains[i].Parallelism; got != want {
			t.Errorf("chain %s parallelism %d, want %d", g.Chains[i].ID, got, want)
		}
	}
	e := g.Edges[1]
	if e.From != g.Chains[1] || e.To != g.Chains[2] || e.Partition != PartitionKey || e.FromVertex != "split" || e.ToVertex != "count" {
		t.Errorf("edge 1 = %+v", e)
	}
	if g.Chains[2].Inputs[0] != e || g.Chains[1].Outputs[0] != e {
		t.Error("edge 1 is not the input of count and the output of split")
	}
	if len(g.Chains[0].Inputs) != 0 || len(g.Chains[3].Outputs) != 0 {
		t.Error("source has inputs or sink has outputs")
	}
}

func TestTopologicalOrder(t *testing.T) {
	// Plan order interleaves sources and operators, and lists a sink first:
	// chains still come sources first, then in dependency order.
	const p = `{"name":"topo","parallelism":2,"vertices":[
	 {"id":"out","kind":"sink","connector":"discard"},
	 {"id":"left","kind":"source","connector":"gen"},
	 {"id":"join","kind":"operator","operator":"j","outputs":["main","late"]},
	 {"id":"lmap","kind":"operator","operator":"m","parallelism":3},
	 {"id":"right","kind":"source","connector":"gen"},
	 {"id":"late","kind":"sink","connector":"discard"}],
	 "edges":[
	 {"from":"join","to":"out","partition":"rebalance"},
	 {"from":"left","to":"lmap","partition":"rebalance"},
	 {"from":"right","to":"join","partition":"key"},
	 {"from":"lmap","to":"join","partition":"key"},
	 {"from":"join","to":"late","output":"late"}]}`
	g := mustBuild(t, p)
	if got, want := chainIDs(g), []string{"left", "right", "lmap", "join", "out", "late"}; !slices.Equal(got, want) {
		t.Fatalf("chains %v, want %v", got, want)
	}
	join := g.Chains[3]
	if len(join.Inputs) != 2 || join.Inputs[0].FromVertex != "right" || join.Inputs[0].InputIndex != 0 ||
		join.Inputs[1].FromVertex != "lmap" || join.Inputs[1].InputIndex != 1 {
		t.Errorf("join inputs %+v %+v, want right (0) then lmap (1) in plan order", join.Inputs[0], join.Inputs[1])
	}
	if len(join.Outputs) != 2 || join.Outputs[0].ToVertex != "out" || join.Outputs[1].OutputIndex != 1 {
		t.Errorf("join outputs wrong: %+v", join.Outputs)
	}
}

func TestUpstream(t *testing.T) {
	g := mustBuild(t, `{"name":"u","vertices":[
	 {"id":"s","kind":"source","connector":"gen","parallelism":3},
	 {"id":"a","kind":"operator","operator":"a","parallelism":2},
	 {"id":"b","kind":"operator","operator":"b","parallelism":2},
	 {"id":"o","kind":"sink","connector":"discard","parallelism":2},
	 {"id":"o2","kind":"sink","connector":"discard","parallelism":2}],
	 "edges":[{"from":"s","to":"a","partition":"key"},{"from":"a","to":"b","partition":"broadcast"},
	 {"from":"b","to":"o"},{"from":"b","to":"o2","partition":"rebalance"}]}`)
	for _, tc := range []struct {
		edge, d int
		want    []int
	}{
		{0, 0, []int{0, 1, 2}}, {0, 1, []int{0, 1, 2}}, {0, 2, nil}, {0, -1, nil},
		{1, 1, []int{0, 1}},
		{2, 0, []int{0}}, {2, 1, []int{1}}, {2, 2, nil},
		{3, 1, []int{0, 1}},
	} {
		e := g.Edges[tc.edge]
		if got := e.Upstream(tc.d); !slices.Equal(got, tc.want) {
			t.Errorf("edge %d (%s %s→%s) Upstream(%d) = %v, want %v", tc.edge, e.Partition, e.FromVertex, e.ToVertex, tc.d, got, tc.want)
		}
	}
	if e := g.Edges[2]; e.Partition != PartitionForward {
		t.Fatalf("edge 2 is %s, want the unchained forward edge b→o", e.Partition)
	}
}

func TestGraphString(t *testing.T) {
	p := mustParse(t, wordcount)
	p.Edges[0].Partition = PartitionForward // chain source and split
	g, err := Build(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `job wordcount: maxParallelism 128, 3 chains, 2 edges
chain 0 source+split ×2: source (source gen) → split (operator split)
chain 1 count ×4: count (operator count)
chain 2 sink ×1: sink (sink stdout)
edge 0 chain 0 → chain 1: split.main[0] → count[0] key
edge 1 chain 1 → chain 2: count.main[0] → sink[0] rebalance
`
	if got := g.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

func TestBuildInvalid(t *testing.T) {
	p := mustParse(t, wordcount)
	p.Edges[1].Partition = "hash"
	if _, err := Build(p); err == nil || !strings.Contains(err.Error(), `edges[1] (split→count).partition`) {
		t.Errorf("Build of an invalid plan = %v", err)
	}
}
