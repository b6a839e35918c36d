package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
)

// TestReloadSeesAnotherHoldersTenants: two holders of one directory (the
// coordinator that led, and a standby that takes over): what one adds,
// changes, removes or revokes, the other sees after Reload, and not
// before. A file that will not parse is ErrCorrupt, one that cannot be read
// is not; either way the holder keeps what it had.
func TestReloadSeesAnotherHoldersTenants(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	acme, _, err := a.Add("acme", Quotas{StorageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get("acme"); ok {
		t.Fatal("b sees acme before reloading")
	}
	if _, err := b.TenantUser("acme", "u"); err == nil {
		t.Fatal("b minted a user of acme before reloading")
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	got, ok := b.Get("acme")
	if !ok || got.Account != acme.Account {
		t.Fatalf("b after reloading: %+v %v, want account %s", got, ok, acme.Account)
	}
	if by, ok := b.ByAccount(acme.Account); !ok || by.Name != "acme" {
		t.Fatalf("b by account: %+v %v", by, ok)
	}
	u, err := b.TenantUser("acme", "u")
	if err != nil {
		t.Fatal(err)
	}
	if uc, err := jwt.DecodeUserClaims(u.JWT); err != nil || uc.Issuer != acme.Account {
		t.Fatalf("b's user of acme: %+v %v", uc, err)
	}

	// Quotas, removal and the service account's revocations travel too.
	if _, _, err := a.Update("acme", Quotas{StorageBytes: 128 << 20}); err != nil {
		t.Fatal(err)
	}
	w, err := a.WorkerUser("w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RevokeWorker("w1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Get("acme"); got.Quotas.StorageBytes != 128<<20 {
		t.Fatalf("b's acme quotas after reloading: %+v", got.Quotas)
	}
	wc, err := jwt.DecodeUserClaims(w.JWT)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := jwt.DecodeAccountClaims(b.serviceJWT)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sc.Revocations[wc.Subject]; !ok {
		t.Fatal("b's service account JWT does not revoke the worker a revoked")
	}
	if _, _, err := a.Remove("acme"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Get("acme"); !got.Removed {
		t.Fatal("b does not see acme removed")
	}
	if _, _, err := a.Add("beta", Quotas{}); err != nil {
		t.Fatal(err)
	}

	// A file that cannot be read now is not corrupt; one that does not
	// parse is. Neither makes b forget a tenant.
	unreadable := filepath.Join(dir, "tenants", "gamma.json")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("reload with an unreadable file: %v, want an error that is not ErrCorrupt", err)
	}
	if err := os.Remove(unreadable); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unreadable, []byte(`{"name":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reload with a torn file: %v, want ErrCorrupt", err)
	}
	if _, ok := b.Get("acme"); !ok {
		t.Fatal("b forgot acme after failed reloads")
	}
	if _, ok := b.Get("beta"); ok {
		t.Fatal("b took part of a failed reload")
	}
	if err := os.Remove(unreadable); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get("beta"); !ok {
		t.Fatal("b does not see beta")
	}
}
