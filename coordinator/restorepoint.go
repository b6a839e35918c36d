package coordinator

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/wstream/wstream/internal/logging"
)

// RestorePoint is the savepoint a job restores when no checkpoint of its
// own since is usable: the one it started from, or the latest of a stop or
// an upgrade (FLIP-193). The job's spec in the job bucket says it for a
// coordinator; restore-point.json in the job's directory says it for a
// client that resumes a job of a local data directory before its NATS
// server is up (`wstream deploy --resume` names what it restores).
type RestorePoint struct {
	ID  int64  `json:"id"`
	Dir string `json:"dir"`
}

const restorePointFile = "restore-point.json"

// ReadRestorePoint reads a job's restore point (nil: none recorded).
func ReadRestorePoint(dataDir, id string) (*RestorePoint, error) {
	b, err := os.ReadFile(filepath.Join(JobDir(dataDir, id), restorePointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rp RestorePoint
	if err := json.Unmarshal(b, &rp); err != nil {
		return nil, err
	}
	return &rp, nil
}

// writeRestorePoint records a job's restore point in its directory, while
// this coordinator leads.
func (c *Coordinator) writeRestorePoint(job, dir string, id int64) {
	if c.cfg.DataDir == "" || dir == "" {
		return
	}
	if _, err := c.fence(); err != nil {
		return
	}
	if err := writeJSONAtomic(JobDir(c.cfg.DataDir, job), restorePointFile, RestorePoint{ID: id, Dir: dir}); err != nil {
		c.cfg.Log.Warn("recording the job's restore point", logging.Job, job, "err", err)
	}
}
