package host

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestEscapeGuestText(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		max       int
		keepLines bool
		want      string
	}{
		{"empty", "", 0, false, ""},
		{"plain", "bad record 42", 0, false, "bad record 42"},
		{"backslash kept", `C:\dir\x1b`, 0, false, `C:\dir\x1b`},
		{"unicode kept", "größe ≥ 3 — ok 日本 🎉", 0, false, "größe ≥ 3 — ok 日本 🎉"},
		{"zero width joiner kept", "👩\u200d💻", 0, false, "👩\u200d💻"},
		{"named controls", "\a\b\t\n\v\f\r", 0, false, `\a\b\t\n\v\f\r`},
		{"nul", "a\x00b", 0, false, `a\x00b`},
		{"escape sequence", "\x1b[2K\x1b[1Gdone", 0, false, `\x1b[2K\x1b[1Gdone`},
		{"osc title", "\x1b]0;pwned\x07", 0, false, `\x1b]0;pwned\a`},
		{"del", "a\x7fb", 0, false, `a\x7fb`},
		{"other c0", "\x01\x1f\x0e", 0, false, `\x01\x1f\x0e`},
		{"fake line", "ok\r\n2026-11-29 INFO job finished", 0, false, `ok\r\n2026-11-29 INFO job finished`},
		{"c1 csi", "a\u009b31mb", 0, false, `a\u009b31mb`},
		{"c1 range", "\u0080\u0085\u009f", 0, false, `\u0080\u0085\u009f`},
		{"bidi override", "user\u202eexe.txt", 0, false, `user\u202eexe.txt`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", 0, false, `\u2066\u2067\u2068\u2069`},
		{"bidi marks", "\u200e\u200f\u061c", 0, false, `\u200e\u200f\u061c`},
		{"line separators", "a\u2028b\u2029c", 0, false, `a\u2028b\u2029c`},
		{"invalid byte", "a\xffb", 0, false, "a\uFFFDb"},
		{"invalid run is one replacement", "a\xff\xfe\xfdb", 0, false, "a\uFFFDb"},
		{"truncated rune", "a\xe2\x82", 0, false, "a\uFFFD"},
		{"overlong encoding", "\xc0\xaf", 0, false, "\uFFFD"},
		{"surrogate half", "\xed\xa0\x80", 0, false, "\uFFFD"},
		{"invalid then control", "\xff\x1b", 0, false, "\uFFFD\\x1b"},
		{"encoded replacement kept", "\uFFFD", 0, false, "\uFFFD"},
		{"keepLines keeps newline and tab", "a\n\tb", 0, true, "a\n\tb"},
		{"keepLines still escapes cr and esc", "a\r\n\x1b[Kb", 0, true, "a\\r\n\\x1b[Kb"},
		{"cut", "abcdefgh", 5, false, "abcde …[truncated, 8 bytes]"},
		{"exact fit", "abcde", 5, false, "abcde"},
		{"cut before an escape that does not fit", "abc\x1b", 5, false, "abc …[truncated, 4 bytes]"},
		{"cut at a rune boundary", "ab日本", 4, false, "ab …[truncated, 8 bytes]"},
		{"negative max is no limit", "abcdef", -1, false, "abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EscapeGuestText([]byte(tc.in), tc.max, tc.keepLines); got != tc.want {
				t.Errorf("EscapeGuestText(%q, %d, %v) = %q, want %q", tc.in, tc.max, tc.keepLines, got, tc.want)
			}
		})
	}
}

// TestEscapeGuestTextEveryRune checks the rule for every byte and every
// rune: nothing a terminal interprets survives, everything else is kept.
func TestEscapeGuestTextEveryRune(t *testing.T) {
	for b := 0; b < 0x80; b++ {
		got := EscapeGuestText([]byte{byte(b)}, 0, false)
		switch {
		case b >= 0x20 && b < 0x7f:
			if got != string(rune(b)) {
				t.Errorf("printable %#x became %q", b, got)
			}
		case strings.Contains(`abtnvfr`, got[len(got)-1:]) && len(got) == 2:
			// a named escape
		default:
			if want := fmt.Sprintf(`\x%02x`, b); got != want {
				t.Errorf("control %#x became %q, want %q", b, got, want)
			}
		}
	}
	for b := 0x80; b < 0x100; b++ {
		// A lone byte ≥ 0x80 is never valid UTF-8.
		if got := EscapeGuestText([]byte{byte(b)}, 0, false); got != "\uFFFD" {
			t.Errorf("lone byte %#x became %q", b, got)
		}
	}
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // not encodable
		}
		in := string(r)
		got := EscapeGuestText([]byte(in), 0, false)
		escape := (r <= 0x9f) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Bidi_Control, r)
		switch {
		case escape:
			if want := fmt.Sprintf(`\u%04x`, r); got != want {
				t.Fatalf("%U became %q, want %q", r, got, want)
			}
		case got != in:
			t.Fatalf("%U became %q, want it kept", r, got)
		}
	}
}

// TestEscapeGuestTextBounds: whatever the input, the output is valid UTF-8
// without a byte a terminal interprets, and within the bound plus the mark.
func TestEscapeGuestTextBounds(t *testing.T) {
	var all []byte
	for b := 0; b < 0x100; b++ {
		all = append(all, byte(b))
	}
	all = append(all, "\u009b\u202e\u2028日本"...)
	for _, max := range []int{0, 1, 7, 64, 300, 2000} {
		for _, keep := range []bool{false, true} {
			got := EscapeGuestText(all, max, keep)
			if !utf8.ValidString(got) {
				t.Errorf("max %d: invalid UTF-8 %q", max, got)
			}
			for _, r := range got {
				if (r < 0x20 && !(keep && (r == '\n' || r == '\t'))) || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r) {
					t.Errorf("max %d keep %v: %U survived in %q", max, keep, r, got)
				}
			}
			mark := fmt.Sprintf(" …[truncated, %d bytes]", len(all))
			if max > 0 && len(got) > max+len(mark) {
				t.Errorf("max %d: %d bytes", max, len(got))
			}
			if max > 0 && max < 200 && !strings.HasSuffix(got, mark) { // the escaped text is about 260 bytes
				t.Errorf("max %d: no mark in %q", max, got)
			}
		}
	}
}
