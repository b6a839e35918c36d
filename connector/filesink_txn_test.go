package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wstream/wstream/abi"
)

// fsLog records the sink's file system operations and checks the order that
// makes output durable: a file is fsynced before it is renamed, and every
// rename or removal is followed by an fsync of the directory before the
// sink's method returns (settled).
type fsLog struct {
	t      *testing.T
	dir    string
	mu     sync.Mutex
	synced map[string]bool // files fsynced, under their current name
	dirty  []string        // renames and removals since the last directory fsync
	ops    []string
	// fail makes the next operation of that kind ("rename", "syncDir",
	// "syncFile") fail once.
	fail map[string]bool
}

var errInjected = errors.New("injected fault")

func newFSLog(t *testing.T, dir string) *fsLog {
	return &fsLog{t: t, dir: dir, synced: map[string]bool{}, fail: map[string]bool{}}
}

func (l *fsLog) fsOps() fsOps {
	return fsOps{
		rename: func(oldpath, newpath string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fail["rename"] {
				delete(l.fail, "rename")
				return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: errInjected}
			}
			if err := os.Rename(oldpath, newpath); err != nil {
				return err
			}
			if !l.synced[oldpath] {
				l.t.Errorf("%s renamed to %s without an fsync of its data", filepath.Base(oldpath), filepath.Base(newpath))
			}
			delete(l.synced, oldpath)
			l.synced[newpath] = true
			l.dirty = append(l.dirty, "rename "+filepath.Base(oldpath)+" "+filepath.Base(newpath))
			l.ops = append(l.ops, l.dirty[len(l.dirty)-1])
			return nil
		},
		remove: func(name string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if err := os.Remove(name); err != nil {
				return err
			}
			l.dirty = append(l.dirty, "remove "+filepath.Base(name))
			l.ops = append(l.ops, l.dirty[len(l.dirty)-1])
			return nil
		},
		syncFile: func(f *os.File) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fail["syncFile"] {
				delete(l.fail, "syncFile")
				return errInjected
			}
			l.synced[f.Name()] = true
			l.ops = append(l.ops, "sync "+filepath.Base(f.Name()))
			return f.Sync()
		},
		syncDir: func(dir string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fail["syncDir"] {
				delete(l.fail, "syncDir")
				return errInjected
			}
			if filepath.Clean(dir) == filepath.Clean(l.dir) {
				l.dirty = nil
				l.ops = append(l.ops, "syncdir")
			}
			return osFS.syncDir(dir)
		},
	}
}

// settled fails the test when a rename or removal was not followed by a
// directory fsync.
func (l *fsLog) settled(after string) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.dirty) > 0 {
		l.t.Errorf("after %s: %v not followed by an fsync of the directory", after, l.dirty)
	}
}

// txnSink is a transactional file sink under test with its operation log.
type txnSink struct {
	t   *testing.T
	s   *fileSink
	log *fsLog
}

func openTxnSink(t *testing.T, dir string, subtask, parallelism int) *txnSink {
	t.Helper()
	return openTxnSinkLog(t, dir, subtask, parallelism, newFSLog(t, dir))
}

// openTxnSinkLog opens a sink that shares log with earlier sinks on dir, as
// a restarted process shares the disk with the one that crashed.
func openTxnSinkLog(t *testing.T, dir string, subtask, parallelism int, log *fsLog) *txnSink {
	t.Helper()
	s, err := NewSink("file", json.RawMessage(fmt.Sprintf(`{"path":%q,"format":"text"}`, dir)), nil)
	if err != nil {
		t.Fatal(err)
	}
	fsink := s.(*fileSink)
	if err := fsink.BeginTransactions(); err != nil {
		t.Fatal(err)
	}
	fsink.txn.fs = log.fsOps()
	if err := fsink.Open(context.Background(), subtask, parallelism); err != nil {
		t.Fatal(err)
	}
	return &txnSink{t: t, s: fsink, log: log}
}

func (x *txnSink) write(values ...string) {
	x.t.Helper()
	var b []byte
	for _, v := range values {
		b = append(b, batch(rec(0, "", v))...)
		if err := x.s.Write(b); err != nil {
			x.t.Fatal(err)
		}
		b = b[:0]
	}
	x.log.settled("Write")
}

