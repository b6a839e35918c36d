package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// limitPlan is a valid plan of n operators in a row, each of parallelism
// p, none chained to the next (key edges): n+2 chains.
func limitPlan(n, p int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"name":"lim","parallelism":%d,"vertices":[{"id":"s","kind":"source","connector":"gen"}`, p)
	for i := range n {
		fmt.Fprintf(&b, `,{"id":"o%d","kind":"operator","operator":"op"}`, i)
	}
	b.WriteString(`,{"id":"k","kind":"sink","connector":"discard"}],"edges":[`)
	prev := "s"
	for i := range n {
		fmt.Fprintf(&b, `{"from":%q,"to":"o%d","partition":"key"},`, prev, i)
		prev = fmt.Sprintf("o%d", i)
	}
	fmt.Fprintf(&b, `{"from":%q,"to":"k","partition":"key"}]}`, prev)
	return b.String()
}

// nestedConfig is an operator config nested depth levels deep, each level
// an object with a string of filler bytes and the next level.
func nestedConfig(depth, filler int) string {
	level := `{"k":"` + strings.Repeat("x", filler) + `","a":`
	return strings.Repeat(level, depth) + "1" + strings.Repeat("}", depth)
}

// configPlan is base with the operator's config replaced.
func configPlan(config string) string {
	return strings.Replace(base, `"operator":"join",`, `"operator":"join","config":`+config+`,`, 1)
}

// checkLimitError checks that err is a *Error for limit at path whose text
// names the limit, its value and the path.
func checkLimitError(t *testing.T, err error, limit, path string, value int) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v, want a *job.Error for %s", err, limit)
	}
	if pe.Limit != limit || pe.Path != path {
		t.Errorf("error %q: limit %q at %q, want %q at %q", err, pe.Limit, pe.Path, limit, path)
	}
	prefix := "plan: "
	if path != "" {
		prefix += path + ": "
	}
	if want := fmt.Sprintf("the %s limit of %d", limit, value); !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to start %q and name %q", err, prefix, want)
	}
}

func TestDefaultLimits(t *testing.T) {
	want := Limits{MaxPlanBytes: 1 << 20, MaxDepth: 64, MaxVertices: 256, MaxEdges: 1024, MaxConfigBytes: 64 << 10,
		MaxVertexParallelism: 32, MaxKeyGroups: 32768, MaxSubtasks: 128, MaxIDBytes: 128, MaxNameBytes: 256}
	if got := DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	// Zero and negative fields take the defaults; others are kept.
	if got := (Limits{MaxVertices: -1, MaxEdges: 7}).withDefaults(); got.MaxVertices != DefaultMaxVertices || got.MaxEdges != 7 || got.MaxDepth != DefaultMaxDepth {
		t.Fatalf("withDefaults = %+v", got)
	}
}

func TestLimitPlanBytes(t *testing.T) {
	big := []byte(base + strings.Repeat(" ", DefaultMaxPlanBytes))
	_, err := Parse(big)
	checkLimitError(t, err, "MaxPlanBytes", "", DefaultMaxPlanBytes)
	if !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", len(big))) {
		t.Errorf("error %q does not give the plan's size", err)
	}
	_, err = Limits{MaxPlanBytes: 100}.Parse([]byte(base))
	checkLimitError(t, err, "MaxPlanBytes", "", 100)
	if _, err := (Limits{MaxPlanBytes: len(base)}).Parse([]byte(base)); err != nil {
		t.Errorf("a plan of exactly the limit: %v", err)
	}

	// Load reads no more than the limit allows.
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("Load: %v, want the file's name first", err)
	}
	checkLimitError(t, errors.Unwrap(err), "MaxPlanBytes", "", DefaultMaxPlanBytes)
}

func TestLimitDepth(t *testing.T) {
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	for _, tc := range []struct {
		name, plan, path string
		limits           Limits
		max              int
	}{
		{"config", configPlan(deep), `vertices[2] ("op").config`, Limits{}, 64},
		{"id after the config", strings.Replace(base, `{"id":"op","kind":"operator","operator":"join"`,
			`{"config":`+deep+`,"id":"op","kind":"operator","operator":"join"`, 1), `vertices[2] ("op").config`, Limits{}, 64},
		{"key case", strings.Replace(configPlan(deep), `"vertices":`, `"VERTICES":`, 1), `VERTICES[2] ("op").config`, Limits{}, 64},
		{"edge", strings.Replace(base, `{"from":"a","to":"op"}`, `{"from":"a","to":"op","x":`+deep+`}`, 1), `edges[0].x`, Limits{}, 64},
		{"checkpoint", strings.Replace(base, `"name":"v",`, `"name":"v","checkpoint":{"interval":`+deep+`},`, 1), `checkpoint.interval[0]`, Limits{}, 64},
		{"top level", `{"name":"v","x":` + deep + `}`, `x[0][0]`, Limits{}, 64},
		{"lowered", configPlan(`{"a":{"b":[1]}}`), `vertices[2] ("op").config`, Limits{MaxDepth: 5}, 5},
		{"the plan itself", base, `vertices[0]`, Limits{MaxDepth: 2}, 2},
		// Brackets in strings are data.
		{"brackets in strings", configPlan(`{"s":"` + deep + `","t":"\"[[[[[[[[\\"}`), "", Limits{MaxDepth: 5}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.limits.Parse([]byte(tc.plan))
			if tc.path == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			checkLimitError(t, err, "MaxDepth", tc.path, tc.max)
			if !strings.Contains(err.Error(), "at line ") {
				t.Errorf("error %q does not give the line and column", err)
			}
		})
	}
	// Depth is checked before decoding: a million levels fail as fast as
	// a hundred, without recursion.
	_, err := Parse([]byte(configPlan(strings.Repeat("[", 1_000_000))))
	checkLimitError(t, err, "MaxDepth", `vertices[2] ("op").config`, 64)

	// A config set after Parse (a plan built in Go, an override) is
	// checked by Validate.
	p := mustParse(t, base)
	p.Vertices[2].Config = json.RawMessage(deep)
	err = p.Validate()
	checkLimitError(t, err, "MaxDepth", `vertices[2] ("op").config`, 64)
	if !strings.Contains(err.Error(), "of the config") {
		t.Errorf("error %q does not say the position is in the config", err)
	}
	p.Vertices[2].Config = json.RawMessage(strings.Repeat("[", 61) + strings.Repeat("]", 61))
	if err := p.Validate(); err != nil {
		t.Errorf("a config at level 64: %v", err)
	}
}

func TestLimitVerticesAndEdges(t *testing.T) {
	_, err := Parse([]byte(limitPlan(DefaultMaxVertices-1, 1)))
	checkLimitError(t, err, "MaxVertices", "vertices", DefaultMaxVertices)
	if _, err := Parse([]byte(limitPlan(DefaultMaxVertices-2, 1))); err != nil {
		t.Errorf("%d vertices: %v", DefaultMaxVertices, err)
	}
	_, err = Limits{MaxVertices: 3}.Parse([]byte(base))
	checkLimitError(t, err, "MaxVertices", "vertices", 3)
	_, err = Limits{MaxEdges: 2}.Parse([]byte(base))
	checkLimitError(t, err, "MaxEdges", "edges", 2)

	// Validate counts again: vertices and edges added after Parse.
	p := mustParse(t, limitPlan(200, 1))
	for i := range DefaultMaxEdges {
		p.Edges = append(p.Edges, Edge{From: "s", To: fmt.Sprintf("o%d", i%200), Partition: PartitionRebalance})
	}
	checkLimitError(t, p.Validate(), "MaxEdges", "edges", DefaultMaxEdges)
	p = mustParse(t, base)
	checkLimitError(t, Limits{MaxVertices: 2}.Validate(p), "MaxVertices", "vertices", 2)
}

func TestLimitConfigBytes(t *testing.T) {
	config := `{"s":"` + strings.Repeat("x", DefaultMaxConfigBytes) + `"}`
	_, err := Parse([]byte(configPlan(config)))
	checkLimitError(t, err, "MaxConfigBytes", `vertices[2] ("op").config`, DefaultMaxConfigBytes)
	if !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", len(config))) {
		t.Errorf("error %q does not give the config's size", err)
	}
	_, err = Limits{MaxConfigBytes: 10}.Parse([]byte(strings.Replace(base, `{"count":10}`, `{"count":1000000}`, 1)))
	checkLimitError(t, err, "MaxConfigBytes", `vertices[1] ("b").config`, 10)

	p := mustParse(t, base)
	p.Vertices[0].Config = json.RawMessage(config)
	checkLimitError(t, p.Validate(), "MaxConfigBytes", `vertices[0] ("a").config`, DefaultMaxConfigBytes)
}

func TestLimitVertexParallelism(t *testing.T) {
	p := mustParse(t, strings.Replace(base, `"parallelism":2`, `"parallelism":96`, 1))
	checkLimitError(t, p.Validate(), "MaxVertexParallelism", "parallelism", DefaultMaxVertexParallelism)

	p = mustParse(t, base)
	p.Vertices[3].Parallelism = 33
	checkLimitError(t, p.Validate(), "MaxVertexParallelism", `vertices[3] ("out").parallelism`, DefaultMaxVertexParallelism)

	// An override is checked too: Validate runs after Apply.
	p = mustParse(t, base)
	if err := p.Apply(Overrides{VertexParallelism: map[string]int{"op": 96}}); err != nil {
		t.Fatal(err)
	}
	_, err := Build(p)
	checkLimitError(t, err, "MaxVertexParallelism", `vertices[2] ("op").parallelism`, DefaultMaxVertexParallelism)

	// A quota lowers it.
	p = mustParse(t, base)
	checkLimitError(t, Limits{MaxVertexParallelism: 1}.Validate(p), "MaxVertexParallelism", "parallelism", 1)
	if err := (Limits{MaxVertexParallelism: 2}).Validate(p); err != nil {
		t.Errorf("parallelism 2 under a limit of 2: %v", err)
	}
}

func TestLimitKeyGroups(t *testing.T) {
	p := mustParse(t, base)
	checkLimitError(t, Limits{MaxKeyGroups: 64}.Validate(p), "MaxKeyGroups", "maxParallelism", 64)
	if err := (Limits{MaxKeyGroups: 128}).Validate(p); err != nil {
		t.Errorf("maxParallelism 128 under a limit of 128: %v", err)
	}
	// The format's bound stays, whatever the limit.
	p.MaxParallelism = 1 << 16
	if err := (Limits{MaxKeyGroups: 1 << 20}).Validate(p); err == nil || !strings.Contains(err.Error(), "must be in [1, 32768]") {
		t.Errorf("maxParallelism 65536: %v", err)
	}
}

func TestLimitSubtasks(t *testing.T) {
	// Five chains of 32: 160 subtasks.
	p := mustParse(t, limitPlan(3, 32))
	err := p.Validate()
	checkLimitError(t, err, "MaxSubtasks", "vertices", DefaultMaxSubtasks)
	if !strings.Contains(err.Error(), "160 subtasks") || !strings.Contains(err.Error(), `vertices[0] ("s")`) {
		t.Errorf("error %q, want the count and the widest chain", err)
	}

	// The count is the graph's: chained vertices share their subtasks.
	for _, src := range []string{base, wordcount, chainPlan, limitPlan(3, 2)} {
		p := mustParse(t, src)
		g, err := Build(p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range g.Chains {
			n += c.Parallelism
		}
		if err := (Limits{MaxSubtasks: n}).Validate(p); err != nil {
			t.Errorf("plan %s: %d subtasks under a limit of %d: %v", p.Name, n, n, err)
		}
		checkLimitError(t, Limits{MaxSubtasks: n - 1}.Validate(p), "MaxSubtasks", "vertices", n-1)
	}
}

func TestLimitIDAndNameBytes(t *testing.T) {
	long := strings.Repeat("n", 300)
	for _, tc := range []struct {
		name   string
		mutate func(*Plan)
		limits Limits
		limit  string
		path   string
		max    int
	}{
		{"name", func(p *Plan) { p.Name = long }, Limits{}, "MaxIDBytes", "name", 128},
		{"vertex id", func(p *Plan) { p.Vertices[1].ID = long }, Limits{}, "MaxIDBytes", `vertices[1] ("` + long[:128] + `…").id`, 128},
		{"lowered id", nil, Limits{MaxIDBytes: 2}, "MaxIDBytes", `vertices[3] ("out").id`, 2},
		{"edge end", func(p *Plan) { p.Edges[0].To = long }, Limits{}, "MaxIDBytes", `edges[0] (a→` + long[:128] + `…).to`, 128},
		{"kind", func(p *Plan) { p.Vertices[0].Kind = long }, Limits{}, "MaxNameBytes", `vertices[0] ("a").kind`, 256},
		{"operator", func(p *Plan) { p.Vertices[2].Operator = long }, Limits{}, "MaxNameBytes", `vertices[2] ("op").operator`, 256},
		{"connector", func(p *Plan) { p.Vertices[3].Connector = long }, Limits{}, "MaxNameBytes", `vertices[3] ("out").connector`, 256},
		{"output", func(p *Plan) { p.Vertices[2].Outputs = []string{"main", long} }, Limits{}, "MaxNameBytes", `vertices[2] ("op").outputs[1]`, 256},
		{"lowered name", nil, Limits{MaxNameBytes: 6}, "MaxNameBytes", `vertices[2] ("op").kind`, 6},
		{"edge output", func(p *Plan) { p.Edges[2].Output = long }, Limits{}, "MaxNameBytes", `edges[2] (op→out).output`, 256},
		{"partition", func(p *Plan) { p.Edges[1].Partition = long }, Limits{}, "MaxNameBytes", `edges[1] (b→op).partition`, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, base)
			if tc.mutate != nil {
				tc.mutate(p)
			}
			err := tc.limits.Validate(p)
			checkLimitError(t, err, tc.limit, tc.path, tc.max)
			if len(err.Error()) > 600 {
				t.Errorf("error of %d bytes: long names must be cut", len(err.Error()))
			}
		})
	}
}

// TestLimitErrorsStayShort: a hostile plan's strings are cut in every
// error that quotes them.
func TestLimitErrorsStayShort(t *testing.T) {
	long := strings.Repeat("z", 100_000)
	for _, mutate := range []func(*Plan){
		func(p *Plan) { p.Vertices[0].Outputs = []string{"x", long, "y"} },
		func(p *Plan) { p.Vertices[3].Outputs = slicesOf(long, 1000) },
		func(p *Plan) { p.Vertices[0].ID = long },
		func(p *Plan) { p.Edges[0].From = long },
	} {
		p := mustParse(t, base)
		mutate(p)
		if err := p.Validate(); err == nil || len(err.Error()) > 2000 {
			t.Errorf("Validate() = an error of %d bytes, want a short one", len(fmt.Sprint(err)))
		}
	}
}

func slicesOf(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestParseIsDefaultLimits: Parse, Validate and Build are their Limits{}
// forms.
func TestParseIsDefaultLimits(t *testing.T) {
	p1, err1 := Parse([]byte(wordcount))
	p2, err2 := Limits{}.Parse([]byte(wordcount))
	if err1 != nil || err2 != nil || string(p1.JSON()) != string(p2.JSON()) {
		t.Fatalf("Parse and Limits{}.Parse differ: %v %v", err1, err2)
	}
	if err := (Limits{}).Validate(p1); err != nil {
		t.Fatal(err)
	}
	if _, err := (Limits{}).Build(p2); err != nil {
		t.Fatal(err)
	}
}

// nestedPlan is configPlan with a config of about size bytes nested one
// level per 23 bytes.
func nestedPlan(size int) []byte {
	return []byte(configPlan(nestedConfig(size/23, 10)))
}

// allocated returns the bytes f allocates on the heap: the work it does,
// counted the same on a busy machine as on an idle one.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestNestedConfigLinear: parsing a plan with a deeply nested config and
// writing it back (JSON, as the coordinator does for every deployment and
// record) takes work and output in proportion to its size, not to size ×
// depth. Configs nested one level per 23 bytes, 20 KB (870 levels) and
// 200 KB (8700 levels), under limits raised to let them through: ten
// times the size must cost about ten times as much, not a hundred.
func TestNestedConfigLinear(t *testing.T) {
	limits := Limits{MaxDepth: 9000, MaxConfigBytes: 1 << 20}
	var cost [2]uint64
	for i, size := range []int{20_000, 200_000} {
		plan := nestedPlan(size)
		var out []byte
		cost[i] = allocated(func() {
			p, err := limits.Parse(plan)
			if err != nil {
				t.Fatal(err)
			}
			if err := limits.Validate(p); err != nil {
				t.Fatal(err)
			}
			out = p.JSON()
		})
		if len(out) > 2*len(plan)+4096 {
			t.Fatalf("%d-byte plan: JSON wrote %d bytes, want at most about twice as many", len(plan), len(out))
		}
		if _, err := limits.Parse(out); err != nil {
			t.Fatalf("JSON does not parse back: %v", err)
		}
		if per := cost[i] / uint64(len(plan)); per > 2000 {
			t.Errorf("%d-byte plan: %d bytes allocated, %d per byte of plan", len(plan), cost[i], per)
		}
		// Under the default limits the same plan is refused at once.
		if _, err := Parse(plan); err == nil || err.(*Error).Limit != "MaxDepth" {
			t.Errorf("%d-byte plan under the default limits: %v, want the MaxDepth limit", len(plan), err)
		}
	}
	if cost[1] > 20*cost[0] {
		t.Errorf("ten times the config cost %.1f times the work (%d bytes allocated, then %d): not linear",
			float64(cost[1])/float64(cost[0]), cost[0], cost[1])
	}
}

// BenchmarkNestedConfig parses a plan with a deeply nested config and
// writes it back, as deployments do (see TestNestedConfigLinear).
func BenchmarkNestedConfig(b *testing.B) {
	limits := Limits{MaxDepth: 9000, MaxConfigBytes: 1 << 20}
	for _, size := range []int{20_000, 200_000} {
		plan := nestedPlan(size)
		b.Run(fmt.Sprintf("%dKB", size/1000), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(plan)))
			for b.Loop() {
				p, err := limits.Parse(plan)
				if err != nil {
					b.Fatal(err)
				}
				_ = p.JSON()
			}
		})
	}
}

// Names reach terminals and logs: control and formatting characters in
// them are refused, quoted in the error.
func TestNamesHoldNoControlCharacters(t *testing.T) {
	for _, c := range []struct{ name, field string }{
		{`"operator":"\u001b[2Jsplit"`, `vertices[1] ("op").operator`},
		{`"operator":"split\u202e"`, `vertices[1] ("op").operator`},
		{`"operator":"split","outputs":["main","\r\u0007late"]`, `vertices[1] ("op").outputs[1]`},
	} {
		plan := `{"name":"p","vertices":[{"id":"src","kind":"source","connector":"gen"},{"id":"op","kind":"operator",` + c.name +
			`},{"id":"sink","kind":"sink","connector":"discard"}],"edges":[{"from":"src","to":"op"},{"from":"op","to":"sink"}]}`
		p, err := Parse([]byte(plan))
		if err == nil {
			err = p.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "control or formatting character") {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x1b\r\a\u202e") {
			t.Errorf("%s: the error holds the raw character: %q", c.name, err)
		}
	}
}
