package coordinator

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/testkit/objfault"
	"github.com/wstream/wstream/internal/transient"
	"github.com/wstream/wstream/transport"
)

// TestStoreModuleReplacesOtherBytes: a module store that holds other
// bytes of the module's size under its digest (a broken upload, or junk)
// gets the module; one that holds the module is not written again.
func TestStoreModuleReplacesOtherBytes(t *testing.T) {
	_, js := natstest.Start(t)
	nc := js.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket})
	if err != nil {
		t.Fatal(err)
	}
	wasm := []byte("\x00asm\x01\x00\x00\x00 a module of some bytes")
	digest := ModuleDigest(wasm)
	if _, err := obs.PutBytes(ctx, digest, bytes.Repeat([]byte{'x'}, len(wasm))); err != nil {
		t.Fatal(err)
	}
	if got, err := StoreModule(ctx, nc, wasm); err != nil || got != digest {
		t.Fatalf("StoreModule: %s, %v", got, err)
	}
	b, err := obs.GetBytes(ctx, digest)
	if err != nil || !bytes.Equal(b, wasm) {
		t.Fatalf("the store holds %q (%v), want the module", b, err)
	}
	if err := transport.VerifyModule("", digest, b); err != nil {
		t.Fatal(err)
	}
	before, err := obs.GetInfo(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StoreModule(ctx, nc, wasm); err != nil {
		t.Fatal(err)
	}
	if after, err := obs.GetInfo(ctx, digest); err != nil || after.NUID != before.NUID {
		t.Fatalf("the module was written again (%v)", err)
	}
}

// TestStoreModuleRetried: a module upload refused with 429 (after its
// first chunk went to the server) fewer times than the limit stores the
// module, intact; refused every time, the deploy fails saying which
// module, where and why, and that it was tried till the attempts were
// spent, and the store holds nothing under the digest.
func TestStoreModuleRetried(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket})
	if err != nil {
		t.Fatal(err)
	}
	wasm := bytes.Repeat([]byte("\x00asm\x01\x00\x00\x00 module "), 40000) // several chunks
	digest := ModuleDigest(wasm)

	flaky := objfault.NewFlaky(obs)
	flaky.Fail(objfault.OpPut, transient.Default.Attempts-1)
	m := NewModuleStore(js.Conn())
	m.obs = flaky
	if got, err := m.Store(ctx, "", wasm); err != nil || got != digest {
		t.Fatalf("Store refused %d times: %s, %v", transient.Default.Attempts-1, got, err)
	}
	if n := flaky.Faulted(objfault.OpPut); n != transient.Default.Attempts-1 {
		t.Fatalf("%d puts refused, want %d", n, transient.Default.Attempts-1)
	}
	b, err := obs.GetBytes(ctx, digest)
	if err != nil || !bytes.Equal(b, wasm) {
		t.Fatalf("the store holds %d bytes (%v), want the module's %d", len(b), err, len(wasm))
	}
	if err := transport.VerifyModule("", digest, b); err != nil {
		t.Fatal(err)
	}

	other := append(bytes.Clone(wasm), "another"...)
	flaky.Fail(objfault.OpPut, transient.Default.Attempts)
	got, err := m.Store(ctx, "", other)
	var spent *transient.Exhausted
	if got != "" || !errors.As(err, &spent) || !errors.Is(err, objfault.TooManyRequests) {
		t.Fatalf("Store refused every time = %q, %v; want the 429, attempts spent", got, err)
	}
	for _, what := range []string{ModuleDigest(other), transport.ModuleBucket, "too many requests", "gave up after"} {
		if !strings.Contains(err.Error(), what) {
			t.Errorf("error %q does not say %q", err, what)
		}
	}
	if _, err := obs.GetInfo(ctx, ModuleDigest(other)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("after the refused puts the store has %s: %v", ModuleDigest(other), err)
	}
}

// TestStoreModuleRefusedAfterInfo: a put of a module refused after its
// record was stored (the client purged its chunks) leaves a record with
// the module's size and SHA-256: the next attempt must not take it for the
// module, and the module can be fetched once Store returns.
func TestStoreModuleRefusedAfterInfo(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket})
	if err != nil {
		t.Fatal(err)
	}
	wasm := bytes.Repeat([]byte("\x00asm\x01\x00\x00\x00 module "), 40000) // several chunks
	flaky := objfault.NewFlaky(obs)
	flaky.JS = js
	flaky.Fail(objfault.OpPutAfterInfo, 1)
	m := NewModuleStore(js.Conn())
	m.obs = flaky
	digest, err := m.Store(ctx, "", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if n := flaky.Faulted(objfault.OpPutAfterInfo); n != 1 {
		t.Fatalf("%d puts refused after their record, want 1", n)
	}
	got, err := transport.FetchModule(ctx, js, obs, "", digest, int64(len(wasm)))
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("fetching the module after Store: %d bytes, %v", len(got), err)
	}
}
