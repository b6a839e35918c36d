package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/wstream/wstream/internal/strictjson"
)

// fullPlan sets every field a plan's author controls, each in its exact
// spelling.
const fullPlan = `{
 "name": "t", "maxParallelism": 128, "parallelism": 1,
 "vertices": [
  {"id": "src", "kind": "source", "connector": "jetstream", "config": {"stream": "S", "subject": "in.>"}, "parallelism": 1, "outputs": ["main"]},
  {"id": "op", "kind": "operator", "operator": "o", "config": {"k": 1}, "states": [{"name": "s", "kind": "value", "version": 2}]},
  {"id": "sink", "kind": "sink", "connector": "jetstream", "config": {"stream": "S", "subject": "out"}}
 ],
 "edges": [
  {"from": "src", "to": "op", "partition": "key", "output": "main"},
  {"from": "op", "to": "sink"}
 ],
 "checkpoint": {"interval": 1000, "mode": "aligned", "alignedTimeout": 10, "timeout": 60000, "minPause": 5,
  "maxConcurrent": 1, "tolerableFailures": 2, "retain": 3, "incremental": false, "compression": 2,
  "savepointFormat": "native", "localRecovery": true, "storage": "nats-obj://B"},
 "restart": {"strategy": "exponential-backoff", "attempts": 3, "delay": 10, "maxDelay": 100, "multiplier": 3},
 "onGuestError": {"policy": "dead-letter", "sink": {"connector": "jetstream", "config": {"stream": "D", "subject": "d"}},
  "maxDeadLetters": 5, "budgetPer": "checkpoint"}
}`

// planObjects are the objects of a plan, by their path in fullPlan, with
// the Go type each decodes into and the error path Parse reports there.
var planObjects = []struct {
	at   []string
	typ  reflect.Type
	path string
}{
	{nil, reflect.TypeFor[wirePlan](), ""},
	{[]string{"vertices", "0"}, reflect.TypeFor[wireVertex](), "vertices[0]"},
	{[]string{"vertices", "1"}, reflect.TypeFor[wireVertex](), "vertices[1]"},
	{[]string{"vertices", "1", "states", "0"}, reflect.TypeFor[StateDecl](), "vertices[1].states[0]"},
	{[]string{"edges", "0"}, reflect.TypeFor[wireEdge](), "edges[0]"},
	{[]string{"checkpoint"}, reflect.TypeFor[CheckpointSettings](), "checkpoint"},
	{[]string{"restart"}, reflect.TypeFor[RestartSettings](), "restart"},
	{[]string{"onGuestError"}, reflect.TypeFor[GuestErrorSettings](), "onGuestError"},
	{[]string{"onGuestError", "sink"}, reflect.TypeFor[DeadLetterSink](), "onGuestError.sink"},
}

