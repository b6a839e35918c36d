// Command conformance is the Go module of the conformance suite: the
// operator "conform" of tests/conformance/SPEC.md, a command interpreter
// whose every command exercises one part of the ABI through the Go SDK. The
// same operator exists in every guest language; the suite requires them all
// to answer alike. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o conformance.wasm .
package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/wstream/wstream/guest-sdk/go/wstream"
)

func init() {
	wstream.Register("conform", func() wstream.Operator { return &conform{} })
	// SPEC.md, "State migration".
	wstream.RegisterMigration("conform", "m", func(version int, key, ns, value []byte) ([]byte, error) {
		return fmt.Appendf(nil, "m|%d|%s|%s|%s", version, key, ns, value), nil
	})
	wstream.RegisterMigration("conform", "fail", func(int, []byte, []byte, []byte) ([]byte, error) {
		return nil, errors.New("migration refused")
	})
}

// main is never run: a -buildmode=c-shared module only runs init functions.
func main() {}

type conform struct {
	values map[string]wstream.ValueState
	maps   map[string]wstream.MapState
	// The checkpoint ids last passed to each hook, -1 before the first.
	pre, complete, aborted int64
	reply                  []byte
}

var errUnknownState = errors.New("unknown state")

func (c *conform) Open(ctx *wstream.Context) error {
	// States can only be registered in Open: a fixed set, in SPEC order.
	c.values = map[string]wstream.ValueState{}
	for _, n := range []string{"a", "b", "n", "big"} {
		c.values[n] = ctx.ValueState(n)
	}
	c.maps = map[string]wstream.MapState{}
	for _, n := range []string{"m", "p"} {
		c.maps[n] = ctx.MapState(n)
	}
	c.pre, c.complete, c.aborted = -1, -1, -1
	return nil
}

func (c *conform) value(name []byte) (wstream.ValueState, error) {
	s, ok := c.values[string(name)]
	if !ok {
		return s, fmt.Errorf("%w %q: not a value state of this operator", errUnknownState, name)
	}
	return s, nil
}

func (c *conform) mapState(name []byte) (wstream.MapState, error) {
	s, ok := c.maps[string(name)]
	if !ok {
		return s, fmt.Errorf("%w %q: not a map state of this operator", errUnknownState, name)
	}
	return s, nil
}

// args splits a command into its tokens (separated by one space) and checks
// their number.
func args(cmd []byte, n int) ([][]byte, error) {
	toks := bytes.Split(cmd, []byte{' '})
	if len(toks) != n {
		return nil, fmt.Errorf("command %q: want %d tokens, got %d", cmd, n, len(toks))
	}
	return toks, nil
}

// valueArgs checks a value-state command's tokens and returns them with the
// state its second token names.
func (c *conform) valueArgs(cmd []byte, n int) ([][]byte, wstream.ValueState, error) {
	t, err := args(cmd, n)
	if err != nil {
		return nil, wstream.ValueState{}, err
	}
	s, err := c.value(t[1])
	return t, s, err
}

// mapArgs is valueArgs for map-state commands.
func (c *conform) mapArgs(cmd []byte, n int) ([][]byte, wstream.MapState, error) {
	t, err := args(cmd, n)
	if err != nil {
		return nil, wstream.MapState{}, err
	}
	m, err := c.mapState(t[1])
	return t, m, err
}

func number(tok []byte) (int64, error) {
	n, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a non-negative decimal integer", tok)
	}
	return n, nil
}

func domain(tok []byte) (wstream.TimeDomain, error) {
	switch string(tok) {
	case "event":
		return wstream.EventTime, nil
	case "proc":
		return wstream.ProcessingTime, nil
	}
	return 0, fmt.Errorf("unknown time domain %q", tok)
}

func (c *conform) Process(ctx *wstream.Context, r wstream.Record) error {
	reply, err := c.run(ctx, r)
	if err != nil {
		return err
	}
	ctx.Emit(r.Key, reply, r.Timestamp)
	return nil
}

