// Package natstest starts NATS servers with JetStream for tests that reach
// them over the network (connectors, separate processes): one per test, on a
// free port of 127.0.0.1, with its store in the test's temporary directory.
package natstest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

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

// SetObjectSize rewrites the record of object name in bucket to say it is
// size bytes, as any client that may write the bucket can: the record is
// the uploader's word, not the object's.
func SetObjectSize(tb testing.TB, js jetstream.JetStream, bucket, name string, size uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subj := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		tb.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		tb.Fatal(err)
	}
	rec["size"] = size
	msg := nats.NewMsg(subj)
	msg.Data, _ = json.Marshal(rec)
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		tb.Fatal(err)
	}
}
