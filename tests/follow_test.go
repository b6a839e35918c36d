package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFollowEvents: wstream follow prints a job's events as they happen
// (its state, its checkpoints when the server's data directory is on this
// host) and ends with its outcome and the exit status that tells it: a
// job cancelled from outside (3), one that finishes (0), one that fails
// (1). With -o json, stdout holds only the job's result, as REST's.
func TestFollowEvents(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	deployD := func(plan string) string {
		t.Helper()
		r := runCLI(t, dir, append([]string{"deploy", "-d", "-o", "json", "--plan", plan, mod}, srv.args()...)...)
		var rep struct {
			JobID string `json:"jobId"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.JobID == "" {
			t.Fatalf("deploy -d -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		return rep.JobID
	}

	// Cancelled from outside, with checkpoints on the way.
	id := deployD("plan.json")
	f := startEdge(t, dir, append([]string{"follow", id}, srv.args()...)...)
	clusterPoll(t, 2*time.Minute, "follow showed no completed checkpoint", func() bool {
		return strings.Contains(f.stderr.String(), "completed in") || f.exited()
	})
	if !strings.Contains(f.stderr.String(), "RUNNING (attempt 0)") {
		t.Errorf("follow showed no state:\n%s", f.stderr.String())
	}
	if r := runCLI(t, dir, append([]string{"cancel", id}, srv.args()...)...); r.code != 0 {
		t.Fatalf("cancel: exit %d\n%s", r.code, r.stderr)
	}
	if code := f.wait(t, 2*time.Minute); code != 3 || !strings.Contains(f.stderr.String(), "job "+id+" canceled: exit 3") {
		t.Errorf("follow of a cancelled job: exit %d, want 3 and the outcome line\n%s", code, f.stderr.String())
	}

	// Finished: exit 0, and -o json prints the result alone on stdout.
	bounded := strings.Replace(strings.Replace(endlessPlan, `"count":0,"rate":200`, `"count":300,"rate":100`, 1), `"name":"endless"`, `"name":"bounded"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "bounded.json"), []byte(bounded), 0o644); err != nil {
		t.Fatal(err)
	}
	id = deployD("bounded.json")
	r := runCLI(t, dir, append([]string{"follow", "-o", "json", id}, srv.args()...)...)
	var out struct {
		JobID  string `json:"jobId"`
		Result struct {
			State          string `json:"state"`
			DurationMillis *int64 `json:"durationMillis"`
			Metrics        []any  `json:"metrics"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil || out.JobID != id || out.Result.State != "finished" ||
		out.Result.DurationMillis == nil || len(out.Result.Metrics) == 0 || !strings.Contains(r.stderr, "finished: exit 0") {
		t.Errorf("follow -o json of a finishing job: exit %d, %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	// The same fields as GET /v1/jobs/{id} for the job and its result.
	m := httpLine.FindStringSubmatch(srv.proc.stderr.String())
	if m == nil {
		t.Fatalf("the server names no REST API:\n%s", srv.proc.stderr.String())
	}
	token := readToken(t, filepath.Join(srv.data, "auth", "admin.token"))
	var cliOut any
	if err := json.Unmarshal([]byte(r.stdout), &cliOut); err != nil {
		t.Fatal(err)
	}
	code, rest := restCall(t, http.MethodGet, m[1]+"/v1/jobs/"+id, token)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/jobs/%s: %d %v", id, code, rest)
	}
	sameShape(t, "follow", cliOut, onlyKeys(rest, "jobId", "result"), "")

	// cancel -o json answers as POST /v1/jobs/{id}/cancel does.
	a, b := deployD("plan.json"), deployD("plan.json")
	for _, j := range []string{a, b} {
		clusterPoll(t, time.Minute, "the job does not run", func() bool { return srv.jobState(t, dir, j) == "RUNNING" })
	}
	r = runCLI(t, dir, append([]string{"cancel", "-o", "json", a}, srv.args()...)...)
	if err := json.Unmarshal([]byte(r.stdout), &cliOut); r.code != 0 || err != nil {
		t.Fatalf("cancel -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if code, rest = restCall(t, http.MethodPost, m[1]+"/v1/jobs/"+b+"/cancel", token); code != http.StatusAccepted {
		t.Fatalf("POST /v1/jobs/%s/cancel: %d %v", b, code, rest)
	}
	sameShape(t, "cancel", cliOut, rest, "")

	// Failed: exit 1.
	if err := os.WriteFile(filepath.Join(dir, "fails.json"), []byte(`{"name":"fails","vertices":[
 {"id":"src","kind":"source","connector":"file","config":{"path":"`+filepath.Join(dir, "gone.txt")+`"}},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}],"restart":{"strategy":"none"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Only --dry-run checks the path beforehand: the source fails to open it.
	r = runCLI(t, dir, append([]string{"deploy", "-d", "--plan", "fails.json", mod}, srv.args()...)...)
	if r.code != 0 {
		t.Fatalf("deploy -d of the failing job: exit %d\n%s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	r = runCLI(t, dir, append([]string{"follow", id}, srv.args()...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "failed: exit 1") {
		t.Errorf("follow of a failing job: exit %d, want 1 and the outcome line\n%s", r.code, r.stderr)
	}
}
