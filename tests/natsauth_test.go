package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestClusterWithNATSCredentials runs a coordinator, a worker and a deploy
// as separate processes against a NATS server that requires a user and a
// password: the credentials flags reach every connection, and a wrong
// password is a clear failure, not a hang.
func TestClusterWithNATSCredentials(t *testing.T) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "wstream", Password: "s3cret", NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	url := ns.ClientURL()
	auth := []string{"--nats", url, "--nats-user", "wstream", "--nats-password", "s3cret"}
	dir := t.TempDir()

	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(wstreamBin(t), args...)
		cmd.Dir = dir
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
			}
		})
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(stderr.String(), "wstream "+name+":") {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start:\n%s", name, stderr.String())
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
		return cmd
	}
	start("server", append([]string{"server", "--data", filepath.Join(dir, "coord")}, auth...)...)
	start("worker", append([]string{"worker", "--data", filepath.Join(dir, "w1"), "--id", "w1"}, auth...)...)

	mod := module(t, "wordcount")
	var r result
	deadline := time.Now().Add(time.Minute)
	for {
		// The worker may not have registered yet: a deploy then finds no
		// slot, which is an error; try again until it runs.
		r = runCLI(t, dir, append([]string{"deploy", "-q", "--data", filepath.Join(dir, "client"),
			"--sink", "file:path=" + filepath.Join(dir, "counts.txt")}, append(auth, mod)...)...)
		if r.code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
	if r.code != 0 {
		t.Fatalf("deploy with credentials: exit %d\n%s", r.code, r.stderr)
	}
	// The sink runs on the worker: its output is in the file it wrote.
	counts, err := os.ReadFile(filepath.Join(dir, "counts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := sortedLines(string(counts)); len(lines) != 1000 {
		t.Fatalf("the wordcount wrote %d counts, want 1000", len(lines))
	}

	bad := runCLI(t, dir, "list", "--nats", url, "--nats-user", "wstream", "--nats-password", "wrong")
	if bad.code == 0 || !strings.Contains(strings.ToLower(bad.stderr), "authorization") {
		t.Fatalf("list with a wrong password: exit %d, stderr %q; want a failure that says authorization", bad.code, bad.stderr)
	}
	none := runCLI(t, dir, "list", "--nats", url)
	if none.code == 0 {
		t.Fatalf("list without credentials succeeded against a server that requires them")
	}
	usage := runCLI(t, dir, "list", "--nats", url, "--nats-password", "x")
	if usage.code != 2 || !strings.Contains(usage.stderr, "--nats-password needs --nats-user") {
		t.Fatalf("--nats-password alone: exit %d, stderr %q", usage.code, usage.stderr)
	}
}
