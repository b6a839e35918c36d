package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// failoverLease is the coordinators' lease in BenchmarkLeaderFailover.
const failoverLease = 3 * time.Second

// failoverPlan is a running wordcount, unbounded and paced, with a
// checkpoint every second.
const failoverPlan = `{"name":"failover","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":0,"keys":1000,"words":4,"seed":1,"rate":5000}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}],
 "checkpoint":{"interval":1000}}`

// BenchmarkLeaderFailover measures the leader failover time: with two
// `wstream server` processes (a leader and a standby, lease 3 s), a worker
// and a running job, each iteration SIGKILLs the leader and measures the
// time until the job's record names a checkpoint completed after the
// kill; the killed server is then started again, as the standby of the
// next iteration. It reports the median and the 99th percentile in
// seconds (p99-s, p50-s), and the lease (lease-s): the target is p99 ≤
// lease + 5 s. Run it with -benchtime 20x.
func BenchmarkLeaderFailover(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "wstream")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/wstream/wstream/cmd/wstream").CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/wstream: %v\n%s", err, out)
	}
	mod, err := testmod.Build("go", "wordcount")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(failoverPlan), 0o644); err != nil {
		b.Fatal(err)
	}
	url, _ := natstest.Start(b)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	start := func(args ...string) *benchProc {
		p := startBenchProc(b, dir, bin, args...)
		b.Cleanup(p.kill)
		return p
	}
	server := func(name string) *benchProc {
		return start("server", "--tenants=false", "--lease", failoverLease.String(), "--worker-timeout", "5s",
			"--nats", url, "--data", filepath.Join(dir, name))
	}
	servers := map[string]*benchProc{"a": server("a")}
	servers["a"].await(b, "coordinator running", time.Minute)
	servers["b"] = server("b")
	servers["b"].await(b, "standby", time.Minute)
	worker := start("worker", "--nats", url, "--id", "w1", "--data", filepath.Join(dir, "w1"))
	worker.await(b, "connected", time.Minute)
	deploy := start("deploy", "--nats", url, "--plan", "plan.json", "--checkpoint-storage", "nats-obj://failoverbench", mod)
	m := deploy.await(b, `job (\S+) running`, 2*time.Minute)
	job := m[1]
	spec := func() *coordinator.JobSpec {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := coordinator.ReadJobSpec(ctx, nc, job)
		if err != nil {
			return nil
		}
		return s
	}
	// checkpointAfter waits for a checkpoint above after in the record.
	checkpointAfter := func(after int64, d time.Duration) (*coordinator.JobSpec, bool) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if s := spec(); s != nil && s.LatestCheckpoint > after {
				return s, true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil, false
	}
	s, ok := checkpointAfter(0, 2*time.Minute)
	if !ok {
		b.Fatalf("no first checkpoint\n%s", deploy.output())
	}
	leader, standby := "a", "b"
	var took []time.Duration
	attempt := s.Attempt
	b.ResetTimer()
	for range b.N {
		// A checkpoint of the leader's, so that the kill does not come
		// right after its take-over.
		before := s.LatestCheckpoint
		if s, ok = checkpointAfter(before, time.Minute); !ok {
			b.Fatalf("no checkpoint above %d before the kill\n%s", before, servers[leader].output())
		}
		killed := time.Now()
		servers[leader].kill()
		if s, ok = checkpointAfter(s.LatestCheckpoint, 2*time.Minute); !ok {
			b.Fatalf("no checkpoint within 2 minutes of the leader's kill\n%s", servers[standby].output())
		}
		took = append(took, time.Since(killed))
		if s.Attempt != attempt {
			b.Logf("the job restarted at the take-over: attempt %d, was %d", s.Attempt, attempt)
			attempt = s.Attempt
		}
		b.StopTimer()
		servers[leader] = server(leader)
		servers[leader].await(b, "standby", time.Minute)
		leader, standby = standby, leader
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(q(0.5).Seconds(), "p50-s")
	b.ReportMetric(q(0.99).Seconds(), "p99-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
	b.ReportMetric(failoverLease.Seconds(), "lease-s")
	b.Logf("failover times over %d kills: %v", len(took), took)
}

// benchProc is a wstream process of a benchmark, its stderr kept.
type benchProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func startBenchProc(b *testing.B, dir, bin string, args ...string) *benchProc {
	b.Helper()
	p := &benchProc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p
}

func (p *benchProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *benchProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// kill SIGKILLs the process and waits for its end.
func (p *benchProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// await waits until the process's output matches pattern and returns the
// match.
func (p *benchProc) await(b *testing.B, pattern string, d time.Duration) []string {
	b.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.done:
			b.Fatalf("wstream %s exited before %q:\n%s", strings.Join(p.cmd.Args[1:], " "), pattern, p.output())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("wstream %s: no %q within %s:\n%s", strings.Join(p.cmd.Args[1:], " "), pattern, d, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
