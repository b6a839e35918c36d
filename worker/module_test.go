package worker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/internal/testkit/objfault"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// moduleBucket starts a JetStream server of its own (a tenant's account,
// as far as the worker can tell) and returns its JetStream and module
// bucket.
func moduleBucket(t *testing.T) (jetstream.JetStream, jetstream.ObjectStore) {
	t.Helper()
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: transport.ModuleBucket})
	if err != nil {
		t.Fatal(err)
	}
	return js, obs
}

// TestModuleFetchVerified: a worker runs a tenant's module only once the
// tenant's own store gave bytes that hash to its digest, whatever it has
// compiled for others; and it fetches no module over the limit.
func TestModuleFetchVerified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := host.NewRuntime(ctx, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	w := &Worker{cfg: Config{ID: "w", MaxModuleBytes: 1 << 20}, log: logging.Discard(), rt: rt, modules: map[moduleKey]*host.Module{}}
	defer func() {
		for _, m := range w.modules {
			_ = m.Close(ctx)
		}
	}()

	acmeJS, acmeObs := moduleBucket(t)
	boltJS, boltObs := moduleBucket(t)
	wasm := testmod.WAT(t, hostileEventWAT)
	digest := transport.ModuleDigest(wasm)
	if _, err := acmeObs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	acme, err := w.module(ctx, acmeJS, "acme", digest, "acme.wasm", 0)
	if err != nil {
		t.Fatalf("acme's module: %v", err)
	}

	// bolt's junk under acme's digest: refused, though the worker holds
	// acme's module compiled.
	junk := []byte("0123456789abcdef")
	if _, err := boltObs.PutBytes(ctx, digest, junk); err != nil {
		t.Fatal(err)
	}
	_, err = w.module(ctx, boltJS, "bolt", digest, "acme.wasm", 0)
	want := "module acme.wasm: module " + digest + " in tenant bolt's store: its bytes hash to " + transport.ModuleDigest(junk)
	if !errors.Is(err, transport.ErrModuleDigest) || err.Error() != want {
		t.Fatalf("bolt naming acme's digest: %v, want %q", err, want)
	}
	// Nor does a retry get it.
	if _, err := w.module(ctx, boltJS, "bolt", digest, "acme.wasm", 0); !errors.Is(err, transport.ErrModuleDigest) {
		t.Fatalf("bolt again: %v", err)
	}
	// The admin's store is checked too.
	other := transport.ModuleDigest([]byte("another module"))
	if _, err := boltObs.PutBytes(ctx, other, junk); err != nil {
		t.Fatal(err)
	}
	if _, err := w.module(ctx, boltJS, "", other, "other.wasm", 0); !errors.Is(err, transport.ErrModuleDigest) ||
		!strings.Contains(err.Error(), "in the module store "+transport.ModuleBucket+": its bytes hash to") {
		t.Fatalf("junk in the admin's store: %v", err)
	}
	// acme's own jobs go on with its module.
	if m, err := w.module(ctx, acmeJS, "acme", digest, "acme.wasm", 0); err != nil || m != acme {
		t.Fatalf("acme again: %v (same module: %v)", err, m == acme)
	}
	// Once bolt stores the bytes itself, it has a module of its own.
	if _, err := boltObs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	if m, err := w.module(ctx, boltJS, "bolt", digest, "acme.wasm", 0); err != nil || m == acme || m.Digest() != digest {
		t.Fatalf("bolt with the bytes: %v", err)
	}

	// Size: the deployment's limit, within the worker's cap (1 MiB here).
	big := bytes.Repeat([]byte{0}, 2<<20)
	bigDigest := transport.ModuleDigest(big)
	if _, err := boltObs.PutBytes(ctx, bigDigest, big); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{0, 1 << 20, 4 << 20, 64 << 10} {
		_, err := w.module(ctx, boltJS, "bolt", bigDigest, "big.wasm", limit)
		want := "over the limit of " + map[bool]string{true: "65536", false: "1048576"}[limit == 64<<10] + " bytes"
		if !errors.Is(err, transport.ErrModuleTooLarge) || !strings.Contains(err.Error(), "is 2097152 bytes, "+want) {
			t.Errorf("limit %d: %v, want %q", limit, err, want)
		}
	}
	if len(w.modules) != 2 {
		t.Errorf("the worker holds %d modules, want acme's and bolt's", len(w.modules))
	}
}

// TestModuleIncompleteRefused: a module whose object in the tenant's store
// names chunks that are gone fails the deployment's fetch at once with
// ErrModuleIncomplete (the coordinator's restart strategy then decides),
// is not kept, and is fetched once stored again.
func TestModuleIncompleteRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := host.NewRuntime(ctx, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	w := &Worker{cfg: Config{ID: "w", MaxModuleBytes: 1 << 20}, log: logging.Discard(), rt: rt, modules: map[moduleKey]*host.Module{}}
	defer func() {
		for _, m := range w.modules {
			_ = m.Close(ctx)
		}
	}()
	js, obs := moduleBucket(t)
	wasm := testmod.WAT(t, hostileEventWAT)
	digest := transport.ModuleDigest(wasm)
	objfault.PutIncomplete(t, ctx, obs, js, digest, wasm)
	// Reading the object would wait for its chunks until this deadline.
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	_, err = w.module(fctx, js, "acme", digest, "acme.wasm", 0)
	if !errors.Is(err, transport.ErrModuleIncomplete) || !strings.Contains(err.Error(), "module acme.wasm:") || !strings.Contains(err.Error(), digest) {
		t.Fatalf("an incomplete module = %v; want ErrModuleIncomplete naming it", err)
	}
	if len(w.modules) != 0 {
		t.Fatalf("kept %d modules after a refused fetch", len(w.modules))
	}
	if _, err := obs.PutBytes(ctx, digest, wasm); err != nil {
		t.Fatal(err)
	}
	if m, err := w.module(ctx, js, "acme", digest, "acme.wasm", 0); err != nil || m.Digest() != digest {
		t.Fatalf("the module stored again: %v", err)
	}
}
