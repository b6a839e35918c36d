//go:build !wasip1

package wstream

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// testOp is an Operator built from functions; nil functions do nothing.
type testOp struct {
	open    func(ctx *Context) error
	process func(ctx *Context, r Record) error
}

func (o *testOp) Open(ctx *Context) error {
	if o.open == nil {
		return nil
	}
	return o.open(ctx)
}

func (o *testOp) Process(ctx *Context, r Record) error {
	if o.process == nil {
		return nil
	}
	return o.process(ctx, r)
}

// fullOp implements every optional interface.
type fullOp struct {
	testOp
	timer    func(ctx *Context, t Timer) error
	close    func(ctx *Context) error
	hooks    []string
	hookErr  error
	closeRan bool
}

func (o *fullOp) OnTimer(ctx *Context, t Timer) error {
	if o.timer == nil {
		return nil
	}
	return o.timer(ctx, t)
}

func (o *fullOp) Close(ctx *Context) error {
	o.closeRan = true
	if o.close == nil {
		return nil
	}
	return o.close(ctx)
}

func (o *fullOp) hook(name string, ctx *Context, id int64) error {
	o.hooks = append(o.hooks, fmt.Sprintf("%s %d", name, id))
	if name == "pre" {
		ctx.Emit([]byte("flushed"), nil, id)
	}
	return o.hookErr
}

func (o *fullOp) PreBarrier(ctx *Context, id int64) error { return o.hook("pre", ctx, id) }
func (o *fullOp) CheckpointComplete(ctx *Context, id int64) error {
	return o.hook("complete", ctx, id)
}
func (o *fullOp) CheckpointAborted(ctx *Context, id int64) error { return o.hook("aborted", ctx, id) }

func register(name string, op Operator) { Register(name, func() Operator { return op }) }

func r(key, value string, ts int64) abi.Record {
	return abi.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts}
}

func batch(recs ...abi.Record) []byte { return abi.Encode(recs) }

// mustOpen opens name into slot op and fails the test on any error.
func mustOpen(t *testing.T, f *fakeHost, op int32, name, cfg string) {
	t.Helper()
	if st := mod.open(op, []byte(name), []byte(cfg)); st != abi.StatusOK {
		t.Fatalf("open %s: status %d (%s), failures %q", name, st, abi.StatusText(st), f.fails)
	}
}

func wantFailure(t *testing.T, f *fakeHost, st, wantSt int32, want string) {
	t.Helper()
	if st != wantSt {
		t.Fatalf("status %d (%s), want %d (%s); failures %q", st, abi.StatusText(st), wantSt, abi.StatusText(wantSt), f.fails)
	}
	if len(f.fails) != 1 || !strings.Contains(f.fails[0], want) {
		t.Fatalf("failure messages %q, want one containing %q", f.fails, want)
	}
	f.fails = nil
}

func TestStatusErrors(t *testing.T) {
	for st, want := range map[int32]error{
		abi.StatusNotFound:      ErrNotFound,
		abi.StatusBadPointer:    ErrBadPointer,
		abi.StatusBadHandle:     ErrBadHandle,
		abi.StatusBadOutput:     ErrBadOutput,
		abi.StatusBadArgument:   ErrBadArgument,
		abi.StatusKeyGroup:      ErrKeyGroup,
		abi.StatusNoKeyedState:  ErrNoKeyedState,
		abi.StatusStateError:    ErrStateError,
		abi.StatusLimit:         ErrLimit,
		abi.StatusUnknownOp:     ErrUnknownOp,
		abi.StatusGuestError:    ErrGuestError,
		abi.StatusNotInCallback: ErrNotInCallback,
	} {
		if err := statusErr(st); !errors.Is(err, want) {
			t.Errorf("statusErr(%d) = %v, want %v", st, err, want)
		}
	}
	if err := statusErr(-99); !errors.Is(err, ErrUnknownStatus) || !strings.Contains(err.Error(), "-99") {
		t.Errorf("statusErr(-99) = %v, want ErrUnknownStatus naming -99", err)
	}
	if err := callErr("put value state", "count", abi.StatusKeyGroup); err.Error() != `put value state "count": `+ErrKeyGroup.Error() {
		t.Errorf("callErr = %q", err)
	}
}

func TestRegister(t *testing.T) {
	install(t)
	register("a", &testOp{})
	for _, tc := range []struct {
		name    string
		factory func() Operator
		want    string
	}{
		{"", func() Operator { return nil }, "empty operator name"},
		{"b", nil, `Register("b"): nil factory`},
		{"a", func() Operator { return nil }, `operator "a" registered twice`},
		{strings.Repeat("x", 300), func() Operator { return nil }, "longer than 256 bytes"},
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
					t.Errorf("Register(%.10q): panic %v, want one containing %q", tc.name, p, tc.want)
				}
			}()
			Register(tc.name, tc.factory)
		}()
	}
	SetPlan(`{"name":"x"}`)
	if string(mod.plan) != `{"name":"x"}` {
		t.Errorf("plan = %q", mod.plan)
	}
}

