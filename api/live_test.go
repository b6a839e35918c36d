package api_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestLiveFigures: on the embedded default's listener, the job detail
// fills in every subtask's live figures from the workers' samples, and
// /metrics serves the same job's counters, which grow while it runs.
func TestLiveFigures(t *testing.T) {
	e, u, _ := startCluster(t)
	id := submit(t, e, endlessPlan)
	job := u + "/v1/jobs/" + id
	var upper map[string]any
	waitFor(t, time.Minute, "samples of every subtask of vertex upper", func() bool {
		for _, v := range field(get(t, job), "vertices").([]any) {
			if str(v, "id") != "upper" {
				continue
			}
			upper = v.(map[string]any)
			subs, _ := field(v, "subtasks").([]any)
			if len(subs) != 2 {
				return false
			}
			for _, st := range subs {
				if field(st, "metrics") == nil || num(st, "metrics.recordsIn") == 0 {
					return false
				}
			}
			return num(v, "metrics.sampled") == 2 && num(v, "metrics.recordsIn") > 0
		}
		return false
	})
	in := num(upper, "metrics.recordsIn")
	if out := num(upper, "metrics.recordsOut"); out <= 0 || out > in {
		t.Errorf("vertex upper: %v records in, %v out; want 0 < out ≤ in (it maps one to one)", in, out)
	}
	if b := str(upper, "metrics.backpressure"); b != "ok" && b != "low" && b != "high" {
		t.Errorf("vertex upper: backpressure %q, want ok, low or high", b)
	}

	// The same counters through /metrics: the sum of the two subtasks'
	// records in grows.
	series := regexp.MustCompile(`(?m)^wstream_subtask_records_in_total\{[^}]*job_id="` + regexp.QuoteMeta(id) + `"[^}]*vertex="upper"[^}]*\} (\S+)$`)
	scrape := func() float64 {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
		}
		var sum float64
		for _, m := range series.FindAllStringSubmatch(string(b), -1) {
			f, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatalf("series value %q: %v", m[1], err)
			}
			sum += f
		}
		return sum
	}
	first := scrape()
	if first <= 0 {
		t.Fatalf("/metrics has no records-in series of job %s, vertex upper", id)
	}
	waitFor(t, time.Minute, "the scraped records-in counter to grow", func() bool { return scrape() > first })
}
