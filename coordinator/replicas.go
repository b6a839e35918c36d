package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// replicas is the replica count of what the coordinator and its workers
// create (Config.Replicas, at least 1).
func (c *Coordinator) replicas() int { return max(c.cfg.Replicas, 1) }

// replicateModules makes the module store of js's account keep replicas
// copies: the bucket is made if missing (with create), and one with fewer
// copies (made by `wstream deploy`, which does not know the cluster's
// count, or before --replicas was raised) is raised to replicas. Workers
// only read it.
func replicateModules(ctx context.Context, js jetstream.JetStream, replicas int, create bool) error {
	cfg := jetstream.ObjectStoreConfig{
		Bucket:      transport.ModuleBucket,
		Description: moduleBucketDescription,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
	obs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) && !create:
		return nil
	case errors.Is(err, jetstream.ErrBucketNotFound):
		_, err = js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return replicateModules(ctx, js, replicas, create) // made meanwhile
		}
	case err == nil:
		var st jetstream.ObjectStoreStatus
		if st, err = obs.Status(ctx); err == nil && st.Replicas() < replicas {
			cfg.Description = st.Description()
			_, err = js.UpdateObjectStore(ctx, cfg)
		}
	}
	if err != nil {
		return fmt.Errorf("module store %s: %w", transport.ModuleBucket, transport.ReplicasError(err, replicas))
	}
	return nil
}
