package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/job"
)

// TestReportResumePoint: `deploy --resume` names the savepoint a job
// restores when that savepoint (of a stop or an upgrade: the job's
// restore point) is newer than every usable checkpoint, and the
// checkpoint otherwise.
func TestReportResumePoint(t *testing.T) {
	plan, err := job.Parse([]byte(`{"name":"one","parallelism":1,"checkpoint":{"interval":1000},
 "vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":10}},
  {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		checkpoints []int64
		restore     int64 // 0: none recorded
		want        string
	}{
		{"savepoint, no checkpoint", nil, 7, "resuming job j from savepoint /sp/savepoint-7\n"},
		{"savepoint newer than the checkpoint", []int64{3}, 7, "resuming job j from savepoint /sp/savepoint-7\n"},
		{"checkpoint newer than the savepoint", []int64{3, 9}, 7, "resuming job j from checkpoint 9\n"},
		{"no savepoint", []int64{3}, 0, "resuming job j from checkpoint 3\n"},
		{"nothing", nil, 0, "job j has no usable checkpoint: it starts over\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			st, err := checkpoint.OpenStorage(coordinator.CheckpointRoot(data, "j"))
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.checkpoints {
				if err := st.WriteMetadata(&checkpoint.Metadata{JobID: "j", ID: id, Kind: checkpoint.KindCheckpoint, Plan: plan.JSON()}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.restore != 0 {
				b, _ := json.Marshal(coordinator.RestorePoint{ID: tc.restore, Dir: "/sp/savepoint-7"})
				if err := os.WriteFile(filepath.Join(coordinator.JobDir(data, "j"), "restore-point.json"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var w bytes.Buffer
			reportResumePoint(&w, data, &engine.Deployment{Resume: "j", Plan: plan})
			if got := w.String(); !strings.HasSuffix(got, tc.want) {
				t.Fatalf("printed %q, want %q", got, tc.want)
			}
		})
	}
}
