package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// suspension is what DATA/jobs/ID/suspended.json says of a job that a
// signal stopped with a savepoint (wstream deploy, Ctrl-C): where the
// savepoint is, and, once it was resumed, the job that continues it.
type suspension struct {
	Savepoint string `json:"savepoint"`
	ResumedAs string `json:"resumedAs,omitempty"`
}

func suspensionFile(dataDir, id string) string {
	return filepath.Join(coordinator.JobDir(dataDir, id), "suspended.json")
}

// readSuspension returns the suspension of job id, or nil when it was not
// suspended.
func readSuspension(dataDir, id string) (*suspension, error) {
	b, err := os.ReadFile(suspensionFile(dataDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s suspension
	if err := json.Unmarshal(b, &s); err != nil || s.Savepoint == "" {
		return nil, fmt.Errorf("job %s: %s is damaged: %v", id, suspensionFile(dataDir, id), err)
	}
	return &s, nil
}

func writeSuspension(dataDir, id string, s *suspension) error {
	b, _ := json.Marshal(s)
	path := suspensionFile(dataDir, id)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("job %s: recording its suspension: %w", id, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("job %s: recording its suspension: %w", id, err)
	}
	return nil
}

// MarkSuspended records that job id, which stopped with the savepoint in
// savepoint, can be resumed from it (PrepareResume).
func MarkSuspended(dataDir, id, savepoint string) error {
	return writeSuspension(dataDir, id, &suspension{Savepoint: savepoint})
}

// MarkResumed records that the suspended job id continues as job as: it
// cannot be resumed a second time.
func MarkResumed(dataDir, id, as string) error {
	s, err := readSuspension(dataDir, id)
	if err != nil || s == nil {
		return err
	}
	s.ResumedAs = as
	return writeSuspension(dataDir, id, s)
}

// resumable reports whether a job can be resumed: it is running (its
// process died), or it was suspended and not resumed yet.
func resumable(dataDir string, r *coordinator.JobSpec) bool {
	if r.State == transport.JobRunning {
		return true
	}
	if r.State != transport.JobStopped {
		return false
	}
	s, err := readSuspension(dataDir, r.JobID)
	return err == nil && s != nil && s.ResumedAs == ""
}

// prepareSuspended prepares the continuation of suspended job r: a new job
// of the same plan and module, from the savepoint it stopped with.
func prepareSuspended(dataDir string, r *coordinator.JobSpec) (*Deployment, error) {
	s, err := readSuspension(dataDir, r.JobID)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("--resume: job %s has %s, without a savepoint to resume from (a job stopped with `wstream stop` starts again with --from-savepoint)", r.JobID, r.State)
	}
	if s.ResumedAs != "" {
		return nil, fmt.Errorf("--resume: job %s was resumed already, as job %s", r.JobID, s.ResumedAs)
	}
	plan, err := job.Parse(r.Plan)
	if err != nil {
		return nil, fmt.Errorf("job %s: its recorded plan: %w", r.JobID, err)
	}
	g, err := job.Build(plan)
	if err != nil {
		return nil, err
	}
	return &Deployment{Name: r.Name, ModuleName: r.ModuleName, Plan: plan, Graph: g, ModuleDigest: r.ModuleDigest,
		FromSavepoint: s.Savepoint, Suspended: r.JobID}, nil
}
