// Command testops is a WebAssembly operator module of small operators that
// misbehave on purpose, for the runtime's tests: each acts on the records
// whose value equals config "on".
//
//   - trap: prints the record value to stderr and executes the wasm
//     unreachable instruction, outside the SDK's panic recovery;
//   - fail: returns an error from Process;
//   - panic: panics in Process, which the SDK recovers and reports as an
//     operator failure (GUEST_ERROR), the stack going to stderr;
//   - sleep: loops forever, to hit the host's per-call deadline;
//   - grow: allocates and touches config "mb" MiB (on the first record when
//     "on" is empty), to hit the host's memory limit;
//   - identity: emits every record unchanged;
//   - chaos: passes records through, trapping (config "trap") or exiting
//     (config "exit") with the given probability per record, for recovery
//     tests;
//   - runcount: a keyed running count that emits key, count per record;
//   - poison: runcount that traps (or fails) on the records chosen by a
//     salted hash of their value, for the dead-letter tests (poison.go).
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

func init() {
	wstream.Register("trap", func() wstream.Operator { return &trap{} })
	wstream.Register("fail", func() wstream.Operator { return &fail{} })
	wstream.Register("panic", func() wstream.Operator { return &panicker{} })
	wstream.Register("sleep", func() wstream.Operator { return &sleep{} })
	wstream.Register("grow", func() wstream.Operator { return &grow{} })
	wstream.Register("identity", func() wstream.Operator { return identity{} })
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

// trigger is the value config "on" selects.
type trigger struct {
	On string `json:"on"`
	on []byte
}

func (t *trigger) open(ctx *wstream.Context, cfg any) error {
	if err := ctx.UnmarshalConfig(cfg); err != nil {
		return err
	}
	t.on = []byte(t.On)
	return nil
}

func (t *trigger) matches(v []byte) bool { return bytes.Equal(v, t.on) }

type trap struct{ trigger }

func (o *trap) Open(ctx *wstream.Context) error { return o.open(ctx, &o.trigger) }

func (o *trap) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.matches(r.Value) {
		fmt.Fprintf(os.Stderr, "panic: testops trap on record value %q\n", r.Value)
		unreachable()
	}
	return nil
}

type fail struct{ trigger }

func (o *fail) Open(ctx *wstream.Context) error { return o.open(ctx, &o.trigger) }

func (o *fail) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.matches(r.Value) {
		return fmt.Errorf("testops fail on record value %q", r.Value)
	}
	return nil
}

type panicker struct{ trigger }

func (o *panicker) Open(ctx *wstream.Context) error { return o.open(ctx, &o.trigger) }

func (o *panicker) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.matches(r.Value) {
		panic(fmt.Sprintf("testops panic on record value %q", r.Value))
	}
	return nil
}

type sleep struct{ trigger }

// spins is where sleep's loop writes, so that the loop has an effect.
var spins uint64

func (o *sleep) Open(ctx *wstream.Context) error { return o.open(ctx, &o.trigger) }

func (o *sleep) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.matches(r.Value) {
		for {
			spins++
		}
	}
	return nil
}

type grow struct {
	trigger
	MB   int `json:"mb"`
	done bool
}

// hoard keeps grow's allocations reachable so they cannot be collected.
var hoard [][]byte

func (o *grow) Open(ctx *wstream.Context) error {
	if err := o.open(ctx, o); err != nil {
		return err
	}
	if o.MB <= 0 {
		return errors.New(`config "mb" must be a positive number of MiB`)
	}
	return nil
}

func (o *grow) Process(ctx *wstream.Context, r wstream.Record) error {
	if o.done || (len(o.on) > 0 && !o.matches(r.Value)) {
		return nil
	}
	o.done = true
	for range o.MB {
		b := make([]byte, 1<<20)
		// Touch every page so the memory is really committed.
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hoard = append(hoard, b)
	}
	return nil
}

type identity struct{}

func (identity) Open(*wstream.Context) error { return nil }

func (identity) Process(ctx *wstream.Context, r wstream.Record) error {
	ctx.Emit(r.Key, r.Value, r.Timestamp)
	return nil
}
