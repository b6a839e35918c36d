package host

import (
	"strings"
	"testing"
)

func TestLineWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		lines  []string // after a flush
	}{
		{"one line", []string{"a\n"}, []string{"a"}},
		{"split line", []string{"he", "llo\nwo", "rld\n"}, []string{"hello", "world"}},
		{"unterminated", []string{"x\ny"}, []string{"x", "y"}},
		{"empty lines", []string{"\n\n"}, []string{"", ""}},
		{"crlf", []string{"a\r\nb\r\n"}, []string{"a", "b"}},
		{"invalid utf-8", []string{"a\xffb\n"}, []string{"a\uFFFDb"}},
		{"long line is split", []string{strings.Repeat("x", maxLineLen+10) + "\n"}, []string{strings.Repeat("x", maxLineLen), strings.Repeat("x", 10)}},
		{"long line in pieces", []string{strings.Repeat("y", maxLineLen-1), "yy"}, []string{strings.Repeat("y", maxLineLen), "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var w lineWriter
			w.init(func(l string) { got = append(got, l) }, false)
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.flush()
			if strings.Join(got, "|") != strings.Join(tc.lines, "|") || len(got) != len(tc.lines) {
				t.Errorf("lines %q, want %q", got, tc.lines)
			}
		})
	}
	var w lineWriter
	w.init(nil, false)
	if n, err := w.Write([]byte("discarded\n")); n != 10 || err != nil {
		t.Errorf("Write without a sink = %d, %v", n, err)
	}
}

func TestStderrTail(t *testing.T) {
	var w lineWriter
	w.init(nil, true)
	if got := w.tailString(); got != "" {
		t.Errorf("empty tail %q", got)
	}
	w.Write([]byte("panic: boom\n\ngoroutine 1:\n"))
	if got, want := w.tailString(), "panic: boom\n\ngoroutine 1:"; got != want {
		t.Errorf("tail %q, want %q", got, want)
	}
	w.resetTail()
	if got := w.tailString(); got != "" {
		t.Errorf("tail after reset %q", got)
	}
	// Long output keeps its first lines and its last stderrTail bytes, both
	// cut at line boundaries.
	w.Write([]byte("fatal error: out of memory\n"))
	for i := 0; i < 1000; i++ {
		w.Write([]byte("line " + strings.Repeat("z", 20) + "\n"))
	}
	w.Write([]byte("last"))
	got := w.tailString()
	head, tail, ok := strings.Cut(got, "\n…\n")
	if !ok || !strings.HasPrefix(head, "fatal error: out of memory\nline ") || !strings.HasSuffix(head, "z") {
		t.Errorf("head %q", head)
	}
	if len(tail) > stderrTail || !strings.HasPrefix(tail, "line ") || !strings.HasSuffix(tail, "\nlast") {
		t.Errorf("tail of %d bytes: %q…%q", len(tail), tail[:min(len(tail), 30)], tail[max(0, len(tail)-30):])
	}
	if len(w.head) > stderrHead || len(w.tail) > 2*stderrTail {
		t.Errorf("kept %d+%d bytes of stderr", len(w.head), len(w.tail))
	}
	// Output just over the head is quoted whole.
	w.resetTail()
	w.Write([]byte(strings.Repeat("a", stderrHead+10) + "\n"))
	if got := w.tailString(); got != strings.Repeat("a", stderrHead+10) {
		t.Errorf("short output quoted as %q", got)
	}
}
