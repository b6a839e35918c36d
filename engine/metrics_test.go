package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// scrape fetches url and parses the text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics of %s: %v", url, err)
	}
	return fams
}

// series returns the metrics of family name whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// sum adds up the values of the counters or gauges series returns.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, int) {
	ms := series(fams, name, want)
	var s float64
	for _, m := range ms {
		switch {
		case m.Counter != nil:
			s += m.Counter.GetValue()
		case m.Gauge != nil:
			s += m.Gauge.GetValue()
		case m.Histogram != nil:
			s += float64(m.Histogram.GetSampleCount())
		}
	}
	return s, len(ms)
}

// pollScrape scrapes until ok accepts what it got, or fails after a
// generous deadline with what the last scrape said.
func pollScrape(t *testing.T, url, what string, ok func(map[string]*dto.MetricFamily) (bool, string)) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fams := scrape(t, url)
		done, why := ok(fams)
		if done {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsDuringJob runs the wordcount module on two in-process workers,
// reading a JetStream stream that the test fills in two halves, and scrapes
// the engine's metrics handler while the job runs: the records counters
// reach each half's size exactly, checkpoints show up, the coordinator's
// board has the workers' samples, and a cancelled job's series go away.
func TestMetricsDuringJob(t *testing.T) {
	e, _ := startWorkers(t, 2)
	srv := httptest.NewServer(e.MetricsHandler())
	defer srv.Close()
	url := srv.URL + "/metrics"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js, err := jetstream.New(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "lines", Subjects: []string{"lines.>"}}); err != nil {
		t.Fatal(err)
	}
	// Each line has two words: split emits two records per line.
	const half = 1500
	publish := func(from int) {
		for i := from; i < from+half; i++ {
			if _, err := js.PublishAsync(fmt.Sprintf("lines.%d", i%7), []byte(fmt.Sprintf("w%d w%d", i%50, i%13))); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing the input timed out")
		}
	}
	publish(0)

	plan := `{"name":"wc-metrics","parallelism":2,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","parallelism":1,"config":{"stream":"lines"}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`
	dir := t.TempDir()
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := testmod.GoModule(t, "examples/wasm/go/wordcount")
	d, err := Prepare(ctx, e.Runtime(), PrepareOptions{ModulePath: mod, PlanPath: planPath})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	job := func(extra map[string]string) map[string]string {
		m := map[string]string{"job_id": id}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	vertex := func(v string) map[string]string { return job(map[string]string{"vertex": v}) }

	// The counters reach exactly what the test published, each half in
	// turn: they grow while the job runs.
	reach := func(lines int) map[string]*dto.MetricFamily {
		return pollScrape(t, url, fmt.Sprintf("records of %d lines", lines), func(f map[string]*dto.MetricFamily) (bool, string) {
			srcOut, _ := sum(f, "wstream_subtask_records_out_total", vertex("source"))
			splitIn, nSplit := sum(f, "wstream_subtask_records_in_total", vertex("split"))
			splitOut, _ := sum(f, "wstream_subtask_records_out_total", vertex("split"))
			countIn, nCount := sum(f, "wstream_subtask_records_in_total", vertex("count"))
			why := fmt.Sprintf("source out %v, split in %v (%d subtasks) out %v, count in %v (%d subtasks)", srcOut, splitIn, nSplit, splitOut, countIn, nCount)
			if srcOut > float64(lines) || splitIn > float64(lines) || countIn > float64(2*lines) {
				t.Fatalf("more records than published (%d lines): %s", lines, why)
			}
			return srcOut == float64(lines) && splitIn == float64(lines) && splitOut == float64(2*lines) &&
				countIn == float64(2*lines) && nSplit == 2 && nCount == 2, why
		})
	}
	reach(half)
	publish(half)
	fams := reach(2 * half)

	// Bytes move with the records; the input's time is accounted for.
	if b, _ := sum(fams, "wstream_subtask_bytes_in_total", vertex("split")); b < 2*half*4 {
		t.Errorf("split took %v bytes in, want at least %d", b, 2*half*4)
	}
	if b, _ := sum(fams, "wstream_subtask_bytes_out_total", vertex("split")); b <= 0 {
		t.Errorf("split sent %v bytes", b)
	}
	// The counts' 6,000 state reads and writes take milliseconds (the
	// figures have millisecond resolution); both wait for input.
	busy, n := sum(fams, "wstream_subtask_busy_seconds_total", vertex("count"))
	idle, _ := sum(fams, "wstream_subtask_idle_seconds_total", vertex("count"))
	if n != 2 || busy <= 0 || idle <= 0 {
		t.Errorf("count: busy %vs, idle %vs over %d subtasks; want both > 0 over 2", busy, idle, n)
	}
	if idle, n := sum(fams, "wstream_subtask_idle_seconds_total", vertex("split")); n != 2 || idle <= 0 {
		t.Errorf("split: idle %vs over %d subtasks; want > 0 over 2", idle, n)
	}
	if _, n := sum(fams, "wstream_subtask_backpressured_seconds_total", vertex("count")); n != 2 {
		t.Errorf("count: %d backpressure series, want 2", n)
	}
	// The two workers exchange the keyed edge through JetStream.
	if _, n := sum(fams, "wstream_exchange_lag_seconds", job(nil)); n == 0 {
		t.Errorf("no exchange lag series for a job spread over two workers")
	}
	// Guest calls: split's process calls, and host calls of both.
	if c, _ := sum(fams, "wstream_guest_call_duration_seconds", job(map[string]string{"vertex": "split", "call": "process"})); c <= 0 {
		t.Errorf("no process calls of split in the guest call histogram")
	}
	for _, v := range []string{"split", "count"} {
		if c, _ := sum(fams, "wstream_host_calls_total", vertex(v)); c <= 0 {
			t.Errorf("no host calls of %s", v)
		}
	}
	// Checkpoints complete, and the count's keyed state is measured.
	fams = pollScrape(t, url, "checkpoint and state metrics", func(f map[string]*dto.MetricFamily) (bool, string) {
		done, _ := sum(f, "wstream_checkpoints_completed_total", job(nil))
		hist, _ := sum(f, "wstream_checkpoint_duration_seconds", job(nil))
		_, last := sum(f, "wstream_checkpoint_last_state_bytes", job(nil))
		state, _ := sum(f, "wstream_subtask_state_bytes", vertex("count"))
		return done >= 2 && hist == done && last == 1 && state > 0,
			fmt.Sprintf("completed %v, duration histogram count %v, last size series %d, count's state %v bytes", done, hist, last, state)
	})
	if v, _ := sum(fams, "wstream_jobs", map[string]string{"state": "RUNNING"}); v != 1 {
		t.Errorf("wstream_jobs{state=RUNNING} = %v, want 1", v)
	}
	if v, _ := sum(fams, "wstream_job_restarts_total", job(nil)); v != 0 {
		t.Errorf("restarts %v, want 0", v)
	}
	if v, _ := sum(fams, "wstream_pebble_stores", job(nil)); v != 2 {
		t.Errorf("%v Pebble stores, want 2 (the count's subtasks)", v)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "wstream_nats_jetstream_streams", "wstream_nats_in_messages_total", "wstream_pebble_block_cache_hits_total", "wstream_workers_live"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}

	// The coordinator's board has every subtask's samples from the
	// workers' reports, with the same counts.
	pollBoard(t, e.coord, id, 2*half)

	if err := coordinator.Cancel(ctx, e.Conn(), id); err != nil {
		t.Fatal(err)
	}
	pollScrape(t, url, "series of the cancelled job", func(f map[string]*dto.MetricFamily) (bool, string) {
		var left []string
		for name, fam := range f {
			if len(series(map[string]*dto.MetricFamily{name: fam}, name, job(nil))) > 0 {
				left = append(left, name)
			}
		}
		canceled, _ := sum(f, "wstream_jobs", map[string]string{"state": "CANCELED"})
		return len(left) == 0 && canceled == 1, fmt.Sprintf("series left: %s; canceled jobs %v", strings.Join(left, ", "), canceled)
	})
	if got := e.coord.SubtaskMetrics(id); len(got) != 0 {
		t.Errorf("the board still has %d samples of the cancelled job", len(got))
	}
}

// pollBoard waits until the coordinator's samples of job id show lines
// records into split, over two subtasks, with the fields the REST API
// shows filled in.
func pollBoard(t *testing.T, c *coordinator.Coordinator, id string, lines int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ms := c.SubtaskMetrics(id)
		var in int64
		subtasks, workers := 0, map[string]bool{}
		var last transport.SubtaskMetrics
		for _, m := range ms {
			if m.Vertex == "split" {
				in += m.RecordsIn
				subtasks++
				last = m
			}
			workers[m.Worker] = true
		}
		if in == int64(lines) && subtasks == 2 && workers["w0"] && workers["w1"] && last.SampledAt > 0 && last.BusyMillis+last.IdleMillis > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordinator's samples of %s: split in %d over %d subtasks (want %d over 2), workers %v, last %+v", id, in, subtasks, lines, workers, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
