package tests

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// TestAttackWorkerIsNotAdmin plays a worker host taken over by a guest:
// with the worker's credentials it tries to manage tenants, submit and
// cancel jobs, read another worker's deployments and every tenant's keys.
// Each is refused by NATS; what it hears on its own subject is its own
// work, with credentials that expire and reach no control plane; acme's
// job stays exact.
func TestAttackWorkerIsNotAdmin(t *testing.T) {
	mod := module(t, "testops")
	c, tcs := startAttackCluster(t, "acme")
	acme := tcs["acme"]

	// A second worker with credentials of its own.
	w2creds := filepath.Join(c.dir, "w2.creds")
	var w2 *edgeProc
	if r := runCLI(t, c.dir, "tenant", "worker-creds", "--data", c.data, "--creds-out", w2creds, "w2"); r.code != 0 {
		t.Errorf("tenant worker-creds w2: exit %d\n%s", r.code, r.stderr)
	} else {
		w2 = startEdge(t, c.dir, "worker", "--nats", c.url, "--nats-creds", w2creds, "--data", filepath.Join(c.dir, "w2"))
		w2.until(t, "worker w2 connected", false, func() bool { return strings.Contains(w2.stderr.String(), "connected") })
	}

	// The thief's connection: worker.creds, with the inbox its user may use.
	var (
		mu         sync.Mutex
		violations []string
	)
	wnc, err := nats.Connect(c.url, nats.UserCredentials(c.workerCreds()),
		nats.CustomInboxPrefix("wstream.worker.worker.inbox"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	refused := func(subject string) bool {
		_ = wnc.Flush()
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			if strings.Contains(v, "Permissions Violation") && strings.Contains(v, `"`+subject+`"`) {
				return true
			}
		}
		return false
	}
	// Everything it hears, on every subject it tries.
	heard := map[string][]*nats.Msg{}
	listen := func(subject string) {
		_, err := wnc.Subscribe(subject, func(m *nats.Msg) {
			mu.Lock()
			heard[subject] = append(heard[subject], m)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	others := []string{">", "wstream.>", "wstream.worker.*.deploy", "wstream.worker.w2.>", "_INBOX.>", "wstream.api.>", "$JS.API.>"}
	for _, s := range others {
		listen(s)
	}
	listen("wstream.worker.worker.deploy")
	for _, s := range others {
		deadline := time.Now().Add(10 * time.Second)
		for !refused(s) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		if !refused(s) {
			t.Errorf("the server did not refuse the subscription to %s", s)
		}
	}

	g := genSpec{count: 9000, keys: 40, words: 1, seed: 35, rate: 3000}
	d, job := c.victimJob(t, acme, mod, g)
	d.until(t, "acme's job running", false, func() bool {
		return strings.Contains(runCLI(t, c.dir, "list", "--nats", c.url, "--nats-creds", acme.creds).stdout, job)
	})

	// No tenant management, submit or cancel.
	if r := runCLI(t, c.dir, "tenant", "add", "--nats", c.url, "--nats-creds", c.workerCreds(), "x"); r.code == 0 ||
		!strings.Contains(r.stderr, "not authorized") {
		t.Errorf("tenant add with the worker's credentials: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, c.dir, "tenant", "list", "--data", c.data); r.code != 0 || strings.Contains(r.stdout, "\nx ") {
		t.Errorf("tenant list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, rq := range []struct {
		subject string
		body    any
	}{
		{"wstream.coord.submit", map[string]any{"name": "evil", "plan": json.RawMessage(`{}`), "tenant": "acme"}},
		{"wstream.coord.cancel", map[string]any{"jobId": job}},
		{"wstream.coord.tenant", map[string]any{"op": "creds", "name": "acme"}},
		{"wstream.coord.register.w2", map[string]any{"id": "w2"}},
	} {
		b, _ := json.Marshal(rq.body)
		_, err := wnc.Request(rq.subject, b, 3*time.Second)
		if !errors.Is(err, nats.ErrTimeout) || !refused(rq.subject) {
			t.Errorf("%s with the worker's credentials: %v, refused %v", rq.subject, err, refused(rq.subject))
		}
	}
	// A heartbeat in another worker's name, on its own subject, is
	// ignored: w2 stays the only w2.
	_ = wnc.Publish("wstream.coord.heartbeat.worker", []byte(`{"id":"w2","slots":1}`))

	c.victimExact(t, acme, d, g)
	if w2 != nil && w2.exited() {
		t.Errorf("worker w2 exited:\n%s", w2.stderr.String())
	}

	mu.Lock()
	deploys := heard["wstream.worker.worker.deploy"]
	for _, s := range others {
		if n := len(heard[s]); n != 0 {
			t.Errorf("the worker's credentials heard %d messages on %s, first on %s", n, s, heard[s][0].Subject)
		}
	}
	// What it heard on its own subject, if acme's job went there: an
	// attempt's credentials, which expire and may not use acme's control
	// plane (TestAttackAttemptCredsRevoked tries them), and no key of an
	// account.
	mu.Unlock()
	for _, m := range deploys {
		var dep struct {
			Tenant, TenantJWT, TenantSeed string
		}
		if err := json.Unmarshal(m.Data, &dep); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m.Data), `"SA`) {
			t.Errorf("a deployment carries an account seed: %.300s", m.Data)
		}
		uc, err := jwt.DecodeUserClaims(dep.TenantJWT)
		if err != nil {
			t.Fatalf("deployment's credentials: %v", err)
		}
		if uc.Expires == 0 || time.Until(time.Unix(uc.Expires, 0)) > 8*24*time.Hour {
			t.Errorf("an attempt's credentials expire at %d", uc.Expires)
		}
		if !uc.Permissions.Pub.Deny.Contains("wstream.coord.>") {
			t.Errorf("an attempt's credentials may publish requests: %+v", uc.Permissions)
		}
	}
	// The admin revokes w2: its credentials connect no more.
	if w2 != nil {
		if r := runCLI(t, c.dir, "tenant", "worker-revoke", "--data", c.data, "w2"); r.code != 0 {
			t.Errorf("tenant worker-revoke w2: exit %d\n%s", r.code, r.stderr)
		}
		if nc, err := nats.Connect(c.url, nats.UserCredentials(w2creds)); err == nil {
			nc.Close()
			t.Error("a revoked worker's credentials still connect")
		} else if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("a revoked worker's credentials: %v", err)
		}
	}
	// worker.creds are worker "worker"'s: its id is in them.
	if r := runWith(t, c.dir, nil, 30*time.Second, "worker", "--nats", c.url, "--nats-creds", c.workerCreds(), "--id", "w2", "--data", filepath.Join(c.dir, "w2b")); r.code == 0 ||
		!strings.Contains(r.stderr, "credentials are those of worker worker") {
		t.Errorf("a worker with another's id: exit %d\n%s", r.code, r.stderr)
	}
}

// TestAttackAttemptCredsRevoked: the credentials a worker gets for a job
// attempt expire, and stop working once the attempt has ended: a stolen
// copy does not outlive the work it came with.
func TestAttackAttemptCredsRevoked(t *testing.T) {
	mod := module(t, "testops")
	c, tcs := startAttackCluster(t, "acme")
	acme := tcs["acme"]
	// The thief listens on the worker's own subject for the deployment.
	deploys := make(chan *nats.Msg, 16)
	wnc, err := nats.Connect(c.url, nats.UserCredentials(c.workerCreds()), nats.CustomInboxPrefix("wstream.worker.worker.inbox"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	if _, err := wnc.ChanSubscribe("wstream.worker.worker.deploy", deploys); err != nil {
		t.Fatal(err)
	}
	_ = wnc.Flush()
	g := genSpec{count: 15000, keys: 40, words: 1, seed: 36, rate: 3000}
	d, _ := c.victimJob(t, acme, mod, g)
	var m *nats.Msg
	select {
	case m = <-deploys:
	case <-time.After(edgeWait):
		t.Fatal("no deployment on the worker's subject")
	}
	var dep struct{ TenantJWT, TenantSeed string }
	if err := json.Unmarshal(m.Data, &dep); err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(dep.TenantJWT)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(time.Unix(uc.Expires, 0)); uc.Expires == 0 || left > 8*24*time.Hour {
		t.Errorf("the attempt's credentials expire in %v", left)
	}
	// While the attempt runs they connect, but acme's control plane
	// refuses them.
	anc, err := nats.Connect(c.url, nats.UserJWTAndSeed(dep.TenantJWT, dep.TenantSeed), nats.CustomInboxPrefix("_WS_INBOX.t"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"wstream.coord.list", "wstream.coord.cancel"} {
		_, err = anc.Request(s, []byte(`{}`), 3*time.Second)
		if lerr := anc.LastError(); !errors.Is(err, nats.ErrTimeout) || lerr == nil || !strings.Contains(lerr.Error(), "Permissions Violation") {
			t.Errorf("%s with an attempt's credentials: %v (%v)", s, err, lerr)
		}
	}
	anc.Close()
	c.victimExact(t, acme, d, g)
	// Once the attempt has ended the stolen copy connects no more.
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect(c.url, nats.UserJWTAndSeed(dep.TenantJWT, dep.TenantSeed))
		if err != nil {
			if !strings.Contains(err.Error(), "Authorization Violation") {
				t.Errorf("ended attempt's credentials: %v", err)
			}
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("an ended attempt's credentials still connect after a minute")
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}
