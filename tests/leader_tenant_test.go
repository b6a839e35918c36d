package tests

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startTenantLeaderRun is startLeaderRun with tenants on: an external NATS
// server that trusts the tenant authority the servers share (as on shared
// storage), tenant acme, and acme's long keyed job from gen to the
// exactly-once JetStream sink in acme's own account, with checkpoints in
// an object store of acme's account. r.nc is the admin's connection, r.js
// acme's. It returns the first deployment the worker got, as a thief on
// the worker's subject would see it: the attempt's credentials.
func startTenantLeaderRun(t *testing.T) (*leaderRun, attemptCreds) {
	t.Helper()
	mod := module(t, "testops")
	dir := t.TempDir()
	url, auth := startTenantNATS(t, dir)
	r := &leaderRun{dir: dir, url: url, tenants: []string{"--tenants", "--auth-dir", auth},
		g: genSpec{count: 30000, keys: 40, words: 1, seed: 12, rate: 1200}}
	admin, err := nats.Connect(url, nats.UserCredentials(filepath.Join(auth, "admin.creds")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	r.nc = admin
	deploys := make(chan *nats.Msg, 16)
	if _, err := admin.ChanSubscribe("wstream.worker.worker.deploy", deploys); err != nil {
		t.Fatal(err)
	}
	r.leader = r.server(t, "a", nil, "--nats", url)
	r.leader.until(t, "the first server's start", false, func() bool {
		return strings.Contains(r.leader.stderr.String(), "coordinator running")
	})
	// worker.creds are worker "worker"'s.
	r.worker = startEdge(t, dir, "worker", "-v", "--nats", url, "--nats-creds", filepath.Join(auth, "worker.creds"), "--data", filepath.Join(dir, "w1"))
	r.worker.until(t, "the worker's start", false, func() bool {
		return strings.Contains(r.worker.stderr.String(), "wstream worker: connected")
	})
	if res := runCLI(t, dir, "tenant", "add", "--nats", url, "--auth-dir", auth, "acme"); res.code != 0 {
		t.Fatalf("tenant add: exit %d\n%s", res.code, res.stderr)
	}
	acmeCreds := filepath.Join(dir, "acme.creds")
	acme, err := nats.Connect(url, nats.UserCredentials(acmeCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acme.Close)
	r.js, _ = jetstream.New(acme)
	createStreams(t, r.js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}, Duplicates: 5 * time.Minute})
	writePlan(t, dir, countPlan(r.g, 1000, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}`))
	r.deploy = startEdge(t, dir, "deploy", "--nats", url, "--nats-creds", acmeCreds, "--plan", "plan.json", "--checkpoint-storage", "nats-obj://leadertest", mod)
	r.job = r.deploy.jobID(t)
	var m *nats.Msg
	select {
	case m = <-deploys:
	case <-time.After(edgeWait):
		t.Fatal("no deployment on the worker's subject")
	}
	var d struct {
		Tenant, TenantJWT, TenantSeed string
	}
	if err := json.Unmarshal(m.Data, &d); err != nil || d.Tenant != "acme" || d.TenantJWT == "" {
		t.Fatalf("the deployment of acme's job: tenant %q, %v", d.Tenant, err)
	}
	return r, attemptCreds{jwt: d.TenantJWT, seed: d.TenantSeed}
}

// attemptCreds are the credentials a deployment gave a worker for a job
// attempt.
type attemptCreds struct{ jwt, seed string }

// connects reports whether the credentials connect to url now.
func (a attemptCreds) connects(url string) bool {
	nc, err := nats.Connect(url, nats.UserJWTAndSeed(a.jwt, a.seed), nats.CustomInboxPrefix("_WS_INBOX.t"))
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// TestTenantLeaderKilled is TestLeaderKilled for a tenant's job: the
// standby that takes over after the leader's SIGKILL adopts the attempt
// of acme's job (the job's attempt stays 0: no restart), the job
// completes checkpoints again and finishes with exact output in acme's
// stream; the credentials the dead leader minted for the attempt, which
// the new leader learned from the worker, are revoked once the attempt
// has ended.
func TestTenantLeaderKilled(t *testing.T) {
	r, creds := startTenantLeaderRun(t)
	second := r.server(t, "b", nil, "--nats", r.url)
	second.until(t, "the standby's start", false, func() bool {
		return strings.Contains(second.stderr.String(), "wstream server: standby")
	})
	cp := r.checkpointed(t, r.leader, 0, edgeWait)
	if !creds.connects(r.url) {
		t.Fatal("the running attempt's credentials do not connect")
	}
	killed := time.Now()
	r.leader.kill(t)
	second.until(t, "the take-over", false, func() bool {
		return strings.Contains(second.stderr.String(), "coordinator running")
	})
	again := r.checkpointed(t, second, cp, edgeWait)
	recovered := time.Since(killed)
	t.Logf("leader killed after checkpoint %d: checkpoint %d completed %s after the kill", cp, again, recovered.Round(time.Millisecond))
	// A restart would cancel the attempt and restore: the bound leaves
	// room for a loaded machine, not for that.
	if recovered > leaderLease+10*time.Second {
		t.Errorf("the first checkpoint after the kill completed %s after it; the lease is %s", recovered, leaderLease)
	}
	s := r.finish(t)
	if s.Tenant != "acme" {
		t.Errorf("the job's record names tenant %q", s.Tenant)
	}
	if want := epochIn(t, second.stderr.String()); s.Epoch != want {
		t.Errorf("the job's record has epoch %d, the new leader's is %d", s.Epoch, want)
	}
	if s.Attempt != 0 || len(s.RestartLog) != 0 {
		t.Errorf("acme's job restarted after the take-over: attempt %d, restarts %+v\n%s", s.Attempt, s.RestartLog, second.stderr.String())
	}
	if out := second.stderr.String(); !strings.Contains(out, "attempt adopted") {
		t.Errorf("the new leader does not say it adopted the attempt:\n%s", out)
	}
	// The dead leader's credentials of the attempt stop working once it
	// has ended (after a grace of about 10 s for its subtasks to stop).
	deadline := time.Now().Add(time.Minute)
	for creds.connects(r.url) {
		if time.Now().After(deadline) {
			t.Fatalf("the adopted attempt's credentials still connect a minute after its end\n%s", second.stderr.String())
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}
