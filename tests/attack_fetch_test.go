package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
)

// Attacks on the module store: a tenant names, in a job, a module object
// of its own store that is huge (finding 5) or that holds other bytes than
// its digest says (finding 6).

// TestAttackModuleSize: bolt puts 200 MiB of zeros into its module store
// under their digest and submits a job naming it. The coordinator refuses
// the job from the object's size, before anyone fetches it, and the
// worker's memory does not grow by the object; a record that lies about
// the size gets no further; a quota set with `tenant update` is the limit.
func TestAttackModuleSize(t *testing.T) {
	c, ts := startAttackCluster(t, "acme", "bolt")
	acme, bolt := ts["acme"], ts["bolt"]
	mod := module(t, "testops")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The object streams in: the test holds no copy of it.
	const bigSize = 200 << 20
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(zeros{}, bigSize)); err != nil {
		t.Fatal(err)
	}
	big := "sha256:" + hex.EncodeToString(h.Sum(nil))
	obs := moduleBucket(t, bolt)
	putZeros(t, ctx, obs, big, bigSize)

	g := genSpec{count: 12000, keys: 50, words: 1, seed: 11, rate: 3000}
	d, _ := c.victimJob(t, acme, mod, g)
	d.until(t, "acme's first output", false, func() bool { return streamCount(acme.js, "OUT") > 0 })
	pid := c.wk.cmd.Process.Pid
	hwm0, rss0 := procKiB(t, pid, "VmHWM"), procKiB(t, pid, "VmRSS")

	plan := []byte(countPlan(genSpec{count: 100, keys: 5, words: 1, seed: 2}, 300, `"connector":"discard"`))
	e := ask(bolt.nc, transport.SubjectSubmit, transport.SubmitRequest{Name: "big", Plan: plan, ModuleDigest: big, ModuleName: "big.wasm"})
	want := fmt.Sprintf("module %s in tenant bolt's store is %d bytes, over the limit of %d bytes", big, bigSize, 64<<20)
	if !strings.Contains(e, want) {
		t.Errorf("bolt's job naming a 200 MiB module: %q, want %q", e, want)
	}

	// A quota the admin sets: bolt's 3.4 MiB module is over 1 MiB.
	if r := runCLI(t, c.dir, "tenant", "update", "--data", c.data, "--module-bytes", "1048576", "bolt"); r.code != 0 {
		t.Fatalf("tenant update --module-bytes: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, c.dir, "tenant", "list", "--data", c.data); r.code != 0 || !strings.Contains(r.stdout, "MODULE") ||
		!strings.Contains(lineOf(r.stdout, "bolt"), " 1 MiB ") || !strings.Contains(lineOf(r.stdout, "acme"), " 64 MiB ") {
		t.Errorf("tenant list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The same object, its record saying it is 1000 bytes: the read stops
	// past the limit.
	natstest.SetObjectSize(t, bolt.js, transport.ModuleBucket, big, 1000)
	e = ask(bolt.nc, transport.SubjectSubmit, transport.SubmitRequest{Name: "big", Plan: plan, ModuleDigest: big, ModuleName: "big.wasm"})
	want = fmt.Sprintf("module %s in tenant bolt's store: more than the limit of %d bytes (its record says 1000)", big, 1<<20)
	if !strings.Contains(e, want) {
		t.Errorf("bolt's job naming a module whose record lies: %q, want %q", e, want)
	}
	bdir := filepath.Join(c.dir, "bolt")
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		t.Fatal(err)
	}
	writePlan(t, bdir, string(plan))
	size := fileSize(t, mod)
	r := runCLI(t, bdir, "deploy", "--nats", c.url, "--nats-creds", bolt.creds, "--plan", "plan.json", mod)
	want = fmt.Sprintf("in tenant bolt's store is %d bytes, over the limit of 1048576 bytes", size)
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("bolt deploying a module over its quota: exit %d, want %q\n%s", r.code, want, r.stderr)
	}

	c.victimExact(t, acme, d, g)
	hwm1, rss1 := procKiB(t, pid, "VmHWM"), procKiB(t, pid, "VmRSS")
	t.Logf("worker: peak RSS %d → %d MiB, RSS %d → %d MiB", hwm0>>10, hwm1>>10, rss0>>10, rss1>>10)
	if grew := (hwm1 - hwm0) << 10; grew > bigSize/4 {
		t.Errorf("the worker's peak RSS grew by %d MiB (from %d MiB) for a %d MiB module that was refused", grew>>20, hwm0>>10, bigSize>>20)
	}
}

// TestAttackModuleDigest: bolt stores 16 bytes of junk under the digest of
// acme's module, which the worker holds compiled for acme's running job,
// and submits a plan using its operator. The job is refused, saying what
// the bytes hash to; it never runs acme's code, and acme's job stays exact.
func TestAttackModuleDigest(t *testing.T) {
	c, ts := startAttackCluster(t, "acme", "bolt")
	acme, bolt := ts["acme"], ts["bolt"]
	mod := module(t, "testops")
	wasm, err := os.ReadFile(mod)
	if err != nil {
		t.Fatal(err)
	}
	digest := coordinator.ModuleDigest(wasm)

	g := genSpec{count: 12000, keys: 50, words: 1, seed: 11, rate: 3000}
	d, _ := c.victimJob(t, acme, mod, g)
	// acme's module is compiled on the worker once its job has output.
	d.until(t, "acme's first output", false, func() bool { return streamCount(acme.js, "OUT") > 0 })

	junk := []byte("0123456789abcdef")
	if _, err := moduleBucket(t, bolt).PutBytes(waitCtx(t), digest, junk); err != nil {
		t.Fatal(err)
	}
	createStreams(t, bolt.js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
	bg := genSpec{count: 200, keys: 5, words: 1, seed: 3}
	plan := []byte(countPlan(bg, 300, `"connector":"jetstream","config":{"stream":"OUT","subject":"out.{key}"}`))
	e := ask(bolt.nc, transport.SubjectSubmit, transport.SubmitRequest{Name: "steal", Plan: plan, ModuleDigest: digest, ModuleName: "testops"})
	want := "module " + digest + " in tenant bolt's store: its bytes hash to " + coordinator.ModuleDigest(junk)
	if !strings.Contains(e, want) {
		t.Errorf("bolt's plan naming acme's module over junk: %q, want %q", e, want)
	}

	c.victimExact(t, acme, d, g)
	// bolt's job never ran: nothing in its stream, no job in its list.
	if n := streamCount(bolt.js, "OUT"); n != 0 {
		t.Errorf("bolt's stream has %d records from acme's code", n)
	}
	if r := c.as(t, bolt, []string{"list"}); r.code != 0 || strings.Contains(r.stdout, "steal") {
		t.Errorf("bolt's list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	refused := false
	for _, a := range c.auditLines(t) {
		if a["tenant"] == "bolt" && strings.Contains(fmt.Sprint(a["error"]), "its bytes hash to") {
			refused = true
		}
	}
	if !refused {
		t.Error("the audit log has no refused submission of bolt's")
	}

	// The admin runs the module as bolt: its bytes replace bolt's junk, and
	// the job runs them.
	writePlan(t, c.dir, string(plan))
	r := runCLI(t, c.dir, "deploy", "--nats", c.url, "--nats-creds", filepath.Join(c.auth, "admin.creds"), "--tenant", "bolt", "--plan", "plan.json", mod)
	if r.code != 0 {
		t.Fatalf("the admin's deploy as bolt: exit %d\n%s", r.code, r.stderr)
	}
	if b, err := moduleBucket(t, bolt).GetBytes(waitCtx(t), digest); err != nil || coordinator.ModuleDigest(b) != digest {
		t.Errorf("bolt's store after the admin's deploy: %d bytes, %v", len(b), err)
	}
	got, _ := outputLines(t, bolt.js, "OUT")
	sameLines(t, "the admin's job as bolt", got, asMessages(bg.runningCounts(), "out"))
	c.workerAlive(t)
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// moduleBucket returns tc's module store, made as `wstream deploy` makes
// it.
func moduleBucket(t *testing.T, tc *tenantClient) jetstream.ObjectStore {
	t.Helper()
	ctx := waitCtx(t)
	obs, err := tc.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// putZeros puts size zero bytes under name, as a tenant's own client may,
// not through wstream's uploader (which holds the module in memory). A
// server that syncs every write (the embedded one) can refuse a burst of
// chunks on a busy machine with 429 "too many requests": that is the
// set-up failing, not what the test checks, so the put is tried again as
// wstream's own puts are, with more attempts, within ctx.
func putZeros(t *testing.T, ctx context.Context, obs jetstream.ObjectStore, name string, size int64) {
	t.Helper()
	p := transient.Default
	p.Attempts = 20
	err := transient.Do(ctx, p, func(ctx context.Context) error {
		_, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name}, io.LimitReader(zeros{}, size))
		if err != nil {
			t.Logf("putting %s: %v", name, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// procKiB reads a field of /proc/PID/status given in kB (VmRSS, VmHWM).
func procKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// lineOf returns the first line of s that starts with prefix.
func lineOf(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
