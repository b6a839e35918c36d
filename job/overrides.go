package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wstream/wstream/connector"
)

// Overrides are changes to a plan from the command line. Zero values change
// nothing.
type Overrides struct {
	// Parallelism sets the plan's parallelism and that of every vertex that
	// did not set its own in the plan.
	Parallelism int
	// VertexParallelism sets the parallelism of vertices by id.
	VertexParallelism map[string]int
	// Source and Sink replace or reconfigure connectors, each spec
	// [ID=]CONNECTOR[:k=v,k=v...]; without ID a spec applies to the plan's
	// only source (sink). Applied in order.
	Source []string
	Sink   []string
	// MaxParallelism sets the number of key groups.
	MaxParallelism int
}

// Apply applies o to the plan: max parallelism, parallelism, vertex
// parallelism, then the source and sink specs in order. On error the plan
// is unchanged. Apply does not validate the result: call Validate.
//
// A spec naming the connector the vertex already has merges its keys into
// the vertex's configuration; a spec naming another connector replaces the
// connector and its whole configuration. Values become JSON: true and false
// booleans, JSON numbers (integers, and decimals such as 0.5) numbers,
// anything else a string. A value cannot hold a comma.
func (p *Plan) Apply(o Overrides) error {
	c := p.Clone()
	if err := c.apply(o); err != nil {
		return err
	}
	*p = *c
	return nil
}

func (p *Plan) apply(o Overrides) error {
	if o.MaxParallelism != 0 {
		if o.MaxParallelism < 1 {
			return errorf("", "max parallelism override %d must be ≥ 1", o.MaxParallelism)
		}
		p.MaxParallelism, p.maxParallelismSet = o.MaxParallelism, true
	}
	if o.Parallelism != 0 {
		if o.Parallelism < 1 {
			return errorf("", "parallelism override %d must be ≥ 1", o.Parallelism)
		}
		p.Parallelism, p.parallelismSet = o.Parallelism, true
	}
	p.Normalize() // inherited vertices follow the new parallelism
	for _, id := range slices.Sorted(maps.Keys(o.VertexParallelism)) {
		n := o.VertexParallelism[id]
		v := p.Vertex(id)
		if v == nil {
			return errorf("", "parallelism override %s=%d: no vertex %q (vertices: %s)", id, n, id, strings.Join(p.ids(""), ", "))
		}
		if n < 1 {
			return errorf("", "parallelism override %s=%d: %d must be ≥ 1", id, n, n)
		}
		v.Parallelism, v.parallelismSet, v.inherited = n, true, false
	}
	for _, spec := range o.Source {
		if err := p.applyConnector(KindSource, spec); err != nil {
			return err
		}
	}
	for _, spec := range o.Sink {
		if err := p.applyConnector(KindSink, spec); err != nil {
			return err
		}
	}
	p.Normalize()
	return nil
}

// ids returns the ids of the vertices of kind ("" for all), in plan order.
func (p *Plan) ids(kind string) []string {
	var ids []string
	for i := range p.Vertices {
		if kind == "" || p.Vertices[i].Kind == kind {
			ids = append(ids, p.Vertices[i].ID)
		}
	}
	return ids
}

func (p *Plan) applyConnector(kind, spec string) error {
	fail := func(format string, args ...any) error {
		return errorf("", "%s override %q: %s", kind, spec, fmt.Sprintf(format, args...))
	}
	s, err := ParseConnectorSpec(spec)
	if err != nil {
		return fail("%v", err)
	}
	names := connector.SourceNames()
	if kind == KindSink {
		names = connector.SinkNames()
	}
	if !slices.Contains(names, s.Connector) {
		return fail("unknown %s connector %q (known: %s)", kind, s.Connector, strings.Join(names, ", "))
	}
	var v *Vertex
	if s.ID != "" {
		v = p.Vertex(s.ID)
		if v == nil {
			return fail("no vertex %q (%ss: %s)", s.ID, kind, strings.Join(p.ids(kind), ", "))
		}
		if v.Kind != kind {
			return fail("vertex %q is of kind %s, not %s", s.ID, v.Kind, kind)
		}
	} else {
		ids := p.ids(kind)
		switch len(ids) {
		case 0:
			return fail("the plan has no %s", kind)
		case 1:
			v = p.Vertex(ids[0])
		default:
			return fail("the plan has %d %ss (%s): name one as ID=CONNECTOR", len(ids), kind, strings.Join(ids, ", "))
		}
	}
	config := map[string]json.RawMessage{}
	if s.Connector == v.Connector && len(bytes.TrimSpace(v.Config)) > 0 && string(bytes.TrimSpace(v.Config)) != "null" {
		if err := json.Unmarshal(v.Config, &config); err != nil {
			return fail("cannot merge into the configuration of %q, which is not a JSON object: %s", v.ID, v.Config)
		}
	}
	for _, f := range s.Fields {
		config[f.Key] = f.Value
	}
	v.Connector = s.Connector
	v.Config = nil
	if len(config) > 0 {
		v.Config, err = json.Marshal(config)
		if err != nil {
			return fail("%v", err)
		}
	}
	return nil
}

// ConnectorSpec is a parsed [ID=]CONNECTOR[:k=v,k=v...] override.
type ConnectorSpec struct {
	ID        string // vertex id; empty for the plan's only source or sink
	Connector string
	Fields    []ConfigField // in the order given
}

// ConfigField is one k=v of a connector spec, its value as JSON.
type ConfigField struct {
	Key   string
	Value json.RawMessage
}

// ParseConnectorSpec parses [ID=]CONNECTOR[:k=v,k=v...], e.g.
// "gen:count=1000,keys=10", "sink=file:path=out.txt" or "stdout". The
// connector part ends at the first ':', so values may hold ':' but not ','.
func ParseConnectorSpec(spec string) (ConnectorSpec, error) {
	var s ConnectorSpec
	head, kvs, hasFields := strings.Cut(spec, ":")
	if id, conn, ok := strings.Cut(head, "="); ok {
		if id == "" {
			return s, fmt.Errorf("empty vertex id before '='")
		}
		s.ID, head = id, conn
	}
	if head == "" {
		return s, fmt.Errorf("missing connector name")
	}
	s.Connector = head
	if !hasFields || kvs == "" {
		return s, nil
	}
	for item := range strings.SplitSeq(kvs, ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return s, fmt.Errorf("%q is not key=value", item)
		}
		if slices.ContainsFunc(s.Fields, func(f ConfigField) bool { return f.Key == k }) {
			return s, fmt.Errorf("key %q given twice", k)
		}
		s.Fields = append(s.Fields, ConfigField{Key: k, Value: specValue(v)})
	}
	return s, nil
}

// specValue turns a flag value into JSON: true/false booleans, JSON numbers
// numbers, anything else a string.
func specValue(v string) json.RawMessage {
	if v == "true" || v == "false" {
		return json.RawMessage(v)
	}
	if isJSONNumber(v) {
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v)
	return b
}

// isJSONNumber reports whether s is a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
