package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/transport"
)

// unknownJob is a job id no one ever ran, of the same shape as a real one.
const unknownJob = "edge-0badc0de"

// TestAttackNoJobAnswer: bolt's savepoint, stop, cancel, resume and upgrade
// of acme's running job, over NATS (the CLI and requests made by hand) and
// REST, are refused with exactly the answer an unknown job id gets, name
// no path of the server's data directory, and are each in the audit log
// once with that answer; acme's job stays exact.
func TestAttackNoJobAnswer(t *testing.T) {
	mod := module(t, "testops")
	c, ts := startAttackCluster(t, "acme", "bolt")
	acme, bolt := ts["acme"], ts["bolt"]
	// Long enough (about 15 s) for every attempt while it runs.
	g := genSpec{count: 36000, keys: 40, words: 1, seed: 35, rate: 2400}
	d, job := c.victimJob(t, acme, mod, g)
	api := c.httpURL(t)

	// Each attempt answers for a job id; same reports whether its
	// answers for acme's job and for the unknown one are the same text
	// but for the id, and free of the server's paths.
	// asked counts the requests per action and job id, for the audit
	// log; told holds the answers as the coordinator gave them.
	type key struct{ action, job string }
	asked := map[key]int{}
	told := map[key][]string{}
	same := func(what, action string, exact bool, ask func(id string) string) {
		t.Helper()
		theirs, none := ask(job), ask(unknownJob)
		if theirs == "" {
			t.Errorf("%s of acme's job was not refused", what)
			return
		}
		if a, b := strings.ReplaceAll(theirs, job, "ID"), strings.ReplaceAll(none, unknownJob, "ID"); a != b {
			t.Errorf("%s: acme's job and an unknown one are told apart:\n  acme's:  %s\n  unknown: %s", what, theirs, none)
		}
		for _, s := range []string{theirs, none} {
			if strings.Contains(s, c.data) || strings.Contains(s, c.dir) {
				t.Errorf("%s: the answer names a path of the server: %s", what, s)
			}
		}
		for id, answer := range map[string]string{job: theirs, unknownJob: none} {
			k := key{strings.ReplaceAll(action, "ID", id), id}
			asked[k]++
			if exact {
				told[k] = append(told[k], answer)
			}
		}
	}

	// The CLI: the error line it prints.
	cli := func(cmd string) func(string) string {
		return func(id string) string {
			r := c.as(t, bolt, []string{cmd}, id)
			if r.code == 0 {
				return ""
			}
			return strings.TrimSpace(r.stderr)
		}
	}
	same("bolt's `wstream savepoint`", "savepoint", false, cli("savepoint"))
	same("bolt's `wstream stop`", "stop with savepoint", false, cli("stop"))
	same("bolt's `wstream cancel`", "cancel", false, cli("cancel"))

	// By hand, over NATS.
	plan := countPlan(genSpec{count: 10, keys: 2, words: 1, seed: 1}, 300, `"connector":"discard"`)
	nats := func(subject string, req func(id string) any) func(string) string {
		return func(id string) string { return ask(bolt.nc, subject, req(id)) }
	}
	same("bolt's savepoint request", "savepoint", true, nats(transport.SubjectSavepoint, func(id string) any { return transport.SavepointRequest{JobID: id} }))
	same("bolt's stop request", "stop with savepoint", true, nats(transport.SubjectSavepoint, func(id string) any {
		return transport.SavepointRequest{JobID: id, Stop: true, Drain: true}
	}))
	same("bolt's savepoint into the server's data", "savepoint", true, nats(transport.SubjectSavepoint, func(id string) any {
		return transport.SavepointRequest{JobID: id, Dir: filepath.Join(c.data, "jobs", id, "checkpoints")}
	}))
	same("bolt's cancel request", "cancel", true, nats(transport.SubjectCancel, func(id string) any { return transport.CancelRequest{JobID: id} }))
	same("bolt's resume request", "resume", true, nats(transport.SubjectSubmit, func(id string) any {
		return transport.SubmitRequest{Resume: id, Plan: json.RawMessage(plan)}
	}))
	same("bolt's upgrade request", "upgrade", true, nats(transport.SubjectUpgrade, func(id string) any {
		return transport.UpgradeRequest{JobID: id, Plan: json.RawMessage(plan)}
	}))

	// Over REST, with bolt's token.
	rest := func(method, path string) func(string) string {
		return func(id string) string {
			code, msg := restAsk(t, method, api+"/v1/jobs/"+id+path, bolt.token, "")
			if code != http.StatusNotFound {
				t.Errorf("bolt's %s %s of %s: %d %q, want 404", method, path, id, code, msg)
			}
			return msg
		}
	}
	same("bolt's REST savepoint", "savepoint", true, rest("POST", "/savepoints"))
	same("bolt's REST stop", "stop with savepoint", true, rest("POST", "/stop"))
	same("bolt's REST cancel", "cancel", true, rest("POST", "/cancel"))
	for _, p := range []string{"", "/checkpoints", "/checkpoints/1", "/exceptions"} {
		same("bolt's REST GET "+p, "rest GET /v1/jobs/ID"+p, true, rest("GET", p))
	}

	// Each refusal is audited once, with what bolt was told.
	got := map[key]int{}
	for _, e := range c.auditLines(t) {
		k := key{fmt.Sprint(e["action"]), fmt.Sprint(e["job"])}
		if e["tenant"] != "bolt" || (k.job != job && k.job != unknownJob) {
			continue
		}
		got[k]++
		msg, _ := e["error"].(string)
		switch {
		case msg == "":
			t.Errorf("bolt's refused %s of %s is audited as done: %v", k.action, k.job, e)
		case strings.Contains(msg, c.data):
			t.Errorf("the audit entry of bolt's %s of %s names the server's path: %s", k.action, k.job, msg)
		}
		if ts := told[k]; len(ts) > 0 {
			if i := slices.Index(ts, msg); i >= 0 {
				told[k] = slices.Delete(ts, i, i+1)
			}
		}
	}
	for k, n := range asked {
		if got[k] != n {
			t.Errorf("bolt asked %s of %s %d times, and the audit log has %d", k.action, k.job, n, got[k])
		}
		if len(told[k]) > 0 {
			t.Errorf("the audit log lacks bolt's %s of %s with the answer %q", k.action, k.job, told[k])
		}
	}
	for k, n := range got {
		if asked[k] == 0 {
			t.Errorf("the audit log has %d entries of bolt's %s of %s, which it did not ask", n, k.action, k.job)
		}
	}
	if code, v := restCall(t, "GET", api+"/v1/jobs/"+job, acme.token); code != 200 || v["state"] != "RUNNING" {
		t.Errorf("acme's job after bolt's attempts: %d %v", code, v)
	}
	c.victimExact(t, acme, d, g)
}

