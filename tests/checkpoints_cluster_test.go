package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckpointsThroughCluster: `wstream checkpoints` of a job whose
// files are not on this host reads its history through --nats (the
// leading coordinator's REST API, found in its lease), with the NATS
// credentials and the REST token of a context, and prints what the
// server's data directory says.
func TestCheckpointsThroughCluster(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	r := runCLI(t, dir, append([]string{"deploy", "-d", "--plan", "plan.json", mod}, srv.args()...)...)
	if r.code != 0 {
		t.Fatalf("deploy -d: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	type list struct {
		JobID   string `json:"jobId"`
		History []struct {
			ID     int64  `json:"id"`
			Kind   string `json:"kind"`
			Status string `json:"status"`
		} `json:"history"`
	}
	local := func() list {
		t.Helper()
		r := runCLI(t, dir, "checkpoints", "-o", "json", "--data", srv.data, id)
		var l list
		if err := json.Unmarshal([]byte(r.stdout), &l); r.code != 0 || err != nil {
			t.Fatalf("checkpoints --data: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		return l
	}
	clusterPoll(t, 2*time.Minute, "no two checkpoints", func() bool { return len(local().History) >= 2 })

	// A client elsewhere: a data directory of its own, the cluster's
	// credentials and token in a context.
	token, err := os.ReadFile(filepath.Join(srv.data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"WSTREAM_CONFIG=" + filepath.Join(dir, "contexts.json")}
	if r := runWith(t, dir, env, time.Minute, "context", "add", "--nats", srv.url, "--nats-creds", filepath.Join(srv.data, "auth", "admin.creds"),
		"--token", strings.TrimSpace(string(token)), "--data", filepath.Join(dir, "client"), "prod"); r.code != 0 {
		t.Fatalf("context add: exit %d\n%s", r.code, r.stderr)
	}
	r = runWith(t, dir, env, time.Minute, "checkpoints", "-o", "json", id)
	var remote list
	if err := json.Unmarshal([]byte(r.stdout), &remote); r.code != 0 || err != nil || remote.JobID != id || len(remote.History) < 2 {
		t.Fatalf("checkpoints through the cluster: exit %d, %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	byID := map[int64]string{}
	for _, h := range local().History {
		byID[h.ID] = h.Kind + " " + h.Status
	}
	for _, h := range remote.History {
		if got := h.Kind + " " + h.Status; byID[h.ID] != got {
			t.Errorf("checkpoint %d: %q through the cluster, %q in the data directory", h.ID, got, byID[h.ID])
		}
	}
	// The table too, and the only job when none is named.
	r = runWith(t, dir, env, time.Minute, "checkpoints")
	if r.code != 0 || !strings.Contains(r.stdout, "completed") {
		t.Errorf("checkpoints (table) through the cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runWith(t, dir, env, time.Minute, "checkpoints", "nope"); r.code != 1 || !strings.Contains(r.stderr, "nope") {
		t.Errorf("checkpoints of no job through the cluster: exit %d\n%s", r.code, r.stderr)
	}
}
