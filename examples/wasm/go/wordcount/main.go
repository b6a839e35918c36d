// Command wordcount is a WebAssembly operator module that counts words: the
// operator "split" turns lines into words and the operator "count" keeps a
// count per word and emits every word's final count at the end of a bounded
// input. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wordcount.wasm .
package main

import (
	"math"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

const plan = `{"name":"wordcount","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":100000,"keys":1000,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

func init() {
	wstream.Register("split", func() wstream.Operator { return split{} })
	wstream.Register("count", func() wstream.Operator { return &count{} })
	wstream.SetPlan(plan)
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

// split emits one record per whitespace-separated word of a line: key = the
// word, empty value, the line's timestamp.
type split struct{}

func (split) Open(*wstream.Context) error { return nil }

func (split) Process(ctx *wstream.Context, r wstream.Record) error {
	line := r.Value
	start := -1
	for i := 0; i < len(line); {
		c, size := rune(line[i]), 1
		if c >= utf8.RuneSelf {
			c, size = utf8.DecodeRune(line[i:])
		}
		if unicode.IsSpace(c) {
			if start >= 0 {
				ctx.Emit(line[start:i], nil, r.Timestamp)
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += size
	}
	if start >= 0 {
		ctx.Emit(line[start:], nil, r.Timestamp)
	}
	return nil
}

// count keeps value state "count" per word and emits key = word, value = the
// decimal count when the input ends (an event-time timer at math.MaxInt64).
type count struct {
	n   wstream.ValueState
	buf []byte
}

func (c *count) Open(ctx *wstream.Context) error {
	c.n = ctx.ValueState("count")
	c.buf = make([]byte, 0, 20)
	return nil
}

func (c *count) Process(ctx *wstream.Context, r wstream.Record) error {
	n, ok, err := c.n.GetInt64()
	if err != nil {
		return err
	}
	if !ok {
		// Timers are keyed state: one registration per word is enough.
		if err := ctx.RegisterEventTimer(math.MaxInt64, nil); err != nil {
			return err
		}
	}
	return c.n.PutInt64(n + 1)
}

func (c *count) OnTimer(ctx *wstream.Context, t wstream.Timer) error {
	n, ok, err := c.n.GetInt64()
	if err != nil || !ok {
		return err
	}
	c.buf = strconv.AppendInt(c.buf[:0], n, 10)
	ctx.Emit(t.Key, c.buf, t.Timestamp)
	return c.n.Delete()
}
