package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/transport"
)

func startWorkers(t *testing.T, n int) (*Engine, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	e, err := Start(context.Background(), Options{DataDir: t.TempDir(), Stdout: out, Workers: n, Host: host.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("closing engine: %v", err)
		}
	})
	if len(e.Workers()) != n {
		t.Fatalf("%d workers, want %d", len(e.Workers()), n)
	}
	return e, out
}

// runID runs d and returns its result and job id.
func runID(t *testing.T, e *Engine, d *Deployment) (*transport.JobResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var id string
	r, err := e.Run(ctx, d, func(s string) { id = s })
	if err != nil {
		t.Fatal(err)
	}
	return r, id
}

// streamGone fails unless the job's data stream has been removed.
func streamGone(t *testing.T, e *Engine, id string) {
	t.Helper()
	js, err := jetstream.New(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, transport.DataStream(id)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("data stream of job %s after its end: %v, want it gone", id, err)
	}
}

const multiWordcount = `{"name":"wc","parallelism":3,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":30000,"keys":300,"words":4,"seed":3}},
 {"id":"split","kind":"operator","operator":"split"},
 {"id":"count","kind":"operator","operator":"count"},
 {"id":"out","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[{"from":"src","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"out","partition":"rebalance"}]}`

// TestMultiWorkerWordcount runs the wordcount on 1, 2 and 3 in-process
// workers: the output must be the same, and with several workers every
// worker must have run channels through JetStream.
func TestMultiWorkerWordcount(t *testing.T) {
	var want []string
	for _, n := range []int{1, 2, 3} {
		e, out := startWorkers(t, n)
		r, id := runID(t, e, prepare(t, e, "wordcount", multiWordcount))
		if r.State != transport.JobFinished {
			t.Fatalf("%d workers: %s %s", n, r.State, r.Error)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		slices.Sort(lines)
		if len(lines) != 300 {
			t.Fatalf("%d workers: %d counts, want 300", n, len(lines))
		}
		var in, outRecs int64
		for _, m := range r.Metrics {
			if m.Vertex == "split" {
				in = m.RecordsIn
			}
			if m.Vertex == "count" {
				outRecs = m.RecordsIn
			}
		}
		if in != 30000 || outRecs != 120000 {
			t.Fatalf("%d workers: split read %d, count read %d; want 30000 and 120000", n, in, outRecs)
		}
		if n == 1 {
			want = lines
			if c := e.Workers()[0].RemoteChannels(); c != 0 {
				t.Fatalf("one worker made %d remote channels", c)
			}
			continue
		}
		if !slices.Equal(lines, want) {
			t.Fatalf("%d workers: output differs from one worker's", n)
		}
		for _, w := range e.Workers() {
			if w.RemoteChannels() == 0 {
				t.Fatalf("%d workers: worker %s exchanged nothing through JetStream", n, w.ID())
			}
		}
		streamGone(t, e, id)
	}
}

// chaosOnWorkers runs plan (a localPlan-like keyed job writing into out)
// with injected failures on n workers and checks the committed output
// against the same plan without failures on one worker. It returns the
// engine and the job id.
func chaosOnWorkers(t *testing.T, n int, plan func(out string, chaos bool) string, records int) (*Engine, string) {
	ref, _ := startWorkers(t, 1)
	refOut := filepath.Join(t.TempDir(), "out")
	if r := run(t, ref, prepare(t, ref, "testops", plan(refOut, false))); r.State != transport.JobFinished {
		t.Fatalf("reference run: %s %s", r.State, r.Error)
	}
	want := committedLines(t, refOut)
	if len(want) != records {
		t.Fatalf("reference run committed %d lines, want %d", len(want), records)
	}

	e, _ := startWorkers(t, n)
	out := filepath.Join(t.TempDir(), "out")
	r, id := runID(t, e, prepare(t, e, "testops", plan(out, true)))
	if r.State != transport.JobFinished {
		t.Fatalf("%s %s", r.State, r.Error)
	}
	if r.Restarts == 0 {
		t.Fatal("the job never failed: the test proves nothing")
	}
	got := committedLines(t, out)
	if !slices.Equal(got, want) {
		t.Fatalf("%d workers after %d restarts: committed %d lines, want %d identical to a run without failures", n, r.Restarts, len(got), len(want))
	}
	for _, w := range e.Workers() {
		if w.RemoteChannels() == 0 {
			t.Fatalf("worker %s exchanged nothing through JetStream", w.ID())
		}
	}
	streamGone(t, e, id)
	return e, id
}

// TestMultiWorkerAlignedRestore: aligned checkpoints across two workers; the
// chaos operator fails every attempt; the restored job's committed output is
// exactly a failure-free run's.
func TestMultiWorkerAlignedRestore(t *testing.T) {
	chaosOnWorkers(t, 2, func(out string, chaos bool) string { return localPlan(out, chaos, false) }, 6000)
}

// unalignedPlan is localPlan with unaligned checkpoints, an unthrottled
// source and a slow count, so that the channels between the workers are
// full when barriers pass: they overtake data in flight. Every completed
// checkpoint is retained, for the test to read their channel state.
func unalignedPlan(out string, chaos bool) string {
	p := localPlan(out, chaos, false)
	p = strings.Replace(p, `"interval":100,"retain":1,`, `"interval":100,"retain":1000,"mode":"unaligned",`, 1)
	p = strings.Replace(p, `"count":6000,"keys":60,"rate":4000`, `"count":40000,"keys":60`, 1)
	p = strings.Replace(p, `"operator":"runcount"`, `"operator":"runcount","config":{"stallEvery":100,"stallMs":5}`, 1)
	return p
}

// TestMultiWorkerUnalignedRestore is the same with unaligned checkpoints
// whose barriers overtake the data between the workers: the overtaken data
// is channel state, replayed on restore exactly once. Between the workers it
// is not copied: the checkpoints refer to ranges of the data stream, and
// what they persist of those channels is only what their producers had not
// sent yet.
func TestMultiWorkerUnalignedRestore(t *testing.T) {
	e, id := chaosOnWorkers(t, 2, unalignedPlan, 40000)
	hist, err := coordinator.ReadHistory(e.opts.DataDir, id)
	if err != nil {
		t.Fatal(err)
	}
	var inFlight int64
	completed := 0
	for _, h := range hist {
		if h.Status == "completed" {
			completed++
			inFlight += h.InFlightBytes
		}
	}
	st, err := checkpoint.OpenStorageAt(coordinator.CheckpointRoot(e.opts.DataDir, id), e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.Completed()
	if err != nil {
		t.Fatal(err)
	}
	// The channels between the workers are those with ranges: edge,
	// upstream and downstream subtask.
	type pair struct{ edge, up, down int }
	remote := map[pair]bool{}
	var metas []*checkpoint.Metadata
	var referenced, remoteCopied, remoteInput, localCopied, metricPersisted, metricReferenced int64
	ranges := 0
	for _, cid := range ids {
		m, err := st.ReadMetadata(cid)
		if err != nil {
			t.Fatal(err)
		}
		metas = append(metas, m)
		for _, ts := range m.Tasks {
			for _, c := range ts.Channels {
				if c.Range == nil {
					continue
				}
				if c.Range.Stream != transport.DataStream(id) || c.Range.Messages == 0 || c.Range.Bytes <= 0 {
					t.Fatalf("checkpoint %d, subtask %s: bad range %+v", cid, ts.Task, *c.Range)
				}
				if c.Input {
					remote[pair{c.Edge, c.Peer, ts.Task.Subtask}] = true
				} else {
					remote[pair{c.Edge, ts.Task.Subtask, c.Peer}] = true
				}
				ranges++
				referenced += c.Range.Bytes
			}
		}
		for _, mm := range m.Metrics {
			metricPersisted += mm.InFlightBytes
			metricReferenced += mm.InFlightReferenced
		}
	}
	for _, m := range metas {
		for _, ts := range m.Tasks {
			for _, c := range ts.Channels {
				p := pair{c.Edge, ts.Task.Subtask, c.Peer}
				if c.Input {
					p = pair{c.Edge, c.Peer, ts.Task.Subtask}
				}
				if remote[p] {
					remoteCopied += c.Bytes
					if c.Input {
						remoteInput += c.Bytes
					}
				} else {
					localCopied += c.Bytes
				}
			}
		}
	}
	t.Logf("%d completed checkpoints, %d bytes in flight persisted (history); %d retained: %d ranges referencing %d bytes in the data stream, %d bytes persisted for channels between the workers (%d of them captured by consumers), %d for local channels",
		completed, inFlight, len(ids), ranges, referenced, remoteCopied, remoteInput, localCopied)
	if completed == 0 || referenced == 0 {
		t.Fatalf("%d completed checkpoints referencing %d bytes in flight: no barrier overtook data between the workers", completed, referenced)
	}
	if metricReferenced != referenced || metricPersisted != remoteCopied+localCopied {
		t.Fatalf("metrics: %d bytes persisted, %d referenced; channel state: %d persisted, %d referenced", metricPersisted, metricReferenced, remoteCopied+localCopied, referenced)
	}
	// What is persisted of the channels between the workers is at most
	// what producers still held (a blocked send, a partly filled buffer):
	// far less than what the ranges refer to.
	if remoteCopied*10 > referenced {
		t.Fatalf("%d bytes persisted for the channels between the workers, against %d referenced by ranges", remoteCopied, referenced)
	}
}
