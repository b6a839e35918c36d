package coordinator

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// TestAdoptPlacement checks what a new leader makes of its workers'
// heartbeats: it adopts an attempt only when the live workers run every
// subtask of the attempt its spec names, once, with the spec's module, and
// have heard its epoch; otherwise it says why not.
func TestAdoptPlacement(t *testing.T) {
	refs := []transport.TaskRef{{Chain: 0, Subtask: 0}, {Chain: 0, Subtask: 1}, {Chain: 1, Subtask: 0}, {Chain: 1, Subtask: 1}}
	spec := &JobSpec{JobID: "j", Attempt: 2, ModuleDigest: "m"}
	const epoch = 40
	run := func(tasks ...transport.TaskRef) transport.RunningAttempt {
		return transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "m", Epoch: 30, Tasks: tasks}
	}
	both := func(a, b transport.RunningAttempt) map[string]transport.WorkerInfo {
		return map[string]transport.WorkerInfo{
			"w1": {ID: "w1", Epoch: epoch, Running: []transport.RunningAttempt{a}},
			"w2": {ID: "w2", Epoch: epoch, Running: []transport.RunningAttempt{b}},
		}
	}
	cases := []struct {
		name    string
		workers map[string]transport.WorkerInfo
		why     string // "" : adopted
	}{
		{"every subtask on two workers", both(run(refs[0], refs[2]), run(refs[1], refs[3])), ""},
		{"a subtask missing", both(run(refs[0], refs[2]), run(refs[1])), "no live worker runs subtask(s) 1/1"},
		{"a subtask twice", both(run(refs[0], refs[1], refs[2]), run(refs[1], refs[3])), "subtask 0/1 runs on workers"},
		{"another attempt", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 3, Module: "m", Tasks: refs[1:2]}), "runs attempt 3"},
		{"another module", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "n", Tasks: []transport.TaskRef{refs[1], refs[3]}}), "runs module n"},
		{"deployed by a later leader", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "m", Epoch: 41, Tasks: []transport.TaskRef{refs[1], refs[3]}}), "deployed at epoch 41"},
		{"epoch not heard", map[string]transport.WorkerInfo{
			"w1": {ID: "w1", Epoch: epoch, Running: []transport.RunningAttempt{run(refs[0], refs[2])}},
			"w2": {ID: "w2", Epoch: 30, Running: []transport.RunningAttempt{run(refs[1], refs[3])}},
		}, "has not heard this leader's epoch 40"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c := &Coordinator{cfg: Config{WorkerTimeout: time.Minute}, now: func() time.Time { return now }, workers: map[string]*workerState{}}
			for id, info := range tc.workers {
				c.workers[id] = &workerState{info: info, lastSeen: now}
			}
			// A lost worker's heartbeat counts for nothing.
			c.workers["gone"] = &workerState{info: transport.WorkerInfo{ID: "gone", Epoch: epoch,
				Running: []transport.RunningAttempt{run(refs...)}}, lastSeen: now.Add(-time.Hour)}
			j := &jobState{info: transport.JobInfo{JobID: "j"}, refs: refs}
			pl, _, why := c.adoptPlacementLocked(j, spec, epoch)
			if tc.why == "" {
				if pl == nil || why != "" {
					t.Fatalf("not adopted: %s", why)
				}
				if n := len(pl["w1"]) + len(pl["w2"]); n != len(refs) || len(pl) != 2 {
					t.Fatalf("placement %v, want the heartbeats' four subtasks on w1 and w2", pl)
				}
				return
			}
			if pl != nil || !strings.Contains(why, tc.why) {
				t.Fatalf("placement %v, reason %q; want none, because %q", pl, why, tc.why)
			}
		})
	}
}

// TestAdoptSettled checks when a new leader stops waiting to adopt: once a
// heartbeat interval has passed since it took over and every live worker's
// heartbeat carries its epoch (a lost worker's does not count), and not
// before either.
func TestAdoptSettled(t *testing.T) {
	const epoch, step = 40, 50 * time.Millisecond
	start := time.Now()
	cases := []struct {
		name    string
		after   time.Duration // since the take-over
		workers map[string]uint64
		lost    string // a worker whose last heartbeat is too old
		settled bool
	}{
		{"every worker heard the epoch", 2 * time.Second, map[string]uint64{"w1": epoch, "w2": epoch}, "", true},
		{"one worker has not", 2 * time.Second, map[string]uint64{"w1": epoch, "w2": 39}, "", false},
		{"a lost worker has not", 2 * time.Second, map[string]uint64{"w1": epoch, "w2": 39}, "w2", true},
		{"too early to have heard every worker", 500 * time.Millisecond, map[string]uint64{"w1": epoch}, "", false},
		{"no worker heard from at all, later", 2 * time.Second, map[string]uint64{}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := start.Add(tc.after)
			c := &Coordinator{cfg: Config{WorkerTimeout: 5 * time.Second, HeartbeatInterval: time.Second},
				now: func() time.Time { return now }, listening: start, workers: map[string]*workerState{}}
			for id, e := range tc.workers {
				seen := now
				if id == tc.lost {
					seen = now.Add(-time.Minute)
				}
				c.workers[id] = &workerState{info: transport.WorkerInfo{ID: id, Epoch: e}, lastSeen: seen}
			}
			if got := c.adoptSettledLocked(epoch, step); got != tc.settled {
				t.Fatalf("settled = %v, want %v", got, tc.settled)
			}
		})
	}
}

