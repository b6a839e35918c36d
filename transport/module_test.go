package transport_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/testkit/objfault"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
)

func TestCheckModuleDigest(t *testing.T) {
	good := transport.ModuleDigest([]byte("x"))
	if err := transport.CheckModuleDigest(good); err != nil {
		t.Fatalf("%s: %v", good, err)
	}
	for _, d := range []string{"", "sha256:", good[:len(good)-1], good + "0", strings.ToUpper(good),
		"sha256:" + strings.ToUpper(good[7:]), "sha512:" + good[7:], "sha256:" + strings.Repeat("g", 64),
		"sha256:" + good[7:] + "\x00", "../" + good} {
		if err := transport.CheckModuleDigest(d); err == nil || !strings.Contains(err.Error(), "64 lower-case hex digits") {
			t.Errorf("digest %q: %v", d, err)
		}
	}
}

func TestVerifyModule(t *testing.T) {
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	if err := transport.VerifyModule("bolt", transport.ModuleDigest(wasm), wasm); err != nil {
		t.Fatal(err)
	}
	other := transport.ModuleDigest([]byte("acme's module"))
	err := transport.VerifyModule("bolt", other, wasm)
	want := "module " + other + " in tenant bolt's store: its bytes hash to " + transport.ModuleDigest(wasm)
	if !errors.Is(err, transport.ErrModuleDigest) || err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if err := transport.VerifyModule("", other, wasm); err == nil || !strings.Contains(err.Error(), "in the module store "+transport.ModuleBucket+":") {
		t.Fatalf("the admin's store: %v", err)
	}
}

// moduleStore starts a JetStream server and returns a module bucket and
// its JetStream.
func moduleStore(t *testing.T) (jetstream.ObjectStore, jetstream.JetStream) {
	t.Helper()
	_, js := natstest.Start(t)
	obs, err := js.CreateObjectStore(testCtx(t), jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket})
	if err != nil {
		t.Fatal(err)
	}
	return obs, js
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// countingWriter counts what it is given.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func TestFetchModule(t *testing.T) {
	obs, js := moduleStore(t)
	ctx := testCtx(t)
	put := func(name string, b []byte) {
		t.Helper()
		if _, err := obs.PutBytes(ctx, name, b); err != nil {
			t.Fatal(err)
		}
	}

	// A module under its digest comes back whole.
	wasm := bytes.Repeat([]byte("module"), 100_000) // several chunks
	d := transport.ModuleDigest(wasm)
	put(d, wasm)
	got, err := transport.FetchModule(ctx, js, obs, "acme", d, int64(len(wasm)))
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("fetching a module at its limit: %d bytes, %v", len(got), err)
	}

	// One byte over the limit: refused by its record, before any chunk.
	_, err = transport.FetchModule(ctx, js, obs, "acme", d, int64(len(wasm))-1)
	want := "module " + d + " in tenant acme's store is 600000 bytes, over the limit of 599999 bytes"
	if !errors.Is(err, transport.ErrModuleTooLarge) || err.Error() != want {
		t.Fatalf("over the limit: %v, want %q", err, want)
	}

	// Junk under another module's digest.
	acme := transport.ModuleDigest([]byte("acme's module"))
	junk := []byte("0123456789abcdef")
	put(acme, junk)
	_, err = transport.FetchModule(ctx, js, obs, "bolt", acme, 1<<20)
	want = "module " + acme + " in tenant bolt's store: its bytes hash to " + transport.ModuleDigest(junk)
	if !errors.Is(err, transport.ErrModuleDigest) || err.Error() != want {
		t.Fatalf("junk: %v, want %q", err, want)
	}
	if err := transport.ReadModule(ctx, js, obs, "bolt", acme, 1<<20, io.Discard); !errors.Is(err, transport.ErrModuleDigest) {
		t.Fatalf("junk, read: %v", err)
	}

	// A record that lies about the size: the read stops past the limit.
	big := bytes.Repeat([]byte{0}, 4<<20)
	bd := transport.ModuleDigest(big)
	put(bd, big)
	natstest.SetObjectSize(t, js, transport.ModuleBucket, bd, 10)
	if info, err := obs.GetInfo(ctx, bd); err != nil || info.Size != 10 {
		t.Fatalf("the forged record: %+v, %v", info, err)
	}
	var cw countingWriter
	err = transport.ReadModule(ctx, js, obs, "bolt", bd, 64<<10, &cw)
	want = "module " + bd + " in tenant bolt's store: more than the limit of 65536 bytes (its record says 10)"
	if !errors.Is(err, transport.ErrModuleTooLarge) || err.Error() != want {
		t.Fatalf("a lying record: %v, want %q", err, want)
	}
	if cw.n > 64<<10+1 {
		t.Fatalf("read %d bytes past a limit of %d", cw.n, 64<<10)
	}
	if _, err := transport.FetchModule(ctx, js, obs, "bolt", bd, 64<<10); !errors.Is(err, transport.ErrModuleTooLarge) {
		t.Fatalf("a lying record, fetched: %v", err)
	}

	// Missing, a link, a name that is no digest.
	missing := transport.ModuleDigest([]byte("nothing"))
	if _, err := transport.FetchModule(ctx, js, obs, "bolt", missing, 1<<20); !errors.Is(err, jetstream.ErrObjectNotFound) ||
		!strings.Contains(err.Error(), "tenant bolt's store") {
		t.Fatalf("missing: %v", err)
	}
	info, err := obs.GetInfo(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.AddLink(ctx, missing, info); err != nil {
		t.Fatal(err)
	}
	if _, err := transport.FetchModule(ctx, js, obs, "bolt", missing, 1<<20); err == nil || !strings.Contains(err.Error(), "is a link") {
		t.Fatalf("a link: %v", err)
	}
	put("module.wasm", wasm)
	if _, err := transport.FetchModule(ctx, js, obs, "bolt", "module.wasm", 1<<20); err == nil || !strings.Contains(err.Error(), "64 lower-case hex digits") {
		t.Fatalf("a name that is no digest: %v", err)
	}
}

