package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDryRunFailures: --dry-run fails, once and with exit 1, on what a
// deploy would fail on only once its job runs.
func TestDryRunFailures(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("a b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	plan := func(src, op, sink string) string {
		return `{"name":"dry","vertices":[
 {"id":"src","kind":"source","connector":"file","config":{"path":"` + src + `"}},
 {"id":"op","kind":"operator","operator":"` + op + `"},
 {"id":"out","kind":"sink","connector":"file","config":{"path":"` + sink + `"}}],
 "edges":[{"from":"src","to":"op"},{"from":"op","to":"out"}]}`
	}
	for _, c := range []struct {
		name, plan string
		flags      []string
		want       string
	}{
		{"unknown operator", plan("in.txt", "nosuch", "out.txt"), nil, `the module has no operator "nosuch"; it has ["filter" "upper"]`},
		{"missing source file", plan("missing.txt", "upper", "out.txt"), nil, `source "src": stat missing.txt: no such file or directory`},
		{"source is a directory", plan("empty", "upper", "out.txt"), nil, `source "src": empty is a directory`},
		{"missing sink directory", plan("in.txt", "upper", "nodir/out.txt"), nil, `sink "out": the directory of nodir/out.txt`},
		{"bad connector config", plan("in.txt", "upper", "out.txt"), []string{"--source", "src=gen:count=many"}, "count"},
		{"savepoint without checkpoints", plan("in.txt", "upper", "out.txt"), []string{"--from-savepoint", "empty"}, "--from-savepoint: starting from a savepoint needs checkpoints"},
		{"not a savepoint", plan("in.txt", "upper", "out.txt"), []string{"--from-savepoint", "empty", "--checkpoint-interval", "1s"}, "--from-savepoint: "},
	} {
		writePlan(t, dir, c.plan)
		r := runCLI(t, dir, append(append([]string{"deploy", "--dry-run", "--plan", "plan.json"}, c.flags...), mod)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", c.name, r.code, r.stdout, r.stderr, c.want)
		}
		if strings.Contains(r.stderr, "wstream_open: wstream_open:") {
			t.Errorf("%s: the call is named twice: %s", c.name, r.stderr)
		}
	}
	// The same plan, right: the graph, exit 0, nothing written.
	writePlan(t, dir, plan("in.txt", "upper", "out.txt"))
	r := runCLI(t, dir, "deploy", "--dry-run", "--plan", "plan.json", mod)
	if r.code != 0 || !strings.Contains(r.stdout, "src") {
		t.Fatalf("dry run of a good plan: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.txt")); err == nil {
		t.Fatal("a dry run wrote the sink's file")
	}
}
