package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// TestNewLeaderSeesTenantsAddedWhileAnotherLed: two coordinators hold one
// tenant authority directory; a tenant added while the first leads is
// served by the second once it takes over (it once answered "no tenant").
func TestNewLeaderSeesTenantsAddedWhileAnotherLed(t *testing.T) {
	dir := t.TempDir()
	auth, err := tenant.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir(), Configure: auth.ConfigureServer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	connect := func(name string, c tenant.Creds, err error) *nats.Conn {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := transport.ConnectInProcess(srv, name, c.Option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	start := func(id string) *Coordinator {
		t.Helper()
		holder, err := tenant.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		cr, err := holder.CoordinatorUser(id)
		c, err := New(Config{NATS: connect(id, cr, err), DataDir: t.TempDir(), Tenants: holder, ServerID: id, Lease: time.Second,
			HeartbeatInterval: 20 * time.Millisecond, WorkerTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a := start("a")
	if _, leading := a.Leader(); !leading {
		t.Fatal("the first coordinator does not lead")
	}
	b := start("b")
	if _, leading := b.Leader(); leading {
		t.Fatal("the second coordinator leads beside the first")
	}
	// The leader adds acme, as its tenant request does: on disk, and the
	// account's JWT pushed to the server.
	_, accountJWT, err := a.cfg.Tenants.Add("acme", tenant.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	sysCr, err := auth.SystemUser("sys")
	sys := connect("sys", sysCr, err)
	if err := tenant.Push(sys, accountJWT); err != nil {
		t.Fatal(err)
	}
	a.Close()
	waitUntil(t, "the standby did not take over", func() bool { _, leading := b.Leader(); return leading })

	// The client's credentials are those the tenant was given when added.
	acmeCr, err := a.cfg.Tenants.TenantUser("acme", "client")
	acme := connect("acme", acmeCr, err)
	var reply struct {
		Error string `json:"error"`
	}
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := acme.Request("wstream.coord.list", []byte(`{}`), 10*time.Second)
		if err == nil {
			if err := json.Unmarshal(m.Data, &reply); err != nil {
				t.Fatalf("list: %q: %v", m.Data, err)
			}
			break
		}
		// No responders until the new leader subscribes.
		if time.Now().After(deadline) {
			t.Fatalf("acme's list request: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(reply.Error, "no tenant") || strings.Contains(reply.Error, "not authorized") {
		t.Fatalf("the new leader refuses acme: %s", reply.Error)
	}
}