// TestFetchModuleRetried: a fetch whose info request is refused with 429
// or whose get times out fewer times than the limit returns the module;
// when every attempt times out, the error says so and which module; a
// module whose bytes do not match its digest is an answer, fetched once.
func TestFetchModuleRetried(t *testing.T) {
	obs, js := moduleStore(t)
	ctx := testCtx(t)
	wasm := bytes.Repeat([]byte("\x00asm\x01\x00\x00\x00"), 50000)
	digest := transport.ModuleDigest(wasm)
	if _, err := obs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	flaky := objfault.NewFlaky(obs)
	flaky.Fail(objfault.OpInfo, 2)
	flaky.Fail(objfault.OpGet, 2)
	got, err := transport.FetchModule(ctx, js, flaky, "", digest, transport.DefaultMaxModuleBytes)
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("FetchModule through 4 faults = %d bytes, %v; want the module", len(got), err)
	}
	if flaky.Faulted(objfault.OpInfo) != 2 || flaky.Faulted(objfault.OpGet) != 2 {
		t.Fatalf("faults met: %d infos, %d gets; want 2 and 2", flaky.Faulted(objfault.OpInfo), flaky.Faulted(objfault.OpGet))
	}

	flaky.Fail(objfault.OpGet, 1000)
	_, err = transport.FetchModule(ctx, js, flaky, "", digest, transport.DefaultMaxModuleBytes)
	var spent *transient.Exhausted
	if !errors.As(err, &spent) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), digest) {
		t.Fatalf("FetchModule, every get timing out = %v; want the timeout, attempts spent, naming the module", err)
	}

	flaky.Fail(objfault.OpGet, 0)
	liar := transport.ModuleDigest([]byte("another module"))
	if _, err := obs.PutBytes(ctx, liar, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	before := flaky.Faulted(objfault.OpGet)
	counting := &countingGets{ObjectStore: flaky}
	if _, err := transport.FetchModule(ctx, js, counting, "", liar, transport.DefaultMaxModuleBytes); !errors.Is(err, transport.ErrModuleDigest) || counting.gets != 1 {
		t.Fatalf("FetchModule of other bytes = %v after %d gets; want ErrModuleDigest after 1", err, counting.gets)
	}
	if flaky.Faulted(objfault.OpGet) != before {
		t.Fatal("a fault was injected where none was asked for")
	}
}

// countingGets counts the gets of an object store.
type countingGets struct {
	jetstream.ObjectStore
	gets int
}

func (c *countingGets) Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	c.gets++
	return c.ObjectStore.Get(ctx, name, opts...)
}

