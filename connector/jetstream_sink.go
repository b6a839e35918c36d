package connector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/objlist"
	"github.com/wstream/wstream/internal/transient"
)

// jsSinkConfig is the configuration of the "jetstream" sink.
type jsSinkConfig struct {
	jsConn
	Stream              string `json:"stream"`          // required
	Subject             string `json:"subject"`         // required; "{key}" is replaced by the record's key
	KeyHeader           string `json:"keyHeader"`       // default Wstream-Key; "" = none
	TimestampHeader     string `json:"timestampHeader"` // default Wstream-Timestamp; "" = none
	Create              bool   `json:"create"`          // create the stream when missing
	DuplicateWindow     int64  `json:"duplicateWindow"` // ms, for a created stream; default 120000
	Staging             string `json:"staging"`         // object store bucket of pre-committed transactions
	MaxTransactionBytes int64  `json:"maxTransactionBytes"`
}

// Defaults and bounds of the sink.
const (
	jsDefaultStaging          = "wstream_staging"
	jsDefaultDuplicateWindow  = 120_000           // ms: the server's default
	jsDefaultMaxTxnBytes      = 64 << 20          // an open transaction's records, encoded
	jsMaxTxnBytes             = 1 << 31           // what one staged object may hold
	jsPublishWindow           = 1024              // async publishes in flight before waiting for their acks
	jsAckTimeout              = 30 * time.Second  // for the acks of one window
	jsKeyPlaceholder          = "{key}"           // in the subject
	jsMaxDuplicateWindowMilli = 7 * 24 * 3600_000 // a week
)

var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func parseJSSinkConfig(raw json.RawMessage) (jsSinkConfig, error) {
	const name = "jetstream"
	c := jsSinkConfig{KeyHeader: jsKeyHeader, TimestampHeader: jsTimestampHeader, DuplicateWindow: jsDefaultDuplicateWindow,
		Staging: jsDefaultStaging, MaxTransactionBytes: jsDefaultMaxTxnBytes}
	if err := decodeConfig(name, raw, &c); err != nil {
		return c, err
	}
	if err := c.jsConn.check(name); err != nil {
		return c, err
	}
	if err := checkStreamName(name, "stream", c.Stream); err != nil {
		return c, err
	}
	if c.Subject == "" {
		return c, &ConfigError{Connector: name, Field: "subject", Message: "missing: the subject to publish to, e.g. \"out.{key}\""}
	}
	if !validSubject(strings.ReplaceAll(c.Subject, jsKeyPlaceholder, "k"), false) {
		return c, &ConfigError{Connector: name, Field: "subject", Message: fmt.Sprintf("%q is not a subject without wildcards (\"{key}\" may stand for a token)", c.Subject)}
	}
	for field, h := range map[string]string{"keyHeader": c.KeyHeader, "timestampHeader": c.TimestampHeader} {
		if strings.ContainsAny(h, " \t\r\n:") {
			return c, &ConfigError{Connector: name, Field: field, Message: fmt.Sprintf("%q is not a header name", h)}
		}
	}
	if err := checkRange(name, "duplicateWindow", c.DuplicateWindow, 1, jsMaxDuplicateWindowMilli); err != nil {
		return c, err
	}
	if !bucketName.MatchString(c.Staging) {
		return c, &ConfigError{Connector: name, Field: "staging", Message: fmt.Sprintf("%q is not an object store bucket name (letters, digits, '-' and '_')", c.Staging)}
	}
	if err := checkRange(name, "maxTransactionBytes", c.MaxTransactionBytes, 1, jsMaxTxnBytes); err != nil {
		return c, err
	}
	return c, nil
}

