package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// keysOf lists the keys of a decoded JSON value, recursively, as dotted
// paths ("jobs[].tasks"); an array's are its first element's.
func keysOf(v any, path string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out[p] = true
			keysOf(x, p, out)
		}
	case []any:
		if len(v) > 0 {
			keysOf(v[0], path+"[]", out)
		}
	}
}

// sameShape fails unless the CLI's JSON and REST's have the same keys
// under prefix, but for those in cliOnly (what the data directory adds)
// and those REST has below a value the CLI gives as null (what the
// control plane does not tell the CLI: a job's tasks, a worker's
// subtasks).
func sameShape(t *testing.T, what string, cli, rest any, prefix string, cliOnly ...string) {
	t.Helper()
	ck, rk := map[string]bool{}, map[string]bool{}
	keysOf(cli, "", ck)
	keysOf(rest, "", rk)
	var diff []string
	for k := range rk {
		if strings.HasPrefix(k, prefix) && !ck[k] && !underNull(cli, k) {
			diff = append(diff, "REST only: "+k)
		}
	}
	for k := range ck {
		if strings.HasPrefix(k, prefix) && !rk[k] && !slices.Contains(cliOnly, k) {
			diff = append(diff, "CLI only: "+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		c, _ := json.Marshal(cli)
		r, _ := json.Marshal(rest)
		t.Errorf("%s: the CLI's -o json and REST differ:\n%s\nCLI:  %s\nREST: %s", what, strings.Join(diff, "\n"), c, r)
	}
}

// underNull reports whether a path of REST's lies below a key whose value
// is null in v.
func underNull(v any, path string) bool {
	parts := strings.Split(path, ".")
	for i := 1; i < len(parts); i++ {
		if x, ok := lookup(v, parts[:i]); ok && x == nil {
			return true
		}
	}
	return false
}

func lookup(v any, parts []string) (any, bool) {
	for _, p := range parts {
		arr := strings.HasSuffix(p, "[]")
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[strings.TrimSuffix(p, "[]")]; !ok {
			return nil, false
		}
		if arr && v != nil {
			a, ok := v.([]any)
			if !ok || len(a) == 0 {
				return nil, false
			}
			v = a[0]
		}
	}
	return v, true
}

// TestJSONShapes: `list`, `workers` and `checkpoints` with -o json print
// the objects GET /v1/jobs, /v1/workers and /v1/jobs/{id}/checkpoints/history
// answer for the same job, with the same field names, units and enums.
func TestJSONShapes(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	p, id, u := deployWithHTTP(t, dir, mod, "--checkpoint-interval", "300ms", "--source", "gen:count=100000000,rate=200")
	pollUntil(t, 2*time.Minute, "two completed checkpoints", func() bool {
		h := getJSON(t, u+"/v1/jobs/"+id+"/checkpoints/history").(map[string]any)
		return len(h["history"].([]any)) >= 2
	})

	cliJSON := func(args ...string) any {
		t.Helper()
		r := runCLI(t, dir, append(args, "-o", "json")...)
		var v any
		if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil {
			t.Fatalf("wstream %v -o json: exit %d, %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
		}
		return v
	}

	cli, rest := cliJSON("list"), getJSON(t, u+"/v1/jobs")
	sameShape(t, "list", cli, rest, "")
	cj, rj := cli.(map[string]any)["jobs"].([]any)[0], rest.(map[string]any)["jobs"].([]any)[0]
	for _, k := range []string{"jobId", "name", "state", "startTime", "attempt"} {
		if fmt.Sprint(cj.(map[string]any)[k]) != fmt.Sprint(rj.(map[string]any)[k]) {
			t.Errorf("list: %s is %v on the CLI, %v in REST", k, cj.(map[string]any)[k], rj.(map[string]any)[k])
		}
	}

	sameShape(t, "workers", cliJSON("workers"), getJSON(t, u+"/v1/workers"), "")

	cli = cliJSON("checkpoints", id)
	rest = getJSON(t, u+"/v1/jobs/"+id+"/checkpoints/history")
	sameShape(t, "checkpoints", cli, rest, "", "retained", "history[].reason")
	first := cli.(map[string]any)["history"].([]any)[0].(map[string]any)
	if first["kind"] != "checkpoint" || first["status"] != "completed" {
		t.Errorf("checkpoints -o json: the first entry is %v, want kind and status as strings", first)
	}
	if d, ok := first["durationMillis"].(float64); !ok || d > 60_000 {
		t.Errorf("checkpoints -o json: durationMillis %v, want milliseconds", first["durationMillis"])
	}
	if p.exited() {
		t.Fatalf("the deploy ended: %s", p.stderr.String())
	}

	// version: the first fields of GET /v1/config.
	sameShape(t, "version", cliJSON("version"), onlyKeys(getJSON(t, u+"/v1/config"), "version", "abi", "go", "commit"), "")

	// savepoint: the request object REST answers for its own requests.
	_, req := restCall(t, http.MethodPost, u+"/v1/jobs/"+id+"/savepoints", "")
	reqURL := u + "/v1/jobs/" + id + "/savepoints/" + fmt.Sprint(req["requestId"])
	var done map[string]any
	pollUntil(t, 2*time.Minute, "the REST savepoint completed", func() bool {
		done = getJSON(t, reqURL).(map[string]any)
		return done["status"] != "IN_PROGRESS"
	})
	delete(done, "requestId") // the CLI's request is its own
	cli = cliJSON("savepoint", id)
	sameShape(t, "savepoint", cli, done, "")
	if m := cli.(map[string]any); m["status"] != "COMPLETED" || m["kind"] != "savepoint" || m["endTime"] == nil {
		t.Errorf("savepoint -o json: %v", m)
	}

	// stop ends the deploy: the same object, of kind stop, then the
	// deploy's own.
	cli = cliJSON("stop", id)
	sameShape(t, "stop", cli, done, "")
	if m := cli.(map[string]any); m["kind"] != "stop" || m["status"] != "COMPLETED" {
		t.Errorf("stop -o json: %v", m)
	}
	if code := p.wait(t, 2*time.Minute); code != 3 {
		t.Errorf("deploy of a job stopped from outside: exit %d, want 3\n%s", code, p.stderr.String())
	}
}

// onlyKeys is the object v with only the keys named.
func onlyKeys(v any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if x, ok := v.(map[string]any)[k]; ok {
			out[k] = x
		}
	}
	return out
}
