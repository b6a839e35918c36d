package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// readUpTo reads at most n records from src in batches of random size and
// stops early when the source is done. It returns the records, the last
// watermark (abi.MinWatermark when Next was not called) and whether the
// source reported done.
func readUpTo(t *testing.T, src Source, n int, rng *rand.Rand) ([]genRec, int64, bool) {
	t.Helper()
	var recs []genRec
	wm := int64(abi.MinWatermark)
	var b abi.Builder
	for len(recs) < n {
		b.Reset()
		want := min(1+rng.IntN(9), n-len(recs))
		w, done, err := src.Next(context.Background(), &b, want)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if w < wm {
			t.Fatalf("watermark went back from %d to %d", wm, w)
		}
		wm = w
		got, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > want {
			t.Fatalf("Next returned %d records, max %d", len(got), want)
		}
		for _, r := range got {
			recs = append(recs, genRec{r.Timestamp, string(r.Key), string(r.Value)})
		}
		if done {
			return recs, wm, true
		}
	}
	return recs, wm, false
}

// runRescaleChain runs a source at each parallelism of chain in turn: every
// subtask of a stage is restored from the offsets of the stage before
// (rescaled with RescaleOffsets), reads a random number of records — none,
// some, or all of its share — and records its offset; the last stage reads
// everything. The records of all stages together must be those of one
// uninterrupted run, each exactly once, and no restored subtask may report
// a watermark below one reported before the rescale.
func runRescaleChain(t *testing.T, connector string, cfg json.RawMessage, chain []int, total int, rng *rand.Rand) {
	t.Helper()
	want := records(drain(t, openSource(t, connector, cfg, 0, 1), 7))
	if len(want) != total {
		t.Fatalf("an uninterrupted run gave %d records, want %d", len(want), total)
	}
	var got []genRec
	var offsets [][]byte
	wmBefore := int64(abi.MinWatermark)
	for stage, p := range chain {
		next := make([][]byte, p)
		wmStage := int64(abi.MinWatermark)
		for s := range p {
			src := openSource(t, connector, cfg, s, p)
			if offsets != nil {
				off, err := RescaleOffsets(connector, offsets, s, p)
				if err != nil {
					t.Fatalf("chain %v stage %d: RescaleOffsets(subtask %d of %d): %v", chain, stage, s, p, err)
				}
				if err := src.(Rewindable).Seek(off); err != nil {
					t.Fatalf("chain %v stage %d: Seek(%s): %v", chain, stage, off, err)
				}
			}
			n := math.MaxInt
			if stage < len(chain)-1 {
				switch r := rng.IntN(10); {
				case r == 0:
					n = 0
				case r == 1:
					// all of its share: the offset of a finished subtask
				default:
					n = rng.IntN(total/p + 3)
				}
			}
			recs, wm, _ := readUpTo(t, src, n, rng)
			if len(recs) > 0 || n > 0 {
				if wm < wmBefore {
					t.Fatalf("chain %v stage %d subtask %d: watermark %d is below %d, reported before the rescale", chain, stage, s, wm, wmBefore)
				}
				wmStage = max(wmStage, wm)
			}
			got = append(got, recs...)
			off, err := src.(Rewindable).Offset()
			if err != nil {
				t.Fatal(err)
			}
			var o struct {
				Gaps []int64 `json:"gaps"`
			}
			if err := json.Unmarshal(off, &o); err != nil {
				t.Fatal(err)
			}
			if len(o.Gaps) > maxRescaleGaps {
				t.Fatalf("offset with %d gaps", len(o.Gaps))
			}
			next[s] = off
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
		}
		offsets = next
		wmBefore = max(wmBefore, wmStage)
	}
	sortRecs(got)
	sortRecs(want)
	if !slices.Equal(got, want) {
		t.Fatalf("chain %v: %d records in all, want %d, the records of one uninterrupted run once each", chain, len(got), len(want))
	}
}

