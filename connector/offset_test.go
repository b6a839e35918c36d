package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// openSource makes and opens a source, closing it when the test ends.
func openSource(t *testing.T, connector string, cfg json.RawMessage, subtask, parallelism int) Source {
	t.Helper()
	src, err := NewSource(connector, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(context.Background(), subtask, parallelism); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// nextN reads exactly n records from src with batches of random size.
func nextN(t *testing.T, src Source, n int, rng *rand.Rand) []step {
	t.Helper()
	var steps []step
	var b abi.Builder
	for got := 0; got < n; {
		b.Reset()
		want := min(1+rng.IntN(9), n-got)
		wm, done, err := src.Next(context.Background(), &b, want)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		st := step{watermark: wm, done: done}
		for _, r := range recs {
			st.recs = append(st.recs, genRec{r.Timestamp, string(r.Key), string(r.Value)})
		}
		steps = append(steps, st)
		got += len(recs)
		if done && got < n {
			t.Fatalf("source done after %d records, want %d", got, n)
		}
	}
	return steps
}

// checkWatermarks checks that the watermark after every step is the one an
// uninterrupted run reports after the same records: the largest timestamp
// of all records so far (those before the split included) − delay − 1.
func checkWatermarks(t *testing.T, before []genRec, steps []step, delay int64) {
	t.Helper()
	maxTs := int64(abi.MinWatermark)
	for _, r := range before {
		maxTs = max(maxTs, r.ts)
	}
	for i, st := range steps {
		for _, r := range st.recs {
			maxTs = max(maxTs, r.ts)
		}
		if want := watermark(maxTs, delay); st.watermark != want {
			t.Fatalf("step %d: watermark %d, want %d", i, st.watermark, want)
		}
	}
}

// checkResume checks, for every subtask of p and several random split
// points, that a new source seeked to the offset taken after k records
// returns exactly the records (and watermarks) of an uninterrupted run after
// its first k records.
func checkResume(t *testing.T, connector string, cfg json.RawMessage, p int, delay int64, rng *rand.Rand) {
	t.Helper()
	for s := range p {
		ref := records(drain(t, openSource(t, connector, cfg, s, p), 7))
		if len(ref) < 10 {
			t.Fatalf("subtask %d of %d: only %d records, the test needs more", s, p, len(ref))
		}
		splits := []int{0, len(ref)}
		for range 6 {
			splits = append(splits, rng.IntN(len(ref)+1))
		}
		for _, k := range splits {
			first := openSource(t, connector, cfg, s, p)
			before := records(nextN(t, first, k, rng))
			if !slices.Equal(before, ref[:k]) {
				t.Fatalf("p=%d s=%d: the first %d records differ from an uninterrupted run", p, s, k)
			}
			off, err := first.(Rewindable).Offset()
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			second := openSource(t, connector, cfg, s, p)
			if err := second.(Rewindable).Seek(off); err != nil {
				t.Fatalf("p=%d s=%d k=%d: Seek(%s): %v", p, s, k, off, err)
			}
			steps := drain(t, second, 1+rng.IntN(9))
			if got := records(steps); !slices.Equal(got, ref[k:]) {
				t.Fatalf("p=%d s=%d: after Seek to the offset after %d records got %d records %.120v\nwant %d %.120v", p, s, k, len(got), got, len(ref)-k, ref[k:])
			}
			checkWatermarks(t, ref[:k], steps, delay)
			// Seeking again to the same offset rewinds once more.
			again, err := second.(Rewindable).Offset()
			if err != nil {
				t.Fatal(err)
			}
			if err := second.(Rewindable).Seek(off); err != nil {
				t.Fatal(err)
			}
			if got := records(drain(t, second, 4)); !slices.Equal(got, ref[k:]) {
				t.Fatalf("p=%d s=%d k=%d: a second Seek to the same offset did not rewind", p, s, k)
			}
			end, err := second.(Rewindable).Offset()
			if err != nil {
				t.Fatal(err)
			}
			if string(end) != string(again) {
				t.Errorf("p=%d s=%d: offsets at the end differ: %s and %s", p, s, again, end)
			}
		}
	}
}

func TestGenSeekResumes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := json.RawMessage(`{"count":301,"keys":50,"words":2,"disorder":20,"seed":7}`)
	for _, p := range []int{1, 2} {
		checkResume(t, "gen", cfg, p, 20, rng)
	}
}

// seekTestFile writes a tsv file with timestamps out of order, CRLF and LF
// line ends, a line longer than the reader's buffer and a last line without
// a newline.
func seekTestFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := range 120 {
		end := "\n"
		if i%5 == 0 {
			end = "\r\n"
		}
		value := fmt.Sprintf("v%d", i)
		if i == 41 {
			value = strings.Repeat("long", fileBufferSize/2)
		}
		fmt.Fprintf(&b, "%d\tk%d\t%s%s", 1000+i*10-(i%4)*25, i%9, value, end)
	}
	b.WriteString("5000\tlast\tno newline")
	return writeFile(t, "in.tsv", b.String())
}

