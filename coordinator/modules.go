package coordinator

import (
	"context"
	"errors"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// moduleLimit is the largest module a job of owner ("": the admin) may
// name: the tenant's quota, within the coordinator's cap. Workers are told
// it with each deployment (transport.Deployment.ModuleBytes).
func (c *Coordinator) moduleLimit(owner string) int64 {
	limit := c.cfg.MaxModuleBytes
	if owner == "" || c.cfg.Tenants == nil {
		return limit
	}
	if t, ok := c.cfg.Tenants.Get(owner); ok {
		limit = min(limit, t.Quotas.WithDefaults().ModuleBytes)
	}
	return limit
}

// verifyModule reads module digest from owner's store obs (of JetStream
// js), at most limit bytes, and checks that it is whole and that its
// bytes hash to digest; they are not kept, so the check costs the
// coordinator no memory however large the module.
func verifyModule(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, owner, digest string, limit int64) error {
	return transport.ReadModule(ctx, js, obs, owner, digest, limit, io.Discard)
}

// adminModuleSize refuses an admin's module over limit, when the admin's
// store holds it: the admin's modules are the admin's own, so the workers,
// which fetch them anyway, check their digests.
func (c *Coordinator) adminModuleSize(ctx context.Context, digest string, limit int64) error {
	js, err := jetstream.New(c.cfg.NATS)
	if err != nil {
		return err
	}
	obs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	if err != nil {
		return nil // the workers say what is missing
	}
	if _, err := transport.StatModule(ctx, obs, "", digest, limit); errors.Is(err, transport.ErrModuleTooLarge) {
		return err
	}
	return nil
}
