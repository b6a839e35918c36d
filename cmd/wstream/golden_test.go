package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGoldenOutput")

// TestGoldenOutput pins what list, workers, checkpoints and inspect print,
// as tables and with -o json, for fixed rows: scripts parse both, so a
// change of either is a change of the interface and must show up in review
// (go test ./cmd/wstream -run Golden -update rewrites them).
func TestGoldenOutput(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 2, 11, 0, time.UTC)
	now = func() time.Time { return started.Add(5 * time.Second) }
	defer func() { now = time.Now }()
	// The upgrades table shows local times.
	defer func(l *time.Location) { time.Local = l }(time.Local)
	time.Local = time.UTC
	jobs := []transport.JobInfo{
		{JobID: "wordcount-9c1e", Name: "wordcount", State: "RESTARTING", Attempt: 2, Restarts: 2, Cause: "worker w1 lost: no heartbeat for 10.2s", Started: started},
		{JobID: "window-77a0", Name: "window", State: "FAILED", Attempt: 0, Started: started.Add(time.Minute), Error: "operator \"win\" (vertex win, subtask 1) failed processing a batch: wasm error: unreachable", Tenant: "acme"},
	}
	workers := []transport.WorkerRow{
		{ID: "w0", Slots: 0, Used: 3, LastSeen: started.Add(2 * time.Second), Live: true},
		{ID: "w1", Slots: 4, Used: 0, LastSeen: started, Live: false},
	}
	hist := []coordinator.HistoryEntry{
		{ID: 1, Kind: checkpoint.KindCheckpoint, Status: "completed", Trigger: started.UnixMilli(), Done: started.UnixMilli() + 254, Duration: 254 * time.Millisecond,
			StateSize: 198_400, Uploaded: 198_400, Alignment: 32 * time.Millisecond, Sync: 15 * time.Millisecond, Async: 180 * time.Millisecond},
		{ID: 2, Kind: checkpoint.KindCheckpoint, Status: "completed", Duration: 61 * time.Millisecond, StateSize: 201_000, Uploaded: 3_958, InFlightBytes: 1 << 20, Unaligned: true, Attempt: 1},
		{ID: 3, Kind: checkpoint.KindSavepoint, Status: "aborted", Reason: "checkpoint expired before completing", Attempt: 1},
	}
	ups := []coordinator.UpgradeEntry{{Time: started.Add(time.Hour), Outcome: "done", Savepoint: 4, FromAttempt: 1, Attempt: 2,
		OldModule: "wordcount.wasm", OldDigest: "sha256:0f3a", NewModule: "wordcountv2.wasm", NewDigest: "sha256:77b1",
		OldSubtasks: 7, NewSubtasks: 9, Migrated: []string{"count/count"}, Downtime: 190 * time.Millisecond, DowntimeKnown: true}}
	meta := &checkpoint.Metadata{Format: "wstream-checkpoint", Version: 1, JobID: "wordcount-9c1e", ID: 2, Kind: checkpoint.KindCheckpoint,
		Trigger: started.UnixMilli(), Done: started.UnixMilli() + 61, ModuleDigest: "sha256:0f3a", MaxParallelism: 128,
		Tasks: []checkpoint.SubtaskState{{Task: checkpoint.TaskID{Chain: 1, Subtask: 0}, KeyGroups: abi.KeyGroupRange{Start: 0, End: 63},
			State:    []checkpoint.FileHandle{{Path: "shared/000004.sst", Size: 1024, SHA256: "ab12", Shared: true}},
			Operator: map[string][]byte{"source": []byte(`{"offset":42}`)}}}}

	cases := []struct {
		name  string
		print func(*bytes.Buffer) error
	}{
		{"list.txt", func(b *bytes.Buffer) error { return printJobs(b, jobs) }},
		{"list.json", func(b *bytes.Buffer) error { return writeJSON(b, jsonView(orEmpty(jobs))) }},
		{"list-empty.json", func(b *bytes.Buffer) error { return writeJSON(b, jsonView(orEmpty([]transport.JobInfo(nil)))) }},
		{"workers.txt", func(b *bytes.Buffer) error { return printWorkers(b, workers) }},
		{"workers.json", func(b *bytes.Buffer) error { return writeJSON(b, jsonView(orEmpty(workers))) }},
		{"checkpoints.txt", func(b *bytes.Buffer) error {
			return printCheckpoints(b, false, "wordcount-9c1e", hist, []int64{2}, nil)
		}},
		{"checkpoints-upgraded.txt", func(b *bytes.Buffer) error {
			return printCheckpoints(b, false, "wordcount-9c1e", hist, []int64{2}, ups)
		}},
		{"checkpoints.json", func(b *bytes.Buffer) error { return printCheckpoints(b, true, "wordcount-9c1e", hist, []int64{2}, ups) }},
		{"inspect.json", func(b *bytes.Buffer) error { return inspectJSON(b, nil, meta, false) }},
		{"tenants.json", func(b *bytes.Buffer) error {
			raw, _ := json.Marshal(tenant.Tenant{Name: "acme", Account: "ACXYZ", Created: started, Updated: started.Add(time.Hour),
				Quotas: tenant.Quotas{Jobs: 3, MemoryMiB: 32}})
			return tenantsJSON(b, &transport.TenantReply{Tenants: []json.RawMessage{raw}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := c.print(&b); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", c.name)
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run Golden -update writes it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("%s changed:\n--- got\n%s\n--- want\n%s", c.name, b.Bytes(), want)
			}
		})
	}
}
