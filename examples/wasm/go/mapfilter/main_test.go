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
	for n := 0; n <= 41; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				src := bytes.Repeat([]byte("aZ{`\x80\xe1z@"), 6)[:n]
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

// TestContains checks contains against bytes.Contains for every needle of
// up to three bytes from a small alphabet at every position, in haystacks
// long enough to cover the word loop, its tail and candidates past the end.
func TestContains(t *testing.T) {
	alpha := []byte("aW1\x80")
	var needles [][]byte
	needles = append(needles, nil)
	for _, a := range alpha {
		needles = append(needles, []byte{a})
		for _, b := range alpha {
			needles = append(needles, []byte{a, b})
			for _, c := range alpha {
				needles = append(needles, []byte{a, b, c})
			}
		}
	}
	for n := 0; n <= 27; n++ {
		for seed := 0; seed < 64; seed++ {
			s := make([]byte, n)
			x := uint32(seed*2654435761 + n)
			for i := range s {
				x = x*1664525 + 1013904223
				s[i] = alpha[x>>30]
			}
			for _, sub := range needles {
				if got, want := contains(s, sub), bytes.Contains(s, sub); got != want {
					t.Fatalf("contains(%q, %q) = %v, want %v", s, sub, got, want)
				}
			}
		}
	}
}
