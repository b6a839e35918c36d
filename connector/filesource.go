package connector

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/wstream/wstream/abi"
)

// fileSourceConfig is the configuration of the "file" source.
type fileSourceConfig struct {
	Path           string `json:"path"`           // required
	Format         string `json:"format"`         // "text" (default) or "tsv"
	WatermarkDelay int64  `json:"watermarkDelay"` // ms
	// Batch caps the records per batch (0 = the runtime's batch size). A
	// watermark follows every batch, so batch 1 gives a watermark after
	// every record: event-time results then do not depend on batching.
	Batch int64 `json:"batch"`
	// Rate paces the source to this many lines per second across the job
	// (0 = as fast as it can), as gen's rate does.
	Rate float64 `json:"rate"`
}

func parseFileSourceConfig(raw json.RawMessage) (fileSourceConfig, error) {
	c := fileSourceConfig{Format: formatText}
	if err := decodeConfig("file", raw, &c); err != nil {
		return c, err
	}
	if c.Path == "" {
		return c, &ConfigError{Connector: "file", Field: "path", Message: "missing: the source needs the file to read"}
	}
	if err := checkFormat("file", c.Format); err != nil {
		return c, err
	}
	if err := checkRange("file", "watermarkDelay", c.WatermarkDelay, 0, maxGenSpan); err != nil {
		return c, err
	}
	if err := checkRange("file", "batch", c.Batch, 0, 1<<20); err != nil {
		return c, err
	}
	if c.Rate < 0 {
		return c, &ConfigError{Connector: "file", Field: "rate", Message: fmt.Sprintf("%g must be ≥ 0", c.Rate)}
	}
	return c, nil
}

// fileSource reads records from a file, one per line. Line numbers count
// from 1 and are what the text format uses as timestamps; subtask s of p
// takes the lines whose 0-based index is s modulo p.
type fileSource struct {
	cfg     fileSourceConfig
	f       *os.File
	r       *bufio.Reader
	long    []byte // a line longer than the reader's buffer, assembled
	index   int64  // 0-based index of the next line to read
	pos     int64  // byte offset of the next line to read
	subtask int64
	step    int64
	maxTs   int64
	done    bool
	// After a Seek to a rescaled offset: what the subtasks before the
	// rescaling read in this subtask's class (see rescale.go), and the
	// largest of its gaps, above which nothing was read. prior.gaps is nil
	// otherwise.
	prior  layout
	gapsHi int64
	bucket *tokenBucket // paces the source (Rate), nil when it is not
}

func (c fileSourceConfig) Connector() string { return "file" }

// Reach is the file read.
func (c fileSourceConfig) Reach() []Reach {
	return []Reach{{Field: "path", What: ReachHostFile}}
}

func (c fileSourceConfig) source() (Source, error) { return &fileSource{cfg: c}, nil }

const fileBufferSize = 64 << 10

func (s *fileSource) Open(_ context.Context, subtask, parallelism int) error {
	if err := checkSubtask("connector file: source "+s.cfg.Path, subtask, parallelism); err != nil {
		return err
	}
	if s.f != nil {
		return fmt.Errorf("connector file: source %s: open: already open", s.cfg.Path)
	}
	f, err := os.Open(s.cfg.Path)
	if err != nil {
		return fmt.Errorf("connector file: source: %w", err)
	}
	s.f = f
	s.r = bufio.NewReaderSize(f, fileBufferSize)
	s.index = 0
	s.pos = 0
	s.subtask = int64(subtask)
	s.step = int64(parallelism)
	s.maxTs = abi.MinWatermark
	s.done = false
	s.prior, s.gapsHi = layout{}, 0
	s.bucket = nil
	if s.cfg.Rate > 0 {
		s.bucket = newTokenBucket(s.cfg.Rate / float64(parallelism))
	}
	return nil
}