// jsSink is the "jetstream" sink. Without checkpoints it publishes every
// batch at once and waits for the acks (at-least-once). After
// BeginTransactions it is exactly-once by two-phase commit (see
// jsSink.PreCommit and docs/connectors.md):
//
//   - Write appends records to the open transaction, in memory;
//   - PreCommit(id) stores the open transaction as object
//     RUN/SUBTASK/ID (ID zero-padded) in the staging object store and
//     returns the list of staged, uncommitted transactions as state;
//   - Commit(id) publishes the records of every staged transaction up to
//     id, each with the message id RUN/SUBTASK/ID/INDEX, waits for every
//     ack and deletes the object. The stream's duplicate window drops a
//     message published again with the same id, so publishing a
//     transaction again (Recover after a lost Commit) adds nothing.
//
// RUN is JOB/VERTEX when the runtime told the sink its identity
// (SetIdentity), so message ids are JOB/VERTEX/SUBTASK/CHECKPOINT/INDEX;
// otherwise a random token chosen when the sink starts without restored
// state. It is carried in the state, so a replay reuses the ids of the
// original commit; job ids are unique per deployment and checkpoint ids
// keep increasing across restarts, so a rerun never collides with them.
type jsSink struct {
	cfg  jsSinkConfig
	dial Dialer // the cluster's server, when cfg names no url
	// replicas is the cluster's replica count (SetReplicas).
	replicas int
	what     string // error prefix: "connector jetstream: sink STREAM (subtask S)"

	mu       sync.Mutex
	txn      bool // BeginTransactions was called
	opened   bool
	ctx      context.Context
	subtask  int
	parallel int // the sink's parallelism, for the staging of removed subtasks
	nc       *nats.Conn
	js       jetstream.JetStream
	obs      jetstream.ObjectStore // staging, transactional mode

	run      string      // message id token
	identity string      // JOB/VERTEX from SetIdentity, "" when not given
	open     abi.Builder // the open transaction's records
	last     int64       // latest checkpoint pre-committed or restored
	pending  []jsTxn     // staged, not committed, by ascending id
	used     bool        // Write or PreCommit since Open: Recover is too late
	err      error       // the first failure of Write or PreCommit
	// failed is the checkpoint whose pre-commit failed with the open
	// transaction whole (AbortPreCommit takes it back); 0 if none.
	failed int64
	// fault, set by tests (SetPreCommitFault), fails a pre-commit once its
	// object is stored: a lost reply.
	fault func(id int64) error

	subj []byte
}

// jsTxn is a staged transaction: the checkpoint that pre-committed it, its
// object, and its records (kept in memory until committed, nil after a
// restore).
type jsTxn struct {
	ID      int64  `json:"id"`
	Object  string `json:"object"`
	Records int    `json:"records"`
	Bytes   int64  `json:"bytes"`
	data    []byte
}

// jsSinkStateVersion is the version of the state PreCommit returns.
const jsSinkStateVersion = 1

// jsSinkState is the sink's checkpointed state: the transactions staged up
// to checkpoint Checkpoint and not yet committed, and the message id token.
type jsSinkState struct {
	Version    int     `json:"version"`
	Kind       string  `json:"kind"` // "jetstream"
	Subtask    int     `json:"subtask"`
	Run        string  `json:"run"`
	Checkpoint int64   `json:"checkpoint"`
	Pending    []jsTxn `json:"pending"`
}

var (
	_ Transactional    = (*jsSink)(nil)
	_ PreCommitAborter = (*jsSink)(nil)
	_ Sink             = (*jsSink)(nil)
)

func (c jsSinkConfig) Connector() string { return "jetstream" }

// Reach lists the connection fields set: a server and its credentials.
func (c jsSinkConfig) Reach() []Reach { return c.jsConn.reach() }

func (c jsSinkConfig) sink(io.Writer) (Sink, error) {
	return &jsSink{cfg: c, what: "connector jetstream: sink " + c.Stream}, nil
}

// BeginTransactions switches the sink to exactly-once mode; it must come
// before Open.
func (s *jsSink) BeginTransactions() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened && !s.txn {
		return fmt.Errorf("%s: begin transactions: the sink is already open non-transactionally; call BeginTransactions before Open", s.what)
	}
	s.txn = true
	return nil
}

