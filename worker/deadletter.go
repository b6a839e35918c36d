package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/state"
)

// Dead-letter mode (plan field onGuestError, docs/dead-letters.md): a guest
// trap or fail while a stage processes a batch or fires timers does not fail
// the subtask. In order:
//
//  1. Every guest call of the stage runs inside an undo journal of the
//     subtask's keyed state (state.Store.BeginUndo), and its output is
//     collected apart from what the stage had collected before (a mark of
//     its collector), so nothing of a failed call has reached the next
//     stage or the keyed state once it is rolled back.
//  2. A failed call is rolled back: state and timers return to the start of
//     the call, its output is dropped, and an instance that a trap left
//     unusable is replaced by a new one in which every guest stage of the
//     chain is opened again (the guests' own memory is lost; keyed state
//     is not).
//  3. The batch is settled (settle). The records before the last commit
//     point the guest marked in the failed call (commit, asked for after a
//     recent failure) are done and stay so; the rest is settled. A guest
//     that says which record it was at when it failed (progress_at) has
//     that record taken out and the records before and after it run again
//     as two calls. Otherwise,
//     after a failure that left the instance usable (fail, a status), by
//     halves: a half that succeeds is kept, its output collected; a half
//     that fails is rolled back and split again, down to single records.
//     After a trap, which costs a new instance each time, record by
//     record, and the rest of the batch whole after each bad record. A
//     range known to fail whose other records all succeeded has its bad
//     record found without running it, for failures that are a property
//     of the record (traps, fail, a non-zero status); a failure that may
//     depend on the call's size (the deadline, a quota, the memory limit)
//     is run again each time.
//  4. Each single record (or timer) that fails goes to the dead-letter
//     sink as one JSON object, counted against the budget; one more than
//     the budget fails the subtask.
//  5. Once the whole batch is settled, the output of its good records goes
//     down the chain in their order, as a batch's output does (a send
//     blocked by backpressure may take a snapshot, which must find the
//     batch processed whole).
//
// The dead-letter sink is transactional when the job checkpoints: it is
// pre-committed in the subtask's snapshot and committed when the
// checkpoint completes, like the chain's own sink, so a restore replays the
// records after the checkpoint and each dead letter is committed once.

// deadLetters is the dead-letter output and budget of a subtask.
type deadLetters struct {
	sink connector.Sink
	txn  bool
	// key names the sink's state among the subtask's operator states.
	key       string
	connector string
	max       int64 // -1: unlimited
	perCkpt   bool
	// count is what the budget counts: dead letters since the subtask's
	// last checkpoint, or over the job's life (restored from checkpoints).
	count int64
	// sinceSnapshot counts the dead letters since the subtask's last
	// snapshot, for the checkpoint history (stage.dead counts them for
	// the metrics).
	sinceSnapshot int64
	// inSnapshot holds what each pending snapshot counted: an aborted or
	// subsumed checkpoint gives its count back to sinceSnapshot, so that
	// the next checkpoint reports it and the history misses none.
	inSnapshot map[int64]int64
	b          abi.Builder
}

// snapshotted moves the dead letters since the last snapshot to the
// snapshot of checkpoint id and returns their number.
func (d *deadLetters) snapshotted(id int64) int64 {
	n := d.sinceSnapshot
	d.sinceSnapshot = 0
	if n > 0 {
		if d.inSnapshot == nil {
			d.inSnapshot = map[int64]int64{}
		}
		d.inSnapshot[id] = n
	}
	return n
}

// settled notes that checkpoint id completed (completed) or was aborted:
// its count is reported, or given back; pending snapshots older than a
// completed one will never complete and give theirs back too.
func (d *deadLetters) settled(id int64, completed bool) {
	for k, n := range d.inSnapshot {
		if k == id && completed {
			delete(d.inSnapshot, k)
			continue
		}
		if k == id || (completed && k < id) {
			d.sinceSnapshot += n
			delete(d.inSnapshot, k)
		}
	}
}

// deadLetterState is the operator state of a dead-letter sink in a
// checkpoint: the sink's own state and the budget's count.
type deadLetterState struct {
	V     int    `json:"v"`
	Count int64  `json:"count"`
	Sink  []byte `json:"sink,omitempty"`
}