func (x *txnSink) preCommit(id int64) []byte {
	x.t.Helper()
	st, err := x.s.PreCommit(id)
	if err != nil {
		x.t.Fatalf("PreCommit(%d): %v", id, err)
	}
	x.log.settled(fmt.Sprintf("PreCommit(%d)", id))
	return st
}

func (x *txnSink) commit(id int64) {
	x.t.Helper()
	if err := x.s.Commit(id); err != nil {
		x.t.Fatalf("Commit(%d): %v", id, err)
	}
	x.log.settled(fmt.Sprintf("Commit(%d)", id))
}

func (x *txnSink) recover(state []byte, id int64) {
	x.t.Helper()
	if err := x.s.Recover(state, id); err != nil {
		x.t.Fatalf("Recover(%s, %d): %v", state, id, err)
	}
	x.log.settled(fmt.Sprintf("Recover(%d)", id))
}

// crash abandons the sink as a killed process would: its open file is
// neither flushed nor removed.
func (x *txnSink) crash() {
	if f := x.s.txn.f; f != nil {
		f.Close()
	}
}

// files lists the directory: visible names, then hidden ones.
func files(t *testing.T, dir string) (visible, hidden []string) {
	t.Helper()
	for _, name := range dirNames(t, dir) {
		if strings.HasPrefix(name, ".") {
			hidden = append(hidden, name)
		} else {
			visible = append(visible, name)
		}
	}
	return visible, hidden
}

// committed is subtask's committed output: its parts concatenated in name
// order.
func committed(t *testing.T, dir string, subtask int) string {
	t.Helper()
	var out strings.Builder
	for _, name := range dirNames(t, dir) { // os.ReadDir sorts by name
		if _, ok := txnID(name, fmt.Sprintf("part-%d-", subtask)); ok {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			out.Write(b)
		}
	}
	return out.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTxnSinkPendingUntilCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	x := openTxnSink(t, dir, 0, 1)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("Open did not create the output directory: %v", err)
	}
	x.write("a1", "a2")
	if vis, hid := files(t, dir); len(vis) != 0 || !slices.Equal(hid, []string{".open-0"}) {
		t.Fatalf("open transaction: visible %v hidden %v, want only .open-0", vis, hid)
	}
	st1 := x.preCommit(1)
	if want := `{"version":1,"kind":"file","subtask":0,"checkpoint":1,"pending":[{"id":1,"file":".pending-0-0000000001"}]}`; string(st1) != want {
		t.Errorf("state after PreCommit(1):\n got  %s\n want %s", st1, want)
	}
	if got := readFile(t, filepath.Join(dir, ".pending-0-0000000001")); got != "a1\na2\n" {
		t.Errorf("pending file holds %q", got)
	}
	x.write("b1")
	x.preCommit(2)
	x.write("c1")
	st3 := x.preCommit(3)
	if want := `{"version":1,"kind":"file","subtask":0,"checkpoint":3,"pending":[{"id":1,"file":".pending-0-0000000001"},{"id":2,"file":".pending-0-0000000002"},{"id":3,"file":".pending-0-0000000003"}]}`; string(st3) != want {
		t.Errorf("state after PreCommit(3):\n got  %s\n want %s", st3, want)
	}
	if vis, hid := files(t, dir); len(vis) != 0 || len(hid) != 3 {
		t.Fatalf("before Commit: visible %v hidden %v, want nothing visible and three pending files", vis, hid)
	}
	// An empty transaction makes no file and changes nothing pending.
	st4 := x.preCommit(4)
	if !strings.Contains(string(st4), `"checkpoint":4`) || strings.Count(string(st4), `"id"`) != 3 {
		t.Errorf("state after an empty PreCommit(4): %s", st4)
	}

	// Commit(3) commits 1, 2 and 3 at once.
	x.commit(3)
	vis, hid := files(t, dir)
	if want := []string{"part-0-0000000001", "part-0-0000000002", "part-0-0000000003"}; !slices.Equal(vis, want) || len(hid) != 0 {
		t.Fatalf("after Commit(3): visible %v hidden %v, want %v only", vis, hid, want)
	}
	if got := committed(t, dir, 0); got != "a1\na2\nb1\nc1\n" {
		t.Errorf("committed output %q", got)
	}
	// Committing again, or an earlier id, changes nothing.
	before := len(x.log.ops)
	x.commit(3)
	x.commit(1)
	x.commit(4)
	if len(x.log.ops) != before {
		t.Errorf("repeated Commit touched the file system: %v", x.log.ops[before:])
	}
	if vis2, _ := files(t, dir); !slices.Equal(vis2, vis) {
		t.Errorf("repeated Commit changed the directory to %v", vis2)
	}
	x.write("e1")
	st5 := x.preCommit(5)
	if want := `{"version":1,"kind":"file","subtask":0,"checkpoint":5,"pending":[{"id":5,"file":".pending-0-0000000005"}]}`; string(st5) != want {
		t.Errorf("state after Commit(3), PreCommit(5):\n got  %s\n want %s", st5, want)
	}
	x.commit(5)
	if got := committed(t, dir, 0); got != "a1\na2\nb1\nc1\ne1\n" {
		t.Errorf("committed output %q", got)
	}
	if err := x.s.Close(); err != nil {
		t.Fatal(err)
	}
	if vis, hid := files(t, dir); len(vis) != 4 || len(hid) != 0 {
		t.Errorf("Close with nothing left: visible %v hidden %v", vis, hid)
	}
}

