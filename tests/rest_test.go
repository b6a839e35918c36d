package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// restCall makes a REST request with a bearer token and decodes the JSON
// answer; it returns the status.
func restCall(t *testing.T, method, url, token string) (int, map[string]any) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, url, body)
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
	var v map[string]any
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, url, res.StatusCode, b)
	}
	return res.StatusCode, v
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

var httpLine = regexp.MustCompile(`web UI and REST API at (http://127\.0\.0\.1:\d+)`)

// TestRESTTenants runs `wstream server --tenants` with a worker process,
// adds tenants acme and bolt (each gets an API token), and runs acme's
// job. Over REST, bolt sees none of it and cannot act on it (404, as if
// it did not exist), and its refusals are audited; the admin sees it; acme
// follows its checkpoints, takes a savepoint and cancels it. New
// credentials revoke the old token, and a removed tenant's token stops
// working.
func TestRESTTenants(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	data := filepath.Join(dir, "server")
	srv := startEdge(t, dir, "server", "--tenants", "--data", data, "--listen", "127.0.0.1:0")
	var url, api string
	srv.until(t, "server URLs", false, func() bool {
		b, err := os.ReadFile(filepath.Join(data, "nats.url"))
		url = strings.TrimSpace(string(b))
		if m := httpLine.FindStringSubmatch(srv.stderr.String()); m != nil {
			api = m[1]
		}
		return err == nil && url != "" && api != ""
	})
	if b, err := os.ReadFile(filepath.Join(data, "http.url")); err != nil || strings.TrimSpace(string(b)) != api {
		t.Fatalf("http.url holds %q (%v), the server printed %s", b, err, api)
	}
	auth := filepath.Join(data, "auth")
	admin := readToken(t, filepath.Join(auth, "admin.token"))
	wk := startEdge(t, dir, "worker", "--nats", url, "--nats-creds", filepath.Join(auth, "worker.creds"), "--data", filepath.Join(dir, "worker"))
	wk.until(t, "worker connected", false, func() bool { return strings.Contains(wk.stderr.String(), "connected") })
	for _, name := range []string{"acme", "bolt"} {
		r := runCLI(t, dir, "tenant", "add", "--data", data, name)
		if r.code != 0 || !strings.Contains(r.stderr, "REST API token of tenant "+name+" written to "+name+".token") {
			t.Fatalf("tenant add %s: exit %d\n%s", name, r.code, r.stderr)
		}
	}
	acme, bolt := readToken(t, filepath.Join(dir, "acme.token")), readToken(t, filepath.Join(dir, "bolt.token"))

	// Every request needs a token.
	if code, v := restCall(t, "GET", api+"/v1/jobs", ""); code != 401 || !strings.Contains(v["error"].(string), "Bearer") {
		t.Fatalf("no token: %d %v", code, v)
	}
	if code, _ := restCall(t, "GET", api+"/v1/jobs", "acme.forged"); code != 401 {
		t.Fatalf("a forged token: %d", code)
	}

	writePlan(t, dir, countPlan(genSpec{count: 0, keys: 20, words: 1, seed: 3, rate: 2000}, 200, `"connector":"discard"`))
	d := startEdge(t, dir, "deploy", "--nats", url, "--nats-creds", filepath.Join(dir, "acme.creds"), "--plan", "plan.json", mod)
	job := d.jobID(t)
	jobURL := api + "/v1/jobs/" + job
	d.until(t, "two checkpoints over REST", false, func() bool {
		code, v := restCall(t, "GET", jobURL+"/checkpoints", acme)
		c, _ := v["counts"].(map[string]any)
		return code == 200 && c != nil && c["completed"].(float64) >= 2
	})

	// Bolt: nothing of acme's job.
	if code, v := restCall(t, "GET", api+"/v1/jobs", bolt); code != 200 || len(v["jobs"].([]any)) != 0 {
		t.Fatalf("bolt's job list: %d %v", code, v)
	}
	for _, p := range []string{"", "/checkpoints", "/checkpoints/history", "/checkpoints/summary", "/checkpoints/1", "/exceptions", "/vertices/count", "/savepoints"} {
		if code, v := restCall(t, "GET", jobURL+p, bolt); code != 404 {
			t.Errorf("bolt's GET %s: %d %v, want 404", p, code, v)
		}
	}
	for _, p := range []string{"/cancel", "/savepoints", "/stop"} {
		if code, v := restCall(t, "POST", jobURL+p, bolt); code != 404 {
			t.Errorf("bolt's POST %s: %d %v, want 404", p, code, v)
		}
	}
	if code, _ := restCall(t, "GET", api+"/v1/workers", bolt); code != 403 {
		t.Errorf("bolt's workers: %d, want 403", code)
	}
	if code, v := restCall(t, "GET", jobURL, acme); code != 200 || v["state"] != "RUNNING" || v["tenant"] != "acme" {
		t.Fatalf("acme's job after bolt's attempts: %d %v", code, v)
	}
	audit, err := os.ReadFile(filepath.Join(data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"tenant":"bolt","user":"rest [^"]+","action":"cancel","job":"` + regexp.QuoteMeta(job) + `","error":"no job`).Match(audit) {
		t.Errorf("bolt's REST cancel is not in the audit log:\n%s", audit)
	}

	// The admin sees every job and the workers.
	if code, v := restCall(t, "GET", api+"/v1/jobs", admin); code != 200 || len(v["jobs"].([]any)) != 1 {
		t.Fatalf("the admin's job list: %d %v", code, v)
	}
	if code, v := restCall(t, "GET", api+"/v1/workers", admin); code != 200 || len(v["workers"].([]any)) != 1 {
		t.Fatalf("the admin's workers: %d %v", code, v)
	}

	// Acme takes a savepoint; it goes to acme's part of the data directory.
	code, sp := restCall(t, "POST", jobURL+"/savepoints", acme)
	if code != 202 {
		t.Fatalf("acme's savepoint: %d %v", code, sp)
	}
	var st map[string]any
	d.until(t, "acme's savepoint", false, func() bool {
		_, st = restCall(t, "GET", jobURL+"/savepoints/"+sp["requestId"].(string), acme)
		return st["status"] != "IN_PROGRESS"
	})
	loc, _ := st["location"].(string)
	if st["status"] != "COMPLETED" || !strings.Contains(loc, filepath.Join("tenants", "acme", "savepoints")) {
		t.Fatalf("acme's savepoint: %v", st)
	}
	if _, err := os.Stat(filepath.Join(loc, "_metadata")); err != nil {
		if m, _ := filepath.Glob(filepath.Join(loc, "*", "_metadata")); len(m) == 0 {
			t.Fatalf("savepoint %s has no metadata: %v", loc, err)
		}
	}
	// Bolt cannot read acme's savepoint request either.
	if code, _ := restCall(t, "GET", jobURL+"/savepoints/"+sp["requestId"].(string), bolt); code != 404 {
		t.Fatalf("bolt reads acme's savepoint request: %d", code)
	}

	// New credentials revoke acme's old token; removing bolt revokes its.
	if r := runCLI(t, dir, "tenant", "creds", "--data", data, "--token-out", "acme2.token", "acme"); r.code != 0 {
		t.Fatalf("tenant creds: exit %d\n%s", r.code, r.stderr)
	}
	if code, _ := restCall(t, "GET", api+"/v1/jobs", acme); code != 401 {
		t.Fatalf("acme's old token: %d, want 401", code)
	}
	acme = readToken(t, filepath.Join(dir, "acme2.token"))
	if r := runCLI(t, dir, "tenant", "remove", "--data", data, "bolt"); r.code != 0 {
		t.Fatalf("tenant remove: exit %d\n%s", r.code, r.stderr)
	}
	if code, _ := restCall(t, "GET", api+"/v1/jobs", bolt); code != 401 {
		t.Fatalf("a removed tenant's token: %d, want 401", code)
	}

	// Acme cancels its job over REST; the deploy that waits for it ends.
	if code, v := restCall(t, "POST", jobURL+"/cancel", acme); code != 202 {
		t.Fatalf("acme's cancel: %d %v", code, v)
	}
	d.until(t, "the job to be canceled", true, func() bool {
		_, v := restCall(t, "GET", jobURL, acme)
		return v["state"] == "CANCELED"
	})
	d.wait(t, time.Minute)
	if !strings.Contains(d.stderr.String(), "job "+job+" canceled") {
		t.Fatalf("deploy of the job canceled over REST:\n%s", d.stderr.String())
	}
}

// TestHTTPFlag: deploy prints where its UI is, --http off serves none, and
// bad uses of the flag are usage errors.
func TestHTTPFlag(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	r := runCLI(t, dir, "deploy", "--source", "gen:count=50", "--sink", "discard", mod)
	if r.code != 0 || !regexp.MustCompile(`web UI and REST API: http://127\.0\.0\.1:\d+`).MatchString(r.stderr) {
		t.Fatalf("deploy: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "wstream-data", "http.url")); err == nil {
		t.Fatal("http.url outlived the deploy")
	}
	r = runCLI(t, dir, "deploy", "--http", "off", "--source", "gen:count=50", "--sink", "discard", mod)
	if r.code != 0 || strings.Contains(r.stderr, "REST API") {
		t.Fatalf("deploy --http off: exit %d\n%s", r.code, r.stderr)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"deploy", "--http", "nonsense", mod}, `--http "nonsense": want HOST:PORT`},
		{[]string{"deploy", "--nats", "nats://127.0.0.1:1", "--http", "127.0.0.1:0", mod}, "wstream server --http"},
		{[]string{"server", "--http", "8081"}, `--http "8081"`},
	} {
		r := runCLI(t, dir, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("wstream %v: exit %d, want 2 and %q\n%s", c.args, r.code, c.says, r.stderr)
		}
	}
}
