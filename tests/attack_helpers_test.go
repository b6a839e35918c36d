package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The attack suite (attack_*_test.go) plays a hostile tenant against a
// real cluster: `wstream server` with tenants on (its embedded NATS server
// in operator mode, one account per tenant), a `wstream worker` process
// with the workers' credentials, and two tenants, acme (the victim, which
// runs a job) and bolt (the attacker). Every attack asserts the refusal
// and its error, and that acme's job stays exact and the worker alive.

// attackCluster is one such cluster.
type attackCluster struct {
	dir, data, auth, url string
	srv, wk              *edgeProc
	// workerData is the worker's data directory.
	workerData string
}

// tenantClient is a tenant's view of the cluster: its credentials and its
// own connection.
type tenantClient struct {
	name, creds, token string
	nc                 *nats.Conn
	js                 jetstream.JetStream
}

// startAttackCluster starts the server and one worker, and adds the
// tenants named (each with its credentials and REST token in dir).
func startAttackCluster(t *testing.T, tenants ...string) (*attackCluster, map[string]*tenantClient) {
	t.Helper()
	return startAttackClusterWith(t, nil, tenants...)
}

// startAttackClusterWith is startAttackCluster with more flags of the
// server.
func startAttackClusterWith(t *testing.T, serverFlags []string, tenants ...string) (*attackCluster, map[string]*tenantClient) {
	t.Helper()
	c := &attackCluster{dir: t.TempDir()}
	c.data = filepath.Join(c.dir, "server")
	c.auth = filepath.Join(c.data, "auth")
	c.srv = startEdge(t, c.dir, append([]string{"server", "--data", c.data, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, serverFlags...)...)
	c.srv.until(t, "server URL", false, func() bool {
		b, err := os.ReadFile(filepath.Join(c.data, "nats.url"))
		c.url = strings.TrimSpace(string(b))
		return err == nil && c.url != ""
	})
	c.workerData = filepath.Join(c.dir, "worker")
	c.wk = startEdge(t, c.dir, "worker", "--nats", c.url, "--nats-creds", c.workerCreds(), "--data", c.workerData)
	c.wk.until(t, "worker connected", false, func() bool { return strings.Contains(c.wk.stderr.String(), "connected") })
	out := map[string]*tenantClient{}
	for _, name := range tenants {
		if r := runCLI(t, c.dir, "tenant", "add", "--data", c.data, name); r.code != 0 {
			t.Fatalf("tenant add %s: exit %d\n%s", name, r.code, r.stderr)
		}
		tc := &tenantClient{name: name, creds: filepath.Join(c.dir, name+".creds")}
		if b, err := os.ReadFile(filepath.Join(c.dir, name+".token")); err == nil {
			tc.token = strings.TrimSpace(string(b))
		}
		tc.nc, tc.js = c.connect(t, tc.creds)
		out[name] = tc
	}
	return c, out
}

// workerCreds is the path of the credentials the server wrote for workers.
func (c *attackCluster) workerCreds() string { return filepath.Join(c.auth, "worker.creds") }

// connect opens a connection with creds, closed at the test's end.
func (c *attackCluster) connect(t *testing.T, creds string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connectWith(t, c.url, creds)
}

// connectWith opens a connection to url with creds, closed at the test's
// end.
func connectWith(t *testing.T, url, creds string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// as runs a wstream command with tenant tc's credentials against the
// cluster: the flags go between the command (one or two words, as
// "tenant add") and its arguments.
func (c *attackCluster) as(t *testing.T, tc *tenantClient, cmd []string, args ...string) result {
	t.Helper()
	full := append(append([]string{}, cmd...), "--nats", c.url, "--nats-creds", tc.creds)
	return runCLI(t, c.dir, append(full, args...)...)
}

// ask sends req to subject over nc and returns the error its answer holds
// (or the request's own error).
func ask(nc *nats.Conn, subject string, req any) string {
	b, _ := json.Marshal(req)
	m, err := nc.Request(subject, b, 10*time.Second)
	if err != nil {
		return err.Error()
	}
	var r struct{ Error string }
	_ = json.Unmarshal(m.Data, &r)
	return r.Error
}

// victimJob starts acme's long-running keyed count into its stream OUT
// (created here) and returns the deploy process and the job's id; check
// with victimExact once the attack is done.
func (c *attackCluster) victimJob(t *testing.T, acme *tenantClient, mod string, g genSpec) (*edgeProc, string) {
	t.Helper()
	createStreams(t, acme.js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
	vdir := filepath.Join(c.dir, "victim")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	writePlan(t, vdir, countPlan(g, 300, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}`))
	d := startEdge(t, vdir, "deploy", "--nats", c.url, "--nats-creds", acme.creds, "--plan", "plan.json", mod)
	return d, d.jobID(t)
}

// victimExact waits for acme's job to finish and checks its output against
// the counts computed from g, and that the worker still runs.
func (c *attackCluster) victimExact(t *testing.T, acme *tenantClient, d *edgeProc, g genSpec) {
	t.Helper()
	d.mustExit0(t, edgeWait)
	got, _ := outputLines(t, acme.js, "OUT")
	sameLines(t, "acme's output stream", got, asMessages(g.runningCounts(), "out"))
	c.workerAlive(t)
}

// workerAlive fails the test when the worker process has exited or a
// process of the cluster panicked.
func (c *attackCluster) workerAlive(t *testing.T) {
	t.Helper()
	if c.wk.exited() {
		t.Errorf("the worker exited:\n%s", c.wk.stderr.String())
	}
	if strings.Contains(c.srv.stderr.String()+c.wk.stderr.String(), "panic") {
		t.Errorf("a process panicked:\n%s\n%s", c.srv.stderr.String(), c.wk.stderr.String())
	}
}

// auditLines returns the audit log's entries.
func (c *attackCluster) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.data, "audit.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit log line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

// httpURL is the server's REST address, as it printed it at start.
func (c *attackCluster) httpURL(t *testing.T) string {
	t.Helper()
	var u string
	c.srv.until(t, "the server's HTTP address", false, func() bool {
		for _, f := range strings.Fields(c.srv.stderr.String()) {
			if strings.HasPrefix(f, "http://127.0.0.1:") {
				u = strings.TrimRight(f, ".,;)")
				return true
			}
		}
		return false
	})
	return u
}

// waitCtx is a context for the attacks' JetStream calls.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