func TestOpen(t *testing.T) {
	f := install(t)
	var seen *Context
	register("ok", &testOp{open: func(ctx *Context) error { seen = ctx; return nil }})
	register("err", &testOp{open: func(*Context) error { return errors.New("no way") }})
	register("panic", &testOp{open: func(*Context) error { panic("boom") }})
	Register("nil", func() Operator { return nil })

	cfg := []byte(`{"a":1}`)
	if st := mod.open(0, []byte("ok"), cfg); st != abi.StatusOK {
		t.Fatalf("open ok: %d %q", st, f.fails)
	}
	cfg[2] = 'X' // the host reuses its arena: the SDK must have copied the config
	if string(seen.Config()) != `{"a":1}` || seen.Operator() != "ok" {
		t.Errorf("config %q operator %q", seen.Config(), seen.Operator())
	}
	wantFailure(t, f, mod.open(0, []byte("ok"), nil), abi.StatusBadHandle, `slot 0 is already open (operator "ok")`)
	wantFailure(t, f, mod.open(-1, []byte("ok"), nil), abi.StatusBadHandle, "operator slot -1 is outside [0, 4096)")
	wantFailure(t, f, mod.open(maxSlots, []byte("ok"), nil), abi.StatusBadHandle, "operator slot 4096 is outside [0, 4096)")
	wantFailure(t, f, mod.open(1, []byte("nope"), nil), abi.StatusUnknownOp, `no operator "nope"; it has ["err" "nil" "ok" "panic"]`)
	wantFailure(t, f, mod.open(1, []byte("err"), nil), abi.StatusGuestError, `operator "err": open: no way`)
	wantFailure(t, f, mod.open(1, []byte("panic"), nil), abi.StatusGuestError, `operator "panic": open: panic: boom`)
	wantFailure(t, f, mod.open(1, []byte("nil"), nil), abi.StatusGuestError, "nil Operator")
	// A failed open leaves the slot free.
	mustOpen(t, f, 1, "ok", "")
	if mod.slot(1) == nil || mod.slot(5) != nil {
		t.Errorf("slots after open: %v", mod.slots)
	}
}

func TestUnmarshalConfig(t *testing.T) {
	f := install(t)
	type cfg struct{ N int }
	var got []cfg
	var errs []error
	register("op", &testOp{open: func(ctx *Context) error {
		c := cfg{N: 7}
		errs = append(errs, ctx.UnmarshalConfig(&c))
		got = append(got, c)
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	mustOpen(t, f, 1, "op", `{"N":3}`)
	mustOpen(t, f, 2, "op", `{"N":"x"}`)
	if got[0].N != 7 || got[1].N != 3 || errs[0] != nil || errs[1] != nil {
		t.Errorf("configs %v errors %v: want default 7 then 3", got, errs)
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), `operator "op": config "{\"N\":\"x\"}"`) {
		t.Errorf("bad config error %v", errs[2])
	}
}

func TestProcessAndEmit(t *testing.T) {
	f := install(t)
	f.outputs = []string{"main", "side"}
	var got []string
	register("op", &testOp{
		open: func(ctx *Context) error {
			_, err := ctx.Output("side")
			return err
		},
		process: func(ctx *Context, r Record) error {
			got = append(got, fmt.Sprintf("%d:%s=%s@%d key=%s", r.Input, r.Key, r.Value, r.Timestamp, ctx.Key()))
			side, err := ctx.Output("side")
			if err != nil {
				return err
			}
			ctx.Emit(r.Key, r.Value, r.Timestamp+1)
			ctx.EmitTo(side, r.Value, r.Key, r.Timestamp+2)
			return nil
		},
	})
	mustOpen(t, f, 0, "op", "")
	in := []abi.Record{r("a", "1", 10), r("", "", -5), {Port: 2, Key: []byte("c"), Value: []byte("3"), Timestamp: 30}}
	if st := mod.process(0, batch(in...)); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	want := []string{"0:a=1@10 key=a", "0:=@-5 key=", "2:c=3@30 key=c"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Process saw %q\nwant %q", got, want)
	}
	if len(f.batches) != 1 || len(f.emits) != 0 {
		t.Fatalf("%d emit_batch and %d emit calls, want 1 and 0", len(f.batches), len(f.emits))
	}
	var out []string
	for _, o := range f.batches[0] {
		out = append(out, fmt.Sprintf("%d:%s=%s@%d", o.Port, o.Key, o.Value, o.Timestamp))
	}
	wantOut := []string{"0:a=1@11", "1:1=a@12", "0:=@-4", "1:=@-3", "0:c=3@31", "1:3=c@32"}
	if fmt.Sprint(out) != fmt.Sprint(wantOut) {
		t.Errorf("emitted %q\nwant %q", out, wantOut)
	}
	if f.outputCalls != 1 {
		t.Errorf("output_index called %d times, want 1 (cached)", f.outputCalls)
	}
	// An empty batch calls nothing and emits nothing.
	if st := mod.process(0, batch()); st != abi.StatusOK || len(f.batches) != 1 {
		t.Errorf("empty batch: status %d, %d emit_batch calls", st, len(f.batches))
	}
	if mod.slot(0).ctx.Key() != nil {
		t.Errorf("current key %q survives the callback", mod.slot(0).ctx.Key())
	}
	if _, err := mod.slot(0).ctx.Output("nope"); !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), `output "nope"`) {
		t.Errorf("Output(nope) = %v", err)
	}
}

