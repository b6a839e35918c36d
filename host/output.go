package host

import (
	"bytes"
)

const (
	// maxLineLen splits guest output lines longer than this, so a guest
	// that never writes a newline cannot grow host memory.
	maxLineLen = 4 << 10
	// stderrTail is how much of the end of a call's stderr a GuestError
	// quotes, and stderrHead how much of its beginning: a Go guest's panic
	// message comes first, before a goroutine dump that can be far longer.
	stderrTail = 2 << 10
	stderrHead = 512
)

// lineWriter receives a guest's stdout or stderr (through WASI fd_write)
// and hands it to sink line by line. For stderr it also keeps the tail of
// the head and tail of the current call's output to quote when it fails.
type lineWriter struct {
	sink    func(line string)
	partial []byte
	keep    bool   // keep head and tail
	head    []byte // the first stderrHead bytes since resetTail
	tail    []byte // the output after head, the last stderrTail..2*stderrTail bytes
	cut     bool   // output between head and tail was dropped
}

func (w *lineWriter) init(sink func(string), keepTail bool) {
	w.sink = sink
	w.keep = keepTail
}

// Write never fails: guest output must not break the guest.
func (w *lineWriter) Write(p []byte) (int, error) {
	if w.keep {
		rest := p
		if n := min(stderrHead-len(w.head), len(rest)); n > 0 {
			w.head = append(w.head, rest[:n]...)
			rest = rest[n:]
		}
		w.tail = append(w.tail, rest...)
		if len(w.tail) > 2*stderrTail {
			w.tail = w.tail[:copy(w.tail, w.tail[len(w.tail)-stderrTail:])]
			w.cut = true
		}
	}
	n := len(p)
	for len(p) > 0 {
		j := bytes.IndexByte(p, '\n')
		if j < 0 {
			w.partial = append(w.partial, p...)
			for len(w.partial) >= maxLineLen {
				w.emit(w.partial[:maxLineLen])
				w.partial = w.partial[:copy(w.partial, w.partial[maxLineLen:])]
			}
			break
		}
		if len(w.partial) > 0 {
			w.partial = append(w.partial, p[:j]...)
			w.emit(w.partial)
			w.partial = w.partial[:0]
		} else {
			w.emit(p[:j])
		}
		p = p[j+1:]
	}
	return n, nil
}

// flush emits an unterminated last line.
func (w *lineWriter) flush() {
	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = w.partial[:0]
	}
}

// emit hands one line to the sink, in pieces of at most maxLineLen,
// escaped: guest output is data (EscapeGuestText).
func (w *lineWriter) emit(line []byte) {
	if w.sink == nil {
		return
	}
	line = bytes.TrimSuffix(line, []byte{'\r'})
	for {
		n := min(len(line), maxLineLen)
		w.sink(EscapeGuestText(line[:n], 0, true))
		line = line[n:]
		if len(line) == 0 {
			return
		}
	}
}

// resetTail forgets the kept output: each call quotes only its own.
func (w *lineWriter) resetTail() {
	w.head, w.tail, w.cut = w.head[:0], w.tail[:0], false
}

// tailString quotes the output since resetTail, escaped: all of it when it
// is short, else its first line(s) up to stderrHead bytes, "…", and its
// last stderrTail bytes starting at a line boundary.
func (w *lineWriter) tailString() string {
	var b []byte
	t := w.tail
	if !w.cut && len(t) <= stderrTail {
		b = append(append(b, w.head...), t...)
	} else {
		h := w.head
		if j := bytes.LastIndexByte(h, '\n'); j > 0 {
			h = h[:j]
		}
		t = t[max(0, len(t)-stderrTail):]
		if j := bytes.IndexByte(t, '\n'); j >= 0 && j < len(t)-1 {
			t = t[j+1:]
		}
		b = append(append(append(b, h...), "\n…\n"...), t...)
	}
	// The host made the line structure; what is on the lines is data.
	return EscapeGuestText(bytes.TrimRight(b, "\n"), 0, true)
}
