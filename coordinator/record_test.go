package coordinator

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

// TestWriteJSONAtomicIsDurable: a record's file is in place before its
// directory is synced, and every directory the write created has its parent
// synced, top down, before that.
func TestWriteJSONAtomicIsDurable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data", "jobs", "j1")
	var synced []string
	old := syncDir
	defer func() { syncDir = old }()
	syncDir = func(d string) error {
		if d == dir {
			b, err := os.ReadFile(filepath.Join(dir, "job.json"))
			if err != nil || len(b) == 0 {
				t.Errorf("directory synced before the record was in place: %v", err)
			}
		}
		synced = append(synced, d)
		return old(d)
	}
	if err := writeJSONAtomic(dir, "job.json", JobSpec{JobID: "j1", State: "running"}); err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "data"), filepath.Join(root, "data", "jobs"), dir}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %q, want %q", synced, want)
	}
	// Rewritten in place: only the directory of the rename.
	synced = nil
	if err := writeJSONAtomic(dir, "job.json", JobSpec{JobID: "j1", State: "finished"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(synced, []string{dir}) {
		t.Fatalf("synced %q on a rewrite, want only %q", synced, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "job.json" {
		t.Fatalf("the directory holds %v, want only job.json", entries)
	}
}

// TestSubmitAnswersOnceRecorded: a new job's first attempt is deployed
// before its record is written (the syncs are not on the path to its first
// record), but the submission is answered only once the record is on disk;
// the record of a job that then ends says so.
func TestSubmitAnswersOnceRecorded(t *testing.T) {
	c, client := startTestCoordinator(t)
	w := startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool {
		return slices.Equal(workerIDs(c), []string{"fw"})
	})
	var atDeploy error
	w.mu.Lock()
	w.beforeReply = func(d transport.Deployment) { _, atDeploy = ReadRecord(c.cfg.DataDir, d.JobID) }
	w.mu.Unlock()
	watch, err := WatchJobs(client)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := Submit(ctx, client, transport.SubmitRequest{Name: "one", Plan: json.RawMessage(onePlan)})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(c.cfg.DataDir, id)
	if err != nil || rec.State != transport.JobRunning || rec.Attempt != 0 {
		t.Fatalf("record when the submission was answered: %+v, %v; want running, attempt 0", rec, err)
	}
	if d := nextDeploy(t, w); d.JobID != id {
		t.Fatalf("deployed %s, want %s", d.JobID, id)
	}
	if atDeploy == nil {
		t.Error("the record was written before the first attempt was deployed")
	}
	w.report(t, id, 0, transport.TaskFinished)
	res, err := watch.Wait(ctx, id)
	if err != nil || res.State != transport.JobFinished {
		t.Fatalf("result %+v, %v; want finished", res, err)
	}
	if rec, err = ReadRecord(c.cfg.DataDir, id); err != nil || rec.State != transport.JobFinished {
		t.Fatalf("record after the end: %+v, %v; want finished", rec, err)
	}
	// The bucket had the end before the client heard of it.
	if s, err := ReadJobSpec(ctx, client, id); err != nil || s.State != transport.JobFinished || s.Result == nil {
		t.Fatalf("spec in the bucket when the result came: %+v, %v; want finished, with the result", s, err)
	}
}

// TestSubmitFailsWithoutRecord checks that a new job whose record cannot be
// written is not accepted: the submission fails and says why and where, the
// attempt deployed for it is cancelled, and the job is not listed; the
// coordinator takes the next job once the record can be written again.
func TestSubmitFailsWithoutRecord(t *testing.T) {
	c, client := startTestCoordinator(t)
	w := startFakeWorker(t, client, "fw")
	waitUntil(t, "the worker never registered by its heartbeat", func() bool {
		return slices.Equal(workerIDs(c), []string{"fw"})
	})
	// A file where the job directories go: no record can be made.
	jobs := filepath.Join(c.cfg.DataDir, "jobs")
	if err := os.RemoveAll(jobs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jobs, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Submit(ctx, client, transport.SubmitRequest{Name: "one", Plan: json.RawMessage(onePlan)})
	if err == nil || !strings.Contains(err.Error(), "not accepted") || !strings.Contains(err.Error(), jobs) {
		t.Fatalf("submission without a record: %v; want it refused, naming %s", err, jobs)
	}
	if testing.Verbose() {
		t.Logf("the refusal: %v", err)
	}
	d := nextDeploy(t, w)
	select {
	case r := <-w.cancels:
		if r.JobID != d.JobID || r.Attempt != d.Attempt {
			t.Fatalf("cancelled %s attempt %d, want %s attempt %d", r.JobID, r.Attempt, d.JobID, d.Attempt)
		}
	case <-ctx.Done():
		t.Fatalf("the attempt of the refused job %s was never cancelled", d.JobID)
	}
	if list, err := List(ctx, client); err != nil || len(list) != 0 {
		t.Fatalf("jobs after the refusal: %+v, %v; want none", list, err)
	}

	if err := os.Remove(jobs); err != nil {
		t.Fatal(err)
	}
	id, err := Submit(ctx, client, transport.SubmitRequest{Name: "two", Plan: json.RawMessage(onePlan)})
	if err != nil {
		t.Fatalf("submission once records can be written: %v", err)
	}
	if rec, err := ReadRecord(c.cfg.DataDir, id); err != nil || rec.State != transport.JobRunning {
		t.Fatalf("record of the accepted job: %+v, %v", rec, err)
	}
}

// TestRecordIsTheSpec: the record on disk is the job's spec, and a record
// written when it was a type of its own ("restarts" the restart log) reads
// as one.
func TestRecordIsTheSpec(t *testing.T) {
	data := t.TempDir()
	want := JobSpec{JobID: "j1", Name: "n", State: transport.JobRunning, Attempt: 2, Restarts: 2,
		RestartLog: []RestartEntry{{Attempt: 1, Reason: "boom"}, {Attempt: 2, Reason: "bang"}}, LatestCheckpoint: 7, Epoch: 3}
	if err := writeJSONAtomic(JobDir(data, "j1"), "job.json", want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(data, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Restarts != 2 || len(got.RestartLog) != 2 || got.RestartLog[1].Reason != "bang" || got.LatestCheckpoint != 7 || got.Epoch != 3 {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	legacy := `{"jobId":"j2","name":"n","plan":{},"state":"running","attempt":1,"restarts":[{"attempt":1,"reason":"worker w1 lost"}]}`
	if err := os.MkdirAll(JobDir(data, "j2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(JobDir(data, "j2"), "job.json"), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := ReadRecord(data, "j2")
	if err != nil {
		t.Fatal(err)
	}
	if old.Attempt != 1 || old.Restarts != 0 || len(old.RestartLog) != 1 || old.RestartLog[0].Reason != "worker w1 lost" {
		t.Fatalf("legacy record read as %+v", old)
	}
	if _, err := ReadRecord(data, "j3"); err == nil {
		t.Fatal("a missing record read without an error")
	}
	if err := os.MkdirAll(JobDir(data, "j4"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(JobDir(data, "j4"), "job.json"), []byte(`{"jobId":"j4","restarts":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecord(data, "j4"); err == nil || !strings.Contains(err.Error(), "job.json") {
		t.Fatalf("a record with a bad restarts field: %v, want an error naming the file", err)
	}
}
