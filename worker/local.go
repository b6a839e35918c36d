package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
)

// Local recovery: with checkpoint.localRecovery on, a subtask keeps the
// keyed-state snapshot of its checkpoints on the worker, below
// DATA/jobs/JOB/local/<chain>-<subtask>/chk-<id>, next to the copy it
// uploaded. Only the newest completed one is kept. A subtask restarted on
// the same worker restores from that copy when it is the checkpoint the
// attempt starts from and it verifies against its manifest and the
// checkpoint's metadata; otherwise it restores from checkpoint storage.

// localManifestName is the manifest of a local snapshot, written last.
const localManifestName = "_manifest"

// localManifest lists a local snapshot's files by their slash-separated
// path below the snapshot's directory.
type localManifest struct {
	Checkpoint int64                `json:"checkpoint"`
	Files      map[string]localFile `json:"files"`
}

type localFile struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex SHA-256 of the bytes
}

// localTaskDir is where task t of job keeps its local snapshots.
func localTaskDir(root string, t checkpoint.TaskID) string {
	return filepath.Join(root, fmt.Sprintf("%d-%d", t.Chain, t.Subtask))
}

// localDir is the directory of the subtask's local snapshots, "" when
// local recovery is off.
func (t *task) localDir() string {
	if t.ckpt == nil || t.ckpt.localRoot == "" {
		return ""
	}
	return localTaskDir(t.ckpt.localRoot, t.id)
}

// keepLocal makes the sync snapshot of checkpoint snap.id the subtask's
// local snapshot: it moves the directory to chk-<id> and writes its
// manifest. On failure the snapshot directory is removed and nothing is
// kept.
func (t *task) keepLocal(snap *snapshotInProgress) error {
	dir := t.localDir()
	t.localMu.Lock()
	defer t.localMu.Unlock()
	if t.localAborted[snap.id] {
		return os.RemoveAll(snap.stateDir)
	}
	target := filepath.Join(dir, checkpoint.LocalSnapshotName(snap.id))
	err := func() error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.Rename(snap.stateDir, target); err != nil {
			return err
		}
		m := localManifest{Checkpoint: snap.id, Files: map[string]localFile{}}
		err := filepath.WalkDir(target, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s is not a regular file", p)
			}
			rel, err := filepath.Rel(target, p)
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			var sum string
			if filepath.Ext(p) == ".sst" {
				sum, err = t.sstDigest(p)
			} else {
				sum, err = checkpoint.FileSHA256(p)
			}
			if err != nil {
				return err
			}
			m.Files[filepath.ToSlash(rel)] = localFile{Size: fi.Size(), SHA256: sum}
			return nil
		})
		if err != nil {
			return err
		}
		return writeLocalManifest(target, &m)
	}()
	if err != nil {
		_ = os.RemoveAll(snap.stateDir)
		_ = os.RemoveAll(target)
		return fmt.Errorf("keeping the local snapshot of checkpoint %d: %w", snap.id, err)
	}
	return nil
}

