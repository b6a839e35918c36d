package checkpoint

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MetadataFormat names the format of a checkpoint's _metadata file.
const MetadataFormat = "wstream-checkpoint"

// MetadataVersion is the version of the metadata format this wstream writes
// and the newest it reads.
const MetadataVersion = 1

// MetadataName is the name of the file, in a checkpoint's directory, whose
// presence marks the checkpoint complete.
const MetadataName = "_metadata"

// copyWorkers bounds the goroutines of one CopyDir, Verify or Restore.
const copyWorkers = 4

// ErrCorrupt marks errors about checkpoint files that are missing or whose
// bytes are not what the metadata records. Test for it with errors.Is.
var ErrCorrupt = errors.New("checkpoint: corrupt")

// ErrNoCheckpoint is returned (wrapped) by LatestUsable when no completed
// checkpoint reads and verifies.
var ErrNoCheckpoint = errors.New("checkpoint: no usable checkpoint")

// Metadata describes one completed checkpoint or savepoint: it is the
// content of the checkpoint's _metadata file.
type Metadata struct {
	// Format is MetadataFormat and Version the format version; WriteMetadata
	// sets both.
	Format  string `json:"format"`
	Version int    `json:"version"`

	JobID string `json:"jobId"`
	ID    int64  `json:"id"`
	Kind  Kind   `json:"kind"`
	// Trigger and Done are the times (unix milliseconds) the checkpoint was
	// triggered and completed.
	Trigger int64 `json:"trigger"`
	Done    int64 `json:"done"`

	// Plan is the job plan the checkpoint was taken with.
	Plan json.RawMessage `json:"plan,omitempty"`
	// ModuleDigest identifies the WebAssembly module that ran the job.
	ModuleDigest   string `json:"moduleDigest,omitempty"`
	MaxParallelism int    `json:"maxParallelism"`

	Tasks []SubtaskState `json:"tasks"`
	// Metrics are the subtasks' reports, by TaskID.String().
	Metrics map[string]Metrics `json:"metrics,omitempty"`

	// Checksum is the hex SHA-256 of the compact JSON encoding of the
	// metadata with Checksum empty. WriteMetadata sets it and ReadMetadata
	// verifies it.
	Checksum string `json:"checksum"`
}

