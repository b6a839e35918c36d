package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testServer is a `wstream server` with one in-process worker and tenants
// (its default), on loopback: the cluster of the detach and exit-code
// tests. Its admin's credentials are in data/auth, where commands given
// --data find them.
type testServer struct {
	url, data string
	proc      *edgeProc
}

var natsLine = regexp.MustCompile(`coordinator running \(NATS (nats://[0-9.:]+);`)

func startTestServer(t *testing.T, dir string) *testServer {
	t.Helper()
	data := filepath.Join(dir, "srv")
	p := startEdge(t, dir, "server", "--data", data, "--listen", "127.0.0.1:0", "--workers", "1")
	var url string
	clusterPoll(t, time.Minute, "the server did not start", func() bool {
		if m := natsLine.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
			return true
		}
		return p.exited()
	})
	if url == "" {
		t.Fatalf("server exited: %s", p.stderr.String())
	}
	return &testServer{url: url, data: data, proc: p}
}

// args are the flags that reach the server as its admin.
func (s *testServer) args() []string { return []string{"--nats", s.url, "--data", s.data} }

// jobState is job id's state as `wstream list -o json` reports it.
func (s *testServer) jobState(t *testing.T, dir, id string) string {
	t.Helper()
	r := runCLI(t, dir, append([]string{"list", "-o", "json"}, s.args()...)...)
	if r.code != 0 {
		t.Fatalf("list: exit %d\n%s", r.code, r.stderr)
	}
	var list struct {
		Jobs []struct {
			JobID string `json:"jobId"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	for _, j := range list.Jobs {
		if j.JobID == id {
			return j.State
		}
	}
	return ""
}

const endlessPlan = `{"name":"endless","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":0,"rate":200,"words":2}},
 {"id":"upper","kind":"operator","operator":"upper"},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"upper"},{"from":"upper","to":"out"}],
 "checkpoint":{"interval":500}}`

// TestDetachFollow: deploy -d submits a cluster job and prints its id;
// wstream follow attaches to it, and SIGTERM to the follower ends the
// follower only: the job goes on running. A job cancelled from outside
// ends its follower with exit 3.
func TestDetachFollow(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)

	r := runCLI(t, dir, append([]string{"deploy", "-d", "--plan", "plan.json", mod}, srv.args()...)...)
	if r.code != 0 {
		t.Fatalf("deploy -d: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if id == "" || strings.Contains(id, "\n") || !strings.Contains(r.stderr, "wstream follow "+id) {
		t.Fatalf("deploy -d printed stdout %q, stderr %q; want the job id and how to follow it", r.stdout, r.stderr)
	}
	clusterPoll(t, time.Minute, "the detached job does not run", func() bool { return srv.jobState(t, dir, id) == "RUNNING" })

	// Shell completion offers the job's id.
	if got := completeJobIDs(t, dir, srv); got != id {
		t.Errorf("completing wstream stop: %q, want %q", got, id)
	}

	f := startEdge(t, dir, append([]string{"follow", id}, srv.args()...)...)
	clusterPoll(t, time.Minute, "follow did not attach", func() bool {
		return strings.Contains(f.stderr.String(), "following job "+id) || f.exited()
	})
	if err := f.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(t, time.Minute); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("follow after SIGTERM: exit %d, want %d\n%s", code, 128+int(syscall.SIGTERM), f.stderr.String())
	}
	if !strings.Contains(f.stderr.String(), "goes on running") {
		t.Fatalf("follow's stderr does not say the job goes on:\n%s", f.stderr.String())
	}
	if st := srv.jobState(t, dir, id); st != "RUNNING" {
		t.Fatalf("after SIGTERM of its follower the job is %q, want RUNNING", st)
	}

	// Cancelled from outside while followed: the follower exits 3.
	f = startEdge(t, dir, append([]string{"follow", id}, srv.args()...)...)
	clusterPoll(t, time.Minute, "follow did not attach", func() bool {
		return strings.Contains(f.stderr.String(), "following job "+id) || f.exited()
	})
	if r := runCLI(t, dir, append([]string{"cancel", id}, srv.args()...)...); r.code != 0 {
		t.Fatalf("cancel: exit %d\n%s", r.code, r.stderr)
	}
	if code := f.wait(t, 2*time.Minute); code != 3 || !strings.Contains(f.stderr.String(), "canceled from outside") {
		t.Fatalf("follow of a job cancelled from outside: exit %d, want 3\n%s", code, f.stderr.String())
	}
}

// TestClusterDeploySignal: a deploy --nats (without --attached) that gets
// SIGTERM ends the client only, with the command to follow the job again.
func TestClusterDeploySignal(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	d := startEdge(t, dir, append([]string{"deploy", "--plan", "plan.json", mod}, srv.args()...)...)
	var id string
	running := regexp.MustCompile(`job (\S+) running`)
	clusterPoll(t, time.Minute, "deploy did not start the job", func() bool {
		if m := running.FindStringSubmatch(d.stderr.String()); m != nil {
			id = m[1]
			return true
		}
		return d.exited()
	})
	if id == "" {
		t.Fatalf("deploy exited: %s", d.stderr.String())
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t, time.Minute); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("deploy after SIGTERM: exit %d\n%s", code, d.stderr.String())
	}
	if !strings.Contains(d.stderr.String(), "wstream follow "+id) {
		t.Fatalf("no hint to follow the job:\n%s", d.stderr.String())
	}
	if st := srv.jobState(t, dir, id); st != "RUNNING" {
		t.Fatalf("after SIGTERM of its deploy the cluster job is %q, want RUNNING", st)
	}
	// No record of a suspension goes into a directory of the client's.
	if _, err := os.Stat(filepath.Join(dir, "wstream-data")); err == nil {
		t.Fatalf("a cluster deploy made a data directory of its own")
	}
}

// TestAttachedDeploySuspends: deploy --attached --nats keeps a local
// deploy's behaviour: SIGTERM suspends the cluster's job with a savepoint
// (exit 3), the suspension is recorded in the server's data directory
// given with --data, and the hint continues it there.
func TestAttachedDeploySuspends(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	d := startEdge(t, dir, append([]string{"deploy", "--attached", "--plan", "plan.json", mod}, srv.args()...)...)
	var id string
	running := regexp.MustCompile(`job (\S+) running`)
	clusterPoll(t, time.Minute, "deploy did not start the job", func() bool {
		if m := running.FindStringSubmatch(d.stderr.String()); m != nil {
			id = m[1]
			return true
		}
		return d.exited()
	})
	if id == "" {
		t.Fatalf("deploy exited: %s", d.stderr.String())
	}
	clusterPoll(t, time.Minute, "no checkpoint", func() bool {
		ids, _ := filepath.Glob(filepath.Join(srv.data, "jobs", id, "checkpoints", "chk-*"))
		return len(ids) > 0
	})
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := d.wait(t, 2*time.Minute)
	if code != 3 || !strings.Contains(d.stderr.String(), "suspended with a savepoint") || !strings.Contains(d.stderr.String(), "wstream deploy --resume "+id+" --nats "+srv.url+" --data "+srv.data) {
		t.Fatalf("deploy --attached after SIGTERM: exit %d, want 3 and a resume hint\n%s", code, d.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(srv.data, "jobs", id, "suspended.json")); err != nil {
		t.Fatalf("the suspension was not recorded: %v", err)
	}
	if st := srv.jobState(t, dir, id); st == "RUNNING" {
		t.Fatalf("the attached job still runs after its client's SIGTERM")
	}
	// The hint works: the job continues, detached this time.
	r := runCLI(t, dir, append([]string{"deploy", "-d", "--resume", id}, srv.args()...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "resuming job "+id+" from the savepoint") {
		t.Fatalf("deploy -d --resume: exit %d\n%s", r.code, r.stderr)
	}
	next := strings.TrimSpace(r.stdout)
	clusterPoll(t, time.Minute, "the resumed job does not run", func() bool { return srv.jobState(t, dir, next) == "RUNNING" })
}