func (s *fileSource) Next(ctx context.Context, b *abi.Builder, limit int) (int64, bool, error) {
	if s.f == nil {
		return abi.MinWatermark, false, fmt.Errorf("connector file: source %s: next: %w", s.cfg.Path, errNotOpen)
	}
	if limit < 1 {
		return s.watermark(), false, fmt.Errorf("connector file: source %s: next: max %d must be ≥ 1", s.cfg.Path, limit)
	}
	if err := ctx.Err(); err != nil {
		return s.watermark(), false, err
	}
	if s.cfg.Batch > 0 && int64(limit) > s.cfg.Batch {
		limit = int(s.cfg.Batch)
	}
	for s.bucket != nil && !s.done {
		got, wait := s.bucket.take(time.Now(), int64(limit))
		if got > 0 {
			limit = int(got)
			break
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return s.watermark(), false, err
		}
	}
	n := 0
	for n < limit && !s.done {
		line, err := s.readLine()
		if err == io.EOF {
			s.done = true
			break
		}
		if err != nil {
			return s.watermark(), false, fmt.Errorf("connector file: source %s: read line %d: %w", s.cfg.Path, s.index+1, err)
		}
		index := s.index
		s.index++
		if index%s.step != s.subtask {
			continue
		}
		if index < s.gapsHi && index < s.prior.gaps[s.prior.gapIndex(index)] {
			continue // read before a rescale
		}
		lineNo := index + 1
		if s.cfg.Format == formatText {
			b.Add(0, lineNo, nil, line)
			s.maxTs = max(s.maxTs, lineNo)
		} else {
			ts, key, value, ok := parseTSVLine(line)
			if !ok {
				return s.watermark(), false, fmt.Errorf("connector file: %s:%d: want ts<TAB>key<TAB>value with an integer ts, got %q", s.cfg.Path, lineNo, truncate(line))
			}
			b.Add(0, ts, key, value)
			s.maxTs = max(s.maxTs, ts)
		}
		n++
	}
	return s.watermark(), s.done, nil
}