// deadLetterKey is the operator-state key of a chain's dead-letter sink.
func deadLetterKey(c *job.Chain) string { return c.Vertices[0].ID + "-dead-letters" }

// newDeadLetters makes the dead-letter sink of a subtask of chain c, or nil
// when the job fails on guest errors or the chain runs no guest.
func (w *Worker) newDeadLetters(j *jobRun, c *job.Chain) (*deadLetters, error) {
	g := j.plan.OnGuestError
	if !g.DeadLetters() {
		return nil, nil
	}
	guest := false
	for _, v := range c.Vertices {
		guest = guest || (v.Kind == job.KindOperator && !strings.HasPrefix(v.Operator, builtin.Prefix))
	}
	if !guest {
		return nil, nil
	}
	name, cfg := "file", json.RawMessage(nil)
	var path string
	if g.Sink != nil {
		name, cfg = g.Sink.Connector, g.Sink.Config
	} else {
		path = filepath.Join(w.cfg.DataDir, "jobs", j.id, "dead-letters")
	}
	if name == "file" && j.tenant == "" {
		// Each chain in a directory of its own: the file sink names its
		// parts after the subtask only. (A tenant's job may not write the
		// host's files: newSink refuses it before anything is created.)
		m := map[string]any{}
		if len(cfg) > 0 {
			if err := json.Unmarshal(cfg, &m); err != nil {
				return nil, fmt.Errorf("dead-letter sink: %w", err)
			}
		}
		if p, ok := m["path"].(string); ok && path == "" {
			path = p
		}
		m["path"] = filepath.Join(path, c.Vertices[0].ID)
		cfg, _ = json.Marshal(m)
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, fmt.Errorf("dead-letter sink: %w", err)
		}
	}
	snk, err := w.newSink(j, name, cfg)
	if err != nil {
		return nil, fmt.Errorf("dead-letter sink: %w", err)
	}
	d := &deadLetters{sink: snk, key: deadLetterKey(c), connector: name}
	d.max, d.perCkpt = g.Budget()
	if tx, ok := snk.(connector.Transactional); ok && j.ckpt != nil {
		if err := tx.BeginTransactions(); err != nil {
			return nil, fmt.Errorf("dead-letter sink: %w", err)
		}
		d.txn = true
	}
	return d, nil
}

