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
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/wstream/wstream/internal/durable"
)

// MetadataFormat names the format of a checkpoint's _metadata file.
const MetadataFormat = "wstream-checkpoint"

// MetadataVersion is the newest version of the metadata format this
// wstream reads. WriteMetadata writes version 1 for a checkpoint whose file
// handles are all plain (no Shared, Compressed, RawSize or Name), which
// older wstreams read, and version 2, which they refuse as newer, for one
// with any such handle.
const MetadataVersion = 2

// SharedDir is the directory, below the storage root, of the shared
// (content-addressed) files; see PutShared.
const SharedDir = "shared"

// MetadataName is the name of the file, in a checkpoint's directory, whose
// presence marks the checkpoint complete.
const MetadataName = "_metadata"

// maxZstdWindow bounds the window of the zstd frames the readers accept.
// A decoder allocates the window a frame's header declares as it starts
// the frame, so without a bound a few stored bytes could make each reader
// allocate 512 MiB. The writers (SetCompression's levels, and the
// canonical savepoint streams) declare at most 8 MiB.
const maxZstdWindow = 8 << 20

// copyWorkers bounds the goroutines of one CopyDir, Verify or Restore.
const copyWorkers = 4

// ErrCorrupt marks errors about checkpoint files that are missing or whose
// bytes are not what the metadata records. Test for it with errors.Is.
var ErrCorrupt = errors.New("checkpoint: corrupt")

// ErrNoCheckpoint is returned (wrapped) by LatestUsable when no completed
// checkpoint reads and verifies.
var ErrNoCheckpoint = errors.New("checkpoint: no usable checkpoint")

// ErrUnavailable marks errors about checkpoint files that cannot be read
// now (a read or listing failed or timed out: the disk, the object store or
// the network) although nothing says they are damaged. Unlike ErrCorrupt it
// says nothing about the checkpoint: the same read may succeed later, so a
// restore must wait and retry, never pass the checkpoint over. Test for it
// with errors.Is.
var ErrUnavailable = errors.New("checkpoint: unavailable")

// MarkUnavailable wraps err, a check that could not answer now (a read
// that timed out), so that it matches ErrUnavailable; a verdict of
// corruption, or nil, is returned as it is.
func MarkUnavailable(err error) error { return unavailable(err) }

// unavailable wraps err, a failure to read or list storage, in
// ErrUnavailable, unless it is a verdict of corruption already.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() + " (cannot be read now)" }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, ErrUnavailable}
}

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

