package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/objwhole"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
)

// ModuleDigest is the digest by which a module is stored and named:
// "sha256:" and the hex SHA-256 of its bytes.
func ModuleDigest(wasm []byte) string { return transport.ModuleDigest(wasm) }

// StoreModule puts a module into the JetStream object store under its
// digest (creating the bucket on first use) and returns the digest.
func StoreModule(ctx context.Context, nc *nats.Conn, wasm []byte) (string, error) {
	return NewModuleStore(nc).Store(ctx, "", wasm)
}

// ModuleStore puts modules into the JetStream object store under their
// digests, as StoreModule does, keeping the bucket's handle from one call
// to the next: looking the bucket up is a request to the server on every
// deploy's path. It is safe for concurrent use.
type ModuleStore struct {
	nc  *nats.Conn
	mu  sync.Mutex
	obs jetstream.ObjectStore // nil until a call found or made the bucket
}

// NewModuleStore returns a ModuleStore that reaches the bucket through nc.
func NewModuleStore(nc *nats.Conn) *ModuleStore { return &ModuleStore{nc: nc} }

// Store puts wasm into the bucket unless it holds it already, and returns
// its digest. digest is ModuleDigest(wasm) when the caller knows it, or ""
// to have it computed.
func (m *ModuleStore) Store(ctx context.Context, digest string, wasm []byte) (string, error) {
	if digest == "" {
		digest = ModuleDigest(wasm)
	}
	m.mu.Lock()
	obs := m.obs
	m.mu.Unlock()
	if obs != nil {
		err := m.putModule(ctx, obs, digest, wasm)
		if err == nil {
			return digest, nil
		}
		// The bucket may have gone since (a server that lost its store):
		// look it up, or make it, again; unless the put was tried till
		// its attempts were spent, or the caller gave up.
		var spent *transient.Exhausted
		if errors.As(err, &spent) || ctx.Err() != nil {
			return "", err
		}
	}
	obs, err := openModuleBucket(ctx, m.nc)
	if err != nil {
		return "", err
	}
	if err := m.putModule(ctx, obs, digest, wasm); err != nil {
		return "", err
	}
	m.mu.Lock()
	m.obs = obs
	m.mu.Unlock()
	return digest, nil
}

// moduleBucketDescription describes the module store.
const moduleBucketDescription = "wstream operator modules by digest"

// openModuleBucket returns the module bucket, made if it does not exist.
func openModuleBucket(ctx context.Context, nc *nats.Conn) (jetstream.ObjectStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var obs jetstream.ObjectStore
	err = transient.Do(ctx, transient.Default, func(ctx context.Context) error {
		// Looked up first: creating (or updating) the bucket is two
		// requests and a write of the stream's configuration.
		var err error
		obs, err = js.ObjectStore(ctx, transport.ModuleBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			// One copy: the coordinator raises it to the cluster's
			// --replicas (replicateModules) before a job runs from it.
			obs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket:      transport.ModuleBucket,
				Description: moduleBucketDescription,
				Storage:     jetstream.FileStorage,
			})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening module store %s: %w", transport.ModuleBucket, err)
	}
	return obs, nil
}

// putModule puts wasm into obs under digest unless obs holds it already:
// an object whose record gives the module's size and SHA-256 and whose
// chunks the bucket's stream holds (a put refused after its record was
// stored leaves the record and purges the chunks). Other bytes under the
// name (a broken upload) are replaced; the record is only the uploader's
// word, and whoever fetches the module checks the bytes. A put that meets
// a fault of the moment (a server that syncs every write answers a burst
// of chunks with 429 on a busy machine) is tried again.
func (m *ModuleStore) putModule(ctx context.Context, obs jetstream.ObjectStore, digest string, wasm []byte) error {
	err := transient.Do(ctx, transient.Default, func(ctx context.Context) error {
		if info, err := obs.GetInfo(ctx, digest); err == nil && info.Size == uint64(len(wasm)) && info.Digest == objectDigest(digest) {
			whole, err := m.whole(ctx, info)
			if err != nil {
				return err
			}
			if whole {
				return nil
			}
		}
		_, err := obs.PutBytes(ctx, digest, wasm)
		return err
	})
	if err != nil {
		return fmt.Errorf("storing module %s (%d bytes) in %s: %w", digest, len(wasm), transport.ModuleBucket, err)
	}
	return nil
}