// TestTxnSinkCommitAlreadyDone: a transaction whose part already exists is
// committed; one whose files are both gone is an error naming it.
func TestTxnSinkCommitAlreadyDone(t *testing.T) {
	dir := t.TempDir()
	x := openTxnSink(t, dir, 2, 3)
	x.write("x")
	x.preCommit(7)
	x.write("y")
	x.preCommit(8)
	if err := os.Rename(filepath.Join(dir, ".pending-2-0000000007"), filepath.Join(dir, "part-2-0000000007")); err != nil {
		t.Fatal(err)
	}
	x.commit(7)
	if err := os.Remove(filepath.Join(dir, ".pending-2-0000000008")); err != nil {
		t.Fatal(err)
	}
	err := x.s.Commit(8)
	want := "connector file: sink " + dir + " (subtask 2): commit 8: transaction 8 has neither its pending file .pending-2-0000000008 nor its part part-2-0000000008: its output was discarded (aborted?) and cannot be committed"
	if err == nil || err.Error() != want {
		t.Errorf("Commit of a lost transaction:\n got  %v\n want %s", err, want)
	}
	if got := committed(t, dir, 2); got != "x\n" {
		t.Errorf("committed %q", got)
	}
}

// crashedRun leaves dir as a killed attempt would: transaction 1 committed,
// 2 pre-committed but never committed (its checkpoint completed, the
// notification was lost), more records in the open transaction, plus stray
// files of an earlier attempt. Subtask 1's files belong to another subtask
// and must survive subtask 0's recovery. It returns the states of
// checkpoints 1 and 2 and the file system log.
func crashedRun(t *testing.T, dir string) (st1, st2 []byte, log *fsLog) {
	x := openTxnSink(t, dir, 0, 2)
	x.write("one")
	st1 = x.preCommit(1)
	x.commit(1)
	x.write("two")
	st2 = x.preCommit(2)
	x.write("three")
	x.s.txn.w.Flush()
	x.crash()
	for _, name := range []string{
		"part-0-0000000003", ".pending-0-0000000004", // an earlier attempt's later output
		"part-1-0000000001", "part-1-0000000003", ".pending-1-0000000003", ".open-1", // subtask 1
		"part-11-0000000009", "part-0-notanid", // other names with a similar prefix
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return st1, st2, x.log
}

var otherFiles = []string{".open-1", ".pending-1-0000000003", "part-0-notanid", "part-1-0000000001", "part-1-0000000003", "part-11-0000000009"}

func TestTxnSinkRecover(t *testing.T) {
	t.Run("from checkpoint 2", func(t *testing.T) {
		dir := t.TempDir()
		_, st2, log := crashedRun(t, dir)
		x := openTxnSinkLog(t, dir, 0, 2, log)
		x.recover(st2, 2)
		want := append([]string{"part-0-0000000001", "part-0-0000000002"}, otherFiles...)
		slices.Sort(want)
		if got := dirNames(t, dir); !slices.Equal(got, want) {
			t.Fatalf("after Recover(state of 2, 2):\n got  %v\n want %v", got, want)
		}
		if got := committed(t, dir, 0); got != "one\ntwo\n" {
			t.Errorf("committed %q, want one and two", got)
		}
		// The replay after checkpoint 2 then writes "three" exactly once.
		x.write("three")
		if err := x.s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := committed(t, dir, 0); got != "one\ntwo\nthree\n" {
			t.Errorf("after the replay and Close: %q", got)
		}
		if _, err := os.Stat(filepath.Join(dir, "part-0-0000000003")); err != nil {
			t.Errorf("Close did not write the final transaction as 3 (restored id + 1): %v", err)
		}
	})
	t.Run("from checkpoint 1", func(t *testing.T) {
		dir := t.TempDir()
		st1, _, log := crashedRun(t, dir)
		x := openTxnSinkLog(t, dir, 0, 2, log)
		x.recover(st1, 1)
		want := append([]string{"part-0-0000000001"}, otherFiles...)
		slices.Sort(want)
		if got := dirNames(t, dir); !slices.Equal(got, want) {
			t.Fatalf("after Recover(state of 1, 1):\n got  %v\n want %v", got, want)
		}
		if got := committed(t, dir, 0); got != "one\n" {
			t.Errorf("committed %q, want one only", got)
		}
	})
	t.Run("without a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		_, _, log := crashedRun(t, dir)
		x := openTxnSinkLog(t, dir, 0, 2, log)
		x.recover(nil, 0)
		if got := dirNames(t, dir); !slices.Equal(got, otherFiles) {
			t.Fatalf("after Recover(nil, 0):\n got  %v\n want %v", got, otherFiles)
		}
	})
	t.Run("twice", func(t *testing.T) {
		// A restart that fails again before writing recovers the same way.
		dir := t.TempDir()
		_, st2, log := crashedRun(t, dir)
		openTxnSinkLog(t, dir, 0, 2, log).recover(st2, 2)
		openTxnSinkLog(t, dir, 0, 2, log).recover(st2, 2)
		if got := committed(t, dir, 0); got != "one\ntwo\n" {
			t.Errorf("committed %q", got)
		}
	})
	t.Run("then later checkpoints", func(t *testing.T) {
		dir := t.TempDir()
		_, st2, log := crashedRun(t, dir)
		x := openTxnSinkLog(t, dir, 0, 2, log)
		x.recover(st2, 2)
		if _, err := x.s.PreCommit(2); err == nil || !strings.Contains(err.Error(), "checkpoint ids must increase, and checkpoint 2 was pre-committed or restored already") {
			t.Errorf("PreCommit(2) after Recover(2): %v", err)
		}
		x.write("three")
		st := x.preCommit(3)
		if want := `{"version":1,"kind":"file","subtask":0,"checkpoint":3,"pending":[{"id":3,"file":".pending-0-0000000003"}]}`; string(st) != want {
			t.Errorf("state %s, want %s", st, want)
		}
	})
}

