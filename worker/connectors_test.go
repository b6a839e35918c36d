package worker

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestTenantConnectorsConfined: a tenant's job gets no connector that
// reaches beyond its account, whatever the plan says, and its JetStream
// connectors take the tenant's own connection; the admin's jobs keep
// every connector.
func TestTenantConnectorsConfined(t *testing.T) {
	w := &Worker{cfg: Config{Stdout: io.Discard}}
	dial := func(string) (*nats.Conn, error) { return nil, nil }
	tenant := &jobRun{id: "J", tenant: "bolt", dial: dial}
	admin := &jobRun{id: "J"}
	for _, tc := range []struct {
		sink      bool
		connector string
		config    string
		want      string // the tenant's error; "" for none
	}{
		{false, "jetstream", `{"stream":"S"}`, ""},
		{true, "jetstream", `{"stream":"S","subject":"s"}`, ""},
		{false, "gen", `{"count":1}`, ""},
		{true, "discard", ``, ""},
		{false, "jetstream", `{"url":"nats://elsewhere:4222","stream":"S"}`, "config.url: names a NATS server"},
		{false, "jetstream", `{"url":"nats://h:1","creds":"/data/auth/worker.creds","stream":"KV_wstream_jobs"}`, "config.url: names a NATS server"},
		{true, "jetstream", `{"url":"nats://h:1","tlsCA":"/etc/ca.pem","stream":"S","subject":"s"}`, "config.url"},
		{true, "jetstream", `{"url":"nats://h:1","user":"u","password":"p","stream":"S","subject":"s"}`, "config.url"},
		{false, "file", `{"path":"/etc/passwd"}`, "config.path: names a file of the host"},
		{true, "file", `{"path":"/tmp/out"}`, "config.path: names a file of the host"},
		{true, "stdout", ``, "may not reach the host's terminal"},
	} {
		for _, j := range []*jobRun{tenant, admin} {
			var err error
			var built any
			if tc.sink {
				built, err = w.newSink(j, tc.connector, json.RawMessage(tc.config))
			} else {
				built, err = w.newSource(j, tc.connector, json.RawMessage(tc.config))
			}
			want := tc.want
			if j == admin {
				want = ""
			}
			switch {
			case want == "" && err != nil:
				t.Errorf("%s %s (tenant %q): %v", tc.connector, tc.config, j.tenant, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("%s %s (tenant %q): got %v, want %q", tc.connector, tc.config, j.tenant, err, want)
			case want != "" && built != nil:
				t.Errorf("%s %s (tenant %q): refused, yet a connector was built", tc.connector, tc.config, j.tenant)
			}
		}
	}
	// Decode errors come first: a case variant never gets as far as a
	// connection.
	if _, err := w.newSource(tenant, "jetstream", json.RawMessage(`{"stream":"S","URL":"nats://x:1"}`)); err == nil || !strings.Contains(err.Error(), `did you mean "url"`) {
		t.Errorf("URL: %v", err)
	}
	// A tenant's job without a connection to its account gets none.
	if _, err := w.newSource(&jobRun{tenant: "bolt"}, "jetstream", json.RawMessage(`{"stream":"S"}`)); err == nil || !strings.Contains(err.Error(), "no connection to its account") {
		t.Errorf("no dial: %v", err)
	}
}