// TestFetchModuleIncomplete: a module whose put was refused after its
// record was stored (its chunks purged) is refused at once as incomplete,
// naming the module and its bucket, without reading it or trying again,
// where reading it would wait out the fetch's deadline. A fault of the
// moment while counting the chunks is tried again; the module stored
// again is fetched.
func TestFetchModuleIncomplete(t *testing.T) {
	obs, js := moduleStore(t)
	ctx := testCtx(t)
	wasm, digest := putIncompleteModule(t, ctx, obs, js)
	if info, err := obs.GetInfo(ctx, digest); err != nil || info.Size != uint64(len(wasm)) || info.Chunks < 2 {
		t.Fatalf("the record left by the refused put: %+v, %v; want its size and chunks", info, err)
	}

	// Reading the object waits for its chunks until the deadline: well
	// under the test's, so that a fetch that reads fails the test, not
	// times it out.
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	counting := &countingGets{ObjectStore: obs}
	sjs := &stallingJS{JetStream: js, faults: 2}
	_, err := transport.FetchModule(fctx, sjs, counting, "acme", digest, transport.DefaultMaxModuleBytes)
	var spent *transient.Exhausted
	if !errors.Is(err, transport.ErrModuleIncomplete) || errors.As(err, &spent) || transient.Is(err) {
		t.Fatalf("FetchModule of an incomplete object = %v; want ErrModuleIncomplete, no attempts spent", err)
	}
	for _, s := range []string{digest, "tenant acme's store", "bucket " + transport.ModuleBucket, "store the module again"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if counting.gets != 0 || sjs.faulted != 2 || sjs.calls != 3 {
		t.Fatalf("%d gets, %d stream lookups of which %d faults; want no get, 3 lookups through 2 faults", counting.gets, sjs.calls, sjs.faulted)
	}

	// Stored again, whole: fetched.
	if _, err := obs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	got, err := transport.FetchModule(ctx, js, obs, "acme", digest, transport.DefaultMaxModuleBytes)
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("FetchModule of the module stored again = %d bytes, %v", len(got), err)
	}
}

// putIncompleteModule puts a module of several chunks into obs as a put
// refused after its record was stored leaves it.
func putIncompleteModule(t *testing.T, ctx context.Context, obs jetstream.ObjectStore, js jetstream.JetStream) ([]byte, string) {
	t.Helper()
	wasm := bytes.Repeat([]byte("\x00asm\x01\x00\x00\x00 module "), 40000) // several chunks
	digest := transport.ModuleDigest(wasm)
	objfault.PutIncomplete(t, ctx, obs, js, digest, wasm)
	return wasm, digest
}

// stallingJS answers its first faults stream lookups with a 429, as a
// busy server does.
type stallingJS struct {
	jetstream.JetStream
	faults, faulted, calls int
}

func (s *stallingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s.calls++
	if s.faulted < s.faults {
		s.faulted++
		return nil, objfault.TooManyRequests
	}
	return s.JetStream.Stream(ctx, name)
}

// TestReadModuleIncomplete: the coordinator's check of a tenant's module
// copy (ReadModule) refuses one whose put was refused after its record was
// stored at once as incomplete, without reading it, where reading it
// would wait for the missing chunks until the deadline; the module stored
// again reads.
func TestReadModuleIncomplete(t *testing.T) {
	obs, js := moduleStore(t)
	ctx := testCtx(t)
	wasm, digest := putIncompleteModule(t, ctx, obs, js)
	// Reading waits for the chunks until the deadline: well under the
	// test's, so that a check that reads fails the test, not times it out.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	counting := &countingGets{ObjectStore: obs}
	var cw countingWriter
	start := time.Now()
	err := transport.ReadModule(rctx, js, counting, "acme", digest, transport.DefaultMaxModuleBytes, &cw)
	if !errors.Is(err, transport.ErrModuleIncomplete) {
		t.Fatalf("ReadModule of an incomplete object = %v (after %s); want ErrModuleIncomplete", err, time.Since(start))
	}
	if counting.gets != 0 || cw.n != 0 {
		t.Fatalf("%d gets, %d bytes written; want none", counting.gets, cw.n)
	}
	for _, s := range []string{digest, "tenant acme's store", "store the module again"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if _, err := obs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	cw = countingWriter{}
	if err := transport.ReadModule(ctx, js, obs, "acme", digest, transport.DefaultMaxModuleBytes, &cw); err != nil || cw.n != int64(len(wasm)) {
		t.Fatalf("ReadModule of the module stored again = %d bytes, %v", cw.n, err)
	}
}
