package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

// TestRESTEndpoints runs an unbounded job that checkpoints every 200 ms
// on the embedded default and reads every endpoint of the API: the shape
// of each answer against its golden file, and the figures against what
// the job does. Then it takes a savepoint, stops the job with another,
// and cancels a second job, all through the API.
func TestRESTEndpoints(t *testing.T) {
	e, u, data := startCluster(t)
	id := submit(t, e, endlessPlan)
	job := u + "/v1/jobs/" + id

	waitFor(t, time.Minute, "the job to run", func() bool { return str(get(t, job), "state") == "RUNNING" })
	waitFor(t, time.Minute, "two completed checkpoints", func() bool { return num(get(t, job+"/checkpoints"), "counts.completed") >= 2 })

	ov := get(t, u+"/v1/overview")
	if num(ov, "workers.live") != 1 || num(ov, "jobs.RUNNING") != 1 || field(ov, "tenants") != false {
		t.Fatalf("overview %v", ov)
	}
	checkShape(t, "overview", ov)

	ws := get(t, u+"/v1/workers")
	w0 := field(ws, "workers").([]any)[0]
	// 2 subtasks of src+upper, 1 of out.
	if str(w0, "id") != "w0" || field(w0, "live") != true || num(w0, "used") != 3 || len(field(w0, "subtasks").([]any)) != 3 {
		t.Fatalf("workers %v", ws)
	}
	checkShape(t, "workers", ws)

	jobs := get(t, u+"/v1/jobs")
	if l := field(jobs, "jobs").([]any); len(l) != 1 || str(l[0], "jobId") != id || str(l[0], "state") != "RUNNING" {
		t.Fatalf("jobs %v", jobs)
	}
	checkShape(t, "jobs", jobs)
	// The list says how long each job has run and its tasks: 2 of
	// src+upper, 1 of out.
	if l := field(jobs, "jobs").([]any); num(l[0], "tasks.total") != 3 || num(l[0], "durationMillis") <= 0 || field(l[0], "endTime") != nil {
		t.Fatalf("jobs %v", jobs)
	}
	conf := get(t, job+"/config")
	if str(conf, "jobId") != id || str(conf, "plan.name") != "endless" || num(conf, "plan.checkpoint.interval") != 200 {
		t.Fatalf("config %v", conf)
	}
	cfg := get(t, u+"/v1/config")
	if str(cfg, "version") == "" || !slices.Contains(field(cfg, "features").([]any), any("deploy")) || !slices.Contains(field(cfg, "features").([]any), any("rescale")) {
		t.Fatalf("config %v", cfg)
	}
	checkShape(t, "config", cfg, "commit")

	d := get(t, job)
	vs := field(d, "vertices").([]any)
	if len(vs) != 3 || str(vs[0], "id") != "src" || num(vs[0], "parallelism") != 2 || str(vs[0], "chain") != "src+upper" ||
		str(vs[2], "id") != "out" || num(vs[2], "parallelism") != 1 || len(field(vs[0], "subtasks").([]any)) != 2 {
		t.Fatalf("vertices %v", vs)
	}
	for _, s := range field(vs[0], "subtasks").([]any) {
		if str(s, "worker") != "w0" {
			t.Fatalf("src subtask %v not placed on w0", s)
		}
	}
	if num(d, "checkpointing.intervalMillis") != 200 || str(d, "checkpointing.mode") != "aligned" || len(field(d, "edges").([]any)) != 2 {
		t.Fatalf("job %v", d)
	}
	// Live figures are not asserted here: a sample may or may not have
	// arrived. Their shape without one is pinned in coordinator's tests.
	checkShape(t, "job", d, "vertices[].metrics", "vertices[].subtasks[].metrics", "vertices[].subtasks[].backpressure")

	v := get(t, job+"/vertices/upper")
	if str(v, "id") != "upper" || str(v, "kind") != "operator" || str(v, "operator") != "upper" {
		t.Fatalf("vertex %v", v)
	}

	ex := get(t, job+"/exceptions")
	if field(ex, "root") != nil || len(field(ex, "entries").([]any)) != 0 {
		t.Fatalf("exceptions of a healthy job: %v", ex)
	}
	checkShape(t, "exceptions", ex)

	ck := get(t, job+"/checkpoints")
	if str(ck, "latest.completed.status") != "completed" || field(ck, "latest.savepoint") != nil || str(ck, "settings.storage") != "data directory" {
		t.Fatalf("checkpoints %v", ck)
	}
	checkShape(t, "checkpoints", ck, "inProgress", "latest.failed")

	hist := get(t, job+"/checkpoints/history?limit=2")
	h := field(hist, "history").([]any)
	if len(h) != 2 || num(h[0], "id") <= num(h[1], "id") {
		t.Fatalf("history %v, want the 2 newest, newest first", hist)
	}
	checkShape(t, "history", hist)
	cid := int64(num(h[0], "id"))

	sum := get(t, job+"/checkpoints/summary")
	if num(sum, "durationMillis.count") < 2 || num(sum, "durationMillis.min") > num(sum, "durationMillis.max") {
		t.Fatalf("summary %v", sum)
	}
	checkShape(t, "summary", sum)

	det := get(t, fmt.Sprintf("%s/checkpoints/%d", job, cid))
	subs := field(det, "subtasks").([]any)
	if num(det, "id") != float64(cid) || str(det, "subtasksFrom") != "memory" || len(subs) != 3 || str(subs[0], "chain") != "src+upper" || field(subs[0], "acknowledged") != true {
		t.Fatalf("checkpoint %d: %v", cid, det)
	}
	checkShape(t, "checkpoint", det)

	// A savepoint, from trigger to completion.
	sp := call(t, http.MethodPost, job+"/savepoints", "", "{}", http.StatusAccepted)
	if str(sp, "status") != api.StatusInProgress || str(sp, "kind") != "savepoint" {
		t.Fatalf("savepoint request %v", sp)
	}
	req := job + "/savepoints/" + str(sp, "requestId")
	var done map[string]any
	waitFor(t, time.Minute, "the savepoint", func() bool {
		done = get(t, req)
		return str(done, "status") != api.StatusInProgress
	})
	if str(done, "status") != api.StatusCompleted || num(done, "savepointId") <= float64(cid) {
		t.Fatalf("savepoint %v", done)
	}
	checkShape(t, "savepoint", done)
	if _, m, err := checkpoint.OpenSavepointAt(str(done, "location"), nil); err != nil || m.ID != int64(num(done, "savepointId")) {
		t.Fatalf("the savepoint at %s: %v", str(done, "location"), err)
	}
	if l := field(get(t, job+"/savepoints"), "requests").([]any); len(l) != 1 || str(l[0], "requestId") != str(sp, "requestId") {
		t.Fatalf("savepoint requests %v", l)
	}
	ck = get(t, job+"/checkpoints")
	if num(ck, "latest.savepoint.id") != num(done, "savepointId") || str(ck, "latest.savepoint.kind") != "savepoint" {
		t.Fatalf("latest savepoint %v, want %v", field(ck, "latest.savepoint"), num(done, "savepointId"))
	}

	// A second job, cancelled.
	id2 := submit(t, e, strings.Replace(endlessPlan, `"name":"endless"`, `"name":"other"`, 1))
	call(t, http.MethodPost, u+"/v1/jobs/"+id2+"/cancel", "", "", http.StatusAccepted)
	waitFor(t, time.Minute, "the second job to be canceled", func() bool { return str(get(t, u+"/v1/jobs/"+id2), "state") == "CANCELED" })
	// Cancelling it again: it has ended (docs/rest.md: 409).
	call(t, http.MethodPost, u+"/v1/jobs/"+id2+"/cancel", "", "", http.StatusConflict)

	// Stop with a savepoint: the job finishes.
	stop := call(t, http.MethodPost, job+"/stop", "", `{"drain":false}`, http.StatusAccepted)
	waitFor(t, time.Minute, "the stop", func() bool {
		return str(get(t, job+"/savepoints/"+str(stop, "requestId")), "status") != api.StatusInProgress
	})
	if st := get(t, job+"/savepoints/"+str(stop, "requestId")); str(st, "status") != api.StatusCompleted || str(st, "kind") != "stop" {
		t.Fatalf("stop %v", st)
	}
	waitFor(t, time.Minute, "the stopped job to finish", func() bool { return str(get(t, job), "state") == "FINISHED" })
	if r := get(t, job); str(r, "result.state") != "stopped" {
		t.Fatalf("stopped job's result %v", field(r, "result"))
	}
	// An ended job takes no savepoint.
	call(t, http.MethodPost, job+"/savepoints", "", "{}", http.StatusConflict)

	// Every request that acted went to the audit log.
	audit := readAudit(t, data)
	for _, want := range []string{"savepoint " + id, "cancel " + id2, "stop with savepoint " + id, "has already ended (CANCELED): there is nothing to cancel"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit log lacks %q:\n%s", want, audit)
		}
	}
}

