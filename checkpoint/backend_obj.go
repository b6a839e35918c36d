package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/objlist"
	"github.com/wstream/wstream/internal/objwhole"
	"github.com/wstream/wstream/internal/transient"
)

// ObjectScheme begins the location of a storage kept in a JetStream object
// store: nats-obj://BUCKET or nats-obj://BUCKET/PREFIX.
const ObjectScheme = "nats-obj://"

// objectOpTimeout bounds each try of a bucket's list and is the floor of
// a read's deadline; a request about an object's info or deletion has the
// tries of objectOpTries.
const objectOpTimeout = 30 * time.Second

// minReadRate is the slowest transfer a read's deadline allows for: an
// object's read has objectOpTimeout plus its size at this rate.
const minReadRate = 1 << 20 // bytes per second

// readTimeout bounds the whole read of an object of size bytes, so that
// a read whose chunks stop coming fails instead of waiting for ever.
func readTimeout(size uint64) time.Duration {
	return objectOpTimeout + time.Duration(size/minReadRate)*time.Second
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
	stream, err := js.Stream(ctx, objwhole.StreamName(bucket))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open object store %s: %w", location, err)
	}
	b := &objBackend{obs: obs, js: js, stream: stream, bucket: bucket, location: location, retry: transient.Default}
	if prefix != "" {
		b.prefix = prefix + "/"
	}
	return NewStorage(b), nil
}

// objBackend keeps objects in a JetStream object store: the object of a
// name is PREFIX + the name, so the layout is that of a storage directory.
// A put is atomic: the object's info, which makes it visible, is published
// after all its chunks, and a put cut short leaves no object, so there are
// no temporaries; puts replace atomically, so NoReplace is not needed (the
// last put of a shared object wins, with the same bytes). It has no
// directories to sync. Every request that meets a fault of the moment (a
// 429, a timeout, no responders) is tried again as retry says; a read that
// meets one every time is unavailable, never missing or corrupt.
//
// One put can break that atomicity: the client sends the chunks and the
// info without waiting for each acknowledgement, so a chunk refused after
// the info was stored leaves the name pointing at chunks the client then
// purged. Such an object can never be read, so Stat and Open report it
// corrupt (never unavailable, and before any read waits for chunks), and
// a put that finally failed removes what it left (removeBroken).
type objBackend struct {
	obs      jetstream.ObjectStore
	js       jetstream.JetStream
	stream   jetstream.Stream // the bucket's, OBJ_<bucket>
	bucket   string
	prefix   string // "" or ending in "/"
	location string
	retry    transient.Policy
	// ctx, when set (withContext), ends the tries of every request and
	// put once it is done.
	ctx context.Context
}

func (b *objBackend) withContext(ctx context.Context) Backend {
	v := *b
	v.ctx = ctx
	return &v
}

// parent is the context every request's tries run under.
func (b *objBackend) parent() context.Context {
	if b.ctx != nil {
		return b.ctx
	}
	return context.Background()
}

func (b *objBackend) Location() string { return b.location }

func (b *objBackend) objName(name string) string { return b.prefix + name }

// objectOpTries are the deadlines of the tries of one idempotent request
// about an object (its info, its deletion), the last one for every try
// after. A request that reached a stream's leader as its NATS node died is never
// answered: a first, short try gives it up in seconds (it held a
// checkpoint's discard, and with it the checkpoint driver, for the whole
// 30 s), and the later, longer ones leave a slow server its time.
var objectOpTries = []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}

// request runs op, an idempotent request about an object, tried again with
// b.retry's backoff when it meets a fault of the moment, each try under
// its deadline of objectOpTries.
func (b *objBackend) request(op func(ctx context.Context) error) error {
	try := 0
	return transient.Do(b.parent(), b.retry, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, objectOpTries[min(try, len(objectOpTries)-1)])
		defer cancel()
		try++
		return op(ctx)
	})
}

