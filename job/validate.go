package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/operator"
)

// maxIDLen bounds vertex ids and job names: they become parts of file names
// and NATS subjects.
const maxIDLen = 128

// checkID reports why s cannot be an id or a job name, or "".
func checkID(s string) string {
	if s == "" {
		return "missing"
	}
	if len(s) > maxIDLen {
		return fmt.Sprintf("%q is longer than %d bytes", s, maxIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("%q may only hold letters, digits, '_' and '-'", s)
		}
	}
	return ""
}

func vertexPath(i int, v *Vertex) string { return fmt.Sprintf("vertices[%d] (%q)", i, v.ID) }

func edgePath(i int, e *Edge) string { return fmt.Sprintf("edges[%d] (%s→%s)", i, e.From, e.To) }

var partitions = []string{PartitionForward, PartitionKey, PartitionRebalance, PartitionBroadcast}

// Validate applies the defaults (Normalize) and checks the plan. It returns
// the first problem found, as an *Error, checking in this order: the name
// and plan-level parallelism; each vertex in plan order (id, kind, operator
// or connector, outputs, parallelism, connector configuration); each edge in
// plan order (ends, output, duplicates, partition); that every vertex is
// connected as its kind needs; and that the graph is acyclic.
func (p *Plan) Validate() error {
	p.Normalize()
	if msg := checkID(p.Name); msg != "" {
		return &Error{Path: "name", Message: msg}
	}
	if p.MaxParallelism < 1 || p.MaxParallelism > abi.MaxMaxParallelism {
		return errorf("maxParallelism", "%d must be in [1, %d]", p.MaxParallelism, abi.MaxMaxParallelism)
	}
	if err := p.checkParallelism("parallelism", p.Parallelism); err != nil {
		return err
	}
	if err := p.Checkpoint.validate(); err != nil {
		return err
	}
	if err := p.Restart.validate(); err != nil {
		return err
	}
	if len(p.Vertices) == 0 {
		return &Error{Path: "vertices", Message: "empty: a plan needs at least a source and a sink"}
	}
	index := make(map[string]int, len(p.Vertices))
	for i := range p.Vertices {
		if err := p.validateVertex(i, index); err != nil {
			return err
		}
	}
	type edgeKey struct{ from, to, output string }
	seen := make(map[edgeKey]int, len(p.Edges))
	ins := make([]int, len(p.Vertices))
	outs := make([]int, len(p.Vertices))
	for i := range p.Edges {
		e := &p.Edges[i]
		if err := p.validateEdge(i, index); err != nil {
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
	return nil
}

func (p *Plan) checkParallelism(path string, n int) error {
	if n < 1 {
		return errorf(path, "%d must be ≥ 1", n)
	}
	if n > p.MaxParallelism {
		return errorf(path, "%d must be ≤ maxParallelism %d", n, p.MaxParallelism)
	}
	return nil
}

func (p *Plan) validateVertex(i int, index map[string]int) error {
	v := &p.Vertices[i]
	path := vertexPath(i, v)
	if msg := checkID(v.ID); msg != "" {
		return &Error{Path: path + ".id", Message: msg}
	}
	if j, dup := index[v.ID]; dup {
		return errorf(path+".id", "%q is also the id of vertices[%d]", v.ID, j)
	}
	index[v.ID] = i
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
		return errorf(path+".outputs", "%q: a sink has no outputs", v.Outputs)
	case v.Kind == KindSource && len(v.Outputs) != 1:
		return errorf(path+".outputs", "%q: a source has exactly one output", v.Outputs)
	}
	for j, name := range v.Outputs {
		opath := fmt.Sprintf("%s.outputs[%d]", path, j)
		if name == "" {
			return &Error{Path: opath, Message: "missing"}
		}
		if len(name) > operator.MaxNameSize {
			return errorf(opath, "%q is longer than %d bytes", name, operator.MaxNameSize)
		}
		if k := slices.Index(v.Outputs, name); k < j {
			return errorf(opath, "%q is also outputs[%d]", name, k)
		}
	}
	if err := p.checkParallelism(path+".parallelism", v.Parallelism); err != nil {
		return err
	}
	return validateConfig(path+".config", v)
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

func (p *Plan) validateEdge(i int, index map[string]int) error {
	e := &p.Edges[i]
	path := edgePath(i, e)
	for _, end := range []struct{ field, id string }{{"from", e.From}, {"to", e.To}} {
		if end.id == "" {
			return &Error{Path: path + "." + end.field, Message: "missing"}
		}
		if _, ok := index[end.id]; !ok {
			return errorf(path+"."+end.field, "%q is not a vertex", end.id)
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
