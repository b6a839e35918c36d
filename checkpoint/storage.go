package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
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

// Storage keeps the checkpoints of one job on a Backend: a directory on a
// filesystem (OpenStorage) or a JetStream object store (OpenObjectStorage,
// OpenStorageAt), as the package documentation describes. Everything about
// checkpoints (metadata, shared files, verification, retention, recovery)
// is here, once; the backend only stores named objects. Its methods are
// safe for concurrent use; concurrent writers must write distinct paths.
type Storage struct {
	root string // the backend's Location
	b    Backend
	// ctx, when set (WithContext), cuts short the writes and reads of this
	// view once it is done.
	ctx context.Context
	*storageShared
}

// storageShared is what the views of one Storage (WithContext) share.
type storageShared struct {
	level atomic.Int32 // zstd level of later copies; 0 for none

	// sharedLocks serialise PutShared and RemoveShared of one name, by the
	// name's first byte.
	sharedLocks [256]sync.Mutex
	sharedMu    sync.Mutex
	// sharedSeen caches the handles of shared files already inspected or
	// written, so that a repeated PutShared does not read the file again
	// where the backend keeps no digest.
	sharedSeen map[string]sharedEntry
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
	return NewStorage(&dirBackend{root: abs, fs: osStorageFS{}}), nil
}

// NewStorage returns the storage kept on b, which must keep the Backend
// contract (atomic puts; missing, corrupt and unavailable told apart).
// OpenStorage and OpenObjectStorage open the two backends of this package.
func NewStorage(b Backend) *Storage {
	return &Storage{root: b.Location(), b: b, storageShared: &storageShared{}}
}

// contextBackend is a Backend whose requests can be cut short: withContext
// returns a view of it whose requests give up once ctx is done.
type contextBackend interface {
	withContext(ctx context.Context) Backend
}

// WithContext returns a view of s that gives up once ctx is done, with an
// error wrapping ctx's: an object store's requests (writes, reads, lists)
// end instead of waiting out their tries, and a directory's view refuses
// further writes (its local I/O is not retried). A subtask's uploads use
// one bound to their attempt, whose end (and the next attempt) must not
// wait while the store cannot be reached. A write cut short stores nothing
// under its name. The view shares s's settings and caches.
func (s *Storage) WithContext(ctx context.Context) *Storage {
	v := &Storage{root: s.root, b: s.b, ctx: ctx, storageShared: s.storageShared}
	if cb, ok := s.b.(contextBackend); ok {
		v.b = cb.withContext(ctx)
	}
	return v
}

// Root is the absolute path of the storage's directory, or, for an object
// store, its location (nats-obj://BUCKET/PREFIX).
func (s *Storage) Root() string { return s.root }

// Dir is the absolute path of checkpoint id's directory, ROOT/chk-%010d;
// for an object store, ROOT/chk-%010d is the location the checkpoint's
// object names begin with.
func (s *Storage) Dir(id int64) string { return JoinLocation(s.root, DirName(id)) }

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
// a temporary copy, so fill is called again when a put to an object store
// is tried again, and must write the whole content from its start each
// time.
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
		if err := copyFrom(w, f); err != nil {
			return fmt.Errorf("copy from %s: %w", src, err)
		}
		return nil
	})
}

// copyFrom copies f to w from its start, for a fill that a put tried again
// calls again.
func copyFrom(w io.Writer, f *os.File) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err := io.Copy(w, f)
	return err
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
	switch _, err := s.b.Stat(s.relToRoot(id, MetadataName)); {
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
// writes, zstd-compressed at level unless it is 0. A file of an incomplete
// checkpoint needs its name durable only before the checkpoint counts as
// complete, which WriteMetadata does for all of them at once; _metadata
// itself needs it at once.
func (s *Storage) writeAtomic(id int64, rel string, level int, fill func(io.Writer) error) (FileHandle, error) {
	w, err := s.put(s.relToRoot(id, rel), writeOpts{level: level}, PutOptions{Deferred: rel != MetadataName}, fill)
	if err != nil {
		return FileHandle{}, err
	}
	return w.handle(rel, level > 0), nil
}

// put stores as the object name (relative to the root) what fill writes,
// encoded and vetted as o says, and describes what was stored. The object
// appears only when fill and o.check succeeded.
func (s *Storage) put(name string, o writeOpts, po PutOptions, fill func(io.Writer) error) (written, error) {
	if s.ctx != nil && s.ctx.Err() != nil {
		return written{}, fmt.Errorf("checkpoint: write %s in %s: %w", name, s.root, s.ctx.Err())
	}
	var w written
	err := s.b.Put(name, po, func(dst io.Writer) error {
		var err error
		w, err = encodeInto(dst, o, fill)
		return err
	})
	if err != nil {
		return written{}, fmt.Errorf("checkpoint: write %s in %s: %w", name, s.root, err)
	}
	return w, nil
}

// writeOpts says how encodeInto encodes a file.
type writeOpts struct {
	level   int  // zstd level; 0 stores the bytes as they are
	hashRaw bool // compute the SHA-256 of the raw bytes too
	// check, when set, vets the file before it gets its name.
	check func(written) error
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
