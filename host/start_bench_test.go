package host

import (
	"context"
	"encoding/binary"
	"os"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wstream/wstream/host/instrument"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// BenchmarkInstantiate measures what starting a subtask costs per module
// instance, for the Go and C wordcount examples: wazero's instantiation
// alone, with the data segments as the linker wrote them and as the
// rewrite joins them (package instrument), and NewInstance as a subtask
// gets it (instantiation, the start function and _initialize).
//
//	go test -run '^$' -bench Instantiate -benchtime 200x ./host/
func BenchmarkInstantiate(b *testing.B) {
	for _, m := range []struct{ name, path string }{
		{"go", testmod.GoModule(b, "examples/wasm/go/wordcount")},
		{"c", testmod.CModule(b, "examples/wasm/c/wordcount")},
	} {
		wasm, err := os.ReadFile(m.path)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		r, err := NewRuntime(ctx, Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(ctx)
		res, err := instrument.Instrument(wasm)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %d data segments joined", m.name, res.DataJoined)
		linked := withDataOf(b, res.Wasm, wasm)
		for _, v := range []struct {
			name string
			wasm []byte
		}{{"as-linked", linked}, {"joined", res.Wasm}} {
			cm, err := r.rt.CompileModule(ctx, v.wasm)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(m.name+"/"+v.name, func(b *testing.B) {
				for range b.N {
					mod, err := r.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
					if err != nil {
						b.Fatal(err)
					}
					_ = mod.Close(ctx)
				}
			})
			_ = cm.Close(ctx)
		}
		mod, err := r.Compile(ctx, m.name, wasm)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(m.name+"/NewInstance", func(b *testing.B) {
			for range b.N {
				in, err := mod.NewInstance(ctx, "bench/0")
				if err != nil {
					b.Fatal(err)
				}
				_ = in.Close(ctx)
			}
		})
		_ = mod.Close(ctx)
	}
}

// withDataOf returns wasm with the data section of other instead of its
// own.
func withDataOf(tb testing.TB, wasm, other []byte) []byte {
	tb.Helper()
	section := func(b []byte) (start, end int) {
		for i := 8; i < len(b); {
			size, k := binary.Uvarint(b[i+1:])
			if k <= 0 {
				tb.Fatalf("bad section size at %d", i+1)
			}
			next := i + 1 + k + int(size)
			if b[i] == 11 {
				return i, next
			}
			i = next
		}
		tb.Fatal("no data section")
		return 0, 0
	}
	s, e := section(wasm)
	ds, de := section(other)
	out := append([]byte(nil), wasm[:s]...)
	out = append(out, other[ds:de]...)
	return append(out, wasm[e:]...)
}
