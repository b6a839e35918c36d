package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/internal/objlist"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
)

// JobSpec is what the coordinator keeps of a job: everything a coordinator
// needs to run the job again (plan, module in the object store, savepoint
// it started from, attempt counter, restarts), its state, the latest
// completed checkpoint and, once the job has ended, its result. It is kept
// in two places. The JetStream key-value bucket transport.JobsBucket holds
// it under the job's id, written when the job starts, when each attempt
// starts, when a checkpoint completes and when the job ends; a coordinator
// that starts with Config.ResumeJobs resumes every job whose spec there
// says it is running. The job's record, DATA/jobs/JOB/job.json
// (ReadRecord), holds it as of the start of the latest attempt or the
// job's end, synced to disk: `wstream deploy --resume` and `wstream list`
// read it without NATS. The bucket is the one to restore from: the record
// is not rewritten at each checkpoint.
type JobSpec struct {
	JobID        string          `json:"jobId"`
	Name         string          `json:"name"`
	Plan         json.RawMessage `json:"plan"`
	ModuleDigest string          `json:"moduleDigest,omitempty"`
	ModuleName   string          `json:"moduleName,omitempty"`
	State        string          `json:"state"`
	Error        string          `json:"error,omitempty"`
	// Attempt is the job's current (or last) attempt; Restarts counts the
	// restarts its restart strategy has made.
	Attempt  int `json:"attempt"`
	Restarts int `json:"restarts"`
	// RestartLog says why each new attempt started, oldest first.
	RestartLog []RestartEntry `json:"restartLog,omitempty"`
	Started    time.Time      `json:"started"`
	Updated    time.Time      `json:"updated"`
	// FromSavepoint is the storage root of the savepoint the job started
	// from, SavepointID its id.
	FromSavepoint string `json:"fromSavepoint,omitempty"`
	SavepointID   int64  `json:"savepointId,omitempty"`
	// CheckpointRoot is the job's checkpoint storage, LatestCheckpoint the
	// id of its latest completed checkpoint there (0: none yet).
	CheckpointRoot   string `json:"checkpointRoot,omitempty"`
	LatestCheckpoint int64  `json:"latestCheckpoint,omitempty"`
	// Result is the job's result once it has ended.
	Result *transport.JobResult `json:"result,omitempty"`
	// Tenant owns the job ("" without tenants).
	Tenant string `json:"tenant,omitempty"`
	// Epoch is the leadership epoch of the coordinator that wrote the
	// spec: a coordinator of a lower epoch (deposed) writes it no more.
	Epoch uint64 `json:"epoch,omitempty"`
}

// UnmarshalJSON reads a spec, and also a record written when the record
// was a type of its own: its "restarts" was the restart log.
func (s *JobSpec) UnmarshalJSON(b []byte) error {
	type plain JobSpec
	v := struct {
		*plain
		Restarts json.RawMessage `json:"restarts"`
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s.Restarts = 0
	switch r := bytes.TrimSpace(v.Restarts); {
	case len(r) == 0 || string(r) == "null":
	case r[0] == '[':
		if s.RestartLog == nil {
			return json.Unmarshal(r, &s.RestartLog)
		}
	default:
		return json.Unmarshal(r, &s.Restarts)
	}
	return nil
}

// kvTimeout bounds one call to the key-value bucket.
const kvTimeout = 5 * time.Second

// kvListTimeout bounds one attempt to list the job bucket, which may hold
// many keys; a lost watch is given up sooner (objlist.Stall).
const kvListTimeout = 3 * kvTimeout

// OpenJobs opens (creating it on first use, with replicas copies on a
// cluster) the bucket where coordinators keep their jobs.
func OpenJobs(ctx context.Context, nc *nats.Conn, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      transport.JobsBucket,
		Description: "wstream jobs: specs, states, latest checkpoints, results",
		Storage:     jetstream.FileStorage,
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("opening job bucket %s: %w", transport.JobsBucket, transport.ReplicasError(err, replicas))
	}
	return kv, nil
}