func newRunToken() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func (s *jsSink) Open(ctx context.Context, subtask, parallelism int) error {
	if err := checkSubtask(s.what, subtask, parallelism); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened {
		return fmt.Errorf("%s: open: already open", s.what)
	}
	s.what = fmt.Sprintf("connector jetstream: sink %s (subtask %d)", s.cfg.Stream, subtask)
	nc, js, err := s.cfg.jsConn.connect(s.dial, s.what, fmt.Sprintf("wstream jetstream sink %s %d/%d", s.cfg.Stream, subtask, parallelism),
		jetstream.WithPublishAsyncMaxPending(2*jsPublishWindow))
	if err != nil {
		return err
	}
	fail := func(err error) error {
		nc.Close()
		return fmt.Errorf("%s: open: %w", s.what, err)
	}
	if err := s.ensureStream(ctx, js); err != nil {
		return fail(err)
	}
	var obs jetstream.ObjectStore
	if s.txn {
		if obs, err = s.ensureStaging(ctx, js); err != nil {
			return fail(err)
		}
	}
	run := s.identity
	if run == "" {
		if run, err = newRunToken(); err != nil {
			return fail(err)
		}
	}
	s.ctx, s.subtask, s.parallel, s.nc, s.js, s.obs = ctx, subtask, parallelism, nc, js, obs
	s.run, s.last, s.pending, s.used, s.err = run, 0, nil, false, nil
	s.open.Reset()
	s.opened = true
	return nil
}

// ensureStream checks that the stream exists, creating it when configured
// to, and in exactly-once mode that it deduplicates.
func (s *jsSink) ensureStream(ctx context.Context, js jetstream.JetStream) error {
	actx, cancel := apiContext(ctx)
	defer cancel()
	st, err := js.Stream(actx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && s.cfg.Create {
		cfg := jetstream.StreamConfig{
			Name:       s.cfg.Stream,
			Subjects:   []string{strings.ReplaceAll(s.cfg.Subject, jsKeyPlaceholder, "*")},
			Storage:    jetstream.FileStorage,
			Duplicates: time.Duration(s.cfg.DuplicateWindow) * time.Millisecond,
			Replicas:   s.createReplicas(),
		}
		st, err = js.CreateStream(actx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another subtask created it with a configuration of its own.
			st, err = js.Stream(actx, s.cfg.Stream)
		}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s does not exist: create it (with a duplicate window) or set \"create\"", s.cfg.Stream)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	if s.txn && st.CachedInfo().Config.Duplicates <= 0 {
		return fmt.Errorf("stream %s has no duplicate window: exactly-once output needs one", s.cfg.Stream)
	}
	return nil
}

// ensureStaging opens the staging object store, creating it when missing.
func (s *jsSink) ensureStaging(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	actx, cancel := apiContext(ctx)
	defer cancel()
	obs, err := js.ObjectStore(actx, s.cfg.Staging)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(actx, jetstream.ObjectStoreConfig{
			Bucket:      s.cfg.Staging,
			Description: "wstream: transactions of exactly-once jetstream sinks, pre-committed and not yet committed",
			Storage:     jetstream.FileStorage,
			Replicas:    s.createReplicas(),
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			obs, err = js.ObjectStore(actx, s.cfg.Staging)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("staging object store %s: %w", s.cfg.Staging, err)
	}
	return obs, nil
}

// subject is the publish subject of a record with key.
func (s *jsSink) subject(key []byte) string {
	i := strings.Index(s.cfg.Subject, jsKeyPlaceholder)
	if i < 0 {
		return s.cfg.Subject
	}
	s.subj = append(s.subj[:0], s.cfg.Subject[:i]...)
	rest := s.cfg.Subject[i:]
	for {
		j := strings.Index(rest, jsKeyPlaceholder)
		if j < 0 {
			s.subj = append(s.subj, rest...)
			break
		}
		s.subj = append(s.subj, rest[:j]...)
		s.subj = append(s.subj, key...)
		rest = rest[j+len(jsKeyPlaceholder):]
	}
	return string(s.subj)
}

// checkRecords refuses a batch with a record the sink cannot publish: a
// key that is not a subject token when the subject holds "{key}", or one
// with a line break when it goes into a header.
func (s *jsSink) checkRecords(batch []byte) error {
	r, err := abi.NewReader(batch)
	if err != nil {
		return err
	}
	inSubject := strings.Contains(s.cfg.Subject, jsKeyPlaceholder)
	var rec abi.Record
	for {
		ok, err := r.Next(&rec)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if inSubject && !validToken(rec.Key) {
			return fmt.Errorf("the key %q cannot stand for {key} in subject %s: a key there must be a non-empty subject token (no whitespace, '.', '*' or '>')", truncate(rec.Key), s.cfg.Subject)
		}
		if s.cfg.KeyHeader != "" && strings.ContainsAny(string(rec.Key), "\r\n") {
			return fmt.Errorf("the key %q holds a line break and cannot go into header %s", truncate(rec.Key), s.cfg.KeyHeader)
		}
	}
}

func validToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c == '.' || c == '*' || c == '>' || c == 0x7f {
			return false
		}
	}
	return true
}

