// Command mapfilter is a stateless WebAssembly operator module: the operator
// "upper" turns values to ASCII upper case and the operator "filter" keeps
// the records whose value contains a substring. Its plan chains both between
// a generator source and a stdout sink. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mapfilter.wasm .
package main

import (
	"bytes"
	"encoding/binary"

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

// upper emits each record with its value in ASCII upper case.
type upper struct {
	buf []byte
}

func (u *upper) Open(*wstream.Context) error { return nil }

func (u *upper) Process(ctx *wstream.Context, r wstream.Record) error {
	// Emit copies the value, so one buffer serves every record.
	if cap(u.buf) < len(r.Value) {
		u.buf = make([]byte, len(r.Value))
	}
	u.buf = u.buf[:len(r.Value)]
	upperASCII(u.buf, r.Value)
	ctx.Emit(r.Key, u.buf, r.Timestamp)
	return nil
}

// upperASCII writes src to dst with 'a'..'z' in upper case, eight bytes at a
// time: compiled to wasm, every loop iteration costs a few branches and a
// work counter, so a byte loop would cost four times as much.
func upperASCII(dst, src []byte) {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	for len(src) >= 8 {
		x := binary.LittleEndian.Uint64(src)
		low := x &^ high                                 // each byte without its top bit
		geA := low + (0x80-'a')*ones                     // top bit set where byte >= 'a'
		gtZ := low + (0x80-'z'-1)*ones                   // top bit set where byte > 'z'
		lower := (geA &^ gtZ) &^ x & high                // lower-case ASCII letters (top bit clear)
		binary.LittleEndian.PutUint64(dst, x^(lower>>2)) // 0x80>>2 is the case bit
		dst, src = dst[8:], src[8:]
	}
	for i, c := range src {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst[i] = c
	}
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
	if bytes.Contains(r.Value, f.contains) {
		ctx.Emit(r.Key, r.Value, r.Timestamp)
	}
	return nil
}
