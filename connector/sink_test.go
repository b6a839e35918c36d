package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wstream/wstream/abi"
)

func batch(recs ...abi.Record) []byte { return abi.Encode(recs) }

func rec(ts int64, key, value string) abi.Record {
	return abi.Record{Timestamp: ts, Key: []byte(key), Value: []byte(value)}
}

func openSink(t *testing.T, name string, cfg string, w *bytes.Buffer, subtask, parallelism int) Sink {
	t.Helper()
	var out = w
	if out == nil {
		out = new(bytes.Buffer)
	}
	s, err := NewSink(name, []byte(cfg), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background(), subtask, parallelism); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStdoutFormat(t *testing.T) {
	var out bytes.Buffer
	s := openSink(t, "stdout", "", &out, 0, 1)
	if err := s.Write(batch(rec(1, "w1", "3"), rec(2, "", "no key"), rec(3, "k", ""))); err != nil {
		t.Fatal(err)
	}
	// Visible after Write, before Close.
	if got, want := out.String(), "w1\t3\nno key\nk\t\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if err := s.Write(batch()); err != nil || out.Len() != 15 {
		t.Errorf("empty batch: err %v, output length %d", err, out.Len())
	}
	bad := batch(rec(1, "a", "b"))
	if err := s.Write(bad[:len(bad)-1]); !errors.Is(err, abi.ErrMalformedBatch) || out.Len() != 15 {
		t.Errorf("malformed batch: err %v, output %q: want ErrMalformedBatch and nothing written", err, out.String())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(batch(rec(1, "a", "b"))); err == nil || err.Error() != "connector stdout: write: not open" {
		t.Errorf("Write after Close: %v", err)
	}
	if n := lockCount(); n != 0 {
		t.Errorf("%d writer locks left after Close", n)
	}
}

func lockCount() int {
	writerLocks.Lock()
	defer writerLocks.Unlock()
	return len(writerLocks.m)
}

// overlapWriter fails the test when two Write calls overlap.
type overlapWriter struct {
	t      *testing.T
	busy   atomic.Bool
	buf    bytes.Buffer
	writes int
}

func (w *overlapWriter) Write(p []byte) (int, error) {
	if !w.busy.CompareAndSwap(false, true) {
		w.t.Error("two sinks wrote to the shared writer at once")
		return 0, errors.New("overlap")
	}
	defer w.busy.Store(false)
	w.writes++
	return w.buf.Write(p)
}

func TestStdoutNoInterleaving(t *testing.T) {
	w := &overlapWriter{t: t}
	const subtasks, batches, perBatch = 4, 50, 20
	var wg sync.WaitGroup
	for s := range subtasks {
		sink, err := NewSink("stdout", nil, w)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Open(context.Background(), s, subtasks); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer sink.Close()
			var b abi.Builder
			for i := range batches {
				b.Reset()
				for j := range perBatch {
					b.Add(0, 0, fmt.Appendf(nil, "s%d", s), fmt.Appendf(nil, "b%d r%d %s", i, j, strings.Repeat("x", 100)))
				}
				if err := sink.Write(b.Bytes()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n")
	if len(lines) != subtasks*batches*perBatch {
		t.Fatalf("%d lines, want %d", len(lines), subtasks*batches*perBatch)
	}
	// Every batch's lines are contiguous and in order.
	for i := 0; i < len(lines); i += perBatch {
		var s, b int
		if _, err := fmt.Sscanf(lines[i], "s%d\tb%d r0", &s, &b); err != nil {
			t.Fatalf("line %d %q does not start a batch", i, lines[i])
		}
		for j := range perBatch {
			if want := fmt.Sprintf("s%d\tb%d r%d %s", s, b, j, strings.Repeat("x", 100)); lines[i+j] != want {
				t.Fatalf("line %d = %q, want %q", i+j, lines[i+j], want)
			}
		}
	}
	if w.writes != subtasks*batches {
		t.Errorf("%d writes, want one per batch (%d)", w.writes, subtasks*batches)
	}
}

// sliceWriter is not comparable, so it cannot key the lock registry.
type sliceWriter struct{ lines *[]string }

func (w sliceWriter) Write(p []byte) (int, error) {
	*w.lines = append(*w.lines, string(p))
	return len(p), nil
}

func TestStdoutUncomparableWriter(t *testing.T) {
	var lines []string
	a, _ := NewSink("stdout", nil, sliceWriter{&lines})
	b, _ := NewSink("stdout", nil, sliceWriter{&lines})
	for i, s := range []Sink{a, b} {
		if err := s.Open(context.Background(), i, 2); err != nil {
			t.Fatal(err)
		}
		if err := s.Write(batch(rec(0, "", fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	if lockCount() != 1 {
		t.Errorf("%d locks, want the one shared lock", lockCount())
	}
	a.Close()
	b.Close()
	if !slices.Equal(lines, []string{"0\n", "1\n"}) || lockCount() != 0 {
		t.Errorf("lines %q, %d locks left", lines, lockCount())
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestFileSinkRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	s := openSink(t, "file", fmt.Sprintf(`{"path":%q}`, path), nil, 0, 1)
	if err := s.Write(batch(rec(1, "k", "v"), rec(2, "", "only value"))); err != nil {
		t.Fatal(err)
	}
	names := dirNames(t, dir)
	if len(names) != 1 || !strings.HasPrefix(names[0], "out.txt.") || !strings.HasSuffix(names[0], ".inprogress") {
		t.Fatalf("before Close the directory holds %v, want only a temporary out.txt.*.inprogress", names)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"out.txt"}) {
		t.Fatalf("after Close the directory holds %v, want [out.txt]", names)
	}
	got, _ := os.ReadFile(path)
	if want := "k\tv\nonly value\n"; string(got) != want {
		t.Errorf("out.txt = %q, want %q", got, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFileSinkParts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.tsv")
	cfg := fmt.Sprintf(`{"path":%q,"format":"tsv"}`, path)
	for s := range 2 {
		sink := openSink(t, "file", cfg, nil, s, 2)
		if err := sink.Write(batch(rec(int64(10+s), fmt.Sprint("k", s), "v\twith tab"))); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"out.tsv.part-0", "out.tsv.part-1"}) {
		t.Fatalf("directory holds %v", names)
	}
	// What the tsv sink writes, the tsv source reads back.
	steps := drain(t, openFileSource(t, fileConfig(t, map[string]any{"path": path + ".part-1", "format": "tsv"}), 0, 1), 10)
	if got := records(steps); !slices.Equal(got, []genRec{{11, "k1", "v\twith tab"}}) {
		t.Errorf("read back %+v", got)
	}
}

func TestFileSinkErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.tsv")
	s := openSink(t, "file", fmt.Sprintf(`{"path":%q,"format":"tsv"}`, path), nil, 0, 1)
	if err := s.Write(batch(rec(1, "ok", "fine"), rec(2, "a\tb", "v"))); err == nil || !strings.Contains(err.Error(), `key "a\tb" holds a tab or newline`) {
		t.Errorf("tab in key: %v", err)
	}
	if err := s.Write(batch(rec(3, "k", "two\nlines"))); err == nil || !strings.Contains(err.Error(), `value "two\nlines" holds a newline`) {
		t.Errorf("newline in value: %v", err)
	}
	if err := s.Write(batch(rec(4, "k", "v"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A refused batch writes none of its records.
	if got, _ := os.ReadFile(path); string(got) != "4\tk\tv\n" {
		t.Errorf("file holds %q, want only the good batch", got)
	}

	sink, _ := NewSink("file", []byte(`{"path":"`+filepath.Join(dir, "no", "such", "dir", "out")+`"}`), nil)
	if err := sink.Open(context.Background(), 0, 1); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "no", "such", "dir")) {
		t.Errorf("missing directory: %v", err)
	}
	if err := sink.Write(batch()); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Errorf("Write after a failed Open: %v", err)
	}
}

func TestDiscard(t *testing.T) {
	s := openSink(t, "discard", "", nil, 1, 2)
	d := s.(*Discard)
	b1, b2 := batch(rec(1, "a", "b"), rec(2, "c", "d")), batch(rec(3, "", "x"))
	for _, b := range [][]byte{b1, b2} {
		if err := d.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if d.Records() != 3 || d.Batches() != 2 || d.Bytes() != int64(len(b1)+len(b2)) {
		t.Errorf("counts records=%d batches=%d bytes=%d", d.Records(), d.Batches(), d.Bytes())
	}
	if err := d.Write([]byte{1, 0}); !errors.Is(err, abi.ErrMalformedBatch) {
		t.Errorf("short batch: %v", err)
	}
	if err := d.Open(context.Background(), 2, 2); err == nil {
		t.Error("Open(2, 2) succeeded")
	}
}

func TestFileSinkFailedWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	s := openSink(t, "file", fmt.Sprintf(`{"path":%q}`, path), nil, 0, 1)
	// Break the file underneath the sink; a batch larger than the buffer
	// then fails to write.
	s.(*fileSink).f.Close()
	big := batch(rec(1, "", strings.Repeat("x", 2*fileBufferSize)))
	err := s.Write(big)
	if err == nil || !strings.Contains(err.Error(), "connector file: sink "+path+": write:") {
		t.Fatalf("Write to a broken file: %v", err)
	}
	if err2 := s.Write(batch(rec(2, "", "y"))); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("Write after a failure = %v, want the first error again", err2)
	}
	if cerr := s.Close(); cerr == nil {
		t.Error("Close after a failed write succeeded")
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("directory holds %v after a failed sink, want nothing", names)
	}
}

func TestFileSinkAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	s, err := NewSink("file", json.RawMessage(`{"path":"`+path+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(abi.Encode([]abi.Record{{Value: []byte("x")}})); err != nil {
		t.Fatal(err)
	}
	if err := s.(interface{ Abort() error }).Abort(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("abort left %v", entries)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Abort: %v", err)
	}
}
