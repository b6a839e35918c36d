package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

// leaderLease is the lease period of the coordinators of these tests.
const leaderLease = 3 * time.Second

// leaderRun is a cluster of the leader tests: a NATS server, a leading
// `wstream server`, a worker, and a long keyed job from gen to the
// exactly-once JetStream sink (checkpoints every second, in a JetStream
// object store that no process's data directory holds).
type leaderRun struct {
	dir, url string
	nc       *nats.Conn
	js       jetstream.JetStream
	g        genSpec
	leader   *edgeProc
	worker   *edgeProc
	deploy   *edgeProc
	job      string
	// tenants are the servers' flags for tenants (default: off).
	tenants []string
}

var (
	epochOf  = regexp.MustCompile(`epoch (\d+)\)`)
	httpAtRe = regexp.MustCompile(`REST API at (\S+)`)
)

func startLeaderRun(t *testing.T) *leaderRun {
	t.Helper()
	mod := module(t, "testops")
	url, js := startNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	createStreams(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}, Duplicates: 5 * time.Minute})
	r := &leaderRun{dir: t.TempDir(), url: url, nc: nc, js: js,
		// About 25 s of input.
		g: genSpec{count: 30000, keys: 40, words: 1, seed: 11, rate: 1200}}
	r.leader = r.server(t, "a", nil, "--nats", url)
	r.leader.until(t, "the first server's start", false, func() bool {
		return strings.Contains(r.leader.stderr.String(), "coordinator running")
	})
	r.worker = startEdge(t, r.dir, "worker", "-v", "--nats", url, "--id", "w1", "--data", filepath.Join(r.dir, "w1"))
	r.worker.until(t, "the worker's start", false, func() bool {
		return strings.Contains(r.worker.stderr.String(), "wstream worker: connected")
	})
	writePlan(t, r.dir, countPlan(r.g, 1000, jetstreamSink(url, "OUT", "out")))
	r.deploy = startEdge(t, r.dir, "deploy", "--nats", url, "--plan", "plan.json", "--checkpoint-storage", "nats-obj://leadertest", mod)
	r.job = r.deploy.jobID(t)
	return r
}

// server starts `wstream server` with data directory dir/name.
func (r *leaderRun) server(t *testing.T, name string, env []string, args ...string) *edgeProc {
	t.Helper()
	tenants := r.tenants
	if tenants == nil {
		tenants = []string{"--tenants=false"}
	}
	args = append(append([]string{"server", "-v", "--lease", leaderLease.String(), "--http", "127.0.0.1:0",
		"--worker-timeout", "5s", "--data", filepath.Join(r.dir, name)}, tenants...), args...)
	return startEdgeEnv(t, r.dir, env, args...)
}

// spec reads the job's record from the job bucket (nil: cannot now).
func (r *leaderRun) spec(t *testing.T) *coordinator.JobSpec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := coordinator.ReadJobSpec(ctx, r.nc, r.job)
	if err != nil {
		return nil
	}
	return s
}

