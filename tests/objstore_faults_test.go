package tests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCheckpointPutsRefused runs a keyed count to the exactly-once
// JetStream sink on a cluster (a NATS server, a `wstream server`, a
// worker) with its checkpoints in an object store whose stream then
// answers no write (no responders: a fault of the moment) for longer than
// any put's retries. The checkpoints meanwhile fail (their
// subtasks decline them) without failing the job (--tolerable-failures
// -1) or restarting it; once the stream takes writes again, checkpoints
// complete again, and the job finishes with every running count exactly
// once. No object is left whose info names chunks the store does not hold.
func TestCheckpointPutsRefused(t *testing.T) {
	mod := module(t, "testops")
	url, js := startNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	createStreams(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}, Duplicates: 5 * time.Minute})
	ctx := context.Background()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "putfault", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	r := &leaderRun{dir: t.TempDir(), url: url, nc: nc, js: js,
		g: genSpec{count: 60000, keys: 40, words: 1, seed: 17, rate: 1200}}
	r.leader = r.server(t, "a", nil, "--nats", url)
	r.leader.until(t, "the server's start", false, func() bool {
		return httpAtRe.MatchString(r.leader.stderr.String())
	})
	api := httpAtRe.FindStringSubmatch(r.leader.stderr.String())[1]
	r.worker = startEdge(t, r.dir, "worker", "-v", "--nats", url, "--id", "w1", "--data", filepath.Join(r.dir, "w1"))
	r.worker.until(t, "the worker's start", false, func() bool {
		return strings.Contains(r.worker.stderr.String(), "wstream worker: connected")
	})
	writePlan(t, r.dir, countPlan(r.g, 500, jetstreamSink(url, "OUT", "out")))
	r.deploy = startEdge(t, r.dir, "deploy", "--nats", url, "--plan", "plan.json",
		"--checkpoint-storage", "nats-obj://putfault", "--tolerable-failures", "-1", mod)
	r.job = r.deploy.jobID(t)
	r.checkpointed(t, r.leader, 0, edgeWait)
	attempt := r.spec(t).Attempt

	failed := func() float64 {
		code, v := restCall(t, "GET", api+"/v1/jobs/"+r.job+"/checkpoints", "")
		c, _ := v["counts"].(map[string]any)
		if code != 200 || c == nil {
			return 0
		}
		n, _ := c["failed"].(float64)
		return n
	}
	// Unbound from its subjects, the stream answers no publish: every
	// put meets "no responders", a fault of the moment, until it is bound
	// again (reads of info go on: they are direct gets).
	bind := func(subjects ...string) {
		t.Helper()
		st, err := js.Stream(ctx, "OBJ_putfault")
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.Subjects = subjects
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	before := failed()
	bind("$O.putfault.unbound.>")
	r.deploy.until(t, "two failed checkpoints", false, func() bool { return failed() >= before+2 })
	latest := r.spec(t).LatestCheckpoint
	bind("$O.putfault.C.>", "$O.putfault.M.>")
	r.checkpointed(t, r.leader, latest, edgeWait)

	if log := r.leader.stderr.String(); !strings.Contains(log, "checkpoint aborted") || !strings.Contains(log, "gave up after") {
		t.Fatalf("no checkpoint was aborted because its puts gave up:\n%s", log)
	}
	s := r.finish(t)
	if s.Attempt != attempt {
		t.Fatalf("the job ran attempt %d at the end, %d when the puts were refused: it restarted", s.Attempt, attempt)
	}
	// Whatever a refused put left: nothing that names chunks that are gone.
	st, err := js.Stream(ctx, "OBJ_putfault")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, oi := range infos {
		subj := "$O.putfault.C." + oi.NUID
		si, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		if held := si.State.Subjects[subj]; held < uint64(oi.Chunks) {
			t.Errorf("object %s names %d chunks, the store holds %d", oi.Name, oi.Chunks, held)
		}
	}
}