// txnOwner is whose transactions a publish commits: this subtask's, or
// those of a subtask removed by a restore at a lower parallelism, under
// their own message ids.
type txnOwner struct {
	run     string
	subtask int
}

func (s *jsSink) self() txnOwner { return txnOwner{s.run, s.subtask} }

// msgID is the message id of record index of transaction id of o.
func (o txnOwner) msgID(id int64, index int) string {
	return o.run + "/" + strconv.Itoa(o.subtask) + "/" + strconv.FormatInt(id, 10) + "/" + strconv.Itoa(index)
}

// objectName is the staging object of transaction id.
func (s *jsSink) objectName(id int64) string {
	return fmt.Sprintf("%s/%d/%010d", s.run, s.subtask, id)
}

// publish publishes the records of the encoded batch data in order and
// waits for every ack, in windows of jsPublishWindow messages. With id ≥ 0
// each message gets the message id of its transaction and index.
func (s *jsSink) publish(ctx context.Context, data []byte, id int64) error {
	return s.publishAs(ctx, s.self(), data, id)
}

// publishAs is publish with the message ids of owner o.
func (s *jsSink) publishAs(ctx context.Context, o txnOwner, data []byte, id int64) error {
	r, err := abi.NewReader(data)
	if err != nil {
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, min(r.Remaining(), jsPublishWindow))
	wait := func() error {
		if len(futures) == 0 {
			return nil
		}
		timer := time.NewTimer(jsAckTimeout)
		defer timer.Stop()
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
				return fmt.Errorf("publish: no ack from stream %s within %s", s.cfg.Stream, jsAckTimeout)
			}
		}
		futures = futures[:0]
		return nil
	}
	var rec abi.Record
	for i := 0; ; i++ {
		ok, err := r.Next(&rec)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		m := &nats.Msg{Subject: s.subject(rec.Key), Data: rec.Value, Header: nats.Header{}}
		if s.cfg.KeyHeader != "" {
			m.Header[s.cfg.KeyHeader] = []string{string(rec.Key)}
		}
		if s.cfg.TimestampHeader != "" {
			m.Header[s.cfg.TimestampHeader] = []string{strconv.FormatInt(rec.Timestamp, 10)}
		}
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(s.cfg.Stream)}
		if id >= 0 {
			opts = append(opts, jetstream.WithMsgID(o.msgID(id, i)))
		}
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
		if len(futures) == jsPublishWindow {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

func (s *jsSink) Write(batch []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return fmt.Errorf("%s: write: %w", s.what, errNotOpen)
	}
	if s.err != nil {
		return s.err
	}
	if err := s.checkRecords(batch); err != nil {
		return fmt.Errorf("%s: write: %w", s.what, err)
	}
	if !s.txn {
		if err := s.publish(s.ctx, batch, -1); err != nil {
			return fmt.Errorf("%s: write: %w", s.what, err)
		}
		return nil
	}
	s.used = true
	if abi.Count(batch) == 0 {
		return nil
	}
	if size := int64(s.open.Size()) + int64(len(batch)-abi.BatchHeaderSize); size > s.cfg.MaxTransactionBytes {
		s.err = fmt.Errorf("%s: write: the open transaction would hold %d bytes, more than maxTransactionBytes (%d): checkpoint more often or raise the limit",
			s.what, size, s.cfg.MaxTransactionBytes)
		return s.err
	}
	s.open.AppendBatch(batch)
	return nil
}

