package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// Fuzzing source offsets. An offset is what a checkpoint stores for a source
// subtask and hands back to Seek on restore, possibly edited or from another
// job; every decoder of it must refuse what it cannot resume from, and what
// it accepts must resume exactly: the records after a Seek are those of the
// subtask's class that the offset does not say were emitted, in order, and
// the offset taken next is accepted again.

// fuzzFileLines is the line count of the file the file-source targets read.
const fuzzFileLines = 40

// fuzzFilePlaceholder stands for the fuzz file's path in offsets, so that
// seeds and corpus entries do not depend on the temporary directory.
const fuzzFilePlaceholder = "@FILE@"

// fuzzFile writes the file the file-source targets read: line i (from 0)
// is "line-i", the last one without a newline.
func fuzzFile(tb testing.TB) string {
	tb.Helper()
	var b strings.Builder
	for i := range fuzzFileLines {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "line-%d", i)
	}
	p := filepath.Join(tb.TempDir(), "input.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// withPath replaces the placeholder in offset by path.
func withPath(offset []byte, path string) []byte {
	q, _ := json.Marshal(path)
	return bytes.ReplaceAll(offset, []byte(fuzzFilePlaceholder), q[1:len(q)-1])
}

// withPlaceholder replaces path in offset by the placeholder.
func withPlaceholder(offset []byte, path string) []byte {
	q, _ := json.Marshal(path)
	return bytes.ReplaceAll(offset, q[1:len(q)-1], []byte(fuzzFilePlaceholder))
}

// emitted says whether layout l records index i (of l's class) as emitted.
func (l *layout) emitted(i int64) bool { return i < l.gaps[l.gapIndex(i)] }

// subtaskOf picks a subtask and parallelism (1 to 8) from two fuzz bytes.
func subtaskOf(s, p uint8) (int, int) {
	par := int(p%8) + 1
	return int(s) % par, par
}

// fuzzSource is a source under test, white-box: its layout after a Seek and
// the index of its next record.
type fuzzSource interface {
	Source
	Rewindable
}

// checkSeek seeks a fresh source (made by open) to offset and, when the
// source accepts it, checks that reading on emits only records of its
// class that the offset does not record as emitted, in increasing index
// order, and that every offset it returns on the way is accepted by
// another fresh source and returned unchanged by it. index returns the
// index of the record r; prior returns the layout of what was emitted
// before the Seek.
func checkSeek(t *testing.T, open func() fuzzSource, offset []byte, steps int,
	index func(r abi.Record) int64, prior func(fuzzSource) (layout, bool)) {
	t.Helper()
	src := open()
	defer src.Close()
	if err := src.Seek(offset); err != nil {
		if !strings.Contains(err.Error(), "seek") {
			t.Fatalf("error does not say what failed: %v", err)
		}
		return
	}
	l, rescaled := prior(src)
	last := int64(-1)
	var b abi.Builder
	for step := range steps {
		o, err := src.Offset()
		if err != nil {
			t.Fatalf("offset after step %d: %v", step, err)
		}
		again := open()
		if err := again.Seek(o); err != nil {
			again.Close()
			t.Fatalf("step %d: the source's own offset is refused: %v\n%s", step, err, o)
		}
		o2, err := again.Offset()
		again.Close()
		if err != nil || !bytes.Equal(o, o2) {
			t.Fatalf("step %d: offset %s became %s (%v)", step, o, o2, err)
		}
		b.Reset()
		_, done, err := src.Next(context.Background(), &b, 1+step%3)
		if err != nil {
			t.Fatalf("next after seek: %v", err)
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			i := index(r)
			if i <= last {
				t.Fatalf("record %d after record %d", i, last)
			}
			last = i
			if rescaled && i%l.parallelism == l.subtask && l.emitted(i) {
				t.Fatalf("record %d was emitted before the offset %s", i, offset)
			}
		}
		if done {
			break
		}
	}
}

// advance reads n records from src, or all it has.
func advance(tb testing.TB, src Source, n int) {
	tb.Helper()
	var b abi.Builder
	for got := 0; got < n; {
		b.Reset()
		_, done, err := src.Next(context.Background(), &b, n-got)
		if err != nil {
			tb.Fatal(err)
		}
		got += abi.Count(b.Bytes())
		if done {
			return
		}
	}
}

// genIndex recovers a gen record's index from its timestamp: the fuzz
// configuration has interval 1, start 0 and no disorder.
func genIndex(r abi.Record) int64 { return r.Timestamp }

// FuzzGenOffset fuzzes the offsets gen's Seek decodes (see checkSeek).
func FuzzGenOffset(f *testing.F) {
	for _, par := range []int{1, 2, 3} {
		for s := range par {
			g := openGen(f, `{"count":60}`, s, par)
			for range 3 {
				o, err := g.Offset()
				if err != nil {
					f.Fatal(err)
				}
				f.Add(o, uint8(s), uint8(par-1), uint8(60))
				advance(f, g, 4)
			}
			g.Close()
		}
	}
	old := make([][]byte, 2)
	for s := range old {
		g := openGen(f, `{"count":60}`, s, 2)
		advance(f, g, 2+3*s)
		old[s], _ = g.Offset()
	}
	for s := range 3 {
		o, err := RescaleOffsets("gen", old, s, 3)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(o, uint8(s), uint8(2), uint8(60))
	}
	f.Add([]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":9223372036854775806,"maxTs":0}`), uint8(0), uint8(0), uint8(0))
	f.Add([]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":0,"maxTs":0,"period":4,"gaps":[0]}`), uint8(0), uint8(1), uint8(0))
	f.Add([]byte(`{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":3,"maxTs":-9223372036854775808,"period":4,"gaps":[5,3]}`), uint8(1), uint8(1), uint8(0))
	f.Add([]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":1,"maxTs":5,"extra":1}`), uint8(0), uint8(0), uint8(9))
	f.Fuzz(func(t *testing.T, offset []byte, s, p, count uint8) {
		sub, par := subtaskOf(s, p)
		cfg := `{"count":` + strconv.Itoa(int(count)) + `,"keys":3}`
		open := func() fuzzSource { return openGen(t, cfg, sub, par) }
		prior := func(src fuzzSource) (layout, bool) {
			g := src.(*genSource)
			return g.prior, g.prior.gaps != nil
		}
		checkSeek(t, open, offset, 6, genIndex, prior)
	})
}

// FuzzFileOffset fuzzes the offsets the file source's Seek decodes (see
// checkSeek), against a file of fuzzFileLines lines.
func FuzzFileOffset(f *testing.F) {
	path := fuzzFile(f)
	cfg, err := json.Marshal(map[string]any{"path": path})
	if err != nil {
		f.Fatal(err)
	}
	openFile := func(tb testing.TB, s, par int) *fileSource {
		src, err := NewSource("file", cfg)
		if err != nil {
			tb.Fatal(err)
		}
		if err := src.Open(context.Background(), s, par); err != nil {
			tb.Fatal(err)
		}
		return src.(*fileSource)
	}
	for _, par := range []int{1, 2, 3} {
		for s := range par {
			src := openFile(f, s, par)
			for range 4 {
				o, err := src.Offset()
				if err != nil {
					f.Fatal(err)
				}
				f.Add(withPlaceholder(o, path), uint8(s), uint8(par-1))
				advance(f, src, 5)
			}
			src.Close()
		}
	}
	old := make([][]byte, 3)
	for s := range old {
		src := openFile(f, s, 3)
		advance(f, src, 1+2*s)
		old[s], _ = src.Offset()
		src.Close()
	}
	for s := range 2 {
		o, err := RescaleOffsets("file", old, s, 2)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(withPlaceholder(o, path), uint8(s), uint8(1))
	}
	f.Add([]byte(`{"version":1,"kind":"file","subtask":0,"parallelism":1,"path":"@FILE@","line":3,"byte":21,"maxTs":3}`), uint8(0), uint8(0))
	f.Add([]byte(`{"version":1,"kind":"file","subtask":0,"parallelism":1,"path":"@FILE@","line":1,"byte":5,"maxTs":1}`), uint8(0), uint8(0))
	f.Add([]byte(`{"version":1,"kind":"file","subtask":0,"parallelism":1,"path":"@FILE@","line":0,"byte":9999,"maxTs":1}`), uint8(0), uint8(0))
	content, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, offset []byte, s, p uint8) {
		sub, par := subtaskOf(s, p)
		open := func() fuzzSource { return openFile(t, sub, par) }
		offset = withPath(offset, path)
		// Seek does not read the file before the offset's byte, so it
		// cannot tell a line that is not the byte's: it then numbers the
		// lines from the offset's line, as told. Line and content agree
		// when the offset's line is its byte's.
		var o fileOffset
		agree := json.Unmarshal(offset, &o) == nil && o.Byte >= 0 && o.Byte <= int64(len(content)) &&
			int64(bytes.Count(content[:o.Byte], []byte{'\n'})) == o.Line
		// Text records carry their line number (index + 1) as timestamp.
		index := func(r abi.Record) int64 {
			if want := "line-" + strconv.FormatInt(r.Timestamp-1, 10); agree && string(r.Value) != want {
				t.Fatalf("line %d is %q, want %q: the source read from a position that is not the line's", r.Timestamp, r.Value, want)
			}
			return r.Timestamp - 1
		}
		prior := func(src fuzzSource) (layout, bool) {
			fs := src.(*fileSource)
			return fs.prior, fs.prior.gaps != nil
		}
		checkSeek(t, open, offset, 5, index, prior)
	})
}

// FuzzJetStreamOffset fuzzes the offsets the JetStream source's Seek
// decodes. Reading needs a server, so this checks the position: Seek of a
// source's own offset returns it unchanged, and which sequences the source
// would emit agrees with the layout of the offset.
func FuzzJetStreamOffset(f *testing.F) {
	open := func(s, par int, bounded bool) *jsSource {
		return &jsSource{cfg: jsSourceConfig{Stream: "S", Bounded: bounded}, what: "connector jetstream: source S",
			open: true, subtask: int64(s), step: int64(par), pos: 1, maxTs: abi.MinWatermark}
	}
	for _, par := range []int{1, 2, 3} {
		for s := range par {
			src := open(s, par, true)
			src.hasEnd, src.end = true, 50
			for _, pos := range []int64{1, 7, 51} {
				src.pos = pos
				o, err := src.Offset()
				if err != nil {
					f.Fatal(err)
				}
				f.Add(o, uint8(s), uint8(par-1), true)
			}
		}
	}
	old := make([][]byte, 2)
	for s := range old {
		src := open(s, 2, false)
		src.pos = int64(3 + 4*s)
		old[s], _ = src.Offset()
	}
	for s := range 3 {
		o, err := RescaleOffsets("jetstream", old, s, 3)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(o, uint8(s), uint8(2), false)
	}
	f.Add([]byte(`{"version":1,"kind":"jetstream","subtask":0,"parallelism":1,"stream":"S","next":0,"maxTs":0,"end":-1}`), uint8(0), uint8(0), true)
	f.Fuzz(func(t *testing.T, offset []byte, s, p uint8, bounded bool) {
		sub, par := subtaskOf(s, p)
		src := open(sub, par, bounded)
		if err := src.Seek(offset); err != nil {
			return
		}
		var o jsOffset
		if err := json.Unmarshal(offset, &o); err != nil {
			t.Fatalf("Seek accepted %s, which does not decode: %v", offset, err)
		}
		l, err := o.layout()
		if err != nil {
			t.Fatalf("Seek accepted %s, whose layout is invalid: %v", offset, err)
		}
		// Every sequence from the first unhandled one on, around each gap.
		for _, g := range append(l.gaps, src.pos) {
			for seq := max(g-2*l.period, src.pos); seq < g+2*l.period; seq++ {
				want := seq%l.parallelism == l.subtask && !l.emitted(seq)
				if got := src.mine(seq); got != want {
					t.Fatalf("after seeking to %s, sequence %d is mine: %v, want %v", offset, seq, got, want)
				}
			}
		}
		o1, err := src.Offset()
		if err != nil {
			t.Fatal(err)
		}
		again := open(sub, par, bounded)
		if err := again.Seek(o1); err != nil {
			t.Fatalf("the source's own offset %s is refused: %v", o1, err)
		}
		if o2, err := again.Offset(); err != nil || !bytes.Equal(o1, o2) {
			t.Fatalf("offset %s became %s (%v)", o1, o2, err)
		}
	})
}

// FuzzRescaleOffsets fuzzes RescaleOffsets with the offsets of every old
// subtask (the fuzz input split at zero bytes). When it combines them, the
// offsets it returns for the new subtasks must each be accepted by Seek,
// and together record exactly what the old ones recorded as emitted: each
// index is emitted by the new subtask of its class if and only if an old
// subtask emitted it.
func FuzzRescaleOffsets(f *testing.F) {
	kinds := []string{"gen", "file", "jetstream"}
	seed := func(kind int, par int, progress func(s int) []byte, newPar uint8) {
		var olds [][]byte
		for s := range par {
			olds = append(olds, progress(s))
		}
		f.Add(bytes.Join(olds, []byte{0}), uint8(kind), newPar)
	}
	path := fuzzFile(f)
	for _, par := range []int{1, 2, 3} {
		seed(0, par, func(s int) []byte {
			g := openGen(f, `{"count":60}`, s, par)
			defer g.Close()
			advance(f, g, 1+s*2)
			o, _ := g.Offset()
			return o
		}, uint8(4-par))
		seed(1, par, func(s int) []byte {
			cfg, _ := json.Marshal(map[string]any{"path": path})
			src, _ := NewSource("file", cfg)
			_ = src.Open(context.Background(), s, par)
			defer src.Close()
			advance(f, src, 2+s)
			o, _ := src.(*fileSource).Offset()
			return withPlaceholder(o, path)
		}, uint8(par+1))
		seed(2, par, func(s int) []byte {
			src := &jsSource{cfg: jsSourceConfig{Stream: "S"}, open: true, subtask: int64(s), step: int64(par), pos: int64(1 + 5*s)}
			o, _ := src.Offset()
			return o
		}, uint8(par))
	}
	// A rescaled layout, rescaled again.
	var olds [][]byte
	for s := range 2 {
		g := openGen(f, `{"count":60}`, s, 2)
		advance(f, g, 1+4*s)
		o, _ := g.Offset()
		olds = append(olds, o)
	}
	var mid [][]byte
	for s := range 3 {
		o, err := RescaleOffsets("gen", olds, s, 3)
		if err != nil {
			f.Fatal(err)
		}
		mid = append(mid, o)
	}
	f.Add(bytes.Join(mid, []byte{0}), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, kind, newPar uint8) {
		connector := kinds[int(kind)%len(kinds)]
		old := bytes.Split(withPath(data, path), []byte{0})
		np := int(newPar%8) + 1
		var news [][]byte
		for ns := range np {
			o, err := RescaleOffsets(connector, old, ns, np)
			if err != nil {
				if ns > 0 {
					// Whether the offsets combine does not depend on the
					// new subtask.
					t.Fatalf("subtask 0 of %d combines, subtask %d does not: %v", np, ns, err)
				}
				return
			}
			news = append(news, o)
		}
		oldL := layoutsOf(t, connector, old)
		newL := layoutsOf(t, connector, news)
		var probes []int64
		for _, ls := range [][]layout{oldL, newL} {
			for _, l := range ls {
				for _, g := range l.gaps {
					probes = append(probes, g)
				}
			}
		}
		span := int64(2 * 8 * len(oldL))
		for _, g := range probes {
			for i := max(g-span, 0); i < g+span; i++ {
				o := &oldL[i%int64(len(oldL))]
				n := &newL[i%int64(np)]
				if was, is := o.emitted(i), n.emitted(i); was != is {
					t.Fatalf("index %d: emitted before the rescale %v, after %v", i, was, is)
				}
			}
		}
		for ns, o := range news {
			if err := seekFresh(t, connector, path, o, ns, np); err != nil {
				t.Fatalf("offset %s of new subtask %d of %d is refused: %v", o, ns, np, err)
			}
		}
	})
}

// layoutsOf decodes offsets (subtask s's at position s) into layouts.
func layoutsOf(t *testing.T, connector string, offsets [][]byte) []layout {
	t.Helper()
	out := make([]layout, len(offsets))
	for s, raw := range offsets {
		var (
			l   layout
			err error
		)
		switch connector {
		case "gen":
			var o genOffset
			if err = json.Unmarshal(raw, &o); err == nil {
				l, err = o.layout()
			}
		case "file":
			var o fileOffset
			if err = json.Unmarshal(raw, &o); err == nil {
				l, err = o.layout()
			}
		default:
			var o jsOffset
			if err = json.Unmarshal(raw, &o); err == nil {
				l, err = o.layout()
			}
		}
		if err != nil {
			t.Fatalf("offset %s of subtask %d, which RescaleOffsets took: %v", raw, s, err)
		}
		out[s] = l
	}
	return out
}

// seekFresh seeks a fresh source of connector, subtask s of par, to offset.
func seekFresh(t *testing.T, connector, path string, offset []byte, s, par int) error {
	var src fuzzSource
	switch connector {
	case "gen":
		src = openGen(t, `{"count":0}`, s, par)
	case "file":
		var o fileOffset
		if json.Unmarshal(offset, &o) == nil && o.Path != path {
			return nil // the offsets name another file, which the test does not have
		}
		cfg, _ := json.Marshal(map[string]any{"path": path})
		fs, err := NewSource("file", cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.Open(context.Background(), s, par); err != nil {
			t.Fatal(err)
		}
		src = fs.(*fileSource)
	default:
		// Not connected: Close would close its connection. Of the
		// offsets' stream, which a source needs no server to seek in.
		var o jsOffset
		_ = json.Unmarshal(offset, &o)
		src := &jsSource{cfg: jsSourceConfig{Stream: o.Stream}, what: "connector jetstream: source " + o.Stream, open: true,
			subtask: int64(s), step: int64(par), pos: 1, maxTs: abi.MinWatermark}
		return src.Seek(offset)
	}
	defer src.Close()
	err := src.Seek(offset)
	if err != nil && connector == "file" && strings.Contains(err.Error(), "file has only") {
		return nil // a position past the end of this file: the offsets may come from a longer one
	}
	if err != nil && connector == "file" && strings.Contains(err.Error(), "not the start of a line") {
		return nil // likewise, a position in another file
	}
	return err
}

// TestGenSeekRefusesIndexPastBound pins a bug: a plain gen offset whose
// next index was near 2^63 was accepted, and the first Next overflowed the
// index and panicked (division by zero in skipEmitted). Offsets name
// indices up to 2^62, as rescaled ones always did.
func TestGenSeekRefusesIndexPastBound(t *testing.T) {
	for _, next := range []string{"9223372036854775806", "4611686018427387905"} {
		g := openGen(t, `{"count":0}`, 0, 1)
		err := g.Seek([]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":` + next + `,"maxTs":0}`))
		if err == nil || !strings.Contains(err.Error(), "beyond the last index") {
			t.Errorf("next %s: %v, want an error", next, err)
		}
	}
	g := openGen(t, `{"count":0}`, 0, 1)
	if err := g.Seek([]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":4611686018427387904,"maxTs":0}`)); err != nil {
		t.Fatalf("next 2^62: %v", err)
	}
	advance(t, g, 3)
}
