package job

import (
	"strings"
	"testing"
)

// TestParseMode: the three modes parse to themselves; anything else, the
// empty string and a near miss included, is refused with the modes named.
func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeAligned, ModeUnaligned, ModeAtLeastOnce} {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, s := range []string{"", "Aligned", "exactly-once", "at_least_once"} {
		_, err := ParseMode(s)
		if err == nil || !strings.Contains(err.Error(), `"aligned", "unaligned" or "at-least-once"`) {
			t.Errorf("ParseMode(%q): error %v, want one naming the modes", s, err)
		}
	}
}