// whole says whether the module bucket's stream holds every chunk info
// names.
func (m *ModuleStore) whole(ctx context.Context, info *jetstream.ObjectInfo) (bool, error) {
	js, err := jetstream.New(m.nc)
	if err != nil {
		return false, err
	}
	st, err := js.Stream(ctx, objwhole.StreamName(info.Bucket))
	if err != nil {
		return false, err
	}
	return objwhole.Whole(ctx, st, info)
}

// objectDigest is the object store's record of the SHA-256 of a module
// with digest ("sha256:" and hex), or "" if digest is not one.
func objectDigest(digest string) string {
	sum, err := hex.DecodeString(strings.TrimPrefix(digest, "sha256:"))
	if err != nil || len(sum) != sha256.Size {
		return ""
	}
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum)
}

// SubmitTimeout bounds the wait for the coordinator's answer to a
// submission, which includes deploying the job's first attempt: an answer
// lost while NATS is unreachable must not keep a client waiting for ever.
const SubmitTimeout = 3 * time.Minute

// Submit sends a job to the coordinator and returns its id.
func Submit(ctx context.Context, nc *nats.Conn, req transport.SubmitRequest) (string, error) {
	b, _ := json.Marshal(req)
	ctx, stop := context.WithTimeout(ctx, SubmitTimeout)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, transport.SubjectSubmit, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return "", errors.New("no coordinator is running: start one with `wstream server`")
		}
		return "", fmt.Errorf("submitting job: %w", err)
	}
	var r transport.SubmitReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return "", fmt.Errorf("bad submit reply: %w", err)
	}
	if r.Error != "" {
		return "", errors.New(r.Error)
	}
	return r.JobID, nil
}

// Upgrade asks the coordinator to upgrade a running job and waits for the
// upgrade's end (or ctx). A refused, aborted or rolled-back upgrade comes
// back as the reply's Error, with the reply.
func Upgrade(ctx context.Context, nc *nats.Conn, req transport.UpgradeRequest) (*transport.UpgradeReply, error) {
	b, _ := json.Marshal(req)
	msg, err := nc.RequestWithContext(ctx, transport.SubjectUpgrade, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, errors.New("no coordinator is running: start one with `wstream server`")
		}
		return nil, fmt.Errorf("upgrading job %s: %w", req.JobID, err)
	}
	var r transport.UpgradeReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("bad upgrade reply: %w", err)
	}
	if r.Error != "" {
		return &r, errors.New(r.Error)
	}
	return &r, nil
}

// Cancel asks the coordinator to stop a job.
func Cancel(ctx context.Context, nc *nats.Conn, id string) error {
	b, _ := json.Marshal(transport.CancelRequest{JobID: id})
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, transport.SubjectCancel, b)
	if err != nil {
		return fmt.Errorf("cancelling job %s: %w", id, err)
	}
	var r transport.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("bad cancel reply: %w", err)
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// List returns the coordinator's jobs.
func List(ctx context.Context, nc *nats.Conn) ([]transport.JobInfo, error) {
	jobs, _, err := ListJobs(ctx, nc)
	return jobs, err
}

// ListJobs is List, with the id of the leading coordinator, which answers.
func ListJobs(ctx context.Context, nc *nats.Conn) ([]transport.JobInfo, string, error) {
	var r transport.ListReply
	if err := ask(ctx, nc, transport.SubjectList, "listing jobs", &r); err != nil {
		return nil, "", err
	}
	if r.Error != "" {
		return nil, "", errors.New(r.Error)
	}
	return r.Jobs, r.Leader, nil
}

// ask sends an empty request to subject and decodes the answer into v.
func ask(ctx context.Context, nc *nats.Conn, subject, what string, v any) error {
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(msg.Data, v); err != nil {
		return fmt.Errorf("bad reply %s: %w", what, err)
	}
	return nil
}

// Workers returns the coordinator's workers (the admin's request).
func Workers(ctx context.Context, nc *nats.Conn) ([]transport.WorkerRow, error) {
	ws, _, err := ListWorkers(ctx, nc)
	return ws, err
}

// ListWorkers is Workers, with the id of the leading coordinator.
func ListWorkers(ctx context.Context, nc *nats.Conn) ([]transport.WorkerRow, string, error) {
	var r transport.WorkersReply
	if err := ask(ctx, nc, transport.SubjectWorkers, "listing workers", &r); err != nil {
		return nil, "", err
	}
	if r.Error != "" {
		return nil, "", errors.New(r.Error)
	}
	return r.Workers, r.Leader, nil
}
