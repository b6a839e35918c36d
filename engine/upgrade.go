package engine

import (
	"context"
	"errors"

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
