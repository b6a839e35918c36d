// Command mapfilter is a stateless WebAssembly operator module: the operator
// "upper" turns values to ASCII upper case and the operator "filter" keeps
// the records whose value contains a substring. Its plan chains both between
// a generator source and a stdout sink. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mapfilter.wasm .
package main

import (
	"encoding/binary"
	"math/bits"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

const plan = `{"name":"mapfilter","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":100000,"keys":1000,"words":4,"seed":1}},
  {"id":"upper","kind":"operator","operator":"upper"},
  {"id":"filter","kind":"operator","operator":"filter","config":{"contains":"E"}},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"upper","partition":"forward"},
  {"from":"upper","to":"filter","partition":"forward"},
  {"from":"filter","to":"sink","partition":"rebalance"}]}`

func init() {
	wstream.Register("upper", func() wstream.Operator { return &upper{} })
	wstream.Register("filter", func() wstream.Operator { return &filter{} })
	wstream.SetPlan(plan)
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

// upper emits each record with its value in ASCII upper case, written
// straight into the output buffer (EmitReserve): no buffer of its own, and
// one copy per record fewer.
type upper struct{}

func (u *upper) Open(*wstream.Context) error { return nil }

func (u *upper) Process(ctx *wstream.Context, r wstream.Record) error {
	upperASCII(ctx.EmitReserve(0, r.Key, len(r.Value), r.Timestamp), r.Value)
	return nil
}

// upperASCII writes src to dst (as long) with 'a'..'z' in upper case,
// eight bytes at a time. Compiled to wasm, every jump that Go's code
// generator does not lay out as a fall-through goes through the function's
// dispatch table (an indirect branch), so values up to 32 bytes, the common
// case, take straight-line code with overlapping words and no loop.
func upperASCII(dst, src []byte) {
	n := len(src)
	switch {
	case n < 8:
		for i, c := range src {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst[i] = c
		}
	case n <= 16:
		dst = dst[:n]
		binary.LittleEndian.PutUint64(dst, upperWord(binary.LittleEndian.Uint64(src)))
		binary.LittleEndian.PutUint64(dst[n-8:], upperWord(binary.LittleEndian.Uint64(src[n-8:])))
	case n <= 32:
		dst = dst[:n]
		binary.LittleEndian.PutUint64(dst, upperWord(binary.LittleEndian.Uint64(src)))
		binary.LittleEndian.PutUint64(dst[8:], upperWord(binary.LittleEndian.Uint64(src[8:])))
		binary.LittleEndian.PutUint64(dst[n-16:], upperWord(binary.LittleEndian.Uint64(src[n-16:])))
		binary.LittleEndian.PutUint64(dst[n-8:], upperWord(binary.LittleEndian.Uint64(src[n-8:])))
	default:
		dst = dst[:n]
		for i := 0; i+8 <= n; i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], upperWord(binary.LittleEndian.Uint64(src[i:])))
		}
		binary.LittleEndian.PutUint64(dst[n-8:], upperWord(binary.LittleEndian.Uint64(src[n-8:]))) // the tail, overlapping
	}
}

// upperWord upper-cases the ASCII letters of the eight bytes of x (SWAR: a
// few arithmetic operations per word instead of a compare per byte).
func upperWord(x uint64) uint64 {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	low := x &^ high                  // each byte without its top bit
	geA := low + (0x80-'a')*ones      // top bit set where byte >= 'a'
	gtZ := low + (0x80-'z'-1)*ones    // top bit set where byte > 'z'
	lower := (geA &^ gtZ) &^ x & high // lower-case ASCII letters (top bit clear)
	return x ^ (lower >> 2)           // 0x80>>2 is the case bit
}

// filter keeps the records whose value contains config "contains"; without
// it, it keeps every record.
type filter struct {
	contains []byte
}

func (f *filter) Open(ctx *wstream.Context) error {
	var cfg struct {
		Contains string `json:"contains"`
	}
	if err := ctx.UnmarshalConfig(&cfg); err != nil {
		return err
	}
	f.contains = []byte(cfg.Contains)
	return nil
}

func (f *filter) Process(ctx *wstream.Context, r wstream.Record) error {
	if contains(r.Value, f.contains) {
		ctx.Emit(r.Key, r.Value, r.Timestamp)
	}
	return nil
}

// contains reports whether sub occurs in s. It compares eight positions at
// a time (SWAR): a position matches sub's first two bytes where both words
// XORed with them have a zero byte there, and a word has a zero byte exactly
// when (z - ones) &^ z & high is not zero. For needles of one or two bytes
// that answers; longer ones check each candidate in full. bytes.Contains
// would be shorter, but compiled to wasm it has no vector code: for a short
// needle whose first byte is frequent it calls IndexByte (which calls
// memchr) per occurrence, then falls back to Rabin-Karp, and cost this
// operator more than everything else together.
func contains(s, sub []byte) bool {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	m := len(sub)
	switch {
	case m == 0:
		return true
	case m > len(s):
		return false
	}
	// The second byte's offset: 0 for a one-byte needle, which then
	// compares its first byte twice.
	o := min(m-1, 1)
	p0, p1 := ones*uint64(sub[0]), ones*uint64(sub[o])
	end := len(s) - o - 8 // the last window start with both words in s
	if end < 0 {
		// Shorter than a word: byte by byte.
		for j := 0; j+m <= len(s); j++ {
			if hasPrefix(s[j:], sub) {
				return true
			}
		}
		return false
	}
	for i := 0; ; i += 8 {
		if i > end {
			i = end // the last window overlaps the previous one
		}
		z := (binary.LittleEndian.Uint64(s[i:]) ^ p0) | (binary.LittleEndian.Uint64(s[i+o:]) ^ p1)
		if hits := (z - ones) &^ z & high; hits != 0 {
			if m <= 2 {
				return true
			}
			// The lowest flagged byte is a true zero; those above it may
			// be false positives (a borrow): check each in full.
			for ; hits != 0; hits &= hits - 1 {
				j := i + bits.TrailingZeros64(hits)>>3
				if j+m <= len(s) && hasPrefix(s[j:], sub) {
					return true
				}
			}
		}
		if i == end {
			return false
		}
	}
}

// hasPrefix reports whether s starts with p, comparing in the loop rather
// than calling bytes.HasPrefix: the needles of a filter are short, and a
// call costs more than a few compares on wasm.
func hasPrefix(s, p []byte) bool {
	if len(p) > len(s) {
		return false
	}
	for i, c := range p {
		if s[i] != c {
			return false
		}
	}
	return true
}
