package transport

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedBusyPort: a port another process holds is named at once, not
// after the readiness timeout.
func TestEmbeddedBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	s, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), Listen: l.Addr().String()})
	if err == nil {
		s.Shutdown()
		t.Fatalf("the server started on %s, which is in use", l.Addr())
	}
	if !strings.Contains(err.Error(), "address already in use") || strings.Contains(err.Error(), "not ready") {
		t.Fatalf("error %q does not say the port is in use", err)
	}
	t.Log(err)
	// The readiness wait is 10 s: an error before it came from the server.
	if d := time.Since(start); d >= 10*time.Second {
		t.Fatalf("the error took %v", d)
	}
}
