package connector

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/wstream/wstream/internal/durable"
)

// Transactional is implemented by sinks that take part in checkpoints with
// two-phase commit: output written between two checkpoints is one
// transaction, pre-committed (made durable but invisible) in the
// checkpoint's snapshot and committed (made visible) once the checkpoint has
// completed, so that after a restore from any completed checkpoint every
// record is visible exactly once.
type Transactional interface {
	// BeginTransactions is called before Open when the job checkpoints:
	// output then stays pending until committed.
	BeginTransactions() error
	// PreCommit ends the open transaction as part of checkpoint id's
	// snapshot: its data is flushed and fsynced to a pending file, a new
	// transaction starts for later records, and the returned state (stored
	// in the checkpoint) lists the pending transactions not yet committed
	// (ids and file names).
	PreCommit(id int64) ([]byte, error)
	// Commit makes every pending transaction with id ≤ the given one
	// visible, atomically per transaction (rename), idempotently (a
	// transaction already committed is fine): called when checkpoint id
	// completed.
	Commit(id int64) error
	// Recover is called after Open and before any Write when the job
	// restarts from a checkpoint, with the state that PreCommit returned for
	// it (nil when restarting without one): it commits the transactions
	// listed and deletes every pending file and every committed part
	// belonging to this subtask with a transaction id greater than the
	// restored checkpoint, so the replay writes it again exactly once.
	Recover(state []byte, restoredID int64) error
	// Abort discards the open and pending transactions' files (the job
	// failed and will not restart here).
	Abort() error
}

// PreCommitAborter is implemented by transactional sinks that can take
// back a PreCommit that failed, so that the checkpoint is declined instead
// of the subtask failing (DESIGN.md "Checkpoint path" step 6: a failed
// synchronous phase declines).
type PreCommitAborter interface {
	// AbortPreCommit is called at once after PreCommit(id) failed. It
	// removes whatever that pre-commit left under id (a pending file, a
	// staged object), so that no later commit and no restore ever makes it
	// visible, and keeps the records it was to end in the open transaction:
	// the next PreCommit ends them with the records written since, so a
	// later checkpoint commits them exactly once (or a restore to an older
	// one replays them). An error means the records could not be kept (a
	// failed flush or fsync leaves a file whose contents nobody can vouch
	// for): the subtask must fail, and a restore replays them. The sink
	// takes writes and pre-commits again only after it returned nil.
	AbortPreCommit(id int64) error
}

// TakesOver is implemented by transactional sinks whose pending
// transactions live where a subtask finds only its own by itself (a
// JetStream object store). After a restore from a savepoint, or from a
// checkpoint at another parallelism, the worker hands subtask s, after
// Recover and before any Write, the sink states of the old subtasks it takes
// over: its own index, and the removed s' ≥ parallelism with
// s' mod parallelism = s. It commits what they pre-committed at or before
// the restored id. (The file sink finds those files in its directory, by
// their names.)
type TakesOver interface {
	RecoverFrom(states [][]byte, restoredID int64) error
}

var (
	_ Transactional    = (*fileSink)(nil)
	_ PreCommitAborter = (*fileSink)(nil)
)

// File names inside the directory of a transactional file sink. Ids are
// zero-padded to 10 digits so that a subtask's parts sort by id.
func txnPartName(subtask int, id int64) string { return fmt.Sprintf("part-%d-%010d", subtask, id) }
func txnPendingName(subtask int, id int64) string {
	return fmt.Sprintf(".pending-%d-%010d", subtask, id)
}
func txnOpenName(subtask int) string { return ".open-" + strconv.Itoa(subtask) }

// Kinds of the files of a transactional file sink.
const (
	txnPart = iota
	txnPending
	txnOpen
)