// checksum computes m's checksum: the SHA-256 of its compact JSON encoding
// with Checksum empty.
func (m *Metadata) checksum() (string, error) {
	c := *m
	c.Checksum = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Storage keeps the checkpoints of one job in a directory on a filesystem,
// laid out as the package documentation describes. Its methods are safe for
// concurrent use; concurrent writers must write distinct paths.
type Storage struct {
	root string
	fs   storageFS
}

// OpenStorage returns the storage rooted at root, creating the directory
// (and its parents) when it is missing.
func OpenStorage(root string) (*Storage, error) {
	if root == "" {
		return nil, errors.New("checkpoint: storage root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: storage root %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: create storage root: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: storage root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("checkpoint: storage root %s is not a directory", abs)
	}
	return &Storage{root: abs, fs: osStorageFS{}}, nil
}

// Root is the absolute path of the storage's directory.
func (s *Storage) Root() string { return s.root }

// Dir is the absolute path of checkpoint id's directory, ROOT/chk-%010d.
func (s *Storage) Dir(id int64) string { return filepath.Join(s.root, checkpointDirName(id)) }

func checkpointDirName(id int64) string { return fmt.Sprintf("chk-%010d", id) }

// parseCheckpointDirName returns the id of a directory named by
// checkpointDirName, and false for any other name.
func parseCheckpointDirName(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, "chk-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id < 1 || checkpointDirName(id) != name {
		return 0, false
	}
	return id, true
}

// TaskDir is the directory of task t's files relative to a checkpoint's
// directory: tasks/<chain>-<subtask>. It is the same for every id. Keyed
// state goes to TaskDir/state and channel state to TaskDir/channels.
func (s *Storage) TaskDir(id int64, t TaskID) string {
	return fmt.Sprintf("tasks/%d-%d", t.Chain, t.Subtask)
}

// WriteFile writes data to the file rel (slash-separated, relative to
// checkpoint id's directory) atomically: the file appears under its name
// complete and synced, or not at all. It creates missing directories.
func (s *Storage) WriteFile(id int64, rel string, data []byte) (FileHandle, error) {
	rel, err := s.checkWritable(id, rel)
	if err != nil {
		return FileHandle{}, err
	}
	return s.writeAtomic(id, rel, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// CopyFile copies the file src to rel (slash-separated, relative to
// checkpoint id's directory) atomically, hashing it while streaming.
func (s *Storage) CopyFile(id int64, rel string, src string) (FileHandle, error) {
	rel, err := s.checkWritable(id, rel)
	if err != nil {
		return FileHandle{}, err
	}
	return s.copyFile(id, rel, src)
}

func (s *Storage) copyFile(id int64, rel string, src string) (FileHandle, error) {
	f, err := os.Open(src)
	if err != nil {
		return FileHandle{}, fmt.Errorf("checkpoint: copy to %s: %w", s.relToRoot(id, rel), err)
	}
	defer f.Close()
	return s.writeAtomic(id, rel, func(w io.Writer) error {
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("copy from %s: %w", src, err)
		}
		return nil
	})
}

// CopyDir copies every regular file below srcDir to the directory rel
// (slash-separated, relative to checkpoint id's directory), keeping the
// files' paths below srcDir, each atomically, on a few goroutines. It
// returns the handles sorted by path. A srcDir holding anything other than
// directories and regular files is an error, as is an empty rel. After a
// failure, the files already copied stay in the incomplete checkpoint until
// Discard or CleanIncomplete removes it.
func (s *Storage) CopyDir(id int64, rel string, srcDir string) ([]FileHandle, error) {
	rel, err := s.checkWritable(id, rel)
	if err != nil {
		return nil, err
	}
	var files []string // below srcDir, slash-separated
	err = filepath.WalkDir(srcDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is a %s, not a regular file", p, d.Type())
		}
		r, err := filepath.Rel(srcDir, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(r))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: copy directory %s to %s: %w", srcDir, s.relToRoot(id, rel), err)
	}
	slices.Sort(files)
	// The directories first, so the copies do not race to create them.
	dirs := []string{rel}
	for _, f := range files {
		dirs = append(dirs, path.Join(rel, path.Dir(f)))
	}
	slices.Sort(dirs)
	for _, d := range slices.Compact(dirs) {
		if err := s.mkdirs(filepath.Join(s.Dir(id), filepath.FromSlash(d))); err != nil {
			return nil, fmt.Errorf("checkpoint: copy directory %s to %s in %s: %w", srcDir, s.relToRoot(id, rel), s.root, err)
		}
	}
	handles := make([]FileHandle, len(files))
	errs := parallel(len(files), true, func(i int) error {
		h, err := s.copyFile(id, path.Join(rel, files[i]), filepath.Join(srcDir, filepath.FromSlash(files[i])))
		handles[i] = h
		return err
	})
	if err := firstError(errs); err != nil {
		return nil, err
	}
	return handles, nil
}

// checkWritable validates id and rel for a write into checkpoint id, which
// must not be complete, and returns rel in clean, slash-separated form.
func (s *Storage) checkWritable(id int64, rel string) (string, error) {
	clean, err := cleanRel(rel)
	if err != nil {
		return "", fmt.Errorf("checkpoint: write to checkpoint %d: %w", id, err)
	}
	if clean == MetadataName {
		return "", fmt.Errorf("checkpoint: write to checkpoint %d: %s is reserved for WriteMetadata", id, MetadataName)
	}
	if err := s.checkIncomplete(id); err != nil {
		return "", fmt.Errorf("checkpoint: write %s: %w", clean, err)
	}
	return clean, nil
}

// checkIncomplete checks that id is a valid id and that checkpoint id is
// not complete.
func (s *Storage) checkIncomplete(id int64) error {
	if id < 1 {
		return fmt.Errorf("checkpoint id %d is not positive", id)
	}
	switch _, err := os.Lstat(filepath.Join(s.Dir(id), MetadataName)); {
	case err == nil:
		return fmt.Errorf("checkpoint %d in %s is complete and must not change", id, s.root)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return nil
}

// cleanRel checks that rel names a path below a checkpoint's directory and
// returns it clean and slash-separated.
func cleanRel(rel string) (string, error) {
	native := filepath.FromSlash(rel)
	if rel == "" || !filepath.IsLocal(native) {
		return "", fmt.Errorf("path %q is not a relative path inside the checkpoint directory", rel)
	}
	clean := filepath.ToSlash(filepath.Clean(native))
	if clean == "." {
		return "", fmt.Errorf("path %q names the checkpoint directory itself", rel)
	}
	return clean, nil
}

// relToRoot is rel (relative to checkpoint id's directory) relative to the
// storage root, as error messages name files.
func (s *Storage) relToRoot(id int64, rel string) string {
	return checkpointDirName(id) + "/" + rel
}

// writeAtomic creates the file rel of checkpoint id with the bytes fill
// writes: into a temporary file in the same directory, synced, renamed to
// its name, and the directory synced. On failure nothing remains under the
// final name or the temporary one.
func (s *Storage) writeAtomic(id int64, rel string, fill func(io.Writer) error) (FileHandle, error) {
	target := filepath.Join(s.Dir(id), filepath.FromSlash(rel))
	dir := filepath.Dir(target)
	fail := func(err error) (FileHandle, error) {
		return FileHandle{}, fmt.Errorf("checkpoint: write %s in %s: %w", s.relToRoot(id, rel), s.root, err)
	}
	if err := s.mkdirs(dir); err != nil {
		return fail(err)
	}
	f, err := s.fs.CreateTemp(dir, "."+filepath.Base(target)+".tmp-")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	err = fill(cw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, target)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fail(err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		// The name may not survive a crash: take it back, so that a failed
		// write never leaves a file that looks written.
		_ = os.Remove(target)
		return fail(err)
	}
	return FileHandle{Path: rel, Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// mkdirs creates dir and its missing parents. Their entries become durable
// when WriteMetadata syncs every directory of the checkpoint.
func (s *Storage) mkdirs(dir string) error {
	var missing []string
	for d := dir; ; {
		_, err := os.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		// A concurrent writer may have created it meanwhile.
		if err := s.fs.Mkdir(missing[i]); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// WriteMetadata completes checkpoint m.ID: it sets m's Format, Version and
// Checksum (and compacts m.Plan, as ReadMetadata returns it), makes every directory of the checkpoint durable, and writes
// _metadata atomically (temporary file, sync, rename, sync of the
// directory). Only then does the checkpoint count as complete; a checkpoint
// that is already complete is an error.
func (s *Storage) WriteMetadata(m *Metadata) error {
	if err := s.checkIncomplete(m.ID); err != nil {
		return fmt.Errorf("checkpoint: write metadata: %w", err)
	}
	if m.Kind != KindCheckpoint && m.Kind != KindSavepoint {
		return fmt.Errorf("checkpoint: write metadata of checkpoint %d: unknown kind %s", m.ID, m.Kind)
	}
	if len(m.Plan) > 0 {
		var plan bytes.Buffer
		if err := json.Compact(&plan, m.Plan); err != nil {
			return fmt.Errorf("checkpoint: write metadata of checkpoint %d: plan is not JSON: %w", m.ID, err)
		}
		m.Plan = plan.Bytes()
	}
	m.Format = MetadataFormat
	m.Version = MetadataVersion
	sum, err := m.checksum()
	if err != nil {
		return fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	m.Checksum = sum
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	dir := s.Dir(m.ID)
	if err := s.mkdirs(dir); err != nil {
		return fmt.Errorf("checkpoint: create %s: %w", dir, err)
	}
	// The files were synced as they were written; their directories'
	// entries, and the checkpoint directory's own entry in the root, must
	// be durable before _metadata claims the checkpoint complete.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return s.fs.SyncDir(p)
	})
	if err == nil {
		err = s.fs.SyncDir(s.root)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: sync directories of checkpoint %d in %s: %w", m.ID, s.root, err)
	}
	_, err = s.writeAtomic(m.ID, MetadataName, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

// ReadMetadata reads and checks the metadata of checkpoint id. It refuses a
// file of another format, of a version this wstream does not know, with a
// checksum that does not match, or recording another checkpoint id; its
// errors name the file.
func (s *Storage) ReadMetadata(id int64) (*Metadata, error) {
	name := filepath.Join(s.Dir(id), MetadataName)
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read metadata: %w", err)
	}
	// Format and version first: a newer version may have fields this one
	// does not know.
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("checkpoint: %s is not checkpoint metadata (%v): %w", name, err, ErrCorrupt)
	}
	if head.Format != MetadataFormat {
		return nil, fmt.Errorf("checkpoint: %s has format %q, want %q: not a wstream checkpoint",
			name, head.Format, MetadataFormat)
	}
	if head.Version > MetadataVersion {
		return nil, fmt.Errorf("checkpoint: %s has metadata version %d, written by a newer wstream; this one reads up to version %d",
			name, head.Version, MetadataVersion)
	}
	if head.Version < 1 {
		return nil, fmt.Errorf("checkpoint: %s has unknown metadata version %d", name, head.Version)
	}
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint: decode %s: %v: %w", name, err, ErrCorrupt)
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: checksum %s: %w", name, err)
	}
	if sum != m.Checksum {
		return nil, fmt.Errorf("checkpoint: %s: checksum mismatch: file records %q, content hashes to %q: %w",
			name, m.Checksum, sum, ErrCorrupt)
	}
	if m.ID != id {
		return nil, fmt.Errorf("checkpoint: %s records checkpoint %d, not %d: %w", name, m.ID, id, ErrCorrupt)
	}
	return &m, nil
}

// handles returns every file of m: state and channel state of each task.
func (m *Metadata) handles() []FileHandle {
	var hs []FileHandle
	for i := range m.Tasks {
		t := &m.Tasks[i]
		hs = append(hs, t.State...)
		for j := range t.Channels {
			hs = append(hs, t.Channels[j].File)
		}
	}
	return hs
}

// Verify checks every file of m (state and channel state of every task):
// that it exists and has the recorded size and SHA-256. Each problem is an
// error that wraps ErrCorrupt and names the file by its path relative to
// the root; all of them are returned, joined.
func (s *Storage) Verify(m *Metadata) error {
	hs := m.handles()
	errs := parallel(len(hs), false, func(i int) error {
		return s.verifyFile(m.ID, hs[i])
	})
	return errors.Join(errs...)
}

func (s *Storage) verifyFile(id int64, h FileHandle) error {
	r, err := s.open(id, h)
	if err != nil {
		return err
	}
	defer r.Close()
	if fi, err := r.f.Stat(); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", s.relToRoot(id, h.Path), err)
	} else if fi.Size() != h.Size {
		problem := "larger than"
		if fi.Size() < h.Size {
			problem = "truncated: smaller than"
		}
		return s.corrupt(id, h.Path, "%d bytes, %s the %d bytes the metadata records", fi.Size(), problem, h.Size)
	}
	_, err = io.Copy(io.Discard, r)
	return err
}

// corruptError is a problem with one file of a checkpoint.
type corruptError struct {
	path    string // relative to the storage root
	problem string
}

func (e *corruptError) Error() string        { return "checkpoint: " + e.path + ": " + e.problem }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func (s *Storage) corrupt(id int64, rel, format string, args ...any) error {
	return &corruptError{path: s.relToRoot(id, rel), problem: fmt.Sprintf(format, args...)}
}

// Open opens the file h of checkpoint id for reading. The reader returns an
// error wrapping ErrCorrupt, instead of io.EOF, when the bytes read are not
// h.Size bytes with SHA-256 h.SHA256; a missing file is such an error too.
func (s *Storage) Open(id int64, h FileHandle) (io.ReadCloser, error) {
	r, err := s.open(id, h)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Storage) open(id int64, h FileHandle) (*handleReader, error) {
	rel, err := cleanRel(h.Path)
	if err != nil || rel != h.Path || rel == MetadataName {
		return nil, s.corrupt(id, h.Path, "metadata names an invalid file path")
	}
	f, err := os.Open(filepath.Join(s.Dir(id), filepath.FromSlash(rel)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, s.corrupt(id, rel, "missing")
		}
		return nil, fmt.Errorf("checkpoint: open %s: %w", s.relToRoot(id, rel), err)
	}
	return &handleReader{f: f, h: sha256.New(), want: h, name: s.relToRoot(id, rel)}, nil
}

// handleReader reads a checkpoint file and checks it against its handle.
type handleReader struct {
	f    *os.File
	h    hash.Hash
	n    int64
	want FileHandle
	name string // relative to the storage root, for errors
	err  error  // sticky verdict
}

func (r *handleReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.f.Read(p)
	r.n += int64(n)
	r.h.Write(p[:n])
	switch {
	case r.n > r.want.Size:
		r.err = &corruptError{path: r.name, problem: fmt.Sprintf("larger than the %d bytes the metadata records", r.want.Size)}
		return n, r.err
	case err == io.EOF:
		if r.n < r.want.Size {
			r.err = &corruptError{path: r.name, problem: fmt.Sprintf("truncated: %d bytes, the metadata records %d", r.n, r.want.Size)}
		} else if got := hex.EncodeToString(r.h.Sum(nil)); got != r.want.SHA256 {
			r.err = &corruptError{path: r.name, problem: fmt.Sprintf("SHA-256 %s, the metadata records %s (content changed)", got, r.want.SHA256)}
		} else {
			r.err = io.EOF
		}
		return n, r.err
	case err != nil:
		return n, fmt.Errorf("checkpoint: read %s: %w", r.name, err)
	}
	return n, nil
}

func (r *handleReader) Close() error { return r.f.Close() }

// dirState is a checkpoint directory found in the root.
type dirState struct {
	id       int64
	complete bool // _metadata exists
}

// list returns the checkpoint directories in the root, by ascending id.
func (s *Storage) list() ([]dirState, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, err)
	}
	var dirs []dirState
	for _, e := range entries {
		id, ok := parseCheckpointDirName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		switch _, err := os.Lstat(filepath.Join(s.root, e.Name(), MetadataName)); {
		case err == nil:
			dirs = append(dirs, dirState{id: id, complete: true})
		case errors.Is(err, fs.ErrNotExist):
			dirs = append(dirs, dirState{id: id})
		default:
			return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, err)
		}
	}
	// Names sort as ids up to ten digits; longer ids do not.
	slices.SortFunc(dirs, func(a, b dirState) int { return cmp.Compare(a.id, b.id) })
	return dirs, nil
}

