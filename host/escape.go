package host

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// EscapeGuestText makes text that came from a guest safe to print: guest
// text is data, and a terminal or a log viewer must not interpret any of
// it. It is the one function every guest-provided string passes through
// (log and fail messages, stdout and stderr lines, wazero's trap messages,
// which carry the guest's function names) before it reaches a logger, an
// error or a terminal.
//
//   - Control characters are shown as escapes: \a \b \t \n \v \f \r by
//     name, other C0 controls and DEL as \xHH (ESC is \x1b), and C1
//     controls (U+0080–U+009F, among them the one-byte CSI U+009B) as
//     \u0080…\u009f. With keepLines, '\n' and '\t' are kept as they are,
//     for text whose line structure the host made (a stack trace, a quoted
//     stderr tail); '\r' is escaped even then, since it rewrites a line.
//   - Bidirectional formatting characters (U+061C, U+200E, U+200F,
//     U+202A–U+202E, U+2066–U+2069), which reorder what is displayed, and
//     the line and paragraph separators U+2028 and U+2029 are shown as
//     \uXXXX.
//   - Invalid UTF-8 is replaced by U+FFFD, one per run of invalid bytes.
//   - Everything else, a backslash included, is kept.
//
// When the escaped text would exceed maxBytes (≤ 0: no limit) it is cut at
// a character boundary to at most maxBytes bytes and marked
// " …[truncated, N bytes]", N being the length of text.
func EscapeGuestText(text []byte, maxBytes int, keepLines bool) string {
	if maxBytes <= 0 {
		maxBytes = unlimited
	}
	// The common case, short printable ASCII, is returned as is.
	if len(text) <= maxBytes && plainASCII(text, keepLines) {
		return string(text)
	}
	out := make([]byte, 0, min(len(text), maxBytes)+16)
	var esc [12]byte
	invalid := false // the previous byte was invalid UTF-8
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		var piece []byte
		switch {
		case r == utf8.RuneError && n <= 1:
			if invalid {
				i += n
				continue
			}
			piece = append(esc[:0], "\uFFFD"...)
		case keepLines && (r == '\n' || r == '\t'):
			piece = append(esc[:0], byte(r))
		case r < 0x20 || r == 0x7f:
			piece = escapeControl(esc[:0], byte(r))
		case r < 0x80:
			piece = append(esc[:0], byte(r))
		case needsUnicodeEscape(r):
			piece = appendUnicodeEscape(esc[:0], r)
		default:
			piece = text[i : i+n]
		}
		invalid = r == utf8.RuneError && n <= 1
		if len(out)+len(piece) > maxBytes {
			out = append(out, " …[truncated, "...)
			out = strconv.AppendInt(out, int64(len(text)), 10)
			out = append(out, " bytes]"...)
			return string(out)
		}
		out = append(out, piece...)
		i += n
	}
	return string(out)
}

// plainASCII reports whether text is printable ASCII (and, with
// keepLines, newlines and tabs), which needs no escaping.
func plainASCII(text []byte, keepLines bool) bool {
	for _, c := range text {
		if c >= 0x20 && c < 0x7f {
			continue
		}
		if keepLines && (c == '\n' || c == '\t') {
			continue
		}
		return false
	}
	return true
}

func escapeControl(dst []byte, c byte) []byte {
	switch c {
	case '\a':
		return append(dst, `\a`...)
	case '\b':
		return append(dst, `\b`...)
	case '\t':
		return append(dst, `\t`...)
	case '\n':
		return append(dst, `\n`...)
	case '\v':
		return append(dst, `\v`...)
	case '\f':
		return append(dst, `\f`...)
	case '\r':
		return append(dst, `\r`...)
	}
	return append(dst, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
}

const hexDigits = "0123456789abcdef"

// appendUnicodeEscape appends \uXXXX for r, which is below U+10000.
func appendUnicodeEscape(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// needsUnicodeEscape reports whether a valid non-ASCII rune must be shown
// as \uXXXX: C1 controls, bidirectional formatting, line and paragraph
// separators.
func needsUnicodeEscape(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r)
}