// readLine returns the next line without its "\n" or "\r\n"; the slice is
// valid until the next call. A last line without a newline still counts.
func (s *fileSource) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err == io.EOF {
		if len(line) == 0 {
			return nil, io.EOF
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	s.pos += int64(len(line))
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func (s *fileSource) watermark() int64 { return watermark(s.maxTs, s.cfg.WatermarkDelay) }

// fileOffset is the "file" source's offset: the 0-based index and the byte
// offset of the next line to read, and the largest timestamp emitted so
// far. Path names the file so that an offset is not applied to another one.
// A rescaled offset (RescaleOffsets) also has Period and Gaps: the layout
// of the lines already read in the subtask's class (see rescale.go); Line
// and Byte are then only where reading starts, at or before the smallest
// gap.
type fileOffset struct {
	offsetHeader
	Path   string  `json:"path"`
	Line   int64   `json:"line"`
	Byte   int64   `json:"byte"`
	MaxTs  int64   `json:"maxTs"`
	Period int64   `json:"period,omitempty"`
	Gaps   []int64 `json:"gaps,omitempty"`
}

// rescaled reports whether the offset has a layout of its own.
func (o *fileOffset) rescaled() bool { return o.Period != 0 || o.Gaps != nil }

// layout checks the offset's layout and returns what its subtask has read.
// A plain offset's subtask has read the lines of its class before Line.
func (o *fileOffset) layout() (layout, error) {
	s, p := int64(o.Subtask), int64(o.Parallelism)
	if o.Line < 0 || o.Byte < 0 || o.Line > o.Byte {
		return layout{}, fmt.Errorf("line %d at byte %d is not a possible position", o.Line, o.Byte)
	}
	if !o.rescaled() {
		l := layout{subtask: s, parallelism: p, period: p, gaps: []int64{alignUp(o.Line, s, p)}}
		return l, l.check()
	}
	l := layout{subtask: s, parallelism: p, period: o.Period, gaps: o.Gaps}
	if err := l.check(); err != nil {
		return layout{}, err
	}
	if m := l.minGap(); o.Line > m {
		return layout{}, fmt.Errorf("line %d is past the first unread line %d of the subtask", o.Line, m)
	}
	return l, nil
}

// Offset returns the position of the next line to read. Lines of other
// subtasks between the last record and that line are skipped again after a
// Seek, so the position is exact for this subtask.
func (s *fileSource) Offset() ([]byte, error) {
	if s.f == nil {
		return nil, fmt.Errorf("connector file: source %s: offset: %w", s.cfg.Path, errNotOpen)
	}
	o := fileOffset{
		offsetHeader: offsetHeader{Version: offsetVersion, Kind: "file", Subtask: int(s.subtask), Parallelism: int(s.step)},
		Path:         s.cfg.Path,
		Line:         s.index,
		Byte:         s.pos,
		MaxTs:        s.maxTs,
	}
	if s.prior.gaps != nil {
		// Every line of the class before index is read (by this subtask or
		// before the rescale). The plain form says exactly that, so it fits
		// when nothing beyond is read either.
		l := s.prior.advance(s.index).reduce()
		if len(l.gaps) > 1 || l.gaps[0] != alignUp(s.index, s.subtask, s.step) {
			o.Period, o.Gaps = l.period, l.gaps
		}
	}
	return json.Marshal(o)
}

// Seek positions the file at the offset's byte without reading what comes
// before it. The file must still hold at least that many bytes, and the
// offset must fall at the start of a line (or at the end of the file):
// anything else means the file changed since the offset was taken. After a
// rescaled offset, Next also skips the lines of the class that the subtasks
// before the rescale had read.
func (s *fileSource) Seek(offset []byte) error {
	what := "connector file: source " + s.cfg.Path
	if s.f == nil {
		return fmt.Errorf("%s: seek: %w", what, errNotOpen)
	}
	var o fileOffset
	if err := decodeOffset(what, "file", int(s.subtask), int(s.step), offset, &o); err != nil {
		return err
	}
	if o.Path != s.cfg.Path {
		return fmt.Errorf("%s: seek: the offset belongs to file %s; restore with the path the offset was taken from", what, o.Path)
	}
	l, err := o.layout()
	if err != nil {
		if !o.rescaled() {
			return fmt.Errorf("%s: seek: %v", what, err)
		}
		return fmt.Errorf("%s: seek: rescaled offset: %v", what, err)
	}
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("%s: seek: %w", what, err)
	}
	if st.Size() < o.Byte {
		return fmt.Errorf("%s: seek: the offset is at byte %d (line %d) but the file has only %d bytes: it was truncated or replaced since the offset was taken",
			what, o.Byte, o.Line+1, st.Size())
	}
	if o.Byte > 0 && o.Byte < st.Size() {
		var prev [1]byte
		if _, err := s.f.ReadAt(prev[:], o.Byte-1); err != nil {
			return fmt.Errorf("%s: seek: %w", what, err)
		}
		if prev[0] != '\n' {
			return fmt.Errorf("%s: seek: byte %d (line %d) is not the start of a line: the file changed since the offset was taken", what, o.Byte, o.Line+1)
		}
	}
	if _, err := s.f.Seek(o.Byte, io.SeekStart); err != nil {
		return fmt.Errorf("%s: seek: %w", what, err)
	}
	s.r.Reset(s.f)
	s.index, s.pos, s.maxTs, s.done = o.Line, o.Byte, o.MaxTs, false
	s.prior, s.gapsHi = layout{}, 0
	if o.rescaled() {
		s.prior, s.gapsHi = l, l.maxGap()
	}
	return nil
}

func (s *fileSource) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f, s.r = nil, nil
	if err != nil {
		return fmt.Errorf("connector file: source: %w", err)
	}
	return nil
}
