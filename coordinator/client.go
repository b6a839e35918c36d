package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// ModuleDigest is the digest by which a module is stored and named:
// "sha256:" and the hex SHA-256 of its bytes.
func ModuleDigest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// StoreModule puts a module into the JetStream object store under its
// digest (creating the bucket on first use) and returns the digest.
func StoreModule(ctx context.Context, nc *nats.Conn, wasm []byte) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	// Looked up first: creating (or updating) the bucket is two requests
	// and a write of the stream's configuration, on every deploy's path.
	obs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      transport.ModuleBucket,
			Description: "wstream operator modules by digest",
			Storage:     jetstream.FileStorage,
		})
	}
	if err != nil {
		return "", fmt.Errorf("opening module store %s: %w", transport.ModuleBucket, err)
	}
	digest := ModuleDigest(wasm)
	if info, err := obs.GetInfo(ctx, digest); err == nil && info.Size == uint64(len(wasm)) {
		return digest, nil
	}
	if _, err := obs.PutBytes(ctx, digest, wasm); err != nil {
		return "", fmt.Errorf("storing module %s: %w", digest, err)
	}
	return digest, nil
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
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, transport.SubjectList, nil)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	var r transport.ListReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("bad list reply: %w", err)
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	return r.Jobs, nil
}

// Workers returns the coordinator's workers (the admin's request).
func Workers(ctx context.Context, nc *nats.Conn) ([]transport.WorkerRow, error) {
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, transport.SubjectWorkers, nil)
	if err != nil {
		return nil, fmt.Errorf("listing workers: %w", err)
	}
	var r transport.WorkersReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("bad workers reply: %w", err)
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	return r.Workers, nil
}