// parseTxnName parses the name of a file of a transactional file sink: the
// subtask that wrote it, its kind and (for parts and pending files) the
// transaction id.
func parseTxnName(name string) (subtask, kind int, id int64, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(name, "part-"):
		kind, rest = txnPart, strings.TrimPrefix(name, "part-")
	case strings.HasPrefix(name, ".pending-"):
		kind, rest = txnPending, strings.TrimPrefix(name, ".pending-")
	case strings.HasPrefix(name, ".open-"):
		sub, ok := parseUint63(strings.TrimPrefix(name, ".open-"))
		return int(sub), txnOpen, 0, ok && sub <= 1<<30
	default:
		return 0, 0, 0, false
	}
	subStr, idStr, found := strings.Cut(rest, "-")
	if !found || len(idStr) != 10 {
		return 0, 0, 0, false
	}
	sub, ok1 := parseUint63(subStr)
	id, ok2 := parseUint63(idStr)
	if !ok1 || !ok2 || sub > 1<<30 {
		return 0, 0, 0, false
	}
	return int(sub), kind, id, true
}

// owns reports whether this subtask recovers the files of subtask sub: its
// own, and those of subtasks that a restore at a lower parallelism removed
// (sub ≥ parallelism), shared out by sub modulo the parallelism.
func (t *fileTxns) owns(sub int) bool {
	if sub == t.subtask {
		return true
	}
	return t.parallel > 0 && sub >= t.parallel && sub%t.parallel == t.subtask
}

// txnID parses the transaction id of name when name is prefix followed by
// decimal digits.
func txnID(name, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	return parseUint63(rest)
}

func parseUint63(s string) (int64, bool) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	return parseInt64([]byte(s))
}

// txnStateVersion is the version of the state PreCommit returns; Recover
// refuses any other.
const txnStateVersion = 1

// txnSinkState is the file sink's checkpointed state: the transactions that
// were pre-committed up to checkpoint Checkpoint and not yet committed.
type txnSinkState struct {
	Version    int        `json:"version"`
	Kind       string     `json:"kind"` // "file"
	Subtask    int        `json:"subtask"`
	Checkpoint int64      `json:"checkpoint"`
	Pending    []txnEntry `json:"pending"`
}

// txnEntry is one pre-committed transaction: its id (the checkpoint that
// pre-committed it) and its pending file, relative to the sink's directory.
type txnEntry struct {
	ID   int64  `json:"id"`
	File string `json:"file"`
}

// fsOps are the file system operations whose order makes the sink's output
// durable; tests substitute them to check that order and to inject faults.
type fsOps struct {
	rename   func(oldpath, newpath string) error
	remove   func(name string) error
	syncFile func(f *os.File) error
	syncDir  func(dir string) error
}

var osFS = fsOps{rename: os.Rename, remove: os.Remove, syncFile: (*os.File).Sync, syncDir: durable.SyncDir}

// fileTxns is the transactional mode of the file sink. The sink's path is a
// directory that every subtask writes into:
//
//	part-<subtask>-<id %010d>      committed transaction id (visible output)
//	.pending-<subtask>-<id %010d>  pre-committed at checkpoint id, not yet committed
//	.open-<subtask>                the open transaction, created at its first record
//
// A transaction takes the id of the checkpoint that pre-commits it. Its file
// is fsynced before it is renamed to pending, renames are atomic, and the
// directory is fsynced after every rename or removal, before the call
// returns. All methods are safe for concurrent use: Commit may arrive from
// the checkpoint notification while Write runs.
type fileTxns struct {
	mu       sync.Mutex
	fs       fsOps
	dir      string
	what     string // error prefix: "connector file: sink DIR (subtask S)"
	subtask  int
	parallel int  // the job's sink parallelism, for the files of removed subtasks
	opened   bool // between Open and Close or Abort
	used     bool // Write or PreCommit since Open: Recover is too late
	f        *os.File
	w        *bufio.Writer
	last     int64      // latest checkpoint pre-committed or restored
	pending  []txnEntry // pre-committed, not committed, by ascending id
	err      error      // the first write or pre-commit failure
	openPath string
	// kept is the failed pre-commit whose file is whole (synced, at the
	// open path or already renamed to pending): AbortPreCommit takes it
	// back. Nil when the failure lost the transaction's records.
	kept *keptTxn
	// fault, set by tests (SetPreCommitFault), fails a pre-commit once its
	// file is pending and the directory synced: a lost reply.
	fault func(id int64) error
}