// PreCommit ends the open transaction as checkpoint id's: its records are
// stored in the staging object store (durably, by JetStream's acks), a
// new transaction starts, and the returned state lists every staged
// transaction not yet committed, with the message id token:
//
//	{"version":1,"kind":"jetstream","subtask":0,"run":"9f2c…","checkpoint":3,
//	 "pending":[{"id":3,"object":"9f2c…/0/0000000003","records":812,"bytes":20480}]}
//
// The state is small whatever the transactions hold: the records are in
// the object store, not in the checkpoint.
func (s *jsSink) PreCommit(id int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.txn {
		return nil, s.notTransactional("precommit")
	}
	if !s.opened {
		return nil, fmt.Errorf("%s: precommit %d: %w", s.what, id, errNotOpen)
	}
	if s.err != nil {
		return nil, s.err
	}
	if id <= s.last {
		return nil, fmt.Errorf("%s: precommit %d: checkpoint ids must increase, and checkpoint %d was pre-committed or restored already", s.what, id, s.last)
	}
	s.used = true
	if n := s.open.Len(); n > 0 {
		data := append([]byte(nil), s.open.Bytes()...)
		name := s.objectName(id)
		// A server that syncs every write may refuse a burst with 429 on a
		// busy machine: the put is tried again before the sink fails.
		parent := s.ctx
		if parent == nil {
			parent = context.Background()
		}
		err := transient.Do(parent, transient.Default, func(ctx context.Context) error {
			ctx, cancel := apiContext(ctx)
			defer cancel()
			_, err := s.obs.PutBytes(ctx, name, data)
			return err
		})
		if err == nil && s.fault != nil {
			err = s.fault(id)
		}
		if err != nil {
			// The records are still in the open transaction; the object
			// may have been stored all the same (a lost reply).
			s.failed = id
			s.err = fmt.Errorf("%s: precommit %d: stage the transaction as %s: %w", s.what, id, name, err)
			return nil, s.err
		}
		s.pending = append(s.pending, jsTxn{ID: id, Object: name, Records: n, Bytes: int64(len(data)), data: data})
		s.open.Reset()
	}
	s.last = id
	st := jsSinkState{Version: jsSinkStateVersion, Kind: "jetstream", Subtask: s.subtask, Run: s.run, Checkpoint: id, Pending: s.pending}
	if st.Pending == nil {
		st.Pending = []jsTxn{}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s: precommit %d: encode the state: %w", s.what, id, err)
	}
	return b, nil
}

// AbortPreCommit takes back the failed PreCommit(id) (see
// PreCommitAborter): the records stay in the open transaction, and the
// object the pre-commit may have stored is deleted. Deleting it is tidiness
// only: no state lists it, so no commit publishes it, and Recover deletes
// every object of this subtask that its state does not list, so a failed
// delete (or a put that lands after it) is left for Recover.
func (s *jsSink) AbortPreCommit(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.txn {
		return s.notTransactional("abort precommit")
	}
	failed := s.failed
	s.failed = 0
	if !s.opened || s.err == nil {
		return fmt.Errorf("%s: abort precommit %d: no failed pre-commit to take back", s.what, id)
	}
	if failed != id {
		return fmt.Errorf("%s: abort precommit %d: the transaction's records are lost: %w", s.what, id, s.err)
	}
	ctx, cancel := apiContext(s.ctx)
	// A failed delete is left for Recover (see above).
	_ = s.obs.Delete(ctx, s.objectName(id))
	cancel()
	s.err = nil
	return nil
}

