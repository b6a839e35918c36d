package tests

import (
	"encoding/json"
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

	// The running deploy's cluster has its one in-process worker, with
	// the job's subtasks on it.
	r := runCLI(t, dir, "workers", "-o", "json")
	var reply struct {
		Workers []struct {
			ID   string `json:"id"`
			Used int    `json:"used"`
			Live bool   `json:"live"`
		} `json:"workers"`
	}
	err = json.Unmarshal([]byte(r.stdout), &reply)
	ws := reply.Workers
	if r.code != 0 || err != nil || len(ws) != 1 || !ws[0].Live || ws[0].Used == 0 {
		t.Fatalf("workers -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = runCLI(t, dir, "workers")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "WORKER") || !strings.Contains(r.stdout, ws[0].ID) {
		t.Fatalf("workers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
