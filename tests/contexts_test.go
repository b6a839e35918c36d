package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContexts: a context saved with `wstream context add` gives every
// cluster command its --nats and --data (the admin's credentials with
// them); a flag, then an environment variable, win over it.
func TestContexts(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	cfg := filepath.Join(dir, "config", "contexts.json")
	env := []string{"WSTREAM_CONFIG=" + cfg}
	run := func(args ...string) result {
		t.Helper()
		return runWith(t, dir, env, 3*time.Minute, args...)
	}
	if r := run("context", "add", "dev", "--nats", srv.url, "--data", srv.data); r.code != 0 || !strings.Contains(r.stderr, "selected") {
		t.Fatalf("context add: exit %d\n%s", r.code, r.stderr)
	}
	if r := run("context", "add", "broken", "--nats", "nats://127.0.0.1:1", "--nats-token", "sekrit"); r.code != 0 {
		t.Fatalf("context add broken: exit %d\n%s", r.code, r.stderr)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the contexts file: %v, %v; want mode 0600", fi, err)
	}
	r := run("context", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, "*  dev") || strings.Contains(r.stdout, "sekrit") || !strings.Contains(r.stdout, "--nats-token ***") {
		t.Fatalf("context ls: exit %d\n%s", r.code, r.stdout)
	}

	// No flags: the selected context's cluster.
	r = run("deploy", "-d", "--plan", "plan.json", mod)
	if r.code != 0 {
		t.Fatalf("deploy -d with the context: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	listed := func(r result) bool {
		var list struct {
			Jobs []struct {
				JobID string `json:"jobId"`
			} `json:"jobs"`
		}
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &list) == nil && len(list.Jobs) == 1 && list.Jobs[0].JobID == id
	}
	if r := run("list", "-o", "json"); !listed(r) {
		t.Fatalf("list with the context: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// --context picks another; a flag beats it; WSTREAM_CONTEXT as well.
	if r := run("--context", "broken", "list"); r.code != 1 || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("list with context broken: exit %d\n%s", r.code, r.stderr)
	}
	if r := run("--context", "broken", "list", "-o", "json", "--nats", srv.url, "--data", srv.data); !listed(r) {
		t.Fatalf("a flag does not win over the context: exit %d\n%s", r.code, r.stderr)
	}
	if r := runWith(t, dir, append(env, "WSTREAM_CONTEXT=broken"), time.Minute, "list"); r.code != 1 {
		t.Fatalf("WSTREAM_CONTEXT=broken list: exit %d\n%s", r.code, r.stderr)
	}
	if r := runWith(t, dir, append(env, "WSTREAM_CONTEXT=broken", "WSTREAM_NATS="+srv.url, "WSTREAM_NATS_TOKEN="), time.Minute, "list", "--data", srv.data); r.code != 0 {
		t.Fatalf("WSTREAM_NATS does not win over the context: exit %d\n%s", r.code, r.stderr)
	}
	if r := run("cancel", id); r.code != 0 {
		t.Fatalf("cancel with the context: exit %d\n%s", r.code, r.stderr)
	}

	// select, rm, and no context at all.
	if r := run("context", "select", "broken"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := run("list"); r.code != 1 {
		t.Fatalf("list with broken selected: exit %d", r.code)
	}
	if r := run("context", "rm", "broken"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := run("list"); r.code != 1 || !strings.Contains(r.stderr, "no wstream is running with data directory wstream-data") {
		t.Fatalf("list with no context selected: exit %d\n%s", r.code, r.stderr)
	}
	if r := run("--context", "gone", "list"); r.code != 2 || !strings.Contains(r.stderr, `no context "gone"`) {
		t.Fatalf("--context gone: exit %d\n%s", r.code, r.stderr)
	}
}