func TestTxnSinkRecoverErrors(t *testing.T) {
	dir := t.TempDir()
	_, st2, _ := crashedRun(t, dir)
	prefix := "connector file: sink " + dir + " (subtask 0): recover "
	for _, tc := range []struct {
		state string
		id    int64
		want  string
	}{
		{`{`, 2, `2: state "{" is not a file sink state: unexpected end of JSON input`},
		{`{"version":9}`, 2, `2: state version 9 is not supported (this build reads version 1)`},
		{`{"version":1,"kind":"kafka"}`, 2, `2: the state belongs to a "kafka" sink, not a "file" sink`},
		{strings.Replace(string(st2), `"subtask":0`, `"subtask":1`, 1), 2, `2: the state belongs to subtask 1`},
		{string(st2), 3, `3: the state was taken at checkpoint 2`},
		{`{"version":1,"kind":"file","subtask":0,"checkpoint":2,"pending":[{"id":3,"file":".pending-0-0000000003"}]}`, 2,
			`2: the state lists transaction 3 out of order or after the checkpoint`},
		{`{"version":1,"kind":"file","subtask":0,"checkpoint":2,"pending":[{"id":2,"file":"../elsewhere"}]}`, 2,
			`2: the state names file "../elsewhere" for transaction 2, want ".pending-0-0000000002"`},
		{``, -1, `-1: checkpoint id must be ≥ 0`},
	} {
		x := openTxnSink(t, dir, 0, 2)
		err := x.s.Recover([]byte(tc.state), tc.id)
		if err == nil || err.Error() != prefix+tc.want {
			t.Errorf("Recover(%s, %d):\n got  %v\n want %s", tc.state, tc.id, err, prefix+tc.want)
		}
	}
	// None of the refused states changed anything.
	if _, err := os.Stat(filepath.Join(dir, ".pending-0-0000000002")); err != nil {
		t.Errorf("a refused Recover touched the pending file: %v", err)
	}

	x := openTxnSink(t, dir, 0, 2)
	x.write("late")
	if err := x.s.Recover(st2, 2); err == nil || err.Error() != prefix+"2: Recover must come after Open and before any Write or PreCommit" {
		t.Errorf("Recover after Write: %v", err)
	}
	s, _ := NewSink("file", json.RawMessage(fmt.Sprintf(`{"path":%q}`, dir)), nil)
	s.(Transactional).BeginTransactions()
	if err := s.(Transactional).Recover(st2, 2); err == nil || err.Error() != "connector file: sink "+dir+": recover 2: not open" {
		t.Errorf("Recover before Open: %v", err)
	}

	// A listed transaction whose output is gone cannot be recovered.
	if err := os.Remove(filepath.Join(dir, ".pending-0-0000000002")); err != nil {
		t.Fatal(err)
	}
	x = openTxnSink(t, dir, 0, 2)
	if err := x.s.Recover(st2, 2); err == nil || !strings.Contains(err.Error(), "recover 2: transaction 2 has neither its pending file .pending-0-0000000002 nor its part part-0-0000000002") {
		t.Errorf("Recover with a lost transaction: %v", err)
	}
}