// readAudit returns the audit log as "action job" lines.
func readAudit(t *testing.T, dataDir string) string {
	t.Helper()
	f, err := os.Open(coordinator.AuditFile(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Tenant, User, Action, Job, Error string
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, strings.TrimSpace(e.Action+" "+e.Job)+" by "+e.Tenant+" ("+e.User+") "+e.Error)
	}
	return strings.Join(out, "\n")
}

// TestRESTErrors: bad requests get a status and a JSON error that says
// what was wrong.
func TestRESTErrors(t *testing.T) {
	e, u, data := startCluster(t)
	noCkpt := strings.Replace(endlessPlan, `"checkpoint":{"interval":200},`, "", 1)
	id := submit(t, e, noCkpt)
	job := u + "/v1/jobs/" + id
	waitFor(t, time.Minute, "the job to run", func() bool { return str(get(t, job), "state") == "RUNNING" })

	for _, c := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"GET", "/v1/jobs/nope", "", 404, `no job "nope"`},
		{"GET", "/v1/jobs/nope/checkpoints", "", 404, `no job "nope"`},
		{"GET", "/v1/jobs/" + id + "/vertices/nope", "", 404, `no vertex "nope"`},
		{"GET", "/v1/jobs/" + id + "/checkpoints/history?limit=0", "", 400, "limit"},
		{"GET", "/v1/jobs/" + id + "/checkpoints/abc", "", 400, `checkpoint id "abc"`},
		{"GET", "/v1/jobs/" + id + "/checkpoints/5", "", 404, "no checkpoint 5"},
		{"GET", "/v1/jobs/" + id + "/savepoints/nope", "", 404, `no savepoint request "nope"`},
		{"GET", "/v1/nothing", "", 404, "no endpoint GET /v1/nothing"},
		{"POST", "/v1/jobs", "{}", 400, "multipart/form-data upload with a module part"},
		{"POST", "/v1/jobs/" + id + "/rescale", `{}`, 400, "names a parallelism"},
		{"POST", "/v1/jobs/" + id + "/rescale", `{"parallelism":2}`, 409, "does not checkpoint: a rescale"},
		{"GET", "/v1/jobs/" + id + "/rescale", "", 404, "has not been rescaled"},
		{"GET", "/v1/jobs/nope/config", "", 404, `no job "nope"`},
		{"POST", "/", "{}", 405, "GET"},
		{"POST", "/v1/jobs/" + id + "/savepoints", `{"dri":"x"}`, 400, "unknown field"},
		{"POST", "/v1/jobs/" + id + "/savepoints", `{"drain":true}`, 400, "drain goes with stop"},
		{"POST", "/v1/jobs/" + id + "/savepoints", `{}`, 409, "does not checkpoint"},
		{"POST", "/v1/jobs/nope/cancel", "", 404, `no job "nope"`},
		{"POST", "/v1/jobs/nope/stop", "{}", 404, `no job "nope"`},
	} {
		v := call(t, c.method, u+c.path, "", c.body, c.status)
		if msg := str(v, "error"); !strings.Contains(msg, c.says) {
			t.Errorf("%s %s: error %q, want it to say %q", c.method, c.path, msg, c.says)
		}
	}
	checkShape(t, "error", call(t, "GET", u+"/v1/jobs/nope", "", "", 404))
	// Refusals are audited with their errors, once each.
	audit := readAudit(t, data)
	for _, want := range []string{`savepoint ` + id + ` by admin (rest `, `) drain goes with stop`, `stop with savepoint nope by admin (rest `, `rest GET /v1/jobs/nope/checkpoints nope by admin (rest `} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit log lacks %q:\n%s", want, audit)
		}
	}
	if n := strings.Count(audit, "stop with savepoint nope "); n != 1 {
		t.Errorf("the refused stop of nope is audited %d times:\n%s", n, audit)
	}

	// The listener is on loopback without credentials: a request that
	// names another host (a site whose name resolves to 127.0.0.1) is
	// refused, whatever its Origin.
	port := u[strings.LastIndex(u, ":")+1:]
	withHost := func(method, url, host string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader("{}"))
		req.Host = host
		req.Header = http.Header{"Content-Type": {"application/json"}, "Origin": {"http://" + host}}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body api.ErrorBody
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body.Error
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1:1", "localhost.evil.example:" + port} {
		for _, req := range [][2]string{{"GET", job}, {"POST", job + "/cancel"}} {
			code, msg := withHost(req[0], req[1], host)
			if code != http.StatusMisdirectedRequest || !strings.Contains(msg, "Host header") || !strings.Contains(msg, "localhost:"+port) {
				t.Fatalf("%s with Host %s: %d %q, want 421 naming the addresses it answers as", req[0], host, code, msg)
			}
		}
	}
	if a := readAudit(t, data); !strings.Contains(a, `rest POST /v1/jobs/`+id+`/cancel by admin (rest `) || !strings.Contains(a, `the Host header "evil.example:`+port+`"`) {
		t.Errorf("refused hosts are not audited:\n%s", a)
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "LOCALHOST:" + port} {
		if code, msg := withHost("GET", job, host); code != http.StatusOK {
			t.Fatalf("GET with Host %s: %d %s", host, code, msg)
		}
	}

	// What a page on another site could make a browser send is refused.
	for _, hdr := range []map[string]string{
		{"Content-Type": "text/plain"},
		{"Content-Type": "application/x-www-form-urlencoded"},
		{"Content-Type": "application/json", "Origin": "http://evil.example"},
	} {
		req, _ := http.NewRequest(http.MethodPost, job+"/cancel", strings.NewReader("{}"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("POST cancel with %v: %d, want 403", hdr, res.StatusCode)
		}
	}
	if st := str(get(t, job), "state"); st != "RUNNING" {
		t.Fatalf("the job is %s after refused cancels", st)
	}
	// The page's own origin may.
	req, _ := http.NewRequest(http.MethodPost, job+"/cancel", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", u)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST cancel from the UI's origin: %d", res.StatusCode)
	}
	// The test ends once the job has: the coordinator writes the job's
	// record as it ends, and the data directory goes with the test.
	waitFor(t, time.Minute, "the job to be canceled", func() bool {
		r, err := coordinator.ReadRecord(data, id)
		return str(get(t, job), "state") == "CANCELED" && err == nil && r.State == transport.JobCanceled
	})
}

