package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

func init() {
	wstream.Register("poison", func() wstream.Operator { return &poison{} })
}

// poison is a keyed running count (as runcount: it emits key, count per
// record) that fails on the records chosen by a hash of their value: those
// whose FNV-1a 64-bit hash of the value, salted by config "salt" (its bytes
// hashed first), is 0 modulo config "every". A test computes the same hash
// to know the bad records. It fails after writing the key's new count, so a
// count that survives a failure shows that state was not rolled back.
// Config "mode" says how: "trap" (the default: the wasm unreachable
// instruction), "fail" (an error from Process) or "exit" (the instance
// exits). With "timers" true, every record also registers an event-time
// timer at its timestamp, and the timer (not the record) fails for a bad
// record: its namespace holds the record's value. With "withTime" true the
// hash covers the record's timestamp too (its 8 bytes, little-endian, after
// the value): gen's values repeat (one word per key) but its timestamps do
// not, so the bad records are then spread over every key and position
// instead of being all the records of a few words.
type poison struct {
	n   wstream.ValueState
	buf []byte
	cfg struct {
		Every    uint64 `json:"every"`
		Salt     string `json:"salt"`
		Mode     string `json:"mode"`
		Timers   bool   `json:"timers"`
		WithTime bool   `json:"withTime"`
	}
}

func (o *poison) Open(ctx *wstream.Context) error {
	if err := ctx.UnmarshalConfig(&o.cfg); err != nil {
		return err
	}
	if o.cfg.Every == 0 {
		return fmt.Errorf("poison: config every must be ≥ 1")
	}
	switch o.cfg.Mode {
	case "", "trap", "fail", "exit":
	default:
		return fmt.Errorf("poison: mode %q must be trap, fail or exit", o.cfg.Mode)
	}
	o.n = ctx.ValueState("n")
	return nil
}

// poisoned reports whether v (at time ts) is a bad record's value.
func (o *poison) poisoned(v []byte, ts int64) bool {
	h := uint64(14695981039346656037)
	for _, c := range []byte(o.cfg.Salt) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for _, c := range v {
		h = (h ^ uint64(c)) * 1099511628211
	}
	if o.cfg.WithTime {
		for i := range 8 {
			h = (h ^ uint64(byte(ts>>(8*i)))) * 1099511628211
		}
	}
	return h%o.cfg.Every == 0
}

func (o *poison) count(ctx *wstream.Context, key []byte, ts int64) error {
	n, _, err := o.n.GetInt64()
	if err != nil {
		return err
	}
	n++
	if err := o.n.PutInt64(n); err != nil {
		return err
	}
	o.buf = strconv.AppendInt(o.buf[:0], n, 10)
	ctx.Emit(key, o.buf, ts)
	return nil
}

func (o *poison) die(v []byte) error {
	switch o.cfg.Mode {
	case "fail":
		return fmt.Errorf("testops poison: record %q", v)
	case "exit":
		fmt.Fprintf(os.Stderr, "testops poison: the instance exits at record %q\n", v)
		os.Exit(3)
	}
	fmt.Fprintf(os.Stderr, "panic: testops poison trap at record %q\n", v)
	unreachable()
	return nil
}

func (o *poison) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.cfg.Timers {
		return ctx.RegisterEventTimer(r.Timestamp, r.Value)
	}
	if err := o.count(ctx, r.Key, r.Timestamp); err != nil {
		return err
	}
	if o.poisoned(r.Value, r.Timestamp) {
		return o.die(r.Value)
	}
	return nil
}

// OnTimer counts the record whose value is the timer's namespace.
func (o *poison) OnTimer(ctx *wstream.Context, t wstream.Timer) error {
	if err := o.count(ctx, t.Key, t.Timestamp); err != nil {
		return err
	}
	if o.poisoned(t.Namespace, t.Timestamp) {
		return o.die(t.Namespace)
	}
	return nil
}
