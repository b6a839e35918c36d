package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/objwhole"
	"github.com/wstream/wstream/internal/transient"
)

// DefaultMaxModuleBytes is the largest module a coordinator or worker
// fetches from a module store unless configured otherwise: the cap on the
// admin's modules, and on every tenant's whatever its quota.
const DefaultMaxModuleBytes = 256 << 20

// Errors of module fetches, for errors.Is; the errors returned say which
// module, which store and the figures.
var (
	// ErrModuleTooLarge: the module is over the limit of its store.
	ErrModuleTooLarge = errors.New("module over the size limit")
	// ErrModuleDigest: the module's bytes do not hash to the digest that
	// names it.
	ErrModuleDigest = errors.New("module bytes do not match their digest")
	// ErrModuleIncomplete: the module's object names chunks that its
	// bucket's stream does not hold (a put refused after its record was
	// stored). Reading it would wait for chunks that never come.
	ErrModuleIncomplete = errors.New("module object incomplete")
)

// ModuleDigest is the digest by which a module is stored and named:
// "sha256:" and the hex SHA-256 of its bytes.
func ModuleDigest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CheckModuleDigest refuses a digest that is not "sha256:" and 64
// lower-case hex digits, the only names modules are stored under.
func CheckModuleDigest(digest string) error {
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if ok && len(hexSum) == 2*sha256.Size && strings.ToLower(hexSum) == hexSum {
		if _, err := hex.DecodeString(hexSum); err == nil {
			return nil
		}
	}
	return fmt.Errorf("module digest %q: want sha256: and 64 lower-case hex digits", digest)
}

// ModuleStoreName names a tenant's module store in errors ("" is the
// admin's).
func ModuleStoreName(tenant string) string {
	if tenant == "" {
		return "the module store " + ModuleBucket
	}
	return "tenant " + tenant + "'s store"
}

// StatModule returns the size the object store's record of module digest
// in obs gives, refusing a module over limit bytes and a link (a module is
// its own object). The record is the uploader's word: ReadModule does not
// trust it.
func StatModule(ctx context.Context, obs jetstream.ObjectStore, tenant, digest string, limit int64) (int64, error) {
	info, err := statModule(ctx, obs, tenant, digest, limit)
	if err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

func statModule(ctx context.Context, obs jetstream.ObjectStore, tenant, digest string, limit int64) (*jetstream.ObjectInfo, error) {
	where := ModuleStoreName(tenant)
	if err := CheckModuleDigest(digest); err != nil {
		return nil, err
	}
	info, err := obs.GetInfo(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("module %s in %s: %w", digest, where, err)
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("module %s in %s is a link to another object, not a module", digest, where)
	}
	if info.Size > uint64(limit) {
		return nil, moduleError{fmt.Sprintf("module %s in %s is %d bytes, over the limit of %d bytes", digest, where, info.Size, limit), ErrModuleTooLarge}
	}
	return info, nil
}

// ReadModule streams module digest from obs into w, reading at most limit
// bytes whatever the object's record says, and checks that the SHA-256 of
// the bytes is the digest: a module store holds what its tenant put there,
// under any name. It first checks through js, the JetStream of obs, that
// the bucket's stream holds every chunk the record names: an incomplete
// object is ErrModuleIncomplete at once, where reading it would wait for
// the missing chunks until ctx ends. On an error w may have had part of
// the bytes.
func ReadModule(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, tenant, digest string, limit int64, w io.Writer) error {
	info, err := statModule(ctx, obs, tenant, digest, limit)
	if err != nil {
		return err
	}
	if err := checkWhole(ctx, js, tenant, digest, info); err != nil {
		return err
	}
	return readModule(ctx, obs, tenant, digest, int64(info.Size), limit, w)
}

// FetchModule returns the bytes of module digest from obs, as ReadModule
// reads them, after checking through js, the JetStream of obs, that the
// bucket's stream holds every chunk the object's record names: an
// incomplete object is ErrModuleIncomplete at once, where reading it would
// time out on every attempt. A fetch that meets a fault of the moment (a
// timeout, a 429, no responders) is tried again from the start, the check
// included.
func FetchModule(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, tenant, digest string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	err := transient.Do(ctx, transient.Default, func(ctx context.Context) error {
		info, err := statModule(ctx, obs, tenant, digest, limit)
		if err != nil {
			return err
		}
		if err := checkWhole(ctx, js, tenant, digest, info); err != nil {
			return err
		}
		buf.Reset()
		buf.Grow(int(info.Size)) // at most limit
		return readModule(ctx, obs, tenant, digest, int64(info.Size), limit, &buf)
	})
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkWhole refuses module digest, whose record is info, if its bucket's
// stream lacks any of the chunks the record names. Not being able to ask
// the stream now is the stream's error, for the caller to try again.
func checkWhole(ctx context.Context, js jetstream.JetStream, tenant, digest string, info *jetstream.ObjectInfo) error {
	where := ModuleStoreName(tenant)
	stream := objwhole.StreamName(info.Bucket)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("module %s in %s: opening stream %s to count its chunks: %w", digest, where, stream, err)
	}
	whole, err := objwhole.Whole(ctx, st, info)
	if err != nil {
		return fmt.Errorf("module %s in %s: counting its chunks in stream %s: %w", digest, where, stream, err)
	}
	if !whole {
		return moduleError{fmt.Sprintf("module %s in %s (bucket %s): its record names %d chunks that stream %s does not all hold: the put that stored it was refused after its record; store the module again",
			digest, where, info.Bucket, info.Chunks, stream), ErrModuleIncomplete}
	}
	return nil
}

func readModule(ctx context.Context, obs jetstream.ObjectStore, tenant, digest string, size, limit int64, w io.Writer) error {
	where := ModuleStoreName(tenant)
	r, err := obs.Get(ctx, digest)
	if err != nil {
		return fmt.Errorf("fetching module %s from %s: %w", digest, where, err)
	}
	// Closing stops the object store's consumer of the chunks not read.
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, w), io.LimitReader(r, limit+1))
	if n > limit {
		return moduleError{fmt.Sprintf("module %s in %s: more than the limit of %d bytes (its record says %d)", digest, where, limit, size), ErrModuleTooLarge}
	}
	if err != nil {
		return fmt.Errorf("fetching module %s from %s: %w", digest, where, err)
	}
	return checkSum(h, tenant, digest)
}

// VerifyModule checks that wasm, which came from tenant's module store
// under digest, hashes to digest.
func VerifyModule(tenant, digest string, wasm []byte) error {
	h := sha256.New()
	h.Write(wasm)
	return checkSum(h, tenant, digest)
}

func checkSum(h hash.Hash, tenant, digest string) error {
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != digest {
		return moduleError{fmt.Sprintf("module %s in %s: its bytes hash to %s", digest, ModuleStoreName(tenant), got), ErrModuleDigest}
	}
	return nil
}

// moduleError is a refused module: msg says which and why, kind is
// ErrModuleTooLarge, ErrModuleDigest or ErrModuleIncomplete.
type moduleError struct {
	msg  string
	kind error
}

func (e moduleError) Error() string { return e.msg }
func (e moduleError) Unwrap() error { return e.kind }