func TestFlushThreshold(t *testing.T) {
	f := install(t)
	big := bytes.Repeat([]byte("v"), 40<<10)
	register("op", &testOp{process: func(ctx *Context, r Record) error {
		for i := range 3 {
			ctx.Emit([]byte{byte('a' + i)}, big, int64(i))
		}
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	if st := mod.process(0, batch(r("k", "v", 1))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	// Two records pass 64 KiB: one flush mid-call, one at the end.
	if len(f.batches) != 2 || len(f.batches[0]) != 2 || len(f.batches[1]) != 1 {
		t.Fatalf("emit_batch calls %d, want 2 of 2 and 1 records", len(f.batches))
	}
	if k := f.out(); string(k[0].Key)+string(k[1].Key)+string(k[2].Key) != "abc" || !bytes.Equal(k[2].Value, big) {
		t.Errorf("records out of order or corrupted")
	}
}

func TestEmitErrors(t *testing.T) {
	f := install(t)
	register("neg", &testOp{process: func(ctx *Context, r Record) error {
		ctx.EmitTo(-1, nil, nil, 0)
		ctx.Emit(nil, nil, 0) // dropped: the callback already failed
		return nil
	}})
	register("bad", &testOp{process: func(ctx *Context, r Record) error {
		ctx.EmitTo(3, nil, nil, 0)
		return nil
	}})
	mustOpen(t, f, 0, "neg", "")
	mustOpen(t, f, 1, "bad", "")
	wantFailure(t, f, mod.process(0, batch(r("k", "v", 1))), abi.StatusGuestError, `operator "neg": process: EmitTo: negative output index -1`)
	wantFailure(t, f, mod.process(1, batch(r("k", "v", 1))), abi.StatusGuestError, `operator "bad": process: emitting 1 records: wstream: bad output`)
	if len(f.batches) != 0 {
		t.Errorf("failed calls emitted %d batches", len(f.batches))
	}
	// The next callback starts clean.
	f.outputs = []string{"main", "a", "b", "c"}
	if st := mod.process(1, batch(r("k", "v", 1))); st != abi.StatusOK || len(f.batches) != 1 {
		t.Errorf("after a failure: status %d, %d batches", st, len(f.batches))
	}
}

// TestEmitReserve checks records whose value the operator writes in place:
// interleaved with Emit, across the early flush past 64 KiB (the slice
// returned after the buffer passed it lies in the emptied buffer, not in
// the batch already handed to the host), and with zero-length values.
func TestEmitReserve(t *testing.T) {
	f := install(t)
	f.outputs = []string{"main", "side"}
	big := bytes.Repeat([]byte("v"), 40<<10)
	register("op", &testOp{process: func(ctx *Context, r Record) error {
		v := ctx.EmitReserve(1, r.Key, len(r.Value), r.Timestamp)
		if len(v) != len(r.Value) || cap(v) != len(r.Value) {
			return fmt.Errorf("EmitReserve returned %d bytes (cap %d), want %d", len(v), cap(v), len(r.Value))
		}
		for i, c := range r.Value {
			v[i] = c + 1
		}
		ctx.Emit(r.Key, r.Value, r.Timestamp)
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	in := []abi.Record{r("a", "123", 1), r("b", string(big), 2), r("c", "", 3), r("", "xyz", 4)}
	if st := mod.process(0, batch(in...)); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	// b's copy passes 64 KiB: the next emit, c's reserve, flushes first,
	// and c's value goes into the emptied buffer.
	if len(f.batches) != 2 || len(f.batches[0]) != 4 {
		t.Fatalf("emit_batch calls %d (first of %d records), want 2 (first of 4)", len(f.batches), len(f.batches[0]))
	}
	var got []abi.Record
	for _, b := range f.batches {
		got = append(got, b...)
	}
	if len(got) != 2*len(in) {
		t.Fatalf("emitted %d records, want %d", len(got), 2*len(in))
	}
	for i, rec := range in {
		want := bytes.Clone(rec.Value)
		for j := range want {
			want[j]++
		}
		res, cp := got[2*i], got[2*i+1]
		if res.Port != 1 || string(res.Key) != string(rec.Key) || res.Timestamp != rec.Timestamp || !bytes.Equal(res.Value, want) {
			t.Errorf("record %d reserved: port %d key %q ts %d value %.20q, want 1 %q %d %.20q", i, res.Port, res.Key, res.Timestamp, res.Value, rec.Key, rec.Timestamp, want)
		}
		if cp.Port != 0 || string(cp.Key) != string(rec.Key) || !bytes.Equal(cp.Value, rec.Value) {
			t.Errorf("record %d copied: port %d key %q value %.20q", i, cp.Port, cp.Key, cp.Value)
		}
	}
}

// TestEmitReserveErrors checks that a bad argument or a failed output fails
// the callback, while the slice returned can still be written.
func TestEmitReserveErrors(t *testing.T) {
	f := install(t)
	for name, args := range map[string][2]int{"negout": {-1, 4}, "neglen": {0, -3}, "badout": {5, 4}} {
		register(name, &testOp{process: func(ctx *Context, r Record) error {
			for range 2 {
				v := ctx.EmitReserve(args[0], r.Key, args[1], 0)
				if len(v) != max(args[1], 0) {
					return fmt.Errorf("EmitReserve returned %d bytes", len(v))
				}
				copy(v, "data")
			}
			return nil
		}})
	}
	for i, c := range []struct{ name, want string }{
		{"negout", `operator "negout": process: EmitReserve: negative output index -1 or value length 4`},
		{"neglen", `operator "neglen": process: EmitReserve: negative output index 0 or value length -3`},
		{"badout", `operator "badout": process: emitting 2 records: wstream: bad output`},
	} {
		mustOpen(t, f, int32(i), c.name, "")
		wantFailure(t, f, mod.process(int32(i), batch(r("k", "v", 1))), abi.StatusGuestError, c.want)
	}
	if len(f.batches) != 0 {
		t.Errorf("failed calls emitted %d batches", len(f.batches))
	}
}

func TestEmitUnbuffered(t *testing.T) {
	f := install(t)
	var errs []error
	register("op", &testOp{process: func(ctx *Context, r Record) error {
		ctx.Emit([]byte("buffered"), nil, 1)
		errs = append(errs, ctx.EmitUnbuffered(0, []byte("direct"), r.Value, 2))
		errs = append(errs, ctx.EmitUnbuffered(5, nil, nil, 3))
		errs = append(errs, ctx.EmitUnbuffered(-1, nil, nil, 3))
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	if st := mod.process(0, batch(r("k", "v", 1))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if len(f.batches) != 1 || string(f.batches[0][0].Key) != "buffered" || len(f.emits) != 1 || string(f.emits[0].Key) != "direct" {
		t.Fatalf("batches %v emits %v: want the buffered record flushed before the direct one", f.batches, f.emits)
	}
	if errs[0] != nil || !errors.Is(errs[1], ErrBadOutput) || errs[2] == nil {
		t.Errorf("errors %v", errs)
	}
}

func TestProcessErrors(t *testing.T) {
	f := install(t)
	var stderr bytes.Buffer
	panicOut = &stderr
	register("op", &testOp{process: func(ctx *Context, r Record) error {
		ctx.Emit(r.Key, r.Value, r.Timestamp)
		switch string(r.Value) {
		case "err":
			return errors.New("bad value")
		case "panic":
			panic(fmt.Errorf("wrapped %d", 42))
		}
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	wantFailure(t, f, mod.process(0, batch(r("a", "ok", 1), r("b", "err", 2), r("c", "ok", 3))), abi.StatusGuestError,
		`operator "op": process: record 1 of 3 (key "b"): bad value`)
	wantFailure(t, f, mod.process(0, batch(r("a", "panic", 1))), abi.StatusGuestError, `operator "op": process: panic: wrapped 42`)
	if s := stderr.String(); !strings.HasPrefix(s, `wstream: operator "op" panicked in process: wrapped 42`) || !strings.Contains(s, "goroutine ") {
		t.Errorf("stderr after a panic: %q, want the panic and its stack", s)
	}
	if len(f.batches) != 0 {
		t.Errorf("a failed call emitted %d batches, want its output dropped", len(f.batches))
	}
	wantFailure(t, f, mod.process(3, batch()), abi.StatusBadHandle, "wstream_process: operator slot 3 is not open")
	wantFailure(t, f, mod.onTimer(3, batch()), abi.StatusBadHandle, "wstream_on_timer: operator slot 3 is not open")
	wantFailure(t, f, mod.close(3), abi.StatusBadHandle, "wstream_close: operator slot 3 is not open")
	wantFailure(t, f, mod.checkpoint(hookPreBarrier, 3, 1), abi.StatusBadHandle, "wstream_pre_barrier: operator slot 3 is not open")
}

func TestMalformedBatches(t *testing.T) {
	f := install(t)
	register("op", &fullOp{})
	mustOpen(t, f, 0, "op", "")
	good := batch(r("k", "v", 1))
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short header", []byte{1, 0}, "2 bytes is shorter than the 4-byte header"},
		{"truncated record header", append(bytes.Clone(good[:10]), 0), "record 0 at offset 4: header truncated"},
		{"overrun", good[:len(good)-1], "record 0 at offset 4: key and value overrun"},
		{"trailing", append(bytes.Clone(good), 9), "1 trailing bytes after 1 records"},
		{"count too high", append([]byte{2, 0, 0, 0}, good[4:]...), "record 1 at offset 26: header truncated"},
	} {
		wantFailure(t, f, mod.process(0, tc.b), abi.StatusBadArgument, `operator "op": input batch from the host: abi: malformed batch: `+tc.want)
		wantFailure(t, f, mod.onTimer(0, tc.b), abi.StatusBadArgument, `operator "op": timer batch from the host: abi: malformed batch: `+tc.want)
	}
}

func TestValueState(t *testing.T) {
	f := install(t)
	var vs ValueState
	type step struct {
		v  string
		ok bool
	}
	var got []step
	var errs []error
	register("op", &testOp{
		open: func(ctx *Context) error {
			vs = ctx.ValueState("v")
			if again := ctx.ValueState("v"); again.h != vs.h {
				return errors.New("a second registration returned another handle")
			}
			return nil
		},
		process: func(ctx *Context, r Record) error {
			get := func(s ValueState) {
				v, ok, err := s.Get()
				got = append(got, step{string(v), ok})
				errs = append(errs, err)
			}
			switch string(r.Value) {
			case "put":
				get(vs)
				errs = append(errs, vs.Put([]byte("x-"+string(r.Key))))
				errs = append(errs, vs.Namespace([]byte("ns")).Put([]byte("in ns")))
				get(vs)
				get(vs.Namespace([]byte("ns")))
			case "delete":
				errs = append(errs, vs.Delete())
				get(vs)
				get(vs.Namespace([]byte("ns")))
			case "int":
				n, ok, err := vs.GetInt64()
				got = append(got, step{fmt.Sprint(n), ok})
				errs = append(errs, err, vs.PutInt64(n-3))
			}
			return nil
		},
	})
	mustOpen(t, f, 0, "op", "")
	st := mod.process(0, batch(r("a", "put", 0), r("b", "put", 0), r("a", "delete", 0), r("c", "int", 0), r("c", "int", 0)))
	if st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	want := []step{
		{"", false}, {"x-a", true}, {"in ns", true}, // a
		{"", false}, {"x-b", true}, {"in ns", true}, // b: keys are separate
		{"", false}, {"in ns", true}, // a deleted, its namespace kept
		{"0", false}, {"-3", true}, // c as int64
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reads %v\nwant  %v", got, want)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("state call %d: %v", i, err)
		}
	}
	if v := f.state[fakeKey{vs.h, "c", ""}]; len(v) != 8 || v[0] != 0xfa || v[7] != 0xff {
		t.Errorf("PutInt64(-6) stored % x, want 8 bytes little-endian", v)
	}
}

func TestValueStateErrors(t *testing.T) {
	f := install(t)
	var vs ValueState
	var errs []error
	register("op", &testOp{
		open: func(ctx *Context) error { vs = ctx.ValueState("v"); ctx.MapState("m"); return nil },
		process: func(ctx *Context, r Record) error {
			switch string(r.Value) {
			case "unregistered":
				ctx.ValueState("other")
			case "kind":
				ctx.ValueState("m")
			case "odd":
				_, _, err := vs.GetInt64()
				errs = append(errs, err)
			case "host":
				errs = append(errs, vs.Put(nil))
			case "zero":
				var zero ValueState
				var zm MapState
				_, _, err1 := zero.Get()
				_, _, err2 := zm.Get(nil)
				errs = append(errs, err1, zero.Put(nil), zero.PutInt64(1), zero.Delete(), err2, zm.Put(nil, nil), zm.Delete(nil), zm.Range(nil, nil))
			}
			return nil
		},
	})
	register("badreg", &testOp{open: func(ctx *Context) error { ctx.MapState("m"); return nil }})
	mustOpen(t, f, 0, "op", "")
	wantFailure(t, f, mod.process(0, batch(r("k", "unregistered", 0))), abi.StatusGuestError,
		`panic: wstream: value state "other" was not registered: call ctx.ValueState("other") in Open`)
	wantFailure(t, f, mod.process(0, batch(r("k", "kind", 0))), abi.StatusGuestError, `panic: wstream: state "m" is a map state, not a value state`)

	f.state[fakeKey{vs.h, "k", ""}] = []byte("abc")
	if st := mod.process(0, batch(r("k", "odd", 0), r("k", "zero", 0))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if !errors.Is(errs[0], ErrBadArgument) || !strings.Contains(errs[0].Error(), `value state "v" holds 3 bytes, not an 8-byte int64`) {
		t.Errorf("GetInt64 of 3 bytes: %v", errs[0])
	}
	// A put the host refuses fails the callback when it is written back.
	f.force[abi.ImportStatePut] = abi.StatusKeyGroup
	wantFailure(t, f, mod.process(0, batch(r("k", "host", 0))), abi.StatusGuestError,
		`operator "op": process: write back state "v": wstream: key belongs to a key group this subtask does not own`)
	if errs[len(errs)-1] != nil {
		t.Errorf("Put of a write the host refuses later: %v", errs[len(errs)-1])
	}
	errs = errs[:len(errs)-1]
	delete(f.force, abi.ImportStatePut)
	for i, err := range errs[1:] {
		if !errors.Is(err, ErrBadHandle) || !strings.Contains(err.Error(), "before it was obtained") {
			t.Errorf("zero state call %d: %v", i, err)
		}
	}
	f.force[abi.ImportStateGet] = abi.StatusStateError
	if _, _, err := vs.Get(); !errors.Is(err, ErrStateError) || !strings.Contains(err.Error(), `get state "v"`) {
		t.Errorf("Get refused by the host: %v", err)
	}
	f.force[abi.ImportStateRegister] = abi.StatusNotInCallback
	wantFailure(t, f, mod.open(1, []byte("badreg"), nil), abi.StatusGuestError, `registering map state "m": wstream: host call outside a callback`)
}

func TestStateGetGrowsBuffer(t *testing.T) {
	f := install(t)
	var vs ValueState
	var lens []int
	register("op", &testOp{
		open: func(ctx *Context) error { vs = ctx.ValueState("v"); return nil },
		process: func(ctx *Context, r Record) error {
			v, _, err := vs.Get()
			lens = append(lens, len(v))
			return err
		},
	})
	mustOpen(t, f, 0, "op", "")
	big := bytes.Repeat([]byte{7}, 20000)
	f.state[fakeKey{vs.h, "big", ""}] = big
	f.state[fakeKey{vs.h, "small", ""}] = []byte{1}
	if st := mod.process(0, batch(r("small", "", 0), r("big", "", 0), r("big", "", 0))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	// state_get_many answers small; big does not fit the room its results
	// leave for values. state_get reads it, in 2 calls (too small, then
	// grown), and the cache answers it again.
	if fmt.Sprint(lens) != "[1 20000 20000]" || f.getManyCalls != 1 || f.getCalls != 2 {
		t.Errorf("lengths %v after %d state_get_many and %d state_get calls, want [1 20000 20000] after 1 and 2", lens, f.getManyCalls, f.getCalls)
	}
}

func TestMapState(t *testing.T) {
	f := install(t)
	var ms MapState
	var visits []string
	var errs []error
	value := bytes.Repeat([]byte("v"), 1000) // 4 entries per 4 KiB page
	register("op", &testOp{
		open: func(ctx *Context) error { ms = ctx.MapState("m"); return nil },
		process: func(ctx *Context, r Record) error {
			switch string(r.Value) {
			case "fill":
				for i := range 10 {
					errs = append(errs, ms.Put(fmt.Appendf(nil, "k%02d", i), value))
				}
				errs = append(errs, ms.Put([]byte("other"), []byte("x")), ms.Delete([]byte("k09")))
			case "all":
				errs = append(errs, ms.Range(nil, func(k, v []byte) bool {
					visits = append(visits, fmt.Sprintf("%s/%d", k, len(v)))
					return true
				}))
			case "prefix-stop":
				errs = append(errs, ms.Range([]byte("k0"), func(k, v []byte) bool {
					visits = append(visits, string(k))
					return len(visits) < 2
				}))
			case "nested-delete":
				errs = append(errs, ms.Range([]byte("k0"), func(k, v []byte) bool {
					inner := 0
					errs = append(errs, ms.Range([]byte("k"), func(k, v []byte) bool { inner++; return true }))
					visits = append(visits, fmt.Sprintf("%s:%d", k, inner))
					errs = append(errs, ms.Delete(k))
					return true
				}))
			case "get":
				v, ok, err := ms.Get([]byte("other"))
				visits = append(visits, fmt.Sprintf("%s %v", v, ok))
				_, ok, _ = ms.Get([]byte("k00"))
				visits = append(visits, fmt.Sprint(ok))
				errs = append(errs, err)
			}
			return nil
		},
	})
	mustOpen(t, f, 0, "op", "")
	run := func(v string) []string {
		t.Helper()
		visits, f.iterCalls = nil, 0
		if st := mod.process(0, batch(r("key", v, 0))); st != abi.StatusOK {
			t.Fatalf("process %s: %d %q", v, st, f.fails)
		}
		return visits
	}
	run("fill")
	if got := run("all"); fmt.Sprint(got) != "[k00/1000 k01/1000 k02/1000 k03/1000 k04/1000 k05/1000 k06/1000 k07/1000 k08/1000 other/1]" || f.iterCalls != 4 {
		t.Errorf("Range all visited %v in %d state_iter calls, want 10 entries in 4 (3 pages and the end)", got, f.iterCalls)
	}
	if got := run("prefix-stop"); fmt.Sprint(got) != "[k00 k01]" {
		t.Errorf("Range k0 stopping after 2 visited %v", got)
	}
	if got := run("nested-delete"); fmt.Sprint(got) != "[k00:9 k01:8 k02:7 k03:6 k04:5 k05:4 k06:3 k07:2 k08:1]" {
		t.Errorf("nested Range with deletes visited %v", got)
	}
	if got := run("get"); fmt.Sprint(got) != "[x true false]" {
		t.Errorf("Get: %v", got)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("map state call %d: %v", i, err)
		}
	}
	if len(mod.slot(0).ctx.iters) != 2 || mod.slot(0).ctx.depth != 0 {
		t.Errorf("%d page buffers at depth %d, want 2 kept for reuse at depth 0", len(mod.slot(0).ctx.iters), mod.slot(0).ctx.depth)
	}
}

func TestMapStateLargeEntryAndErrors(t *testing.T) {
	f := install(t)
	var ms MapState
	var got []int
	var rangeErr error
	register("op", &testOp{
		open: func(ctx *Context) error { ms = ctx.MapState("m"); return nil },
		process: func(ctx *Context, r Record) error {
			got = got[:0]
			rangeErr = ms.Range(nil, func(k, v []byte) bool { got = append(got, len(v)); return true })
			return nil
		},
	})
	mustOpen(t, f, 0, "op", "")
	f.state[fakeKey{ms.h, "key", "a"}] = make([]byte, 10000) // needs a 16 KiB page: LIMIT twice
	f.state[fakeKey{ms.h, "key", "b"}] = []byte{1}
	mod.process(0, batch(r("key", "", 0)))
	if rangeErr != nil || fmt.Sprint(got) != "[10000 1]" || f.iterCalls != 4 {
		t.Errorf("Range over a 10000-byte entry: %v %v after %d calls, want 2 LIMIT answers, a page and the end", got, rangeErr, f.iterCalls)
	}
	f.force[abi.ImportStateIter] = abi.StatusNoKeyedState
	mod.process(0, batch(r("key", "", 0)))
	if !errors.Is(rangeErr, ErrNoKeyedState) || !strings.Contains(rangeErr.Error(), `iterate map state "m"`) {
		t.Errorf("Range refused by the host: %v", rangeErr)
	}
}

func TestIterScratchMalformedPage(t *testing.T) {
	install(t)
	for _, tc := range []struct {
		name string
		page []byte
		n    int32
		want string
	}{
		{"short header", []byte{1, 0, 0}, 3, "truncated entry header"},
		{"overrun", []byte{5, 0, 0, 0, 0, 0, 0, 0, 'a'}, 9, "entry of 5+0 bytes overruns the page"},
		{"too long", nil, 1 << 20, "host wrote 1048576 bytes into a 4096-byte buffer"},
	} {
		host = pageHost{fakeHost: &fakeHost{}, page: tc.page, n: tc.n}
		sc := &iterScratch{page: make([]byte, 0, initialPage)}
		err := sc.run(0, "m", nil, nil, func(k, v []byte) bool { return true })
		if !errors.Is(err, errMalformedState) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// pageHost answers state_iter with a fixed page.
type pageHost struct {
	*fakeHost
	page []byte
	n    int32
}

func (p pageHost) stateIter(h int32, key, prefix, after []byte, hasAfter bool, out []byte) int32 {
	copy(out, p.page)
	return p.n
}

func TestTimers(t *testing.T) {
	f := install(t)
	var fired []string
	var errs []error
	vsName := "count"
	op := &fullOp{testOp: testOp{
		open: func(ctx *Context) error { ctx.ValueState(vsName); return nil },
		process: func(ctx *Context, r Record) error {
			errs = append(errs,
				ctx.RegisterEventTimer(r.Timestamp, r.Value),
				ctx.RegisterProcessingTimer(r.Timestamp+1, nil),
				ctx.RegisterEventTimer(99, nil),
				ctx.DeleteEventTimer(99, nil),
				ctx.DeleteProcessingTimer(12345, nil),
				ctx.ValueState(vsName).PutInt64(r.Timestamp))
			return nil
		},
	}}
	op.timer = func(ctx *Context, tm Timer) error {
		n, _, err := ctx.ValueState(vsName).GetInt64()
		fired = append(fired, fmt.Sprintf("%s %d %s/%s key=%s state=%d", tm.Domain, tm.Timestamp, tm.Key, tm.Namespace, ctx.Key(), n))
		ctx.Emit(tm.Key, tm.Namespace, tm.Timestamp)
		return err
	}
	register("op", op)
	mustOpen(t, f, 0, "op", "")
	if st := mod.process(0, batch(r("a", "w1", 10), r("b", "", 20))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	want := map[fakeTimer]bool{{0, "a", "w1", 10}: true, {1, "a", "", 11}: true, {0, "b", "", 20}: true, {1, "b", "", 21}: true}
	if fmt.Sprint(f.timers) != fmt.Sprint(want) {
		t.Errorf("timers %v\nwant   %v", f.timers, want)
	}
	timers := batch(abi.Record{Port: 0, Timestamp: 10, Key: []byte("a"), Value: []byte("w1")}, abi.Record{Port: 1, Timestamp: 21, Key: []byte("b")})
	if st := mod.onTimer(0, timers); st != abi.StatusOK {
		t.Fatalf("on_timer: %d %q", st, f.fails)
	}
	if fmt.Sprint(fired) != "[event time 10 a/w1 key=a state=10 processing time 21 b/ key=b state=20]" {
		t.Errorf("fired %q", fired)
	}
	if len(f.batches) != 1 || len(f.batches[0]) != 2 {
		t.Errorf("on_timer emitted %d batches, want 1 of 2 records", len(f.batches))
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("timer call %d: %v", i, err)
		}
	}
	op.timer = func(*Context, Timer) error { return errors.New("late") }
	wantFailure(t, f, mod.onTimer(0, timers), abi.StatusGuestError, `operator "op": on_timer: event time timer at 10 (key "a"): late`)
	f.force[abi.ImportTimerRegister] = abi.StatusNoKeyedState
	if err := mod.slot(0).ctx.RegisterEventTimer(5, nil); !errors.Is(err, ErrNoKeyedState) || !strings.Contains(err.Error(), "register event time timer at 5") {
		t.Errorf("RegisterEventTimer refused by the host: %v", err)
	}
}

func TestTimersWithoutHandler(t *testing.T) {
	f := install(t)
	register("op", &testOp{})
	mustOpen(t, f, 0, "op", "")
	if st := mod.onTimer(0, batch()); st != abi.StatusOK {
		t.Errorf("an empty timer batch: status %d", st)
	}
	wantFailure(t, f, mod.onTimer(0, batch(r("k", "", 1))), abi.StatusGuestError, "1 timers fired but *wstream.testOp does not implement wstream.TimerHandler")
}

func TestTimeAndLog(t *testing.T) {
	f := install(t)
	f.wm, f.now = 1234, 99
	var wms []int64
	register("op", &testOp{process: func(ctx *Context, r Record) error {
		wms = append(wms, ctx.Watermark(), ctx.Watermark())
		if ctx.ProcessingTime() != 99 {
			return errors.New("processing time")
		}
		ctx.Log(LevelWarn, "hello")
		ctx.Logf(LevelDebug, "n=%d", 5)
		return nil
	}})
	mustOpen(t, f, 0, "op", "")
	mod.process(0, batch(r("a", "", 0), r("b", "", 0)))
	f.wm = 2000
	if st := mod.process(0, batch(r("c", "", 0))); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if fmt.Sprint(wms) != "[1234 1234 1234 1234 2000 2000]" || f.wmCalls != 2 {
		t.Errorf("watermarks %v from %d host calls, want one call per callback", wms, f.wmCalls)
	}
	if fmt.Sprint(f.logs[:2]) != "[2 hello 0 n=5]" {
		t.Errorf("logs %q", f.logs)
	}
}

func TestCloseAndCheckpoints(t *testing.T) {
	f := install(t)
	op := &fullOp{}
	op.close = func(ctx *Context) error { ctx.Emit([]byte("last"), nil, 0); return nil }
	register("op", op)
	register("plain", &testOp{})
	mustOpen(t, f, 0, "op", "")
	mustOpen(t, f, 1, "plain", "")
	for hook := range hookNames {
		if st := mod.checkpoint(hook, 0, 7); st != abi.StatusOK {
			t.Fatalf("%s: %d %q", hookNames[hook], st, f.fails)
		}
		if st := mod.checkpoint(hook, 1, 7); st != abi.StatusOK {
			t.Fatalf("%s on an operator without hooks: %d %q", hookNames[hook], st, f.fails)
		}
	}
	if fmt.Sprint(op.hooks) != "[pre 7 complete 7 aborted 7]" || len(f.batches) != 1 || string(f.batches[0][0].Key) != "flushed" {
		t.Errorf("hooks %v, batches %v", op.hooks, f.batches)
	}
	op.hookErr = errors.New("sink down")
	wantFailure(t, f, mod.checkpoint(hookComplete, 0, 8), abi.StatusGuestError, `operator "op": checkpoint_complete: checkpoint 8: sink down`)

	if st := mod.close(0); st != abi.StatusOK || !op.closeRan || len(f.batches) != 2 || string(f.batches[1][0].Key) != "last" {
		t.Fatalf("close: status %d, ran %v, batches %v", st, op.closeRan, f.batches)
	}
	if st := mod.close(1); st != abi.StatusOK {
		t.Fatalf("close of an operator without Close: %d", st)
	}
	wantFailure(t, f, mod.process(0, batch()), abi.StatusBadHandle, "slot 0 is not open")
	// The slot can be opened again once closed.
	mustOpen(t, f, 0, "plain", "")
	op.close = func(*Context) error { panic("closing") }
	mustOpen(t, f, 2, "op", "")
	wantFailure(t, f, mod.close(2), abi.StatusGuestError, `operator "op": close: panic: closing`)
}

func TestArena(t *testing.T) {
	install(t)
	if mod.alloc(-1) != nil {
		t.Errorf("alloc(-1) returned an arena")
	}
	a := mod.alloc(0)
	if len(a) == 0 {
		t.Fatalf("alloc(0) returned an empty arena")
	}
	if b := mod.alloc(100); &b[0] != &a[0] {
		t.Errorf("alloc(100) replaced a %d-byte arena", len(a))
	}
	c := mod.alloc(int32(len(a) + 1))
	if len(c) < len(a)+1 || &c[0] == &a[0] {
		t.Errorf("alloc past the arena did not grow it")
	}
	if d := mod.alloc(int32(len(c) + 1)); len(d) < 2*len(c) {
		t.Errorf("arena grew from %d to %d, want geometric growth", len(c), len(d))
	}
	n := len(mod.arena)
	const base = 0x10000
	for _, tc := range []struct {
		ptr  uint32
		n    int32
		ok   bool
		want int
	}{
		{base, 10, true, 10},
		{base + 5, 10, true, 10},
		{0, 0, true, 0},
		{base + uint32(n) - 4, 4, true, 4},
		{base + uint32(n) - 4, 5, false, 0},
		{base - 1, 2, false, 0},
		{base, -1, false, 0},
		{0xffffffff, 2, false, 0},
	} {
		b, ok := mod.region(base, tc.ptr, tc.n)
		if ok != tc.ok || len(b) != tc.want {
			t.Errorf("region(%#x, %d) = %d bytes, %v; want %d, %v", tc.ptr, tc.n, len(b), ok, tc.want, tc.ok)
		}
	}
	mod.arena[5] = 42
	if b, _ := mod.region(base, base+5, 1); b[0] != 42 {
		t.Errorf("region does not alias the arena")
	}
}

// TestNoAllocations pins the hot path: decoding, emitting (Emit and
// EmitReserve) and reading state allocate nothing per record once buffers
// have grown.
func TestNoAllocations(t *testing.T) {
	f := install(t)
	f.discard = true
	f.fixedGet = []byte("01234567")
	f.wm = abi.MaxWatermark
	var vs ValueState
	register("op", &testOp{
		open: func(ctx *Context) error { vs = ctx.ValueState("v"); return nil },
		process: func(ctx *Context, r Record) error {
			n, _, err := vs.GetInt64()
			if err != nil {
				return err
			}
			if ctx.Watermark() > n {
				ctx.Emit(r.Key, r.Value, r.Timestamp)
				copy(ctx.EmitReserve(0, r.Key, len(r.Value), r.Timestamp), r.Value)
			}
			return nil
		},
	})
	mustOpen(t, f, 0, "op", "")
	var b abi.Builder
	for i := range 1000 {
		b.Add(0, int64(i), fmt.Appendf(nil, "key-%d", i), []byte("some value of a record"))
	}
	in := b.Bytes()
	allocs := testing.AllocsPerRun(20, func() {
		if st := mod.process(0, in); st != abi.StatusOK {
			t.Fatalf("process: %d %q", st, f.fails)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 1000-record batch, want 0", allocs)
	}
	if f.discarded != 2*21*1000 {
		t.Errorf("emitted %d records, want %d", f.discarded, 2*21*1000)
	}
}

func TestNoHost(t *testing.T) {
	if st := (noHost{}).stateGet(0, nil, nil, nil); st != abi.StatusNotInCallback {
		t.Errorf("noHost state_get = %d", st)
	}
	c := newContext("op", nil)
	if err := c.RegisterEventTimer(1, nil); !errors.Is(err, ErrNotInCallback) {
		t.Errorf("a timer without a host: %v", err)
	}
}

// growingHost reports a value one byte larger than any buffer it is given.
type growingHost struct{ *fakeHost }

func (g growingHost) stateGet(h int32, key, ns, out []byte) int32 { return int32(len(out) + 1) }

func TestStateGetInconsistentHost(t *testing.T) {
	f := install(t)
	var vs ValueState
	var ms MapState
	register("op", &testOp{open: func(ctx *Context) error { vs, ms = ctx.ValueState("v"), ctx.MapState("m"); return nil }})
	mustOpen(t, f, 0, "op", "")
	if vs.Name() != "v" || ms.Name() != "m" {
		t.Errorf("names %q %q", vs.Name(), ms.Name())
	}
	host = growingHost{f}
	if _, _, err := vs.Get(); !errors.Is(err, ErrStateError) || !strings.Contains(err.Error(), `get state "v": host reported 513 bytes after 512`) {
		t.Errorf("Get from a host whose answer keeps growing: %v", err)
	}
	register("late", &testOp{process: func(ctx *Context, r Record) error { ctx.MapState("x"); return nil }})
	mustOpen(t, f, 1, "late", "")
	wantFailure(t, f, mod.process(1, batch(r("k", "", 0))), abi.StatusGuestError, `map state "x" was not registered: call ctx.MapState("x") in Open`)
}

// TestCommitPoints: when the host asks for commit points every n records,
// the SDK marks one before every nth record of a batch callback (never
// before the first, never after the last), each after handing the host the
// records' output and their cached state writes; a host that asks for none
// gets none, and a refused commit fails the callback.
func TestCommitPoints(t *testing.T) {
	f := install(t)
	var n ValueState
	op := &fullOp{testOp: testOp{
		open: func(ctx *Context) error { n = ctx.ValueState("n"); return nil },
		process: func(ctx *Context, r Record) error {
			c, _, err := n.GetInt64()
			if err != nil {
				return err
			}
			if err := n.PutInt64(c + 1); err != nil {
				return err
			}
			ctx.Emit(r.Key, r.Value, r.Timestamp)
			if string(r.Value) == "bad" {
				return errors.New("bad record")
			}
			return nil
		},
	}}
	op.timer = func(ctx *Context, tm Timer) error {
		ctx.Emit(tm.Key, tm.Namespace, tm.Timestamp)
		return nil
	}
	register("op", op)
	mustOpen(t, f, 0, "op", "")
	recs := func(n int, bad int) []byte {
		var rs []abi.Record
		for i := range n {
			v := "ok"
			if i == bad {
				v = "bad"
			}
			rs = append(rs, r(fmt.Sprintf("k%d", i%3), v, int64(i)))
		}
		return batch(rs...)
	}
	// Committed so far: each point's index, records emitted by then and
	// whether state had been written back.
	points := func() string {
		var s []string
		for _, c := range f.commits {
			s = append(s, fmt.Sprintf("%d:%d:%t", c.done, c.emitted, c.writes > 0))
		}
		f.commits, f.batches, f.writeBatchCalls, f.putCalls = nil, nil, 0, 0
		return strings.Join(s, " ")
	}

	if st := mod.process(0, recs(8, -1)); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if got := points(); got != "" {
		t.Errorf("commit points %q without the host asking for any", got)
	}

	f.commitEvery = 3
	if st := mod.process(0, recs(8, -1)); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if got, want := points(), "3:3:true 6:6:true"; got != want {
		t.Errorf("commit points every 3 of 8 records: %q, want %q", got, want)
	}
	if st := mod.process(0, recs(6, -1)); st != abi.StatusOK {
		t.Fatalf("process: %d %q", st, f.fails)
	}
	if got, want := points(), "3:3:true"; got != want {
		t.Errorf("commit points every 3 of 6 records: %q, want %q (none after the last)", got, want)
	}
	wantFailure(t, f, mod.process(0, recs(8, 7)), abi.StatusGuestError, "record 7 of 8")
	if got, want := points(), "3:3:true 6:6:true"; got != want {
		t.Errorf("commit points before a failure at record 7: %q, want %q", got, want)
	}
	if progress != 7 {
		t.Errorf("progress %d after a failure at record 7", progress)
	}

	timers := batch(r("a", "t0", 1), r("a", "t1", 2), r("b", "t2", 3), r("b", "t3", 4), r("c", "t4", 5))
	f.commitEvery = 2
	if st := mod.onTimer(0, timers); st != abi.StatusOK {
		t.Fatalf("on_timer: %d %q", st, f.fails)
	}
	if got, want := points(), "2:2:false 4:4:false"; got != want {
		t.Errorf("commit points every 2 of 5 timers: %q, want %q", got, want)
	}

	f.force[abi.ImportCommit] = abi.StatusStateError
	wantFailure(t, f, mod.process(0, recs(8, -1)), abi.StatusGuestError, "commit point before record 2: ")
}
