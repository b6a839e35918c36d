package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/strictjson"
)

// Vertex kinds.
const (
	KindSource   = "source"
	KindOperator = "operator"
	KindSink     = "sink"
)

// Partitionings of an edge.
const (
	PartitionForward   = "forward"   // subtask i feeds subtask i (equal parallelism)
	PartitionKey       = "key"       // by key group of the record's key
	PartitionRebalance = "rebalance" // round robin over the downstream subtasks
	PartitionBroadcast = "broadcast" // every record to every downstream subtask
)

// DefaultOutput is the output of a vertex that declares none.
const DefaultOutput = "main"

// Plan is a job's logical plan.
type Plan struct {
	Name           string   `json:"name"`
	MaxParallelism int      `json:"maxParallelism"`
	Parallelism    int      `json:"parallelism"`
	Vertices       []Vertex `json:"vertices"`
	Edges          []Edge   `json:"edges"`
	// Checkpoint and Restart are optional; nil means off / no restarts.
	Checkpoint *CheckpointSettings `json:"checkpoint,omitempty"`
	Restart    *RestartSettings    `json:"restart,omitempty"`
	// OnGuestError is optional; nil fails the job on a guest error.
	OnGuestError *GuestErrorSettings `json:"onGuestError,omitempty"`

	// Parse records which plan-level values the JSON set, so that an
	// explicit 0 is reported rather than replaced by the default.
	maxParallelismSet bool
	parallelismSet    bool
}

// Vertex is a source, operator or sink of a plan.
type Vertex struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Operator    string          `json:"operator,omitempty"`  // operator name in the module (kind operator)
	Connector   string          `json:"connector,omitempty"` // connector name (kinds source and sink)
	Config      json.RawMessage `json:"config,omitempty"`
	Parallelism int             `json:"parallelism,omitempty"`
	Outputs     []string        `json:"outputs,omitempty"`
	// States declares the operator's keyed states, optionally: an upgrade
	// (see CheckUpgrade) compares them with the running job's, and a state
	// whose Version rose is migrated on restore.
	States []StateDecl `json:"states,omitempty"`

	parallelismSet bool // the plan JSON set parallelism (even to an invalid 0)
	inherited      bool // Parallelism follows the plan's
}

// Edge connects output Output of vertex From to vertex To.
type Edge struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Partition string `json:"partition,omitempty"`
	Output    string `json:"output,omitempty"`
}

// InheritsParallelism reports whether the vertex's parallelism follows the
// plan's rather than being set for the vertex.
func (v *Vertex) InheritsParallelism() bool { return v.inherited }

// Error is a problem with a plan: Path locates it (e.g.
// `vertices[2] ("count").parallelism`, empty for the plan as a whole).
type Error struct {
	Path    string
	Message string
	// Limit names the Limits field the plan exceeds (e.g. "MaxVertices"),
	// empty for other problems: a quota's refusal can be told apart.
	Limit string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "plan: " + e.Message
	}
	return "plan: " + e.Path + ": " + e.Message
}

func errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Message: fmt.Sprintf(format, args...)}
}

// The wire forms tell absent fields from zero ones and let Parse decode each
// vertex and edge on its own, so that errors carry their index.
type (
	wirePlan struct {
		Name           string            `json:"name"`
		MaxParallelism *int              `json:"maxParallelism"`
		Parallelism    *int              `json:"parallelism"`
		Vertices       []json.RawMessage `json:"vertices"`
		Edges          []json.RawMessage `json:"edges"`
		Checkpoint     json.RawMessage   `json:"checkpoint"`
		Restart        json.RawMessage   `json:"restart"`
		OnGuestError   json.RawMessage   `json:"onGuestError"`
	}
	wireVertex struct {
		ID          string          `json:"id"`
		Kind        string          `json:"kind"`
		Operator    string          `json:"operator,omitempty"`
		Connector   string          `json:"connector,omitempty"`
		Config      json.RawMessage `json:"config,omitempty"`
		Parallelism *int            `json:"parallelism,omitempty"`
		Outputs     []string        `json:"outputs,omitempty"`
		States      []StateDecl     `json:"states,omitempty"`
	}
	wireEdge struct {
		From      string `json:"from"`
		To        string `json:"to"`
		Partition string `json:"partition"`
		Output    string `json:"output"`
	}
	wirePlanOut struct {
		Name           string              `json:"name"`
		MaxParallelism int                 `json:"maxParallelism"`
		Parallelism    int                 `json:"parallelism"`
		Vertices       []wireVertex        `json:"vertices"`
		Edges          []wireEdge          `json:"edges"`
		Checkpoint     *CheckpointSettings `json:"checkpoint,omitempty"`
		Restart        *RestartSettings    `json:"restart,omitempty"`
		OnGuestError   *GuestErrorSettings `json:"onGuestError,omitempty"`
	}
)

