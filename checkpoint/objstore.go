package checkpoint

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/objlist"
)

// ObjectScheme begins the location of a storage kept in a JetStream object
// store: nats-obj://BUCKET or nats-obj://BUCKET/PREFIX.
const ObjectScheme = "nats-obj://"

// Metadata keys of a shared object: the hex SHA-256 and the size of the raw
// bytes, and "zstd" when the stored bytes are compressed.
const (
	objMetaRawSHA256 = "wstream-raw-sha256"
	objMetaRawSize   = "wstream-raw-size"
	objMetaEncoding  = "wstream-encoding"
)

// objectOpTimeout bounds one request about objects (info, list, delete);
// transfers of object contents are bounded by JetStream's own timeouts.
const objectOpTimeout = 30 * time.Second

// objectBackend keeps a Storage's files as objects of a JetStream object
// store: the object of a file is named PREFIX + its path relative to the
// storage root (chk-0000000042/tasks/0-1/state/000005.sst,
// shared/<sha256>.sst, chk-0000000042/_metadata), so the layout is that of
// a storage directory. A put is atomic: the object's info, which makes it
// visible, is published after all its chunks, and a put cut short leaves
// no object. _metadata is put last, so a checkpoint is complete exactly
// when its _metadata object exists.
type objectBackend struct {
	obs    jetstream.ObjectStore
	bucket string
	prefix string // "" or ending in "/"
}

// IsObjectLocation says whether location names an object store
// (nats-obj://…) rather than a directory.
func IsObjectLocation(location string) bool { return strings.HasPrefix(location, ObjectScheme) }

