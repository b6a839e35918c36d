// Package natstest starts NATS servers with JetStream for tests that reach
// them over the network (connectors, separate processes): one per test, on a
// free port of 127.0.0.1, with its store in the test's temporary directory.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// Start starts the server, stops it when the test ends, and returns its URL
// and a JetStream client connected to it.
func Start(tb testing.TB) (string, jetstream.JetStream) {
	tb.Helper()
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: tb.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return srv.ClientURL(), js
}
