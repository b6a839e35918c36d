package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

var update = flag.Bool("update", false, "rewrite the golden shapes in testdata/")

// endlessPlan is an unbounded job that checkpoints every 200 ms.
const endlessPlan = `{"name":"endless","parallelism":2,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"src","kind":"source","connector":"gen","config":{"count":0,"rate":2000,"words":2}},
  {"id":"upper","kind":"operator","operator":"upper"},
  {"id":"out","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[{"from":"src","to":"upper"},{"from":"upper","to":"out","partition":"rebalance"}]}`

// startCluster starts the embedded default with its HTTP listener, as
// `wstream deploy` does.
func startCluster(t *testing.T) (*engine.Engine, string, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := engine.Start(context.Background(), engine.Options{DataDir: dir, HTTP: "127.0.0.1:0", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	u := e.HTTPURL()
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("the API listens at %q, want a loopback URL", u)
	}
	b, err := os.ReadFile(engine.HTTPURLFile(dir))
	if err != nil || strings.TrimSpace(string(b)) != u {
		t.Fatalf("%s holds %q (%v), want %s", engine.HTTPURLFile(dir), b, err, u)
	}
	return e, u, dir
}

// submit runs a job of plan with the mapfilter example module.
func submit(t *testing.T, e *engine.Engine, plan string) string {
	t.Helper()
	return submitModule(t, e, "mapfilter", plan)
}

// submitModule runs a job of plan with an example module.
func submitModule(t *testing.T, e *engine.Engine, module, plan string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := testmod.GoModule(t, "examples/wasm/go/"+module)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{ModulePath: mod, PlanPath: path})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// call makes a request and decodes its JSON answer into a generic value,
// failing unless the status is want.
func call(t *testing.T, method, url, token, body string, want int) any {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, res.StatusCode, b, want)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: content type %q", method, url, ct)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %v in %s", method, url, err, b)
	}
	return v
}

func get(t *testing.T, url string) map[string]any {
	t.Helper()
	return call(t, http.MethodGet, url, "", "", http.StatusOK).(map[string]any)
}

// field walks a decoded JSON value along a dotted path ("counts.completed").
func field(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func num(v any, path string) float64 {
	f, _ := field(v, path).(float64)
	return f
}

func str(v any, path string) string {
	s, _ := field(v, path).(string)
	return s
}

// waitFor polls cond until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// shape replaces a decoded JSON value's leaves by their types, keeping
// the keys: what the golden files pin down. An array becomes its first
// element's shape; paths in skip (dotted, from the root) are left out.
func shape(v any, path string, skip map[string]bool) any {
	if skip[path] {
		return "(not compared)"
	}
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out[k] = shape(x, p, skip)
		}
		return out
	case []any:
		if len(v) == 0 {
			return []any{}
		}
		return []any{shape(v[0], path+"[]", skip)}
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return nil
	}
	return fmt.Sprintf("%T", v)
}

// checkShape compares v's shape with testdata/name.golden (-update
// rewrites it).
func checkShape(t *testing.T, name string, v any, skip ...string) {
	t.Helper()
	sk := map[string]bool{}
	for _, s := range skip {
		sk[s] = true
	}
	got, err := json.MarshalIndent(shape(v, "", sk), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update ./api/ to write it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the shape of %s changed:\n%s\nwant (testdata/%s.golden):\n%s", name, got, name, want)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
