package tenant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPITokens: a token names its owner, only its hash is stored, a new
// token revokes the old one, and a removed tenant's token stops working.
func TestAPITokens(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Add("acme", Quotas{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.IssueAPIToken("ghost"); err == nil {
		t.Fatal("a token for a tenant that does not exist")
	}
	admin, err := a.IssueAPIToken(Admin)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.IssueAPIToken("acme")
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := a.CheckAPIToken(tok); !ok || name != "acme" {
		t.Fatalf("acme's token: %q %v", name, ok)
	}
	if name, ok := a.CheckAPIToken(admin); !ok || name != Admin {
		t.Fatalf("the admin's token: %q %v", name, ok)
	}
	stored, err := os.ReadFile(filepath.Join(dir, "api-tokens", "acme.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	secret := tok[strings.Index(tok, ".")+1:]
	if strings.Contains(string(stored), secret) {
		t.Fatal("the token itself is stored")
	}
	for _, bad := range []string{"", "acme", "acme." + secret[:len(secret)-1] + "x", "admin." + secret, strings.Replace(tok, "acme.", "bolt.", 1), "../acme." + secret} {
		if name, ok := a.CheckAPIToken(bad); ok {
			t.Errorf("token %q accepted as %q", bad, name)
		}
	}
	tok2, err := a.IssueAPIToken("acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CheckAPIToken(tok); ok {
		t.Fatal("the old token works after a new one was issued")
	}
	if _, ok := a.CheckAPIToken(tok2); !ok {
		t.Fatal("the new token is refused")
	}
	// Another process (the server) sees tokens issued here.
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.CheckAPIToken(tok2); !ok {
		t.Fatal("a second authority on the directory refuses the token")
	}
	if _, _, err := a.Remove("acme"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CheckAPIToken(tok2); ok {
		t.Fatal("a removed tenant's token works")
	}
	if err := a.RevokeAPIToken(Admin); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CheckAPIToken(admin); ok {
		t.Fatal("a revoked token works")
	}
}
