package tenant

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// TestAccountsKeepTenantsApart runs a real embedded NATS server that trusts
// an authority with two tenants and checks what crosses accounts: a
// tenant's requests reach the service account under its own account key,
// events reach only their tenant, and JetStream is per account.
func TestAccountsKeepTenantsApart(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ta, _, err := a.Add("acme", Quotas{StorageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Configure: a.ConfigureServer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(c Creds, err error) *nats.Conn {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := transport.ConnectInProcess(srv, "test", c.Option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// A tenant added while the server runs reaches it through the system
	// account, as with an external server.
	tb, jb, err := a.Add("bolt", Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	sys := connect(a.SystemUser("push"))
	if err := Push(sys, jb); err != nil {
		t.Fatal(err)
	}
	svc := connect(a.CoordinatorUser("coordinator"))
	na := connect(a.TenantUser("acme", "client"))
	nb := connect(a.TenantUser("bolt", "client"))

	got := make(chan *nats.Msg, 4)
	sub, err := svc.Subscribe(APIPrefix+"*.list", func(m *nats.Msg) {
		got <- m
		_ = m.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = svc.Flush()
	for _, c := range []struct {
		nc   *nats.Conn
		acct string
	}{{na, ta.Account}, {nb, tb.Account}} {
		if _, err := c.nc.Request("wstream.coord.list", nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		m := <-got
		if want := APIPrefix + c.acct + ".list"; m.Subject != want {
			t.Fatalf("request arrived on %s, want %s", m.Subject, want)
		}
		if info := m.Header.Get("Nats-Request-Info"); !strings.Contains(info, c.acct) {
			t.Fatalf("request info %q does not name account %s", info, c.acct)
		}
	}
	// A forged subject cannot reach another tenant's part: the tenant has
	// no such import, so nothing answers.
	if _, err := na.Request("wstream.api."+tb.Account+".list", nil, 300*time.Millisecond); err == nil {
		t.Fatal("tenant acme reached the api as bolt")
	}

	// Events: each tenant hears its own.
	ea, _ := na.SubscribeSync("wstream.job.*.done")
	eb, _ := nb.SubscribeSync("wstream.job.*.done")
	_ = na.Flush()
	_ = nb.Flush()
	if err := svc.Publish(EventsPrefix+ta.Account+".job.j1.done", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if m, err := ea.NextMsg(5 * time.Second); err != nil || string(m.Data) != "a" || m.Subject != "wstream.job.j1.done" {
		t.Fatalf("acme's event: %v %v", m, err)
	}
	if m, err := eb.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("bolt heard acme's event %s", m.Subject)
	}

	// JetStream is per account.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jsa, _ := jetstream.New(na)
	if _, err := jsa.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "secret"}); err != nil {
		t.Fatal(err)
	}
	jsb, _ := jetstream.New(nb)
	if _, err := jsb.KeyValue(ctx, "secret"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("bolt opening acme's bucket: %v, want not found", err)
	}
	// The account's storage limit holds.
	if _, err := jsa.CreateStream(ctx, jetstream.StreamConfig{Name: "big", Subjects: []string{"big"}, MaxBytes: 1 << 30}); err == nil {
		t.Fatal("a stream larger than the tenant's storage quota was created")
	}

	// A removed tenant's users are revoked.
	late, err := a.TenantUser("bolt", "late")
	if err != nil {
		t.Fatal(err)
	}
	_, jr, err := a.Remove("bolt")
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(sys, jr); err != nil {
		t.Fatal(err)
	}
	// Over a socket: an in-process connection that the server refuses
	// waits for its pipe to time out.
	if _, err := nats.Connect(srv.ClientURL(), late.Option()); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a user of a removed tenant connecting: %v, want an authorization violation", err)
	}
	// Reopening the authority keeps everything.
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Tenants(); len(got) != 2 || got[0].Name != "acme" || !got[1].Removed {
		t.Fatalf("reopened tenants %+v", got)
	}
}

func TestCheckName(t *testing.T) {
	for _, n := range []string{"acme", "a", "team-1", "x_y"} {
		if err := CheckName(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, n := range []string{"", "Acme", "1a", "admin", "a.b", "a b", strings.Repeat("a", 33), "a>"} {
		if err := CheckName(n); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

// TestWorkerAndAttemptUsers runs a real embedded NATS server and checks
// what a worker's user and a job attempt's may do: the worker its own
// subjects only, the attempt no control plane, and a revoked worker
// nothing.
func TestWorkerAndAttemptUsers(t *testing.T) {
	a, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Add("acme", Quotas{}); err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Configure: a.ConfigureServer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	// connect returns a connection and the permission errors it got.
	must := func(c Creds, err error) Creds {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	connect := func(c Creds, opts ...nats.Option) (*nats.Conn, func(subject string) bool) {
		t.Helper()
		errs := make(chan error, 64)
		nc, err := transport.ConnectInProcess(srv, "test", append([]nats.Option{c.Option(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		var seen []string
		// The server's refusal comes asynchronously: wait for it a while.
		return nc, func(subject string) bool {
			deadline := time.After(5 * time.Second)
			for {
				for _, s := range seen {
					if strings.Contains(s, "Permissions Violation") && strings.Contains(s, `"`+subject+`"`) {
						return true
					}
				}
				select {
				case err := <-errs:
					seen = append(seen, err.Error())
				case <-deadline:
					return false
				}
			}
		}
	}
	coord, _ := connect(must(a.CoordinatorUser("coordinator")))
	got := make(chan string, 16)
	if _, err := coord.Subscribe("wstream.coord.>", func(m *nats.Msg) { got <- m.Subject }); err != nil {
		t.Fatal(err)
	}
	_ = coord.Flush()

	w1, refused := connect(must(a.WorkerUser("w1")), nats.CustomInboxPrefix(transport.WorkerInboxPrefix("w1")))
	for _, s := range []string{transport.WorkerHeartbeatSubject("w1"), transport.SubjectSubmit, transport.SubjectTenant, transport.WorkerHeartbeatSubject("w2")} {
		_ = w1.Publish(s, []byte("{}"))
	}
	if s := <-got; s != transport.WorkerHeartbeatSubject("w1") {
		t.Fatalf("the coordinator heard %s", s)
	}
	for _, s := range []string{transport.SubjectSubmit, transport.SubjectTenant, transport.WorkerHeartbeatSubject("w2")} {
		if !refused(s) {
			t.Errorf("worker w1 published to %s", s)
		}
	}
	for _, s := range []string{transport.WorkerSubjects("w2"), "_INBOX.>", "$JS.API.>"} {
		if _, err := w1.SubscribeSync(s); err != nil {
			t.Fatal(err)
		}
		if !refused(s) {
			t.Errorf("worker w1 subscribed to %s", s)
		}
	}
	if name, ok := WorkerName(func() string { c, _ := a.WorkerUser("w3"); return c.JWT }()); !ok || name != "w3" {
		t.Errorf("WorkerName: %q %v", name, ok)
	}
	if _, ok := WorkerName(func() string { c, _ := a.AdminUser("admin"); return c.JWT }()); ok {
		t.Error("the admin's JWT names a worker")
	}

	// An attempt's user of acme's account: no control plane, an expiry.
	at, refusedAt := connect(must(a.AttemptUser("acme", "j1", 0, time.Minute)), nats.CustomInboxPrefix(transport.AttemptInboxPrefix("j1", 0)))
	_, err = at.Request("wstream.coord.list", nil, time.Second)
	if !errors.Is(err, nats.ErrTimeout) || !refusedAt("wstream.coord.list") {
		t.Errorf("an attempt's list: %v", err)
	}
	if _, err := at.SubscribeSync("_INBOX.>"); err != nil || !refusedAt("_INBOX.>") {
		t.Errorf("an attempt subscribed to the account's inboxes: %v", err)
	}
	js, _ := jetstream.New(at)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Errorf("an attempt's JetStream in its account: %v", err)
	}
	short, err := a.AttemptUser("acme", "j1", 0, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Refused once expired (the expiry is in whole seconds); over TCP the
	// server's refusal comes back as an error.
	for deadline := time.Now().Add(30 * time.Second); ; {
		nc, err := nats.Connect(srv.ClientURL(), short.Option())
		if err != nil {
			// The server refuses at CONNECT (a violation) or, when the expiry
			// falls between CONNECT and the first PONG, says it expired.
			if !strings.Contains(err.Error(), "Authorization Violation") && !strings.Contains(strings.ToLower(err.Error()), "authentication expired") {
				t.Errorf("expired attempt credentials: %v", err)
			}
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("attempt credentials with a 2 s expiry still connect after 30 s")
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}

	// A revoked worker connects no more.
	w4, err := a.WorkerUser("w4")
	if err != nil {
		t.Fatal(err)
	}
	sys, _ := connect(must(a.SystemUser("push")))
	j, err := a.RevokeWorker("w4")
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(sys, j); err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(srv.ClientURL(), w4.Option()); err == nil {
		nc.Close()
		t.Error("a revoked worker connects")
	} else if !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("a revoked worker: %v", err)
	}
	if _, err := a.RevokeWorker("nobody"); err == nil {
		t.Error("revoking an unknown worker")
	}
}