// Commit publishes every staged transaction with an id ≤ id, in order, and
// deletes its object once every message is acknowledged. A transaction
// stays pending until then, so a failed Commit can be retried and
// publishes the same message ids again.
func (s *jsSink) Commit(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.txn {
		return s.notTransactional("commit")
	}
	if !s.opened {
		return fmt.Errorf("%s: commit %d: %w", s.what, id, errNotOpen)
	}
	return s.commitLocked(s.ctx, id, "commit "+strconv.FormatInt(id, 10))
}

func (s *jsSink) commitLocked(ctx context.Context, id int64, op string) error {
	for len(s.pending) > 0 && s.pending[0].ID <= id {
		if err := s.commitOne(ctx, s.self(), &s.pending[0], op); err != nil {
			return err
		}
		s.pending = s.pending[1:]
	}
	if len(s.pending) == 0 {
		s.pending = nil
	}
	return nil
}

// commitOne publishes a staged transaction and deletes its object. Its
// records come from memory, or from the object after a restore; an object
// that is gone belongs to a transaction committed before (its object is
// deleted only after every message was acknowledged).
func (s *jsSink) commitOne(ctx context.Context, o txnOwner, t *jsTxn, op string) error {
	data := t.data
	if data == nil {
		actx, cancel := apiContext(ctx)
		b, err := s.obs.GetBytes(actx, t.Object)
		cancel()
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %s: transaction %d: read %s: %w", s.what, op, t.ID, t.Object, err)
		}
		if int64(len(b)) != t.Bytes || abi.Count(b) != t.Records {
			return fmt.Errorf("%s: %s: transaction %d: object %s holds %d bytes and %d records, the state says %d and %d",
				s.what, op, t.ID, t.Object, len(b), abi.Count(b), t.Bytes, t.Records)
		}
		data = b
	}
	if err := s.publishAs(ctx, o, data, t.ID); err != nil {
		return fmt.Errorf("%s: %s: transaction %d: %w", s.what, op, t.ID, err)
	}
	actx, cancel := apiContext(ctx)
	err := s.obs.Delete(actx, t.Object)
	cancel()
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%s: %s: transaction %d: delete %s: %w", s.what, op, t.ID, t.Object, err)
	}
	return nil
}

// Recover is called after Open and before any Write when the job restarts
// from checkpoint restoredID with the state PreCommit returned for it (nil
// without one). It adopts the state's message id token, publishes every
// transaction the state lists (checkpoint restoredID completed; messages
// its commit already published are dropped as duplicates by the stream)
// and deletes every other staged object of this subtask and token: those
// of transactions pre-committed after the checkpoint, which the replay
// writes again.
func (s *jsSink) Recover(state []byte, restoredID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	op := "recover " + strconv.FormatInt(restoredID, 10)
	if !s.txn {
		return s.notTransactional("recover")
	}
	if !s.opened {
		return fmt.Errorf("%s: %s: %w", s.what, op, errNotOpen)
	}
	if s.used {
		return fmt.Errorf("%s: %s: Recover must come after Open and before any Write or PreCommit", s.what, op)
	}
	if restoredID < 0 {
		return fmt.Errorf("%s: %s: checkpoint id must be ≥ 0", s.what, op)
	}
	if len(state) > 0 {
		st, err := s.decodeState(state, restoredID, op)
		if err != nil {
			return err
		}
		s.run = st.Run
		s.pending = st.Pending
		if err := s.commitLocked(s.ctx, restoredID, op); err != nil {
			return err
		}
		if err := s.deleteStaged(op); err != nil {
			return err
		}
	}
	s.last, s.pending = restoredID, nil
	return nil
}

