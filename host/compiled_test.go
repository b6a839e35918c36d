package host

import (
	"context"
	"testing"
)

// TestCompiled: a module that the runtime holds compiled is found by its
// digest, without its bytes, for as long as some Module holds it.
func TestCompiled(t *testing.T) {
	ctx := context.Background()
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(nil, ""))
	if got := r.Compiled("sha256:00", "x.wasm"); got != nil {
		t.Fatal("a module of an unknown digest was found")
	}
	found := r.Compiled(m.Digest(), "other.wasm")
	if found == nil {
		t.Fatal("the compiled module was not found by its digest")
	}
	if found.Name() != "other.wasm" || found.Digest() != m.Digest() {
		t.Fatalf("found %s %s, want other.wasm %s", found.Name(), found.Digest(), m.Digest())
	}
	// The handle found keeps the module when the first is closed.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := found.NewInstance(ctx, "op/0")
	if err != nil {
		t.Fatal(err)
	}
	_ = in.Close(ctx)
	again := r.Compiled(m.Digest(), "x.wasm")
	if again == nil {
		t.Fatal("the module was dropped while a handle held it")
	}
	// Every handle closed: gone.
	_ = found.Close(ctx)
	_ = again.Close(ctx)
	if r.Compiled(m.Digest(), "x.wasm") != nil {
		t.Fatal("found a module that no handle holds")
	}
}