func TestFileSeekResumes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	path := seekTestFile(t)
	for _, p := range []int{1, 2} {
		checkResume(t, "file", fileConfig(t, map[string]any{"path": path, "format": "tsv", "watermarkDelay": 30}), p, 30, rng)
		checkResume(t, "file", fileConfig(t, map[string]any{"path": path, "batch": 3}), p, 0, rng)
	}
}

// TestFileSeekDoesNotRescan overwrites everything before the offset with
// bytes that are no valid lines: after Seek the source still continues
// exactly, with the right line numbers, so it did not read them again.
func TestFileSeekDoesNotRescan(t *testing.T) {
	var content strings.Builder
	for i := range 40 {
		fmt.Fprintf(&content, "line %d\n", i)
	}
	path := writeFile(t, "in.txt", content.String())
	cfg := fileConfig(t, map[string]any{"path": path})
	ref := records(drain(t, openSource(t, "file", cfg, 1, 2), 100))
	src := openSource(t, "file", cfg, 1, 2)
	var b abi.Builder
	if _, _, err := src.Next(context.Background(), &b, 7); err != nil {
		t.Fatal(err)
	}
	off, err := src.(Rewindable).Offset()
	if err != nil {
		t.Fatal(err)
	}
	var o fileOffset
	if err := json.Unmarshal(off, &o); err != nil {
		t.Fatal(err)
	}
	// Subtask 1 of 2 read lines 1, 3, …, 13 (0-based): the next line is 14.
	if o.Line != 14 || o.Byte != int64(strings.Index(content.String(), "line 14\n")) || o.MaxTs != 14 {
		t.Fatalf("offset %s, want line 14 at the byte where it starts and max ts 14", off)
	}
	scrambled := []byte(content.String())
	for i := range o.Byte - 1 {
		scrambled[i] = '#'
	}
	if err := os.WriteFile(path, scrambled, 0o644); err != nil {
		t.Fatal(err)
	}
	second := openSource(t, "file", cfg, 1, 2)
	if err := second.(Rewindable).Seek(off); err != nil {
		t.Fatal(err)
	}
	steps := drain(t, second, 100)
	if got := records(steps); !slices.Equal(got, ref[7:]) {
		t.Fatalf("after Seek: %v\nwant %v", got, ref[7:])
	}
	if got := steps[0].watermark; got != 39 {
		t.Errorf("watermark %d, want 39 (line number 40 − 1)", got)
	}
}

func TestFileSeekAtEnd(t *testing.T) {
	path := writeFile(t, "in.txt", "a\nb\nlast")
	cfg := fileConfig(t, map[string]any{"path": path})
	src := openSource(t, "file", cfg, 0, 1)
	drain(t, src, 10)
	off, err := src.(Rewindable).Offset()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"kind":"file","subtask":0,"parallelism":1,"path":"` + path + `","line":3,"byte":8,"maxTs":3}`; string(off) != want {
		t.Fatalf("offset %s\nwant   %s", off, want)
	}
	// The end of a file whose last line has no newline is a valid position.
	second := openSource(t, "file", cfg, 0, 1)
	if err := second.(Rewindable).Seek(off); err != nil {
		t.Fatal(err)
	}
	steps := drain(t, second, 10)
	if len(steps) != 1 || len(steps[0].recs) != 0 || !steps[0].done || steps[0].watermark != 2 {
		t.Errorf("after Seek to the end: %+v, want one done step with no records and watermark 2", steps)
	}
}

func TestGenOffsetEncoding(t *testing.T) {
	g := openGen(t, `{"count":10,"disorder":2}`, 1, 3)
	off, err := g.Offset()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"kind":"gen","subtask":1,"parallelism":3,"next":1,"maxTs":-9223372036854775808}`; string(off) != want {
		t.Errorf("offset before any record %s\nwant %s", off, want)
	}
	var b abi.Builder
	if _, _, err := g.Next(context.Background(), &b, 2); err != nil {
		t.Fatal(err)
	}
	off, err = g.Offset()
	if err != nil {
		t.Fatal(err)
	}
	var o genOffset
	if err := json.Unmarshal(off, &o); err != nil {
		t.Fatal(err)
	}
	recs, _ := abi.Decode(b.Bytes())
	if o.Next != 7 || o.MaxTs != max(recs[0].Timestamp, recs[1].Timestamp) {
		t.Errorf("offset after records 1 and 4: %s, want next 7 and their max ts", off)
	}
}

