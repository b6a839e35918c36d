package builtin

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// collect is a Collector that keeps what it gets.
type collect struct{ recs []abi.Record }

func (c *collect) Emit(port uint32, ts int64, key, value []byte) error {
	c.recs = append(c.recs, abi.Record{Port: port, Timestamp: ts, Key: append([]byte(nil), key...), Value: append([]byte(nil), value...)})
	return nil
}

func (c *collect) EmitBatch(b []byte) error {
	recs, err := abi.Decode(b)
	if err != nil {
		return err
	}
	for _, r := range recs {
		_ = c.Emit(r.Port, r.Timestamp, r.Key, r.Value)
	}
	return nil
}

// mapState is an in-memory Services for the keyed operators.
type mapState struct {
	vals   map[string][]byte
	timers map[string]int64
}

func (m *mapState) RegisterState(string, int32) (int32, error) { return 0, nil }
func (m *mapState) StateGet(_ int32, key, ns, dst []byte) ([]byte, error) {
	v, ok := m.vals[string(key)+"\x00"+string(ns)]
	if !ok {
		return nil, operator.ErrNotFound
	}
	return append(dst[:0], v...), nil
}
func (m *mapState) StatePut(_ int32, key, ns, v []byte) error {
	m.vals[string(key)+"\x00"+string(ns)] = append([]byte(nil), v...)
	return nil
}
func (m *mapState) StateDelete(_ int32, key, ns []byte) error {
	delete(m.vals, string(key)+"\x00"+string(ns))
	return nil
}
func (m *mapState) StateIter(int32, []byte, []byte, []byte, func([]byte, []byte) bool) error {
	return errors.New("not used")
}
func (m *mapState) RegisterTimer(_ int32, key, _ []byte, ts int64) error {
	m.timers[string(key)] = ts
	return nil
}
func (m *mapState) DeleteTimer(int32, []byte, []byte, int64) error { return nil }
func (m *mapState) Watermark() int64                               { return abi.MinWatermark }
func (m *mapState) ProcessingTime() int64                          { return 0 }
func (m *mapState) Log(int32, string)                              {}

func batch(values ...string) []byte {
	var b abi.Builder
	for i, v := range values {
		b.Add(0, int64(i), []byte("k"), []byte(v))
	}
	return append([]byte(nil), b.Bytes()...)
}

func TestStatelessOperators(t *testing.T) {
	for _, c := range []struct {
		op, config string
		in         []string
		want       string
	}{
		{"identity", "", []string{"a", "B"}, "a,B"},
		{"upper", "", []string{"ab c", "Dé1"}, "AB C,Dé1"},
		{"filter", `{"contains":"x"}`, []string{"axb", "ab", "x"}, "axb,x"},
		{"filter", "", []string{"a", ""}, "a,"},
	} {
		op, err := New(c.op)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Open(operator.Spec{Config: []byte(c.config)}, nil); err != nil {
			t.Fatal(err)
		}
		var out collect
		if err := op.Process(batch(c.in...), &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range out.recs {
			got = append(got, string(r.Value))
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s %s: %q, want %q", c.op, c.config, strings.Join(got, ","), c.want)
		}
	}
	if _, err := New("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("New(nope) = %v", err)
	}
}

func TestSplitAndCount(t *testing.T) {
	split, _ := New("split")
	var words collect
	if err := split.Process(batch(" a  b\ta ", "b"), &words); err != nil {
		t.Fatal(err)
	}
	if len(words.recs) != 4 || string(words.recs[0].Key) != "a" || string(words.recs[3].Key) != "b" {
		t.Fatalf("split gave %+v", words.recs)
	}
	svc := &mapState{vals: map[string][]byte{}, timers: map[string]int64{}}
	count, _ := New("count")
	if err := count.Open(operator.Spec{}, svc); err != nil {
		t.Fatal(err)
	}
	var b abi.Builder
	for _, r := range words.recs {
		b.AddRecord(&r)
	}
	var none collect
	if err := count.Process(b.Bytes(), &none); err != nil || len(none.recs) != 0 {
		t.Fatalf("count emitted before its timers: %v %v", none.recs, err)
	}
	if v := svc.vals["a\x00"]; len(v) != 8 || binary.LittleEndian.Uint64(v) != 2 {
		t.Fatalf("count state for a = %v, want 2 as 8 bytes little-endian", v)
	}
	if svc.timers["a"] != abi.MaxWatermark {
		t.Fatalf("count registered timer %d, want the end of time", svc.timers["a"])
	}
	var tb abi.Builder
	tb.Add(uint32(abi.TimeEvent), abi.MaxWatermark, []byte("a"), nil)
	tb.Add(uint32(abi.TimeEvent), abi.MaxWatermark, []byte("b"), nil)
	var out collect
	if err := count.OnTimers(tb.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.recs) != 2 || string(out.recs[0].Value) != "2" || string(out.recs[1].Value) != "2" {
		t.Fatalf("final counts %+v", out.recs)
	}
	if len(svc.vals) != 0 {
		t.Fatalf("count kept state after emitting: %v", svc.vals)
	}
}
