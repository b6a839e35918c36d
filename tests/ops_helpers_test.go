package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deployWithHTTP starts `wstream deploy` of module mod in dir with args
// and waits until its job runs; it returns the process, the job's id and
// the base URL of its UI, REST API and metrics.
func deployWithHTTP(t *testing.T, dir, mod string, args ...string) (*edgeProc, string, string) {
	t.Helper()
	p := startEdge(t, dir, append(append([]string{"deploy"}, args...), mod)...)
	id := p.jobID(t)
	var u string
	p.until(t, "http.url", false, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "wstream-data", "http.url"))
		u = strings.TrimSpace(string(b))
		return err == nil && strings.HasPrefix(u, "http://")
	})
	return p, id, u
}

// getJSON decodes GET url's JSON answer, failing unless it is 200.
func getJSON(t *testing.T, url string) any {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
	return v
}

// pollUntil polls cond until it holds, failing after d.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}
