// Command wordcountv2 is the wordcount with a new layout of its count
// state: version 2 stores a word's count as decimal ASCII ("17") where
// version 1 (the other wordcounts, in every language) stores 8 bytes
// little-endian. Its plan declares the state at layout version 2, and it
// registers a migration of version 1 values, so that a running wordcount
// can be upgraded to it (wstream upgrade, docs/upgrade.md) and a savepoint
// of any wordcount restores into it. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wordcountv2.wasm .
package main

import (
	"encoding/binary"
	"fmt"
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
  {"id":"count","kind":"operator","operator":"count","states":[{"name":"count","kind":"value","version":2}]},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

func init() {
	wstream.Register("split", func() wstream.Operator { return split{} })
	wstream.Register("count", func() wstream.Operator { return &count{} })
	wstream.RegisterMigration("count", "count", migrateCount)
	wstream.SetPlan(plan)
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

// migrateCount turns a version 1 count (int64, 8 bytes little-endian) into
// version 2 (decimal ASCII).
func migrateCount(version int, _, _, value []byte) ([]byte, error) {
	if version != 1 {
		return nil, fmt.Errorf("no migration from layout version %d", version)
	}
	if len(value) != 8 {
		return nil, fmt.Errorf("a version 1 count has 8 bytes, this one %d", len(value))
	}
	return strconv.AppendInt(nil, int64(binary.LittleEndian.Uint64(value)), 10), nil
}

// split emits one record per whitespace-separated word of a line.
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

// count keeps value state "count" per word, as decimal ASCII, and emits
// key = word, value = the count when the input ends.
type count struct {
	n   wstream.ValueState
	buf []byte
}

func (c *count) Open(ctx *wstream.Context) error {
	c.n = ctx.ValueState("count")
	c.buf = make([]byte, 0, 20)
	return nil
}

func (c *count) get() (int64, bool, error) {
	b, ok, err := c.n.Get()
	if err != nil || !ok {
		return 0, ok, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("count state %q is not a version 2 (decimal) count: %w", b, err)
	}
	return n, true, nil
}

func (c *count) Process(ctx *wstream.Context, r wstream.Record) error {
	n, ok, err := c.get()
	if err != nil {
		return err
	}
	if !ok {
		if err := ctx.RegisterEventTimer(math.MaxInt64, nil); err != nil {
			return err
		}
	}
	c.buf = strconv.AppendInt(c.buf[:0], n+1, 10)
	return c.n.Put(c.buf)
}

func (c *count) OnTimer(ctx *wstream.Context, t wstream.Timer) error {
	n, ok, err := c.get()
	if err != nil || !ok {
		return err
	}
	c.buf = strconv.AppendInt(c.buf[:0], n, 10)
	ctx.Emit(t.Key, c.buf, t.Timestamp)
	return c.n.Delete()
}