// Parse decodes a plan from JSON and applies the defaults (Normalize). It
// does not validate: call Validate (or Build) after any overrides. It
// refuses a plan over the default limits of size, nesting, vertices, edges
// and config size (see Limits.Parse).
func Parse(data []byte) (*Plan, error) { return Limits{}.Parse(data) }

// Parse is the package's Parse under l: before it decodes anything it
// checks the plan's size and nesting depth, and before it decodes a vertex
// or an edge the number of vertices and edges, and a vertex's config size
// before it canonicalizes the config.
func (l Limits) Parse(data []byte) (*Plan, error) {
	l = l.withDefaults()
	if len(data) > l.MaxPlanBytes {
		return nil, limitErrorf("", "MaxPlanBytes", "%d bytes exceed the MaxPlanBytes limit of %d", len(data), l.MaxPlanBytes)
	}
	if at := deepAt(data, l.MaxDepth); at >= 0 {
		return nil, depthError(data, at, l.MaxDepth)
	}
	var w wirePlan
	if err := decodeStrict(data, &w, ""); err != nil {
		return nil, err
	}
	if err := l.checkCounts(len(w.Vertices), len(w.Edges)); err != nil {
		return nil, err
	}
	p := &Plan{Name: w.Name}
	if len(w.Checkpoint) > 0 && string(w.Checkpoint) != "null" {
		p.Checkpoint = &CheckpointSettings{}
		if err := decodeStrict(w.Checkpoint, p.Checkpoint, "checkpoint"); err != nil {
			return nil, err
		}
	}
	if len(w.Restart) > 0 && string(w.Restart) != "null" {
		p.Restart = &RestartSettings{}
		if err := decodeStrict(w.Restart, p.Restart, "restart"); err != nil {
			return nil, err
		}
	}
	if len(w.OnGuestError) > 0 && string(w.OnGuestError) != "null" {
		p.OnGuestError = &GuestErrorSettings{}
		if err := decodeStrict(w.OnGuestError, p.OnGuestError, "onGuestError"); err != nil {
			return nil, err
		}
	}
	if w.MaxParallelism != nil {
		p.MaxParallelism, p.maxParallelismSet = *w.MaxParallelism, true
	}
	if w.Parallelism != nil {
		p.Parallelism, p.parallelismSet = *w.Parallelism, true
	}
	if len(w.Vertices) > 0 {
		p.Vertices = make([]Vertex, len(w.Vertices))
	}
	for i, raw := range w.Vertices {
		var wv wireVertex
		if err := decodeStrict(raw, &wv, fmt.Sprintf("vertices[%d]", i)); err != nil {
			return nil, err
		}
		v := &p.Vertices[i]
		*v = Vertex{ID: wv.ID, Kind: wv.Kind, Operator: wv.Operator, Connector: wv.Connector, Outputs: wv.Outputs, States: wv.States}
		if err := l.checkConfigSize(i, v, wv.Config); err != nil {
			return nil, err
		}
		if len(wv.Config) > 0 && string(wv.Config) != "null" {
			v.Config = wv.Config
		}
		if wv.Parallelism != nil {
			v.Parallelism, v.parallelismSet = *wv.Parallelism, true
		}
	}
	if len(w.Edges) > 0 {
		p.Edges = make([]Edge, len(w.Edges))
	}
	for i, raw := range w.Edges {
		var we wireEdge
		if err := decodeStrict(raw, &we, fmt.Sprintf("edges[%d]", i)); err != nil {
			return nil, err
		}
		p.Edges[i] = Edge(we)
	}
	p.Normalize()
	return p, nil
}

// Load reads and parses the plan file at path, under the default limits.
func Load(path string) (*Plan, error) { return Limits{}.Load(path) }

