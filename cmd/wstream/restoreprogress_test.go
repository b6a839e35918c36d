package main

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/checkpoint"
)

// syncBuffer is a bytes.Buffer safe for the progress goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRestoreProgress reads a real checkpoint the way a restore does,
// verifying and then restoring, and checks that the progress lines follow
// both phases and that the line is cleared once every byte was read.
func TestRestoreProgress(t *testing.T) {
	st, err := checkpoint.OpenStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	task := checkpoint.TaskID{Chain: 0, Subtask: 0}
	data := bytes.Repeat([]byte("state bytes "), 100000)
	h, err := st.WriteFile(1, st.TaskDir(1, task)+"/state/000001.sst", data)
	if err != nil {
		t.Fatal(err)
	}
	m := &checkpoint.Metadata{ID: 1, Tasks: []checkpoint.SubtaskState{{Task: task, State: []checkpoint.FileHandle{h}}}}

	var out syncBuffer
	stop := restoreProgress(&out, h.Size, time.Millisecond)
	defer stop()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the progress output %q", what, out.String())
			}
			time.Sleep(time.Millisecond) // polling interval
		}
	}
	waitFor("restore: verifying ")
	if err := st.Verify(m); err != nil {
		t.Fatal(err)
	}
	waitFor("restore: restoring 0.0 MB of 1.1 MB")
	r, err := st.Open(1, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// Every byte read: the display ends by itself and clears its line.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(out.String(), "\r\033[K") || strings.Count(out.String(), "\r\033[K") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the progress line was not cleared: %q", out.String())
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	stop()
	if s := out.String(); !strings.Contains(s, "MB/s") {
		t.Errorf("no rate in %q", s)
	}
}

// TestRestoreProgressQuietOffTerminal checks that nothing is printed when
// the output is not a terminal (a pipe, a log file).
func TestRestoreProgressQuietOffTerminal(t *testing.T) {
	var out syncBuffer
	stop := showRestoreProgress(&out, t.TempDir(), nil)
	stop()
	if out.String() != "" {
		t.Errorf("printed %q off a terminal", out.String())
	}
}