func decodeTree(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(fullPlan), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// objectAt returns the object at path within tree.
func objectAt(tree any, at []string) map[string]any {
	for _, k := range at {
		switch x := tree.(type) {
		case map[string]any:
			tree = x[k]
		case []any:
			i, _ := strconv.Atoi(k)
			tree = x[i]
		}
	}
	return tree.(map[string]any)
}

// caseVariants returns name in other cases: lower, UPPER, Title, mixed.
func caseVariants(name string) []string {
	r := []rune(name)
	var alt []rune
	for i, c := range r {
		if i%2 == 0 {
			alt = append(alt, unicode.ToUpper(c))
		} else {
			alt = append(alt, unicode.ToLower(c))
		}
	}
	var out []string
	for _, s := range []string{strings.ToLower(name), strings.ToUpper(name),
		string(unicode.ToUpper(r[0])) + string(r[1:]), string(alt)} {
		if s != name && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestPlanFullyTyped: the full plan parses and validates, and sets every
// field of every object a plan has (so that a field added to a plan's
// types must be added here, and is then covered by the case test).
func TestPlanFullyTyped(t *testing.T) {
	tree := decodeTree(t)
	for _, o := range planObjects {
		obj := objectAt(tree, o.at)
		for _, f := range strictjson.Fields(o.typ) {
			if _, ok := obj[f]; !ok && !(o.path == "vertices[0]" && (f == "operator" || f == "states")) &&
				!(o.path == "vertices[1]" && (f == "connector" || f == "parallelism" || f == "outputs")) {
				t.Errorf("%s: the full plan does not set %q", o.path, f)
			}
		}
	}
	p, err := Parse([]byte(fullPlan))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(p); err != nil {
		t.Fatal(err)
	}
	if c := p.Checkpoint; c.Storage != "nats-obj://B" || c.IncrementalOn() || c.CompressionLevel() != 2 || !c.LocalRecovery || c.Retain != 3 {
		t.Errorf("checkpoint decoded as %+v", *c)
	}
	if g := p.OnGuestError; g.Sink == nil || g.Sink.Connector != "jetstream" || g.BudgetPer != BudgetPerCheckpoint {
		t.Errorf("onGuestError decoded as %+v", *g)
	}
	if s := p.Vertices[1].States; len(s) != 1 || s[0].Version != 2 {
		t.Errorf("states decoded as %+v", s)
	}
}

// TestPlanFieldNamesExact: every field of every object of a plan, in
// every other case, is refused by Parse with its path, the name as
// written and the right spelling — alone or beside the exact spelling.
func TestPlanFieldNamesExact(t *testing.T) {
	for _, o := range planObjects {
		for _, f := range strictjson.Fields(o.typ) {
			for _, v := range caseVariants(f) {
				for _, keep := range []bool{false, true} {
					tree := decodeTree(t)
					obj := objectAt(tree, o.at)
					val, ok := obj[f]
					if !ok {
						val = ""
					}
					if !keep {
						delete(obj, f)
					}
					obj[v] = val
					data, _ := json.Marshal(tree)
					_, err := Parse(data)
					want := fmt.Sprintf(`unknown field %q: did you mean %q? (field names are case-sensitive)`, v, f)
					var pe *Error
					if !errors.As(err, &pe) || pe.Path != o.path || pe.Message != want {
						t.Errorf("%s: %q for %q (exact kept: %v): got %v, want path %q, %s", o.path, v, f, keep, err, o.path, want)
					}
				}
			}
		}
	}
}

// TestPlanConnectorConfigNamesExact: a vertex's or the dead-letter sink's
// connector config with a field in another case is refused when the plan
// is validated, naming where.
func TestPlanConnectorConfigNamesExact(t *testing.T) {
	for _, tc := range []struct {
		at   []string
		key  string
		want string
	}{
		{[]string{"vertices", "0", "config"}, "URL", `plan: vertices[0] ("src").config.URL: unknown field: did you mean "url"? (field names are case-sensitive)`},
		{[]string{"vertices", "0", "config"}, "Creds", `plan: vertices[0] ("src").config.Creds: unknown field: did you mean "creds"?`},
		{[]string{"vertices", "2", "config"}, "Url", `plan: vertices[2] ("sink").config.Url: unknown field: did you mean "url"?`},
		{[]string{"vertices", "2", "config"}, "CREDS", `plan: vertices[2] ("sink").config.CREDS: unknown field: did you mean "creds"?`},
		{[]string{"onGuestError", "sink", "config"}, "TlsCa", `plan: onGuestError.sink: connector jetstream: config.TlsCa: unknown field: did you mean "tlsCA"?`},
	} {
		tree := decodeTree(t)
		objectAt(tree, tc.at)[tc.key] = "x"
		data, _ := json.Marshal(tree)
		p, err := Parse(data)
		if err == nil {
			_, err = Build(p)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v %s: got %v, want %s", tc.at, tc.key, err, tc.want)
		}
	}
}

func TestPlanDuplicateField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"name":"a","name":"b"}`, `plan: field "name" given twice`},
		{`{"checkpoint":{"storage":"nats-obj://A","storage":"/etc"}}`, `plan: checkpoint: field "storage" given twice`},
		{`{"vertices":[{"id":"a","states":[{"name":"s","name":"t"}]}]}`, `plan: vertices[0].states[0]: field "name" given twice`},
	} {
		if _, err := Parse([]byte(tc.in)); err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%s) = %v, want %s", tc.in, err, tc.want)
		}
	}
}