// decodeStrict decodes one JSON value into dst, refusing unknown fields and
// trailing data. path prefixes the errors' paths.
func decodeStrict(data []byte, dst any, path string) error {
	// encoding/json matches names in any case and keeps the last of
	// duplicates: a plan spells every field exactly, once.
	if err := strictjson.Check(data, reflect.TypeOf(dst)); err != nil {
		var ne *strictjson.NameError
		if errors.As(err, &ne) {
			at := path
			for _, p := range ne.Path {
				if _, nerr := strconv.Atoi(p); nerr == nil {
					at += "[" + p + "]"
				} else {
					at = joinPath(at, p)
				}
			}
			switch {
			case ne.Duplicate:
				return &Error{Path: at, Message: fmt.Sprintf("field %s given twice", quote(ne.Name))}
			case ne.Suggest != "":
				return &Error{Path: at, Message: fmt.Sprintf("unknown field %s: did you mean %s? (field names are case-sensitive)", quote(ne.Name), quote(ne.Suggest))}
			}
			return &Error{Path: at, Message: fmt.Sprintf("unknown field %s (known: %s)", quote(ne.Name), strings.Join(ne.Known, ", "))}
		}
		return &Error{Path: path, Message: err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return &Error{Path: path, Message: "unexpected data after the JSON value"}
		}
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return &Error{Path: path, Message: "must be a JSON object, not " + typeErr.Value}
		}
		return &Error{Path: joinPath(path, typeErr.Field), Message: "JSON " + typeErr.Value + " is not a valid " + typeName(typeErr.Type)}
	case errors.As(err, &syntaxErr):
		line, col := position(data, syntaxErr.Offset)
		return &Error{Path: path, Message: fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, syntaxErr)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Path: path, Message: "truncated JSON"}
	}
	// encoding/json reports unknown fields with an untyped error.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if u, uerr := strconv.Unquote(name); uerr == nil {
			name = u
		}
		return &Error{Path: path, Message: fmt.Sprintf("unknown field %s (known: %s)", quote(name), strings.Join(jsonFields(dst), ", "))}
	}
	return &Error{Path: path, Message: err.Error()}
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// position returns the 1-based line and column of the byte a JSON syntax
// error stopped at (encoding/json reports the offset just after it).
func position(data []byte, offset int64) (line, col int) {
	pos := int(min(max(offset-1, 0), int64(len(data))))
	before := data[:pos]
	line = bytes.Count(before, []byte{'\n'}) + 1
	return line, pos - (bytes.LastIndexByte(before, '\n') + 1) + 1
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.String:
		return "string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "list of strings"
		}
		return "list"
	}
	return t.String()
}

func jsonFields(dst any) []string {
	t := reflect.TypeOf(dst).Elem()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Normalize applies the defaults (see the package doc) and puts connector and
// operator configurations into canonical JSON (compact, object keys sorted).
// It is idempotent, and a configuration that is not valid JSON is left for
// Validate to report.
func (p *Plan) Normalize() {
	if p.MaxParallelism == 0 && !p.maxParallelismSet {
		p.MaxParallelism = abi.DefaultMaxParallelism
	}
	if p.Parallelism == 0 && !p.parallelismSet {
		p.Parallelism = 1
	}
	for i := range p.Vertices {
		v := &p.Vertices[i]
		if v.inherited || (v.Parallelism == 0 && !v.parallelismSet) {
			v.Parallelism, v.inherited = p.Parallelism, true
		}
		if len(v.Outputs) == 0 && v.Kind != KindSink {
			v.Outputs = []string{DefaultOutput}
		}
		if c, err := canonicalJSON(v.Config); err == nil {
			v.Config = c
		}
		for k := range v.States {
			if v.States[k].Version == 0 {
				v.States[k].Version = 1
			}
		}
	}
	for i := range p.Edges {
		e := &p.Edges[i]
		if e.Partition == "" {
			e.Partition = PartitionForward
		}
		if e.Output == "" {
			if from := p.Vertex(e.From); from != nil && len(from.Outputs) > 0 {
				e.Output = from.Outputs[0]
			}
		}
	}
}

// canonicalJSON returns v compact, with object keys sorted and numbers as
// written. Empty and null become nil.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// JSON returns the plan as canonical JSON, for storing with a job: defaults
// written out, except the parallelism of vertices that follow the plan's, so
// that parsing it back gives the same plan. It is indented for its first
// levels only (jsonIndentLevels), so its size stays in proportion to the
// plan's however deep a config nests.
func (p *Plan) JSON() []byte {
	w := wirePlanOut{Name: p.Name, MaxParallelism: p.MaxParallelism, Parallelism: p.Parallelism,
		Vertices: make([]wireVertex, len(p.Vertices)), Edges: make([]wireEdge, len(p.Edges)),
		Checkpoint: p.Checkpoint, Restart: p.Restart, OnGuestError: p.OnGuestError}
	for i := range p.Vertices {
		v := &p.Vertices[i]
		wv := wireVertex{ID: v.ID, Kind: v.Kind, Operator: v.Operator, Connector: v.Connector, Config: v.Config, Outputs: v.Outputs, States: v.States}
		if c, err := canonicalJSON(v.Config); err == nil {
			wv.Config = c
		}
		if !v.inherited {
			n := v.Parallelism
			wv.Parallelism = &n
		}
		w.Vertices[i] = wv
	}
	for i, e := range p.Edges {
		w.Edges[i] = wireEdge(e)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		// Only an invalid Config can fail here; keep it as a string so the
		// output is still JSON and the problem stays visible.
		for i := range w.Vertices {
			if !json.Valid(w.Vertices[i].Config) {
				s, _ := json.Marshal(string(w.Vertices[i].Config))
				w.Vertices[i].Config = s
			}
		}
		buf.Reset()
		enc.Encode(w)
	}
	var out bytes.Buffer
	out.Grow(buf.Len() + buf.Len()/2)
	indentLevels(&out, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), jsonIndentLevels)
	out.WriteByte('\n')
	return out.Bytes()
}