// run executes one command and returns its reply.
func (c *conform) run(ctx *wstream.Context, r wstream.Record) ([]byte, error) {
	cmd := r.Value
	name, _, _ := bytes.Cut(cmd, []byte{' '})
	ok := []byte("ok")
	switch string(name) {
	case "put":
		t, s, err := c.valueArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		return ok, s.Put(t[2])
	case "get", "del":
		_, s, err := c.valueArgs(cmd, 2)
		if err != nil {
			return nil, err
		}
		if string(name) == "del" {
			return ok, s.Delete()
		}
		return found(s.Get())
	case "inc":
		_, s, err := c.valueArgs(cmd, 2)
		if err != nil {
			return nil, err
		}
		n, _, err := s.GetInt64()
		if err != nil {
			return nil, err
		}
		n++
		if err := s.PutInt64(n); err != nil {
			return nil, err
		}
		return strconv.AppendInt([]byte("="), n, 10), nil
	case "tinc":
		t, _, err := c.valueArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		ts, err := number(t[2])
		if err != nil {
			return nil, err
		}
		return ok, ctx.RegisterEventTimer(ts, append([]byte("inc:"), t[1]...))
	case "big":
		t, s, err := c.valueArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		n, err := number(t[2])
		if err != nil {
			return nil, err
		}
		v := make([]byte, n)
		for i := range v {
			v[i] = 'a' + byte(i%26)
		}
		if err := s.Put(v); err != nil {
			return nil, err
		}
		got, _, err := s.Get()
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(got, v) {
			return []byte("mismatch"), nil
		}
		return strconv.AppendInt([]byte("ok "), n, 10), nil
	case "mput":
		t, m, err := c.mapArgs(cmd, 4)
		if err != nil {
			return nil, err
		}
		return ok, m.Put(t[2], t[3])
	case "mget", "mdel":
		t, m, err := c.mapArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		if string(name) == "mdel" {
			return ok, m.Delete(t[2])
		}
		return found(m.Get(t[2]))
	case "mfill":
		t, m, err := c.mapArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		n, err := number(t[2])
		if err != nil {
			return nil, err
		}
		if n > 10000 {
			return nil, fmt.Errorf("mfill: %d entries, at most 10000", n)
		}
		for i := int64(0); i < n; i++ {
			k := fmt.Appendf(nil, "k%04d", i)
			if err := m.Put(k, strconv.AppendInt([]byte("v"), i, 10)); err != nil {
				return nil, err
			}
		}
		return ok, nil
	case "mscan":
		t, m, err := c.mapArgs(cmd, 3)
		if err != nil {
			return nil, err
		}
		prefix := t[2]
		if string(prefix) == "-" {
			prefix = nil
		}
		var n int64
		var first, last []byte
		err = m.Range(prefix, func(k, _ []byte) bool {
			if n == 0 {
				first = append(first, k...)
			}
			last = append(last[:0], k...)
			n++
			return true
		})
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return []byte("n=0"), nil
		}
		return fmt.Appendf(nil, "n=%d first=%s last=%s", n, first, last), nil
	case "emit":
		t, err := args(cmd, 3)
		if err != nil {
			return nil, err
		}
		out, err := ctx.Output(string(t[1]))
		if errors.Is(err, wstream.ErrBadOutput) {
			return append([]byte("bad output "), t[1]...), nil
		}
		if err != nil {
			return nil, err
		}
		ctx.EmitTo(out, r.Key, t[2], r.Timestamp)
		return ok, nil
	case "batch":
		t, err := args(cmd, 2)
		if err != nil {
			return nil, err
		}
		n, err := number(t[1])
		if err != nil {
			return nil, err
		}
		v := make([]byte, 0, 24)
		for i := int64(0); i < n; i++ {
			v = strconv.AppendInt(append(v[:0], 'r'), i, 10)
			ctx.Emit(r.Key, v, r.Timestamp)
		}
		return ok, nil
	case "timer", "untimer":
		t, err := args(cmd, 3)
		if err != nil {
			return nil, err
		}
		d, err := domain(t[1])
		if err != nil {
			return nil, err
		}
		ts, err := number(t[2])
		if err != nil {
			return nil, err
		}
		ns := []byte("t")
		switch {
		case string(name) == "timer" && d == wstream.EventTime:
			err = ctx.RegisterEventTimer(ts, ns)
		case string(name) == "timer":
			err = ctx.RegisterProcessingTimer(ts, ns)
		case d == wstream.EventTime:
			err = ctx.DeleteEventTimer(ts, ns)
		default:
			err = ctx.DeleteProcessingTimer(ts, ns)
		}
		return ok, err
	case "wm":
		return strconv.AppendInt([]byte("wm="), ctx.Watermark(), 10), nil
	case "ptime":
		if ctx.ProcessingTime() > 0 {
			return []byte("ptime ok"), nil
		}
		return []byte("ptime bad"), nil
	case "log":
		t, err := args(cmd, 2)
		if err != nil {
			return nil, err
		}
		ctx.Log(wstream.LevelInfo, string(t[1]))
		return ok, nil
	case "config":
		return append([]byte("config="), ctx.Config()...), nil
	case "hooks":
		return fmt.Appendf(nil, "pre=%d complete=%d aborted=%d", c.pre, c.complete, c.aborted), nil
	case "fail":
		t, err := args(cmd, 2)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("conform: fail %s", t[1])
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}

// found turns a state lookup into its reply.
func found(v []byte, ok bool, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if !ok {
		return []byte("missing"), nil
	}
	return append([]byte("="), v...), nil
}

func (c *conform) OnTimer(ctx *wstream.Context, t wstream.Timer) error {
	d := "event"
	if t.Domain == wstream.ProcessingTime {
		d = "proc"
	}
	reply := fmt.Appendf(nil, "fired %s %d ns=%s", d, t.Timestamp, t.Namespace)
	// A timer of tinc counts in its value state.
	if name, ok := bytes.CutPrefix(t.Namespace, []byte("inc:")); ok {
		s, err := c.value(name)
		if err != nil {
			return err
		}
		n, _, err := s.GetInt64()
		if err != nil {
			return err
		}
		n++
		if err := s.PutInt64(n); err != nil {
			return err
		}
		reply = strconv.AppendInt(append(reply, " ="...), n, 10)
	}
	ctx.Emit(t.Key, reply, t.Timestamp)
	return nil
}

func (c *conform) PreBarrier(ctx *wstream.Context, id int64) error {
	c.pre = id
	ctx.Emit(nil, strconv.AppendInt([]byte("pre "), id, 10), 0)
	return nil
}

func (c *conform) CheckpointComplete(_ *wstream.Context, id int64) error {
	c.complete = id
	return nil
}

func (c *conform) CheckpointAborted(_ *wstream.Context, id int64) error {
	c.aborted = id
	return nil
}

func (c *conform) Close(ctx *wstream.Context) error {
	ctx.Emit(nil, []byte("close"), 0)
	return nil
}
