package faults

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/wstream/wstream/tenant"
)

// setUpTenants creates the tenant authority that the coordinators share,
// tenant acme, and the credentials files of the test's clients (acme's
// and the admin's) and of each worker. It returns node i's part of the
// NATS configuration: the authority's operator, and a resolver of its own.
func (c *cluster) setUpTenants() func(i int) string {
	t := c.t
	c.authDir = filepath.Join(c.dir, "auth")
	auth, err := tenant.Open(c.authDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.Add("acme", tenant.Quotas{}); err != nil {
		t.Fatal(err)
	}
	c.creds = map[string]string{}
	write := func(name string, cr tenant.Creds, err error) {
		if err != nil {
			t.Fatal(err)
		}
		b, err := cr.File()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(c.dir, name+".creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c.creds[name] = p
	}
	cr, err := auth.TenantUser("acme", "faults")
	write("tenant", cr, err)
	cr, err = auth.AdminUser("faults-admin")
	write("admin", cr, err)
	for i := range 3 {
		name := fmt.Sprintf("w%d", i)
		cr, err := auth.WorkerUser(name)
		write(name, cr, err)
	}
	return func(i int) string {
		return auth.ServerConfig(filepath.Join(c.dir, fmt.Sprintf("n%d-jwt", i)))
	}
}

// clientCreds are the flags of a CLI command that make it act as tenant
// acme, with tenants on.
func (c *cluster) clientCreds() []string {
	if f := c.creds["tenant"]; f != "" {
		return []string{"--nats-creds", f}
	}
	return nil
}