// TestRESTAuth serves the API with tokens: no token or a wrong one is
// refused (and audited), a tenant sees none of the admin's jobs, and the
// metrics are the admin's.
func TestRESTAuth(t *testing.T) {
	e, _, data := startCluster(t)
	id := submit(t, e, endlessPlan)
	s, err := api.New(api.Config{Coordinator: e.Coordinator(),
		Auth: func(tok string) (coordinator.Caller, bool) {
			switch tok {
			case "admin.secret":
				return coordinator.Caller{}, true
			case "acme.secret":
				return coordinator.Caller{Tenant: "acme"}, true
			}
			return coordinator.Caller{}, false
		},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "wstream_up 1") }),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	u := srv.URL

	for _, tok := range []string{"", "acme.wrong", "Basic x"} {
		v := call(t, "GET", u+"/v1/jobs", tok, "", http.StatusUnauthorized)
		if !strings.Contains(str(v, "error"), "Bearer") {
			t.Fatalf("401 says %v", v)
		}
	}
	call(t, "POST", u+"/v1/jobs/"+id+"/cancel", "", "", http.StatusUnauthorized)
	if audit := readAudit(t, data); !strings.Contains(audit, "rest POST /v1/jobs/"+id+"/cancel by ?") || !strings.Contains(audit, "not authorized") {
		t.Fatalf("refused requests are not in the audit log:\n%s", audit)
	}
	// The UI's files need no token: they hold no data.
	res, err := http.Get(u + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d", res.StatusCode)
	}

	if l := field(call(t, "GET", u+"/v1/jobs", "admin.secret", "", 200), "jobs").([]any); len(l) != 1 {
		t.Fatalf("the admin lists %v", l)
	}
	if l := field(call(t, "GET", u+"/v1/jobs", "acme.secret", "", 200), "jobs").([]any); len(l) != 0 {
		t.Fatalf("tenant acme lists the admin's job: %v", l)
	}
	for _, p := range []string{"", "/checkpoints", "/checkpoints/history", "/checkpoints/summary", "/checkpoints/1", "/exceptions", "/vertices/src", "/savepoints", "/config", "/rescale"} {
		call(t, "GET", u+"/v1/jobs/"+id+p, "acme.secret", "", http.StatusNotFound)
	}
	// Another's job and one that never was get one answer, and each
	// refused action is audited with it.
	for _, p := range []string{"/cancel", "/savepoints", "/stop", "/rescale"} {
		theirs := str(call(t, "POST", u+"/v1/jobs/"+id+p, "acme.secret", "{}", http.StatusNotFound), "error")
		none := str(call(t, "POST", u+"/v1/jobs/nope"+p, "acme.secret", "{}", http.StatusNotFound), "error")
		if want := `no job "` + id + `"`; theirs != want || none != `no job "nope"` {
			t.Errorf("acme's POST %s: %q of the admin's job and %q of none, want %q and the same for nope", p, theirs, none, want)
		}
	}
	audit := readAudit(t, data)
	for _, a := range []string{"cancel", "savepoint", "stop with savepoint", "rescale"} {
		for _, j := range []string{id, "nope"} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(a+" "+j) + ` by acme \(rest [^)]+\) ` + regexp.QuoteMeta(`no job "`+j+`"`) + `$`).MatchString(audit) {
				t.Errorf("acme's refused %s of %s is not audited with its error:\n%s", a, j, audit)
			}
		}
	}
	call(t, "GET", u+"/v1/workers", "acme.secret", "", http.StatusForbidden)
	if ov := call(t, "GET", u+"/v1/overview", "acme.secret", "", 200); field(ov, "workers") != nil || str(ov, "tenant") != "acme" {
		t.Fatalf("acme's overview %v", ov)
	}
	waitFor(t, time.Minute, "the job to run", func() bool {
		return str(call(t, "GET", u+"/v1/jobs/"+id, "admin.secret", "", 200), "state") == "RUNNING"
	})

	req, _ := http.NewRequest("GET", u+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer acme.secret")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("acme's metrics: %v %v", res.StatusCode, err)
	}
	req.Header.Set("Authorization", "Bearer admin.secret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := res.Body.Read(b)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b[:n]), "wstream_up 1") {
		t.Fatalf("the admin's metrics: %d %q", res.StatusCode, b[:n])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}