// TestAttackForeignHost: the REST API of `wstream deploy --http` (the
// embedded default) and of `wstream server --tenants=false --http` listens
// on loopback without credentials; a request whose Host header names
// another server, as a page of a site whose name was made to resolve to
// 127.0.0.1 sends it, is refused, and cannot cancel the job.
func TestAttackForeignHost(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	writePlan(t, dir, countPlan(genSpec{count: 0, keys: 5, words: 1, seed: 2, rate: 500}, 300, `"connector":"discard"`))
	d := startEdge(t, dir, "deploy", "--http", "127.0.0.1:0", "--plan", "plan.json", mod)
	job := d.jobID(t)
	deployURL := regexp.MustCompile(`web UI and REST API: (http://127\.0\.0\.1:\d+)`)
	var u string
	d.until(t, "the deploy's REST address", false, func() bool {
		m := deployURL.FindStringSubmatch(d.stderr.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	})
	foreignHost(t, "wstream deploy --http", u, job)
	if code, v := restCall(t, "GET", u+"/v1/jobs/"+job, ""); code != 200 || v["state"] != "RUNNING" {
		t.Fatalf("the job after the foreign requests: %d %v", code, v)
	}
	d.kill(t)

	data := filepath.Join(dir, "server")
	srv := startEdge(t, dir, "server", "--tenants=false", "--data", data, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	var api string
	srv.until(t, "the server's REST address", false, func() bool {
		if m := httpLine.FindStringSubmatch(srv.stderr.String()); m != nil {
			api = m[1]
		}
		return api != ""
	})
	foreignHost(t, "wstream server --tenants=false --http", api, unknownJob)
}

// foreignHost sends requests with foreign Host headers (and a matching
// Origin) to the API at u, and the same with its own addresses.
func foreignHost(t *testing.T, what, u, job string) {
	t.Helper()
	port := u[strings.LastIndex(u, ":")+1:]
	for _, host := range []string{"rebound.example:" + port, "rebound.example", "127.0.0.1.nip.io:" + port} {
		for _, req := range []struct{ method, path string }{{"GET", "/v1/jobs"}, {"GET", "/"}, {"POST", "/v1/jobs/" + job + "/cancel"}} {
			code, msg := restAsk(t, req.method, u+req.path, "", host)
			if code != http.StatusMisdirectedRequest || !strings.Contains(msg, fmt.Sprintf("the Host header %q", host)) {
				t.Errorf("%s: %s %s with Host %s: %d %q, want 421 naming the host", what, req.method, req.path, host, code, msg)
			}
		}
	}
	for _, host := range []string{"", "localhost:" + port} {
		if code, msg := restAsk(t, "GET", u+"/v1/jobs", "", host); code != 200 {
			t.Errorf("%s: GET /v1/jobs with Host %q: %d %s", what, host, code, msg)
		}
	}
}

// restAsk makes a REST request (a POST's body an empty JSON object) with
// a bearer token, or, when host is set, as a page of that host's origin
// would; it returns the status and the error the answer holds (or the
// body, when it holds none).
func restAsk(t *testing.T, method, url, token, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{"Content-Type": {"application/json"}}
	if token != "" {
		req.Header["Authorization"] = []string{"Bearer " + token}
	}
	if host != "" {
		req.Host, req.Header["Origin"] = host, []string{"http://" + host}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var v struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(b, &v) == nil && v.Error != nil {
		return res.StatusCode, *v.Error
	}
	return res.StatusCode, string(b)
}