// ReadJobSpec reads the spec of job id from the job bucket.
func ReadJobSpec(ctx context.Context, nc *nats.Conn, id string) (*JobSpec, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, transport.JobsBucket)
	if err != nil {
		return nil, err
	}
	return getSpec(ctx, kv, id)
}

func getSpec(ctx context.Context, kv jetstream.KeyValue, id string) (*JobSpec, error) {
	e, err := kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var s JobSpec
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, fmt.Errorf("job %s in bucket %s: %w", id, transport.JobsBucket, err)
	}
	return &s, nil
}

// jobStore writes job specs to the bucket from one goroutine, only the
// newest spec of each job: a write that fails (the NATS server is away) is
// tried again until it succeeds or a newer spec of the job replaces it.
type jobStore struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu        sync.Mutex
	pending   map[string]queuedSpec
	order     []string // job ids in the order their specs came in
	gen       uint64
	stored    chan struct{} // closed, and replaced, at every spec stored
	wake      chan struct{}
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	// failing is set while writes fail (only the writer's goroutine, or
	// close after it, touches it).
	failing bool
	// fence, when set, returns the epoch of the writing coordinator, or
	// an error when it must not write (errDeposed: never again).
	fence func() (uint64, error)
}

func newJobStore(kv jetstream.KeyValue, log *slog.Logger) *jobStore {
	s := &jobStore{kv: kv, log: log, pending: map[string]queuedSpec{}, stored: make(chan struct{}), wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// queuedSpec is an encoded spec waiting to be stored; gen tells a newer
// one of the same job apart.
type queuedSpec struct {
	b   []byte
	gen uint64
}

// put queues the spec of a job.
func (s *jobStore) put(spec *JobSpec) {
	b, err := json.Marshal(spec)
	if err != nil {
		s.log.Error("encoding the job's spec", logging.Job, spec.JobID, "err", err)
		return
	}
	s.mu.Lock()
	if _, ok := s.pending[spec.JobID]; !ok {
		s.order = append(s.order, spec.JobID)
	}
	s.gen++
	s.pending[spec.JobID] = queuedSpec{b: b, gen: s.gen}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flush writes what is pending; it reports whether nothing is left.
func (s *jobStore) flush() bool {
	for {
		s.mu.Lock()
		if len(s.order) == 0 {
			s.mu.Unlock()
			return true
		}
		id := s.order[0]
		q := s.pending[id]
		s.mu.Unlock()
		err := s.write(id, q.b)
		if errors.Is(err, errDeposed) {
			// A later leader owns the jobs: nothing pending is written.
			s.log.Error("not storing the job's spec: a later coordinator leads", logging.Job, id, "bucket", transport.JobsBucket)
			s.mu.Lock()
			clear(s.pending)
			s.order = nil
			close(s.stored)
			s.stored = make(chan struct{})
			s.mu.Unlock()
			return true
		}
		if err != nil {
			if !s.failing {
				s.log.Warn("storing the job's spec (trying again until it works)", logging.Job, id, "bucket", transport.JobsBucket, "err", err)
			}
			s.failing = true
			return false
		}
		if s.failing {
			s.log.Info("the job's spec is stored again", logging.Job, id, "bucket", transport.JobsBucket)
			s.failing = false
		}
		s.mu.Lock()
		if s.pending[id].gen == q.gen {
			// Not replaced meanwhile.
			delete(s.pending, id)
			s.order = slices.DeleteFunc(s.order, func(o string) bool { return o == id })
		}
		close(s.stored)
		s.stored = make(chan struct{})
		s.mu.Unlock()
	}
}

// write stores one spec. With a fence it is a compare-and-set on the
// revision read, refused when the stored spec was written by a later
// leader: a deposed coordinator's write lands only if no later leader has
// written the job since, and every leader rewrites the records of the jobs
// it takes over before it acts on them.
func (s *jobStore) write(id string, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	if s.fence == nil {
		_, err := s.kv.Put(ctx, id, b)
		return err
	}
	for {
		epoch, err := s.fence()
		if err != nil {
			return err
		}
		e, err := s.kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = s.kv.Create(ctx, id, b)
		case err != nil:
			return err
		default:
			var stored struct {
				Epoch uint64 `json:"epoch"`
			}
			_ = json.Unmarshal(e.Value(), &stored)
			if fenced(stored.Epoch, epoch) {
				return fmt.Errorf("%w: the spec of job %s was written at epoch %d, this coordinator's is %d", errDeposed, id, stored.Epoch, epoch)
			}
			_, err = s.kv.Update(ctx, id, b, e.Revision())
		}
		if err == nil || !(errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
			return err
		}
		// Written meanwhile: read again.
	}
}

// wait waits, at most max, until no spec of job id is pending: it reports
// whether the bucket holds the newest one.
func (s *jobStore) wait(id string, max time.Duration) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		s.mu.Lock()
		_, pending := s.pending[id]
		stored := s.stored
		s.mu.Unlock()
		if !pending {
			return true
		}
		select {
		case <-stored:
		case <-s.done:
			return false
		case <-t.C:
			return false
		}
	}
}