// openDeadLetters opens the subtask's dead-letter sink and, after a
// restart or a restore, recovers its transactions and the budget's count.
func (t *task) openDeadLetters(ctx context.Context, j *jobRun) error {
	d := t.dl
	if d == nil {
		return nil
	}
	what := fmt.Sprintf("dead-letter sink %q of subtask %s", d.connector, t.label)
	if idf, ok := d.sink.(connector.Identified); ok {
		if err := idf.SetIdentity(j.id, d.key); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := d.sink.Open(ctx, t.subtask, t.chain.Parallelism); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !d.txn || (j.attempt == 0 && j.ckpt.restore == nil) {
		return nil
	}
	var id int64
	if j.ckpt.restore != nil {
		id = j.ckpt.restore.ID
	}
	own, taken := t.sinkStates(d.key)
	var st deadLetterState
	if own != nil {
		if err := json.Unmarshal(own, &st); err != nil {
			return fmt.Errorf("%s: its state in checkpoint %d: %w", what, id, err)
		}
	}
	if err := d.sink.(connector.Transactional).Recover(st.Sink, id); err != nil {
		return fmt.Errorf("%s: recovering: %w", what, err)
	}
	count := st.Count
	var sinks [][]byte
	for _, b := range taken {
		var ts deadLetterState
		if err := json.Unmarshal(b, &ts); err != nil {
			return fmt.Errorf("%s: a taken-over state in %d: %w", what, id, err)
		}
		count += ts.Count
		sinks = append(sinks, ts.Sink)
	}
	if to, ok := d.sink.(connector.TakesOver); ok && len(sinks) > 0 {
		if err := to.RecoverFrom(sinks, id); err != nil {
			return fmt.Errorf("%s: committing what %d pre-committed: %w", what, id, err)
		}
	}
	if !d.perCkpt {
		d.count = count
	}
	return nil
}

// preCommitDeadLetters ends the dead-letter transaction in the snapshot of
// checkpoint id and returns the state to store for it.
func (t *task) preCommitDeadLetters(id int64) ([]byte, error) {
	d := t.dl
	var st deadLetterState
	st.V = 1
	if d.txn && d.sink != nil {
		s, err := d.sink.(connector.Transactional).PreCommit(id)
		if err != nil {
			return nil, fmt.Errorf("subtask %s: checkpoint %d: dead-letter sink pre-commit: %w", t.label, id, err)
		}
		st.Sink = s
	}
	if d.perCkpt {
		d.count = 0
	} else {
		st.Count = d.count
	}
	return json.Marshal(st)
}

// endDeadLetters releases the dead-letter sink when the subtask stops
// without finishing: a transactional sink's files are what recovery
// commits or removes; another sink aborts when the job failed.
func (t *task) endDeadLetters(failed bool) {
	d := t.dl
	if d == nil || d.sink == nil {
		return
	}
	switch {
	case d.txn:
		releaseSink(d.sink)
	case failed:
		abortSink(d.sink)
	default:
		_ = d.sink.Close()
	}
	d.sink = nil
}

// closeDeadLetters closes the dead-letter sink of a finished subtask.
func (t *task) closeDeadLetters() error {
	d := t.dl
	if d == nil || d.sink == nil {
		return nil
	}
	err := d.sink.Close()
	d.sink = nil
	if err != nil {
		return fmt.Errorf("dead-letter sink of subtask %s: closing: %w", t.label, err)
	}
	return nil
}

// deadLettered reports whether err is a guest failure that dead-letter mode
// absorbs: a trap, fail, a non-zero status, the call deadline, a quota or
// the memory limit, not a cancellation nor a host-side failure.
func deadLettered(err error) bool {
	var ge *host.GuestError
	if !errors.As(err, &ge) {
		return false
	}
	return !errors.Is(err, host.ErrCanceled) && !errors.Is(err, host.ErrInstanceClosed) && !errors.Is(err, context.Canceled)
}

// recordBound reports whether a failure is a property of the records the
// call had rather than of its size: a trap, fail or a non-zero status,
// but not the deadline, a quota or the memory limit.
func recordBound(err error) bool {
	var q *host.QuotaError
	return !errors.Is(err, host.ErrDeadlineExceeded) && !errors.Is(err, host.ErrMemoryLimit) && !errors.As(err, &q)
}

// failure is a guest call's failure that dead-letter mode absorbs.
type failure struct {
	err error
	// renewed: the failure broke the instance (a trap), which was reset
	// or replaced.
	renewed bool
	// at is the index in the call's batch of the record the guest said it
	// was at (progress_at), -1 when it did not say.
	at int
	// done is how many records at the start of the call's batch the guest
	// marked done (commit): their work was kept.
	done int
}

// commitPoints is what a guarded call keeps of its work when it fails:
// the records before the last commit point its guest marked (the import
// commit), with their output (up to mark in the stage's collector) and
// their state changes (the undo journal restarts at each commit point).
type commitPoints struct {
	every   int // records between commit points the guest is asked for
	journal *state.Store
	mark    abi.Mark
	done    int
}

// commit keeps the work of the call's first n records.
func (p *commitPoints) commit(c *stageCollector, n int) {
	if p.journal != nil {
		p.journal.CommitUndo()
		p.journal.BeginUndo()
	}
	p.mark, p.done = c.b.Mark(), n
}

// commitEvery is the interval between commit points asked of a guest
// that marks them. A failure then runs again only the records since the
// last one, about commitEvery/2 rather than half the call; each commit
// point costs a Go guest three host calls (its cached state written back,
// its output emitted, commit), about a record's worth of the keyed count.
// Measured on a Go guest's keyed count, points every 64 records cost it
// 1-2.5%, every 128 under 1%, every 256 nothing measurable
// (BenchmarkCommitPoints in package host; BENCHMARKS.md, "Commit points").
const commitEvery = 128

// guarded runs one guest call of stage k whose failure the subtask
// survives: on success its state changes stay; on a guest failure they are
// rolled back to the call's start, or to the last commit point the guest
// marked, what it emitted since is dropped, and a broken instance is reset
// or replaced (recoverInstance).
// It returns the guest failure (nil on success), or a fatal error.
func (t *task) guarded(k int, call func() error) (*failure, error) {
	s := t.stages[k]
	cp := &t.dlCommit
	*cp = commitPoints{every: t.dlEvery, mark: s.coll.b.Mark()}
	if t.store != nil && k == 0 {
		cp.journal = t.store
		t.store.BeginUndo()
	}
	s.coll.cp = cp
	err := call()
	s.coll.cp = nil
	t.dlCommits = t.dlCommits || cp.done > 0
	if err == nil {
		if cp.journal != nil {
			t.store.CommitUndo()
		}
		return nil, nil
	}
	if cp.journal != nil {
		if rerr := t.store.RollbackUndo(); rerr != nil {
			return nil, fmt.Errorf("subtask %s: rolling back the state of a failed call: %w (the call: %v)", t.label, rerr, err)
		}
	}
	s.coll.b.Truncate(cp.mark)
	if !deadLettered(err) {
		return nil, t.stageError(s, "failed", err)
	}
	f := &failure{err: err, at: -1, done: cp.done}
	if t.inst != nil {
		f.at = t.inst.FailedAt()
		if t.inst.Broken() {
			if rerr := t.recoverInstance(); rerr != nil {
				return nil, fmt.Errorf("subtask %s: replacing the instance after %v: %w", t.label, err, rerr)
			}
			f.renewed = true
		}
	}
	return f, nil
}

// recoverInstance makes the subtask's broken instance usable again. A
// subtask that met one poison record is likely to meet more, and a Go
// guest's instance takes milliseconds to make (its runtime's
// initialisation, and on virtual machines where a page fault costs over
// 10 µs, the faults of its first touch of each page) and its operators to
// open again. So a dead-letter subtask saves its instance's state once its
// stages are open (host.Instance.Snapshot: a copy of its memory, kept for
// the subtask's life; Worker.open), and a trap puts it back into that state
// (host.Instance.Reset: a comparison of the memory with the copy). An
// instance that cannot be reset (its module cannot, or the failure was a
// deadline, a quota or an exit) is replaced, and a replacement is saved
// in turn.
func (t *task) recoverInstance() error {
	if t.inst.CanReset() && t.inst.Reset() == nil {
		t.resets++
		return nil
	}
	return t.renewInstance()
}

// renewInstance replaces the subtask's instance by a new one, opens every
// guest stage of the chain in it again, with the same spec and services,
// and saves its state for recoverInstance.
//
// When the new instance cannot be reset, the subtask keeps a spare
// instance, made on another goroutine while it goes on processing, which
// the next trap then does not wait for.
func (t *task) renewInstance() error {
	_ = t.inst.Close(context.Background())
	var in *host.Instance
	var err error
	if t.spare != nil {
		r := <-t.spare
		t.spare = nil
		in, err = r.inst, r.err
	}
	if in == nil {
		if in, err = t.newInstance(); err != nil {
			return err
		}
	}
	t.inst = in
	t.renewals++
	for _, s := range t.stages {
		if !s.guest {
			continue
		}
		op := in.OperatorWithStats(s.calls)
		if f, ok := s.op.(*FairOperator); ok {
			f.op = op
		} else {
			s.op = op
		}
		if err := s.op.Open(s.spec, s.svc); err != nil {
			return t.stageError(s, "failed to open again in a new instance", err)
		}
	}
	if in.Snapshot() != nil && t.spare == nil {
		t.makeSpare()
	}
	return nil
}

// spareResult is a spare instance, or why it could not be made.
type spareResult struct {
	inst *host.Instance
	err  error
}

// makeSpare starts making the next spare instance.
func (t *task) makeSpare() {
	c := make(chan spareResult, 1)
	t.spare = c
	if !t.spareCloser {
		t.spareCloser = true
		t.closers = append(t.closers, t.dropSpare)
	}
	mk := t.newInstance
	go func() {
		in, err := mk()
		c <- spareResult{in, err}
	}()
}

// dropSpare closes the spare instance, once it is made.
func (t *task) dropSpare() error {
	if t.spare == nil {
		return nil
	}
	r := <-t.spare
	t.spare = nil
	if r.inst != nil {
		return r.inst.Close(context.Background())
	}
	return nil
}

// batchInput is what a guarded stage call is fed: records to process, or
// timers of one domain to fire. A subtask keeps one for its dead-letter
// calls, so that the wary batches do not allocate.
type batchInput struct {
	timers bool
	src    []byte       // the batch
	recs   []abi.Record // its records, aliasing src
	offs   []int        // where record i starts in src; offs[len(recs)] is its end
	buf    []byte       // the batch of the range being run
}

// load decodes batch into in.
func (in *batchInput) load(batch []byte, timers bool) error {
	in.timers, in.src, in.recs, in.offs = timers, batch, in.recs[:0], in.offs[:0]
	rd, err := abi.NewReader(batch)
	if err != nil {
		return err
	}
	for {
		in.offs = append(in.offs, rd.Offset())
		var r abi.Record
		ok, err := rd.Next(&r)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		in.recs = append(in.recs, r)
	}
}

// rangeBatch returns records lo to hi as a batch: a header and one copy of
// their bytes, which lie together in the batch. It is valid until the next
// call.
func (in *batchInput) rangeBatch(lo, hi int) []byte {
	in.buf = binary.LittleEndian.AppendUint32(in.buf[:0], uint32(hi-lo))
	in.buf = append(in.buf, in.src[in.offs[lo]:in.offs[hi]]...)
	return in.buf
}

// processGuarded feeds batch to stage k in dead-letter mode and sends its
// output down the chain.
//
// A failed call costs the records it ran before the failure: once the
// failing record is known (the guest says where it was, or a search finds
// it), they run again, and the records after it run for the first time.
// That is half a call's worth of records per bad record. While failures
// are frequent (wary), the subtask feeds the guest its batches in pieces
// of waryPiece records, and a bad record then costs half a piece; but each
// piece is a guest call of its own.
func (t *task) processGuarded(ctx context.Context, k int, batch []byte, timers bool) error {
	s := t.stages[k]
	call := func(b []byte) func() error {
		if timers {
			return func() error { return s.op.OnTimers(b, &s.coll) }
		}
		return func() error { return s.op.Process(b, &s.coll) }
	}
	wary := t.wary()
	t.dlEvery = 0
	if t.failedLately() {
		t.dlEvery = commitEvery
	}
	t.dlBatches++
	var f *failure
	if !wary || abi.Count(batch) <= waryPiece {
		var fatal error
		f, fatal = t.guarded(k, call(batch))
		if fatal != nil {
			return fatal
		}
		if f == nil {
			return t.drain(ctx, k)
		}
	}
	in := &t.dlIn
	defer func() { in.src = nil }()
	if err := in.load(batch, timers); err != nil {
		return err
	}
	if f != nil {
		if _, err := t.settle(ctx, k, in, call, 0, len(in.recs), f); err != nil {
			return err
		}
		t.failedBatch()
	} else {
		clean := true
		for lo := 0; lo < len(in.recs); lo += waryPiece {
			ok, err := t.settle(ctx, k, in, call, lo, min(lo+waryPiece, len(in.recs)), nil)
			if err != nil {
				return err
			}
			clean = clean && ok
		}
		if !clean {
			t.failedBatch()
		}
	}
	// The output of the ranges that succeeded goes down the chain only
	// now: a send blocked by backpressure may take a snapshot, which must
	// find the whole batch processed.
	return t.drain(ctx, k)
}

// failedBatch notes that the current batch (number dlBatches) had a
// failure.
func (t *task) failedBatch() {
	t.dlFails[t.dlNext] = t.dlBatches
	t.dlNext = (t.dlNext + 1) % waryFails
	t.dlNFails = min(t.dlNFails+1, waryFails)
}

// wary reports whether the next batch goes to the guest in pieces: when
// waryFails of the last waryWindow batches failed, and the guest does not
// mark commit points, which bound what a failure costs at less than
// pieces do.
func (t *task) wary() bool {
	return !t.dlCommits && t.dlNFails == waryFails && t.dlBatches+1-t.dlFails[t.dlNext] <= waryWindow
}

// failedLately reports whether one of the last waryWindow batches failed:
// then the next one asks the guest for commit points. A subtask without
// failures does not pay for them (BenchmarkCommitPoints in package host:
// under 1% of a Go guest's keyed count at 128 records).
func (t *task) failedLately() bool {
	if t.dlNFails == 0 {
		return false
	}
	last := t.dlFails[(t.dlNext+waryFails-1)%waryFails]
	return t.dlBatches+1-last <= waryWindow
}

// Whether pieces pay: they cost about (n/p - 1) more calls per batch of
// n records in pieces of p, and save about (n - p)/2 records per failed
// batch, so they pay when more than 2c/(p·r) of the batches fail, whatever
// n, for a call that costs c more than its records at r each. With a Go
// guest (c about as much as 6 records) and p = 128 that is about one batch
// in 10, the rate at which BenchmarkPoisonRecords found pieces neither
// gaining nor losing (BENCHMARKS.md). Poison records often come in runs (a
// bad producer, a bad day of data), and then nearly every batch fails.
// Counting 8 failures rather than fewer tells the rates apart better: at
// one failed batch in 15 the subtask is wary about a sixth of the time, at
// one in 4 always. (It used to turn wary for 64 batches after two failures
// within 8 batches, which thin failures often are.)
const (
	waryFails  = 8
	waryWindow = 80
	waryPiece  = 128
)

// settle processes in.recs[lo:hi] at stage k; bad, when not nil, is the
// failure the range is known to have. It reports whether the range ran
// without a failure.
//
// A guest that reports the record it was at (progress_at, as the Go SDK
// does) has that record dead-lettered and the records before and after it
// run as two calls. Otherwise, failures that leave the instance usable
// (fail, a status) are found by halving, in about 2·log2(n) calls, and
// failures that cost a new instance (a trap) by running the records one by
// one: a new instance costs milliseconds (a Go guest runs its runtime's
// initialisation) where a call of one record costs microseconds, and one
// by one needs one more instance per bad record where halving needs about
// log2(n)/2.
func (t *task) settle(ctx context.Context, k int, in *batchInput, call func([]byte) func() error, lo, hi int, bad *failure) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if bad == nil {
		f, fatal := t.runRange(k, in, call, lo, hi)
		if fatal != nil {
			return false, fatal
		}
		if f == nil {
			return true, nil
		}
		bad = f
	}
	if bad.done > 0 {
		// The records before the guest's last commit point are done (the
		// host keeps done below the call's count): the failure is in the
		// rest.
		lo += bad.done
		if bad.at -= bad.done; bad.at < 0 {
			bad.at = -1 // a guest that failed at a record it said was done
		}
		bad.done = 0
	}
	if hi-lo == 1 {
		return false, t.deadLetter(k, in, lo, bad.err)
	}
	if bad.at >= 0 && bad.at < hi-lo && recordBound(bad.err) {
		p := lo + bad.at
		if p > lo {
			if _, err := t.settle(ctx, k, in, call, lo, p, nil); err != nil {
				return false, err
			}
		}
		if err := t.deadLetter(k, in, p, bad.err); err != nil {
			return false, err
		}
		if p+1 < hi {
			_, err := t.settle(ctx, k, in, call, p+1, hi, nil)
			return false, err
		}
		return false, nil
	}
	if bad.renewed {
		for i := lo; i < hi; i++ {
			if i == hi-1 && recordBound(bad.err) {
				// Every record before it ran: the last is the one.
				return false, t.deadLetter(k, in, i, bad.err)
			}
			f, fatal := t.runRange(k, in, call, i, i+1)
			if fatal != nil {
				return false, fatal
			}
			if f == nil {
				continue
			}
			if err := t.deadLetter(k, in, i, f.err); err != nil {
				return false, err
			}
			if i+1 == hi {
				return false, nil
			}
			// The rest may well be good: try it whole.
			_, err := t.settle(ctx, k, in, call, i+1, hi, nil)
			return false, err
		}
		return false, nil
	}
	mid := lo + (hi-lo)/2
	clean, err := t.settle(ctx, k, in, call, lo, mid, nil)
	if err != nil {
		return false, err
	}
	var right *failure
	if clean && recordBound(bad.err) {
		right = &failure{err: bad.err, at: -1}
	}
	_, err = t.settle(ctx, k, in, call, mid, hi, right)
	return false, err
}

