package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/wstream/wstream/abi"
)

// stdoutSink writes records as text lines (key<TAB>value, or the value
// alone when the key is empty) to a shared writer. Each Write formats the
// whole batch first and then hands it to the writer in one call under the
// writer's lock, so the lines of concurrent subtasks never interleave and
// every batch is visible as soon as Write returns.
type stdoutSink struct {
	w    io.Writer
	lock *writerLock
	buf  []byte
}

// stdoutConfig is the configuration of the "stdout" sink: none.
type stdoutConfig struct{}

func parseStdoutConfig(raw json.RawMessage) (stdoutConfig, error) {
	var c stdoutConfig
	return c, decodeConfig("stdout", raw, &c)
}

func (stdoutConfig) Connector() string { return "stdout" }

// Reach is the terminal (or whatever the runtime's stdout is).
func (stdoutConfig) Reach() []Reach { return []Reach{{What: ReachTerminal}} }

func (stdoutConfig) sink(w io.Writer) (Sink, error) {
	if w == nil {
		return nil, fmt.Errorf("connector stdout: no writer to write to")
	}
	return &stdoutSink{w: w}, nil
}

func (s *stdoutSink) Open(_ context.Context, subtask, parallelism int) error {
	if err := checkSubtask("connector stdout", subtask, parallelism); err != nil {
		return err
	}
	if s.lock != nil {
		return fmt.Errorf("connector stdout: open: already open")
	}
	s.lock = acquireWriterLock(s.w)
	return nil
}

func (s *stdoutSink) Write(batch []byte) error {
	if s.lock == nil {
		return fmt.Errorf("connector stdout: write: %w", errNotOpen)
	}
	r, err := abi.NewReader(batch)
	if err != nil {
		return fmt.Errorf("connector stdout: write: %w", err)
	}
	buf := s.buf[:0]
	var rec abi.Record
	for {
		ok, err := r.Next(&rec)
		if err != nil {
			return fmt.Errorf("connector stdout: write: %w", err)
		}
		if !ok {
			break
		}
		buf = appendTextLine(buf, &rec)
	}
	s.buf = buf
	if len(buf) == 0 {
		return nil
	}
	s.lock.Lock()
	_, err = s.w.Write(buf)
	s.lock.Unlock()
	if err != nil {
		return fmt.Errorf("connector stdout: write: %w", err)
	}
	return nil
}

func (s *stdoutSink) Close() error {
	if s.lock != nil {
		releaseWriterLock(s.w, s.lock)
		s.lock = nil
	}
	return nil
}

// writerLock serialises the sinks that share one writer.
type writerLock struct {
	sync.Mutex
	refs int
}

// writerLocks holds one lock per writer that an open sink uses. A writer
// whose dynamic type cannot be a map key shares the lock of sharedKey:
// correct, only coarser.
var writerLocks = struct {
	sync.Mutex
	m map[any]*writerLock
}{m: map[any]*writerLock{}}

type sharedKeyType struct{}

var sharedKey = sharedKeyType{}

func writerKey(w io.Writer) any {
	if reflect.TypeOf(w).Comparable() {
		return w
	}
	return sharedKey
}

func acquireWriterLock(w io.Writer) *writerLock {
	k := writerKey(w)
	writerLocks.Lock()
	defer writerLocks.Unlock()
	l := writerLocks.m[k]
	if l == nil {
		l = &writerLock{}
		writerLocks.m[k] = l
	}
	l.refs++
	return l
}

func releaseWriterLock(w io.Writer, l *writerLock) {
	k := writerKey(w)
	writerLocks.Lock()
	defer writerLocks.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(writerLocks.m, k)
	}
}