// Put stores the object, trying again (with fill called again) when the
// server met a fault of the moment: a server that syncs every write
// answers a burst of chunks with 429 on a busy machine.
func (b *objBackend) Put(name string, o PutOptions, fill func(io.Writer) error) error {
	err := transient.Do(b.parent(), b.retry, func(context.Context) error {
		return b.putOnce(name, o, fill)
	})
	if err != nil && b.ctx != nil && b.ctx.Err() != nil {
		// Cut short by the put's reads (putOnce): the client purged its
		// chunks and stored no info, so there is nothing to look for.
		return fmt.Errorf("put object %s into bucket %s: %w", b.objName(name), b.bucket, errors.Join(b.ctx.Err(), err))
	}
	if err != nil {
		err = fmt.Errorf("put object %s into bucket %s: %w", b.objName(name), b.bucket, err)
		if rerr := b.removeBroken(name); rerr != nil {
			err = fmt.Errorf("%w; what it may have left could not be checked: %v", err, rerr)
		}
		return err
	}
	return nil
}

// metaSubject is the subject of the object name's info.
func (b *objBackend) metaSubject(name string) string {
	return objwhole.MetaSubject(b.bucket, b.objName(name))
}

// whole says whether the bucket's stream holds every chunk that oi, an
// object's info, names.
func (b *objBackend) whole(ctx context.Context, oi *jetstream.ObjectInfo) (bool, error) {
	return objwhole.Whole(ctx, b.stream, oi)
}

// broken is the verdict on an object whose info names chunks the store
// does not hold: no later read can find them.
func broken(name string, oi *jetstream.ObjectInfo) error {
	return &corruptError{path: name, problem: fmt.Sprintf(
		"the object's info names %d chunks the store no longer holds (a put that failed left it)", oi.Chunks)}
}

// removeBroken deletes the object name if its info names chunks the store
// does not hold, as a put that failed after its info was stored leaves
// it. The delete marker is published only if the info is still the one
// found broken (the stream's last sequence on the info's subject), so a
// good put of the same name by another writer that landed meanwhile is
// kept; one that lands after replaces the marker. Names are unique to a
// checkpoint's subtask except shared files, whose every put carries the
// same bytes: a broken shared object is as good as absent, and the next
// PutShared of it uploads it again.
func (b *objBackend) removeBroken(name string) error {
	return transient.Do(context.Background(), b.retry, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, objectOpTimeout)
		defer cancel()
		subj := b.metaSubject(name)
		m, err := b.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var oi jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data, &oi); err != nil {
			return transient.Permanent(fmt.Errorf("info of object %s: %w", b.objName(name), err))
		}
		if ok, err := b.whole(ctx, &oi); err != nil || ok {
			return err
		}
		return b.deleteIfLast(ctx, name, oi, m.Sequence)
	})
}

// deleteIfLast deletes the object name, whose info oi is the message seq
// of the bucket's stream, unless another info replaced it since.
func (b *objBackend) deleteIfLast(ctx context.Context, name string, oi jetstream.ObjectInfo, seq uint64) error {
	oi.Deleted, oi.Size, oi.Chunks, oi.Digest, oi.ModTime = true, 0, 0, "", time.Time{}
	marker := nats.NewMsg(b.metaSubject(name))
	marker.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	var err error
	if marker.Data, err = json.Marshal(&oi); err != nil {
		return transient.Permanent(err)
	}
	_, err = b.js.PublishMsg(ctx, marker, jetstream.WithExpectLastSequencePerSubject(seq))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil // another writer's put replaced it: theirs stays
	}
	if err != nil {
		return err
	}
	// Whatever chunks the client failed to purge: the nuid is that put's
	// alone.
	return b.stream.Purge(ctx, jetstream.WithPurgeSubject(objwhole.ChunkSubject(b.bucket, oi.NUID)))
}