// RecoverFrom implements TakesOver: after a restore from a savepoint (or a
// checkpoint restored at another parallelism), subtask s commits what the
// old subtasks it takes over had pre-committed: its own index, and the
// removed s' ≥ parallelism with s' mod parallelism = s (the rule the file
// sink follows). Their transactions are published under their own message
// ids, so a commit that already went out (by the job the savepoint came
// from, which may still run) is dropped as a duplicate. Nothing else of
// theirs is deleted: that job may still be staging under its token, which
// this one does not adopt.
func (s *jsSink) RecoverFrom(states [][]byte, restoredID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	op := "recover from " + strconv.FormatInt(restoredID, 10)
	if !s.txn {
		return s.notTransactional("recover")
	}
	if !s.opened {
		return fmt.Errorf("%s: %s: %w", s.what, op, errNotOpen)
	}
	if s.used {
		return fmt.Errorf("%s: %s: RecoverFrom must come after Open and before any Write or PreCommit", s.what, op)
	}
	for _, b := range states {
		st, err := s.decodeStateOf(b, restoredID, op, -1)
		if err != nil {
			return err
		}
		if st.Subtask != s.subtask && (st.Subtask < s.parallel || st.Subtask%s.parallel != s.subtask) {
			return fmt.Errorf("%s: %s: subtask %d of %d does not take over subtask %d", s.what, op, s.subtask, s.parallel, st.Subtask)
		}
		o := txnOwner{st.Run, st.Subtask}
		for i := range st.Pending {
			if err := s.commitOne(s.ctx, o, &st.Pending[i], op); err != nil {
				return err
			}
		}
	}
	s.last = max(s.last, restoredID)
	return nil
}

// deleteStaged deletes every staged object of this subtask and token.
func (s *jsSink) deleteStaged(op string) error { return s.deleteStagedOf(s.self(), op) }

// deleteStagedOf deletes every staged object of owner o.
func (s *jsSink) deleteStagedOf(o txnOwner, op string) error {
	parent := s.ctx
	if parent == nil {
		parent = context.Background()
	}
	objs, err := objlist.List(parent, s.obs, jsConnectTimeout, objlist.Policy)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %s: list staged transactions: %w", s.what, op, err)
	}
	ctx, cancel := apiContext(s.ctx)
	defer cancel()
	prefix := o.run + "/" + strconv.Itoa(o.subtask) + "/"
	for _, o := range objs {
		if !strings.HasPrefix(o.Name, prefix) {
			continue
		}
		if err := s.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("%s: %s: delete %s, staged after the checkpoint: %w", s.what, op, o.Name, err)
		}
	}
	return nil
}

// runToken matches both forms of RUN: a random token, or JOB/VERTEX (ids
// of letters, digits, '_' and '-').
var runToken = regexp.MustCompile(`^([0-9a-f]{16}|[A-Za-z0-9_-]{1,128}/[A-Za-z0-9_-]{1,128})$`)

// SetIdentity implements Identified: message ids then start with
// job/vertex. It must come before Open.
func (s *jsSink) SetIdentity(job, vertex string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened {
		return fmt.Errorf("%s: set identity: the sink is already open", s.what)
	}
	id := job + "/" + vertex
	if !runToken.MatchString(id) || strings.Count(id, "/") != 1 {
		return fmt.Errorf("%s: set identity: job %q and vertex %q must be ids of letters, digits, '_' and '-'", s.what, job, vertex)
	}
	s.identity = id
	return nil
}

func (s *jsSink) decodeState(state []byte, restoredID int64, op string) (*jsSinkState, error) {
	return s.decodeStateOf(state, restoredID, op, s.subtask)
}