// keptTxn is the file of a transaction whose pre-commit failed: at path,
// the open path or its pending name.
type keptTxn struct {
	id   int64
	path string
}

// BeginTransactions switches the sink to transactional mode; it must come
// before Open. Calling it again is harmless.
func (s *fileSink) BeginTransactions() error {
	if s.f != nil {
		return fmt.Errorf("connector file: sink %s: begin transactions: the sink is already open non-transactionally; call BeginTransactions before Open", s.target)
	}
	if s.txn == nil {
		s.txn = &fileTxns{fs: osFS, dir: s.cfg.Path}
	}
	return nil
}

// PreCommit ends the open transaction as checkpoint id's; see Transactional.
func (s *fileSink) PreCommit(id int64) ([]byte, error) {
	if s.txn == nil {
		return nil, s.notTransactional("precommit")
	}
	return s.txn.preCommit(id)
}

// AbortPreCommit takes back the failed PreCommit(id); see PreCommitAborter.
func (s *fileSink) AbortPreCommit(id int64) error {
	if s.txn == nil {
		return s.notTransactional("abort precommit")
	}
	return s.txn.abortPreCommit(id)
}

// Commit makes the pending transactions up to id visible; see
// Transactional.
func (s *fileSink) Commit(id int64) error {
	if s.txn == nil {
		return s.notTransactional("commit")
	}
	return s.txn.commit(id)
}

// Recover restores the directory to checkpoint restoredID; see
// Transactional.
func (s *fileSink) Recover(state []byte, restoredID int64) error {
	if s.txn == nil {
		return s.notTransactional("recover")
	}
	return s.txn.recover(state, restoredID)
}

func (s *fileSink) notTransactional(op string) error {
	return fmt.Errorf("connector file: sink %s: %s: the sink is not transactional (BeginTransactions was not called before Open)", s.cfg.Path, op)
}

func (t *fileTxns) open(subtask, parallelism int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.opened {
		return fmt.Errorf("%s: open: already open", t.what)
	}
	t.subtask, t.parallel = subtask, parallelism
	t.what = fmt.Sprintf("connector file: sink %s (subtask %d)", t.dir, subtask)
	t.openPath = filepath.Join(t.dir, txnOpenName(subtask))
	st, err := os.Stat(t.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(t.dir, 0o755); err != nil {
			return fmt.Errorf("%s: open: create the output directory: %w", t.what, err)
		}
		if err := t.fs.syncDir(filepath.Dir(filepath.Clean(t.dir))); err != nil {
			return fmt.Errorf("%s: open: sync the parent of the output directory: %w", t.what, err)
		}
	case err != nil:
		return fmt.Errorf("%s: open: %w", t.what, err)
	case !st.IsDir():
		return fmt.Errorf("%s: open: %s is not a directory: a transactional file sink writes part files into a directory", t.what, t.dir)
	}
	t.opened, t.used, t.err = true, false, nil
	t.pending, t.last = nil, 0
	return nil
}

func (t *fileTxns) write(s *fileSink, batch []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.opened {
		return fmt.Errorf("connector file: sink %s: write: %w", t.dir, errNotOpen)
	}
	if t.err != nil {
		return t.err
	}
	buf, err := s.format(batch)
	if err != nil {
		return fmt.Errorf("%s: write: %w", t.what, err)
	}
	t.used = true
	if len(buf) == 0 {
		return nil
	}
	if t.f == nil {
		f, err := os.OpenFile(t.openPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.err = fmt.Errorf("%s: write: start a transaction: %w", t.what, err)
			return t.err
		}
		t.f = f
		if t.w == nil {
			t.w = bufio.NewWriterSize(f, fileBufferSize)
		} else {
			t.w.Reset(f)
		}
	}
	if _, err := t.w.Write(buf); err != nil {
		t.err = fmt.Errorf("%s: write %s: %w", t.what, t.openPath, err)
		return t.err
	}
	return nil
}