func (b *objBackend) putOnce(name string, o PutOptions, fill func(io.Writer) error) error {
	pr, pw := io.Pipe()
	sum := sha256.New()
	var n int64
	filled := make(chan error, 1)
	go func() {
		cw := &countingWriter{w: io.MultiWriter(pw, sum)}
		err := fill(cw)
		n = cw.n
		// A failure reaches the put as a read error: it then discards the
		// chunks sent and publishes no object.
		pw.CloseWithError(err)
		filled <- err
	}()
	// A cancel reaches the put as a read error, not through the put's
	// context: the client then purges the chunks it sent with a context
	// that still works, where a cancelled one would leave them behind.
	var src io.Reader = pr
	if b.ctx != nil {
		src = ctxReader{ctx: b.ctx, r: pr}
	}
	info, err := b.obs.Put(context.Background(), jetstream.ObjectMeta{Name: b.objName(name), Metadata: o.Meta}, src)
	// Should the put stop reading early, fill must not block.
	pr.CloseWithError(errors.New("object put ended"))
	ferr := <-filled
	switch {
	case err != nil && ferr != nil && errors.Is(err, ferr):
		// fill failed, and the put read its error: trying again would
		// not mend what fill reads from.
		return transient.Permanent(ferr)
	case err != nil:
		return err
	case ferr != nil:
		// Not expected: the put stored a stream that ended in an error.
		_ = b.Delete(name)
		return transient.Permanent(ferr)
	}
	want := hex.EncodeToString(sum.Sum(nil))
	if got, derr := jetstream.DecodeObjectDigest(info.Digest); derr != nil || hex.EncodeToString(got) != want || int64(info.Size) != n {
		return fmt.Errorf("stored %d bytes with digest %s, wrote %d with SHA-256 %s", info.Size, info.Digest, n, want)
	}
	return nil
}

// objReader reads an object's stored bytes; a mismatch of the chunks with
// the object's own digest, or chunks the store no longer holds, is
// corruption, any other failure unavailability.
type objReader struct {
	r      jetstream.ObjectResult
	cancel context.CancelFunc // ends the read's deadline
	b      *objBackend
	info   *jetstream.ObjectInfo
	name   string
}

func (r *objReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	switch {
	case err == nil || err == io.EOF:
	case errors.Is(err, jetstream.ErrDigestMismatch):
		err = &corruptError{path: r.name, problem: "stored chunks do not match the object's digest"}
	default:
		err = r.diagnose(err)
	}
	return n, err
}

// diagnose tells a read that failed (its chunks stopped coming before its
// deadline) because the store lost them from one that could not read now.
func (r *objReader) diagnose(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), objectOpTimeout)
	defer cancel()
	cur, ierr := r.b.obs.GetInfo(ctx, r.b.objName(r.name))
	if ierr == nil && cur.NUID == r.info.NUID {
		if ok, werr := r.b.whole(ctx, cur); werr == nil && !ok {
			return broken(r.name, cur)
		}
	}
	return unavailable(err)
}

func (r *objReader) Close() error {
	defer r.cancel()
	return r.r.Close()
}

func (r *objReader) Size() int64 { return int64(r.info.Size) }

// Open checks that the store holds the object's chunks before it reads
// them, and gives the read a deadline by the object's size.
func (b *objBackend) Open(name string) (ObjectReader, error) {
	var r *objReader
	err := transient.Do(b.parent(), b.retry, func(ctx context.Context) error {
		oi, err := b.wholeInfo(ctx, name)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout(oi.Size))
		res, err := b.obs.Get(rctx, b.objName(name))
		if err != nil {
			cancel()
			return err
		}
		info, err := res.Info()
		if err != nil {
			res.Close()
			cancel()
			return err
		}
		r = &objReader{r: res, cancel: cancel, b: b, info: info, name: name}
		return nil
	})
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("object %s of bucket %s: %w", b.objName(name), b.bucket, fs.ErrNotExist)
	case errors.Is(err, ErrCorrupt):
		return nil, err
	case err != nil:
		return nil, unavailable(fmt.Errorf("object %s of bucket %s: %w", b.objName(name), b.bucket, err))
	}
	return r, nil
}

