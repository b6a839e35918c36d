package job

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Graph is the physical form of a plan: chains of vertices that run in one
// subtask, and the edges between chains that become channels.
type Graph struct {
	Plan   *Plan
	Chains []*Chain     // topological order, source chains first
	Edges  []*ChainEdge // ordered by upstream chain, then plan order
}

// Chain is a run of vertices joined by chainable edges: one subtask runs
// them all, passing records from one to the next without a channel.
type Chain struct {
	ID          string    // the vertices' ids joined by "+"
	Index       int       // position in Graph.Chains
	Vertices    []*Vertex // head first
	Parallelism int
	Inputs      []*ChainEdge // into the head, in the head's input order
	Outputs     []*ChainEdge // out of the tail, in plan order
}

// Head is the chain's first vertex, the one its inputs feed.
func (c *Chain) Head() *Vertex { return c.Vertices[0] }

// Tail is the chain's last vertex, the only one with outgoing channels.
func (c *Chain) Tail() *Vertex { return c.Vertices[len(c.Vertices)-1] }

// ChainEdge is a plan edge between two chains: a channel from each upstream
// subtask to the downstream subtasks it feeds.
type ChainEdge struct {
	Index      int // position in Graph.Edges
	From, To   *Chain
	FromVertex string // From's tail
	ToVertex   string // To's head
	Output     string // output of FromVertex
	// OutputIndex is the position of Output among FromVertex's outputs: the
	// port of the records it carries when they leave FromVertex.
	OutputIndex int
	// InputIndex is the position of this edge among ToVertex's incoming
	// edges in plan order: the port of its records at ToVertex.
	InputIndex int
	Partition  string
}

// Upstream returns the upstream subtasks that feed downstream subtask d:
// the same index on a forward edge, all of them otherwise. It returns nil
// for a d outside the downstream chain's parallelism.
func (e *ChainEdge) Upstream(d int) []int {
	if d < 0 || d >= e.To.Parallelism {
		return nil
	}
	if e.Partition == PartitionForward {
		return []int{d}
	}
	up := make([]int, e.From.Parallelism)
	for i := range up {
		up[i] = i
	}
	return up
}

// Chainable reports whether edge e (of plan p) joins its ends into one chain:
// it is forward, both ends have the same parallelism, its upstream vertex
// has no other outgoing edge and its downstream vertex no other incoming
// edge.
func (p *Plan) Chainable(e *Edge) bool {
	from, to := p.Vertex(e.From), p.Vertex(e.To)
	return from != nil && to != nil && e.Partition == PartitionForward &&
		from.Parallelism == to.Parallelism &&
		len(p.Outputs(e.From)) == 1 && len(p.Inputs(e.To)) == 1
}

// Build validates p (under the default limits) and builds its physical
// graph. The graph points into p: p must not change while the graph is in
// use.
func Build(p *Plan) (*Graph, error) { return Limits{}.Build(p) }

