package tests

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the suite without the environment variables that
// wstream's flags read (WSTREAM_DATA, WSTREAM_NATS*, NATS_URL): a
// developer's settings must not point the binaries the tests run at their
// own cluster or data. The suite's own settings (WSTREAM_MATRIX, …) stay.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WSTREAM_NATS") || k == "WSTREAM_DATA" || k == "NATS_URL" {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