func TestSeekErrors(t *testing.T) {
	path := writeFile(t, "in.txt", "one\ntwo\nthree\nfour\n")
	fileCfg := fileConfig(t, map[string]any{"path": path})
	fileOff := func(subtask, parallelism int, line, byteOff int64) string {
		return fmt.Sprintf(`{"version":1,"kind":"file","subtask":%d,"parallelism":%d,"path":%q,"line":%d,"byte":%d,"maxTs":0}`,
			subtask, parallelism, path, line, byteOff)
	}
	src := "connector file: source " + path + ": seek: "
	for _, tc := range []struct {
		connector string
		cfg       json.RawMessage
		subtask   int
		p         int
		offset    string
		want      string
	}{
		{"gen", nil, 0, 1, `{`, `connector gen: seek: offset "{" is not a source offset: unexpected end of JSON input`},
		{"gen", nil, 0, 1, `{"version":2,"kind":"gen"}`, `connector gen: seek: offset version 2 is not supported (this build reads version 1)`},
		{"gen", nil, 0, 1, fileOff(0, 1, 0, 0), `connector gen: seek: the offset belongs to a "file" source, not a "gen" source`},
		{"gen", nil, 1, 2, `{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":2,"maxTs":5}`,
			`connector gen: seek: the offset belongs to subtask 0 of parallelism 2, not subtask 1 of parallelism 2`},
		{"gen", nil, 0, 3, `{"version":1,"kind":"gen","subtask":0,"parallelism":2,"next":2,"maxTs":5}`,
			`connector gen: seek: the offset belongs to subtask 0 of parallelism 2, not subtask 0 of parallelism 3`},
		{"gen", nil, 1, 2, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":4,"maxTs":5}`,
			`connector gen: seek: next record 4 is not one of subtask 1 of parallelism 2 (index mod 2 must be 1)`},
		{"gen", nil, 1, 2, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":-1,"maxTs":5}`,
			`connector gen: seek: next record -1 is not one of subtask 1 of parallelism 2 (index mod 2 must be 1)`},
		{"gen", nil, 1, 2, `{"version":1,"kind":"gen","subtask":1,"parallelism":2,"next":1,"maxTs":5}`,
			`connector gen: seek: the offset is before the first record but has maximum timestamp 5`},
		{"gen", nil, 0, 1, `{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":1,"maxTs":5,"extra":1}`,
			`connector gen: seek: malformed gen offset "{\"version\":1,\"kind\":\"gen\",\"subtask\":0,\"parallelism\":1,\"next\":1,\"…": json: unknown field "extra"`},
		{"file", fileCfg, 0, 1, `{"version":1,"kind":"gen","subtask":0,"parallelism":1,"next":1,"maxTs":5}`,
			src + `the offset belongs to a "gen" source, not a "file" source`},
		{"file", fileCfg, 1, 2, fileOff(0, 2, 2, 8), src + `the offset belongs to subtask 0 of parallelism 2, not subtask 1 of parallelism 2`},
		{"file", fileCfg, 0, 1, strings.Replace(fileOff(0, 1, 1, 4), path, path+".old", 1),
			src + `the offset belongs to file ` + path + `.old; restore with the path the offset was taken from`},
		{"file", fileCfg, 0, 1, fileOff(0, 1, 5, 4), src + `line 5 at byte 4 is not a possible position`},
		{"file", fileCfg, 0, 1, fileOff(0, 1, 0, -1), src + `line 0 at byte -1 is not a possible position`},
		{"file", fileCfg, 0, 1, fileOff(0, 1, 1, 5), src + `byte 5 (line 2) is not the start of a line: the file changed since the offset was taken`},
		{"file", fileCfg, 0, 1, fileOff(0, 1, 5, 40),
			src + `the offset is at byte 40 (line 6) but the file has only 19 bytes: it was truncated or replaced since the offset was taken`},
	} {
		s := openSource(t, tc.connector, tc.cfg, tc.subtask, tc.p)
		err := s.(Rewindable).Seek([]byte(tc.offset))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s Seek(%s):\n got  %v\n want %s", tc.connector, tc.offset, err, tc.want)
		}
	}

	// A valid offset still works after the failed attempts above.
	s := openSource(t, "file", fileCfg, 0, 1)
	if err := s.(Rewindable).Seek([]byte(fileOff(0, 1, 2, 8))); err != nil {
		t.Fatal(err)
	}
	if got := records(drain(t, s, 10)); !slices.Equal(got, []genRec{{3, "", "three"}, {4, "", "four"}}) {
		t.Errorf("after Seek to line 3: %v", got)
	}

	for _, name := range []string{"gen", "file"} {
		s, err := NewSource(name, fileCfg)
		if name == "gen" {
			s, err = NewSource(name, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.(Rewindable).Offset(); err == nil || !strings.HasSuffix(err.Error(), "offset: not open") {
			t.Errorf("%s: Offset before Open: %v", name, err)
		}
		if err := s.(Rewindable).Seek([]byte(`{}`)); err == nil || !strings.HasSuffix(err.Error(), "seek: not open") {
			t.Errorf("%s: Seek before Open: %v", name, err)
		}
	}
}

// TestEverySourceRewinds keeps the interface on every registered source.
func TestEverySourceRewinds(t *testing.T) {
	for _, name := range SourceNames() {
		cfg := map[string]json.RawMessage{
			"gen":       nil,
			"file":      json.RawMessage(`{"path":"x"}`),
			"jetstream": json.RawMessage(`{"url":"nats://127.0.0.1:1","stream":"s"}`),
		}[name]
		s, err := NewSource(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(Rewindable); !ok {
			t.Errorf("source %q does not implement Rewindable", name)
		}
	}
}