// ParseObjectLocation splits nats-obj://BUCKET/PREFIX into the bucket and
// the prefix (slash-separated, clean, without leading or trailing slash;
// "" for none).
func ParseObjectLocation(location string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(location, ObjectScheme)
	if !ok {
		return "", "", fmt.Errorf("checkpoint: %q is not an object store location (%sBUCKET/PREFIX)", location, ObjectScheme)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("checkpoint: object store location %q names no bucket", location)
	}
	for _, c := range bucket {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", "", fmt.Errorf("checkpoint: object store location %q: bucket %q may hold only letters, digits, '_' and '-'", location, bucket)
		}
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		clean, err := cleanRel(prefix)
		if err != nil || clean != prefix || strings.Contains(prefix, `\`) {
			return "", "", fmt.Errorf("checkpoint: object store location %q: prefix %q is not a clean relative path", location, prefix)
		}
	}
	return bucket, prefix, nil
}

// JoinLocation appends the path element elem to a storage location: a
// directory or an object store location.
func JoinLocation(location, elem string) string {
	if IsObjectLocation(location) {
		return strings.TrimRight(location, "/") + "/" + strings.Trim(filepath.ToSlash(elem), "/")
	}
	return filepath.Join(location, elem)
}

// OpenStorageAt opens the storage at location: an object store location
// (nats-obj://BUCKET/PREFIX), through the JetStream of nc, or else a
// directory, as OpenStorage does. A bucket it creates has one replica:
// writers use OpenReplicatedStorageAt.
func OpenStorageAt(location string, nc *nats.Conn) (*Storage, error) {
	return OpenReplicatedStorageAt(location, nc, 1)
}

// OpenReplicatedStorageAt is OpenStorageAt creating a missing object store
// with replicas copies (a NATS cluster's; the server's --replicas).
func OpenReplicatedStorageAt(location string, nc *nats.Conn, replicas int) (*Storage, error) {
	if !IsObjectLocation(location) {
		return OpenStorage(location)
	}
	bucket, prefix, err := ParseObjectLocation(location)
	if err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, fmt.Errorf("checkpoint: storage %s is in a JetStream object store and needs a NATS connection", location)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: storage %s: %w", location, err)
	}
	return OpenObjectStorage(js, bucket, prefix, replicas)
}

// OpenObjectStorage returns the storage kept in the object store bucket of
// js below prefix (slash-separated; "" for the whole bucket), creating the
// bucket (file storage, replicas copies on a cluster) when it is missing.
// Several storages may share a bucket under distinct prefixes, none of
// which may lie below another's. Its Root is nats-obj://BUCKET/PREFIX.
func OpenObjectStorage(js jetstream.JetStream, bucket, prefix string, replicas int) (*Storage, error) {
	location := ObjectScheme + bucket
	if p := strings.Trim(prefix, "/"); p != "" {
		location += "/" + p
	}
	bucket, prefix, err := ParseObjectLocation(location)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), objectOpTimeout)
	defer cancel()
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      bucket,
			Description: "wstream checkpoints",
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			obs, err = js.ObjectStore(ctx, bucket) // created meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open object store %s: %w", location, err)
	}
	b := &objectBackend{obs: obs, bucket: bucket}
	if prefix != "" {
		b.prefix = prefix + "/"
	}
	return &Storage{root: location, obj: b}, nil
}

func (b *objectBackend) name(rel string) string { return b.prefix + rel }

func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), objectOpTimeout)
}

// exists says whether the object rel exists.
func (b *objectBackend) exists(rel string) (bool, error) {
	ctx, cancel := opContext()
	defer cancel()
	_, err := b.obs.GetInfo(ctx, b.name(rel))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return false, nil
	}
	return false, fmt.Errorf("object %s of bucket %s: %w", b.name(rel), b.bucket, err)
}

// put stores what fill writes, through encodeInto, as the object rel with
// the metadata meta. The object appears only when fill and o.check have
// succeeded and every chunk is stored; on failure no object remains
// (an existing one of that name is kept).
func (b *objectBackend) put(rel string, o writeOpts, meta map[string]string, fill func(io.Writer) error) (written, error) {
	pr, pw := io.Pipe()
	var w written
	encoded := make(chan error, 1)
	go func() {
		var err error
		w, err = encodeInto(pw, o, fill)
		// A failure reaches the put as a read error: it then discards the
		// chunks sent and publishes no object.
		pw.CloseWithError(err)
		encoded <- err
	}()
	info, err := b.obs.Put(context.Background(), jetstream.ObjectMeta{Name: b.name(rel), Metadata: meta}, pr)
	// Should the put stop reading early, the encoder must not block.
	pr.CloseWithError(errors.New("object put ended"))
	eerr := <-encoded
	switch {
	case err != nil && eerr != nil && errors.Is(err, eerr):
		return written{}, eerr // fill or check failed: the put read it
	case err != nil:
		return written{}, fmt.Errorf("put object %s into bucket %s: %w", b.name(rel), b.bucket, err)
	case eerr != nil:
		// Not expected: the put stored a stream that ended in an error.
		_ = b.remove(rel)
		return written{}, eerr
	}
	if sum, derr := jetstream.DecodeObjectDigest(info.Digest); derr != nil || hex.EncodeToString(sum) != w.sum || int64(info.Size) != w.size {
		return written{}, fmt.Errorf("put object %s into bucket %s: stored %d bytes with digest %s, wrote %d with SHA-256 %s",
			b.name(rel), b.bucket, info.Size, info.Digest, w.size, w.sum)
	}
	return w, nil
}

// objectReader reads an object's stored bytes; a mismatch of the chunks
// with the object's own digest is corruption.
type objectReader struct {
	r    jetstream.ObjectResult
	name string
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = &corruptError{path: r.name, problem: "stored chunks do not match the object's digest"}
	}
	return n, err
}

func (r *objectReader) Close() error { return r.r.Close() }

// open opens the object rel for reading and returns its stored size. A
// missing object is an error wrapping fs.ErrNotExist.
func (b *objectBackend) open(rel string) (io.ReadCloser, int64, error) {
	res, err := b.obs.Get(context.Background(), b.name(rel))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, fmt.Errorf("object %s of bucket %s: %w", b.name(rel), b.bucket, fs.ErrNotExist)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("object %s of bucket %s: %w", b.name(rel), b.bucket, err)
	}
	info, err := res.Info()
	if err != nil {
		res.Close()
		return nil, 0, fmt.Errorf("object %s of bucket %s: %w", b.name(rel), b.bucket, err)
	}
	return &objectReader{r: res, name: rel}, int64(info.Size), nil
}

// readAll returns the content of the object rel, checked against the
// object's digest. A missing object is an error wrapping fs.ErrNotExist.
func (b *objectBackend) readAll(rel string) ([]byte, error) {
	r, _, err := b.open(rel)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read object %s of bucket %s: %w", b.name(rel), b.bucket, err)
	}
	return data, nil
}

// list returns the objects below the prefix whose path relative to it
// begins with under, by that path.
func (b *objectBackend) list(under string) (map[string]*jetstream.ObjectInfo, error) {
	infos, err := objlist.List(context.Background(), b.obs, objectOpTimeout)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return map[string]*jetstream.ObjectInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list bucket %s: %w", b.bucket, err)
	}
	out := map[string]*jetstream.ObjectInfo{}
	for _, info := range infos {
		rel, ok := strings.CutPrefix(info.Name, b.prefix)
		if ok && !info.Deleted && strings.HasPrefix(rel, under) {
			out[rel] = info
		}
	}
	return out, nil
}

// checkpoints returns the checkpoints with at least one object, by
// ascending id.
func (b *objectBackend) checkpoints() ([]dirState, error) {
	objs, err := b.list(DirPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s%s: %w", ObjectScheme, b.bucket+"/"+b.prefix, err)
	}
	byID := map[int64]bool{}
	for rel := range objs {
		dir, file, ok := strings.Cut(rel, "/")
		id, valid := ParseDirName(dir)
		if !ok || !valid {
			continue
		}
		byID[id] = byID[id] || file == MetadataName
	}
	dirs := make([]dirState, 0, len(byID))
	for id, complete := range byID {
		dirs = append(dirs, dirState{id: id, complete: complete})
	}
	sortDirs(dirs)
	return dirs, nil
}

// remove deletes the object rel; a missing one is no error.
func (b *objectBackend) remove(rel string) error {
	ctx, cancel := opContext()
	defer cancel()
	err := b.obs.Delete(ctx, b.name(rel))
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete object %s of bucket %s: %w", b.name(rel), b.bucket, err)
	}
	return nil
}

// removeCheckpoint deletes the objects of checkpoint id: its _metadata
// first, so that an interrupted removal never leaves it looking complete.
func (b *objectBackend) removeCheckpoint(id int64) error {
	dir := DirName(id) + "/"
	if err := b.remove(dir + MetadataName); err != nil {
		return err
	}
	objs, err := b.list(dir)
	if err != nil {
		return err
	}
	for rel := range objs {
		if err := b.remove(rel); err != nil {
			return err
		}
	}
	return nil
}

// sharedFiles returns the shared objects, by path from the root, with
// their stored sizes.
func (b *objectBackend) sharedFiles() (map[string]int64, error) {
	objs, err := b.list(SharedDir + "/")
	if err != nil {
		return nil, err
	}
	files := make(map[string]int64, len(objs))
	for rel, info := range objs {
		if _, ok := sharedBase(rel); ok {
			files[rel] = int64(info.Size)
		}
	}
	return files, nil
}

// sharedHandle returns the handle of the shared object described by info
// when it holds the raw bytes with SHA-256 rawSum, stored compressed or
// not.
func sharedHandle(rel string, info *jetstream.ObjectInfo, rawSum string) (FileHandle, bool) {
	digest, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return FileHandle{}, false
	}
	h := FileHandle{Path: rel, Size: int64(info.Size), SHA256: hex.EncodeToString(digest), Shared: true, RawSize: int64(info.Size)}
	if info.Metadata[objMetaRawSHA256] == rawSum && info.Metadata[objMetaEncoding] == "zstd" {
		raw, err := strconv.ParseInt(info.Metadata[objMetaRawSize], 10, 64)
		if err != nil || raw < 0 {
			return FileHandle{}, false
		}
		h.Compressed, h.RawSize = true, raw
		return h, true
	}
	return h, h.SHA256 == rawSum
}

// putShared stores the file src as the shared object rel, whose raw bytes
// have the SHA-256 rawSum, unless an object of that name holds them
// already.
func (b *objectBackend) putShared(rel, src, rawSum string, level int) (FileHandle, bool, error) {
	ctx, cancel := opContext()
	info, err := b.obs.GetInfo(ctx, b.name(rel))
	cancel()
	switch {
	case err == nil:
		if h, ok := sharedHandle(rel, info, rawSum); ok {
			return h, false, nil
		}
		// Damaged: replaced below.
	case !errors.Is(err, jetstream.ErrObjectNotFound):
		return FileHandle{}, false, fmt.Errorf("object %s of bucket %s: %w", b.name(rel), b.bucket, err)
	}
	f, err := os.Open(src)
	if err != nil {
		return FileHandle{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileHandle{}, false, err
	}
	meta := map[string]string{objMetaRawSHA256: rawSum, objMetaRawSize: strconv.FormatInt(fi.Size(), 10)}
	if level > 0 {
		meta[objMetaEncoding] = "zstd"
	}
	w, err := b.put(rel, writeOpts{
		level:   level,
		hashRaw: true,
		check: func(w written) error {
			if w.rawSum != rawSum {
				return fmt.Errorf("%s has SHA-256 %s, not the %s given", src, w.rawSum, rawSum)
			}
			if w.raw != fi.Size() {
				return fmt.Errorf("%s changed size while it was copied", src)
			}
			return nil
		},
	}, meta, func(dst io.Writer) error {
		_, err := io.Copy(dst, f)
		return err
	})
	if err != nil {
		return FileHandle{}, false, err
	}
	h := w.handle(rel, level > 0)
	h.Shared, h.RawSize = true, w.raw
	return h, true, nil
}

// putStored stores the stored bytes r yields as the object rel of a
// shared or plain file described by h (as they are: compressed ones stay
// compressed), and checks they are h's.
func (b *objectBackend) putStored(rel string, h FileHandle, r io.Reader) error {
	var meta map[string]string
	if h.Shared {
		base, _ := sharedBase(h.Path)
		raw := h.RawSize
		if raw == 0 && !h.Compressed {
			raw = h.Size
		}
		meta = map[string]string{
			objMetaRawSHA256: strings.TrimSuffix(base, path.Ext(base)),
			objMetaRawSize:   strconv.FormatInt(raw, 10),
		}
		if h.Compressed {
			meta[objMetaEncoding] = "zstd"
		}
	}
	_, err := b.put(rel, writeOpts{check: storedCheck(h)}, meta, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
	return err
}

// storedCheck vets a copy of h's stored bytes.
func storedCheck(h FileHandle) func(written) error {
	return func(w written) error {
		if w.size != h.Size || w.sum != h.SHA256 {
			return &corruptError{path: h.Path, problem: fmt.Sprintf("copied %d bytes with SHA-256 %s, the metadata records %d with %s", w.size, w.sum, h.Size, h.SHA256)}
		}
		return nil
	}
}
