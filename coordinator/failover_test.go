package coordinator

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/transport"
)

// startTestCoordinator runs a coordinator with short heartbeats on an
// in-process NATS server and returns a client connection.
func startTestCoordinator(t *testing.T) (*Coordinator, *nats.Conn) {
	t.Helper()
	return startTestCoordinatorWith(t, nil)
}

// startTestCoordinatorWith is startTestCoordinator with a configuration
// that set changes.
func startTestCoordinatorWith(t *testing.T, set func(*Config)) (*Coordinator, *nats.Conn) {
	t.Helper()
	srv, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := transport.ConnectInProcess(srv, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := Config{NATS: nc, DataDir: t.TempDir(), HeartbeatInterval: 20 * time.Millisecond, WorkerTimeout: 200 * time.Millisecond}
	if set != nil {
		set(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client, err := transport.ConnectInProcess(srv, "client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return c, client
}

func workerIDs(c *Coordinator) []string {
	var ids []string
	for _, w := range c.Workers() {
		ids = append(ids, w.ID)
	}
	return ids
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: a busy machine delays the coordinator, never the other way.
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWorkerLostAndBack: a worker whose heartbeats stop is declared lost
// and leaves placement; when it heartbeats again it is placed again.
func TestWorkerLostAndBack(t *testing.T) {
	c, client := startTestCoordinator(t)
	info, _ := json.Marshal(transport.WorkerInfo{ID: "wx", Slots: 4})
	if _, err := client.Request(transport.WorkerRegisterSubject("wx"), info, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ids := workerIDs(c); !slices.Equal(ids, []string{"wx"}) {
		t.Fatalf("workers %v, want [wx]", ids)
	}
	// No heartbeat follows: the worker is declared lost.
	waitUntil(t, "the silent worker was never declared lost", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, known := c.workers["wx"]
		return !known && c.gone["wx"] != ""
	})
	refs := []transport.TaskRef{{Chain: 0, Subtask: 0}}
	if _, err := c.place("j", refs); err == nil {
		t.Fatal("a job was placed on a lost worker")
	}
	c.mu.Lock()
	why := c.gone["wx"]
	c.mu.Unlock()
	if want := "worker wx lost: no heartbeat for "; len(why) <= len(want) || why[:len(want)] != want {
		t.Fatalf("reason %q", why)
	}

	// A heartbeat registers an unknown worker (a coordinator that
	// restarted learns its workers so); one that stays silent is soon
	// lost again.
	stranger, _ := json.Marshal(transport.WorkerInfo{ID: "wy"})
	if err := client.Publish(transport.WorkerHeartbeatSubject("wy"), stranger); err != nil {
		t.Fatal(err)
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	// It heartbeats again, and keeps doing so: it is back, with its slots.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			_ = client.Publish(transport.WorkerHeartbeatSubject("wx"), info)
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	waitUntil(t, "the worker that heartbeats again is not back", func() bool {
		return slices.Equal(workerIDs(c), []string{"wx"})
	})
	p, err := c.place("j", refs)
	if err != nil {
		t.Fatal(err)
	}
	if len(p["wx"]) != 1 {
		t.Fatalf("placement %v, want the subtask on wx", p)
	}
	c.mu.Lock()
	used, slots := c.workers["wx"].used, c.workers["wx"].info.Slots
	c.mu.Unlock()
	if used != 1 || slots != 4 {
		t.Fatalf("wx: %d of %d slots used, want 1 of 4", used, slots)
	}
}