func TestTxnSinkClose(t *testing.T) {
	t.Run("after checkpoints", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.write("a")
		x.preCommit(1)
		x.write("b")
		x.preCommit(2)
		x.commit(1)
		x.write("c", "d")
		if err := x.s.Close(); err != nil {
			t.Fatal(err)
		}
		x.log.settled("Close")
		vis, hid := files(t, dir)
		if want := []string{"part-0-0000000001", "part-0-0000000002", "part-0-0000000003"}; !slices.Equal(vis, want) || len(hid) != 0 {
			t.Errorf("after Close: visible %v hidden %v, want %v", vis, hid, want)
		}
		if got := committed(t, dir, 0); got != "a\nb\nc\nd\n" {
			t.Errorf("committed %q", got)
		}
		if err := x.s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := x.s.Write(batch(rec(0, "", "z"))); err == nil || !strings.HasSuffix(err.Error(), "write: not open") {
			t.Errorf("Write after Close: %v", err)
		}
		// A late notification after Close finds nothing left to do.
		x.commit(2)
	})
	t.Run("without checkpoints", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 3, 4)
		x.write("only")
		if err := x.s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, dir); !slices.Equal(got, []string{"part-3-0000000001"}) {
			t.Errorf("directory %v", got)
		}
	})
	t.Run("nothing after the last checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.write("a")
		x.preCommit(6)
		x.write()
		if err := x.s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, dir); !slices.Equal(got, []string{"part-0-0000000006"}) {
			t.Errorf("directory %v, want part 6 only (an empty final transaction makes no part)", got)
		}
	})
	t.Run("no records", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.preCommit(1)
		if err := x.s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, dir); len(got) != 0 {
			t.Errorf("directory %v, want empty", got)
		}
	})
}

func TestTxnSinkAbort(t *testing.T) {
	dir := t.TempDir()
	x := openTxnSink(t, dir, 0, 1)
	x.write("a")
	x.preCommit(1)
	x.commit(1)
	x.write("b")
	x.preCommit(2)
	x.write("c")
	if err := x.s.Abort(); err != nil {
		t.Fatal(err)
	}
	x.log.settled("Abort")
	if got := dirNames(t, dir); !slices.Equal(got, []string{"part-0-0000000001"}) {
		t.Errorf("after Abort: %v, want the committed part only", got)
	}
	if err := x.s.Close(); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
	if got := dirNames(t, dir); len(got) != 1 {
		t.Errorf("Close after Abort changed the directory: %v", got)
	}
}

