package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataDirOwner: while a deploy runs on a data directory, a second
// deploy or server on it exits at once, naming the process that holds it,
// and leaves the running job's files alone.
func TestDataDirOwner(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	data := filepath.Join(dir, "wstream-data")
	first := startEdge(t, dir, "deploy", "--source", "gen:count=1000000,rate=100", mod)
	first.until(t, "the job running", false, func() bool {
		return strings.Contains(first.stderr.String(), "running")
	})
	url, err := os.ReadFile(filepath.Join(data, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"deploy", mod},
		{"server", "--listen", "127.0.0.1:0"},
	} {
		r := runCLI(t, dir, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "is used by process") || !strings.Contains(r.stderr, "deploy") {
			t.Fatalf("wstream %v beside a running deploy: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	if now, err := os.ReadFile(filepath.Join(data, "nats.url")); err != nil || string(now) != string(url) {
		t.Fatalf("the running deploy's nats.url changed: %q, %v", now, err)
	}
	if first.exited() {
		t.Fatalf("the first deploy ended: exit %d\n%s", first.code(), first.stderr.String())
	}
}
