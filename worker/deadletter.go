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
	"github.com/wstream/wstream/subtask"
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
//  3. The batch is settled as the subtask's machine says
//     (subtask.Machine.Call; subtask/deadletter.go has the rules and
//     testdata/machine/dead-letters.txt the scenarios): processGuarded
//     runs the ranges it asks for (RunRange), tells it how each went
//     (RangeDone, or Trap with the guest's last commit point, the record
//     it said it was at, whether the instance broke and whether the
//     failure is a record's or may be the call's size), and carries out
//     Undo, RenewInstance and DeadLetter (settle).
//  4. Each single record (or timer) that fails goes to the dead-letter
//     sink as one JSON object, counted against the budget (by the
//     machine); one more than the budget fails the subtask.
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
	// max (-1: unlimited) and perCkpt configure the budget, which the
	// subtask's machine counts: dead letters since the subtask's last
	// checkpoint, or over the job's life (restored from checkpoints).
	max     int64
	perCkpt bool
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
		if err := t.ensureMachine(); err != nil {
			return err
		}
		t.machine.RestoreDeadLetters(count)
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
	if !d.perCkpt {
		// (A budget per checkpoint starts again with the snapshot: the
		// machine hears of it with the synchronous phase.)
		st.Count = t.machine.DeadLetterCount()
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

// runRange makes one guarded call of stage k on records [a.Lo, a.Hi) of
// in, a guest call whose failure the subtask survives, and tells the
// machine how it went (RangeDone, or Trap with what the guest said of its
// failure). On success its state changes stay; a guest failure is undone
// when the machine asks (Undo, RenewInstance). Its error is a fatal one.
func (t *task) runRange(k int, in *batchInput, a subtask.RunRange) error {
	s := t.stages[k]
	b := in.src
	if a.Lo != 0 || a.Hi != in.n {
		if err := in.load(); err != nil {
			return err
		}
		b = in.rangeBatch(a.Lo, a.Hi)
	}
	cp := &t.dlCommit
	*cp = commitPoints{mark: s.coll.b.Mark()}
	if a.CommitPoints {
		cp.every = commitEvery
	}
	if t.store != nil && k == 0 {
		cp.journal = t.store
		t.store.BeginUndo()
	}
	s.coll.cp = cp
	var err error
	if in.timers {
		err = s.op.OnTimers(b, &s.coll)
	} else {
		err = s.op.Process(b, &s.coll)
	}
	s.coll.cp = nil
	if cp.done > 0 && !t.dlCommits {
		t.dlCommits = true
		t.machine.MarksCommitPoints()
	}
	if err == nil {
		if cp.journal != nil {
			t.store.CommitUndo()
		}
		return t.machineErr(t.machine.RangeDone(k, a.Lo, a.Hi))
	}
	t.dlErrs = append(t.dlErrs, err)
	if !deadLettered(err) {
		if uerr := t.undo(k); uerr != nil {
			return uerr
		}
		return t.stageError(s, "failed", err)
	}
	f := subtask.Failure{Stage: k, Lo: a.Lo, Hi: a.Hi, Done: cp.done, At: -1, SizeBound: !recordBound(err), Err: err.Error()}
	if t.inst != nil {
		if at := t.inst.FailedAt(); at >= 0 {
			f.At = a.Lo + at
		}
		f.Trap = t.inst.Broken()
	}
	return t.machineErr(t.machine.Trap(f))
}

// machineErr names the subtask in an error of its machine (the driver's
// bug: it reported what the machine did not ask for).
func (t *task) machineErr(err error) error {
	if err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	return nil
}

// undo rolls the failed call of stage k back: its state changes to the
// call's start, or to the last commit point its guest marked, and what it
// emitted since.
func (t *task) undo(k int) error {
	cp := &t.dlCommit
	if cp.journal != nil {
		cp.journal = nil
		if err := t.store.RollbackUndo(); err != nil {
			return fmt.Errorf("subtask %s: rolling back the state of a failed call: %w (the call: %v)", t.label, err, t.dlErrs[len(t.dlErrs)-1])
		}
	}
	t.stages[k].coll.b.Truncate(cp.mark)
	return nil
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
	src    []byte // the batch
	n      int    // its records
	loaded bool
	recs   []abi.Record // its records, aliasing src (once loaded)
	offs   []int        // where record i starts in src; offs[len(recs)] is its end
	buf    []byte       // the batch of the range being run
}

// reset makes in the input of a call on batch, decoded when a range or a
// dead letter needs its records.
func (in *batchInput) reset(batch []byte, timers bool) {
	in.timers, in.src, in.n, in.loaded = timers, batch, abi.Count(batch), false
}

// load decodes the batch's records, once.
func (in *batchInput) load() error {
	if in.loaded {
		return nil
	}
	in.recs, in.offs = in.recs[:0], in.offs[:0]
	rd, err := abi.NewReader(in.src)
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
			in.loaded = true
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
// output down the chain. The machine (subtask.Machine.Call) says which
// ranges of it to run, whole or in pieces, and how to settle a failure;
// the worker runs them and writes the dead letters.
//
// A failed call costs the records it ran before the failure: once the
// failing record is known (the guest says where it was, or a search finds
// it), they run again, and the records after it run for the first time.
// That is half a call's worth of records per bad record, or half a piece
// while failures are frequent (wary).
func (t *task) processGuarded(ctx context.Context, k int, batch []byte, timers bool) error {
	in := &t.dlIn
	in.reset(batch, timers)
	defer func() { in.src = nil }()
	t.dlErrs = t.dlErrs[:0]
	if err := t.machineErr(t.machine.Call(k, in.n)); err != nil {
		return err
	}
	if err := t.settle(ctx, k, in); err != nil {
		return err
	}
	// The output of the ranges that succeeded goes down the chain only
	// now: a send blocked by backpressure may take a snapshot, which must
	// find the whole batch processed.
	return t.drain(ctx, k)
}

// settle carries out the machine's actions for the call of stage k on in
// until it asks for no more: the call is settled.
func (t *task) settle(ctx context.Context, k int, in *batchInput) error {
	for {
		actions := t.machine.Ready()
		if len(actions) == 0 {
			return nil
		}
		for _, a := range actions {
			var err error
			switch a := a.(type) {
			case subtask.RunRange:
				if a.Lo != 0 || a.Hi != in.n {
					// A part of the batch: the subtask may be stopping.
					err = ctx.Err()
				}
				if err == nil {
					err = t.runRange(k, in, a)
				}
			case subtask.Undo:
				err = t.undo(k)
			case subtask.RenewInstance:
				// (A chain without an instance is a test's fake guest.)
				if t.inst != nil {
					if err = t.recoverInstance(); err != nil {
						err = fmt.Errorf("subtask %s: replacing the instance after %v: %w", t.label, t.dlErrs[len(t.dlErrs)-1], err)
					}
				}
			case subtask.DeadLetter:
				err = t.deadLetter(k, in, a)
			default:
				// (Finish comes only after a DeadLetter past the budget,
				// which returned its error first.)
				err = fmt.Errorf("subtask %s: the worker cannot carry out %v while settling a call", t.label, a)
			}
			if err != nil {
				return err
			}
		}
	}
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

// deadLetter sends record a.Record of in, which failed at stage k, to the
// dead-letter sink, and fails the subtask past the budget.
func (t *task) deadLetter(k int, in *batchInput, a subtask.DeadLetter) error {
	if lerr := in.load(); lerr != nil {
		return lerr
	}
	d := t.dl
	s := t.stages[k]
	i, err := a.Record, t.dlErrs[a.Cause]
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
	d.sinceSnapshot++
	s.dead.Add(1)
	if a.Over {
		scope := "over the job's life"
		if d.perCkpt {
			scope = "since the subtask's last checkpoint"
		}
		return t.stageError(s, "exceeded its dead-letter budget",
			fmt.Errorf("%d dead letters %s, more than the budget of %d (--max-dead-letters; plan onGuestError.maxDeadLetters); the last: %w",
				t.machine.DeadLetterCount(), scope, d.max, err))
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