func TestTxnSinkFaults(t *testing.T) {
	t.Run("rename at precommit", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.write("a")
		x.log.fail["rename"] = true
		_, err := x.s.PreCommit(1)
		want := "connector file: sink " + dir + " (subtask 0): precommit 1: rename " + filepath.Join(dir, ".open-0") + " " + filepath.Join(dir, ".pending-0-0000000001") + ": injected fault"
		if err == nil || err.Error() != want {
			t.Fatalf("PreCommit with a failing rename:\n got  %v\n want %s", err, want)
		}
		// The file stays whole where it was, for AbortPreCommit.
		if got := dirNames(t, dir); !slices.Equal(got, []string{".open-0"}) {
			t.Errorf("a failed PreCommit left %v, want the open file", got)
		}
		// Until AbortPreCommit takes the pre-commit back, the sink refuses
		// to go on.
		if _, err2 := x.s.PreCommit(2); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("PreCommit after a failure: %v, want the first error", err2)
		}
		if err2 := x.s.Write(batch(rec(0, "", "b"))); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("Write after a failure: %v, want the first error", err2)
		}
		if err2 := x.s.Close(); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("Close after a failure: %v, want the first error", err2)
		}
	})
	t.Run("directory sync at commit", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.write("a")
		x.preCommit(1)
		x.log.fail["syncDir"] = true
		err := x.s.Commit(1)
		if want := "connector file: sink " + dir + " (subtask 0): commit 1: sync directory " + dir + ": injected fault"; err == nil || err.Error() != want {
			t.Fatalf("Commit with a failing directory sync:\n got  %v\n want %s", err, want)
		}
		// Retrying commits again and syncs the directory this time.
		x.commit(1)
		if got := committed(t, dir, 0); got != "a\n" {
			t.Errorf("committed %q", got)
		}
	})
}

func TestTxnSinkModes(t *testing.T) {
	dir := t.TempDir()
	plain := openSink(t, "file", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "out.txt")), nil, 0, 1).(*fileSink)
	if err := plain.BeginTransactions(); err == nil || !strings.Contains(err.Error(), "already open non-transactionally; call BeginTransactions before Open") {
		t.Errorf("BeginTransactions after Open: %v", err)
	}
	for op, call := range map[string]func() error{
		"precommit": func() error { _, err := plain.PreCommit(1); return err },
		"commit":    func() error { return plain.Commit(1) },
		"recover":   func() error { return plain.Recover(nil, 0) },
	} {
		want := "connector file: sink " + filepath.Join(dir, "out.txt") + ": " + op + ": the sink is not transactional (BeginTransactions was not called before Open)"
		if err := call(); err == nil || err.Error() != want {
			t.Errorf("%s on a plain sink:\n got  %v\n want %s", op, err, want)
		}
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}

	// In transactional mode path must be a directory.
	file := filepath.Join(dir, "out.txt")
	s, _ := NewSink("file", json.RawMessage(fmt.Sprintf(`{"path":%q}`, file)), nil)
	s.(Transactional).BeginTransactions()
	want := "connector file: sink " + file + " (subtask 0): open: " + file + " is not a directory: a transactional file sink writes part files into a directory"
	if err := s.Open(context.Background(), 0, 1); err == nil || err.Error() != want {
		t.Errorf("Open on a file:\n got  %v\n want %s", err, want)
	}
	if _, err := s.(Transactional).PreCommit(1); err == nil || !strings.HasSuffix(err.Error(), "precommit 1: not open") {
		t.Errorf("PreCommit after a failed Open: %v", err)
	}

	x := openTxnSink(t, filepath.Join(dir, "txn"), 0, 1)
	if err := x.s.Open(context.Background(), 0, 1); err == nil || !strings.HasSuffix(err.Error(), "open: already open") {
		t.Errorf("second Open: %v", err)
	}
	x.preCommit(5)
	if _, err := x.s.PreCommit(5); err == nil || !strings.Contains(err.Error(), "precommit 5: checkpoint ids must increase, and checkpoint 5 was pre-committed or restored already") {
		t.Errorf("PreCommit(5) twice: %v", err)
	}
	if err := x.s.Write(batch(rec(0, "a\tb", "v"))[:7]); err == nil || !strings.Contains(err.Error(), "(subtask 0): write: abi: malformed batch") {
		t.Errorf("malformed batch: %v", err)
	}
}