// runRange makes one guarded call of stage k on in.recs[lo:hi].
func (t *task) runRange(k int, in *batchInput, call func([]byte) func() error, lo, hi int) (*failure, error) {
	return t.guarded(k, call(in.rangeBatch(lo, hi)))
}

// deadLetter is the JSON object written for a failed record or timer.
type deadLetter struct {
	Error     string `json:"error"`
	Job       string `json:"job"`
	Vertex    string `json:"vertex"`
	Operator  string `json:"operator"`
	Subtask   int    `json:"subtask"`
	Attempt   int    `json:"attempt"`
	Call      string `json:"call"` // process or timer
	Key       []byte `json:"key"`
	KeyText   string `json:"keyText,omitempty"`
	EventTime int64  `json:"eventTime"`
	// Timer: the time domain (event or processing) of a failed timer,
	// whose Value is its namespace.
	Timer     string          `json:"timer,omitempty"`
	Input     json.RawMessage `json:"input"`
	Value     []byte          `json:"value"`
	ValueText string          `json:"valueText,omitempty"`
}

// deadLetter sends record i of in, which failed at stage k with err, to
// the dead-letter sink, and fails the subtask past the budget.
func (t *task) deadLetter(k int, in *batchInput, i int, err error) error {
	d := t.dl
	s := t.stages[k]
	r := &in.recs[i]
	dl := deadLetter{Error: err.Error(), Job: t.jobID, Vertex: s.vertex.ID, Operator: s.vertex.Operator,
		Subtask: t.subtask, Attempt: t.attempt, Call: "process", Key: r.Key, EventTime: r.Timestamp,
		Input: t.inputPosition(k, i, len(in.recs)), Value: r.Value}
	if in.timers {
		dl.Call = "timer"
		dl.Timer = "event"
		if int32(r.Port) == abi.TimeProcessing {
			dl.Timer = "processing"
		}
	}
	if utf8.Valid(r.Key) {
		dl.KeyText = string(r.Key)
	}
	if utf8.Valid(r.Value) {
		dl.ValueText = string(r.Value)
	}
	line, jerr := json.Marshal(&dl)
	if jerr != nil {
		return fmt.Errorf("subtask %s: encoding a dead letter: %w", t.label, jerr)
	}
	d.b.Reset()
	d.b.Add(0, r.Timestamp, nil, line)
	if werr := d.sink.Write(d.b.Bytes()); werr != nil {
		return fmt.Errorf("dead-letter sink %q of subtask %s: %w", d.connector, t.label, werr)
	}
	d.count++
	d.sinceSnapshot++
	s.dead.Add(1)
	if d.max >= 0 && d.count > d.max {
		scope := "over the job's life"
		if d.perCkpt {
			scope = "since the subtask's last checkpoint"
		}
		return t.stageError(s, "exceeded its dead-letter budget",
			fmt.Errorf("%d dead letters %s, more than the budget of %d (--max-dead-letters; plan onGuestError.maxDeadLetters); the last: %w",
				d.count, scope, d.max, err))
	}
	return nil
}

// inputPosition says where the record at index i of a batch of n that
// stage k failed on came from: the chain's input (the source's position
// after the batch it read, or the input channel) and the index.
func (t *task) inputPosition(k, i, n int) json.RawMessage {
	pos := map[string]any{"index": i, "batchRecords": n}
	if k > 0 {
		pos["from"] = t.stages[k-1].vertex.ID
	}
	switch {
	case t.source != nil && k == 0:
		if r, ok := t.source.(connector.Rewindable); ok {
			if off, err := r.Offset(); err == nil && json.Valid(off) {
				pos["sourceOffsetAfterBatch"] = json.RawMessage(off)
			}
		}
	case t.curChan >= 0 && t.curChan < len(t.inputs) && k == 0:
		ref := t.inputs[t.curChan]
		e := t.chain.Inputs[0]
		for _, in := range t.chain.Inputs {
			if in.Index == ref.edge {
				e = in
			}
		}
		pos["channel"] = map[string]any{"from": e.FromVertex, "subtask": ref.peer, "message": t.chanBatches[t.curChan]}
	}
	b, _ := json.Marshal(pos)
	return b
}