func (s *jobStore) loop() {
	defer close(s.done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-retry.C:
		}
		if !s.flush() {
			retry.Reset(500 * time.Millisecond)
		}
	}
}

// close stops the writer after one last try, bounded by wait, to store
// what is pending.
func (s *jobStore) close(wait time.Duration) {
	s.closeOnce.Do(func() { close(s.quit) })
	<-s.done
	deadline := time.Now().Add(wait)
	for !s.flush() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// specLocked is the spec of a job as it stands; c.mu is held.
func (c *Coordinator) specLocked(j *jobState, state string) *JobSpec {
	s := &JobSpec{
		JobID: j.info.JobID, Name: j.info.Name, Plan: j.plan.JSON(), ModuleDigest: j.digest, ModuleName: j.module,
		State: state, Error: j.info.Error, Attempt: j.attempt, Restarts: j.lc.Restarts(), RestartLog: slices.Clone(j.restartLog),
		Started: j.started, Updated: c.now(), FromSavepoint: j.fromSavepoint, SavepointID: j.savepointID,
		CheckpointRoot: j.checkpointRoot(c.cfg.DataDir), LatestCheckpoint: j.latestCheckpoint, Result: j.result,
		Tenant: j.info.Tenant, Epoch: c.epoch(),
	}
	if state == transport.JobRunning {
		s.Error = ""
	}
	return s
}

// checkpointRoot is where the job keeps its checkpoints: the storage its
// spec names (a resumed job), or the one under the data directory.
func (j *jobState) checkpointRoot(dataDir string) string {
	if j.ckptRoot != "" {
		return j.ckptRoot
	}
	if !j.plan.Checkpoint.Enabled() {
		return ""
	}
	if loc := j.plan.Checkpoint.Storage; loc != "" {
		// An object store: no filesystem needs to be shared.
		return checkpoint.JoinLocation(loc, "jobs/"+j.info.JobID)
	}
	if dataDir == "" {
		return ""
	}
	return CheckpointRoot(dataDir, j.info.JobID)
}

// storeSpec queues the job's spec for the bucket.
func (c *Coordinator) storeSpec(j *jobState, state string) {
	if c.store == nil {
		return
	}
	// Under c.mu, so that the bucket gets the job's specs in the order of
	// the changes they record.
	c.mu.Lock()
	c.store.put(c.specLocked(j, state))
	c.mu.Unlock()
}

// runningSpecs lists the specs of the bucket's running jobs. A listing or
// a read that gets no answer is asked again (a take-over follows the NATS
// node that led the bucket's stream dying, and a watch or request made on
// it gets nothing): the caller then gets either every running job or an
// error, never a shorter list. A record that does not decode is an error
// of its own, not tried again.
func runningSpecs(ctx context.Context, kv jetstream.KeyValue) ([]*JobSpec, error) {
	keys, err := objlist.Keys(ctx, kv, kvListTimeout, objlist.Policy)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the jobs: %w", err)
	}
	var out []*JobSpec
	for _, k := range keys {
		var s *JobSpec
		err := transient.Do(ctx, objlist.Policy, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, kvTimeout)
			defer cancel()
			var err error
			s, err = getSpec(ctx, kv, k)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s.State == transport.JobRunning {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *JobSpec) int { return a.Started.Compare(b.Started) })
	return out, nil
}
