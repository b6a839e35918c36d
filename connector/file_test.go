package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileConfig(t *testing.T, fields map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openFileSource(t *testing.T, cfg json.RawMessage, subtask, parallelism int) Source {
	t.Helper()
	src, err := NewSource("file", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(context.Background(), subtask, parallelism); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func TestFileSourceText(t *testing.T) {
	long := strings.Repeat("x", 3*fileBufferSize+17)
	path := writeFile(t, "in.txt", "first line\r\n\nthird\t line\n"+long+"\nlast without newline")
	steps := drain(t, openFileSource(t, fileConfig(t, map[string]any{"path": path}), 0, 1), 2)
	want := []genRec{
		{1, "", "first line"},
		{2, "", ""},
		{3, "", "third\t line"},
		{4, "", long},
		{5, "", "last without newline"},
	}
	if got := records(steps); !slices.Equal(got, want) {
		t.Fatalf("records = %.200v\nwant %.200v", got, want)
	}
	if len(steps) != 3 || !steps[2].done || len(steps[2].recs) != 1 {
		t.Errorf("got %d steps, want 3 with records and done together in the last", len(steps))
	}
	for i, wm := range []int64{1, 3, 4} {
		if steps[i].watermark != wm {
			t.Errorf("step %d watermark %d, want %d (last line number − 1)", i, steps[i].watermark, wm)
		}
	}
}

func TestFileSourceEmpty(t *testing.T) {
	path := writeFile(t, "empty.txt", "")
	steps := drain(t, openFileSource(t, fileConfig(t, map[string]any{"path": path}), 0, 1), 10)
	if len(steps) != 1 || len(steps[0].recs) != 0 || steps[0].watermark != abi.MinWatermark {
		t.Errorf("empty file: %+v, want one done step with no records and MinWatermark", steps)
	}
}

func TestFileSourceParallel(t *testing.T) {
	var content strings.Builder
	for i := range 100 {
		fmt.Fprintf(&content, "%d\tk%d\tv %d\twith tab\n", 1000-i, i%7, i)
	}
	path := writeFile(t, "in.tsv", content.String())
	cfg := fileConfig(t, map[string]any{"path": path, "format": "tsv", "watermarkDelay": 3})
	var want []genRec
	for _, p := range []int{1, 3, 8} {
		var union []genRec
		for s := range p {
			steps := drain(t, openFileSource(t, cfg, s, p), 4)
			for _, st := range steps {
				for _, r := range st.recs {
					// The file runs backwards in time, so the watermark
					// stays at the first line's ts − delay − 1.
					if r.ts > 1000-int64(s) || st.watermark != 1000-int64(s)-3-1 {
						t.Fatalf("p=%d s=%d: record %+v with watermark %d", p, s, r, st.watermark)
					}
				}
			}
			recs := records(steps)
			for _, r := range recs {
				var i int
				fmt.Sscanf(r.value, "v %d", &i)
				if i%p != s {
					t.Fatalf("p=%d: subtask %d read line %d", p, s, i)
				}
			}
			union = append(union, recs...)
		}
		sortRecs(union)
		if len(union) != 100 {
			t.Fatalf("p=%d: %d records, want 100", p, len(union))
		}
		if want == nil {
			want = union
			if r := want[0]; r != (genRec{1000, "k0", "v 0\twith tab"}) {
				t.Fatalf("tsv record = %+v", r)
			}
		} else if !slices.Equal(union, want) {
			t.Errorf("p=%d: union differs from p=1", p)
		}
	}
}

func TestFileSourceErrors(t *testing.T) {
	path := writeFile(t, "bad.tsv", "1\ta\tok\n2\tb\tok\nnot-a-number\tc\tbad\n4\td\n")
	cfg := fileConfig(t, map[string]any{"path": path, "format": "tsv"})
	var b abi.Builder
	src := openFileSource(t, cfg, 0, 1)
	_, _, err := src.Next(context.Background(), &b, 10)
	if want := fmt.Sprintf(`connector file: %s:3: want ts<TAB>key<TAB>value with an integer ts, got "not-a-number\tc\tbad"`, path); err == nil || err.Error() != want {
		t.Errorf("bad ts: error %v\nwant %s", err, want)
	}
	// Subtask 1 of 2 owns lines 2 and 4: the bad line 3 is not its concern,
	// line 4 (a missing field) is.
	b.Reset()
	src = openFileSource(t, cfg, 1, 2)
	_, _, err = src.Next(context.Background(), &b, 10)
	if want := fmt.Sprintf(`connector file: %s:4: want ts<TAB>key<TAB>value with an integer ts, got "4\td"`, path); err == nil || err.Error() != want {
		t.Errorf("missing field: error %v\nwant %s", err, want)
	}

	missing := filepath.Join(t.TempDir(), "nope.txt")
	src, err = NewSource("file", fileConfig(t, map[string]any{"path": missing}))
	if err != nil {
		t.Fatal(err)
	}
	err = src.Open(context.Background(), 0, 1)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: error %v, want ErrNotExist naming %s", err, missing)
	}
	if _, _, err := src.Next(context.Background(), &b, 1); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Errorf("Next after a failed Open: %v", err)
	}
}

func TestParseInt64(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-17", -17, true}, {"+5", 5, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false}, {"", 0, false}, {"-", 0, false}, {"1x", 0, false}, {" 1", 0, false},
	} {
		got, ok := parseInt64([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseInt64(%q) = (%d, %v), want (%d, %v)", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFileSourceBatchCap(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/in.txt"
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource("file", json.RawMessage(`{"path":"`+path+`","batch":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var b abi.Builder
	for i := 0; i < 3; i++ {
		b.Reset()
		if _, _, err := src.Next(context.Background(), &b, 1024); err != nil {
			t.Fatal(err)
		}
		if b.Len() != 1 {
			t.Fatalf("call %d returned %d records with batch=1", i, b.Len())
		}
	}
	if err := ValidateSource("file", json.RawMessage(`{"path":"x","batch":-1}`)); err == nil {
		t.Fatal("negative batch accepted")
	}
}

// TestFileSourceRate: a paced source takes at least the time its rate
// gives its lines (beyond the first burst), and still reads them all, in
// order, each subtask its share.
func TestFileSourceRate(t *testing.T) {
	var content strings.Builder
	for i := range 300 {
		fmt.Fprintf(&content, "line %d\n", i)
	}
	path := writeFile(t, "in.txt", content.String())
	// 1000 lines/s over two subtasks: 500/s each, a burst of 50.
	src := openFileSource(t, fileConfig(t, map[string]any{"path": path, "rate": 1000}), 1, 2)
	start := time.Now()
	var got []string
	for {
		var b abi.Builder
		_, done, err := src.Next(context.Background(), &b, 1024)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := abi.Decode(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		if done {
			break
		}
	}
	if len(got) != 150 || got[0] != "line 1" || got[149] != "line 299" {
		t.Fatalf("read %d lines (%q … %q), want the 150 odd ones", len(got), got[0], got[len(got)-1])
	}
	// 150 lines at 500/s with a burst of 50: at least 0.2 s.
	if el := time.Since(start); el < 190*time.Millisecond {
		t.Fatalf("150 lines at 500 lines/s took %v", el)
	}
	if _, err := NewSource("file", fileConfig(t, map[string]any{"path": path, "rate": -1})); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Fatalf("a negative rate: %v", err)
	}
}
