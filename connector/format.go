package connector

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/wstream/wstream/abi"
)

// Line formats shared by the file source and the text sinks.
const (
	formatText = "text" // one record per line: the value (sinks: key<TAB>value when the key is not empty)
	formatTSV  = "tsv"  // ts<TAB>key<TAB>value
)

func checkFormat(connector, format string) error {
	if format != formatText && format != formatTSV {
		return &ConfigError{Connector: connector, Field: "format", Message: fmt.Sprintf("%q must be %q or %q", format, formatText, formatTSV)}
	}
	return nil
}

// appendTextLine appends key<TAB>value, or value alone when the key is
// empty, and a newline. Bytes are written as they are: a value holding a
// newline spans lines.
func appendTextLine(dst []byte, r *abi.Record) []byte {
	if len(r.Key) > 0 {
		dst = append(dst, r.Key...)
		dst = append(dst, '\t')
	}
	dst = append(dst, r.Value...)
	return append(dst, '\n')
}

// appendTSVLine appends ts<TAB>key<TAB>value and a newline, the format the
// file source reads back. A key holding a tab or newline, or a value holding
// a newline, cannot be read back, so it is refused.
func appendTSVLine(dst []byte, r *abi.Record) ([]byte, error) {
	for _, c := range r.Key {
		if c == '\t' || c == '\n' {
			return dst, fmt.Errorf("key %q holds a tab or newline, which tsv cannot represent", r.Key)
		}
	}
	for _, c := range r.Value {
		if c == '\n' {
			return dst, fmt.Errorf("value %q holds a newline, which tsv cannot represent", truncate(r.Value))
		}
	}
	dst = strconv.AppendInt(dst, r.Timestamp, 10)
	dst = append(dst, '\t')
	dst = append(dst, r.Key...)
	dst = append(dst, '\t')
	dst = append(dst, r.Value...)
	return append(dst, '\n'), nil
}

// parseTSVLine splits ts<TAB>key<TAB>value. The value is the rest of the
// line and may itself hold tabs.
func parseTSVLine(line []byte) (ts int64, key, value []byte, ok bool) {
	i := bytes.IndexByte(line, '\t')
	if i < 0 {
		return 0, nil, nil, false
	}
	ts, ok = parseInt64(line[:i])
	if !ok {
		return 0, nil, nil, false
	}
	rest := line[i+1:]
	j := bytes.IndexByte(rest, '\t')
	if j < 0 {
		return 0, nil, nil, false
	}
	return ts, rest[:j], rest[j+1:], true
}

// parseInt64 parses an optionally signed decimal integer without
// allocating (strconv.ParseInt needs a string).
func parseInt64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// truncate shortens b for an error message.
func truncate(b []byte) string {
	const n = 64
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
