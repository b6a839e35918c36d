package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// TestMain runs the suite without the environment variables that
// wstream's flags read: a developer's settings must not point the
// processes at their own cluster or data.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WSTREAM_NATS") || k == "WSTREAM_DATA" || k == "NATS_URL" {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}

// lease is the coordinators' lease period.
const lease = 3 * time.Second

// schedule is how long the nemesis runs and how hard.
type schedule struct {
	name      string
	nemesis   time.Duration // faults are injected for at least this long
	minFaults int           // and at least this many
	rate      int           // input messages per second
	keys      int
	gap       [2]time.Duration  // quiet time between a recovery and the next fault
	skip      map[string]string // fault kinds left out, with the reason
	// tenants runs the cluster with accounts and the job as tenant acme.
	tenants bool
}

func scheduleFromEnv(t *testing.T) schedule {
	// The short schedule runs its job as a tenant, the long one without
	// tenants: both set-ups meet the faults.
	s := schedule{name: "short", nemesis: 60 * time.Second, rate: 80, keys: 48,
		gap: [2]time.Duration{time.Second, 3 * time.Second}, skip: map[string]string{}, tenants: true}
	if os.Getenv("WSTREAM_FAULTS") == "long" {
		s = schedule{name: "long", nemesis: 30 * time.Minute, minFaults: 200, rate: 60, keys: 64,
			gap: [2]time.Duration{500 * time.Millisecond, 2 * time.Second}, skip: map[string]string{}}
	}
	switch v := os.Getenv("WSTREAM_FAULTS_TENANTS"); v {
	case "":
	case "on", "off":
		s.tenants = v == "on"
	default:
		t.Fatalf("WSTREAM_FAULTS_TENANTS=%q: want on or off", v)
	}
	// WSTREAM_FAULTS_SKIP=kind,… leaves kinds out (to bisect a failure).
	for _, k := range strings.Split(os.Getenv("WSTREAM_FAULTS_SKIP"), ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(kinds, k) {
			t.Fatalf("WSTREAM_FAULTS_SKIP: no fault kind %q (kinds: %s)", k, strings.Join(kinds, ", "))
		}
		s.skip[k] = "WSTREAM_FAULTS_SKIP"
	}
	if v := os.Getenv("WSTREAM_FAULTS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WSTREAM_FAULTS_DURATION=%q: %v", v, err)
		}
		s.nemesis, s.minFaults = d, 0
	}
	return s
}

// kinds are the nemesis's faults.
var kinds = []string{
	"kill-worker",   // SIGKILL a worker, start it again 1–4 s later
	"pause-worker",  // SIGSTOP a worker for 1–6 s
	"kill-leader",   // SIGKILL the leading coordinator, start it again 1–3 s later
	"pause-leader",  // SIGSTOP the leading coordinator past its lease
	"kill-standby",  // SIGKILL the standby coordinator
	"kill-nats",     // SIGKILL a NATS node, start it again 2–6 s later
	"pause-nats",    // SIGSTOP a NATS node for 2–6 s
	"partition",     // one process cut off from its NATS node (refused or black-holed) for 1–5 s
	"latency",       // 50–400 ms added to one process's NATS traffic for 3–8 s
	"cut",           // one process's NATS connections closed
	"lease-lapse",   // the leader cut off from NATS (the lease's KV) for lease + 1–4 s
	"storage-slow",  // 0.3–1.5 s added to every worker's NATS traffic (checkpoint uploads) for 3–6 s
	"storage-error", // every worker's NATS connections closed while checkpoints upload
}

// fault is one injected fault and what followed.
type fault struct {
	n          int
	kind       string
	target     string
	start, end time.Time
	recovered  time.Duration // fault end → next completed checkpoint
	failover   time.Duration // fault start → another coordinator holds the lease (leader faults)
	again      time.Duration // kill-leader: fault start → the next completed checkpoint
}

type obs struct {
	at time.Time
	cp int64
}

// cluster is one run of the suite.
type cluster struct {
	t       *testing.T
	dir     string
	seed    uint64
	rng     *rand.Rand
	sched   schedule
	wstream string
	urls    []string // the NATS nodes, not through a proxy: the test's own
	nodes   []*proc
	coords  []*proc
	workers []*proc
	proxies map[string]*proxy
	nc      *nats.Conn // the job's account: the input and output streams
	js      jetstream.JetStream
	// admin is in the service account: the job bucket and the lease (nc
	// without tenants).
	admin   *nats.Conn
	adminJS jetstream.JetStream
	// creds are the credentials files of the clients (by process name,
	// "tenant" and "admin"), with tenants on.
	creds   map[string]string
	authDir string
	job     string
	deploy  *proc
	begin   time.Time
	events  *os.File
	stopped chan struct{} // closed when the run ends

	mu      sync.Mutex
	cps     []obs    // the job record's latest checkpoint, when it changed
	leaders []string // lease holders seen, in order
	leader  string   // the lease's holder now
	faults  []*fault
	errs    []string // what the monitor found wrong
}