// Build is the package's Build, validating p under l.
func (l Limits) Build(p *Plan) (*Graph, error) {
	if err := l.Validate(p); err != nil {
		return nil, err
	}
	n := len(p.Vertices)
	index := make(map[string]int, n)
	for i := range p.Vertices {
		index[p.Vertices[i].ID] = i
	}
	chained := make([]bool, len(p.Edges))
	next := make([]int, n) // vertex chained after vertex i, or -1
	isHead := make([]bool, n)
	for i := range next {
		next[i], isHead[i] = -1, true
	}
	for i := range p.Edges {
		e := &p.Edges[i]
		if p.Chainable(e) {
			chained[i] = true
			next[index[e.From]] = index[e.To]
			isHead[index[e.To]] = false
		}
	}

	// Chains, keyed by head vertex; chainOf maps each vertex to its chain.
	chainOf := make([]*Chain, n)
	var chains []*Chain
	for h := range n {
		if !isHead[h] {
			continue
		}
		c := &Chain{Parallelism: p.Vertices[h].Parallelism}
		var ids []string
		for v := h; v >= 0; v = next[v] {
			c.Vertices = append(c.Vertices, &p.Vertices[v])
			ids = append(ids, p.Vertices[v].ID)
			chainOf[v] = c
		}
		c.ID = strings.Join(ids, "+")
		chains = append(chains, c)
	}

	// Edges between chains, and the in-degree of each chain for the sort.
	var edges []*ChainEdge
	inputIndex := make([]int, n)
	for i := range p.Edges {
		e := &p.Edges[i]
		to := index[e.To]
		in := inputIndex[to]
		inputIndex[to]++
		if chained[i] {
			continue
		}
		from := &p.Vertices[index[e.From]]
		ce := &ChainEdge{From: chainOf[index[e.From]], To: chainOf[to], FromVertex: e.From, ToVertex: e.To,
			Output: e.Output, OutputIndex: slices.Index(from.Outputs, e.Output), InputIndex: in, Partition: e.Partition}
		edges = append(edges, ce)
		ce.From.Outputs = append(ce.From.Outputs, ce)
		ce.To.Inputs = append(ce.To.Inputs, ce)
	}

	// Kahn's algorithm; among ready chains, sources first, then by the
	// plan position of the head. Sources have no inputs, so they are all
	// ready at the start and come before every other chain.
	head := func(c *Chain) int { return index[c.Head().ID] }
	pending := make(map[*Chain]int, len(chains))
	var ready []*Chain
	for _, c := range chains {
		pending[c] = len(c.Inputs)
		if len(c.Inputs) == 0 {
			ready = append(ready, c)
		}
	}
	order := make([]*Chain, 0, len(chains))
	for len(ready) > 0 {
		slices.SortFunc(ready, func(a, b *Chain) int {
			return cmp.Or(cmp.Compare(sourceRank(a), sourceRank(b)), cmp.Compare(head(a), head(b)))
		})
		c := ready[0]
		ready = ready[1:]
		c.Index = len(order)
		order = append(order, c)
		for _, e := range c.Outputs {
			if pending[e.To]--; pending[e.To] == 0 {
				ready = append(ready, e.To)
			}
		}
	}
	if len(order) != len(chains) {
		// Validate refuses cycles, and chaining cannot make one.
		return nil, &Error{Path: "edges", Message: "cycle between chains"}
	}
	slices.SortStableFunc(edges, func(a, b *ChainEdge) int { return cmp.Compare(a.From.Index, b.From.Index) })
	for i, e := range edges {
		e.Index = i
	}
	return &Graph{Plan: p, Chains: order, Edges: edges}, nil
}

func sourceRank(c *Chain) int {
	if c.Head().Kind == KindSource {
		return 0
	}
	return 1
}

// String renders the graph for a dry run: one line per chain with its
// parallelism and vertices, one line per edge with its partitioning and
// ports. The output is deterministic.
func (g *Graph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: maxParallelism %d, %d chains, %d edges\n", g.Plan.Name, g.Plan.MaxParallelism, len(g.Chains), len(g.Edges))
	for _, c := range g.Chains {
		parts := make([]string, len(c.Vertices))
		for i, v := range c.Vertices {
			parts[i] = describeVertex(v)
		}
		fmt.Fprintf(&b, "chain %d %s ×%d: %s\n", c.Index, c.ID, c.Parallelism, strings.Join(parts, " → "))
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&b, "edge %d chain %d → chain %d: %s.%s[%d] → %s[%d] %s\n", e.Index, e.From.Index, e.To.Index,
			e.FromVertex, e.Output, e.OutputIndex, e.ToVertex, e.InputIndex, e.Partition)
	}
	return b.String()
}

func describeVertex(v *Vertex) string {
	switch v.Kind {
	case KindOperator:
		return fmt.Sprintf("%s (operator %s)", v.ID, v.Operator)
	default:
		return fmt.Sprintf("%s (%s %s)", v.ID, v.Kind, v.Connector)
	}
}