// TestTxnSinkConcurrentCommit commits from another goroutine while records
// are written, as checkpoint notifications arrive: every record ends up
// committed exactly once, in order.
func TestTxnSinkConcurrentCommit(t *testing.T) {
	dir := t.TempDir()
	x := openTxnSink(t, dir, 0, 1)
	const records, every = 400, 25
	ids := make(chan int64, records/every)
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := range ids {
			if err := x.s.Commit(id); err != nil {
				t.Error(err)
			}
		}
	})
	var want strings.Builder
	for i := range records {
		v := fmt.Sprintf("r%d", i)
		want.WriteString(v + "\n")
		if err := x.s.Write(batch(rec(0, "", v))); err != nil {
			t.Fatal(err)
		}
		if (i+1)%every == 0 {
			id := int64((i + 1) / every)
			if _, err := x.s.PreCommit(id); err != nil {
				t.Fatal(err)
			}
			ids <- id
		}
	}
	close(ids)
	wg.Wait()
	if err := x.s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := committed(t, dir, 0); got != want.String() {
		t.Errorf("committed output differs from what was written (%d vs %d bytes)", len(got), want.Len())
	}
	if vis, hid := files(t, dir); len(vis) != records/every || len(hid) != 0 {
		t.Errorf("%d parts, hidden %v; want %d parts", len(vis), hid, records/every)
	}
}

