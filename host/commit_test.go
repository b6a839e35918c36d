package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// committingCollector is a collector that asks for commit points every
// `every` records and records the ones it is told of.
type committingCollector struct {
	fakeCollector
	every int
	done  []int
	fail  error
}

func (c *committingCollector) CommitInterval() int { return c.every }
func (c *committingCollector) Commit(n int) error {
	if c.fail != nil {
		return c.fail
	}
	c.done = append(c.done, n)
	return nil
}

var _ operator.Committer = (*committingCollector)(nil)

// commitOverrides is a guest whose wstream_process calls commit with
// 0, 3, 2, 3, 10 and -1 on its batch and stores each result at 2048 on.
func commitOverrides() map[string]string {
	body := ""
	for k, done := range []int{0, 3, 2, 3, 10, -1} {
		body += fmt.Sprintf("(i32.store (i32.const %d) (call $commit (i32.const %d))) ", 2048+4*k, done)
	}
	return map[string]string{
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32) ` + body + `(i32.const 0))`,
	}
}

// TestCommitKeepsTheGuestsWord: commit answers the interval the collector
// asks for (0 for one that asks none, or is no Committer) and passes each
// new commit point on; it refuses a point before the last one and one
// that is not below the batch's count, outside a batch call, and turns the
// collector's error into STATE_ERROR that fails the call.
func TestCommitKeepsTheGuestsWord(t *testing.T) {
	var b abi.Builder
	for i := range 10 {
		b.Add(0, int64(i), []byte("k"), []byte("v"))
	}
	st := abi.StatusBadArgument
	bad := uint32(st)
	results := func(g *rig) []uint32 {
		var r []uint32
		for k := range 6 {
			v, _ := g.inst.mem.ReadUint32Le(uint32(2048 + 4*k))
			r = append(r, v)
		}
		return r
	}
	for _, c := range []struct {
		name string
		out  operator.Collector
		want []uint32
		done []int
	}{
		{"committer", &committingCollector{every: 4}, []uint32{4, 4, bad, 4, bad, bad}, []int{3}},
		{"asks none", &committingCollector{}, []uint32{0, 0, bad, 0, bad, bad}, nil},
		{"no committer", &fakeCollector{}, []uint32{0, 0, bad, 0, bad, bad}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, commitOverrides())
			if err := g.s.Process(b.Bytes(), c.out); err != nil {
				t.Fatal(err)
			}
			if got := results(g); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("commit results %v, want %v", got, c.want)
			}
			if cc, ok := c.out.(*committingCollector); ok && fmt.Sprint(cc.done) != fmt.Sprint(c.done) {
				t.Errorf("commit points %v, want %v", cc.done, c.done)
			}
		})
	}
	t.Run("collector fails", func(t *testing.T) {
		g := newRig(t, commitOverrides())
		broke := errors.New("the journal broke")
		out := &committingCollector{every: 4, fail: broke}
		err := g.s.Process(b.Bytes(), out)
		if err == nil || !errors.Is(err, broke) {
			t.Fatalf("a collector failing its commit: the call returned %v", err)
		}
		if got := int32(results(g)[1]); got != abi.StatusStateError {
			t.Errorf("commit(3) = %d, want STATE_ERROR", got)
		}
	})
	t.Run("outside a batch call", func(t *testing.T) {
		g := newRig(t, nil)
		for _, ph := range []phase{phaseIdle, phaseOpen, phaseClose} {
			if st := g.call(ph, abi.ImportCommit, 0); st != abi.StatusNotInCallback {
				t.Errorf("commit(0) in phase %d = %d, want NOT_IN_CALLBACK", ph, st)
			}
		}
	})
}

// BenchmarkCommitPoints measures what commit points cost a Go guest (the
// keyed count of testops' poison, batches of 512 records over distinct
// keys): the same batches with a commit point every 64, 128 and 256
// records and with none, alternated, in µs per batch.
func BenchmarkCommitPoints(b *testing.B) {
	m := compileTestops(b, context.Background())
	batches, _ := poisonBatches(512, 16)
	_, op, svc := openSnapshottedPoison(b, m, poisonSpec)
	every := []int{0, 64, 128, 256}
	took := make([]time.Duration, len(every))
	// The first call grows the guest's buffers: outside the timing.
	if err := op.Process(batches[0], &committingCollector{}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		for j := range every {
			// A different configuration first each time.
			k := (i + j) % len(every)
			e := every[k]
			svc.calls = svc.calls[:0]
			out := &committingCollector{every: e}
			t0 := time.Now()
			if err := op.Process(batches[(i*len(every)+j)%len(batches)], out); err != nil {
				b.Fatal(err)
			}
			took[k] += time.Since(t0)
			if e > 0 && len(out.done) != 512/e-1 {
				b.Fatalf("%d commit points every %d of 512 records", len(out.done), e)
			}
		}
		i++
	}
	for k, e := range every {
		name := "none"
		if e > 0 {
			name = fmt.Sprintf("every-%d", e)
		}
		b.ReportMetric(float64(took[k].Microseconds())/float64(b.N), name+"-µs")
	}
}