func (t *fileTxns) preCommit(id int64) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.opened {
		return nil, fmt.Errorf("connector file: sink %s: precommit %d: %w", t.dir, id, errNotOpen)
	}
	if err := t.preCommitLocked(id); err != nil {
		return nil, err
	}
	return t.stateLocked(id)
}

func (t *fileTxns) preCommitLocked(id int64) error {
	if t.err != nil {
		return t.err
	}
	if id <= t.last {
		return fmt.Errorf("%s: precommit %d: checkpoint ids must increase, and checkpoint %d was pre-committed or restored already", t.what, id, t.last)
	}
	t.used = true
	if t.f != nil {
		pending := txnPendingName(t.subtask, id)
		at, err := t.finishOpenLocked(filepath.Join(t.dir, pending))
		if err == nil && t.fault != nil {
			err = t.fault(id)
		}
		if err != nil {
			if at != "" {
				t.kept = &keptTxn{id: id, path: at}
			}
			t.err = fmt.Errorf("%s: precommit %d: %w", t.what, id, err)
			return t.err
		}
		t.pending = append(t.pending, txnEntry{ID: id, File: pending})
	}
	t.last = id
	return nil
}

// abortPreCommit takes back the failed pre-commit of id: its file goes
// back to the open path (durably: a pending file of this subtask with an
// id at or below a restored checkpoint would be committed by Recover),
// and the open transaction continues in it.
func (t *fileTxns) abortPreCommit(id int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.kept
	t.kept = nil
	if !t.opened || t.err == nil {
		return fmt.Errorf("%s: abort precommit %d: no failed pre-commit to take back", t.what, id)
	}
	if k == nil || k.id != id || t.f != nil {
		return fmt.Errorf("%s: abort precommit %d: the transaction's records are lost: %w", t.what, id, t.err)
	}
	if k.path != t.openPath {
		if err := t.fs.rename(k.path, t.openPath); err != nil {
			return fmt.Errorf("%s: abort precommit %d: take back %s: %w", t.what, id, filepath.Base(k.path), err)
		}
		if err := t.fs.syncDir(t.dir); err != nil {
			return fmt.Errorf("%s: abort precommit %d: sync directory %s: %w", t.what, id, t.dir, err)
		}
	}
	f, err := os.OpenFile(t.openPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("%s: abort precommit %d: reopen the open transaction: %w", t.what, id, err)
	}
	t.f = f
	if t.w == nil {
		t.w = bufio.NewWriterSize(f, fileBufferSize)
	} else {
		t.w.Reset(f)
	}
	t.err = nil
	return nil
}

