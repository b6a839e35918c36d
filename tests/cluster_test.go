package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

// clusterPlan is a keyed job from JetStream to JetStream on a cluster: the
// bounded jetstream source and the chaos operator (which only stalls, 20 ms
// after every stall records, so that the run takes a while) in one subtask,
// a running count per key over three subtasks behind a keyed exchange, and
// the exactly-once jetstream sink publishing "key → count" to
// PREFIX.{key} of stream out.
func clusterPlan(url, out, prefix string, stall int) string {
	chaos := `{"seed":7}`
	if stall > 0 {
		chaos = fmt.Sprintf(`{"seed":7,"stallEvery":%d,"stallMs":20}`, stall)
	}
	return fmt.Sprintf(`{"name":"cluster-%s","parallelism":3,
 "checkpoint":{"interval":500,"mode":"aligned","timeout":10000},
 "restart":{"strategy":"fixed-delay","attempts":100,"delay":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","parallelism":1,"config":{"url":%q,"stream":"in","subject":"in.>","bounded":true,"timestamp":"header"}},
  {"id":"chaos","kind":"operator","operator":"chaos","parallelism":1,"config":%s},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"jetstream","config":{"url":%q,"stream":%q,"subject":"%s.{key}"}}],
 "edges":[
  {"from":"source","to":"chaos"},
  {"from":"chaos","to":"count","partition":"key"},
  {"from":"count","to":"sink"}]}`, strings.ToLower(out), url, chaos, url, out, prefix)
}

// clusterNATS is a NATS server with JetStream on file storage that the test
// can stop and start again on the same port and store.
type clusterNATS struct {
	t     *testing.T
	port  int
	store string
	srv   *server.Server
}

func (n *clusterNATS) start() {
	n.t.Helper()
	srv, err := server.NewServer(&server.Options{
		ServerName: "cluster-test", Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.store,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		n.t.Fatal("nats server not ready")
	}
	n.srv = srv
}

func (n *clusterNATS) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func clusterPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterProc is a wstream process of the cluster.
type clusterProc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *clusterProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *clusterProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *clusterProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *clusterProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

type clusterRun struct {
	t     *testing.T
	dir   string
	mu    sync.Mutex
	procs []*clusterProc
}

// start runs wstream with args; its output (stdout and stderr) is kept.
func (c *clusterRun) start(name string, args ...string) *clusterProc {
	c.t.Helper()
	p := &clusterProc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(wstreamBin(c.t), args...)
	p.cmd.Dir = c.dir
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// dump logs the output of every process.
func (c *clusterRun) dump() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		out := p.output()
		if len(out) > 12000 {
			out = "…" + out[len(out)-12000:]
		}
		c.t.Logf("--- %s:\n%s", p.name, out)
	}
}

func (c *clusterRun) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if !p.exited() {
			p.kill()
		}
	}
}

func writeClusterFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// clusterPoll polls cond every 50ms until it holds; after d it fails.
func clusterPoll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterSpec returns the spec of the job named name in the job bucket, nil
// when there is none (or the bucket cannot be read right now).
func clusterSpec(js jetstream.JetStream, name string) *coordinator.JobSpec {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, transport.JobsBucket)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	var out *coordinator.JobSpec
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var s coordinator.JobSpec
		if json.Unmarshal(e.Value(), &s) == nil && s.Name == name {
			out = &s
		}
	}
	return out
}