// decodeStateOf checks the state of subtask want (any, when negative) taken
// at restoredID.
func (s *jsSink) decodeStateOf(state []byte, restoredID int64, op string, want int) (*jsSinkState, error) {
	var st jsSinkState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%s: %s: state %q is not a jetstream sink state: %v", s.what, op, truncate(state), err)
	}
	if st.Version != jsSinkStateVersion {
		return nil, fmt.Errorf("%s: %s: state version %d is not supported (this build reads version %d)", s.what, op, st.Version, jsSinkStateVersion)
	}
	if st.Kind != "jetstream" {
		return nil, fmt.Errorf("%s: %s: the state belongs to a %q sink, not a \"jetstream\" sink", s.what, op, st.Kind)
	}
	if st.Subtask < 0 || (want >= 0 && st.Subtask != want) {
		return nil, fmt.Errorf("%s: %s: the state belongs to subtask %d", s.what, op, st.Subtask)
	}
	if st.Checkpoint != restoredID {
		return nil, fmt.Errorf("%s: %s: the state was taken at checkpoint %d", s.what, op, st.Checkpoint)
	}
	if !runToken.MatchString(st.Run) {
		return nil, fmt.Errorf("%s: %s: the state's message id token %q is malformed", s.what, op, st.Run)
	}
	var prev int64
	for _, t := range st.Pending {
		if t.ID <= prev || t.ID > restoredID {
			return nil, fmt.Errorf("%s: %s: the state lists transaction %d out of order or after the checkpoint", s.what, op, t.ID)
		}
		if want := fmt.Sprintf("%s/%d/%010d", st.Run, st.Subtask, t.ID); t.Object != want {
			return nil, fmt.Errorf("%s: %s: the state names object %q for transaction %d, want %q", s.what, op, t.Object, t.ID, want)
		}
		prev = t.ID
	}
	return &st, nil
}

func (s *jsSink) notTransactional(op string) error {
	return fmt.Errorf("%s: %s: the sink is not transactional (BeginTransactions was not called before Open)", s.what, op)
}

// Close ends the sink when its input ended normally. In exactly-once mode
// the rest of the input is transaction last+1, published at once with its
// message ids after every staged transaction is committed. After a failed
// write it reports the failure and publishes nothing more.
func (s *jsSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return nil
	}
	s.opened = false
	defer s.nc.Close()
	if !s.txn {
		return nil
	}
	if s.err != nil {
		s.open.Reset()
		return s.err
	}
	if err := s.commitLocked(s.ctx, s.last, "close"); err != nil {
		return err
	}
	if s.open.Len() > 0 {
		id := s.last + 1
		if err := s.publish(s.ctx, s.open.Bytes(), id); err != nil {
			return fmt.Errorf("%s: close: transaction %d: %w", s.what, id, err)
		}
		s.open.Reset()
	}
	return nil
}

// Abort discards the open transaction and every staged one (the job
// failed and will not restart from them). Published messages stay.
func (s *jsSink) Abort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return nil
	}
	s.opened = false
	defer s.nc.Close()
	s.open.Reset()
	var errs []error
	if s.txn {
		ctx, cancel := context.WithTimeout(context.Background(), jsConnectTimeout)
		defer cancel()
		for _, t := range s.pending {
			if err := s.obs.Delete(ctx, t.Object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				errs = append(errs, fmt.Errorf("delete %s: %w", t.Object, err))
			}
		}
	}
	s.pending = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: abort: %w", s.what, err)
	}
	return nil
}

// Release lets go of the sink and leaves the staged transactions for
// Recover (the job will restart or be resumed). Without transactions it
// is Abort: what Write published is acknowledged already.
func (s *jsSink) Release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return nil
	}
	s.opened = false
	s.open.Reset()
	s.pending = nil
	s.nc.Close()
	return nil
}

// SetDialer gives the sink the cluster's own NATS server, which it uses when
// its configuration names no url.
func (s *jsSink) SetDialer(d Dialer) { s.dial = d }

// SetReplicas sets the replica count of the stream and staging store the
// sink creates on the cluster's own server.
func (s *jsSink) SetReplicas(n int) { s.replicas = n }

// createReplicas is the replica count of what the sink creates: the
// cluster's on its own server, the server's default (one) on another.
func (s *jsSink) createReplicas() int {
	if s.cfg.URL != "" {
		return 0
	}
	return s.replicas
}
