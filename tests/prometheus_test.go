package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// prometheusBin finds Debian's prometheus (scripts/setup.sh installs it).
// Without it the test is skipped on a developer's machine, and fails in CI
// (CI set), where set-up must have installed it.
func prometheusBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no prometheus on PATH in CI: scripts/setup.sh installs Debian's prometheus package")
	}
	t.Skip("no prometheus on PATH: run scripts/setup.sh (it installs Debian's prometheus package) to check the dashboard and the alert rules")
	return ""
}

// dashboard is what the test reads of deploy/grafana/wstream.json.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// comparison is the threshold an alert rule compares its series with.
var comparison = regexp.MustCompile(`\s*(>|<|>=|<=|==|!=)\s*[0-9.e+]+\s*$`)

// ruleExprs reads the alert rules' names and expressions (the file is
// YAML; its expr lines are one line each, which the test checks).
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	name := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "- alert: "); ok {
			name = v
		}
		if v, ok := strings.CutPrefix(l, "expr: "); ok {
			if name == "" || v == "" || v == "|" || v == ">" {
				t.Fatalf("%s: an expr without its alert, or over several lines: %q", path, l)
			}
			out[name] = v
			name = ""
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", path)
	}
	return out
}

// TestPrometheusDashboardAndAlerts runs Debian's prometheus against a
// running job, with the alert rules of deploy/prometheus loaded, and
// checks that every query of the Grafana dashboard (deploy/grafana) and
// the series every alert rule compares return series, that Prometheus
// evaluates every rule without error, and that the dashboard's job_name
// variable finds the job.
func TestPrometheusDashboardAndAlerts(t *testing.T) {
	prom := prometheusBin(t)
	root := testmod.Root()
	rules := filepath.Join(root, "deploy", "prometheus", "alerts.yml")
	var dash dashboard
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "wstream.json"))
	if err == nil {
		err = json.Unmarshal(b, &dash)
	}
	if err != nil || len(dash.Panels) == 0 {
		t.Fatalf("deploy/grafana/wstream.json: %v (%d panels)", err, len(dash.Panels))
	}
	exprs := ruleExprs(t, rules)

	// A job whose event time is the clock's (gen's start: now), so that
	// its watermark lag is exported, checkpointing twice a second.
	mod := module(t, "wordcount")
	dir := t.TempDir()
	start := time.Now().Add(-time.Minute).UnixMilli()
	p, id, u := deployWithHTTP(t, dir, mod, "--checkpoint-interval", "500ms",
		"--source", fmt.Sprintf("gen:count=100000000,rate=300,start=%d", start))
	target := strings.TrimPrefix(u, "http://")

	// A free port for Prometheus' own listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: wstream
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	api := "http://" + promAddr + "/api/v1/"
	query := func(q string) (int, error) {
		res, err := http.Get(api + "query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	within := func(d time.Duration, what, q string) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			n, err := query(q)
			if err == nil && n > 0 {
				return
			}
			select {
			case <-done:
				t.Fatalf("prometheus exited:\n%s", logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s returned no series after %s (last error %v)", what, q, d, err)
			}
			time.Sleep(500 * time.Millisecond) // polling interval
		}
	}
	within(2*time.Minute, "the scrape", `up{job="wstream"} == 1`)

	subst := strings.NewReplacer("$job_name", ".*", "$__rate_interval", "1m")
	for _, panel := range dash.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			within(time.Minute, "panel "+panel.Title, subst.Replace(tg.Expr))
		}
	}
	for name, expr := range exprs {
		series := comparison.ReplaceAllString(expr, "")
		if series == expr {
			t.Errorf("rule %s: %q compares with no threshold", name, expr)
			continue
		}
		within(time.Minute, "rule "+name, series)
	}

	// Prometheus evaluates every rule of the file without error.
	pollUntil(t, time.Minute, "every rule evaluated", func() bool {
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		res, err := http.Get(api + "rules")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		if json.NewDecoder(res.Body).Decode(&r) != nil {
			return false
		}
		ok := 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.LastError != "" {
					t.Fatalf("rule %s: %s", rule.Name, rule.LastError)
				}
				if rule.Health == "ok" {
					ok++
				}
			}
		}
		return ok == len(exprs)
	})

	// The dashboard's variable lists the job's name.
	for _, v := range dash.Templating.List {
		if v.Name != "job_name" {
			continue
		}
		if !strings.Contains(v.Definition, "job_name") {
			t.Fatalf("variable job_name: %q", v.Definition)
		}
		values := getJSON(t, api+"label/job_name/values").(map[string]any)["data"].([]any)
		want := id[:strings.LastIndexByte(id, '-')]
		found := false
		for _, x := range values {
			found = found || x == want
		}
		if !found {
			t.Fatalf("job_name values %v lack %q (job %s)", values, want, id)
		}
	}
	if p.exited() {
		t.Fatalf("the deploy ended: %s", p.stderr.String())
	}
}
