package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startReplicaCluster starts three JetStream servers on 127.0.0.1, routed to
// one another as cluster name, each with a store of its own, and waits
// until JetStream has a meta leader. It returns the client URLs.
func startReplicaCluster(t *testing.T, dir, name string) []string {
	t.Helper()
	const n = 3
	ports, routes := make([]int, n), make([]int, n)
	for i := range n {
		ports[i], routes[i] = clusterPort(t), clusterPort(t)
	}
	var urls []string
	for i := range n {
		var rs []string
		for j := range n {
			if j != i {
				rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%d", routes[j]))
			}
		}
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("%s-%d", name, i), Host: "127.0.0.1", Port: ports[i],
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("nats-%d", i)), SyncAlways: true,
			Cluster: server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(rs, ",")),
			NoLog:   true, NoSigs: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats server %d not ready", i)
		}
		urls = append(urls, srv.ClientURL())
	}
	// JetStream answers once the servers have elected a meta leader.
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	clusterPoll(t, 45*time.Second, "a JetStream meta leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return urls
}

// TestReplicasCluster runs a job on a three-node NATS cluster with
// --replicas 3: every stream of the account (the job and id buckets, the
// lease, the module store, the job's data stream, its checkpoint object
// store, the sink's stream and staging store) has three replicas, and the
// output is exact. Against a single server, --replicas 3 fails at start.
func TestReplicasCluster(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	urls := startReplicaCluster(t, dir, "wsr")
	url := urls[0]

	srv := startEdge(t, dir, "server", "--nats", url, "--replicas", "3", "--tenants=false", "--data", filepath.Join(dir, "server"))
	srv.until(t, "server running", false, func() bool { return strings.Contains(srv.stderr.String(), "coordinator running") })
	// Two workers of two slots each, for three subtasks: the job spreads over both, so that its
	// channels go through a data stream.
	for i, u := range []string{urls[1], urls[2]} {
		wk := startEdge(t, dir, "worker", "--nats", u, "--slots", "2", "--id", fmt.Sprintf("w%d", i), "--data", filepath.Join(dir, fmt.Sprintf("worker-%d", i)))
		wk.until(t, "worker connected", false, func() bool { return strings.Contains(wk.stderr.String(), "connected") })
	}

	// Paced, so that the data stream, which goes with the job, is seen.
	g := genSpec{count: 2000, keys: 10, words: 1, seed: 5, rate: 500}
	plan := strings.Replace(countPlan(g, 200, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}","create":true}`),
		`"parallelism":2,`, `"parallelism":1,`, 1)
	writePlan(t, dir, plan)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	seen := map[string]int{} // stream → replicas, over the job's run
	look := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for name := range js.StreamNames(ctx).Name() {
			if st, err := js.Stream(ctx, name); err == nil {
				seen[name] = st.CachedInfo().Config.Replicas
			}
		}
	}
	deploy := startEdge(t, dir, "deploy", "--nats", url, "--plan", "plan.json", "--checkpoint-storage", "nats-obj://wsr_checkpoints", mod)
	deadline := time.Now().Add(3 * time.Minute)
	for !deploy.exited() {
		if time.Now().After(deadline) {
			t.Fatalf("deploy still running after 3m\n%s\nserver:\n%s", deploy.stderr.String(), srv.stderr.String())
		}
		look()
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	if deploy.code() != 0 {
		t.Fatalf("deploy: exit %d\n%s\nserver:\n%s", deploy.code(), deploy.stderr.String(), srv.stderr.String())
	}
	look()
	got, _ := outputLines(t, js, "OUT")
	sameLines(t, "output stream", got, asMessages(g.runningCounts(), "out"))

	for _, want := range []string{"KV_wstream_jobs", "KV_wstream_checkpoint_ids", "OBJ_wstream-modules", "OBJ_wsr_checkpoints", "OUT", "OBJ_wstream_staging"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no stream %s among %v", want, seen)
		}
	}
	t.Logf("streams and their replicas: %v", seen)
	data := false
	for name, r := range seen {
		data = data || strings.HasPrefix(name, "wstream-data-")
		if r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
	if !data {
		t.Errorf("no data stream among %v: the job did not spread over both workers", seen)
	}

	// One server is one node: --replicas 3 is refused at start, saying so.
	single := &clusterNATS{t: t, port: clusterPort(t), store: filepath.Join(dir, "single")}
	single.start()
	defer single.stop()
	bad := startEdge(t, dir, "server", "--nats", single.srv.ClientURL(), "--replicas", "3", "--tenants=false", "--data", filepath.Join(dir, "bad"))
	bad.until(t, "server exit", true, bad.exited)
	if c := bad.code(); c == 0 || !strings.Contains(bad.stderr.String(), "--replicas 3") || !strings.Contains(bad.stderr.String(), "not clustered") {
		t.Fatalf("--replicas 3 on one server: exit %d\n%s", c, bad.stderr.String())
	}
	// Nor can the embedded server keep more than one copy.
	emb := startEdge(t, dir, "server", "--listen", "127.0.0.1:0", "--replicas", "2", "--data", filepath.Join(dir, "embedded"))
	emb.until(t, "server exit", true, emb.exited)
	if c := emb.code(); c == 0 || !strings.Contains(emb.stderr.String(), "--replicas 2: the embedded NATS server is not clustered") {
		t.Fatalf("--replicas 2 on the embedded server: exit %d\n%s", c, emb.stderr.String())
	}
}