// rescaleChains are the chains every rescale test runs, then random ones.
func rescaleChains(rng *rand.Rand, random int) [][]int {
	chains := [][]int{{1, 4, 2}, {3, 2, 5}, {2, 3}, {4, 1}, {1, 1}, {5, 3, 4, 6, 1}, {2, 2, 2}}
	for range random {
		c := make([]int, 2+rng.IntN(3))
		for i := range c {
			c[i] = 1 + rng.IntN(6)
		}
		chains = append(chains, c)
	}
	return chains
}

func TestGenRescale(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i, chain := range rescaleChains(rng, 60) {
		count := 20 + rng.IntN(300)
		cfg := json.RawMessage(fmt.Sprintf(`{"count":%d,"keys":40,"words":2,"disorder":%d,"seed":%d}`, count, rng.IntN(30), i))
		for range 3 {
			runRescaleChain(t, "gen", cfg, chain, count, rng)
		}
	}
}

func TestFileRescale(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tsv := seekTestFile(t) // CRLF, a line longer than the buffer, no final newline
	for i, chain := range rescaleChains(rng, 40) {
		var content strings.Builder
		lines := rng.IntN(200)
		for j := range lines {
			fmt.Fprintf(&content, "line %d of %d\n", j, i)
		}
		text := writeFile(t, fmt.Sprintf("in-%d.txt", i), content.String())
		for range 2 {
			runRescaleChain(t, "file", fileConfig(t, map[string]any{"path": text, "batch": 1 + rng.IntN(4)}), chain, lines, rng)
		}
		runRescaleChain(t, "file", fileConfig(t, map[string]any{"path": tsv, "format": "tsv", "watermarkDelay": 30}), chain, 121, rng)
	}
}