// wholeInfo returns the info of the object name, or the verdict that the
// store no longer holds its chunks (marked Permanent: an answer).
func (b *objBackend) wholeInfo(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, objectOpTimeout)
	defer cancel()
	oi, err := b.obs.GetInfo(ctx, b.objName(name))
	if err != nil {
		return nil, err
	}
	switch ok, err := b.whole(ctx, oi); {
	case err != nil:
		return nil, err
	case !ok:
		return nil, transient.Permanent(broken(name, oi))
	}
	return oi, nil
}

func (b *objBackend) info(name string, oi *jetstream.ObjectInfo) ObjectInfo {
	out := ObjectInfo{Name: name, Size: int64(oi.Size), Meta: oi.Metadata}
	if d, err := jetstream.DecodeObjectDigest(oi.Digest); err == nil {
		out.Digest = hex.EncodeToString(d)
	}
	return out
}

func (b *objBackend) Stat(name string) (ObjectInfo, error) {
	var oi *jetstream.ObjectInfo
	err := b.request(func(ctx context.Context) (err error) {
		oi, err = b.wholeInfo(ctx, name)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return ObjectInfo{}, fmt.Errorf("object %s of bucket %s: %w", b.objName(name), b.bucket, fs.ErrNotExist)
	case errors.Is(err, ErrCorrupt):
		return ObjectInfo{}, err
	case err != nil:
		return ObjectInfo{}, unavailable(fmt.Errorf("object %s of bucket %s: %w", b.objName(name), b.bucket, err))
	}
	return b.info(name, oi), nil
}

// all returns every object whose name begins with dir, by name.
func (b *objBackend) all(dir string) (map[string]*jetstream.ObjectInfo, error) {
	infos, err := objlist.List(b.parent(), b.obs, objectOpTimeout, b.retry)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return map[string]*jetstream.ObjectInfo{}, nil
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("list bucket %s: %w", b.bucket, err))
	}
	out := map[string]*jetstream.ObjectInfo{}
	for _, oi := range infos {
		name, ok := strings.CutPrefix(oi.Name, b.prefix)
		if ok && !oi.Deleted && strings.HasPrefix(name, dir) {
			out[name] = oi
		}
	}
	return out, nil
}

func (b *objBackend) List(dir string) ([]ObjectInfo, error) {
	objs, err := b.all(dir)
	if err != nil {
		return nil, err
	}
	var out []ObjectInfo
	dirs := map[string]bool{}
	for name, oi := range objs {
		rest := strings.TrimPrefix(name, dir)
		if sub, _, ok := strings.Cut(rest, "/"); ok {
			dirs[dir+sub+"/"] = true
			continue
		}
		out = append(out, b.info(name, oi))
	}
	for d := range dirs {
		out = append(out, ObjectInfo{Name: d})
	}
	slices.SortFunc(out, func(x, y ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func (b *objBackend) Delete(name string) error {
	// A try that published the deletion but was not answered is repeated
	// whole: the object's info is still found (deleted), and its chunks
	// purged then.
	err := b.request(func(ctx context.Context) error { return b.obs.Delete(ctx, b.objName(name)) })
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete object %s of bucket %s: %w", b.objName(name), b.bucket, err)
	}
	return nil
}

func (b *objBackend) DeleteAll(dir string) error {
	objs, err := b.all(dir)
	if err != nil {
		return err
	}
	for name := range objs {
		if err := b.Delete(name); err != nil {
			return err
		}
	}
	return nil
}

// Sync has nothing to do: a put is durable when it returns.
func (b *objBackend) Sync(string) error { return nil }

// RemoveTemporaries has nothing to do: an interrupted put leaves no object.
func (b *objBackend) RemoveTemporaries(string) (int, error) { return 0, nil }

// ctxReader fails its reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
