package worker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/checkpoint"
)

// localFixture stores checkpoint 1 of task 0/1, whose keyed state is the
// files of a fake Pebble directory, and keeps the same snapshot locally as
// persist does. It returns the storage, the metadata, the task's local
// directory and the files by name.
func localFixture(t *testing.T) (*checkpoint.Storage, *checkpoint.Metadata, *task, map[string][]byte) {
	t.Helper()
	root := t.TempDir()
	st, err := checkpoint.OpenStorage(filepath.Join(root, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetCompression(1); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"000005.sst":      bytes.Repeat([]byte("sst data "), 500),
		"MANIFEST-000001": []byte("manifest"),
		"OPTIONS-000003":  []byte("options"),
		"000004.log":      nil,
	}
	snapDir := filepath.Join(root, "snapshot")
	if err := os.MkdirAll(snapDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(snapDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tid := checkpoint.TaskID{Chain: 0, Subtask: 1}
	tk := &task{id: tid, label: "x/1", ckpt: &ckptEnv{storage: st, incremental: true, localRoot: filepath.Join(root, "local")}}
	snap := &snapshotInProgress{id: 1, kind: checkpoint.KindCheckpoint, stateDir: snapDir, state: &checkpoint.SubtaskState{Task: tid}}
	handles, err := tk.uploadIncremental(snap, st.TaskDir(1, tid))
	if err != nil {
		t.Fatal(err)
	}
	m := &checkpoint.Metadata{JobID: "j", ID: 1, Kind: checkpoint.KindCheckpoint, MaxParallelism: 128,
		Tasks: []checkpoint.SubtaskState{{Task: tid, State: handles}}}
	if err := st.WriteMetadata(m); err != nil {
		t.Fatal(err)
	}
	if err := tk.keepLocal(snap); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snapDir); !os.IsNotExist(err) {
		t.Fatalf("the sync snapshot %s is still there after it was kept", snapDir)
	}
	return st, m, tk, files
}

func checkRestored(t *testing.T, dst string, files map[string][]byte) {
	t.Helper()
	entries, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(files) {
		t.Fatalf("%s holds %d files, want %d", dst, len(entries), len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("restored %s differs", name)
		}
	}
}

// TestLocalRestoreVerifies restores from an intact local snapshot without
// reading storage, then corrupts one byte of it: the snapshot is rejected
// and the state comes from storage.
func TestLocalRestoreVerifies(t *testing.T) {
	st, m, tk, files := localFixture(t)
	var logs strings.Builder
	logf := slog.New(slog.NewTextHandler(&logs, nil))
	local := tk.localDir()

	dst := filepath.Join(t.TempDir(), "state")
	r, err := restoreKeyedState(st, m, &m.Tasks[0], local, dst, logf)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	if !r.local || r.storageBytes != 0 || r.localBytes != total {
		t.Fatalf("intact local snapshot: %+v, want local with %d bytes", r, total)
	}
	checkRestored(t, dst, files)

	// One byte flipped, size unchanged.
	p := filepath.Join(local, checkpoint.LocalSnapshotName(1), "MANIFEST-000001")
	b, _ := os.ReadFile(p)
	b[0] ^= 1
	if err := os.Remove(p); err != nil { // not through a hard link
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := verifyLocal(filepath.Join(local, checkpoint.LocalSnapshotName(1)), 1, &m.Tasks[0], st.TaskDir(1, m.Tasks[0].Task)+"/state/"); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("verifying a corrupt local snapshot: %v, want a SHA-256 mismatch", err)
	}
	dst = filepath.Join(t.TempDir(), "state")
	r, err = restoreKeyedState(st, m, &m.Tasks[0], local, dst, logf)
	if err != nil {
		t.Fatal(err)
	}
	if r.local || r.storageBytes == 0 || r.localBytes != 0 {
		t.Fatalf("corrupt local snapshot: %+v, want a restore from storage", r)
	}
	checkRestored(t, dst, files)
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "not used") {
		t.Fatalf("logged %q, want one line saying why the local snapshot was not used", logs.String())
	}
}

// TestLocalRestoreRejectsMismatch rejects local snapshots that do not
// match the checkpoint: another file list, a missing manifest.
func TestLocalRestoreRejectsMismatch(t *testing.T) {
	st, m, tk, _ := localFixture(t)
	dir := filepath.Join(tk.localDir(), checkpoint.LocalSnapshotName(1))
	prefix := st.TaskDir(1, m.Tasks[0].Task) + "/state/"
	if _, _, err := verifyLocal(dir, 1, &m.Tasks[0], prefix); err != nil {
		t.Fatalf("intact snapshot rejected: %v", err)
	}
	fewer := m.Tasks[0]
	fewer.State = fewer.State[1:]
	if _, _, err := verifyLocal(dir, 1, &fewer, prefix); err == nil {
		t.Fatal("a snapshot with a file the checkpoint lacks was accepted")
	}
	if _, _, err := verifyLocal(dir, 2, &m.Tasks[0], prefix); err == nil {
		t.Fatal("the snapshot of checkpoint 1 was accepted for checkpoint 2")
	}
	if err := os.Remove(filepath.Join(dir, localManifestName)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := verifyLocal(dir, 1, &m.Tasks[0], prefix); err == nil {
		t.Fatal("a snapshot without a manifest was accepted")
	}
}

// TestLocalSnapshotsPruned keeps only the newest completed local snapshot
// and drops aborted ones.
func TestLocalSnapshotsPruned(t *testing.T) {
	_, _, tk, _ := localFixture(t)
	dir := tk.localDir()
	for _, id := range []int64{2, 3} {
		if err := os.MkdirAll(filepath.Join(dir, checkpoint.LocalSnapshotName(id)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tk.localCompleted(2)
	tk.localAbortedID(3)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != checkpoint.LocalSnapshotName(2) {
		t.Fatalf("local snapshots left: %v, want only chk-2", entries)
	}
	// A snapshot of the aborted checkpoint persisted late is not kept.
	late := filepath.Join(t.TempDir(), "late")
	if err := os.MkdirAll(late, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tk.keepLocal(&snapshotInProgress{id: 3, stateDir: late}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpoint.LocalSnapshotName(3))); !os.IsNotExist(err) {
		t.Fatal("a late snapshot of an aborted checkpoint was kept")
	}
}
