// Command window is a WebAssembly operator module with an event-time
// tumbling-window sum: the operator "window" sums the decimal values of each
// key per window of config "size" milliseconds and emits one record per key
// and window when the watermark passes the window's end. Records for windows
// the watermark already passed go unchanged to the second output, "late".
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o window.wasm .
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

const plan = `{"name":"window","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"file","parallelism":1,
   "config":{"path":"input.tsv","format":"tsv","watermarkDelay":2000}},
  {"id":"window","kind":"operator","operator":"window","config":{"size":1000},"outputs":["main","late"]},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1},
  {"id":"late","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"window","partition":"key"},
  {"from":"window","to":"sink","partition":"rebalance"},
  {"from":"window","to":"late","partition":"rebalance","output":"late"}]}`

func init() {
	wstream.Register("window", func() wstream.Operator { return &window{} })
	wstream.SetPlan(plan)
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

type window struct {
	size int64
	late int
	sum  wstream.ValueState
	ns   [8]byte // the window's end, big-endian (non-negative ends sort by time)
	buf  []byte
}

func (w *window) Open(ctx *wstream.Context) error {
	cfg := struct {
		Size int64 `json:"size"`
	}{Size: 1000}
	if err := ctx.UnmarshalConfig(&cfg); err != nil {
		return err
	}
	if cfg.Size <= 0 {
		return fmt.Errorf("config size must be a positive number of milliseconds, got %d", cfg.Size)
	}
	late, err := ctx.Output("late")
	if err != nil {
		return fmt.Errorf("the window vertex needs outputs [\"main\",\"late\"]: %w", err)
	}
	w.size, w.late = cfg.Size, late
	w.sum = ctx.ValueState("sum")
	w.buf = make([]byte, 0, 64)
	return nil
}

// bounds returns the window [start, end) holding ts: start is ts rounded
// down (towards minus infinity) to a multiple of size. Bounds beyond the
// int64 range are clamped to it.
func bounds(ts, size int64) (start, end int64) {
	rem := ts % size
	if rem < 0 {
		// ts is negative: the boundary above it is ts-rem.
		end = ts - rem
		if end < math.MinInt64+size {
			return math.MinInt64, end
		}
		return end - size, end
	}
	start = ts - rem
	if start > math.MaxInt64-size {
		return start, math.MaxInt64
	}
	return start, start + size
}

func (w *window) Process(ctx *wstream.Context, r wstream.Record) error {
	_, end := bounds(r.Timestamp, w.size)
	if end-1 <= ctx.Watermark() {
		ctx.EmitTo(w.late, r.Key, r.Value, r.Timestamp)
		return nil
	}
	v, err := parseInt(r.Value)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint64(w.ns[:], uint64(end))
	sum := w.sum.Namespace(w.ns[:])
	s, _, err := sum.GetInt64()
	if err != nil {
		return err
	}
	if err := sum.PutInt64(s + v); err != nil {
		return err
	}
	return ctx.RegisterEventTimer(end-1, w.ns[:])
}

func (w *window) OnTimer(ctx *wstream.Context, t wstream.Timer) error {
	if len(t.Namespace) != 8 {
		return fmt.Errorf("timer namespace has %d bytes, want an 8-byte window end", len(t.Namespace))
	}
	end := int64(binary.BigEndian.Uint64(t.Namespace))
	sum := w.sum.Namespace(t.Namespace)
	s, ok, err := sum.GetInt64()
	if err != nil || !ok {
		return err
	}
	b := strconv.AppendInt(w.buf[:0], end-w.size, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, end, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, s, 10)
	w.buf = b
	ctx.Emit(t.Key, b, t.Timestamp)
	return sum.Delete()
}

// parseInt parses a decimal int64 without converting b to a string.
func parseInt(b []byte) (int64, error) {
	s := b
	neg := len(s) > 0 && s[0] == '-'
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, fmt.Errorf("value %q is not a decimal integer", b)
	}
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("value %q is not a decimal integer", b)
		}
		// The first test keeps n*10 from wrapping around.
		if n > (1<<63)/10 {
			return 0, fmt.Errorf("value %q overflows int64", b)
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63 {
			return 0, fmt.Errorf("value %q overflows int64", b)
		}
	}
	if neg {
		return -int64(n), nil
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("value %q overflows int64", b)
	}
	return int64(n), nil
}
