package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

// Upgrade stores the module of d (prepared by Prepare) and asks the
// coordinator to replace the operators of running job id with it, at a
// savepoint barrier; it waits for the upgrade's end. A refused, aborted or
// rolled-back upgrade returns an error with the reply (the job then runs
// its old module).
func (e *Engine) Upgrade(ctx context.Context, id string, d *Deployment) (*transport.UpgradeReply, error) {
	defer d.release(ctx)
	req := transport.UpgradeRequest{JobID: id, Plan: d.Plan.JSON(), ModuleName: d.ModuleName, ModuleDigest: d.ModuleDigest}
	if d.module != nil {
		req.CanMigrate = d.module.CanMigrate()
	}
	if d.Wasm == nil {
		return nil, errors.New("an upgrade needs a module")
	}
	digest, err := e.storeModule(ctx, d)
	if err != nil {
		return nil, err
	}
	req.ModuleDigest = digest
	return coordinator.Upgrade(ctx, e.nc, req)
}

// DataDirOwner returns the process id of the process that holds dataDir's
// lock, as its lock file names it, and whether that process is alive. A
// process killed with SIGKILL leaves its id in the file (only a clean exit
// empties it): the id then names no process. pid 0: no process is named.
// It reads the file and never takes the lock, so a `deploy --resume`
// starting meanwhile is not refused.
func DataDirOwner(dataDir string) (pid int, alive bool, err error) {
	b, err := os.ReadFile(LockFile(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if _, err := fmt.Sscanf(string(b), "process %d", &pid); err != nil || pid <= 0 {
		return 0, false, nil
	}
	// Signal 0 checks that the process exists; EPERM says it does (owned
	// by another user).
	err = syscall.Kill(pid, 0)
	return pid, err == nil || errors.Is(err, syscall.EPERM), nil
}
