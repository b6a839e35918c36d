package instrument

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// FuzzInstrument feeds the decoder and the rewrite arbitrary bytes, seeded
// with the corpus and with the example modules of every language but Go
// (whose 3 MB modules would slow each run down a thousandfold). Instrument
// must not panic, must refuse with an *Error, and must keep valid what
// wazero finds valid: a rewrite that corrupted a module would fail here.
func FuzzInstrument(f *testing.F) {
	for _, src := range corpus {
		f.Add(testmod.WAT(f, src))
	}
	f.Add(testmod.WAT(f, spinWAT))
	for _, lang := range testmod.Languages {
		if lang == "go" {
			continue
		}
		for _, name := range []string{"wordcount", "window"} {
			p, err := testmod.Build(lang, name)
			if err != nil {
				f.Fatalf("building %s %s: %v", lang, name, err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	ctx := context.Background()
	// The interpreter validates as the compiler does, without generating
	// code.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { _ = rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := Instrument(b)
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("got %T %v, want an *Error", err, err)
			}
			return
		}
		cm, err := rt.CompileModule(ctx, b)
		if err != nil {
			return
		}
		_ = cm.Close(ctx)
		cm, err = rt.CompileModule(ctx, res.Wasm)
		if err != nil {
			t.Fatalf("wazero accepts the module but not its instrumented form: %v", err)
		}
		_ = cm.Close(ctx)
	})
}
