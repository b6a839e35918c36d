package worker

import (
	"log/slog"
	"testing"
)

// TestAdmitEpochs: a worker obeys commands of the highest epoch it has seen
// or a higher one, refuses lower ones, and never lowers its epoch.
func TestAdmitEpochs(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler)}
	for i, c := range []struct {
		epoch uint64
		want  bool
		after uint64
	}{
		{0, true, 0}, {5, true, 5}, {5, true, 5}, {4, false, 5}, {0, false, 5}, {9, true, 9}, {6, false, 9}, {10, true, 10},
	} {
		if got := w.admit(c.epoch, "test"); got != c.want || w.epoch.Load() != c.after {
			t.Fatalf("step %d: admit(%d) = %v with epoch %d after, want %v and %d", i, c.epoch, got, w.epoch.Load(), c.want, c.after)
		}
	}
}