// TestGenRescaleLayout follows 1→4→2 by hand: what the rescaled offsets
// hold, that they collapse to plain offsets once the subtasks have passed
// the old positions, and which records each new subtask emits.
func TestGenRescaleLayout(t *testing.T) {
	const cfg = `{"count":60,"keys":5}`
	read := func(g *genSource, n int) []int64 {
		t.Helper()
		var b abi.Builder
		if n > 0 {
			if _, _, err := g.Next(context.Background(), &b, n); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		var ts []int64
		for _, r := range recs {
			ts = append(ts, r.Timestamp) // = the index: interval 1, no disorder
		}
		return ts
	}
	offset := func(g *genSource) []byte {
		t.Helper()
		off, err := g.Offset()
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	rescale := func(old [][]byte, s, p int) *genSource {
		t.Helper()
		off, err := RescaleOffsets("gen", old, s, p)
		if err != nil {
			t.Fatal(err)
		}
		g := openGen(t, cfg, s, p)
		if err := g.Seek(off); err != nil {
			t.Fatalf("Seek(%s): %v", off, err)
		}
		return g
	}

	one := openGen(t, cfg, 0, 1)
	read(one, 10)
	old := [][]byte{offset(one)}

	// 1 → 4: each new class starts at the first of its indices ≥ 10.
	reads := []int{2, 0, 5, 0}
	wantTs := [][]int64{{12, 16}, nil, {10, 14, 18, 22, 26}, nil}
	four := make([][]byte, 4)
	for s := range 4 {
		g := rescale(old, s, 4)
		if got := read(g, reads[s]); !slices.Equal(got, wantTs[s]) {
			t.Errorf("subtask %d of 4 emitted %v, want %v", s, got, wantTs[s])
		}
		four[s] = offset(g)
	}
	wantOff := []string{
		`{"version":1,"kind":"gen","subtask":0,"parallelism":4,"next":20,"maxTs":16}`,
		`{"version":1,"kind":"gen","subtask":1,"parallelism":4,"next":13,"maxTs":9}`,
		`{"version":1,"kind":"gen","subtask":2,"parallelism":4,"next":30,"maxTs":26}`,
		`{"version":1,"kind":"gen","subtask":3,"parallelism":4,"next":11,"maxTs":9}`,
	}
	for s := range 4 {
		if string(four[s]) != wantOff[s] {
			t.Errorf("offset of subtask %d of 4:\n got  %s\n want %s", s, four[s], wantOff[s])
		}
	}
	// 4 → 2: even indices ≡ 0 (mod 4) are done below 20, ≡ 2 below 30: two
	// gaps; odd ones are done below 11 and 13, which is one prefix. Both new
	// subtasks start from the largest maximum timestamp, 26.
	even, err := RescaleOffsets("gen", four, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":20,"maxTs":26,"period":4,"gaps":[20,30]}`; string(even) != want {
		t.Errorf("rescaled offset of subtask 0 of 2:\n got  %s\n want %s", even, want)
	}
	odd, err := RescaleOffsets("gen", four, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":11,"maxTs":26,"period":2,"gaps":[11]}`; string(odd) != want {
		t.Errorf("rescaled offset of subtask 1 of 2:\n got  %s\n want %s", odd, want)
	}
	g := rescale(four, 0, 2)
	if got := read(g, 1); !slices.Equal(got, []int64{20}) {
		t.Errorf("subtask 0 of 2 emitted %v, want 20", got)
	}
	if got, want := string(offset(g)), `{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":24,"maxTs":26,"period":4,"gaps":[24,30]}`; got != want {
		t.Errorf("offset:\n got  %s\n want %s", got, want)
	}
	if got := read(g, 2); !slices.Equal(got, []int64{24, 28}) {
		t.Errorf("subtask 0 of 2 then emitted %v, want 24 28 (22 and 26 were emitted before)", got)
	}
	if got, want := string(offset(g)), `{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":30,"maxTs":28}`; got != want {
		t.Errorf("past every old position the offset is plain again:\n got  %s\n want %s", got, want)
	}
	if got := read(g, 2); !slices.Equal(got, []int64{30, 32}) {
		t.Errorf("subtask 0 of 2 then emitted %v, want 30 32", got)
	}
}

// TestRescaleFileUsesBytePositions checks that a rescaled file source
// starts at the furthest old position before its first unread line: the
// lines before it are scrambled and it still reads the right ones.
func TestRescaleFileUsesBytePositions(t *testing.T) {
	var content strings.Builder
	for i := range 40 {
		fmt.Fprintf(&content, "line %d\n", i)
	}
	path := writeFile(t, "in.txt", content.String())
	cfg := fileConfig(t, map[string]any{"path": path})
	rng := rand.New(rand.NewPCG(9, 10))
	old := make([][]byte, 2)
	for s, n := range []int{8, 6} { // subtask 0 reads lines 0…14, subtask 1 lines 1…11
		src := openSource(t, "file", cfg, s, 2)
		readUpTo(t, src, n, rng)
		off, err := src.(Rewindable).Offset()
		if err != nil {
			t.Fatal(err)
		}
		old[s] = off
	}
	off, err := RescaleOffsets("file", old, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var o fileOffset
	if err := json.Unmarshal(off, &o); err != nil {
		t.Fatal(err)
	}
	if o.Line != 12 || o.Byte != int64(strings.Index(content.String(), "line 12\n")) || o.Period != 2 || !slices.Equal(o.Gaps, []int64{16, 13}) {
		t.Fatalf("rescaled offset %s, want reading from line 12 with gaps 16 and 13", off)
	}
	scrambled := []byte(content.String())
	for i := range o.Byte - 1 {
		scrambled[i] = '#'
	}
	if err := os.WriteFile(path, scrambled, 0o644); err != nil {
		t.Fatal(err)
	}
	src := openSource(t, "file", cfg, 0, 1)
	if err := src.(Rewindable).Seek(off); err != nil {
		t.Fatal(err)
	}
	var lines []int64
	for _, r := range records(drain(t, src, 5)) {
		lines = append(lines, r.ts-1)
	}
	want := []int64{13} // 12 and 14 were read before, 16 and on were not
	for i := int64(15); i < 40; i++ {
		want = append(want, i)
	}
	if !slices.Equal(lines, want) {
		t.Errorf("rescaled source read lines %v, want %v", lines, want)
	}
}

func TestRescaledGenNextDoesNotAllocate(t *testing.T) {
	// Subtask 0 of 2 is far ahead, subtask 1 has not started: the new
	// single subtask skips every even index below 400000.
	old := [][]byte{
		[]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":400000,"maxTs":399998}`),
		[]byte(`{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":-9223372036854775808}`),
	}
	off, err := RescaleOffsets("gen", old, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := openGen(t, `{"words":4,"keys":100000}`, 0, 1)
	if err := g.Seek(off); err != nil {
		t.Fatal(err)
	}
	var b abi.Builder
	ctx := context.Background()
	g.Next(ctx, &b, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		if _, _, err := g.Next(ctx, &b, 1024); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocated %.1f times per call of 1024 records, want 0", allocs)
	}
	recs, err := abi.Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if first := recs[0].Timestamp; first != 2*1024*101+1 {
		t.Errorf("the 101st batch starts at index %d, want %d (odd indices only)", first, 2*1024*101+1)
	}
}

func TestRescaleErrors(t *testing.T) {
	gen := func(s, p int, next int64) []byte {
		return fmt.Appendf(nil, `{"version":1,"kind":"gen","subtask":%d,"parallelism":%d,"next":%d,"maxTs":0}`, s, p, next)
	}
	file := func(s, p int, path string) []byte {
		return fmt.Appendf(nil, `{"version":1,"kind":"file","subtask":%d,"parallelism":%d,"path":%q,"line":0,"byte":0,"maxTs":0}`, s, p, path)
	}
	residues := func(from, step, n int) string {
		var b strings.Builder
		for k := range n {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, from+k*step)
		}
		return b.String()
	}
	// Periods 1024 and 6 at parallelism 2 need lcm 3072 gaps for one
	// subtask: more than an offset may hold.
	wide := [][]byte{
		[]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":0,"maxTs":0,"period":1024,"gaps":[` + residues(0, 2, 512) + `]}`),
		[]byte(`{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":0,"period":6,"gaps":[1,3,5]}`),
	}
	for _, tc := range []struct {
		connector string
		old       [][]byte
		s, p      int
		want      string
	}{
		{"stdout", [][]byte{gen(0, 1, 0)}, 0, 1, `connector: rescale: source "stdout" has no rescalable offsets (known: file, gen, jetstream)`},
		{"gen", [][]byte{gen(0, 1, 0)}, 2, 2, `connector gen: rescale: subtask 2 of parallelism 2 is out of range`},
		{"gen", [][]byte{gen(0, 1, 0)}, 0, 0, `connector gen: rescale: subtask 0 of parallelism 0 is out of range`},
		{"gen", nil, 0, 1, `connector gen: rescale: no offsets: give one per subtask of the old parallelism`},
		{"gen", [][]byte{gen(0, 2, 0), nil}, 0, 1,
			`connector gen: rescale: the offset of subtask 1 of 2 is missing (a finished subtask has one too: take it before Close)`},
		{"gen", [][]byte{gen(0, 2, 0), file(1, 2, "a")}, 0, 1,
			`connector gen: rescale: the offset of subtask 1 belongs to a "file" source, not a "gen" source`},
		{"file", [][]byte{file(0, 2, "a"), file(1, 2, "b")}, 0, 3,
			`connector file: rescale: the offsets are of different files: a (subtask 0) and b (subtask 1)`},
		{"gen", [][]byte{gen(0, 3, 0), gen(1, 3, 1)}, 0, 1,
			`connector gen: rescale: the offset of subtask 0 was taken at parallelism 3, but 2 offsets were given (one per old subtask, all of the same checkpoint)`},
		{"gen", [][]byte{gen(0, 2, 0), gen(0, 2, 0)}, 0, 1,
			`connector gen: rescale: offset 1 of 2 belongs to subtask 0: give subtask s's offset at position s, each once`},
		{"gen", [][]byte{[]byte(`{`)}, 0, 1, `connector gen: rescale: offset of subtask 0 "{" is not a source offset: unexpected end of JSON input`},
		{"gen", [][]byte{[]byte(`{"version":2,"kind":"gen"}`)}, 0, 1,
			`connector gen: rescale: offset of subtask 0: version 2 is not supported (this build reads version 1)`},
		{"gen", [][]byte{gen(0, 2, 0), gen(1, 2, 2)}, 0, 1,
			`connector gen: rescale: offset of subtask 1: next record 2 is not one of subtask 1 of parallelism 2 (index mod 2 must be 1)`},
		{"gen", [][]byte{[]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":0,"maxTs":0,"x":1}`)}, 0, 1,
			`connector gen: rescale: malformed gen offset of subtask 0 "{\"version\":1,\"kind\":\"gen\",\"subtask\":0,\"parallelism\":1,\"next\":0,\"…": json: unknown field "x"`},
		{"gen", [][]byte{[]byte(`{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":0,"maxTs":0,"period":4,"gaps":[0,3]}`), gen(1, 2, 1)}, 0, 1,
			`connector gen: rescale: offset of subtask 0: gap 1 (3) is not an index ≡ 2 (mod 4) in [2, 2^62]`},
		{"gen", wide, 0, 1,
			`connector gen: rescale: from parallelism 2 to 1 the offsets would need more than 1024 gaps per subtask (old subtasks lag behind others across rescalings with parallelisms that do not divide each other): restore at a parallelism that is a multiple of 3072 (one gap) or shares more factors with it, or let the source run until its subtasks catch up`},
	} {
		_, err := RescaleOffsets(tc.connector, tc.old, tc.s, tc.p)
		if err == nil || err.Error() != tc.want {
			t.Errorf("RescaleOffsets(%s, %q, %d, %d):\n got  %v\n want %s", tc.connector, tc.old, tc.s, tc.p, err, tc.want)
		}
	}
	// At parallelism 3 the same offsets fit: 3072/3 = 1024 gaps.
	if _, err := RescaleOffsets("gen", wide, 0, 3); err != nil {
		t.Errorf("rescaling to 3: %v", err)
	}
}

func TestSeekRescaledErrors(t *testing.T) {
	path := writeFile(t, "in.txt", "one\ntwo\nthree\nfour\n")
	fileCfg := fileConfig(t, map[string]any{"path": path})
	src := "connector file: source " + path + ": seek: rescaled offset: "
	for _, tc := range []struct {
		connector string
		cfg       json.RawMessage
		offset    string
		want      string
	}{
		{"gen", nil, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":0,"period":3,"gaps":[1]}`,
			`connector gen: seek: rescaled offset: period 3 is not a multiple of the parallelism 2`},
		{"gen", nil, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":0,"period":4,"gaps":[1]}`,
			`connector gen: seek: rescaled offset: period 4 at parallelism 2 needs 2 gaps, got 1`},
		{"gen", nil, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":0,"period":4,"gaps":[5,3]}`,
			`connector gen: seek: rescaled offset: next record 1 is not the smallest gap 3`},
		{"gen", nil, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":-1,"maxTs":0,"period":4,"gaps":[-3,3]}`,
			`connector gen: seek: rescaled offset: gap 0 (-3) is not an index ≡ 1 (mod 4) in [1, 2^62]`},
		{"file", fileCfg, fmt.Sprintf(`{"version":1,"kind":"file","subtask":1,"parallelism":2,"path":%q,"line":2,"byte":8,"maxTs":0,"period":4,"gaps":[1,3]}`, path),
			src + `line 2 is past the first unread line 1 of the subtask`},
	} {
		s := openSource(t, tc.connector, tc.cfg, 1, 2)
		err := s.(Rewindable).Seek([]byte(tc.offset))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s Seek(%s):\n got  %v\n want %s", tc.connector, tc.offset, err, tc.want)
		}
	}
}
