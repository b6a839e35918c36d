package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
)

// subtaskRange is the key groups of subtask 0 of 2: restores must keep it.
var subtaskRange = abi.RangeForSubtask(0, 2, abi.DefaultMaxParallelism)

func mustCheckpoint(t *testing.T, s *Store, dir string) {
	t.Helper()
	if err := s.Checkpoint(dir); err != nil {
		t.Fatalf("Checkpoint(%s): %v", dir, err)
	}
}

// sstCount counts the SST files in a Pebble directory.
func sstCount(t *testing.T, dir string) int {
	t.Helper()
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ssts)
}

// TestCheckpointRestore takes a checkpoint, keeps writing, uploads the
// checkpoint to storage, restores it into a new directory and checks that
// the restored store holds exactly the state and timers of the checkpoint.
func TestCheckpointRestore(t *testing.T) {
	base := t.TempDir()
	s := openStore(t, filepath.Join(base, "db"), subtaskRange)
	defer closeStore(t, s)
	v := s.Vertex("count", true)
	total := mustRegister(t, v, "total", abi.StateValue)
	seen := mustRegister(t, v, "seen", abi.StateMap)
	a, b, c, d := string(keyIn(t, "a", 0)), string(keyIn(t, "b", 17)), string(keyIn(t, "c", 63)), string(keyIn(t, "d", 40))

	mustPut(t, v, total, a, "", "1")
	mustPut(t, v, total, b, "", "2")
	mustPut(t, v, seen, a, "x", "1")
	mustPut(t, v, seen, a, "y", "2")
	mustTimer(t, v, abi.TimeEvent, a, "w1", 100)
	mustTimer(t, v, abi.TimeProcessing, b, "", 50)
	flush(t, s)
	// Written after the last Flush: only in the write-back cache.
	mustPut(t, v, total, c, "", "3")
	mustPut(t, v, seen, a, "z", "3")
	mustTimer(t, v, abi.TimeEvent, c, "w2", 200)

	chk := filepath.Join(base, "chk-1")
	mustCheckpoint(t, s, chk)
	if n := s.Pending(); n != 0 {
		t.Fatalf("Checkpoint left %d changes pending", n)
	}

	// Processing continues: overwrite, delete, add, fire a timer, and let
	// Pebble rewrite its files. None of it may reach the checkpoint.
	mustPut(t, v, total, a, "", "100")
	mustDelete(t, v, total, b, "")
	mustPut(t, v, total, d, "", "4")
	mustDelete(t, v, seen, a, "x")
	mustPut(t, v, seen, a, "w", "0")
	mustTimer(t, v, abi.TimeEvent, d, "w3", 10)
	expectTimers(t, pop(t, v, abi.TimeEvent, 100), "10:"+d+"/w3", "100:"+a+"/w1")
	flush(t, s)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	lower, upper := KeyGroupSpan(fullRange)
	if err := s.db.Compact(context.Background(), lower, upper, false); err != nil {
		t.Fatal(err)
	}

	// The asynchronous phase: upload, then remove the local checkpoint.
	size, err := DirSize(chk)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenStorage(filepath.Join(base, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	task := checkpoint.TaskID{Chain: 2, Subtask: 0}
	files, err := store.CopyDir(1, store.TaskDir(1, task)+"/state", chk)
	if err != nil {
		t.Fatalf("CopyDir: %v", err)
	}
	var uploaded int64
	for _, f := range files {
		uploaded += f.Size
	}
	if uploaded != size || size == 0 {
		t.Fatalf("DirSize = %d, uploaded %d bytes", size, uploaded)
	}
	if err := os.RemoveAll(chk); err != nil {
		t.Fatal(err)
	}
	err = store.WriteMetadata(&checkpoint.Metadata{
		JobID: "job", ID: 1, Kind: checkpoint.KindCheckpoint, MaxParallelism: abi.DefaultMaxParallelism,
		Tasks: []checkpoint.SubtaskState{{Task: task, KeyGroups: subtaskRange, State: files}},
	})
	if err != nil {
		t.Fatalf("WriteMetadata: %v", err)
	}

	// Restore, as after a failure.
	m, skipped, err := store.LatestUsable()
	if err != nil || len(skipped) != 0 {
		t.Fatalf("LatestUsable = %v, %v", skipped, err)
	}
	restored := filepath.Join(base, "restored")
	if err := store.Restore(m, task, restored); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r := openStore(t, restored, m.Tasks[0].KeyGroups)
	defer closeStore(t, r)
	rv := r.Vertex("count", true)
	rTotal := mustRegister(t, rv, "total", abi.StateValue)
	rSeen := mustRegister(t, rv, "seen", abi.StateMap)
	expectGet(t, rv, rTotal, a, "", "1", false)
	expectGet(t, rv, rTotal, b, "", "2", false)
	expectGet(t, rv, rTotal, c, "", "3", false)
	expectGet(t, rv, rTotal, d, "", "", true)
	expectEntries(t, collect(t, rv, rSeen, a, "", nil), "x=1", "y=2", "z=3")
	expectTimers(t, pop(t, rv, abi.TimeEvent, 1000), "100:"+a+"/w1", "200:"+c+"/w2")
	expectTimers(t, pop(t, rv, abi.TimeProcessing, 1000), "50:"+b+"/")

	// The live store kept its later writes.
	expectGet(t, v, total, a, "", "100", false)
	expectGet(t, v, total, b, "", "", true)
	expectEntries(t, collect(t, v, seen, a, "", nil), "w=0", "y=2", "z=3")
}

func TestCheckpointWritesCachedChanges(t *testing.T) {
	base := t.TempDir()
	s := openStore(t, filepath.Join(base, "db"), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	for i := range 100 {
		mustPut(t, v, h, fmt.Sprint("k", i), "", fmt.Sprint("v", i))
	}
	mustTimer(t, v, abi.TimeEvent, "k1", "", 5)
	if s.Pending() == 0 {
		t.Fatal("the writes reached Pebble before the checkpoint; the test needs them cached")
	}
	chk := filepath.Join(base, "chk")
	mustCheckpoint(t, s, chk)
	if n := sstCount(t, chk); n == 0 {
		t.Fatalf("checkpoint holds no SST: the memtable was not flushed")
	}

	c := openStore(t, chk, fullRange)
	defer closeStore(t, c)
	cv := c.Vertex("v", true)
	ch := mustRegister(t, cv, "s", abi.StateValue)
	for i := range 100 {
		expectGet(t, cv, ch, fmt.Sprint("k", i), "", fmt.Sprint("v", i), false)
	}
	expectTimers(t, pop(t, cv, abi.TimeEvent, 5), "5:k1/")
}

func TestCheckpointOfEmptyStore(t *testing.T) {
	base := t.TempDir()
	s := openStore(t, filepath.Join(base, "db"), subtaskRange)
	defer closeStore(t, s)
	chk := filepath.Join(base, "chk")
	mustCheckpoint(t, s, chk)
	size, err := DirSize(chk)
	if err != nil || size == 0 {
		t.Fatalf("DirSize of an empty store's checkpoint = %d, %v; want its MANIFEST and OPTIONS", size, err)
	}
	if n := sstCount(t, chk); n != 0 {
		t.Fatalf("empty store's checkpoint holds %d SSTs", n)
	}
	c := openStore(t, chk, subtaskRange)
	defer closeStore(t, c)
	cv := c.Vertex("v", true)
	h := mustRegister(t, cv, "s", abi.StateValue)
	expectGet(t, cv, h, string(keyIn(t, "k", 1)), "", "", true)
	if _, ok := cv.NextTimer(abi.TimeEvent); ok {
		t.Fatal("empty store's checkpoint restored a timer")
	}
}

func TestCheckpointRefusesExistingDir(t *testing.T) {
	base := t.TempDir()
	s := openStore(t, filepath.Join(base, "db"), fullRange)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "", "1")

	dir := filepath.Join(base, "chk")
	writeFile := filepath.Join(dir, "keep")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(writeFile, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Checkpoint(dir)
	if err == nil || !strings.Contains(err.Error(), dir+" already exists") {
		t.Fatalf("Checkpoint into an existing directory = %v", err)
	}
	if b, err := os.ReadFile(writeFile); err != nil || string(b) != "mine" {
		t.Fatalf("Checkpoint touched the existing directory: %q, %v", b, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("existing directory holds %d entries after a refused checkpoint, %v", len(entries), err)
	}
	if err := s.Checkpoint(writeFile); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Checkpoint onto an existing file = %v", err)
	}
	if err := s.Checkpoint(""); err == nil {
		t.Fatal("Checkpoint(\"\") succeeded")
	}

	// The store is still usable and checkpoints elsewhere.
	mustPut(t, v, h, "k", "", "2")
	mustCheckpoint(t, s, filepath.Join(base, "chk2"))
	closeStore(t, s)
	if err := s.Checkpoint(filepath.Join(base, "chk3")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint after Close = %v; want ErrClosed", err)
	}
	c := openStore(t, filepath.Join(base, "chk2"), fullRange)
	defer closeStore(t, c)
	cv := c.Vertex("v", true)
	expectGet(t, cv, mustRegister(t, cv, "s", abi.StateValue), "k", "", "2", false)
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]int{"a": 10, "sub/b": 300, "sub/deeper/c": 0} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if size, err := DirSize(dir); err != nil || size != 310 {
		t.Fatalf("DirSize = %d, %v; want 310", size, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := DirSize(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("DirSize of a missing directory = %v", err)
	}
}
