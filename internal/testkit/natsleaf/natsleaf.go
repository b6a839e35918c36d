// Package natsleaf starts a JetStream server (the hub) and a leaf node
// without JetStream that tests connect their clients to, so that a test
// can lose every pull parked on the hub without the clients being told:
// restarting the hub on its store drops its pull requests, while the
// clients' connections to the leaf stay up. A client then sees what it
// sees of a paused or lost node of a cluster, or of a consumer leader that
// moved: no answer, no disconnection, no error.
package natsleaf

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsHub lets the global account's JetStream requests cross the leaf
// connection: its JetStream is the hub's, in the default domain.
var jsHub = map[string]string{"$G": ""}

// Servers are the hub and the leaf.
type Servers struct {
	tb       testing.TB
	dir      string
	leafPort int
	hub      *server.Server
	leaf     *server.Server
}

// Start starts the hub and the leaf, stops them when the test ends, and
// waits until JetStream answers through the leaf.
func Start(tb testing.TB) *Servers {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Servers{tb: tb, dir: tb.TempDir(), leafPort: port}
	s.startHub()
	u, _ := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", port))
	s.leaf = s.run(&server.Options{ServerName: "leaf", Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, JsAccDefaultDomain: jsHub,
		LeafNode: server.LeafNodeOpts{ReconnectInterval: 20 * time.Millisecond, Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}})
	tb.Cleanup(func() {
		s.leaf.Shutdown()
		s.hub.Shutdown()
		s.leaf.WaitForShutdown()
		s.hub.WaitForShutdown()
	})
	s.WaitLinked()
	return s
}

// URL is where clients connect: the leaf.
func (s *Servers) URL() string { return s.leaf.ClientURL() }

// Connect connects a client to the leaf, reconnecting for ever.
func (s *Servers) Connect(name string) *nats.Conn {
	s.tb.Helper()
	nc, err := nats.Connect(s.URL(), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		s.tb.Fatal(err)
	}
	s.tb.Cleanup(nc.Close)
	return nc
}

func (s *Servers) run(o *server.Options) *server.Server {
	s.tb.Helper()
	srv, err := server.NewServer(o)
	if err != nil {
		s.tb.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(time.Minute) {
		s.tb.Fatalf("server %s not ready in a minute", o.ServerName)
	}
	return srv
}

func (s *Servers) startHub() {
	s.hub = s.run(&server.Options{ServerName: "hub", Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: s.dir,
		NoSigs: true, NoLog: true, JsAccDefaultDomain: jsHub, LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: s.leafPort}})
}

// WaitLinked polls until the leaf is connected to the hub and JetStream
// answers through it (the hub's interest crosses the leaf connection
// after it is made).
func (s *Servers) WaitLinked() {
	s.tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.leaf.NumLeafNodes() != 1 || s.hub.NumLeafNodes() != 1 {
		if time.Now().After(deadline) {
			s.tb.Fatal("the leaf did not connect to the hub in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	nc := s.Connect("natsleaf-probe")
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		s.tb.Fatal(err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("JetStream does not answer through the leaf: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RestartHub stops the hub and starts it again on its store, losing every
// pull parked on it, and waits until JetStream answers through the leaf
// again. The leaf's clients stay connected throughout.
func (s *Servers) RestartHub() {
	s.tb.Helper()
	s.hub.Shutdown()
	s.hub.WaitForShutdown()
	s.startHub()
	s.WaitLinked()
}
