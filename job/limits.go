package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// Plans come from modules, which may be hostile: every dimension of a plan
// that makes the host parse, store, send or run more is bounded. The
// defaults suit one shared host; a Limits value lowers (a tenant's quota) or
// raises them.
const (
	// DefaultMaxPlanBytes bounds the plan's JSON as given to Parse.
	DefaultMaxPlanBytes = 1 << 20
	// DefaultMaxDepth bounds the nesting of the plan's JSON: the plan object
	// is level 1, the vertices list level 2, a vertex level 3, so a vertex's
	// config object is level 4 and its contents may nest 60 levels more.
	DefaultMaxDepth = 64
	// DefaultMaxVertices and DefaultMaxEdges bound the plan's lists.
	DefaultMaxVertices = 256
	DefaultMaxEdges    = 1024
	// DefaultMaxConfigBytes bounds one vertex's config, as written in the
	// plan (and, after Normalize, in canonical form).
	DefaultMaxConfigBytes = 64 << 10
	// DefaultMaxVertexParallelism bounds the plan's parallelism and each
	// vertex's: every subtask costs a sandbox, a state store and channels.
	DefaultMaxVertexParallelism = 32
	// DefaultMaxKeyGroups bounds maxParallelism, the number of key groups;
	// it is the format's own bound.
	DefaultMaxKeyGroups = abi.MaxMaxParallelism
	// DefaultMaxSubtasks bounds the job's subtasks: the sum over its chains
	// of their parallelism.
	DefaultMaxSubtasks = 128
	// DefaultMaxIDBytes bounds the job name and vertex ids, which become
	// parts of file names and NATS subjects.
	DefaultMaxIDBytes = 128
	// DefaultMaxNameBytes bounds the other names in a plan: kinds,
	// operators, connectors, outputs and partitions. It is the ABI's bound
	// on output names.
	DefaultMaxNameBytes = operator.MaxNameSize
)

// Limits bound a plan. A field ≤ 0 takes its default (DefaultMax...), so
// Limits{} is the defaults and Limits{MaxVertexParallelism: 4} lowers only
// the parallelism. Parse, Validate and Build use the defaults; Limits'
// methods of the same names use the limits given.
//
// Parse checks what bounds its own work (size, depth, the number of
// vertices and edges, config sizes) before decoding what they bound;
// Validate checks everything, after any overrides.
type Limits struct {
	MaxPlanBytes         int
	MaxDepth             int
	MaxVertices          int
	MaxEdges             int
	MaxConfigBytes       int
	MaxVertexParallelism int
	MaxKeyGroups         int
	MaxSubtasks          int
	MaxIDBytes           int
	MaxNameBytes         int
}

// DefaultLimits returns the default limits, every field set.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxPlanBytes, DefaultMaxPlanBytes)
	def(&l.MaxDepth, DefaultMaxDepth)
	def(&l.MaxVertices, DefaultMaxVertices)
	def(&l.MaxEdges, DefaultMaxEdges)
	def(&l.MaxConfigBytes, DefaultMaxConfigBytes)
	def(&l.MaxVertexParallelism, DefaultMaxVertexParallelism)
	def(&l.MaxKeyGroups, DefaultMaxKeyGroups)
	def(&l.MaxSubtasks, DefaultMaxSubtasks)
	def(&l.MaxIDBytes, DefaultMaxIDBytes)
	def(&l.MaxNameBytes, DefaultMaxNameBytes)
	return l
}