// TestAdoptTenantCreds checks the attempt credentials a new leader wants
// from the workers on a cluster with tenants: it adopts the attempt of a
// tenant's job only when each worker lists valid credentials of that very
// attempt, signed by that tenant's account (never another tenant's, even
// when the heartbeat says nothing else is amiss), and keeps their keys to
// revoke; expired credentials count for nothing.
func TestAdoptTenantCreds(t *testing.T) {
	auth, err := tenant.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"acme", "other", "gone"} {
		if _, _, err := auth.Add(n, tenant.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	refs := []transport.TaskRef{{Chain: 0, Subtask: 0}, {Chain: 0, Subtask: 1}}
	const epoch = 40
	mint := func(tn, job string, attempt int, ttl time.Duration) string {
		cr, err := auth.AttemptUser(tn, job, attempt, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return cr.JWT
	}
	good1, good2 := mint("acme", "j", 2, time.Hour), mint("acme", "j", 2, time.Hour)
	gone := mint("gone", "j", 2, time.Hour)
	if _, _, err := auth.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		tenant string
		w1, w2 []string // the JWTs each worker lists
		why    string   // "": adopted
	}{
		{"the attempt's credentials", "acme", []string{good1}, []string{good2}, ""},
		{"an expired one beside a valid one", "acme", []string{mint("acme", "j", 2, time.Nanosecond), good1}, []string{good2}, ""},
		{"none listed", "acme", []string{good1}, nil, "worker w2 lists no valid credentials"},
		{"only expired ones", "acme", []string{good1}, []string{mint("acme", "j", 2, time.Nanosecond)}, "worker w2 lists no valid credentials"},
		{"another tenant's", "acme", []string{good1}, []string{mint("other", "j", 2, time.Hour)}, "not the job's"},
		{"the admin's account", "acme", []string{good1}, []string{mint("", "j", 2, time.Hour)}, "not the job's"},
		{"another attempt's", "acme", []string{good1}, []string{mint("acme", "j", 1, time.Hour)}, "not those of attempt 2"},
		{"another job's", "acme", []string{good1}, []string{mint("acme", "k", 2, time.Hour)}, "not those of attempt 2"},
		{"not a JWT", "acme", []string{good1}, []string{"eyJ0eXAi.bad.jwt"}, "not the job's"},
		{"a removed tenant", "gone", []string{gone}, []string{gone}, `no tenant "gone"`},
		{"an admin's job with a tenant's credentials", "", []string{good1}, []string{good2}, "not the job's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			spec := &JobSpec{JobID: "j", Attempt: 2, ModuleDigest: "m", Tenant: tc.tenant}
			c := &Coordinator{cfg: Config{WorkerTimeout: time.Minute, Tenants: auth}, now: func() time.Time { return now }, workers: map[string]*workerState{}}
			for i, creds := range [][]string{tc.w1, tc.w2} {
				id := "w" + string(rune('1'+i))
				r := transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "m", Epoch: 30, Tasks: refs[i : i+1], Creds: creds}
				c.workers[id] = &workerState{info: transport.WorkerInfo{ID: id, Epoch: epoch, Running: []transport.RunningAttempt{r}}, lastSeen: now}
			}
			j := &jobState{info: transport.JobInfo{JobID: "j", Tenant: tc.tenant}, refs: refs}
			pl, held, why := c.adoptPlacementLocked(j, spec, epoch)
			if tc.why != "" {
				if pl != nil || !strings.Contains(why, tc.why) {
					t.Fatalf("placement %v, reason %q; want none, because %q", pl, why, tc.why)
				}
				return
			}
			if pl == nil || why != "" {
				t.Fatalf("not adopted: %s", why)
			}
			// The leader keeps both valid keys, to revoke at the end.
			want := map[string]bool{}
			for _, jw := range []string{good1, good2} {
				uc, err := jwt.DecodeUserClaims(jw)
				if err != nil {
					t.Fatal(err)
				}
				want[uc.Subject] = true
				if held[uc.Subject] != uc.Expires {
					t.Errorf("key %s: expiry %d kept, want %d", uc.Subject, held[uc.Subject], uc.Expires)
				}
			}
			if len(held) != len(want) {
				t.Errorf("kept %d keys, want %d", len(held), len(want))
			}
		})
	}
}

