package tests

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// scrapeSeries scrapes a metrics endpoint and returns the labels and
// values of the counters or gauges of family name.
func scrapeSeries(url, name string) ([]map[string]string, []float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	f := fams[name]
	if f == nil {
		return nil, nil, nil
	}
	var labels []map[string]string
	var values []float64
	for _, m := range f.Metric {
		l := map[string]string{}
		for _, p := range m.Label {
			l[p.GetName()] = p.GetValue()
		}
		labels = append(labels, l)
		values = append(values, m.GetCounter().GetValue()+m.GetGauge().GetValue())
	}
	return labels, values, nil
}

// workerRecords sums wstream_subtask_records_out_total of vertex over its
// subtasks at a worker's metrics endpoint; ok is false when the scrape
// failed or has no such series yet.
func workerRecords(url, vertex string) (float64, bool, error) {
	labels, values, err := scrapeSeries(url, "wstream_subtask_records_out_total")
	if err != nil {
		return 0, false, err
	}
	var sum float64
	found := false
	for k, l := range labels {
		if l["vertex"] == vertex {
			sum += values[k]
			found = true
		}
	}
	return sum, found, nil
}

// metricsURLOf finds the URL that `wstream worker --http` printed.
var metricsURLOf = regexp.MustCompile(`wstream worker: metrics at (http://127\.0\.0\.1:[0-9]+/metrics)`)

// TestWorkerServesMetrics runs a cluster of separate processes (a NATS
// server, `wstream server --nats` and `wstream worker --http 127.0.0.1:0`),
// deploys wordcount reading a JetStream stream that the test fills in two
// halves, and scrapes the worker's endpoint, whose URL the worker printed:
// the source's records counter reaches each half exactly. The listener
// serves nothing but /metrics, and an address it cannot listen on is
// refused with a message naming the flag.
func TestWorkerServesMetrics(t *testing.T) {
	wstreamBin(t)
	ns := &clusterNATS{t: t, port: clusterPort(t), store: t.TempDir()}
	ns.start()
	t.Cleanup(ns.stop)
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.port)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "text", Subjects: []string{"text.>"}}); err != nil {
		t.Fatal(err)
	}
	const half = 800
	publish := func(from int) {
		for i := from; i < from+half; i++ {
			if _, err := js.PublishAsync("text.in", []byte(fmt.Sprintf("a%d b%d", i%9, i%4))); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing timed out")
		}
	}
	publish(0)

	dir := t.TempDir()
	c := &clusterRun{t: t, dir: dir}
	t.Cleanup(c.stopAll)
	defer func() {
		if t.Failed() {
			c.dump()
		}
	}()
	coord := c.start("coordinator", "server", "-v", "--nats", url, "--data", filepath.Join(dir, "coordinator"))
	clusterPoll(t, 30*time.Second, "the coordinator did not start", func() bool {
		return strings.Contains(coord.output(), "coordinator running")
	})
	w := c.start("worker", "worker", "--nats", url, "--id", "wm", "--data", filepath.Join(dir, "wm"), "--http", "127.0.0.1:0")
	clusterPoll(t, 30*time.Second, "the worker did not print its metrics URL and connect", func() bool {
		return metricsURLOf.MatchString(w.output()) && strings.Contains(w.output(), "wstream worker: connected")
	})
	metricsURL := metricsURLOf.FindStringSubmatch(w.output())[1]

	writeClusterFile(t, filepath.Join(dir, "plan.json"), fmt.Sprintf(`{"name":"metrics-cli","parallelism":1,
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","config":{"url":%q,"stream":"text"}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[
  {"from":"source","to":"split"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink"}]}`, url))
	mod := testmod.GoModule(t, "examples/wasm/go/wordcount")
	c.start("deploy", "deploy", "--nats", url, "--plan", "plan.json", mod)

	reach := func(n float64) {
		t.Helper()
		var last float64
		var lastErr error
		clusterPoll(t, 2*time.Minute, fmt.Sprintf("the source's records out did not reach %v (last %v, %v)", n, last, lastErr), func() bool {
			v, ok, err := workerRecords(metricsURL, "source")
			last, lastErr = v, err
			if v > n {
				t.Fatalf("the source emitted %v records, more than the %v published", v, n)
			}
			return ok && v == n
		})
	}
	reach(half)
	publish(half)
	reach(2 * half)

	// Only /metrics is served.
	resp, err := http.Get(strings.TrimSuffix(metricsURL, "metrics") + "v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/jobs on a worker: %s, want 404", resp.Status)
	}

	// An address in use is refused, naming the flag.
	busy := strings.TrimSuffix(strings.TrimPrefix(metricsURL, "http://"), "/metrics")
	r := runCLI(t, dir, "worker", "--nats", url, "--id", "wm2", "--data", filepath.Join(dir, "wm2"), "--http", busy)
	if r.code == 0 || !strings.Contains(r.stderr, "--http "+busy) {
		t.Errorf("worker --http %s (in use): exit %d, stderr %q; want an error naming --http", busy, r.code, r.stderr)
	}
}