func TestReleaseKeepsFilesForRecover(t *testing.T) {
	dir := t.TempDir()
	open := func() Sink {
		s, err := NewSink("file", json.RawMessage(`{"path":"`+dir+`"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.(Transactional).BeginTransactions(); err != nil {
			t.Fatal(err)
		}
		if err := s.Open(context.Background(), 0, 1); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if err := s.Write(abi.Encode([]abi.Record{{Value: []byte("one")}})); err != nil {
		t.Fatal(err)
	}
	st, err := s.(Transactional).PreCommit(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(abi.Encode([]abi.Record{{Value: []byte("after")}})); err != nil {
		t.Fatal(err)
	}
	// The job fails before checkpoint 1 is known to be complete.
	if err := s.(interface{ Release() error }).Release(); err != nil {
		t.Fatal(err)
	}
	// The restart restores checkpoint 1: its pending output becomes visible,
	// what came after it does not.
	r := open()
	if err := r.(Transactional).Recover(st, 1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "part-0-0000000001"))
	if err != nil || string(b) != "one\n" {
		t.Fatalf("committed part = %q, %v", b, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after Recover, want the one part", len(entries))
	}
}

// TestTxnSinkRecoverRescaledDown restores four subtasks' output directory at
// parallelism 2 from a checkpoint whose sink state the new subtasks do not
// get (a restore at another parallelism): each new subtask takes over the
// files of the removed subtasks s ≥ 2 with s mod 2 = its own index, commits
// what the checkpoint pre-committed, and removes what was written after it.
func TestTxnSinkRecoverRescaledDown(t *testing.T) {
	dir := t.TempDir()
	log := newFSLog(t, dir)
	for _, name := range []string{
		"part-0-0000000001", "part-1-0000000001", "part-2-0000000001", "part-3-0000000001",
		".pending-2-0000000002", ".pending-3-0000000002", // pre-committed by the restored checkpoint, never committed
		".pending-2-0000000003", "part-3-0000000003", // written after it
		".open-2", ".open-3", ".open-0",
		"part-5-0000000002", // an older run's subtask 5: 5 mod 2 = 1 takes it over, and keeps it
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// The subtasks that wrote them fsynced them before renaming.
		log.synced[filepath.Join(dir, name)] = true
	}
	for sub := 0; sub < 2; sub++ {
		x := openTxnSinkLog(t, dir, sub, 2, log)
		x.recover(nil, 2)
	}
	want := []string{
		"part-0-0000000001", "part-1-0000000001", "part-2-0000000001", "part-2-0000000002",
		"part-3-0000000001", "part-3-0000000002", "part-5-0000000002",
	}
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after recovering at parallelism 2:\n got  %v\n want %v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "part-3-0000000002"))
	if err != nil || string(b) != ".pending-3-0000000002\n" {
		t.Errorf("part-3-0000000002 holds %q (%v), want the pending transaction's content", b, err)
	}
}

// TestTxnSinkAbortPreCommit: a pre-commit that failed with its file whole
// (the rename failed, the directory sync after it failed, or the reply was
// lost) is taken back by AbortPreCommit: nothing stays under its id, the
// records stay in the open transaction, and the next checkpoint commits
// them once, also through a restore from it. A pre-commit whose fsync
// failed lost its records: AbortPreCommit says so, and the subtask fails.
func TestTxnSinkAbortPreCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(x *txnSink)
	}{
		{"rename", func(x *txnSink) { x.log.fail["rename"] = true }},
		{"directory sync", func(x *txnSink) { x.log.fail["syncDir"] = true }},
		{"lost reply", func(x *txnSink) {
			SetPreCommitFault(x.s, func(id int64) error {
				x.s.txn.fault = nil
				return errInjected
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			x := openTxnSink(t, dir, 0, 1)
			x.write("a")
			x.preCommit(1)
			x.write("b", "c")
			tc.fault(x)
			if _, err := x.s.PreCommit(2); !errors.Is(err, errInjected) {
				t.Fatalf("PreCommit(2) with a fault: %v", err)
			}
			if err := x.s.AbortPreCommit(2); err != nil {
				t.Fatalf("AbortPreCommit(2): %v", err)
			}
			x.log.settled("AbortPreCommit(2)")
			if _, hidden := files(t, dir); !slices.Equal(hidden, []string{".open-0", ".pending-0-0000000001"}) {
				t.Fatalf("after the abort: %v, want the open transaction and pending 1", hidden)
			}
			x.write("d")
			st3 := x.preCommit(3)
			var st txnSinkState
			if err := json.Unmarshal(st3, &st); err != nil {
				t.Fatal(err)
			}
			if ids := []int64{st.Pending[0].ID, st.Pending[len(st.Pending)-1].ID}; len(st.Pending) != 2 || ids[0] != 1 || ids[1] != 3 {
				t.Fatalf("state of 3 lists %+v, want transactions 1 and 3", st.Pending)
			}
			// A restart from checkpoint 3 commits its transactions once.
			x.crash()
			y := openTxnSinkLog(t, dir, 0, 1, x.log)
			y.recover(st3, 3)
			if got := committed(t, dir, 0); got != "a\nb\nc\nd\n" {
				t.Fatalf("committed %q, want every record once", got)
			}
			if visible, _ := files(t, dir); !slices.Equal(visible, []string{"part-0-0000000001", "part-0-0000000003"}) {
				t.Errorf("parts %v", visible)
			}
		})
	}
	t.Run("fsync", func(t *testing.T) {
		dir := t.TempDir()
		x := openTxnSink(t, dir, 0, 1)
		x.write("a")
		x.log.fail["syncFile"] = true
		if _, err := x.s.PreCommit(1); !errors.Is(err, errInjected) {
			t.Fatalf("PreCommit(1) with a failing fsync: %v", err)
		}
		err := x.s.AbortPreCommit(1)
		if err == nil || !strings.Contains(err.Error(), "records are lost") {
			t.Fatalf("AbortPreCommit after a failed fsync: %v, want the records lost", err)
		}
		if got := dirNames(t, dir); len(got) != 0 {
			t.Errorf("a file whose fsync failed stayed: %v", got)
		}
		if err := x.s.Write(batch(rec(0, "", "b"))); err == nil {
			t.Error("the sink takes writes after its records were lost")
		}
	})
	t.Run("nothing failed", func(t *testing.T) {
		x := openTxnSink(t, t.TempDir(), 0, 1)
		x.write("a")
		if err := x.s.AbortPreCommit(1); err == nil {
			t.Error("AbortPreCommit without a failed pre-commit succeeded")
		}
	})
}

// TestTxnSinkCloseFailedPreCommit: a pre-commit that Close makes and that
// fails leaves no file behind, not even a whole one: nobody takes it back,
// and a pending file would be committed by a restore at or after its id.
func TestTxnSinkCloseFailedPreCommit(t *testing.T) {
	dir := t.TempDir()
	x := openTxnSink(t, dir, 0, 1)
	x.write("a")
	x.log.fail["syncDir"] = true
	if err := x.s.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close with a failing directory sync: %v", err)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("a failed Close left %v", got)
	}
}
