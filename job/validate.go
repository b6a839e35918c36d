package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/operator"
)

// checkID checks an id or job name: present, within most bytes, and made
// of the characters that file names and NATS subjects take.
func checkID(path, s string, most int) error {
	if s == "" {
		return &Error{Path: path, Message: "missing"}
	}
	if err := checkLen(path, "MaxIDBytes", s, most); err != nil {
		return err
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return errorf(path, "%q may only hold letters, digits, '_' and '-'", s)
		}
	}
	return nil
}

// checkName checks a name of the plan (kind, operator, connector, output,
// partition): within most bytes, valid UTF-8, and free of control and
// formatting characters, since names reach error messages, logs and
// terminals (an escape sequence in an operator's name would be sent to
// them).
func checkName(path, s string, most int) error {
	if err := checkLen(path, "MaxNameBytes", s, most); err != nil {
		return err
	}
	if !utf8.ValidString(s) {
		return errorf(path, "%s is not valid UTF-8", quote(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return errorf(path, "%s holds the control or formatting character %U", quote(s), r)
		}
	}
	return nil
}

func vertexPath(i int, v *Vertex) string { return fmt.Sprintf("vertices[%d] (%s)", i, quote(v.ID)) }

func edgePath(i int, e *Edge) string {
	return fmt.Sprintf("edges[%d] (%s→%s)", i, short(e.From), short(e.To))
}

var partitions = []string{PartitionForward, PartitionKey, PartitionRebalance, PartitionBroadcast}

// Validate applies the defaults (Normalize) and checks the plan under the
// default limits. It returns the first problem found, as an *Error,
// checking in this order: the number of vertices and edges, and each
// vertex's config size and nesting (before Normalize canonicalizes the
// configs); the name and plan-level parallelism; each vertex in plan order
// (id, kind, operator or connector, outputs, parallelism, connector
// configuration); each edge in plan order (ends, output, duplicates,
// partition); that every vertex is connected as its kind needs; that the
// graph is acyclic; and the number of subtasks.
func (p *Plan) Validate() error { return Limits{}.Validate(p) }

// Validate is the plan's Validate under l.
func (l Limits) Validate(p *Plan) error {
	l = l.withDefaults()
	if err := l.checkCounts(len(p.Vertices), len(p.Edges)); err != nil {
		return err
	}
	for i := range p.Vertices {
		if err := l.checkConfig(i, &p.Vertices[i]); err != nil {
			return err
		}
	}
	p.Normalize()
	if err := checkID("name", p.Name, l.MaxIDBytes); err != nil {
		return err
	}
	if p.MaxParallelism < 1 || p.MaxParallelism > abi.MaxMaxParallelism {
		return errorf("maxParallelism", "%d must be in [1, %d]", p.MaxParallelism, abi.MaxMaxParallelism)
	}
	if p.MaxParallelism > l.MaxKeyGroups {
		return limitErrorf("maxParallelism", "MaxKeyGroups", "%d exceeds the MaxKeyGroups limit of %d", p.MaxParallelism, l.MaxKeyGroups)
	}
	if err := l.checkParallelism(p, "parallelism", p.Parallelism); err != nil {
		return err
	}
	if err := p.Checkpoint.validate(); err != nil {
		return err
	}
	if err := p.Restart.validate(); err != nil {
		return err
	}
	if err := p.OnGuestError.validate(); err != nil {
		return err
	}
	if len(p.Vertices) == 0 {
		return &Error{Path: "vertices", Message: "empty: a plan needs at least a source and a sink"}
	}
	index := make(map[string]int, len(p.Vertices))
	for i := range p.Vertices {
		if err := l.validateVertex(p, i, index); err != nil {
			return err
		}
	}
	type edgeKey struct{ from, to, output string }
	seen := make(map[edgeKey]int, len(p.Edges))
	ins := make([]int, len(p.Vertices))
	outs := make([]int, len(p.Vertices))
	for i := range p.Edges {
		e := &p.Edges[i]
		if err := l.validateEdge(p, i, index); err != nil {
			return err
		}
		k := edgeKey{e.From, e.To, e.Output}
		if j, dup := seen[k]; dup {
			return errorf(edgePath(i, e), "duplicates edges[%d] (same from, to and output)", j)
		}
		seen[k] = i
		outs[index[e.From]]++
		ins[index[e.To]]++
	}
	for i := range p.Vertices {
		v := &p.Vertices[i]
		switch {
		case v.Kind == KindSource && outs[i] == 0:
			return &Error{Path: vertexPath(i, v), Message: "no output edge: a source needs at least one"}
		case v.Kind == KindOperator && ins[i] == 0:
			return &Error{Path: vertexPath(i, v), Message: "no input edge: an operator needs at least one"}
		case v.Kind == KindSink && ins[i] == 0:
			return &Error{Path: vertexPath(i, v), Message: "no input edge: a sink needs at least one"}
		}
	}
	if cycle := p.findCycle(index); cycle != nil {
		return &Error{Path: "edges", Message: "cycle " + strings.Join(cycle, " → ")}
	}
	return l.checkSubtasks(p, index, ins, outs)
}

// checkConfig checks the size and nesting of vertex i's config, which may
// not come from Parse (overrides, a plan built in Go).
func (l Limits) checkConfig(i int, v *Vertex) error {
	if err := l.checkConfigSize(i, v, v.Config); err != nil {
		return err
	}
	// The config's top-level value is at level 3 of the plan.
	if at := deepAt(v.Config, l.MaxDepth-3); at >= 0 {
		line, col := position(v.Config, int64(at)+1)
		return limitErrorf(vertexPath(i, v)+".config", "MaxDepth",
			"JSON nested deeper than the MaxDepth limit of %d levels (counted from the plan) at line %d, column %d of the config", l.MaxDepth, line, col)
	}
	return nil
}

// checkSubtasks checks the number of subtasks the plan's graph runs: a
// chain (see Build) runs as many as its parallelism.
func (l Limits) checkSubtasks(p *Plan, index map[string]int, ins, outs []int) error {
	// A vertex that a chainable edge leads to runs in the chain of the
	// edge's from vertex (Chainable, with the edge counts at hand).
	chained := make([]bool, len(p.Vertices))
	for i := range p.Edges {
		e := &p.Edges[i]
		from, to := index[e.From], index[e.To]
		if e.Partition == PartitionForward && p.Vertices[from].Parallelism == p.Vertices[to].Parallelism && outs[from] == 1 && ins[to] == 1 {
			chained[to] = true
		}
	}
	total, widest := 0, -1
	for i := range p.Vertices {
		if chained[i] {
			continue
		}
		total += p.Vertices[i].Parallelism
		if widest < 0 || p.Vertices[i].Parallelism > p.Vertices[widest].Parallelism {
			widest = i
		}
	}
	if total > l.MaxSubtasks {
		v := &p.Vertices[widest]
		return limitErrorf("vertices", "MaxSubtasks", "%d subtasks (the sum of the chains' parallelism; the widest chain, from %s, has %d) exceed the MaxSubtasks limit of %d",
			total, vertexPath(widest, v), v.Parallelism, l.MaxSubtasks)
	}
	return nil
}

func (l Limits) checkParallelism(p *Plan, path string, n int) error {
	if n < 1 {
		return errorf(path, "%d must be ≥ 1", n)
	}
	if n > p.MaxParallelism {
		return errorf(path, "%d must be ≤ maxParallelism %d", n, p.MaxParallelism)
	}
	if n > l.MaxVertexParallelism {
		return limitErrorf(path, "MaxVertexParallelism", "%d exceeds the MaxVertexParallelism limit of %d", n, l.MaxVertexParallelism)
	}
	return nil
}

func (l Limits) validateVertex(p *Plan, i int, index map[string]int) error {
	v := &p.Vertices[i]
	path := vertexPath(i, v)
	if err := checkID(path+".id", v.ID, l.MaxIDBytes); err != nil {
		return err
	}
	if j, dup := index[v.ID]; dup {
		return errorf(path+".id", "%q is also the id of vertices[%d]", v.ID, j)
	}
	index[v.ID] = i
	for _, f := range []struct{ field, value string }{{"kind", v.Kind}, {"operator", v.Operator}, {"connector", v.Connector}} {
		if err := checkName(path+"."+f.field, f.value, l.MaxNameBytes); err != nil {
			return err
		}
	}
	switch v.Kind {
	case KindSource, KindSink:
		names, what := connector.SourceNames(), "a source"
		if v.Kind == KindSink {
			names, what = connector.SinkNames(), "a sink"
		}
		if v.Connector == "" {
			return errorf(path+".connector", "missing: %s needs a connector (one of %s)", what, strings.Join(names, ", "))
		}
		if !slices.Contains(names, v.Connector) {
			return errorf(path+".connector", "%q is not %s connector (known: %s)", v.Connector, what, strings.Join(names, ", "))
		}
		if v.Operator != "" {
			return errorf(path+".operator", "%q is only for operator vertices", v.Operator)
		}
	case KindOperator:
		if v.Operator == "" {
			return &Error{Path: path + ".operator", Message: "missing: an operator vertex names the operator to run"}
		}
		if v.Connector != "" {
			return errorf(path+".connector", "%q is only for source and sink vertices", v.Connector)
		}
	default:
		return errorf(path+".kind", "%q must be one of %s, %s, %s", v.Kind, KindSource, KindOperator, KindSink)
	}
	switch {
	case v.Kind == KindSink && len(v.Outputs) > 0:
		return errorf(path+".outputs", "%s: a sink has no outputs", quoteList(v.Outputs))
	case v.Kind == KindSource && len(v.Outputs) != 1:
		return errorf(path+".outputs", "%s: a source has exactly one output", quoteList(v.Outputs))
	}
	first := make(map[string]int, len(v.Outputs))
	for j, name := range v.Outputs {
		opath := fmt.Sprintf("%s.outputs[%d]", path, j)
		if name == "" {
			return &Error{Path: opath, Message: "missing"}
		}
		if err := checkName(opath, name, l.MaxNameBytes); err != nil {
			return err
		}
		if len(name) > operator.MaxNameSize {
			// The ABI's bound, whatever the limits say.
			return errorf(opath, "%s is longer than %d bytes", quote(name), operator.MaxNameSize)
		}
		if k, dup := first[name]; dup {
			return errorf(opath, "%q is also outputs[%d]", name, k)
		}
		first[name] = j
	}
	if err := l.validateStates(path, v); err != nil {
		return err
	}
	if err := l.checkParallelism(p, path+".parallelism", v.Parallelism); err != nil {
		return err
	}
	return validateConfig(path+".config", v)
}

// MaxStateDecls bounds the states one vertex declares.
const MaxStateDecls = 256

// validateStates checks a vertex's state declarations: operators only, each
// named once (within the ABI's bound on state names), of a known kind, at a
// layout version of at least 1.
func (l Limits) validateStates(path string, v *Vertex) error {
	if len(v.States) == 0 {
		return nil
	}
	if v.Kind != KindOperator {
		return errorf(path+".states", "only operator vertices have keyed state")
	}
	if len(v.States) > MaxStateDecls {
		return errorf(path+".states", "%d states exceed the most a vertex declares, %d", len(v.States), MaxStateDecls)
	}
	seen := make(map[string]int, len(v.States))
	for k, st := range v.States {
		spath := fmt.Sprintf("%s.states[%d]", path, k)
		if st.Name == "" {
			return &Error{Path: spath + ".name", Message: "missing"}
		}
		if err := checkName(spath+".name", st.Name, l.MaxNameBytes); err != nil {
			return err
		}
		if len(st.Name) > operator.MaxNameSize {
			return errorf(spath+".name", "%s is longer than %d bytes", quote(st.Name), operator.MaxNameSize)
		}
		if j, dup := seen[st.Name]; dup {
			return errorf(spath+".name", "%q is also states[%d]", st.Name, j)
		}
		seen[st.Name] = k
		if !slices.Contains(StateKinds, st.Kind) {
			return errorf(spath+".kind", "%q must be one of %s", st.Kind, strings.Join(StateKinds, ", "))
		}
		if st.Version < 1 {
			return errorf(spath+".version", "%d must be ≥ 1", st.Version)
		}
	}
	return nil
}

// quoteList renders a list of names as %q does, but with each name cut
// and at most a few names shown.
func quoteList(names []string) string {
	const most = 8
	parts := make([]string, 0, min(len(names), most+1))
	for _, n := range names[:min(len(names), most)] {
		parts = append(parts, quote(n))
	}
	if len(names) > most {
		parts = append(parts, fmt.Sprintf("… (%d in all)", len(names)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func validateConfig(path string, v *Vertex) error {
	var err error
	switch v.Kind {
	case KindSource:
		err = connector.ValidateSource(v.Connector, v.Config)
	case KindSink:
		err = connector.ValidateSink(v.Connector, v.Config)
	default:
		if len(v.Config) > 0 && !json.Valid(v.Config) {
			return errorf(path, "invalid JSON %q", v.Config)
		}
		return nil
	}
	var ce *connector.ConfigError
	if errors.As(err, &ce) {
		if ce.Field != "" {
			path += "." + ce.Field
		}
		return &Error{Path: path, Message: ce.Message}
	}
	if err != nil {
		return &Error{Path: path, Message: err.Error()}
	}
	return nil
}

func (l Limits) validateEdge(p *Plan, i int, index map[string]int) error {
	e := &p.Edges[i]
	path := edgePath(i, e)
	for _, end := range []struct{ field, id string }{{"from", e.From}, {"to", e.To}} {
		if end.id == "" {
			return &Error{Path: path + "." + end.field, Message: "missing"}
		}
		if err := checkLen(path+"."+end.field, "MaxIDBytes", end.id, l.MaxIDBytes); err != nil {
			return err
		}
		if _, ok := index[end.id]; !ok {
			return errorf(path+"."+end.field, "%q is not a vertex", end.id)
		}
	}
	for _, f := range []struct{ field, value string }{{"output", e.Output}, {"partition", e.Partition}} {
		if err := checkName(path+"."+f.field, f.value, l.MaxNameBytes); err != nil {
			return err
		}
	}
	if e.From == e.To {
		return &Error{Path: path, Message: "an edge may not connect a vertex to itself"}
	}
	from, to := &p.Vertices[index[e.From]], &p.Vertices[index[e.To]]
	if from.Kind == KindSink {
		return errorf(path+".from", "%q is a sink: sinks have no outputs", e.From)
	}
	if to.Kind == KindSource {
		return errorf(path+".to", "%q is a source: sources have no inputs", e.To)
	}
	if !slices.Contains(from.Outputs, e.Output) {
		return errorf(path+".output", "%q is not an output of %q (outputs: %s)", e.Output, e.From, strings.Join(from.Outputs, ", "))
	}
	if !slices.Contains(partitions, e.Partition) {
		return errorf(path+".partition", "%q must be one of %s", e.Partition, strings.Join(partitions, ", "))
	}
	if e.Partition == PartitionForward && from.Parallelism != to.Parallelism {
		return errorf(path+".partition", "forward needs equal parallelism, but %q has %d and %q has %d (use rebalance or key)",
			e.From, from.Parallelism, e.To, to.Parallelism)
	}
	return nil
}

// findCycle returns the ids along a cycle, first id repeated at the end, or
// nil. It searches depth first from the vertices in plan order, following
// edges in plan order, so the cycle reported is deterministic.
func (p *Plan) findCycle(index map[string]int) []string {
	const (
		unvisited = iota
		onStack
		finished
	)
	state := make([]int, len(p.Vertices))
	out := make([][]int, len(p.Vertices))
	for _, e := range p.Edges {
		out[index[e.From]] = append(out[index[e.From]], index[e.To])
	}
	var stack []int
	var visit func(v int) []string
	visit = func(v int) []string {
		state[v] = onStack
		stack = append(stack, v)
		for _, w := range out[v] {
			switch state[w] {
			case onStack:
				start := slices.Index(stack, w)
				cycle := make([]string, 0, len(stack)-start+1)
				for _, u := range stack[start:] {
					cycle = append(cycle, p.Vertices[u].ID)
				}
				return append(cycle, p.Vertices[w].ID)
			case unvisited:
				if c := visit(w); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[v] = finished
		return nil
	}
	for v := range p.Vertices {
		if state[v] == unvisited {
			if c := visit(v); c != nil {
				return c
			}
		}
	}
	return nil
}