// writeLocalManifest writes m into dir atomically: a temporary file,
// synced, then renamed.
func writeLocalManifest(dir string, m *localManifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".manifest-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, localManifestName))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// dropLocal removes the subtask's local snapshots for which drop is true.
func (t *task) dropLocal(drop func(id int64) bool) {
	dir := t.localDir()
	if dir == "" {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id, ok := checkpoint.ParseLocalSnapshotName(e.Name())
		if !ok || drop(id) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// localCompleted keeps, of the local snapshots, checkpoint id (completed)
// and newer ones still in progress.
func (t *task) localCompleted(id int64) {
	if t.localDir() == "" {
		return
	}
	t.localMu.Lock()
	defer t.localMu.Unlock()
	t.dropLocal(func(x int64) bool { return x < id })
	for x := range t.localAborted {
		if x < id {
			delete(t.localAborted, x)
		}
	}
}

// localAbortedID drops the local snapshot of aborted checkpoint id, and
// keeps a snapshot of id still being persisted from being kept.
func (t *task) localAbortedID(id int64) {
	if t.localDir() == "" {
		return
	}
	t.localMu.Lock()
	defer t.localMu.Unlock()
	if t.localAborted == nil {
		t.localAborted = map[int64]bool{}
	}
	t.localAborted[id] = true
	_ = os.RemoveAll(filepath.Join(t.localDir(), checkpoint.LocalSnapshotName(id)))
}

// stateFileName returns the path of a keyed-state file in the subtask's
// Pebble directory, as Storage.Restore places it: its Path (or a shared
// file's Name) below prefix.
func stateFileName(h checkpoint.FileHandle, prefix string) (string, error) {
	p := h.Path
	if h.Shared {
		p = h.Name
	}
	name, ok := strings.CutPrefix(p, prefix)
	if !ok || name == "" || path.Clean(name) != name || !filepath.IsLocal(filepath.FromSlash(name)) || name == localManifestName {
		return "", fmt.Errorf("state file %s lies outside %s", p, prefix)
	}
	return name, nil
}

// verifyLocal checks the local snapshot in dir against the keyed-state
// files of st (prefix: the task's state directory in the checkpoint): its
// manifest must list exactly those files, with their raw sizes, and every
// file must have the manifest's size and SHA-256. It returns the files'
// names and their total size.
func verifyLocal(dir string, id int64, st *checkpoint.SubtaskState, prefix string) ([]string, int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, localManifestName))
	if err != nil {
		return nil, 0, fmt.Errorf("no manifest: %w", err)
	}
	var m localManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, 0, fmt.Errorf("manifest: %w", err)
	}
	if m.Checkpoint != id {
		return nil, 0, fmt.Errorf("manifest is of checkpoint %d, not %d", m.Checkpoint, id)
	}
	if len(m.Files) != len(st.State) {
		return nil, 0, fmt.Errorf("manifest lists %d files, the checkpoint %d", len(m.Files), len(st.State))
	}
	names := make([]string, 0, len(st.State))
	for _, h := range st.State {
		name, err := stateFileName(h, prefix)
		if err != nil {
			return nil, 0, err
		}
		f, ok := m.Files[name]
		if !ok {
			return nil, 0, fmt.Errorf("manifest lacks %s", name)
		}
		// RawSize is set on compressed and shared handles (0 for an empty
		// file); on others it is 0 and Size is the raw size.
		raw := h.RawSize
		if raw == 0 && !h.Compressed && !h.Shared {
			raw = h.Size
		}
		if f.Size != raw {
			return nil, 0, fmt.Errorf("%s: manifest size %d, checkpoint %d", name, f.Size, raw)
		}
		// Where the handle knows the raw digest (a shared file is named by
		// it, a plain file stores it), it must agree too.
		want := ""
		switch {
		case h.Shared:
			want = strings.TrimSuffix(path.Base(h.Path), path.Ext(h.Path))
		case !h.Compressed:
			want = h.SHA256
		}
		if want != "" && !strings.EqualFold(want, f.SHA256) {
			return nil, 0, fmt.Errorf("%s: manifest SHA-256 %s, checkpoint %s", name, f.SHA256, want)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		return nil, 0, errors.New("the checkpoint lists a state file twice")
	}
	var total int64
	for _, name := range names {
		f := m.Files[name]
		p := filepath.Join(dir, filepath.FromSlash(name))
		fi, err := os.Stat(p)
		if err != nil {
			return nil, 0, err
		}
		if fi.Size() != f.Size {
			return nil, 0, fmt.Errorf("%s has %d bytes, the manifest says %d", name, fi.Size(), f.Size)
		}
		sum, err := checkpoint.FileSHA256(p)
		if err != nil {
			return nil, 0, err
		}
		if !strings.EqualFold(sum, f.SHA256) {
			return nil, 0, fmt.Errorf("%s has SHA-256 %s, the manifest says %s", name, sum, f.SHA256)
		}
		total += f.Size
	}
	return names, total, nil
}

// copyLocal puts the files names of the local snapshot src into dst: SST
// files, which Pebble never changes, as hard links (copies where links
// fail), the others as copies, since Pebble may reuse or rewrite them.
func copyLocal(src, dst string, names []string) error {
	for _, name := range names {
		from := filepath.Join(src, filepath.FromSlash(name))
		to := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if filepath.Ext(name) == ".sst" && os.Link(from, to) == nil {
			continue
		}
		if err := checkpoint.CopyLocalFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

// keyedRestore says where a subtask's keyed state came from.
type keyedRestore struct {
	local        bool  // from the local snapshot
	storageBytes int64 // bytes of state files read from checkpoint storage
	localBytes   int64 // bytes of the local snapshot used
}

// restoreKeyedState fills the empty or missing directory dst with task
// st.Task's keyed state of checkpoint m: from the local snapshot below
// localDir (local recovery; "" when off) when it verifies, else from
// storage. Why a local snapshot is not used goes to log.
func restoreKeyedState(storage *checkpoint.Storage, m *checkpoint.Metadata, st *checkpoint.SubtaskState,
	localDir, dst string, log *slog.Logger) (keyedRestore, error) {
	if localDir != "" {
		src := filepath.Join(localDir, checkpoint.LocalSnapshotName(m.ID))
		if _, err := os.Stat(src); err != nil {
			log.Info("no local snapshot; restoring from checkpoint storage", "subtask", st.Task.String(), logging.Checkpoint, m.ID)
		} else {
			names, n, err := verifyLocal(src, m.ID, st, storage.TaskDir(m.ID, st.Task)+"/state/")
			if err == nil {
				if err = os.MkdirAll(dst, 0o755); err == nil {
					err = copyLocal(src, dst, names)
				}
				if err == nil {
					return keyedRestore{local: true, localBytes: n}, nil
				}
				_ = os.RemoveAll(dst)
			}
			log.Warn("local snapshot not used; restoring from checkpoint storage", "subtask", st.Task.String(), logging.Checkpoint, m.ID, "err", err)
		}
	}
	if err := storage.Restore(m, st.Task, dst); err != nil {
		return keyedRestore{}, err
	}
	var r keyedRestore
	for _, h := range st.State {
		r.storageBytes += h.Size
	}
	return r, nil
}
