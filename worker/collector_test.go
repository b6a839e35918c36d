package worker

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// TestEmitCheckedBatchAsEmitBatch checks that a batch the host checked,
// passed with its largest port, is collected exactly as EmitBatch collects
// it after its own pass: every kept output, and every port refused.
func TestEmitCheckedBatchAsEmitBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		nOut := 1 + rng.IntN(3)
		keep := rng.IntN(nOut+1) - 1 // -1 keeps all
		var b abi.Builder
		var maxPort uint32
		for j := range rng.IntN(6) {
			port := uint32(rng.IntN(nOut + 1)) // sometimes one too many
			maxPort = max(maxPort, port)
			b.Add(port, int64(j), fmt.Appendf(nil, "k%d", j), fmt.Appendf(nil, "v%d", rng.IntN(100)))
		}
		batch := b.Bytes()
		want := stageCollector{nOut: nOut, keep: keep}
		wantErr := want.EmitBatch(batch)
		got := stageCollector{nOut: nOut, keep: keep}
		gotErr := got.EmitCheckedBatch(batch, maxPort)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("case %d (outputs %d, keep %d, largest port %d): EmitCheckedBatch = %v, EmitBatch = %v",
				n, nOut, keep, maxPort, gotErr, wantErr)
		}
		if wantErr != nil && (!errors.Is(gotErr, operator.ErrBadOutput) || !errors.Is(wantErr, operator.ErrBadOutput)) {
			t.Fatalf("case %d: EmitCheckedBatch refused with %v, EmitBatch with %v; want ErrBadOutput", n, gotErr, wantErr)
		}
		if !bytes.Equal(got.b.Bytes(), want.b.Bytes()) {
			t.Fatalf("case %d (outputs %d, keep %d): collected %x, want %x", n, nOut, keep, got.b.Bytes(), want.b.Bytes())
		}
	}
}
