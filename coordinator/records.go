package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/durable"
	"github.com/wstream/wstream/internal/logging"
)

// JobDir is a job's directory under a data directory.
func JobDir(dataDir, id string) string { return filepath.Join(dataDir, "jobs", id) }

// CheckpointRoot is a job's checkpoint storage directory.
func CheckpointRoot(dataDir, id string) string {
	return filepath.Join(JobDir(dataDir, id), "checkpoints")
}

// ReadRecord reads a job's record (its spec, as the coordinator last wrote
// it to DATA/jobs/JOB/job.json).
func ReadRecord(dataDir, id string) (*JobSpec, error) {
	b, err := os.ReadFile(filepath.Join(JobDir(dataDir, id), "job.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no job %q in %s", id, dataDir)
		}
		return nil, err
	}
	var r JobSpec
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("job record %s: %w", filepath.Join(JobDir(dataDir, id), "job.json"), err)
	}
	return &r, nil
}

// ListRecords returns the records of every job in a data directory, most
// recently updated last.
func ListRecords(dataDir string) ([]*JobSpec, error) {
	entries, err := os.ReadDir(filepath.Join(dataDir, "jobs"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []*JobSpec
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if r, err := ReadRecord(dataDir, e.Name()); err == nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Updated.Before(out[j].Updated) })
	return out, nil
}

func (c *Coordinator) readRecord(id string) (*JobSpec, error) {
	if c.cfg.DataDir == "" {
		return nil, errors.New("this coordinator keeps no job records (no data directory)")
	}
	return ReadRecord(c.cfg.DataDir, id)
}

// writeRecord saves a job's record as it stands, atomically, and then its
// spec in the job bucket. Each write takes its view of the job under
// j.recordMu, so that an older view never replaces a newer one. It returns
// the record's error, which it has logged: a new job's submission fails
// on it (carry); a later write can only be logged.
func (c *Coordinator) writeRecord(j *jobState) error {
	j.recordMu.Lock()
	defer j.recordMu.Unlock()
	c.mu.Lock()
	state := j.info.State
	r := c.specLocked(j, state)
	sp, spID := r.FromSavepoint, r.SavepointID
	c.mu.Unlock()
	// The spec after the file: a client may take a job's result from
	// the spec, and find the file up to date then. The bucket gets the
	// job as it is then, not r: a checkpoint may have completed
	// meanwhile, and its spec must not be replaced by an older view.
	defer c.storeSpec(j, state)
	if c.cfg.DataDir == "" {
		return nil
	}
	dir := JobDir(c.cfg.DataDir, r.JobID)
	if _, err := c.fence(); err != nil {
		// A deposed leader's view of the job is not the job's.
		return fmt.Errorf("not saving the record of job %s: %w", r.JobID, err)
	}
	if err := writeJSONAtomic(dir, "job.json", r); err != nil {
		c.cfg.Log.Error("saving the job's record", logging.Job, r.JobID, "err", err)
		return fmt.Errorf("saving its record in %s: %w", dir, err)
	}
	if sp != "" {
		if rp, _ := ReadRestorePoint(c.cfg.DataDir, r.JobID); rp == nil || rp.ID != spID {
			c.writeRestorePoint(r.JobID, sp, spID)
		}
	}
	return nil
}

// writeJSONAtomic replaces dir/name with v as JSON, durably: the file is
// synced before it is renamed into place, and dir after, as is the parent
// of every directory it had to create. Without the directories' syncs a
// crash of the machine could lose the rename or the new job's directory,
// and with it a record the job's submission waited for precisely so that a
// restarted coordinator finds the job.
func writeJSONAtomic(dir, name string, v any) error {
	if err := mkdirDurable(dir); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// mkdirDurable is os.MkdirAll, and then syncs the parent of every directory
// it created, top down, so that they survive a crash of the machine.
func mkdirDurable(dir string) error {
	// The directories that do not exist yet, deepest first.
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k := len(missing) - 1; k >= 0; k-- {
		if err := syncDir(filepath.Dir(missing[k])); err != nil {
			return err
		}
	}
	return nil
}

// syncDir is durable.SyncDir, a variable for the tests.
var syncDir = durable.SyncDir

// HistoryEntry is one line of a job's checkpoint history
// (checkpoints/history.jsonl), which `wstream checkpoints` prints.
type HistoryEntry struct {
	ID       int64           `json:"id"`
	Kind     checkpoint.Kind `json:"kind"`
	Attempt  int             `json:"attempt"`
	Status   string          `json:"status"` // completed | aborted
	Reason   string          `json:"reason,omitempty"`
	Trigger  int64           `json:"trigger"` // unix ms
	Done     int64           `json:"done"`    // unix ms
	Duration time.Duration   `json:"duration"`
	// Sums over subtasks, and the slowest subtask's alignment, sync and
	// async durations.
	StateSize     int64         `json:"stateSize"`
	Uploaded      int64         `json:"uploaded"`
	InFlightBytes int64         `json:"inFlightBytes"`
	Alignment     time.Duration `json:"alignment"`
	Sync          time.Duration `json:"sync"`
	Async         time.Duration `json:"async"`
	Unaligned     bool          `json:"unaligned,omitempty"`
	// DeadLetters: records and timers sent to dead-letter sinks in the
	// checkpoint's interval, summed over subtasks.
	DeadLetters int64 `json:"deadLetters,omitempty"`
}

// ReadHistory reads a job's checkpoint history.
func ReadHistory(dataDir, id string) ([]HistoryEntry, error) {
	return readJSONLines[HistoryEntry](filepath.Join(CheckpointRoot(dataDir, id), "history.jsonl"))
}

// readJSONLines reads a file of JSON lines (nothing when it does not
// exist).
func readJSONLines[T any](path string) ([]T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []T
	dec := json.NewDecoder(bytesReader(b))
	for dec.More() {
		var e T
		if err := dec.Decode(&e); err != nil {
			// A crash can cut the last line short: keep what is whole.
			break
		}
		out = append(out, e)
	}
	return out, nil
}
