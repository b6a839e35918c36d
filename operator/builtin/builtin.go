// Package builtin holds native Go operators that a plan can name with the
// "go:" prefix ("go:upper"). They implement operator.Operator directly, with
// the same batch encoding and Services as WASM operators, so a pipeline can run
// with native and WASM operators side by side: the benchmarks compare the two,
// and tests use them as an independent reference.
package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// Prefix marks a native operator name in a plan.
const Prefix = "go:"

var registry = map[string]func() operator.Operator{
	"identity": func() operator.Operator { return &identity{} },
	"upper":    func() operator.Operator { return &upper{} },
	"filter":   func() operator.Operator { return &filter{} },
	"split":    func() operator.Operator { return &split{} },
	"count":    func() operator.Operator { return &count{} },
}

// New returns a new instance of the native operator name (without Prefix).
func New(name string) (operator.Operator, error) {
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown native operator %q (have %v)", name, Names())
	}
	return f(), nil
}

// Names lists the native operators.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// base provides the no-op hooks.
type base struct{}

func (base) OnTimers([]byte, operator.Collector) error   { return nil }
func (base) PreBarrier(int64, operator.Collector) error  { return nil }
func (base) CheckpointComplete(int64) error              { return nil }
func (base) CheckpointAborted(int64) error               { return nil }
func (base) Close(operator.Collector) error              { return nil }
func (base) Open(operator.Spec, operator.Services) error { return nil }

// each decodes batch and calls fn per record.
func each(batch []byte, fn func(r *abi.Record) error) error {
	rd, err := abi.NewReader(batch)
	if err != nil {
		return err
	}
	var r abi.Record
	for {
		ok, err := rd.Next(&r)
		if err != nil || !ok {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}

type identity struct{ base }

func (*identity) Process(batch []byte, out operator.Collector) error {
	// Ports of an input batch are input indexes; output 0 is the main output.
	return each(batch, func(r *abi.Record) error { return out.Emit(0, r.Timestamp, r.Key, r.Value) })
}

type upper struct {
	base
	buf []byte
	out abi.Builder
}

func (u *upper) Process(batch []byte, out operator.Collector) error {
	u.out.Reset()
	err := each(batch, func(r *abi.Record) error {
		u.buf = append(u.buf[:0], r.Value...)
		for i, c := range u.buf {
			if c >= 'a' && c <= 'z' {
				u.buf[i] = c - 'a' + 'A'
			}
		}
		u.out.Add(0, r.Timestamp, r.Key, u.buf)
		return nil
	})
	if err != nil {
		return err
	}
	return out.EmitBatch(u.out.Bytes())
}

type filter struct {
	base
	contains []byte
	out      abi.Builder
}

func (f *filter) Open(spec operator.Spec, _ operator.Services) error {
	if len(spec.Config) == 0 {
		return nil
	}
	var c struct {
		Contains string `json:"contains"`
	}
	if err := json.Unmarshal(spec.Config, &c); err != nil {
		return fmt.Errorf("filter config: %w", err)
	}
	f.contains = []byte(c.Contains)
	return nil
}

func (f *filter) Process(batch []byte, out operator.Collector) error {
	f.out.Reset()
	err := each(batch, func(r *abi.Record) error {
		if bytes.Contains(r.Value, f.contains) {
			f.out.Add(0, r.Timestamp, r.Key, r.Value)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out.EmitBatch(f.out.Bytes())
}

type split struct {
	base
	out abi.Builder
}

func (s *split) Process(batch []byte, out operator.Collector) error {
	s.out.Reset()
	err := each(batch, func(r *abi.Record) error {
		v := r.Value
		for len(v) > 0 {
			i := 0
			for i < len(v) && isSpace(v[i]) {
				i++
			}
			j := i
			for j < len(v) && !isSpace(v[j]) {
				j++
			}
			if j > i {
				s.out.Add(0, r.Timestamp, v[i:j], nil)
			}
			v = v[j:]
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out.EmitBatch(s.out.Bytes())
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// count keeps a running count per key in value state "count" (8 bytes
// little-endian, the same encoding as the Go SDK's PutInt64) and emits the
// final count when the input ends, through an event-time timer at the end of
// time.
type count struct {
	base
	svc operator.Services
	h   int32
	buf []byte
	num []byte
	out abi.Builder
}

func (c *count) Open(_ operator.Spec, svc operator.Services) error {
	c.svc = svc
	h, err := svc.RegisterState("count", abi.StateValue)
	c.h = h
	c.buf = make([]byte, 0, 8)
	return err
}

func (c *count) Process(batch []byte, _ operator.Collector) error {
	return each(batch, func(r *abi.Record) error {
		v, err := c.svc.StateGet(c.h, r.Key, nil, c.buf)
		var n uint64
		switch {
		case err == nil && len(v) == 8:
			n = leUint64(v)
		case err == nil:
			return fmt.Errorf("count: state for key %q holds %d bytes, want 8", r.Key, len(v))
		case err != operator.ErrNotFound:
			return err
		default:
			if err := c.svc.RegisterTimer(abi.TimeEvent, r.Key, nil, abi.MaxWatermark); err != nil {
				return err
			}
		}
		n++
		c.buf = putLEUint64(c.buf[:0], n)
		return c.svc.StatePut(c.h, r.Key, nil, c.buf)
	})
}

func (c *count) OnTimers(timers []byte, out operator.Collector) error {
	c.out.Reset()
	err := each(timers, func(t *abi.Record) error {
		v, err := c.svc.StateGet(c.h, t.Key, nil, c.buf)
		if err != nil {
			return fmt.Errorf("count: timer for key %q: %w", t.Key, err)
		}
		c.num = strconv.AppendUint(c.num[:0], leUint64(v), 10)
		c.out.Add(0, t.Timestamp, t.Key, c.num)
		return c.svc.StateDelete(c.h, t.Key, nil)
	})
	if err != nil {
		return err
	}
	return out.EmitBatch(c.out.Bytes())
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func putLEUint64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}
