package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// REST API tokens. A bearer token is NAME.SECRET, NAME a tenant or Admin;
// the authority keeps only the SHA-256 of each name's current token, in
// DIR/api-tokens/NAME.sha256, so the directory gives no token away. Issuing
// a new token for a name revokes the one before.

const apiTokenDir = "api-tokens"

func (a *Authority) tokenPath(name string) string {
	return filepath.Join(a.dir, apiTokenDir, name+".sha256")
}

// IssueAPIToken makes a new REST API token for name (a tenant that exists,
// or Admin), replacing any earlier one, and returns it.
func (a *Authority) IssueAPIToken(name string) (string, error) {
	if name != Admin {
		if t, ok := a.Get(name); !ok || t.Removed {
			return "", fmt.Errorf("no tenant %q", name)
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := name + "." + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	if err := os.MkdirAll(filepath.Join(a.dir, apiTokenDir), 0o700); err != nil {
		return "", fmt.Errorf("tenant authority: %w", err)
	}
	if err := writePrivate(a.tokenPath(name), []byte(hex.EncodeToString(sum[:])+"\n")); err != nil {
		return "", err
	}
	return token, nil
}

// RevokeAPIToken removes name's REST API token.
func (a *Authority) RevokeAPIToken(name string) error {
	if err := os.Remove(a.tokenPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tenant authority: %w", err)
	}
	return nil
}

// CheckAPIToken returns whom token belongs to: Admin or a tenant that has
// not been removed. It reads the token's hash from the directory on every
// call, so a token issued or revoked by another process counts at once.
func (a *Authority) CheckAPIToken(token string) (string, bool) {
	name, _, ok := strings.Cut(token, ".")
	if !ok || (name != Admin && CheckName(name) != nil) {
		return "", false
	}
	want, err := os.ReadFile(a.tokenPath(name))
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	got := []byte(hex.EncodeToString(sum[:]))
	if subtle.ConstantTimeCompare(got, []byte(strings.TrimSpace(string(want)))) != 1 {
		return "", false
	}
	if name != Admin {
		if t, ok := a.Get(name); !ok || t.Removed {
			return "", false
		}
	}
	return name, true
}
