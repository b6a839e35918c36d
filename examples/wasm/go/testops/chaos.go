package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

func init() {
	wstream.Register("chaos", func() wstream.Operator { return &chaos{} })
	wstream.Register("runcount", func() wstream.Operator { return &runcount{} })
}

// chaos passes records through and fails at random points, for recovery
// tests: with probability config "trap" per record it traps, with
// probability "exit" it exits the instance (the subtask dies). The random
// stream is seeded by config "seed" and the processing time at open, so each
// restart fails at different records and the job makes progress. With
// "stallEvery" N and "stallMs" D it also stalls for D ms after every N
// records, so that its output channel lags now and then and barriers take
// time to align downstream.
//
// With "failAfterMs" [min, max] it also fails once a random time in that
// range has passed since open and a checkpoint has completed since open: by
// a trap, or by exiting with probability "exitShare". Failures spaced in
// time, rather than per record, keep the number of failures of a run steady
// whatever its speed; waiting for a checkpoint makes every attempt move the
// job forward, however slow a loaded machine makes restores and checkpoints
// (without it a job failing every 400 ms never completes one again).
type chaos struct {
	cfg struct {
		Trap        float64  `json:"trap"`
		Exit        float64  `json:"exit"`
		Seed        uint64   `json:"seed"`
		StallEvery  int      `json:"stallEvery"`
		StallMs     int64    `json:"stallMs"`
		FailAfterMs [2]int64 `json:"failAfterMs"`
		ExitShare   float64  `json:"exitShare"`
	}
	state    uint64
	seen     int
	deadline int64 // 0: no timed failure
	// armed: a checkpoint completed since open, so the timed failure may
	// fire.
	armed bool
}

// chaos listens to checkpoints to learn when one completed.
var _ wstream.CheckpointListener = (*chaos)(nil)

func (o *chaos) CheckpointComplete(ctx *wstream.Context, id int64) error {
	o.armed = true
	return nil
}

func (o *chaos) PreBarrier(ctx *wstream.Context, id int64) error        { return nil }
func (o *chaos) CheckpointAborted(ctx *wstream.Context, id int64) error { return nil }

func (o *chaos) Open(ctx *wstream.Context) error {
	if err := ctx.UnmarshalConfig(&o.cfg); err != nil {
		return err
	}
	o.state = o.cfg.Seed ^ uint64(ctx.ProcessingTime())*0x9e3779b97f4a7c15
	if lo, hi := o.cfg.FailAfterMs[0], o.cfg.FailAfterMs[1]; hi > 0 {
		if hi < lo {
			return fmt.Errorf("chaos: failAfterMs [%d, %d]: the maximum is below the minimum", lo, hi)
		}
		o.deadline = ctx.ProcessingTime() + lo + int64(o.next()*float64(hi-lo))
	}
	return nil
}

// next is splitmix64: a uniform float in [0, 1).
func (o *chaos) next() float64 {
	o.state += 0x9e3779b97f4a7c15
	z := o.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

func (o *chaos) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.deadline > 0 && o.armed && ctx.ProcessingTime() >= o.deadline {
		if o.next() < o.cfg.ExitShare {
			fmt.Fprintf(os.Stderr, "testops chaos: the subtask dies at record %q\n", r.Value)
			os.Exit(137)
		}
		fmt.Fprintf(os.Stderr, "panic: testops chaos trap at record %q\n", r.Value)
		unreachable()
	}
	switch x := o.next(); {
	case x < o.cfg.Trap:
		fmt.Fprintf(os.Stderr, "panic: testops chaos trap at record %q\n", r.Value)
		unreachable()
	case x < o.cfg.Trap+o.cfg.Exit:
		fmt.Fprintf(os.Stderr, "testops chaos: the subtask dies at record %q\n", r.Value)
		os.Exit(137)
	}
	if o.cfg.StallEvery > 0 {
		o.seen++
		if o.seen%o.cfg.StallEvery == 0 {
			until := ctx.ProcessingTime() + o.cfg.StallMs
			for ctx.ProcessingTime() < until {
			}
		}
	}
	ctx.Emit(r.Key, r.Value, r.Timestamp)
	return nil
}

// runcount keeps a count per key and emits key, running count for every
// record: its output shows at once whether state and output are
// exactly-once (a lost or repeated record changes the multiset of lines).
// Config "stallEvery" N and "stallMs" D make it stall D ms after every N
// records: a slow consumer that backs up its input channels.
type runcount struct {
	n   wstream.ValueState
	buf []byte
	cfg struct {
		StallEvery int   `json:"stallEvery"`
		StallMs    int64 `json:"stallMs"`
	}
	seen int
}

func (o *runcount) Open(ctx *wstream.Context) error {
	o.n = ctx.ValueState("n")
	return ctx.UnmarshalConfig(&o.cfg)
}

func (o *runcount) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.cfg.StallEvery > 0 {
		o.seen++
		if o.seen%o.cfg.StallEvery == 0 {
			until := ctx.ProcessingTime() + o.cfg.StallMs
			for ctx.ProcessingTime() < until {
			}
		}
	}
	n, _, err := o.n.GetInt64()
	if err != nil {
		return err
	}
	n++
	if err := o.n.PutInt64(n); err != nil {
		return err
	}
	o.buf = strconv.AppendInt(o.buf[:0], n, 10)
	ctx.Emit(r.Key, o.buf, r.Timestamp)
	return nil
}

func init() {
	wstream.Register("fill", func() wstream.Operator { return &fill{} })
}

// fill keeps, per key, a value of config "pad" bytes that changes with every
// record (its first 8 bytes count the key's records; the rest is taken from
// a random block at a place that depends on the key and the count, so it
// neither compresses away nor costs a loop per byte), and emits nothing: a
// job with a large keyed state of which each record changes one entry.
type fill struct {
	v     wstream.ValueState
	buf   []byte
	block []byte
	cfg   struct {
		Pad int `json:"pad"`
	}
}

const fillBlock = 1 << 20

func (o *fill) Open(ctx *wstream.Context) error {
	if err := ctx.UnmarshalConfig(&o.cfg); err != nil {
		return err
	}
	if o.cfg.Pad < 8 || o.cfg.Pad > fillBlock/2 {
		return fmt.Errorf("fill: pad %d must be in [8, %d]", o.cfg.Pad, fillBlock/2)
	}
	o.v = ctx.ValueState("v")
	o.buf = make([]byte, o.cfg.Pad)
	o.block = make([]byte, fillBlock)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < fillBlock; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for k := 0; k < 8; k++ {
			o.block[i+k] = byte(x >> (8 * k))
		}
	}
	return nil
}

func (o *fill) Process(ctx *wstream.Context, r wstream.Record) error {
	old, ok, err := o.v.Get()
	if err != nil {
		return err
	}
	var n uint64
	if ok && len(old) >= 8 {
		n = uint64(old[0]) | uint64(old[1])<<8 | uint64(old[2])<<16 | uint64(old[3])<<24 |
			uint64(old[4])<<32 | uint64(old[5])<<40 | uint64(old[6])<<48 | uint64(old[7])<<56
	}
	n++
	h := n * 0x9e3779b97f4a7c15
	for _, c := range r.Key {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	off := int(h % uint64(fillBlock-len(o.buf)))
	copy(o.buf, o.block[off:off+len(o.buf)])
	for i := 0; i < 8; i++ {
		o.buf[i] = byte(n >> (8 * i))
	}
	return o.v.Put(o.buf)
}