// TestRESTObjectStoreCheckpoints: a job whose checkpoints go to a
// JetStream object store shows them over REST as one on the data
// directory does, and takes a savepoint there.
func TestRESTObjectStoreCheckpoints(t *testing.T) {
	e, u, _ := startCluster(t)
	plan := strings.Replace(endlessPlan, `"interval":200`, `"interval":200,"storage":"nats-obj://rest_ckpts"`, 1)
	id := submit(t, e, plan)
	job := u + "/v1/jobs/" + id
	waitFor(t, time.Minute, "two completed checkpoints", func() bool { return num(get(t, job+"/checkpoints"), "counts.completed") >= 2 })
	ck := get(t, job+"/checkpoints")
	if str(ck, "settings.storage") != "nats-obj://rest_ckpts" {
		t.Fatalf("storage %v", field(ck, "settings"))
	}
	cid := int64(num(ck, "latest.completed.id"))
	det := get(t, fmt.Sprintf("%s/checkpoints/%d", job, cid))
	if len(field(det, "subtasks").([]any)) != 3 {
		t.Fatalf("checkpoint %d: %v", cid, det)
	}
	sp := call(t, http.MethodPost, job+"/savepoints", "", `{"dir":"nats-obj://rest_savepoints"}`, http.StatusAccepted)
	var st map[string]any
	waitFor(t, time.Minute, "the savepoint", func() bool {
		st = get(t, job+"/savepoints/"+str(sp, "requestId"))
		return str(st, "status") != api.StatusInProgress
	})
	if str(st, "status") != api.StatusCompleted || !strings.HasPrefix(str(st, "location"), "nats-obj://rest_savepoints/") {
		t.Fatalf("savepoint %v", st)
	}
	if _, m, err := checkpoint.OpenSavepointAt(str(st, "location"), e.Conn()); err != nil || m.ID != int64(num(st, "savepointId")) {
		t.Fatalf("the savepoint at %s: %v", str(st, "location"), err)
	}
}