// jsonIndentLevels is how deep JSON indents: the plan, its lists, and each
// vertex, edge and setting. Configs and outputs stay compact, one line each:
// indenting every level of a config nested n deep would write O(n) bytes of
// indentation per line, O(n²) in all.
const jsonIndentLevels = 3

// indentLevels writes the compact JSON src to dst indented by two spaces
// per level for its first levels, and compact below them.
func indentLevels(dst *bytes.Buffer, src []byte, levels int) {
	depth := 0
	newline := func(d int) {
		dst.WriteByte('\n')
		for range d {
			dst.WriteString("  ")
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case '"':
			end := stringEnd(src, i)
			dst.Write(src[i:end])
			i = end - 1
			continue
		case '{', '[':
			dst.WriteByte(c)
			depth++
			if depth <= levels && i+1 < len(src) && src[i+1] != '}' && src[i+1] != ']' {
				newline(depth)
			}
			continue
		case '}', ']':
			// In compact JSON only an empty container has its opening
			// bracket right before its closing one.
			if depth <= levels && i > 0 && src[i-1] != '{' && src[i-1] != '[' {
				newline(depth - 1)
			}
			depth--
			dst.WriteByte(c)
			continue
		}
		dst.WriteByte(c)
		switch {
		case depth > levels:
		case c == ',':
			newline(depth)
		case c == ':':
			dst.WriteByte(' ')
		}
	}
}

// Vertex returns the vertex with the given id, or nil.
func (p *Plan) Vertex(id string) *Vertex {
	for i := range p.Vertices {
		if p.Vertices[i].ID == id {
			return &p.Vertices[i]
		}
	}
	return nil
}

// Inputs returns the edges into vertex id, in plan order. An edge's position
// in this list is its input index (the port of its records at To).
func (p *Plan) Inputs(id string) []Edge {
	var in []Edge
	for _, e := range p.Edges {
		if e.To == id {
			in = append(in, e)
		}
	}
	return in
}

// Outputs returns the edges out of vertex id, in plan order.
func (p *Plan) Outputs(id string) []Edge {
	var out []Edge
	for _, e := range p.Edges {
		if e.From == id {
			out = append(out, e)
		}
	}
	return out
}

// Clone returns a deep copy of p.
func (p *Plan) Clone() *Plan {
	c := *p
	c.Vertices = slices.Clone(p.Vertices)
	for i := range c.Vertices {
		v := &c.Vertices[i]
		v.Config = slices.Clone(v.Config)
		v.Outputs = slices.Clone(v.Outputs)
		v.States = slices.Clone(v.States)
	}
	c.Edges = slices.Clone(p.Edges)
	if p.Checkpoint != nil {
		cp := *p.Checkpoint
		c.Checkpoint = &cp
	}
	if p.Restart != nil {
		r := *p.Restart
		c.Restart = &r
	}
	c.OnGuestError = p.OnGuestError.clone()
	return &c
}