// finishOpenLocked flushes, fsyncs and closes the open transaction's file
// and renames it to dst, then fsyncs the directory. The file is gone from
// the sink whether or not this succeeds. When it fails, at is where the
// file lies whole (synced: the rename or the directory's sync failed), or
// "" when its contents are in doubt, and then it is removed: the
// transaction's records are replayed from the previous checkpoint, and a
// partial file must not stay behind.
func (t *fileTxns) finishOpenLocked(dst string) (at string, err error) {
	f := t.f
	t.f = nil
	err = t.w.Flush()
	if err != nil {
		err = fmt.Errorf("flush %s: %w", f.Name(), err)
	} else if serr := t.fs.syncFile(f); serr != nil {
		// After a failed fsync the kernel may have dropped the dirty
		// pages: what the file holds is unknown.
		err = fmt.Errorf("sync %s: %w", f.Name(), serr)
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close %s: %w", f.Name(), cerr)
	}
	if err != nil {
		if rerr := t.fs.remove(f.Name()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return "", err
	}
	if err := t.fs.rename(f.Name(), dst); err != nil {
		return f.Name(), err
	}
	if err := t.fs.syncDir(t.dir); err != nil {
		return dst, fmt.Errorf("sync directory %s: %w", t.dir, err)
	}
	return dst, nil
}

func (t *fileTxns) stateLocked(id int64) ([]byte, error) {
	st := txnSinkState{Version: txnStateVersion, Kind: "file", Subtask: t.subtask, Checkpoint: id, Pending: t.pending}
	if st.Pending == nil {
		st.Pending = []txnEntry{}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s: precommit %d: encode the state: %w", t.what, id, err)
	}
	return b, nil
}

func (t *fileTxns) commit(id int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.commitLocked(id)
}

// commitLocked renames every pending transaction with an id ≤ id to its
// part file and then fsyncs the directory. A transaction stays in the
// pending list until the directory is synced, so a failed Commit can be
// retried.
func (t *fileTxns) commitLocked(id int64) error {
	n := 0
	for n < len(t.pending) && t.pending[n].ID <= id {
		if err := t.commitOne(t.pending[n], "commit "+strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return nil
	}
	if err := t.fs.syncDir(t.dir); err != nil {
		return fmt.Errorf("%s: commit %d: sync directory %s: %w", t.what, id, t.dir, err)
	}
	t.pending = slices.Delete(t.pending, 0, n)
	return nil
}

// commitOne renames a pending file to its part. A transaction whose part
// exists and whose pending file does not was committed before: that is
// fine. One with neither has lost its output, which is an error.
func (t *fileTxns) commitOne(e txnEntry, op string) error { return t.commitFile(t.subtask, e, op) }

// commitFile is commitOne for a transaction of subtask sub (this one, or
// one that rescaling removed).
func (t *fileTxns) commitFile(sub int, e txnEntry, op string) error {
	part := filepath.Join(t.dir, txnPartName(sub, e.ID))
	err := t.fs.rename(filepath.Join(t.dir, e.File), part)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(part); serr == nil {
			return nil
		}
		return fmt.Errorf("%s: %s: transaction %d has neither its pending file %s nor its part %s: its output was discarded (aborted?) and cannot be committed",
			t.what, op, e.ID, e.File, filepath.Base(part))
	}
	return fmt.Errorf("%s: %s: transaction %d: %w", t.what, op, e.ID, err)
}

func (t *fileTxns) recover(state []byte, restoredID int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	op := "recover " + strconv.FormatInt(restoredID, 10)
	if !t.opened {
		return fmt.Errorf("connector file: sink %s: %s: %w", t.dir, op, errNotOpen)
	}
	if t.used {
		return fmt.Errorf("%s: %s: Recover must come after Open and before any Write or PreCommit", t.what, op)
	}
	if restoredID < 0 {
		return fmt.Errorf("%s: %s: checkpoint id must be ≥ 0", t.what, op)
	}
	listed, err := t.decodeState(state, restoredID, op)
	if err != nil {
		return err
	}
	for _, e := range listed {
		if err := t.commitOne(e, op); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", t.what, op, err)
	}
	for _, e := range entries {
		name := e.Name()
		sub, kind, id, ok := parseTxnName(name)
		if !ok || !t.owns(sub) {
			continue
		}
		switch {
		case kind == txnPending && id <= restoredID:
			// Pre-committed at or before the restored checkpoint, which
			// completed: its output is part of the restored state. Only a
			// subtask removed by rescaling leaves such files unlisted (the
			// state of a restore at another parallelism lists nothing).
			if err := t.commitFile(sub, txnEntry{ID: id, File: name}, op); err != nil {
				return err
			}
			continue
		case kind == txnPart && id <= restoredID:
			continue
		}
		// Written after the restored checkpoint: the open transaction, a
		// later pre-commit or commit. The restored job writes it again.
		if err := t.fs.remove(filepath.Join(t.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %s: remove output written after the checkpoint: %w", t.what, op, err)
		}
	}
	if err := t.fs.syncDir(t.dir); err != nil {
		return fmt.Errorf("%s: %s: sync directory %s: %w", t.what, op, t.dir, err)
	}
	t.last = restoredID
	t.pending = nil
	return nil
}

// decodeState checks the state PreCommit returned for checkpoint restoredID
// and returns the transactions it lists.
func (t *fileTxns) decodeState(state []byte, restoredID int64, op string) ([]txnEntry, error) {
	if len(state) == 0 {
		return nil, nil
	}
	var st txnSinkState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%s: %s: state %q is not a file sink state: %v", t.what, op, truncate(state), err)
	}
	if st.Version != txnStateVersion {
		return nil, fmt.Errorf("%s: %s: state version %d is not supported (this build reads version %d)", t.what, op, st.Version, txnStateVersion)
	}
	if st.Kind != "file" {
		return nil, fmt.Errorf("%s: %s: the state belongs to a %q sink, not a \"file\" sink", t.what, op, st.Kind)
	}
	if st.Subtask != t.subtask {
		return nil, fmt.Errorf("%s: %s: the state belongs to subtask %d", t.what, op, st.Subtask)
	}
	if st.Checkpoint != restoredID {
		return nil, fmt.Errorf("%s: %s: the state was taken at checkpoint %d", t.what, op, st.Checkpoint)
	}
	var prev int64
	for _, e := range st.Pending {
		if e.ID <= prev || e.ID > restoredID {
			return nil, fmt.Errorf("%s: %s: the state lists transaction %d out of order or after the checkpoint", t.what, op, e.ID)
		}
		if want := txnPendingName(t.subtask, e.ID); e.File != want {
			return nil, fmt.Errorf("%s: %s: the state names file %q for transaction %d, want %q", t.what, op, e.File, e.ID, want)
		}
		prev = e.ID
	}
	return st.Pending, nil
}

// close is Close in transactional mode, called when the bounded input ended
// normally: the rest of the input becomes transaction last+1, and every
// pending transaction is committed. After a failed write it discards the
// open transaction instead and reports the failure.
func (t *fileTxns) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.opened {
		return nil
	}
	t.opened = false
	if t.err != nil {
		if err := t.discardOpenLocked(); err != nil {
			return errors.Join(t.err, fmt.Errorf("%s: close: discard the open transaction: %w", t.what, err))
		}
		return t.err
	}
	if t.f != nil {
		if err := t.preCommitLocked(t.last + 1); err != nil {
			// Nobody takes this pre-commit back: its file goes.
			if derr := t.discardOpenLocked(); derr != nil {
				err = errors.Join(err, derr)
			}
			return fmt.Errorf("%s: close: %w", t.what, err)
		}
	}
	if err := t.commitLocked(t.last); err != nil {
		return fmt.Errorf("%s: close: %w", t.what, err)
	}
	return nil
}