// Completed returns the ids of the complete checkpoints (those whose
// _metadata exists), ascending.
func (s *Storage) Completed() ([]int64, error) {
	dirs, err := s.list()
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, d := range dirs {
		if d.complete {
			ids = append(ids, d.id)
		}
	}
	return ids, nil
}

// MaxID returns the highest id with a directory, complete or not, and 0
// when there is none: a restarted coordinator numbers its checkpoints from
// MaxID()+1, so that no id is used twice.
func (s *Storage) MaxID() (int64, error) {
	dirs, err := s.list()
	if err != nil || len(dirs) == 0 {
		return 0, err
	}
	return dirs[len(dirs)-1].id, nil
}

// LatestUsable returns the metadata of the newest complete checkpoint whose
// metadata reads and whose files verify. skipped explains, for each newer
// complete checkpoint, why it was passed over. When none is usable the
// error wraps ErrNoCheckpoint.
func (s *Storage) LatestUsable() (m *Metadata, skipped []error, err error) {
	ids, err := s.Completed()
	if err != nil {
		return nil, nil, err
	}
	for i := len(ids) - 1; i >= 0; i-- {
		m, err := s.ReadMetadata(ids[i])
		if err == nil {
			err = s.Verify(m)
		}
		if err == nil {
			return m, skipped, nil
		}
		skipped = append(skipped, fmt.Errorf("checkpoint %d skipped: %w", ids[i], err))
	}
	return nil, skipped, fmt.Errorf("%w in %s (%d complete, all unusable)", ErrNoCheckpoint, s.root, len(ids))
}