// event appends a line to the nemesis log.
func (c *cluster) event(format string, args ...any) {
	line := fmt.Sprintf("%s +%8.3fs  %s\n", time.Now().UTC().Format("15:04:05.000"),
		time.Since(c.begin).Seconds(), fmt.Sprintf(format, args...))
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.events.WriteString(line)
}

// TestFaults runs the fault suite: the short schedule, or with
// WSTREAM_FAULTS=long the long one; WSTREAM_FAULT_SEED=N replays the
// nemesis's choices of seed N.
func TestFaults(t *testing.T) {
	sched := scheduleFromEnv(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WSTREAM_FAULT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("WSTREAM_FAULT_SEED=%q: not an unsigned integer", v)
		}
		seed = n
	}
	dir, err := os.MkdirTemp("", "wstream-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fault suite, %s schedule, seed %d; run directory %s", sched.name, seed, dir)
	replay := fmt.Sprintf("WSTREAM_FAULT_SEED=%d", seed)
	for _, k := range []string{"WSTREAM_FAULTS", "WSTREAM_FAULTS_DURATION", "WSTREAM_FAULTS_SKIP", "WSTREAM_FAULTS_TENANTS"} {
		if v := os.Getenv(k); v != "" {
			replay += " " + k + "=" + v
		}
	}
	replay += " go test -count=1 -v -run TestFaults ./tests/faults/"
	c := &cluster{t: t, dir: dir, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), sched: sched,
		proxies: map[string]*proxy{}, begin: time.Now(), stopped: make(chan struct{})}
	t.Cleanup(func() {
		c.shutdown()
		if t.Failed() {
			t.Logf("FAILED with seed %d: the nemesis log is %s, every process's log in %s; replay the nemesis's choices with\n  %s",
				seed, filepath.Join(dir, "events.log"), dir, replay)
			return
		}
		if os.Getenv("WSTREAM_FAULTS_KEEP") != "" {
			t.Logf("WSTREAM_FAULTS_KEEP: the run's logs stay in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	if c.events, err = os.Create(filepath.Join(dir, "events.log")); err != nil {
		t.Fatal(err)
	}
	c.event("seed %d, %s schedule, tenants %v", seed, sched.name, sched.tenants)
	for k, why := range sched.skip {
		t.Logf("fault kind %s left out of this schedule: %s", k, why)
	}

	c.setUp()
	// The figures, also of a run that fails.
	defer c.report()
	expected, written := c.runInput(func() { c.nemesis() })
	c.finish(expected, written)
}

// setUp builds the binaries and starts the cluster and the job.
func (c *cluster) setUp() {
	t := c.t
	bin := filepath.Join(c.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	var natsBin string
	var err error
	if c.wstream, natsBin, err = build(bin); err != nil {
		t.Fatal(err)
	}
	mod := testmod.GoModule(t, "examples/wasm/go/testops")

	ports, routes := make([]int, 3), make([]int, 3)
	for i := range 3 {
		if ports[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
		if routes[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	var auth *tenant.Authority
	if c.sched.tenants {
		auth = c.setUpTenants()
	}
	for i := range 3 {
		conf, err := writeNATSConfig(c.dir, i, ports, routes, auth)
		if err != nil {
			t.Fatal(err)
		}
		n := &proc{name: fmt.Sprintf("n%d", i), bin: natsBin, args: []string{"-c", conf}, dir: c.dir,
			log: filepath.Join(c.dir, fmt.Sprintf("n%d.log", i))}
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	connect := func(creds string) *nats.Conn {
		opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.RetryOnFailedConnect(true)}
		if creds != "" {
			opts = append(opts, nats.UserCredentials(creds))
		}
		nc, err := nats.Connect(strings.Join(c.urls, ","), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	c.nc = connect(c.creds["tenant"])
	c.js, _ = jetstream.New(c.nc)
	c.admin, c.adminJS = c.nc, c.js
	if c.sched.tenants {
		c.admin = connect(c.creds["admin"])
		c.adminJS, _ = jetstream.New(c.admin)
	}
	c.poll(time.Minute, "a JetStream meta leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.js.AccountInfo(ctx)
		return err == nil
	})
	// The input and the output, three copies each, with a duplicate
	// window longer than any run: the writer retries with message ids,
	// and the sink relies on the window.
	for _, sc := range []jetstream.StreamConfig{
		{Name: "IN", Subjects: []string{"in.>"}, Replicas: 3, Duplicates: 2 * time.Hour},
		{Name: "OUT", Subjects: []string{"out.>"}, Replicas: 3, Duplicates: 2 * time.Hour},
	} {
		c.poll(time.Minute, "stream "+sc.Name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.js.CreateOrUpdateStream(ctx, sc)
			return err == nil
		})
	}

	// Every client process reaches its node through a proxy of its own.
	newProc := func(name string, node int, args ...string) *proc {
		px, err := newProxy(strings.TrimPrefix(c.urls[node], "nats://"))
		if err != nil {
			t.Fatal(err)
		}
		c.proxies[name] = px
		args = append(args, "--nats", px.url(), "--data", filepath.Join(c.dir, name))
		if f := c.creds[name]; f != "" {
			args = append(args, "--nats-creds", f)
		}
		return &proc{name: name, bin: c.wstream, args: args, dir: c.dir, log: filepath.Join(c.dir, name+".log")}
	}
	for i := range 2 {
		tenants := []string{"--tenants=false"}
		if c.sched.tenants {
			// The coordinators share the authority, as on shared storage.
			tenants = []string{"--tenants", "--auth-dir", c.authDir}
		}
		p := newProc(fmt.Sprintf("c%d", i), i, append([]string{"server", "-v", "--replicas", "3",
			"--lease", lease.String(), "--http", "127.0.0.1:0", "--worker-timeout", "5s"}, tenants...)...)
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		c.coords = append(c.coords, p)
		if i == 0 {
			c.poll(2*time.Minute, "the first coordinator's start", func() bool {
				return strings.Contains(p.output(), "coordinator running")
			})
		}
	}
	for i := range 3 {
		p := newProc(fmt.Sprintf("w%d", i), i, "worker", "-v", "--id", fmt.Sprintf("w%d", i), "--slots", "12")
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		c.workers = append(c.workers, p)
	}
	for _, p := range append(c.workers, c.coords[1]) {
		c.poll(2*time.Minute, p.name+"'s start", func() bool {
			out := p.output()
			return strings.Contains(out, "wstream worker: connected") || strings.Contains(out, "wstream server: standby")
		})
	}

	plan := `{"name":"faults","parallelism":4,
 "checkpoint":{"interval":1000,"mode":"aligned","timeout":15000},
 "restart":{"strategy":"fixed-delay","attempts":1000000,"delay":500},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","config":{"stream":"IN","subject":"in.>","key":"subject"}},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}}],
 "edges":[
  {"from":"source","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`
	if err := os.WriteFile(filepath.Join(c.dir, "plan.json"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	c.deploy = &proc{name: "deploy", bin: c.wstream, dir: c.dir, log: filepath.Join(c.dir, "deploy.log"),
		args: append(append([]string{"deploy"}, c.clientCreds()...), "--nats", strings.Join(c.urls, ","), "--plan", "plan.json",
			"--checkpoint-storage", "nats-obj://faults_checkpoints", mod)}
	if err := c.deploy.start(); err != nil {
		t.Fatal(err)
	}
	jobLine := regexp.MustCompile(`job (\S+) running`)
	c.poll(2*time.Minute, "the job's start", func() bool {
		if m := jobLine.FindStringSubmatch(c.deploy.output()); m != nil {
			c.job = m[1]
			return true
		}
		return false
	})
	c.event("job %s deployed", c.job)
	go c.monitor()
	go c.supervise()
}

// setUpTenants creates the tenant authority that the coordinators share,
// tenant acme, and the credentials files of the test's clients (acme's
// and the admin's) and of each worker.
func (c *cluster) setUpTenants() *tenant.Authority {
	t := c.t
	c.authDir = filepath.Join(c.dir, "auth")
	auth, err := tenant.Open(c.authDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.Add("acme", tenant.Quotas{}); err != nil {
		t.Fatal(err)
	}
	c.creds = map[string]string{}
	write := func(name string, cr tenant.Creds, err error) {
		if err != nil {
			t.Fatal(err)
		}
		b, err := cr.File()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(c.dir, name+".creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c.creds[name] = p
	}
	cr, err := auth.TenantUser("acme", "faults")
	write("tenant", cr, err)
	cr, err = auth.AdminUser("faults-admin")
	write("admin", cr, err)
	for i := range 3 {
		name := fmt.Sprintf("w%d", i)
		cr, err := auth.WorkerUser(name)
		write(name, cr, err)
	}
	return auth
}

// clientCreds are the flags of a CLI command that make it act as tenant
// acme, with tenants on.
func (c *cluster) clientCreds() []string {
	if f := c.creds["tenant"]; f != "" {
		return []string{"--nats-creds", f}
	}
	return nil
}

// poll waits until cond holds, failing the test after d.
func (c *cluster) poll(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// monitor records the job record's latest checkpoint and the lease's
// holder, five times a second, until the run ends.
func (c *cluster) monitor() {
	var kv jetstream.KeyValue
	for {
		select {
		case <-c.stopped:
			return
		case <-time.After(200 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s, err := coordinator.ReadJobSpec(ctx, c.admin, c.job); err == nil {
			c.mu.Lock()
			last := int64(0)
			if n := len(c.cps); n > 0 {
				last = c.cps[n-1].cp
			}
			if s.LatestCheckpoint < last {
				c.errs = append(c.errs, fmt.Sprintf("the job record's latest checkpoint went back from %d to %d", last, s.LatestCheckpoint))
			}
			if s.LatestCheckpoint != last {
				c.cps = append(c.cps, obs{time.Now(), s.LatestCheckpoint})
			}
			c.mu.Unlock()
		}
		if kv == nil {
			kv, _ = c.adminJS.KeyValue(ctx, coordinator.LeaderBucket)
		}
		if kv != nil {
			if e, err := kv.Get(ctx, "coordinator"); err == nil {
				var l coordinator.LeaderInfo
				if json.Unmarshal(e.Value(), &l) == nil && l.ID != "" {
					c.mu.Lock()
					if l.ID != c.leader {
						c.leader = l.ID
						c.leaders = append(c.leaders, l.ID)
						c.mu.Unlock()
						c.event("lease held by %s (epoch %d)", l.ID, l.Epoch)
					} else {
						c.mu.Unlock()
					}
				}
			}
		}
		cancel()
	}
}

// supervise starts again every process that exited on its own (a deposed
// coordinator exits; a supervisor restarts it as a standby), but not one
// the nemesis holds down.
func (c *cluster) supervise() {
	for {
		select {
		case <-c.stopped:
			return
		case <-time.After(500 * time.Millisecond):
		}
		for _, p := range c.all() {
			if !p.running() && !p.isDown() {
				c.event("%s exited on its own; starting it again", p.name)
				if err := p.start(); err != nil {
					c.event("starting %s: %v", p.name, err)
				}
			}
		}
	}
}

func (c *cluster) all() []*proc {
	return slices.Concat(c.nodes, c.coords, c.workers)
}

// latest is the latest checkpoint the monitor saw.
func (c *cluster) latest() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.cps); n > 0 {
		return c.cps[n-1].cp
	}
	return 0
}

// checkpointAfter waits up to d for a checkpoint above cp and returns when
// the monitor saw it.
func (c *cluster) checkpointAfter(cp int64, d time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(d)
	for {
		c.mu.Lock()
		for _, o := range c.cps {
			if o.cp > cp {
				c.mu.Unlock()
				return o.at, true
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// leading is the coordinator process that holds the lease now (nil: not
// known).
func (c *cluster) leading() *proc {
	c.mu.Lock()
	id := c.leader
	c.mu.Unlock()
	i := strings.LastIndex(id, "-")
	if i < 0 {
		return nil
	}
	pid, _ := strconv.Atoi(id[i+1:])
	for _, p := range c.coords {
		if p.pid() == pid && p.running() {
			return p
		}
	}
	return nil
}

func (c *cluster) leaderID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// runInput writes the input while run runs, at the schedule's rate, each
// message with a message id so that a retried publish is stored once; it
// returns every key's count and how many messages were written.
func (c *cluster) runInput(run func()) (map[string]int, int) {
	stop := make(chan struct{})
	done := make(chan struct{})
	expected := map[string]int{}
	written := 0
	// The keys come from a generator of their own, so that the nemesis's
	// draws do not depend on how many messages were written.
	keys := rand.New(rand.NewPCG(c.seed, 7))
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / time.Duration(c.sched.rate))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			k := fmt.Sprintf("k%02d", keys.IntN(c.sched.keys))
			id := fmt.Sprintf("in-%d", written)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.js.Publish(ctx, "in."+k, []byte(id), jetstream.WithMsgID(id))
				cancel()
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // retry after a failed publish
			}
			expected[k]++
			written++
		}
	}()
	run()
	close(stop)
	<-done
	c.event("input: %d messages over %d keys", written, len(expected))
	return expected, written
}

// nemesis injects faults one at a time until the schedule is done: each
// fault ends (processes restarted or continued, proxies healed), then the
// nemesis waits for the next completed checkpoint, which is the fault's
// recovery time, and a little more.
func (c *cluster) nemesis() {
	t := c.t
	if _, ok := c.checkpointAfter(0, 3*time.Minute); !ok {
		c.fail("the job completed no checkpoint within 3m of its start")
		return
	}
	c.event("first checkpoint %d", c.latest())
	until := time.Now().Add(c.sched.nemesis)
	var pick []string
	for _, k := range kinds {
		if _, skip := c.sched.skip[k]; !skip {
			pick = append(pick, k)
		}
	}
	for n := 1; time.Now().Before(until) || len(c.faults) < c.sched.minFaults; n++ {
		// Every kind once before any twice, in an order of the seed's, so
		// that a short run sees them all.
		kind := pick[(n-1)%len(pick)]
		if (n-1)%len(pick) == 0 {
			c.rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
			kind = pick[0]
		}
		f := &fault{n: n, kind: kind}
		cpBefore := c.latest()
		c.inject(f)
		cpAtEnd := max(c.latest(), cpBefore)
		at, ok := c.checkpointAfter(cpAtEnd, 3*time.Minute)
		if !ok {
			c.fail(fmt.Sprintf("fault %d (%s of %s): no checkpoint completed within 3m of its end (latest %d)", n, f.kind, f.target, cpAtEnd))
			return
		}
		f.recovered = max(at.Sub(f.end), 0)
		if f.kind == "kill-leader" {
			if at, ok := c.checkpointAfter(cpBefore, 0); ok {
				f.again = at.Sub(f.start)
			}
		}
		c.mu.Lock()
		c.faults = append(c.faults, f)
		c.mu.Unlock()
		c.event("fault %d recovered: checkpoint %d completed %s after its end", n, c.latest(), f.recovered.Round(time.Millisecond))
		if t.Failed() {
			return
		}
		c.sleep(c.sched.gap)
	}
	c.event("nemesis done: %d faults", len(c.faults))
}

// sleep waits a duration drawn from r: the nemesis's pacing, not a wait
// for progress.
func (c *cluster) sleep(r [2]time.Duration) time.Duration {
	d := r[0] + time.Duration(c.rng.Int64N(int64(r[1]-r[0])+1))
	time.Sleep(d)
	return d
}

func (c *cluster) fail(msg string) {
	c.event("FAIL: %s", msg)
	c.t.Error(msg)
}

func sec(a, b float64) [2]time.Duration {
	return [2]time.Duration{time.Duration(a * float64(time.Second)), time.Duration(b * float64(time.Second))}
}

// inject injects fault f and returns once it has ended.
func (c *cluster) inject(f *fault) {
	workers := func() *proc { return c.workers[c.rng.IntN(len(c.workers))] }
	clients := slices.Concat(c.coords, c.workers)
	f.start = time.Now()
	leaderBefore := c.leaderID()
	begin := func(target, format string, args ...any) {
		f.target = target
		c.event("fault %d %s %s: %s", f.n, f.kind, target, fmt.Sprintf(format, args...))
	}
	switch f.kind {
	case "kill-worker", "kill-leader", "kill-standby", "kill-nats":
		var p *proc
		down := sec(1, 4)
		switch f.kind {
		case "kill-worker":
			p = workers()
		case "kill-leader":
			p, down = c.leading(), sec(1, 3)
		case "kill-standby":
			p = c.coords[c.rng.IntN(2)]
			if l := c.leading(); l != nil {
				p = c.coords[1-slices.Index(c.coords, l)]
			}
		case "kill-nats":
			p, down = c.nodes[c.rng.IntN(3)], sec(2, 6)
		}
		if p == nil {
			p = c.coords[c.rng.IntN(2)]
		}
		begin(p.name, "SIGKILL (pid %d)", p.pid())
		p.kill(true)
		d := c.sleep(down)
		if err := p.start(); err != nil {
			c.fail(fmt.Sprintf("starting %s again: %v", p.name, err))
		}
		c.event("fault %d %s %s: started again after %s (pid %d)", f.n, f.kind, p.name, d.Round(time.Millisecond), p.pid())
	case "pause-worker", "pause-leader", "pause-nats":
		var p *proc
		var pause [2]time.Duration
		switch f.kind {
		case "pause-worker":
			p, pause = workers(), sec(1, 6)
		case "pause-leader":
			p, pause = c.leading(), [2]time.Duration{lease + time.Second, lease + 4*time.Second}
		case "pause-nats":
			p, pause = c.nodes[c.rng.IntN(3)], sec(2, 6)
		}
		if p == nil {
			p = c.coords[c.rng.IntN(2)]
		}
		begin(p.name, "SIGSTOP (pid %d)", p.pid())
		_ = p.signal(syscall.SIGSTOP)
		d := c.sleep(pause)
		_ = p.signal(syscall.SIGCONT)
		c.event("fault %d %s %s: SIGCONT after %s", f.n, f.kind, p.name, d.Round(time.Millisecond))
	case "partition", "lease-lapse":
		p := clients[c.rng.IntN(len(clients))]
		dur := sec(1, 5)
		if f.kind == "lease-lapse" {
			if l := c.leading(); l != nil {
				p = l
			}
			dur = [2]time.Duration{lease + time.Second, lease + 4*time.Second}
		}
		hole := c.rng.IntN(2) == 0
		how := "refused"
		if hole {
			how = "black-holed"
		}
		begin(p.name, "cut off from NATS (%s)", how)
		c.proxies[p.name].partition(hole)
		d := c.sleep(dur)
		c.proxies[p.name].heal()
		c.event("fault %d %s %s: healed after %s", f.n, f.kind, p.name, d.Round(time.Millisecond))
	case "latency":
		p := clients[c.rng.IntN(len(clients))]
		lat := 50*time.Millisecond + time.Duration(c.rng.Int64N(int64(350*time.Millisecond)))
		begin(p.name, "%s latency", lat.Round(time.Millisecond))
		c.proxies[p.name].setLatency(lat)
		d := c.sleep(sec(3, 8))
		c.proxies[p.name].heal()
		c.event("fault %d %s %s: healed after %s", f.n, f.kind, p.name, d.Round(time.Millisecond))
	case "storage-slow":
		lat := 300*time.Millisecond + time.Duration(c.rng.Int64N(int64(1200*time.Millisecond)))
		begin("w*", "%s latency on every worker's NATS traffic", lat.Round(time.Millisecond))
		for _, w := range c.workers {
			c.proxies[w.name].setLatency(lat)
		}
		d := c.sleep(sec(3, 6))
		for _, w := range c.workers {
			c.proxies[w.name].heal()
		}
		c.event("fault %d %s: healed after %s", f.n, f.kind, d.Round(time.Millisecond))
	case "cut", "storage-error":
		targets := []*proc{clients[c.rng.IntN(len(clients))]}
		name := targets[0].name
		if f.kind == "storage-error" {
			// Checkpoints run every second and upload at once: within
			// half of one, uploads are under way.
			c.sleep(sec(0, 0.5))
			targets, name = c.workers, "w*"
		}
		begin(name, "connections closed")
		for _, p := range targets {
			c.proxies[p.name].cut()
		}
	default:
		panic(f.kind)
	}
	f.end = time.Now()
	if f.kind == "kill-leader" || f.kind == "pause-leader" || f.kind == "lease-lapse" {
		// The failover: until another coordinator holds the lease.
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if id := c.leaderID(); id != leaderBefore && id != "" {
				f.failover = time.Since(f.start)
				c.event("fault %d: %s leads, %s after the fault began", f.n, id, f.failover.Round(time.Millisecond))
				break
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
	}
}

// finish waits for every output message, stops the job with a savepoint,
// and checks the output against the input.
func (c *cluster) finish(expected map[string]int, written int) {
	t := c.t
	if t.Failed() {
		return
	}
	// Every process up and running.
	for _, p := range c.all() {
		if !p.running() {
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The whole input processed: the sink stream holds at least a message
	// per input, and three checkpoints in a row (each commits what came
	// before it) add nothing.
	c.event("waiting for all results (%d inputs)", written)
	deadline := time.Now().Add(5 * time.Minute)
	last, cp, quiet := uint64(0), c.latest(), 0
	for quiet < 3 {
		if time.Now().After(deadline) {
			// The oracle below says what is wrong.
			c.fail(fmt.Sprintf("5m after the input ended the sink stream still grows or holds fewer than %d messages (%d)", written, last))
			break
		}
		if _, ok := c.checkpointAfter(cp, time.Until(deadline)); !ok {
			continue
		}
		cp = c.latest()
		n := c.streamMsgs("OUT")
		if n >= uint64(written) && n == last {
			quiet++
		} else {
			quiet = 0
		}
		last = n
	}
	// Stop the job with a savepoint; a stop that fails (the savepoint
	// declined while the cluster settles) leaves the job running: try again.
	for i := 0; ; i++ {
		c.event("wstream stop %s", c.job)
		cmd := exec.Command(c.wstream, append(append([]string{"stop"}, c.clientCreds()...), "--nats", strings.Join(c.urls, ","), "--timeout", "2m",
			"--savepoint", "nats-obj://faults_savepoints", c.job)...)
		cmd.Dir = c.dir
		out, err := cmd.CombinedOutput()
		c.event("wstream stop: %v\n%s", err, out)
		if err == nil {
			break
		}
		if i == 4 {
			c.fail(fmt.Sprintf("wstream stop failed 5 times; the last: %v\n%s", err, out))
			return
		}
		time.Sleep(2 * time.Second) // before trying again
	}
	select {
	case <-c.deploy.done:
	case <-time.After(3 * time.Minute):
		c.fail("the deploy client did not exit within 3m of the stop")
		return
	}
	// The deploy client exits 3 when its job was stopped from outside
	// (docs/cli.md "Exit codes"), as here.
	var exit *exec.ExitError
	if err := c.deploy.exitErr(); err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) {
		t.Errorf("the deploy client: %v\n%s", err, c.deploy.output())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := coordinator.ReadJobSpec(ctx, c.admin, c.job)
	if err != nil {
		t.Fatal(err)
	}
	// A stop with a savepoint is Flink's FINISHED; the record says
	// "stopped" to tell it from an input that ended.
	if s.State != transport.JobStopped && s.State != transport.JobFinished {
		t.Errorf("the job ended %s, want stopped (FINISHED, stopped with a savepoint)", s.State)
	}
	c.event("job %s: %s, attempt %d, %d restarts", c.job, s.State, s.Attempt, len(s.RestartLog))
	t.Logf("job %s: %s, attempt %d, %d restarts, latest checkpoint %d", c.job, s.State, s.Attempt, len(s.RestartLog), s.LatestCheckpoint)

	// The input stream holds every message once (the writer's retries
	// were deduplicated).
	if n := c.streamMsgs("IN"); n != uint64(written) {
		t.Errorf("the input stream holds %d messages, the test wrote %d", n, written)
	}
	c.checkOutput(expected)
	c.checkCheckpointIDs()
	c.mu.Lock()
	for _, e := range c.errs {
		t.Error(e)
	}
	c.mu.Unlock()
}

func (c *cluster) streamMsgs(name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// checkOutput reads the whole sink stream: for a key of n input messages,
// the running counts 1 … n, each exactly once, and no message id twice.
func (c *cluster) checkOutput(expected map[string]int) {
	t := c.t
	var (
		total    uint64
		seen     map[string]map[int]int // key → count → times
		problems []string
		err      error
	)
	// The cluster may still be settling after the last fault: read again
	// after an error.
	for i := 0; i < 12; i++ {
		if total, seen, problems, err = c.readOutput(); err == nil {
			break
		}
		c.event("reading the sink stream: %v", err)
		time.Sleep(5 * time.Second) // before reading again
	}
	if err != nil {
		t.Fatalf("reading the sink stream: %v", err)
	}
	c.compare(expected, total, seen, problems)
}

// readOutput reads every message of the sink stream: how many, every
// key's counts, and what is wrong with messages (a repeated message id,
// a message that is not a count).
func (c *cluster) readOutput() (uint64, map[string]map[int]int, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := c.js.Stream(ctx, "OUT")
	if err != nil {
		return 0, nil, nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	last := info.State.LastSeq
	if info.State.Msgs != last || info.State.FirstSeq > 1 {
		return 0, nil, nil, fmt.Errorf("the sink stream has gaps: %d messages, sequences %d … %d", info.State.Msgs, info.State.FirstSeq, last)
	}
	// Message by message (a consumer's requests can go unanswered while
	// the cluster settles), several at a time.
	msgs := make([]*jetstream.RawStreamMsg, last+1)
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for w := range uint64(8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1 + w; seq <= last; seq += 8 {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					errMu.Lock()
					first = cmp.Or(first, fmt.Errorf("message %d: %w", seq, err))
					errMu.Unlock()
					return
				}
				msgs[seq] = m
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, nil, nil, first
	}
	ids := map[string]uint64{}
	seen := map[string]map[int]int{}
	var problems []string
	for seq := uint64(1); seq <= last; seq++ {
		m := msgs[seq]
		id := m.Header.Get(jetstream.MsgIDHeader)
		if prev, dup := ids[id]; dup || id == "" {
			problems = append(problems, fmt.Sprintf("message %d has message id %q, as message %d", seq, id, prev))
		}
		ids[id] = seq
		key := strings.TrimPrefix(m.Subject, "out.")
		n, err := strconv.Atoi(string(m.Data))
		if err != nil || m.Header.Get("Wstream-Key") != key {
			problems = append(problems, fmt.Sprintf("message %d: subject %s, key %q, data %q", seq, m.Subject, m.Header.Get("Wstream-Key"), m.Data))
			continue
		}
		if seen[key] == nil {
			seen[key] = map[int]int{}
		}
		seen[key][n]++
	}
	return last, seen, problems, nil
}

// compare checks the sink stream's counts against the input's: for a key
// of n input messages, the running counts 1 … n, each exactly once.
func (c *cluster) compare(expected map[string]int, total uint64, seen map[string]map[int]int, problems []string) {
	t := c.t
	keys := make([]string, 0, len(expected))
	for k := range expected {
		keys = append(keys, k)
	}
	for k := range seen {
		if _, ok := expected[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		want, got := expected[k], seen[k]
		var missing, twice, extra []int
		for i := 1; i <= want; i++ {
			switch got[i] {
			case 0:
				missing = append(missing, i)
			case 1:
			default:
				twice = append(twice, i)
			}
		}
		for n := range got {
			if n < 1 || n > want {
				extra = append(extra, n)
			}
		}
		if len(missing)+len(twice)+len(extra) > 0 {
			sort.Ints(extra)
			problems = append(problems, fmt.Sprintf("key %s (%d inputs): counts missing %v, more than once %v, beyond the input %v",
				k, want, first(missing), first(twice), first(extra)))
		}
	}
	if len(problems) > 0 {
		t.Errorf("the sink stream (%d messages) is not the input's exact counts:\n%s", total, strings.Join(first(problems), "\n"))
		c.event("oracle: %d problems; first: %s", len(problems), problems[0])
		return
	}
	c.event("oracle: %d messages, every key's counts exact, no message id twice", total)
}

func first[T any](s []T) []T { return s[:min(len(s), 10)] }

// checkCheckpointIDs reads both coordinators' checkpoint histories: the
// completed checkpoints, in the order they completed, have strictly
// increasing ids. Savepoints are left out: a savepoint subsumes no older
// pending checkpoint (checkpoint/doc.go), so the stop's savepoint may
// complete before the checkpoint triggered just before it.
func (c *cluster) checkCheckpointIDs() {
	t := c.t
	var done []coordinator.HistoryEntry
	for _, p := range c.coords {
		h, err := coordinator.ReadHistory(filepath.Join(c.dir, p.name), c.job)
		if err != nil {
			t.Fatalf("%s's checkpoint history: %v", p.name, err)
		}
		for _, e := range h {
			if e.Status == "completed" && e.Kind == checkpoint.KindCheckpoint {
				done = append(done, e)
			}
		}
	}
	sort.SliceStable(done, func(i, j int) bool { return done[i].Done < done[j].Done })
	ok := true
	for i := 1; i < len(done); i++ {
		if done[i].ID <= done[i-1].ID {
			ok = false
			t.Errorf("checkpoint %d (%s, completed at %d) completed after checkpoint %d (completed at %d)",
				done[i].ID, done[i].Kind, done[i].Done, done[i-1].ID, done[i-1].Done)
		}
	}
	if len(done) == 0 {
		t.Error("no completed checkpoint in the coordinators' histories")
	}
	if ok {
		c.event("checkpoint ids: %d completed, strictly increasing", len(done))
	}
}

// shutdown ends every process and proxy.
func (c *cluster) shutdown() {
	select {
	case <-c.stopped:
	default:
		close(c.stopped)
	}
	for _, p := range append(c.all(), c.deploy) {
		if p != nil && p.running() {
			_ = p.signal(syscall.SIGCONT)
			p.kill(true)
		}
	}
	for _, px := range c.proxies {
		px.close()
	}
	if c.admin != nil && c.admin != c.nc {
		c.admin.Close()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.events != nil {
		c.events.Close()
	}
}

// report logs the faults by kind with their recovery times and the
// leader failovers.
func (c *cluster) report() {
	c.mu.Lock()
	defer c.mu.Unlock()
	byKind := map[string][]time.Duration{}
	var failovers, again []time.Duration
	for _, f := range c.faults {
		if f.again > 0 {
			again = append(again, f.again)
		}
		byKind[f.kind] = append(byKind[f.kind], f.recovered)
		if f.failover > 0 {
			failovers = append(failovers, f.failover)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d faults (seed %d, %s schedule); recovery = fault end → next completed checkpoint\n", len(c.faults), c.seed, c.sched.name)
	fmt.Fprintf(&b, "%-14s %6s %10s %10s %10s\n", "kind", "faults", "p50", "p99", "max")
	for _, k := range kinds {
		d := byKind[k]
		if len(d) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%-14s %6d %10s %10s %10s\n", k, len(d), pct(d, 50), pct(d, 99), pct(d, 100))
	}
	if len(failovers) > 0 {
		fmt.Fprintf(&b, "leader failover (fault start → another coordinator holds the lease): %d, p50 %s, p99 %s, max %s\n",
			len(failovers), pct(failovers, 50), pct(failovers, 99), pct(failovers, 100))
	}
	if len(again) > 0 {
		fmt.Fprintf(&b, "leader SIGKILL → the job's next completed checkpoint: %d, p50 %s, p99 %s, max %s (lease %s)\n",
			len(again), pct(again, 50), pct(again, 99), pct(again, 100), lease)
	}
	c.t.Log("\n" + b.String())
	if c.sched.minFaults > 0 && len(c.faults) < c.sched.minFaults {
		c.t.Errorf("%d faults injected, the schedule wants at least %d", len(c.faults), c.sched.minFaults)
	}
}

// pct is the p-th percentile (nearest rank) of d.
func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(i-1, 0)].Round(10 * time.Millisecond)
}