// discardOpenLocked closes and removes the open transaction's file, if any
// (or the file a failed pre-commit kept), and reports a removal failure.
func (t *fileTxns) discardOpenLocked() error {
	if k := t.kept; k != nil {
		t.kept = nil
		if err := t.fs.remove(k.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if t.f == nil {
		return nil
	}
	f := t.f
	t.f = nil
	f.Close()
	if err := t.fs.remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// abort removes the open transaction's file and every pending one.
func (t *fileTxns) abort() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opened = false
	var errs []error
	removed := t.f != nil || len(t.pending) > 0 || t.kept != nil
	if err := t.discardOpenLocked(); err != nil {
		errs = append(errs, err)
	}
	for _, e := range t.pending {
		if err := t.fs.remove(filepath.Join(t.dir, e.File)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	t.pending = nil
	if removed {
		if err := t.fs.syncDir(t.dir); err != nil {
			errs = append(errs, fmt.Errorf("sync directory %s: %w", t.dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: abort: %w", t.what, err)
	}
	return nil
}

// Release lets go of the sink without touching its files: the open
// transaction's file is closed where it is and pending transactions stay
// pending. A job that fails and will restart (or be resumed) releases its
// sinks, and Recover then commits what its checkpoint pre-committed and
// removes the rest. In non-transactional mode Release is Abort.
func (s *fileSink) Release() error {
	if s.txn == nil {
		return s.Abort()
	}
	t := s.txn
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opened = false
	if t.f != nil {
		err := t.f.Close()
		t.f, t.w = nil, nil
		if err != nil {
			return fmt.Errorf("%s: release: %w", t.what, err)
		}
	}
	return nil
}
