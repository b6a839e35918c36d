package connector

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/wstream/wstream/abi"
)

// fileSinkConfig is the configuration of the "file" sink.
type fileSinkConfig struct {
	Path   string `json:"path"`   // required
	Format string `json:"format"` // "text" (default) or "tsv"
}

// fileSink writes records as lines to a file. It writes to a temporary file
// next to the target and renames it at Close, so a file at the target path is
// always complete. After BeginTransactions it writes exactly-once output into
// the directory at path instead (see fileTxns).
type fileSink struct {
	cfg    fileSinkConfig
	target string
	f      *os.File
	w      *bufio.Writer
	buf    []byte
	err    error     // the first write error: Close then discards the file
	txn    *fileTxns // transactional mode (BeginTransactions), nil otherwise
}

func parseFileSinkConfig(raw json.RawMessage) (fileSinkConfig, error) {
	c := fileSinkConfig{Format: formatText}
	if err := decodeConfig("file", raw, &c); err != nil {
		return c, err
	}
	if c.Path == "" {
		return c, &ConfigError{Connector: "file", Field: "path", Message: "missing: the sink needs the file to write"}
	}
	if err := checkFormat("file", c.Format); err != nil {
		return c, err
	}
	return c, nil
}

func (c fileSinkConfig) Connector() string { return "file" }

// Reach is the file written.
func (c fileSinkConfig) Reach() []Reach {
	return []Reach{{Field: "path", What: ReachHostFile}}
}

func (c fileSinkConfig) sink(io.Writer) (Sink, error) { return &fileSink{cfg: c}, nil }

// partPath is the file subtask s of p writes: path itself when p is 1,
// path.part-<s> otherwise.
func partPath(path string, subtask, parallelism int) string {
	if parallelism == 1 {
		return path
	}
	return path + ".part-" + strconv.Itoa(subtask)
}

func (s *fileSink) Open(_ context.Context, subtask, parallelism int) error {
	if err := checkSubtask("connector file: sink "+s.cfg.Path, subtask, parallelism); err != nil {
		return err
	}
	if s.txn != nil {
		return s.txn.open(subtask, parallelism)
	}
	if s.f != nil {
		return fmt.Errorf("connector file: sink %s: open: already open", s.target)
	}
	target := partPath(s.cfg.Path, subtask, parallelism)
	f, err := os.CreateTemp(filepath.Dir(target), filepath.Base(target)+".*.inprogress")
	if err != nil {
		return fmt.Errorf("connector file: sink %s: %w", target, err)
	}
	s.target, s.f, s.err = target, f, nil
	s.w = bufio.NewWriterSize(f, fileBufferSize)
	return nil
}

func (s *fileSink) Write(batch []byte) error {
	if s.txn != nil {
		return s.txn.write(s, batch)
	}
	if s.f == nil {
		return fmt.Errorf("connector file: sink %s: write: %w", s.cfg.Path, errNotOpen)
	}
	if s.err != nil {
		return s.err
	}
	buf, err := s.format(batch)
	if err != nil {
		return fmt.Errorf("connector file: sink %s: write: %w", s.target, err)
	}
	if _, err := s.w.Write(buf); err != nil {
		s.err = fmt.Errorf("connector file: sink %s: write: %w", s.target, err)
		return s.err
	}
	return nil
}

// format formats the records of batch as lines into s.buf and returns it.
// The whole batch is formatted before anything is written, so that a bad
// record writes nothing.
func (s *fileSink) format(batch []byte) ([]byte, error) {
	r, err := abi.NewReader(batch)
	if err != nil {
		return nil, err
	}
	buf := s.buf[:0]
	var rec abi.Record
	for {
		ok, err := r.Next(&rec)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if s.cfg.Format == formatText {
			buf = appendTextLine(buf, &rec)
		} else if buf, err = appendTSVLine(buf, &rec); err != nil {
			return nil, err
		}
	}
	s.buf = buf
	return buf, nil
}

// Abort discards what the sink wrote: the temporary file is removed and the
// target is left as it was, so a failed job never leaves a file that looks
// complete.
func (s *fileSink) Abort() error {
	if s.txn != nil {
		return s.txn.abort()
	}
	if s.f == nil {
		return nil
	}
	f, tmp := s.f, s.f.Name()
	s.f = nil
	cerr := f.Close()
	if rerr := os.Remove(tmp); rerr != nil {
		return fmt.Errorf("connector file: sink %s: abort: %w", s.target, rerr)
	}
	if cerr != nil {
		return fmt.Errorf("connector file: sink %s: abort: %w", s.target, cerr)
	}
	return nil
}

// Close flushes and syncs the temporary file and renames it to the target.
// After a failed write it removes the temporary file instead and reports the
// failure, so no partial output appears at the target. In transactional
// mode it commits the rest of the input instead (see fileTxns.close).
func (s *fileSink) Close() error {
	if s.txn != nil {
		return s.txn.close()
	}
	if s.f == nil {
		return nil
	}
	f, tmp := s.f, s.f.Name()
	s.f = nil
	err := s.err
	if err == nil {
		if ferr := s.w.Flush(); ferr != nil {
			err = fmt.Errorf("connector file: sink %s: flush: %w", s.target, ferr)
		}
	}
	if err == nil {
		if serr := f.Sync(); serr != nil {
			err = fmt.Errorf("connector file: sink %s: sync: %w", s.target, serr)
		}
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("connector file: sink %s: close: %w", s.target, cerr)
	}
	if err == nil {
		// CreateTemp makes the file private; output files are ordinary ones.
		if cerr := os.Chmod(tmp, 0o644); cerr != nil {
			err = fmt.Errorf("connector file: sink %s: %w", s.target, cerr)
		}
	}
	if err == nil {
		if rerr := os.Rename(tmp, s.target); rerr != nil {
			err = fmt.Errorf("connector file: sink %s: %w", s.target, rerr)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