// TestClusterSurvivesFailures runs a keyed, checkpointing job from a
// JetStream stream to the exactly-once JetStream sink on a cluster of
// separate processes — a NATS server with JetStream on file storage, a
// coordinator (`wstream server --nats`) and three workers (`wstream worker
// --nats`), driven by `wstream deploy --nats` — and, while it runs, kills
// one worker with SIGKILL, takes a savepoint and kills the coordinator with
// SIGKILL right after it and starts a new one, and restarts the NATS server
// on the same port and store. The client must get the job's result, the job
// must finish without the killed worker, the output stream must hold
// exactly the messages of a failure-free run (and each key's counts once),
// nothing of the savepoint's transaction, and `wstream checkpoints` no id
// twice.
func TestClusterSurvivesFailures(t *testing.T) {
	mod := module(t, "testops")
	wstreamBin(t)
	began := time.Now()

	ns := &clusterNATS{t: t, port: clusterPort(t), store: t.TempDir()}
	ns.start()
	t.Cleanup(ns.stop)
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.port)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "in", Subjects: []string{"in.>"}, Storage: jetstream.FileStorage},
		{Name: "REF", Subjects: []string{"ref.*"}, Duplicates: 5 * time.Minute, Storage: jetstream.FileStorage},
		{Name: "OUT", Subjects: []string{"out.*"}, Duplicates: 5 * time.Minute, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// 9000 records, 20 ms of stall every 8: at least 22 s without failures.
	const n, keys, stall = 9000, 60, 8
	for i := range n {
		k := "k" + strconv.Itoa(i%keys)
		m := &nats.Msg{Subject: "in." + k, Data: []byte("r" + strconv.Itoa(i)), Header: nats.Header{}}
		m.Header.Set("Wstream-Key", k)
		m.Header.Set("Wstream-Timestamp", strconv.Itoa(i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishing the input timed out")
	}

	dir := t.TempDir()
	c := &clusterRun{t: t, dir: dir}
	t.Cleanup(c.stopAll)
	defer func() {
		// WSTREAM_CLUSTER_LOGS=1 shows the processes' logs of a run that passed.
		if t.Failed() || os.Getenv("WSTREAM_CLUSTER_LOGS") != "" {
			c.dump()
		}
	}()
	coordData := filepath.Join(dir, "coordinator")
	startCoordinator := func(name string) *clusterProc {
		p := c.start(name, "server", "-v", "--nats", url, "--data", coordData, "--worker-timeout", "4s")
		clusterPoll(t, 30*time.Second, name+" did not start", func() bool {
			return strings.Contains(p.output(), "coordinator running")
		})
		return p
	}
	coord := startCoordinator("coordinator")
	workers := map[string]*clusterProc{}
	for _, id := range []string{"w-a", "w-b", "w-c"} {
		workers[id] = c.start("worker "+id, "worker", "-v", "--nats", url, "--id", id, "--data", filepath.Join(dir, id))
	}
	for id, w := range workers {
		clusterPoll(t, 30*time.Second, "worker "+id+" did not connect", func() bool {
			return strings.Contains(w.output(), "wstream worker: connected")
		})
	}

	// The failure-free reference, on the same cluster.
	writeClusterFile(t, filepath.Join(dir, "ref.json"), clusterPlan(url, "REF", "ref", 0))
	if r := runCLI(t, dir, "deploy", "-q", "--nats", url, "--plan", "ref.json", mod); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := outputLines(t, js, "REF")
	if len(want) != n {
		t.Fatalf("the reference run published %d messages, want %d", len(want), n)
	}
	for i := range want {
		want[i] = strings.Replace(want[i], "ref.", "out.", 1)
	}
	t.Logf("reference run done after %s", time.Since(began).Round(time.Millisecond))

	writeClusterFile(t, filepath.Join(dir, "plan.json"), clusterPlan(url, "OUT", "out", stall))
	deploy := c.start("deploy", "deploy", "--nats", url, "--plan", "plan.json", mod)
	runStart := time.Now()
	spec := func() *coordinator.JobSpec { return clusterSpec(js, "cluster-out") }
	running := func(what string) {
		t.Helper()
		if deploy.exited() {
			t.Fatalf("the job ended before %s: the run is too short to prove anything", what)
		}
	}

	// 1. A worker dies once the job has checkpointed.
	var cp int64
	clusterPoll(t, 60*time.Second, "no checkpoint completed", func() bool {
		s := spec()
		if s != nil && s.LatestCheckpoint >= 2 {
			cp = s.LatestCheckpoint
			return true
		}
		return false
	})
	running("a worker was killed")
	workers["w-b"].kill()
	t.Logf("%s: killed worker w-b after checkpoint %d", time.Since(runStart).Round(time.Millisecond), cp)

	// 2. The coordinator dies once the job restarted without the worker
	// and checkpointed again; a new coordinator takes over.
	var attempt int
	clusterPoll(t, 60*time.Second, "the job did not restart without worker w-b, or did not checkpoint after", func() bool {
		s := spec()
		if s == nil || s.Attempt < 1 || s.LatestCheckpoint <= cp {
			return false
		}
		for _, r := range s.RestartLog {
			if strings.HasPrefix(r.Reason, "worker w-b lost") {
				attempt, cp = s.Attempt, s.LatestCheckpoint
				return true
			}
		}
		return false
	})
	running("the coordinator was killed")
	// The coordinator dies right after an intermediate savepoint completed:
	// the new one must restore the latest checkpoint (never the savepoint),
	// leave the savepoint's sink transaction uncommitted and never use its
	// id again.
	jobID := spec().JobID
	sp := runCLI(t, dir, "savepoint", "--nats", url, jobID, filepath.Join(dir, "sp"))
	if sp.code != 0 {
		t.Fatalf("savepoint: exit %d\n%s", sp.code, sp.stderr)
	}
	coord.kill()
	spID, _ := savepointOf(t, sp.stdout)
	t.Logf("%s: killed the coordinator right after savepoint %d, at attempt %d, checkpoint %d", time.Since(runStart).Round(time.Millisecond), spID, attempt, cp)
	// Ids only grow: a checkpoint above the savepoint is the new
	// coordinator's.
	cp = spID
	coord2 := startCoordinator("coordinator 2")

	// 3. The NATS server restarts once the new coordinator resumed the job
	// (it adopts the attempt the workers run, or starts a new one) and it
	// checkpointed again.
	clusterPoll(t, 60*time.Second, "the new coordinator did not resume the job, or it did not checkpoint after", func() bool {
		s := spec()
		if s != nil && s.Attempt >= attempt && s.LatestCheckpoint > cp {
			attempt, cp = s.Attempt, s.LatestCheckpoint
			return true
		}
		return false
	})
	running("the NATS server was restarted")
	if got := streamCount(js, "OUT"); got >= n {
		t.Fatalf("the output is complete (%d messages) before the NATS server restart", got)
	}
	ns.stop()
	t.Logf("%s: NATS server stopped at attempt %d, checkpoint %d", time.Since(runStart).Round(time.Millisecond), attempt, cp)
	ns.start()

	// The client gets the result.
	select {
	case <-deploy.done:
	case <-time.After(90 * time.Second):
		t.Fatal("the deploy client did not end within 90s of the NATS server restart")
	}
	t.Logf("%s: the job ended", time.Since(runStart).Round(time.Millisecond))
	if deploy.err != nil || !strings.Contains(deploy.output(), "finished") {
		t.Fatalf("deploy: %v", deploy.err)
	}
	if workers["w-b"].cmd.ProcessState == nil || workers["w-b"].cmd.ProcessState.Success() {
		t.Fatal("worker w-b was not killed")
	}
	s := spec()
	if s == nil || s.State != transport.JobFinished || s.Result == nil || s.Result.State != transport.JobFinished {
		t.Fatalf("job spec after the end: %+v", s)
	}
	var reasons []string
	for _, r := range s.RestartLog {
		reasons = append(reasons, fmt.Sprintf("attempt %d: %s", r.Attempt, r.Reason))
	}
	t.Logf("%d attempts:\n%s", s.Attempt+1, strings.Join(reasons, "\n"))
	if s.Attempt <= attempt {
		t.Fatalf("attempt %d after the NATS server restart, want a new one after %d", s.Attempt, attempt)
	}
	resumed := strings.Contains(coord2.output(), "attempt adopted")
	for _, r := range s.RestartLog {
		resumed = resumed || strings.Contains(r.Reason, "coordinator restarted")
	}
	if !resumed {
		t.Fatal("neither the restart log nor the new coordinator's log shows the coordinator's restart")
	}

	got, _ := outputLines(t, js, "OUT")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output stream differs from the failure-free run: %d messages vs %d; first difference %s", len(got), len(want), firstDiff(got, want))
	}
	// Each key's running count goes 1…n/keys exactly once.
	have := map[string]bool{}
	for _, l := range got {
		have[l] = true
	}
	counts := map[string]int{}
	for i := range n {
		k := "k" + strconv.Itoa(i%keys)
		counts[k]++
		if l := fmt.Sprintf("out.%s %s %d", k, k, counts[k]); !have[l] {
			t.Fatalf("the output stream lacks %q", l)
		}
	}
	rows := checkpointTable(t, dir, coordData, jobID)
	var spRow *ckptRow
	for i := range rows {
		if rows[i].id == spID {
			spRow = &rows[i]
		}
	}
	if spRow == nil || spRow.kind != "savepoint" || spRow.status != "completed" {
		t.Fatalf("savepoint %d is not in the history as completed: %v", spID, spRow)
	}
	// Unless a checkpoint of the savepoint's attempt completed before the
	// kill (and committed it by design), nothing of the savepoint's
	// transaction was ever published.
	if !slices.ContainsFunc(completedAfter(rows, spID), func(r ckptRow) bool { return r.attempt == spRow.attempt }) {
		if ids := msgIDsOf(t, js, "OUT", spID); len(ids) > 0 {
			t.Errorf("%d messages of intermediate savepoint %d were published, e.g. %s", len(ids), spID, ids[0])
		}
	}
	t.Logf("whole test: %s", time.Since(began).Round(time.Millisecond))
}