// Load reads and parses the plan file at path under l. It reads no more
// of the file than the plan may hold.
func (l Limits) Load(path string) (*Plan, error) {
	l = l.withDefaults()
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(l.MaxPlanBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if len(data) > l.MaxPlanBytes {
		return nil, fmt.Errorf("%s: %w", path, limitErrorf("", "MaxPlanBytes", "more than %d bytes exceed the MaxPlanBytes limit of %d", l.MaxPlanBytes, l.MaxPlanBytes))
	}
	p, err := l.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// checkCounts checks the number of vertices and edges.
func (l Limits) checkCounts(vertices, edges int) error {
	if vertices > l.MaxVertices {
		return limitErrorf("vertices", "MaxVertices", "%d vertices exceed the MaxVertices limit of %d", vertices, l.MaxVertices)
	}
	if edges > l.MaxEdges {
		return limitErrorf("edges", "MaxEdges", "%d edges exceed the MaxEdges limit of %d", edges, l.MaxEdges)
	}
	return nil
}

// checkConfigSize checks the size of vertex i's config as given (raw).
func (l Limits) checkConfigSize(i int, v *Vertex, raw []byte) error {
	if len(raw) > l.MaxConfigBytes {
		return limitErrorf(vertexPath(i, v)+".config", "MaxConfigBytes", "%d bytes exceed the MaxConfigBytes limit of %d", len(raw), l.MaxConfigBytes)
	}
	return nil
}

func limitErrorf(path, limit, format string, args ...any) *Error {
	return &Error{Path: path, Message: fmt.Sprintf(format, args...), Limit: limit}
}

// checkLen reports a string of the plan longer than most bytes, the value
// of limit.
func checkLen(path, limit string, s string, most int) error {
	if len(s) <= most {
		return nil
	}
	return limitErrorf(path, limit, "%s (%d bytes) exceeds the %s limit of %d", quote(s), len(s), limit, most)
}

// shown is how much of a string of the plan an error message shows: plans
// may come from hostile modules, and errors reach terminals and logs.
const shown = 128

// short cuts s to the first shown bytes (whole runes), marking the cut.
func short(s string) string {
	if len(s) <= shown {
		return s
	}
	cut := shown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// quote quotes s, cut to shown bytes, for an error message.
func quote(s string) string { return strconv.Quote(short(s)) }

// deepAt returns the offset of the first bracket of data nested deeper
// than limit levels, or -1. It walks data once, without recursion, minding
// only strings and brackets, so that nesting is refused before a decoder
// recurses into it; whether data is valid JSON is for the decoder to say.
func deepAt(data []byte, limit int) int {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = stringEnd(data, i) - 1
		case '{', '[':
			if depth++; depth > limit {
				return i
			}
		case '}', ']':
			depth--
		}
	}
	return -1
}

// depthError reports plan JSON nested too deep at offset (from deepAt),
// naming the place down to a field of the plan, of a vertex (with its id)
// or of an edge.
func depthError(data []byte, offset, limit int) *Error {
	// Only the first three levels (plan, list, vertex or edge) name the
	// place; deeper ones are counted.
	type level struct {
		array bool
		index int    // arrays: the current element
		key   []byte // objects: the current key, quoted
		value bool   // objects: past the current key's colon
		start int    // the offset of the bracket that opened it
	}
	var stack []level
	depth := 0
	for i := 0; i < offset; i++ {
		switch c := data[i]; c {
		case '"':
			end := stringEnd(data, i)
			if depth >= 1 && depth <= 3 {
				if f := &stack[depth-1]; !f.array && !f.value {
					f.key = data[i:end]
				}
			}
			i = end - 1
		case '{', '[':
			if depth++; depth <= 3 {
				stack = append(stack[:depth-1], level{array: c == '[', start: i})
			}
		case '}', ']':
			depth = max(depth-1, 0)
		case ':':
			if depth >= 1 && depth <= 3 {
				stack[depth-1].value = true
			}
		case ',':
			if depth >= 1 && depth <= 3 {
				if f := &stack[depth-1]; f.array {
					f.index++
				} else {
					f.key, f.value = nil, false
				}
			}
		}
	}
	path := ""
	at := stack[:min(depth, len(stack))]
	for j, f := range at {
		switch {
		case f.array:
			path += "[" + strconv.Itoa(f.index) + "]"
			if j == 1 && keyIs(at[0].key, "vertices") && len(at) > 2 && !at[2].array {
				if id, ok := vertexID(data, at[2].start); ok {
					path += " (" + quote(id) + ")"
				}
			}
		case f.key != nil:
			path = joinPath(path, short(unquote(f.key)))
		}
	}
	line, col := position(data, int64(offset)+1)
	return limitErrorf(path, "MaxDepth", "JSON nested deeper than the MaxDepth limit of %d levels at line %d, column %d", limit, line, col)
}

// vertexID returns the id of the vertex object that starts at data[start],
// which may come after the place that was nested too deep.
func vertexID(data []byte, start int) (string, bool) {
	depth := 0
	var key []byte
	value := false
	for i := start; i < len(data); i++ {
		switch data[i] {
		case '"':
			end := stringEnd(data, i)
			if depth == 1 {
				if !value {
					key = data[i:end]
				} else if keyIs(key, "id") {
					return unquote(data[i:end]), true
				}
			}
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return "", false
			}
		case ':':
			if depth == 1 {
				value = true
			}
		case ',':
			if depth == 1 {
				key, value = nil, false
			}
		}
	}
	return "", false
}

// stringEnd returns the offset just past the JSON string that starts at
// data[i] (a quote), or len(data) for an unterminated one.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// unquote returns the JSON string tok decoded, or as written when it does
// not decode.
func unquote(tok []byte) string {
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return string(tok)
	}
	return s
}

// keyIs reports whether the quoted key tok names field: encoding/json
// matches field names without regard to case.
func keyIs(tok []byte, field string) bool {
	if len(tok) < 2 || len(tok) > 2*len(field)+64 {
		return false
	}
	return bytes.EqualFold([]byte(unquote(tok)), []byte(field))
}