// Storage keeps the checkpoints of one job in a directory on a filesystem
// (OpenStorage), or with the same layout in a JetStream object store
// (OpenObjectStorage, OpenStorageAt), as the package documentation
// describes. Its methods are safe for
// concurrent use; concurrent writers must write distinct paths.
type Storage struct {
	root string // a directory, or the location of obj
	fs   storageFS
	// obj, when set, keeps the files in a JetStream object store instead
	// of below root; see OpenObjectStorage.
	obj *objectBackend

	level atomic.Int32 // zstd level of later copies; 0 for none

	// sharedLocks serialise PutShared and RemoveShared of one name, by the
	// name's first byte.
	sharedLocks [256]sync.Mutex
	sharedMu    sync.Mutex
	// sharedSeen caches the handles of shared files already inspected or
	// written, so that a repeated PutShared does not read the file again.
	sharedSeen map[string]sharedEntry
	// sharedRootSynced says the shared directory's entry in the root has
	// been synced.
	sharedRootSynced atomic.Bool
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

// Root is the absolute path of the storage's directory, or, for an object
// store, its location (nats-obj://BUCKET/PREFIX).
func (s *Storage) Root() string { return s.root }

// Dir is the absolute path of checkpoint id's directory, ROOT/chk-%010d;
// for an object store, ROOT/chk-%010d is the location the checkpoint's
// object names begin with.
func (s *Storage) Dir(id int64) string {
	if s.obj != nil {
		return s.root + "/" + DirName(id)
	}
	return filepath.Join(s.root, DirName(id))
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
	return s.writeAtomic(id, rel, 0, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom stores in checkpoint id's file rel what fill writes, as it is:
// for content that is compressed already (a canonical savepoint), which
// compressing again would only slow down. It streams: nothing is staged in
// a temporary copy.
func (s *Storage) WriteFrom(id int64, rel string, fill func(io.Writer) error) (FileHandle, error) {
	rel, err := s.checkWritable(id, rel)
	if err != nil {
		return FileHandle{}, err
	}
	return s.writeAtomic(id, rel, 0, fill)
}

// SetCompression sets how later CopyFile, CopyDir and PutShared calls store
// files: level 0 (the default) stores them as they are, levels 1 to 4
// (zstd.SpeedFastest to zstd.SpeedBestCompression) zstd-compressed, their
// handles then marked Compressed. WriteFile never compresses. Readers
// decompress whatever the handle says, so the level may change at any time.
func (s *Storage) SetCompression(level int) error {
	if level < 0 || level > int(zstd.SpeedBestCompression) {
		return fmt.Errorf("checkpoint: compression level %d is not 0 (off) or a zstd level from %d to %d",
			level, zstd.SpeedFastest, zstd.SpeedBestCompression)
	}
	s.level.Store(int32(level))
	return nil
}

func (s *Storage) compression() int { return int(s.level.Load()) }

// CopyFile copies the file src to rel (slash-separated, relative to
// checkpoint id's directory) atomically, hashing it while streaming, and
// compressing it as SetCompression says.
func (s *Storage) CopyFile(id int64, rel string, src string) (FileHandle, error) {
	rel, err := s.checkWritable(id, rel)
	if err != nil {
		return FileHandle{}, err
	}
	return s.copyFile(id, rel, src, s.compression())
}

func (s *Storage) copyFile(id int64, rel string, src string, level int) (FileHandle, error) {
	f, err := os.Open(src)
	if err != nil {
		return FileHandle{}, fmt.Errorf("checkpoint: copy to %s: %w", s.relToRoot(id, rel), err)
	}
	defer f.Close()
	return s.writeAtomic(id, rel, level, func(w io.Writer) error {
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("copy from %s: %w", src, err)
		}
		return nil
	})
}

// CopyDir copies every regular file below srcDir to the directory rel
// (slash-separated, relative to checkpoint id's directory), keeping the
// files' paths below srcDir, each atomically and compressed as
// SetCompression said when CopyDir began, on a few goroutines. It
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
		if s.obj != nil {
			break // an object store has no directories
		}
		if err := s.mkdirs(filepath.Join(s.Dir(id), filepath.FromSlash(d))); err != nil {
			return nil, fmt.Errorf("checkpoint: copy directory %s to %s in %s: %w", srcDir, s.relToRoot(id, rel), s.root, err)
		}
	}
	handles := make([]FileHandle, len(files))
	level := s.compression()
	errs := parallel(len(files), true, func(i int) error {
		h, err := s.copyFile(id, path.Join(rel, files[i]), filepath.Join(srcDir, filepath.FromSlash(files[i])), level)
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
	if s.obj != nil {
		switch ok, err := s.obj.exists(s.relToRoot(id, MetadataName)); {
		case err != nil:
			return err
		case ok:
			return fmt.Errorf("checkpoint %d in %s is complete and must not change", id, s.root)
		}
		return nil
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
	return DirName(id) + "/" + rel
}

// writeAtomic creates the file rel of checkpoint id with the bytes fill
// writes, zstd-compressed at level unless it is 0, with writeAtomicAt.
func (s *Storage) writeAtomic(id int64, rel string, level int, fill func(io.Writer) error) (FileHandle, error) {
	if s.obj != nil {
		w, err := s.obj.put(s.relToRoot(id, rel), writeOpts{level: level}, nil, fill)
		if err != nil {
			return FileHandle{}, fmt.Errorf("checkpoint: write %s in %s: %w", s.relToRoot(id, rel), s.root, err)
		}
		return w.handle(rel, level > 0), nil
	}
	// A file of an incomplete checkpoint needs its directory synced only
	// before the checkpoint counts as complete, which WriteMetadata does
	// for every directory of the checkpoint at once; _metadata itself
	// needs it at once.
	o := writeOpts{level: level, deferDirSync: rel != MetadataName}
	w, err := s.writeAtomicAt(filepath.Join(s.Dir(id), filepath.FromSlash(rel)), s.relToRoot(id, rel), o, fill)
	if err != nil {
		return FileHandle{}, err
	}
	return w.handle(rel, level > 0), nil
}

// writeOpts says how writeAtomicAt stores a file.
type writeOpts struct {
	level   int  // zstd level; 0 stores the bytes as they are
	hashRaw bool // compute the SHA-256 of the raw bytes too
	// check, when set, vets the file before it gets its name.
	check func(written) error
	// publish gives the synced temporary file its name; nil renames it.
	publish func(tmp, target string) error
	// deferDirSync leaves the sync of the file's directory to the caller
	// (a checkpoint's files: WriteMetadata syncs their directories).
	deferDirSync bool
}

// written describes a file writeAtomicAt wrote.
type written struct {
	size   int64  // stored bytes
	sum    string // SHA-256 of the stored bytes
	raw    int64  // bytes fill wrote
	rawSum string // their SHA-256, with hashRaw
}

func (w written) handle(p string, compressed bool) FileHandle {
	h := FileHandle{Path: p, Size: w.size, SHA256: w.sum}
	if compressed {
		h.Compressed, h.RawSize = true, w.raw
	}
	return h
}

// writeAtomicAt creates the file target (name is how errors call it) with
// the bytes fill writes: into a temporary file in the same directory,
// synced, renamed to its name, and the directory synced (unless
// o.deferDirSync). On failure nothing remains under the final name or the
// temporary one.
func (s *Storage) writeAtomicAt(target, name string, o writeOpts, fill func(io.Writer) error) (written, error) {
	dir := filepath.Dir(target)
	fail := func(err error) (written, error) {
		return written{}, fmt.Errorf("checkpoint: write %s in %s: %w", name, s.root, err)
	}
	if err := s.mkdirs(dir); err != nil {
		return fail(err)
	}
	f, err := s.fs.CreateTemp(dir, "."+filepath.Base(target)+".tmp-")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	w, err := encodeInto(f, o, fill)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if o.publish != nil {
			err = o.publish(tmp, target)
		} else {
			err = s.fs.Rename(tmp, target)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fail(err)
	}
	if o.deferDirSync {
		return w, nil
	}
	if err := s.fs.SyncDir(dir); err != nil {
		// The name may not survive a crash: take it back, so that a failed
		// write never leaves a file that looks written.
		_ = os.Remove(target)
		return fail(err)
	}
	return w, nil
}

// encodeInto writes to dst what fill writes, zstd-compressed at o.level
// unless it is 0, hashing the stored (and with o.hashRaw the raw) bytes,
// and vets the result with o.check.
func encodeInto(dst io.Writer, o writeOpts, fill func(io.Writer) error) (written, error) {
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(dst, h)}
	raw := &countingWriter{w: cw}
	var rawHash hash.Hash
	var enc *zstd.Encoder
	var err error
	if o.level > 0 {
		enc, err = getEncoder(o.level, cw)
		raw.w = enc
		if o.hashRaw {
			rawHash = sha256.New()
			raw.w = io.MultiWriter(enc, rawHash)
		}
	}
	if err == nil {
		err = fill(raw)
	}
	if enc != nil {
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			putEncoder(o.level, enc)
		}
	}
	var w written
	if err == nil {
		w = written{size: cw.n, sum: hex.EncodeToString(h.Sum(nil)), raw: raw.n}
		w.rawSum = w.sum
		if rawHash != nil {
			w.rawSum = hex.EncodeToString(rawHash.Sum(nil))
		}
		if o.check != nil {
			err = o.check(w)
		}
	}
	return w, err
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
	data, err := encodeMetadata(m)
	if err != nil {
		return err
	}
	if s.obj != nil {
		// Every file was stored before this: the _metadata object, stored
		// last and atomically, completes the checkpoint.
		if _, err := s.obj.put(s.relToRoot(m.ID, MetadataName), writeOpts{}, nil, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		}); err != nil {
			return fmt.Errorf("checkpoint: write %s in %s: %w", s.relToRoot(m.ID, MetadataName), s.root, err)
		}
		return nil
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
	_, err = s.writeAtomic(m.ID, MetadataName, 0, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

// encodeMetadata sets m's Format, Version and Checksum (and compacts
// m.Plan) and returns the content of its _metadata file.
func encodeMetadata(m *Metadata) ([]byte, error) {
	if m.Kind != KindCheckpoint && m.Kind != KindSavepoint {
		return nil, fmt.Errorf("checkpoint: write metadata of checkpoint %d: unknown kind %s", m.ID, m.Kind)
	}
	if len(m.Plan) > 0 {
		var plan bytes.Buffer
		if err := json.Compact(&plan, m.Plan); err != nil {
			return nil, fmt.Errorf("checkpoint: write metadata of checkpoint %d: plan is not JSON: %w", m.ID, err)
		}
		m.Plan = plan.Bytes()
	}
	m.Format = MetadataFormat
	m.Version = 1
	for _, h := range m.handles() {
		if h.Shared || h.Compressed || h.RawSize != 0 || h.Name != "" {
			m.Version = 2
			break
		}
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	m.Checksum = sum
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	return data, nil
}

// ReadMetadata reads and checks the metadata of checkpoint id. It refuses a
// file of another format, of a version this wstream does not know, with a
// checksum that does not match, or recording another checkpoint id or an
// unknown kind; its errors name the file.
func (s *Storage) ReadMetadata(id int64) (*Metadata, error) {
	var name string
	var data []byte
	var err error
	if s.obj != nil {
		name = s.Dir(id) + "/" + MetadataName
		data, err = s.obj.readAll(s.relToRoot(id, MetadataName))
	} else {
		name = filepath.Join(s.Dir(id), MetadataName)
		data, err = s.fs.ReadFile(name)
	}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		// Removed since it was listed: not there to restore.
		return nil, &corruptError{path: s.relToRoot(id, MetadataName), problem: "missing", cause: err}
	default:
		return nil, fmt.Errorf("checkpoint: read metadata: %w", unavailable(err))
	}
	return decodeMetadata(name, id, data)
}

// decodeMetadata decodes and checks data, the _metadata file name of
// checkpoint id, as ReadMetadata describes.
func decodeMetadata(name string, id int64, data []byte) (*Metadata, error) {
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
	// WriteMetadata writes no other kind; readers would take one for a
	// checkpoint.
	if m.Kind != KindCheckpoint && m.Kind != KindSavepoint {
		return nil, fmt.Errorf("checkpoint: %s records the unknown kind %d: %w", name, uint8(m.Kind), ErrCorrupt)
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

// Verify checks every file of m (state and channel state of every task,
// shared files included): that it exists and has the recorded size and
// SHA-256, of the stored bytes for a compressed file. Each problem is an
// error that wraps ErrCorrupt and names the file by its path relative to
// the root (shared/<name> for a shared file); all of them are returned,
// joined.
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
	r.count = &readStats.verified
	if size, err := r.size(); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", r.name, unavailable(err))
	} else if size != h.Size {
		problem := "larger than"
		if size < h.Size {
			problem = "truncated: smaller than"
		}
		return &corruptError{path: r.name, problem: fmt.Sprintf("%d bytes, %s the %d bytes the metadata records", size, problem, h.Size)}
	}
	_, err = io.Copy(io.Discard, r)
	return err
}

// corruptError is a problem with one file of a checkpoint.
type corruptError struct {
	path    string // relative to the storage root
	problem string
	cause   error // what found the problem, if anything
}

func (e *corruptError) Error() string        { return "checkpoint: " + e.path + ": " + e.problem }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }
func (e *corruptError) Unwrap() error        { return e.cause }

func (s *Storage) corrupt(id int64, rel, format string, args ...any) error {
	return &corruptError{path: s.relToRoot(id, rel), problem: fmt.Sprintf(format, args...)}
}

// Open opens the file h of checkpoint id for reading; a shared file is
// found below the root whatever id is. The reader returns the raw bytes,
// decompressing a compressed file. It returns an error wrapping ErrCorrupt,
// instead of io.EOF, when the bytes stored are not h.Size bytes with
// SHA-256 h.SHA256, or do not decompress to h.RawSize bytes; a missing file
// is such an error too.
func (s *Storage) Open(id int64, h FileHandle) (io.ReadCloser, error) {
	r, err := s.open(id, h)
	if err != nil {
		return nil, err
	}
	if h.Compressed {
		return &rawReader{hr: r}, nil
	}
	return r, nil
}

// locate returns where the file of h (of checkpoint id) lies, and its name
// relative to the root for errors.
func (s *Storage) locate(id int64, h FileHandle) (abs, name string, err error) {
	if h.Shared {
		base, ok := sharedBase(h.Path)
		if !ok {
			return "", h.Path, &corruptError{path: h.Path, problem: "metadata names an invalid shared file path"}
		}
		if s.obj != nil {
			return SharedDir + "/" + base, h.Path, nil
		}
		return filepath.Join(s.root, SharedDir, base), h.Path, nil
	}
	rel, err := cleanRel(h.Path)
	if err != nil || rel != h.Path || rel == MetadataName {
		return "", s.relToRoot(id, h.Path), s.corrupt(id, h.Path, "metadata names an invalid file path")
	}
	if s.obj != nil {
		return s.relToRoot(id, rel), s.relToRoot(id, rel), nil
	}
	return filepath.Join(s.Dir(id), filepath.FromSlash(rel)), s.relToRoot(id, rel), nil
}

// sharedBase returns the file name of the shared path p, "shared/<name>".
func sharedBase(p string) (string, bool) {
	base, ok := strings.CutPrefix(p, SharedDir+"/")
	if !ok || base == "" || strings.ContainsAny(base, `/\`) || strings.HasPrefix(base, ".") || !filepath.IsLocal(base) {
		return "", false
	}
	return base, true
}

func (s *Storage) open(id int64, h FileHandle) (*handleReader, error) {
	abs, name, err := s.locate(id, h)
	if err != nil {
		return nil, err
	}
	if !h.Compressed && h.RawSize != 0 && h.RawSize != h.Size {
		return nil, &corruptError{path: name, problem: fmt.Sprintf("metadata records %d raw bytes for an uncompressed file of %d", h.RawSize, h.Size)}
	}
	if s.obj != nil {
		// abs is the object's name relative to the prefix.
		rc, size, err := s.obj.open(abs)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, &corruptError{path: name, problem: "missing"}
			}
			return nil, fmt.Errorf("checkpoint: open %s in %s: %w", name, s.root, unavailable(err))
		}
		return &handleReader{f: rc, size: func() (int64, error) { return size, nil },
			h: sha256.New(), want: h, name: name, count: &readStats.restored}, nil
	}
	f, err := s.fs.Open(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &corruptError{path: name, problem: "missing"}
		}
		return nil, fmt.Errorf("checkpoint: open %s: %w", name, unavailable(err))
	}
	size := func() (int64, error) {
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	return &handleReader{f: f, size: size, h: sha256.New(), want: h, name: name, count: &readStats.restored}, nil
}

// readStats counts the stored bytes this process read from checkpoint
// storage, for progress displays: a restore verifies every file and then
// reads it again.
var readStats struct{ verified, restored atomic.Int64 }

// ReadProgress returns how many stored bytes of checkpoint files this
// process has read so far to verify them (Verify) and to restore or import
// them (Open, Restore).
func ReadProgress() (verified, restored int64) {
	return readStats.verified.Load(), readStats.restored.Load()
}

// handleReader reads a checkpoint file's stored bytes and checks them
// against its handle.
type handleReader struct {
	f     io.ReadCloser
	size  func() (int64, error) // of the stored bytes
	h     hash.Hash
	n     int64
	want  FileHandle
	name  string        // relative to the storage root, for errors
	err   error         // sticky verdict
	count *atomic.Int64 // the ReadProgress counter this read adds to
}

func (r *handleReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.f.Read(p)
	r.n += int64(n)
	r.count.Add(int64(n))
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
		r.err = fmt.Errorf("checkpoint: read %s: %w", r.name, unavailable(err))
		return n, r.err
	}
	return n, nil
}

func (r *handleReader) Close() error { return r.f.Close() }

// rawReader decompresses a compressed file read through a handleReader.
// The stored bytes' verdict comes first: when they are damaged, that is the
// error, whatever the decompression made of them.
type rawReader struct {
	hr  *handleReader
	dec *zstd.Decoder
	n   int64
	err error // sticky
}

func (r *rawReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.dec == nil {
		dec, err := getDecoder(r.hr)
		r.dec = dec
		if err != nil {
			r.err = r.verdict(err)
			return 0, r.err
		}
	}
	n, err := r.dec.Read(p)
	r.n += int64(n)
	switch {
	case r.n > r.hr.want.RawSize:
		r.err = r.verdict(fmt.Errorf("decompresses to more than the %d bytes the metadata records", r.hr.want.RawSize))
	case err == io.EOF:
		r.err = r.verdict(nil)
		if r.err == io.EOF && r.n != r.hr.want.RawSize {
			r.err = &corruptError{path: r.hr.name, problem: fmt.Sprintf("decompresses to %d bytes, the metadata records %d", r.n, r.hr.want.RawSize)}
		}
	case err != nil:
		r.err = r.verdict(fmt.Errorf("does not decompress: %v", err))
	default:
		return n, nil
	}
	return n, r.err
}

// verdict reads the rest of the stored bytes and returns their error, if
// any; else the decompression problem, as corruption; else io.EOF.
func (r *rawReader) verdict(problem error) error {
	if _, err := io.Copy(io.Discard, r.hr); err != nil {
		return err
	}
	if problem != nil {
		return &corruptError{path: r.hr.name, problem: problem.Error()}
	}
	return io.EOF
}

func (r *rawReader) Close() error {
	if r.dec != nil {
		putDecoder(r.dec)
		r.dec = nil
	}
	return r.hr.Close()
}

// dirState is a checkpoint directory found in the root.
type dirState struct {
	id       int64
	complete bool // _metadata exists
}

// list returns the checkpoint directories in the root, by ascending id.
func (s *Storage) list() ([]dirState, error) {
	if s.obj != nil {
		dirs, err := s.obj.checkpoints()
		return dirs, unavailable(err)
	}
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, unavailable(err))
	}
	var dirs []dirState
	for _, e := range entries {
		id, ok := ParseDirName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		switch _, err := os.Lstat(filepath.Join(s.root, e.Name(), MetadataName)); {
		case err == nil:
			dirs = append(dirs, dirState{id: id, complete: true})
		case errors.Is(err, fs.ErrNotExist):
			dirs = append(dirs, dirState{id: id})
		default:
			return nil, fmt.Errorf("checkpoint: list %s: %w", s.root, unavailable(err))
		}
	}
	sortDirs(dirs)
	return dirs, nil
}

// sortDirs sorts dirs by ascending id. (Names sort as ids up to ten
// digits; longer ids do not.)
func sortDirs(dirs []dirState) {
	slices.SortFunc(dirs, func(a, b dirState) int { return cmp.Compare(a.id, b.id) })
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
// complete checkpoint, why it was passed over: it is damaged (ErrCorrupt),
// or of a format this wstream does not read. When none is usable the error
// wraps ErrNoCheckpoint. A checkpoint that cannot be read now is not passed
// over: the search stops there with an error that wraps ErrUnavailable, so
// that a restore neither falls back to an older checkpoint (sinks may have
// committed on the newer one) nor starts from empty state while a
// checkpoint exists; the caller retries later.
func (s *Storage) LatestUsable() (m *Metadata, skipped []error, err error) {
	return s.LatestUsableWith(nil)
}

// LatestUsableWith is LatestUsable with a further test: a checkpoint is
// usable only when accept (if not nil) returns nil for its metadata too,
// for what lies outside this storage (in-flight data left in a stream).
// An error from accept that wraps ErrUnavailable stops the search as a
// read of the storage does.
func (s *Storage) LatestUsableWith(accept func(*Metadata) error) (m *Metadata, skipped []error, err error) {
	ids, err := s.Completed()
	if err != nil {
		return nil, nil, err
	}
	for i := len(ids) - 1; i >= 0; i-- {
		m, err := s.ReadMetadata(ids[i])
		if err == nil {
			err = s.Verify(m)
		}
		if err == nil && accept != nil {
			err = accept(m)
		}
		if err == nil {
			return m, skipped, nil
		}
		if errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCorrupt) {
			return nil, skipped, fmt.Errorf("checkpoint %d in %s cannot be read now: %w", ids[i], s.root, err)
		}
		skipped = append(skipped, fmt.Errorf("checkpoint %d skipped: %w", ids[i], err))
	}
	return nil, skipped, fmt.Errorf("%w in %s (%d complete, all unusable)", ErrNoCheckpoint, s.root, len(ids))
}

// Discard removes checkpoint id. Its _metadata goes first, durably, so that
// a checkpoint whose removal a crash interrupts never looks complete.
// Discarding an id without a directory does nothing.
func (s *Storage) Discard(id int64) error {
	if s.obj != nil {
		if err := s.obj.removeCheckpoint(id); err != nil {
			return fmt.Errorf("checkpoint: discard checkpoint %d in %s: %w", id, s.root, err)
		}
		return nil
	}
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
// _metadata, left by a crash or an abort, and returns their ids, and the
// temporary files of shared files in ROOT/shared. Call it when no
// checkpoint is in progress, such as when a job (re)starts.
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
		if s.obj != nil {
			if err := s.obj.removeCheckpoint(d.id); err != nil {
				return removed, fmt.Errorf("checkpoint: remove incomplete checkpoint %d in %s: %w", d.id, s.root, err)
			}
			removed = append(removed, d.id)
			continue
		}
		if err := os.RemoveAll(s.Dir(d.id)); err != nil {
			return removed, fmt.Errorf("checkpoint: remove incomplete checkpoint %d: %w", d.id, err)
		}
		removed = append(removed, d.id)
	}
	if s.obj != nil {
		// An object store has no temporary names: an interrupted put
		// leaves no object.
		return removed, nil
	}
	// Temporary files of shared files that a crash left.
	dir := filepath.Join(s.root, SharedDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return removed, fmt.Errorf("checkpoint: clean %s: %w", dir, err)
	}
	temps := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("checkpoint: clean %s: %w", dir, err)
			}
			temps++
		}
	}
	if temps > 0 {
		if err := s.fs.SyncDir(dir); err != nil {
			return removed, fmt.Errorf("checkpoint: clean %s: %w", dir, err)
		}
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
// SHA-256 while copying and decompressing compressed files. A file's path
// in the snapshot is its Path, or, for a shared file, its Name; every such
// path must lie below TaskDir(m.ID, t)/state, and the file is restored to
// the same path below dst, so dst is then the Pebble directory the task
// snapshotted. On failure dst is left empty. The copies are not synced: a
// crash during a restore restarts it.
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
		p := h.Path
		if h.Shared {
			if h.Name == "" {
				return &corruptError{path: h.Path, problem: fmt.Sprintf("shared state file of task %s has no name in checkpoint %d", t, m.ID)}
			}
			if clean, err := cleanRel(h.Name); err != nil || clean != h.Name {
				return &corruptError{path: h.Path, problem: fmt.Sprintf("shared state file of task %s has the invalid name %q in checkpoint %d", t, h.Name, m.ID)}
			}
			p = h.Name
		}
		if !strings.HasPrefix(p, prefix) || strings.TrimPrefix(p, prefix) == "" {
			return s.corrupt(m.ID, p, "state file of task %s outside %s", t, prefix)
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
		p := h.Path
		if h.Shared {
			p = h.Name
		}
		return s.restoreFile(m.ID, h, filepath.Join(dst, filepath.FromSlash(strings.TrimPrefix(p, prefix))))
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

// sharedEntry is a shared file's handle as PutShared last saw the file.
type sharedEntry struct {
	h       FileHandle
	size    int64
	modTime int64 // unix nanoseconds
}

// errSharedExists says another writer gave a shared file its name first.
var errSharedExists = errors.New("shared file already exists")

// PutShared stores the file src as a shared file named by its content,
// ROOT/shared/<rawSHA256>.<ext> where ext is src's extension (none when src
// has none), compressed as SetCompression says, atomically (a temporary
// file, synced, linked or renamed to its name, the directory synced).
// rawSHA256 is the hex SHA-256 of src's bytes; when it is "", PutShared
// reads src once to compute it. A given digest is checked against the
// bytes copied, so a wrong one fails and stores nothing.
//
// When a file of that name already exists and holds those bytes (stored
// compressed or not), nothing is copied and uploaded is false; the handle
// then describes the existing file, which PutShared reads once per Storage
// to learn it. An existing file that does not hold those bytes is damaged
// and replaced (uploaded is true).
//
// The handle has Shared set, Path "shared/<name>", Size and SHA256 of the
// stored bytes, RawSize the size of src's bytes and Compressed as stored;
// Name is empty, for the caller to set (see FileHandle.Name). Shared files
// belong to no checkpoint: Discard leaves them, and whoever tracks their
// references removes them with RemoveShared.
func (s *Storage) PutShared(src string, rawSHA256 string) (h FileHandle, uploaded bool, err error) {
	fail := func(err error) (FileHandle, bool, error) {
		return FileHandle{}, false, fmt.Errorf("checkpoint: put shared file %s: %w", src, err)
	}
	if rawSHA256 == "" {
		if rawSHA256, err = FileSHA256(src); err != nil {
			return fail(err)
		}
	}
	rawSHA256 = strings.ToLower(rawSHA256)
	if b, err := hex.DecodeString(rawSHA256); err != nil || len(b) != sha256.Size {
		return fail(fmt.Errorf("%q is not a hex SHA-256", rawSHA256))
	}
	name := rawSHA256
	if ext := strings.TrimPrefix(filepath.Ext(src), "."); ext != "" {
		if strings.ContainsAny(ext, `/\`) || !filepath.IsLocal(ext) {
			return fail(fmt.Errorf("extension %q cannot name a shared file", ext))
		}
		name += "." + ext
	}
	rel := SharedDir + "/" + name
	target := filepath.Join(s.root, SharedDir, name)

	lock := s.sharedLock(name)
	lock.Lock()
	defer lock.Unlock()

	if s.obj != nil {
		h, uploaded, err := s.obj.putShared(rel, src, rawSHA256, s.compression())
		if err != nil {
			return fail(err)
		}
		return h, uploaded, nil
	}
	existing, state, err := s.inspectShared(rel, target, rawSHA256)
	if err != nil {
		return fail(err)
	}
	if state == sharedIntact {
		return existing, false, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	level := s.compression()
	opts := writeOpts{
		level:   level,
		hashRaw: true,
		check: func(w written) error {
			if w.rawSum != rawSHA256 {
				return fmt.Errorf("%s has SHA-256 %s, not the %s given", src, w.rawSum, rawSHA256)
			}
			return nil
		},
	}
	if state == sharedAbsent {
		// Never replace a file another process may have just written.
		opts.publish = s.linkNoReplace
	}
	w, err := s.writeAtomicAt(target, rel, opts, func(dst io.Writer) error {
		_, err := io.Copy(dst, f)
		return err
	})
	if errors.Is(err, errSharedExists) {
		existing, state, ierr := s.inspectShared(rel, target, rawSHA256)
		if ierr == nil && state == sharedIntact {
			return existing, false, nil
		}
	}
	if err != nil {
		return FileHandle{}, false, fmt.Errorf("checkpoint: put shared file %s: %w", src, err)
	}
	if !s.sharedRootSynced.Load() {
		// The shared directory may be new: make its entry durable.
		if err := s.fs.SyncDir(s.root); err != nil {
			return fail(err)
		}
		s.sharedRootSynced.Store(true)
	}
	h = w.handle(rel, level > 0)
	h.Shared, h.RawSize = true, w.raw
	s.remember(name, target, h)
	return h, true, nil
}

// linkNoReplace gives tmp the name target unless target exists, then
// removes tmp. Where the filesystem has no hard links it renames.
func (s *Storage) linkNoReplace(tmp, target string) error {
	err := os.Link(tmp, target)
	switch {
	case err == nil:
		return os.Remove(tmp)
	case errors.Is(err, fs.ErrExist):
		return errSharedExists
	}
	return s.fs.Rename(tmp, target)
}

func (s *Storage) sharedLock(name string) *sync.Mutex {
	return &s.sharedLocks[name[0]]
}

// Shared file states, as inspectShared finds them.
const (
	sharedAbsent = iota
	sharedIntact
	sharedDamaged
)

// inspectShared returns the handle of the shared file target (rel from the
// root) when it holds the bytes with SHA-256 rawSum, stored compressed or
// not, and says whether it is absent, intact or damaged.
func (s *Storage) inspectShared(rel, target, rawSum string) (FileHandle, int, error) {
	name := path.Base(rel)
	fi, err := os.Stat(target)
	if errors.Is(err, fs.ErrNotExist) {
		s.forget(name)
		return FileHandle{}, sharedAbsent, nil
	}
	if err != nil {
		return FileHandle{}, 0, err
	}
	s.sharedMu.Lock()
	e, ok := s.sharedSeen[name]
	s.sharedMu.Unlock()
	if ok && e.size == fi.Size() && e.modTime == fi.ModTime().UnixNano() {
		return e.h, sharedIntact, nil
	}
	f, err := os.Open(target)
	if err != nil {
		return FileHandle{}, 0, err
	}
	defer f.Close()
	stored := sha256.New()
	sc := &countingWriter{w: stored}
	in := io.TeeReader(f, sc)
	raw := sha256.New()
	rc := &countingWriter{w: raw}
	compressed := false
	var magic [4]byte
	if n, _ := io.ReadFull(in, magic[:]); n == 4 && bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		dec, err := getDecoder(io.MultiReader(bytes.NewReader(magic[:]), in))
		if err == nil {
			_, err = io.Copy(rc, dec)
			putDecoder(dec)
		}
		compressed = err == nil && hex.EncodeToString(raw.Sum(nil)) == rawSum
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return FileHandle{}, 0, err
	}
	sum := hex.EncodeToString(stored.Sum(nil))
	h := FileHandle{Path: rel, Size: sc.n, SHA256: sum, Shared: true, RawSize: sc.n}
	switch {
	case compressed:
		h.Compressed, h.RawSize = true, rc.n
	case sum != rawSum:
		return FileHandle{}, sharedDamaged, nil
	}
	s.remember(name, target, h)
	return h, sharedIntact, nil
}

func (s *Storage) remember(name, target string, h FileHandle) {
	fi, err := os.Stat(target)
	if err != nil || fi.Size() != h.Size {
		return
	}
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	if s.sharedSeen == nil {
		s.sharedSeen = map[string]sharedEntry{}
	}
	s.sharedSeen[name] = sharedEntry{h: h, size: fi.Size(), modTime: fi.ModTime().UnixNano()}
}

func (s *Storage) forget(name string) {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	delete(s.sharedSeen, name)
}

// FileSHA256 returns the hex SHA-256 of a file's bytes.
func FileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SharedFiles returns every shared file, by its path from the root
// ("shared/<name>"), with its size. Temporary files of writes in progress
// (or cut short by a crash) are not listed; CleanIncomplete removes them.
func (s *Storage) SharedFiles() (map[string]int64, error) {
	if s.obj != nil {
		files, err := s.obj.sharedFiles()
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list shared files in %s: %w", s.root, err)
		}
		return files, nil
	}
	entries, err := os.ReadDir(filepath.Join(s.root, SharedDir))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list shared files in %s: %w", s.root, err)
	}
	files := make(map[string]int64, len(entries))
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list shared files in %s: %w", s.root, err)
		}
		files[SharedDir+"/"+e.Name()] = fi.Size()
	}
	return files, nil
}

// RemoveShared removes the shared file p ("shared/<name>") and syncs the
// shared directory. Removing a missing file is not an error. The caller
// must know no complete checkpoint references the file any more.
func (s *Storage) RemoveShared(p string) error {
	name, ok := sharedBase(p)
	if !ok {
		return fmt.Errorf("checkpoint: remove shared file: %q is not a shared file path (shared/<name>)", p)
	}
	lock := s.sharedLock(name)
	lock.Lock()
	defer lock.Unlock()
	s.forget(name)
	if s.obj != nil {
		if err := s.obj.remove(SharedDir + "/" + name); err != nil {
			return fmt.Errorf("checkpoint: remove shared file %s in %s: %w", p, s.root, err)
		}
		return nil
	}
	dir := filepath.Join(s.root, SharedDir)
	switch err := os.Remove(filepath.Join(dir, name)); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint: remove shared file %s in %s: %w", p, s.root, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: remove shared file %s in %s: %w", p, s.root, err)
	}
	return nil
}

// Audit checks the storage's complete checkpoints against their files.
// missing has an error for each file a complete checkpoint references that
// is missing or damaged (each wraps ErrCorrupt, names the checkpoint and
// the file; a shared file is checked once however many checkpoints
// reference it, and reported for each), and for each complete checkpoint
// whose metadata does not read (its references are then unknown).
// unreferenced lists, sorted, the shared files no complete checkpoint
// references: garbage, unless a checkpoint in progress is about to
// reference them. err is for failures to list the storage.
func (s *Storage) Audit() (missing []error, unreferenced []string, err error) {
	ids, err := s.Completed()
	if err != nil {
		return nil, nil, err
	}
	type sharedKey struct {
		path, sum  string
		size, raw  int64
		compressed bool
	}
	verdicts := map[sharedKey]error{}
	referenced := map[string]bool{}
	for _, id := range ids {
		m, err := s.ReadMetadata(id)
		if err != nil {
			missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, err))
			continue
		}
		hs := m.handles()
		var plain []FileHandle
		for _, h := range hs {
			if !h.Shared {
				plain = append(plain, h)
				continue
			}
			referenced[h.Path] = true
			k := sharedKey{h.Path, h.SHA256, h.Size, h.RawSize, h.Compressed}
			verdict, ok := verdicts[k]
			if !ok {
				verdict = s.verifyFile(id, h)
				verdicts[k] = verdict
			}
			if verdict != nil {
				missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, verdict))
			}
		}
		errs := parallel(len(plain), false, func(i int) error { return s.verifyFile(id, plain[i]) })
		for _, err := range errs {
			if err != nil {
				missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, err))
			}
		}
	}
	files, err := s.SharedFiles()
	if err != nil {
		return missing, nil, err
	}
	for p := range files {
		if !referenced[p] {
			unreferenced = append(unreferenced, p)
		}
	}
	slices.Sort(unreferenced)
	return missing, unreferenced, nil
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
	// ReadFile and Open read what was written.
	ReadFile(name string) ([]byte, error)
	Open(name string) (storageReadFile, error)
}

// storageReadFile is a file being read through a storageFS.
type storageReadFile interface {
	io.ReadCloser
	Stat() (fs.FileInfo, error)
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

func (osStorageFS) SyncDir(dir string) error { return durable.SyncDir(dir) }

func (osStorageFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

func (osStorageFS) Open(name string) (storageReadFile, error) { return os.Open(name) }