// Discard removes checkpoint id. Its _metadata goes first, durably, so that
// a checkpoint whose removal a crash interrupts never looks complete.
// Discarding an id without a directory does nothing.
func (s *Storage) Discard(id int64) error {
	dir := s.Dir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	switch err := os.Remove(filepath.Join(dir, MetadataName)); {
	case err == nil:
		if err := s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("checkpoint: discard checkpoint %d in %s: %w", id, s.root, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("checkpoint: discard checkpoint %d: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("checkpoint: discard checkpoint %d: %w", id, err)
	}
	if err := s.fs.SyncDir(s.root); err != nil {
		return fmt.Errorf("checkpoint: discard checkpoint %d in %s: %w", id, s.root, err)
	}
	return nil
}

// CleanIncomplete removes the directories of checkpoints without
// _metadata, left by a crash or an abort, and returns their ids. Call it
// when no checkpoint is in progress, such as when a job (re)starts.
func (s *Storage) CleanIncomplete() ([]int64, error) {
	dirs, err := s.list()
	if err != nil {
		return nil, err
	}
	var removed []int64
	for _, d := range dirs {
		if d.complete {
			continue
		}
		if err := os.RemoveAll(s.Dir(d.id)); err != nil {
			return removed, fmt.Errorf("checkpoint: remove incomplete checkpoint %d: %w", d.id, err)
		}
		removed = append(removed, d.id)
	}
	if len(removed) > 0 {
		if err := s.fs.SyncDir(s.root); err != nil {
			return removed, fmt.Errorf("checkpoint: remove incomplete checkpoints in %s: %w", s.root, err)
		}
	}
	return removed, nil
}

// Restore copies the keyed-state files of task t in checkpoint m into dst,
// which it creates and which must be empty, verifying each file's size and
// SHA-256 while copying. The files keep their paths below
// TaskDir(m.ID, t)/state, where every state file of t must lie, so dst is
// then the Pebble directory the task snapshotted. On failure dst is left
// empty. The copies are not synced: a crash during a restore restarts it.
func (s *Storage) Restore(m *Metadata, t TaskID, dst string) error {
	var task *SubtaskState
	for i := range m.Tasks {
		if m.Tasks[i].Task == t {
			task = &m.Tasks[i]
			break
		}
	}
	if task == nil {
		return fmt.Errorf("checkpoint: restore: checkpoint %d in %s has no state for task %s", m.ID, s.root, t)
	}
	prefix := s.TaskDir(m.ID, t) + "/state/"
	for _, h := range task.State {
		if !strings.HasPrefix(h.Path, prefix) || strings.TrimPrefix(h.Path, prefix) == "" {
			return s.corrupt(m.ID, h.Path, "state file of task %s outside %s", t, prefix)
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("checkpoint: restore task %s: %w", t, err)
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("checkpoint: restore task %s: %w", t, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("checkpoint: restore task %s: %s is not empty (holds %s)", t, dst, entries[0].Name())
	}
	errs := parallel(len(task.State), true, func(i int) error {
		h := task.State[i]
		return s.restoreFile(m.ID, h, filepath.Join(dst, filepath.FromSlash(strings.TrimPrefix(h.Path, prefix))))
	})
	if err := firstError(errs); err != nil {
		if entries, rerr := os.ReadDir(dst); rerr == nil {
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dst, e.Name()))
			}
		}
		return fmt.Errorf("checkpoint: restore task %s of checkpoint %d into %s: %w", t, m.ID, dst, err)
	}
	return nil
}

func (s *Storage) restoreFile(id int64, h FileHandle, target string) error {
	r, err := s.Open(id, h)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// parallel calls fn(i) for i in [0, n) on up to copyWorkers goroutines and
// returns the errors by index. With stopOnError, indexes not yet started
// when a call fails are skipped.
func parallel(n int, stopOnError bool, fn func(i int) error) []error {
	errs := make([]error, n)
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(n, copyWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || (stopOnError && failed.Load()) {
					return
				}
				if errs[i] = fn(i); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return errs
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// storageFS is what a Storage creates, writes, renames and syncs through,
// so that tests can make any of these operations fail.
type storageFS interface {
	// CreateTemp creates a new file in dir whose name begins with prefix.
	CreateTemp(dir, prefix string) (storageFile, error)
	Rename(oldpath, newpath string) error
	Mkdir(dir string) error
	// SyncDir makes the entries of the directory dir durable.
	SyncDir(dir string) error
}

// storageFile is a file being written through a storageFS.
type storageFile interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

// osStorageFS is the storageFS of the operating system.
type osStorageFS struct{}

func (osStorageFS) CreateTemp(dir, prefix string) (storageFile, error) {
	return os.CreateTemp(dir, prefix+"*")
}

func (osStorageFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osStorageFS) Mkdir(dir string) error { return os.Mkdir(dir, 0o755) }

func (osStorageFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