// checkpointed waits until the job's record names a completed checkpoint
// above after, and returns it.
func (r *leaderRun) checkpointed(t *testing.T, p *edgeProc, after int64, d time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if s := r.spec(t); s != nil && s.LatestCheckpoint > after {
			return s.LatestCheckpoint
		}
		if r.deploy.exited() {
			t.Fatalf("the job ended before a checkpoint above %d: the input is too short\n%s", after, r.deploy.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint above %d within %s\n--- %v:\n%s", after, d, p.args, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish waits for the job's end and checks its output: every running
// count exactly once.
func (r *leaderRun) finish(t *testing.T) *coordinator.JobSpec {
	t.Helper()
	r.deploy.mustExit0(t, 3*edgeWait)
	s := r.spec(t)
	if s == nil || s.State != transport.JobFinished {
		state := "unreadable"
		if s != nil {
			state = fmt.Sprintf("%s, attempt %d, epoch %d", s.State, s.Attempt, s.Epoch)
		}
		t.Fatalf("the job's record after its end: %s\n%s", state, r.deploy.stderr.String())
	}
	got, _ := outputLines(t, r.js, "OUT")
	sameLines(t, "output stream", got, asMessages(r.g.runningCounts(), "out"))
	return s
}

// idCounter reads the job's checkpoint id counter: the highest id used,
// and the value as written ("ID@EPOCH").
func (r *leaderRun) idCounter(t *testing.T) (int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := r.js.KeyValue(ctx, transport.CheckpointIDsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, r.job)
	if err != nil {
		t.Fatal(err)
	}
	v := string(e.Value())
	id, _, _ := strings.Cut(v, "@")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("the checkpoint id counter holds %q", v)
	}
	return n, v
}

// epochIn is the epoch a server's "coordinator running" line names.
func epochIn(t *testing.T, out string) uint64 {
	t.Helper()
	if i := strings.Index(out, "coordinator running"); i >= 0 {
		out = out[i:]
	}
	m := epochOf.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no epoch in:\n%s", out)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// TestSecondServerIsStandby starts a second `wstream server` whose
// environment names the running cluster in NATS_URL (and not --nats): it
// says it is a standby and who leads, redirects its REST API to the
// leader's, and does nothing to the running job, which finishes in its
// first attempt with exact output.
func TestSecondServerIsStandby(t *testing.T) {
	r := startLeaderRun(t)
	r.checkpointed(t, r.leader, 0, edgeWait)
	second := r.server(t, "b", []string{"NATS_URL=" + r.url})
	second.until(t, "the second server's start", false, func() bool {
		return strings.Contains(second.stderr.String(), "REST API at")
	})
	out := second.stderr.String()
	if !strings.Contains(out, "wstream server: standby") || strings.Contains(out, "coordinator running") {
		t.Fatalf("the second server does not say it is a standby:\n%s", out)
	}
	leaderID := regexp.MustCompile(`leader (\S+), epoch`).FindStringSubmatch(r.leader.stderr.String())
	if leaderID == nil || !strings.Contains(out, "coordinator "+leaderID[1]+" leads") {
		t.Fatalf("the standby does not name the leader %v:\n%s", leaderID, out)
	}
	// The standby's REST API sends requests to the leader's.
	m := httpAtRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no REST API address:\n%s", out)
	}
	deadline := time.Now().Add(edgeWait)
	for {
		resp, err := http.Get(m[1] + "/v1/overview")
		if err != nil {
			t.Fatal(err)
		}
		var ov coordinator.Overview
		err = json.NewDecoder(resp.Body).Decode(&ov)
		resp.Body.Close()
		// Until the leader's renewal carries its API's address the
		// standby answers 503 naming it.
		if err == nil && resp.StatusCode == http.StatusOK && ov.Leader == leaderID[1] && ov.Jobs["RUNNING"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's REST API: status %d, %+v, %v", resp.StatusCode, ov, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := r.finish(t)
	if s.Attempt != 0 || len(s.RestartLog) != 0 {
		t.Errorf("the job restarted: attempt %d, restarts %+v", s.Attempt, s.RestartLog)
	}
	if second.exited() || strings.Contains(second.stderr.String(), "coordinator running") {
		t.Errorf("the standby took over or exited while the leader ran:\n%s", second.stderr.String())
	}
}

// TestLeaderKilled kills the leading server with SIGKILL: the standby takes
// over within the lease and 5 s, adopts the attempt the worker runs (the
// job's attempt stays 0: no restart), the job completes a checkpoint again
// and finishes with exact output.
func TestLeaderKilled(t *testing.T) {
	r := startLeaderRun(t)
	second := r.server(t, "b", nil, "--nats", r.url)
	second.until(t, "the standby's start", false, func() bool {
		return strings.Contains(second.stderr.String(), "wstream server: standby")
	})
	cp := r.checkpointed(t, r.leader, 0, edgeWait)
	killed := time.Now()
	r.leader.kill(t)
	second.until(t, "the take-over", false, func() bool {
		return strings.Contains(second.stderr.String(), "coordinator running")
	})
	took := time.Since(killed)
	again := r.checkpointed(t, second, cp, edgeWait)
	recovered := time.Since(killed)
	t.Logf("leader killed after checkpoint %d: the standby led after %s, checkpoint %d completed after %s",
		cp, took.Round(time.Millisecond), again, recovered.Round(time.Millisecond))
	if took > leaderLease+5*time.Second {
		t.Errorf("the standby took over %s after the kill; the lease is %s", took, leaderLease)
	}
	// The target is the lease and 5 s; the bound leaves room for a
	// loaded machine (deploying and restoring the new attempt).
	if recovered > leaderLease+10*time.Second {
		t.Errorf("the first checkpoint after the kill completed %s after it; the lease is %s", recovered, leaderLease)
	}
	s := r.finish(t)
	if want := epochIn(t, second.stderr.String()); s.Epoch != want {
		t.Errorf("the job's record has epoch %d, the new leader's is %d", s.Epoch, want)
	}
	// The new leader adopted the attempt the worker ran: no restart.
	if s.Attempt != 0 || len(s.RestartLog) != 0 {
		t.Errorf("the job restarted after the take-over: attempt %d, restarts %+v", s.Attempt, s.RestartLog)
	}
	if out := second.stderr.String(); !strings.Contains(out, "attempt adopted") {
		t.Errorf("the new leader does not say it adopted the attempt:\n%s", out)
	}
}

// TestPausedLeaderIsFenced stops the leading server with SIGSTOP past its
// lease; the standby takes over and resumes the job; then the old leader
// is continued with SIGCONT. Nothing it writes lands: every write of the
// job's record and of its checkpoint id counter from the take-over on
// carries the new epoch, no checkpoint of an id the old leader reserved
// completes after SIGCONT, the worker refuses a command of the old epoch,
// the old leader says it no longer leads and exits; the job finishes with
// exact output.
func TestPausedLeaderIsFenced(t *testing.T) {
	r := startLeaderRun(t)
	second := r.server(t, "b", nil, "--nats", r.url)
	second.until(t, "the standby's start", false, func() bool {
		return strings.Contains(second.stderr.String(), "wstream server: standby")
	})
	oldEpoch := epochIn(t, r.leader.stderr.String())
	cp := r.checkpointed(t, r.leader, 0, edgeWait)
	if err := r.leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Every id the paused leader reserved is at most oldMax: a checkpoint
	// of its own that completes later would be one of them.
	oldMax, _ := r.idCounter(t)
	second.until(t, "the take-over", false, func() bool {
		return strings.Contains(second.stderr.String(), "coordinator running")
	})
	newEpoch := epochIn(t, second.stderr.String())
	if newEpoch <= oldEpoch {
		t.Fatalf("the new leader's epoch %d is not above the old one's %d", newEpoch, oldEpoch)
	}
	r.checkpointed(t, second, cp, edgeWait)

	// Every write of the job's record from here on.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := r.js.KeyValue(ctx, transport.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, r.job)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writes := make(chan *coordinator.JobSpec, 1024)
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			var s coordinator.JobSpec
			if json.Unmarshal(e.Value(), &s) == nil {
				writes <- &s
			}
		}
	}()

	// A command of the old epoch, as the old leader would send: the
	// worker has heard of the new leader and refuses it.
	b, _ := json.Marshal(transport.CancelRequest{JobID: r.job, Attempt: 1 << 20, Failed: true, Epoch: oldEpoch})
	msg, err := r.nc.Request(transport.WorkerCancelSubject("w1"), b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply transport.Reply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || !strings.Contains(reply.Error, "refusing") {
		t.Fatalf("the worker obeyed a cancel of the old epoch %d: %q %v", oldEpoch, reply.Error, err)
	}

	// Every write of the job's checkpoint id counter from here on, and
	// every checkpoint metadata object (which completes a checkpoint).
	ids, err := r.js.KeyValue(ctx, transport.CheckpointIDsBucket)
	if err != nil {
		t.Fatal(err)
	}
	iw, err := ids.Watch(ctx, r.job)
	if err != nil {
		t.Fatal(err)
	}
	defer iw.Stop()
	idWrites := make(chan string, 1024)
	go func() {
		for e := range iw.Updates() {
			if e != nil {
				idWrites <- string(e.Value())
			}
		}
	}()
	obs, err := r.js.ObjectStore(ctx, "leadertest")
	if err != nil {
		t.Fatal(err)
	}
	ow, err := obs.Watch(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer ow.Stop()
	metas := make(chan string, 1024)
	go func() {
		for o := range ow.Updates() {
			if o != nil && !o.Deleted && strings.HasSuffix(o.Name, "/_metadata") {
				metas <- o.Name
			}
		}
	}()
	before := len(r.leader.stderr.String())

	paused := time.Now()
	if err := r.leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	code := r.leader.wait(t, edgeWait)
	out := r.leader.stderr.String()
	t.Logf("the old leader exited %d, %s after SIGCONT", code, time.Since(paused).Round(time.Millisecond))
	if code == 0 || !strings.Contains(out, "no longer leads") {
		t.Fatalf("the old leader did not stop on finding itself deposed (exit %d):\n%s", code, out)
	}
	s := r.finish(t)
	if s.Epoch != newEpoch {
		t.Errorf("the job's final record has epoch %d, want the new leader's %d", s.Epoch, newEpoch)
	}
	cancel()
	n := 0
	for {
		select {
		case s := <-writes:
			n++
			if s.Epoch != newEpoch {
				t.Errorf("a write of the job's record at epoch %d landed after the take-over at %d: %+v", s.Epoch, newEpoch, s)
			}
			continue
		default:
		}
		break
	}
	if n == 0 {
		t.Error("the watch saw no write of the job's record")
	}
	// The counter: written at the new epoch only.
	suffix := fmt.Sprintf("@%d", newEpoch)
	n = 0
	for len(idWrites) > 0 {
		v := <-idWrites
		n++
		if !strings.HasSuffix(v, suffix) {
			t.Errorf("the job's checkpoint id counter was written as %q after the take-over at epoch %d", v, newEpoch)
		}
	}
	if n == 0 {
		t.Error("the watch saw no value of the job's checkpoint id counter")
	}
	// Checkpoint completion: no metadata of one of the old leader's ids
	// was written after SIGCONT, and the old leader completed none.
	chkID := regexp.MustCompile(`chk-0*(\d+)/_metadata$`)
	n = 0
	for len(metas) > 0 {
		name := <-metas
		m := chkID.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("checkpoint metadata object %q: no checkpoint id in its name", name)
			continue
		}
		n++
		if id, _ := strconv.ParseInt(m[1], 10, 64); id <= oldMax {
			t.Errorf("checkpoint %d (%s), of an id the old leader reserved (up to %d), completed after SIGCONT", id, name, oldMax)
		}
	}
	if n == 0 {
		t.Error("no checkpoint completed after SIGCONT")
	}
	if after := out[min(before, len(out)):]; strings.Contains(after, "checkpoint completed") {
		t.Errorf("the old leader completed a checkpoint after SIGCONT:\n%s", after)
	}
	if want := fmt.Sprintf(`refusing a command of a deposed coordinator" worker=w1 command=cancel epoch=%d `, oldEpoch); !strings.Contains(r.worker.stderr.String(), want) {
		t.Errorf("the worker's log does not say it refused the old leader's cancel (%q):\n%s", want, r.worker.stderr.String())
	}
}
