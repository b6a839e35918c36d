package main

import (
	"bytes"
	"testing"
)

// TestUpperASCII checks every byte value at every position of a word and of
// the tail against a byte-at-a-time reference.
func TestUpperASCII(t *testing.T) {
	ref := func(b []byte) []byte {
		out := bytes.Clone(b)
		for i, c := range out {
			if 'a' <= c && c <= 'z' {
				out[i] = c - 32
			}
		}
		return out
	}
	for n := 0; n <= 17; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				src := bytes.Repeat([]byte("aZ{`\x80\xe1z@"), 3)[:n]
				src[pos] = byte(c)
				dst := make([]byte, n)
				upperASCII(dst, src)
				if want := ref(src); !bytes.Equal(dst, want) {
					t.Fatalf("upperASCII(%q) = %q, want %q", src, dst, want)
				}
			}
		}
	}
}