// TestAdoptionReadsNoCheckpointFile: the checkpoint driver of an adopted
// attempt restores nothing, so it reads no file of any checkpoint (a
// restart's plan verifies every file of the one it restores, which took
// seconds of a failover); it still knows the completed checkpoints, their
// shared files' references included: once it has completed checkpoints of
// its own and discarded the older ones, the latest one's files are all
// there.
func TestAdoptionReadsNoCheckpointFile(t *testing.T) {
	plan := strings.Replace(ckptPlan, `"interval":50`, `"interval":50,"storage":"nats-obj://adopttest"`, 1)
	c, _, id, acks := startCkptJobPlan(t, plan)
	c.mu.Lock()
	j := c.jobs[id]
	old := j.ckpt
	c.mu.Unlock()
	// Four MiB of state in one shared file, which every checkpoint
	// references.
	big := make([]byte, 4<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "000009.sst")
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	var (
		hmu    sync.Mutex
		handle checkpoint.FileHandle
	)
	acks.mu.Lock()
	acks.state = func(ctl transport.CheckpointControl, task checkpoint.TaskID) *checkpoint.SubtaskState {
		hmu.Lock()
		defer hmu.Unlock()
		if handle.Path == "" {
			h, _, err := old.storage.PutShared(src, "")
			if err != nil {
				t.Error(err)
				return nil
			}
			h.Name = "000009.sst"
			handle = h
		}
		return &checkpoint.SubtaskState{Task: task, State: []checkpoint.FileHandle{handle}}
	}
	acks.mu.Unlock()
	_, before := acks.count()
	waitUntil(t, "no checkpoint with the shared file completed", func() bool { _, n := acks.count(); return n >= before+2 })
	// The next trigger goes unanswered: once it has come, every earlier
	// checkpoint is complete, and none completes after the stop.
	manual := make(chan transport.CheckpointControl, 64)
	acks.mu.Lock()
	acks.manual = manual
	acks.mu.Unlock()
	select {
	case <-manual:
	case <-time.After(time.Minute):
		t.Fatal("no trigger came")
	}
	old.stop()
	acks.mu.Lock()
	acks.manual = nil
	acks.mu.Unlock()
	st := old.storage
	ids, err := st.Completed()
	if err != nil || len(ids) == 0 {
		t.Fatalf("completed checkpoints %v, %v", ids, err)
	}
	latest := ids[len(ids)-1]

	verified, restored := checkpoint.ReadProgress()
	start := time.Now()
	j.adopting = true
	d, got, err := c.newCkptDriver(j)
	j.adopting = false
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	v, r := checkpoint.ReadProgress()
	if v != verified || r != restored {
		t.Errorf("adopting read %d bytes of checkpoint files to verify them and %d to restore them, want none", v-verified, r-restored)
	}
	if got != latest {
		t.Errorf("the adopted attempt's latest checkpoint is %d, want %d", got, latest)
	}
	refs := 0
	d.do(func() { refs = d.reg.refs[handle.Path] })
	if refs == 0 {
		t.Errorf("the adopted attempt's registry does not know %s, which checkpoint %d references", handle.Path, latest)
	}
	// A restart's plan of the same storage, for comparison: it verifies.
	c.mu.Lock()
	c.jobs[id].ckpt = d
	c.mu.Unlock()
	nc, err := c.jobConn(j)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := c.planRestore(j, nc, st); err != nil {
		t.Fatal(err)
	}
	t.Logf("adoption's checkpoint set-up took %s; a restart's plan of the same checkpoints %s", took, time.Since(start))
	if v2, _ := checkpoint.ReadProgress(); v2-v < int64(len(big))/2 {
		t.Errorf("the restart's plan verified %d bytes; the test's file has %d", v2-v, len(big))
	}

	d.workers = old.workers
	d.start()
	_, before = acks.count()
	waitUntil(t, "the adopted attempt's driver never discarded the checkpoints before it", func() bool {
		_, n := acks.count()
		if n < before+3 {
			return false
		}
		_, err := st.ReadMetadata(latest)
		return err != nil
	})
	ids, err = st.Completed()
	if err != nil || len(ids) == 0 {
		t.Fatalf("completed checkpoints %v, %v", ids, err)
	}
	m, err := st.ReadMetadata(ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(m); err != nil {
		t.Fatalf("checkpoint %d of the adopted attempt: %v", m.ID, err)
	}
}