// TestRESTExceptions runs a job whose operator fails on its first record,
// restarted once: its exceptions show both attempts' failures with the
// subtask, the restart's cause, and the error the job failed with.
func TestRESTExceptions(t *testing.T) {
	e, u, _ := startCluster(t)
	plan := `{"name":"failing","parallelism":1,
 "restart":{"strategy":"fixed-delay","attempts":1,"delay":0},
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":500,"keys":20}},
  {"id":"boom","kind":"operator","operator":"fail","config":{"on":"w3"}},
  {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"boom"},{"from":"boom","to":"out"}]}`
	id := submitModule(t, e, "testops", plan)
	job := u + "/v1/jobs/" + id
	waitFor(t, time.Minute, "the job to fail", func() bool { return str(get(t, job), "state") == "FAILED" })
	ex := get(t, job+"/exceptions")
	if str(ex, "root.kind") != "job" || !strings.Contains(str(ex, "root.message"), "boom") {
		t.Fatalf("root %v", field(ex, "root"))
	}
	kinds := map[string]int{}
	for _, en := range field(ex, "entries").([]any) {
		kinds[str(en, "kind")]++
		if str(en, "kind") == "task" && (str(en, "chain") != "src+boom+out" || num(en, "subtask") != 0 || str(en, "worker") != "w0") {
			t.Fatalf("task failure %v", en)
		}
	}
	if kinds["task"] != 2 || kinds["restart"] != 1 || kinds["job"] != 1 {
		t.Fatalf("exceptions by kind %v, want 2 task failures, 1 restart, 1 job failure:\n%v", kinds, ex)
	}
	// Grouped by cause: every entry is in a group, each message once, and
	// no attempt is −1.
	total := 0
	seen := map[string]bool{}
	for _, g := range field(ex, "groups").([]any) {
		total += int(num(g, "count"))
		msg := str(g, "message")
		if seen[msg] {
			t.Errorf("two groups of %q", msg)
		}
		seen[msg] = true
		for _, a := range field(g, "attempts").([]any) {
			if a.(float64) < 0 {
				t.Errorf("group %v has attempt %v", g, a)
			}
		}
	}
	if n := len(field(ex, "entries").([]any)); total != n || len(seen) >= n {
		t.Fatalf("%d grouped entries in %d groups, of %d entries: %v", total, len(seen), n, field(ex, "groups"))
	}
	if d := get(t, job); num(d, "restarts") != 1 || len(field(d, "restartLog").([]any)) != 1 || str(d, "result.state") != "failed" {
		t.Fatalf("failed job %v", d)
	}
}
