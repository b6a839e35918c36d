package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// TestTenantsAreIsolated runs a cluster with tenants (`wstream server`,
// whose embedded NATS server has accounts by default, and a `wstream
// worker` process), adds tenants acme and bolt, and
// runs acme's job while bolt tries, with its own credentials, to list,
// cancel, savepoint, resume and restore it, to run acme's module, and to
// read acme's streams, buckets and modules: each attempt must fail with an
// authorization error (or not find what is not its own), and acme's output
// must be exact.
func TestTenantsAreIsolated(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	data := filepath.Join(dir, "server")
	srv := startEdge(t, dir, "server", "--data", data, "--listen", "127.0.0.1:0")
	var url string
	srv.until(t, "server URL", false, func() bool {
		b, err := os.ReadFile(filepath.Join(data, "nats.url"))
		url = strings.TrimSpace(string(b))
		return err == nil && url != ""
	})
	auth := filepath.Join(data, "auth")
	// A worker without credentials is refused, and told which to use.
	if r := runCLI(t, dir, "worker", "--nats", url, "--data", filepath.Join(dir, "anon")); r.code != 1 ||
		!strings.Contains(r.stderr, "Authorization Violation") || !strings.Contains(r.stderr, "auth/worker.creds") {
		t.Fatalf("worker without credentials: exit %d\n%s", r.code, r.stderr)
	}
	wk := startEdge(t, dir, "worker", "--nats", url, "--nats-creds", filepath.Join(auth, "worker.creds"), "--data", filepath.Join(dir, "worker"),
		"--http", "127.0.0.1:0")
	wk.until(t, "worker connected", false, func() bool {
		return strings.Contains(wk.stderr.String(), "connected") && metricsURLOf.MatchString(wk.stderr.String())
	})
	metricsURL := metricsURLOf.FindStringSubmatch(wk.stderr.String())[1]

	for _, name := range []string{"acme", "bolt"} {
		if r := runCLI(t, dir, "tenant", "add", "--data", data, name); r.code != 0 {
			t.Fatalf("tenant add %s: exit %d\n%s", name, r.code, r.stderr)
		}
	}
	if r := runCLI(t, dir, "tenant", "add", "--data", data, "acme"); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("adding acme twice: exit %d\n%s", r.code, r.stderr)
	}
	acmeCreds, boltCreds := filepath.Join(dir, "acme.creds"), filepath.Join(dir, "bolt.creds")
	connect := func(creds string) (*nats.Conn, jetstream.JetStream) { return connectWith(t, url, creds) }
	_, acmeJS := connect(acmeCreds)
	boltNC, boltJS := connect(boltCreds)
	createStreams(t, acmeJS, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})

	// A plan that reads the host's files is refused for a tenant.
	writePlan(t, dir, countPlan(genSpec{count: 10, keys: 2, words: 1, seed: 1}, 300, fileSink))
	if r := runCLI(t, dir, "deploy", "--nats", url, "--nats-creds", acmeCreds, "--plan", "plan.json", mod); r.code == 0 ||
		!strings.Contains(r.stderr, "tenant jobs may not") {
		t.Fatalf("a tenant's job with a file sink: exit %d\n%s", r.code, r.stderr)
	}

	// Long enough (about 4 s) for bolt's attempts while it runs.
	g := genSpec{count: 12000, keys: 50, words: 1, seed: 11, rate: 3000}
	writePlan(t, dir, countPlan(g, 300, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}`))
	d := startEdge(t, dir, "deploy", "--nats", url, "--nats-creds", acmeCreds, "--plan", "plan.json", mod)
	job := d.jobID(t)
	// The worker's metrics name the job's tenant.
	d.until(t, "acme's series at the worker's metrics endpoint", false, func() bool {
		labels, _, err := scrapeSeries(metricsURL, "wstream_subtask_records_in_total")
		n := 0
		for _, l := range labels {
			if l["job_id"] == job {
				if l["tenant"] != "acme" {
					t.Fatalf("a series of acme's job labelled tenant %q: %v", l["tenant"], l)
				}
				n++
			}
		}
		return err == nil && n > 0
	})
	// A checkpoint of acme's job, for bolt to try to restore.
	ckpts := filepath.Join(data, "jobs", job, "checkpoints")
	d.until(t, "a checkpoint", false, func() bool { _, id := newestCheckpoint(data); return id >= 1 })

	bolt := func(args ...string) result {
		// Flags go between the command and its arguments.
		cmd := []string{args[0]}
		if args[0] == "tenant" {
			cmd, args = append(cmd, args[1]), args[1:]
		}
		cmd = append(cmd, "--nats", url, "--nats-creds", boltCreds)
		return runCLI(t, dir, append(cmd, args[1:]...)...)
	}
	if r := bolt("list"); r.code != 0 || strings.Contains(r.stdout, job) {
		t.Errorf("bolt's list: exit %d, shows acme's job: %v\n%s%s", r.code, strings.Contains(r.stdout, job), r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"cancel", job}, {"savepoint", job}, {"stop", job}} {
		if r := bolt(args...); r.code == 0 || !strings.Contains(r.stderr, "no job") {
			t.Errorf("bolt's %s: exit %d\n%s%s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	if r := bolt("tenant", "list"); r.code == 0 || !strings.Contains(r.stderr, "not authorized") {
		t.Errorf("bolt listing tenants: exit %d\n%s", r.code, r.stderr)
	}
	if r := bolt("workers"); r.code == 0 || !strings.Contains(r.stderr, "only the cluster's admin") {
		t.Errorf("bolt listing workers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Requests made by hand: resuming acme's job, running acme's module by
	// its digest, reaching acme's part of the api.
	ask := func(subject string, req any) string {
		b, _ := json.Marshal(req)
		m, err := boltNC.Request(subject, b, 10*time.Second)
		if err != nil {
			return err.Error()
		}
		var r struct{ Error string }
		_ = json.Unmarshal(m.Data, &r)
		return r.Error
	}
	if e := ask(transport.SubjectSubmit, transport.SubmitRequest{Resume: job, Plan: json.RawMessage(`{}`)}); e == "" {
		t.Error("bolt resumed acme's job")
	}
	wasm, err := os.ReadFile(mod)
	if err != nil {
		t.Fatal(err)
	}
	digest := coordinator.ModuleDigest(wasm)
	plan, _ := os.ReadFile(filepath.Join(dir, "plan.json"))
	if e := ask(transport.SubjectSubmit, transport.SubmitRequest{Name: "steal", Plan: plan, ModuleDigest: digest, ModuleName: "testops"}); !strings.Contains(e, "not in tenant bolt's module store") {
		t.Errorf("bolt running acme's module by digest: %q", e)
	}
	if e := ask(transport.SubjectSubmit, transport.SubmitRequest{Name: "as-acme", Plan: plan, Tenant: "acme"}); !strings.Contains(e, "not authorized") {
		t.Errorf("bolt submitting as acme: %q", e)
	}
	if _, err := boltNC.Request("wstream.api.x.list", nil, 500*time.Millisecond); err == nil {
		t.Error("bolt reached the api outside its own part")
	}
	// acme's data: none of it is in bolt's account.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"OUT", transport.DataStream(job), "OBJ_" + transport.ModuleBucket} {
		if _, err := boltJS.Stream(ctx, s); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("bolt opening acme's stream %s: %v, want not found", s, err)
		}
	}
	if _, err := boltJS.ObjectStore(ctx, transport.ModuleBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("bolt opening a module store: %v, want not found", err)
	}
	if _, err := boltJS.KeyValue(ctx, transport.JobsBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("bolt opening the job bucket: %v, want not found", err)
	}
	// Last, as it stores bolt's own copy of the module.
	if r := bolt("deploy", "--plan", "plan.json", "--from-savepoint", ckpts, "--checkpoint-interval", "300ms", mod); r.code == 0 ||
		!strings.Contains(r.stderr, "savepoints live in its own account") {
		t.Errorf("bolt restoring acme's checkpoint: exit %d\n%s", r.code, r.stderr)
	}
	// bolt hears nothing of acme's job's end.
	ends, _ := boltNC.SubscribeSync("wstream.job.*.done")
	_ = boltNC.Flush()

	d.mustExit0(t, edgeWait)
	got, _ := outputLines(t, acmeJS, "OUT")
	sameLines(t, "acme's output stream", got, asMessages(g.runningCounts(), "out"))
	if m, err := ends.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("bolt heard of a job's end: %s", m.Subject)
	}

	// The admin sees every job, with its tenant.
	if r := runCLI(t, dir, "list", "--data", data); r.code != 0 || !strings.Contains(r.stdout, "acme") || !strings.Contains(r.stdout, job) {
		t.Errorf("the admin's list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The audit log names who did what.
	b, err := os.ReadFile(filepath.Join(data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"tenant":"bolt","user":"U`, `"action":"cancel","job":"` + job + `","error":"no job`, `"tenant":"acme"`, `"tenant":"admin"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the audit log lacks %s:\n%s", want, b)
		}
	}
	// The tenant's memory quota bounds its instances below the worker's
	// limit.
	if r := runCLI(t, dir, "tenant", "update", "--data", data, "--memory", "1", "acme"); r.code != 0 {
		t.Fatalf("tenant update: exit %d\n%s", r.code, r.stderr)
	}
	writePlan(t, dir, countPlan(genSpec{count: 100, keys: 5, words: 1, seed: 2}, 300, `"connector":"discard"`))
	if r := runCLI(t, dir, "deploy", "--nats", url, "--nats-creds", acmeCreds, "--plan", "plan.json", mod); r.code == 0 ||
		!strings.Contains(r.stderr, "memory limit of 1 MiB") {
		t.Errorf("acme's job over its memory quota: exit %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(srv.stderr.String()+wk.stderr.String(), "panic") {
		t.Errorf("a process panicked:\n%s\n%s", srv.stderr.String(), wk.stderr.String())
	}
}

var (
	natsServerOnce sync.Once
	natsServerPath string
	natsServerErr  error
)

// natsServerBin builds the nats-server command of the module's
// dependency once per test process: an external server, as users run it.
func natsServerBin(t *testing.T) string {
	t.Helper()
	natsServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nats-server-bin")
		if err != nil {
			natsServerErr = err
			return
		}
		natsServerPath = filepath.Join(dir, "nats-server")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", natsServerPath, "github.com/nats-io/nats-server/v2")
		cmd.Dir = testmod.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			natsServerErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
		}
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerPath
}

// startTenantNATS starts a nats-server configured with the fragment
// `wstream tenant init` writes for the tenant authority dir/auth, and
// returns its URL and the authority's directory.
func startTenantNATS(t *testing.T, dir string) (string, string) {
	t.Helper()
	auth := filepath.Join(dir, "auth")
	if r := runCLI(t, dir, "tenant", "init", "--auth-dir", auth, "--resolver-dir", filepath.Join(dir, "jwt")); r.code != 0 {
		t.Fatalf("tenant init: exit %d\n%s", r.code, r.stderr)
	}
	frag, err := os.ReadFile(filepath.Join(auth, "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	body := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream: {store_dir: %q}\n%s", filepath.Join(dir, "js"), frag)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := filepath.Join(dir, "ports")
	if err := os.MkdirAll(ports, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := exec.Command(natsServerBin(t), "-c", conf, "--ports_file_dir", ports)
	var nsOut syncBuffer
	ns.Stdout, ns.Stderr = &nsOut, &nsOut
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Process.Kill(); _ = ns.Wait() })
	var url string
	deadline := time.Now().Add(edgeWait)
	for url == "" {
		if time.Now().After(deadline) {
			t.Fatalf("nats-server wrote no ports file:\n%s", nsOut.String())
		}
		files, _ := filepath.Glob(filepath.Join(ports, "*.ports"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var p struct {
				Nats []string `json:"nats"`
			}
			if json.Unmarshal(b, &p) == nil && len(p.Nats) > 0 {
				url = p.Nats[0]
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}

	return url, auth
}

// TestTenantsExternalServer runs the tenants of a cluster on an external
// NATS server configured with the fragment `wstream tenant init` writes:
// the coordinator pushes the accounts of tenants added later through the
// system account, and a tenant's job runs with exact output.
func TestTenantsExternalServer(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	url, auth := startTenantNATS(t, dir)
	data := filepath.Join(dir, "server")
	srv := startEdge(t, dir, "server", "--tenants", "--auth-dir", auth, "--nats", url, "--data", data)
	srv.until(t, "server running", false, func() bool { return strings.Contains(srv.stderr.String(), "coordinator running") })
	wk := startEdge(t, dir, "worker", "--nats", url, "--nats-creds", filepath.Join(auth, "worker.creds"), "--data", filepath.Join(dir, "worker"))
	wk.until(t, "worker connected", false, func() bool { return strings.Contains(wk.stderr.String(), "connected") })
	if r := runCLI(t, dir, "tenant", "add", "--nats", url, "--auth-dir", auth, "--storage-bytes", "268435456", "--state-write-rate", "3145728", "acme"); r.code != 0 {
		t.Fatalf("tenant add: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, dir, "tenant", "list", "--nats", url, "--auth-dir", auth); r.code != 0 || !strings.Contains(r.stdout, "acme") || !strings.Contains(r.stdout, "256 MiB") || !strings.Contains(r.stdout, "3 MiB/s") {
		t.Fatalf("tenant list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	acmeCreds := filepath.Join(dir, "acme.creds")
	nc, err := nats.Connect(url, nats.UserCredentials(acmeCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	createStreams(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
	g := genSpec{count: 3000, keys: 20, words: 1, seed: 3}
	writePlan(t, dir, countPlan(g, 200, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}`))
	if r := runCLI(t, dir, "deploy", "--nats", url, "--nats-creds", acmeCreds, "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("acme's deploy: exit %d\n%s", r.code, r.stderr)
	}
	got, _ := outputLines(t, js, "OUT")
	sameLines(t, "acme's output stream", got, asMessages(g.runningCounts(), "out"))
	// A quota above the account's JetStream limit is NATS's to refuse.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big"}, MaxBytes: 1 << 30}); err == nil {
		t.Error("acme created a stream larger than its storage quota")
	}
}
