package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/transport"
)

// TestReplicasOnOneServer: a single server (not clustered) takes one
// replica and refuses more, at the start check and on creation, with an
// error that names the flag and the cause.
func TestReplicasOnOneServer(t *testing.T) {
	url, js := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := transport.CheckReplicas(nc, 1); err != nil {
		t.Fatalf("one replica on one server: %v", err)
	}
	for _, c := range []struct {
		n    int
		want []string
	}{
		{0, []string{"--replicas 0", "at least 1"}},
		{6, []string{"--replicas 6", "at most 5"}},
		{3, []string{"--replicas 3", "not clustered (1 node)", url}},
	} {
		err := transport.CheckReplicas(nc, c.n)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("CheckReplicas(%d) = %v, want it to say %q", c.n, err, w)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := transport.CreateDataStream(ctx, js, "one", 1); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, transport.DataStream("one"))
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 1 {
		t.Fatalf("data stream has %d replicas, want 1", r)
	}
	err = transport.CreateDataStream(ctx, js, "three", 3)
	var api *jetstream.APIError
	if err == nil || !errors.As(err, &api) || !strings.Contains(err.Error(), "--replicas 3: the NATS server is not clustered") {
		t.Fatalf("a data stream of 3 replicas on one server: %v", err)
	}
	// Raising an existing stream's count goes through the same check.
	err = transport.CreateDataStream(ctx, js, "one", 3)
	if err == nil || !strings.Contains(err.Error(), "not clustered") {
		t.Fatalf("raising a data stream to 3 replicas on one server: %v", err)
	}
	if transport.ReplicasError(nil, 3) != nil || transport.ReplicasError(api, 1) != api {
		t.Fatal("ReplicasError changed what is not a refusal of replicas")
	}
}
