package coordinator

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/natstest"
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
