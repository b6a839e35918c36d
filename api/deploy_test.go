package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// upload posts a module and fields to POST /v1/jobs as the UI does.
func upload(t *testing.T, u, module string, fields map[string]string, files map[string][]byte, header bool) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for name, b := range files {
		fw, err := mw.CreateFormFile(name, name+".bin")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(b)
	}
	if module != "" {
		b, err := os.ReadFile(module)
		if err != nil {
			t.Fatal(err)
		}
		fw, _ := mw.CreateFormFile("module", "mapfilter.wasm")
		fw.Write(b)
	}
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", u+"/v1/jobs", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if header {
		req.Header.Set("Wstream-Deploy", "1")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("POST /v1/jobs: %v in %s", err, b)
	}
	return res.StatusCode, v
}

// TestRESTDeployAndRescale deploys a module through POST /v1/jobs,
// rescales it through POST /v1/jobs/{id}/rescale (a savepoint, then the
// next attempt of the same job at the new parallelism), and stops it with
// a savepoint; then a bounded job keeps its final figures once finished.
func TestRESTDeployAndRescale(t *testing.T) {
	_, u, _ := startCluster(t)
	mod := testmod.GoModule(t, "examples/wasm/go/mapfilter")

	// Refusals: no header (what a form elsewhere would post), no module,
	// a bad parallelism, a plan the module cannot run.
	if st, v := upload(t, u, mod, nil, nil, false); st != 403 || !strings.Contains(str(v, "error"), "Wstream-Deploy") {
		t.Fatalf("without the header: %d %v", st, v)
	}
	if st, v := upload(t, u, "", map[string]string{"name": "x"}, nil, true); st != 400 || !strings.Contains(str(v, "error"), "no module part") {
		t.Fatalf("without a module: %d %v", st, v)
	}
	if st, v := upload(t, u, mod, map[string]string{"parallelism": "four"}, nil, true); st != 400 || !strings.Contains(str(v, "error"), `parallelism "four"`) {
		t.Fatalf("bad parallelism: %d %v", st, v)
	}
	if st, v := upload(t, u, mod, nil, map[string][]byte{"plan": []byte(`{"vertices":[]}`)}, true); st != 400 || str(v, "error") == "" {
		t.Fatalf("bad plan: %d %v", st, v)
	}

	st, v := upload(t, u, mod, map[string]string{"name": "uploaded", "parallelism": "2"}, map[string][]byte{"plan": []byte(endlessPlan)}, true)
	if st != 201 || str(v, "jobId") == "" {
		t.Fatalf("deploy: %d %v", st, v)
	}
	id := str(v, "jobId")
	job := u + "/v1/jobs/" + id
	waitFor(t, time.Minute, "the uploaded job to run", func() bool { return str(get(t, job), "state") == "RUNNING" })
	d := get(t, job)
	if str(d, "name") != "uploaded" || str(d, "module") != "mapfilter.wasm" || num(d, "tasks.total") != 3 {
		t.Fatalf("uploaded job %v", d)
	}
	waitFor(t, time.Minute, "a completed checkpoint", func() bool { return num(get(t, job+"/checkpoints"), "counts.completed") >= 1 })

	// Rescale src+upper from 2 to 3 subtasks; out sets its own 1.
	r := call(t, "POST", job+"/rescale", "", `{"parallelism":3}`, 202)
	if str(r, "status") != "IN_PROGRESS" || num(r, "parallelism") != 3 {
		t.Fatalf("rescale %v", r)
	}
	call(t, "POST", job+"/rescale", "", `{"parallelism":3}`, 409)
	var rs map[string]any
	waitFor(t, 3*time.Minute, "the rescale to end", func() bool {
		rs = get(t, job+"/rescale")
		return str(rs, "status") != "IN_PROGRESS"
	})
	if str(rs, "status") != "COMPLETED" || num(rs, "savepoint") < 1 || num(rs, "attempt") < 1 {
		t.Fatalf("rescale %v", rs)
	}
	d = get(t, job)
	vs := field(d, "vertices").([]any)
	if str(d, "state") != "RUNNING" || num(vs[0], "parallelism") != 3 || num(vs[2], "parallelism") != 1 || num(d, "tasks.total") != 4 {
		t.Fatalf("after the rescale %v", d)
	}
	if p := get(t, job+"/config"); num(p, "plan.parallelism") != 3 {
		t.Fatalf("config after the rescale %v", p)
	}
	call(t, "POST", job+"/stop", "", `{}`, 202)
	waitFor(t, 2*time.Minute, "the stop", func() bool { return str(get(t, job), "state") == "FINISHED" })
}

// TestRESTFinishedJob: a job that has finished keeps its final figures,
// its end time and its duration.
func TestRESTFinishedJob(t *testing.T) {
	e, u, _ := startCluster(t)
	plan := `{"name":"bounded","parallelism":2,
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":3000,"keys":10}},
  {"id":"upper","kind":"operator","operator":"upper"},
  {"id":"out","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[{"from":"src","to":"upper"},{"from":"upper","to":"out","partition":"rebalance"}]}`
	id := submit(t, e, plan)
	job := u + "/v1/jobs/" + id
	waitFor(t, time.Minute, "the job to finish", func() bool { return str(get(t, job), "state") == "FINISHED" })
	d := get(t, job)
	end, start := num(d, "endTime"), num(d, "startTime")
	if end == 0 || end < start || num(d, "durationMillis") != end-start || num(d, "result.durationMillis") != num(d, "durationMillis") {
		t.Fatalf("finished job's times: start %v end %v duration %v result %v", start, end, field(d, "durationMillis"), field(d, "result"))
	}
	// The oracle: gen emits count records, upper passes them all on.
	for _, v := range field(d, "vertices").([]any) {
		in, out := num(v, "metrics.recordsIn"), num(v, "metrics.recordsOut")
		switch str(v, "id") {
		case "src":
			if out != 3000 {
				t.Errorf("src emitted %v, want 3000", out)
			}
		case "upper":
			if in != 3000 || out != 3000 {
				t.Errorf("upper took %v and emitted %v, want 3000", in, out)
			}
		case "out":
			if in != 3000 {
				t.Errorf("out took %v, want 3000", in)
			}
		}
	}
	l := field(get(t, u+"/v1/jobs"), "jobs").([]any)
	if num(l[0], "endTime") != end || num(l[0], "durationMillis") != num(d, "durationMillis") {
		t.Fatalf("the list says %v, the job %v", l[0], d)
	}
}
