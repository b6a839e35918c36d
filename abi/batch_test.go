package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	recs := []Record{
		{Port: 0, Timestamp: 1000, Key: []byte("a"), Value: []byte("1")},
		{Port: 3, Timestamp: math.MinInt64, Key: nil, Value: []byte("no key")},
		{Port: math.MaxUint32, Timestamp: math.MaxInt64, Key: []byte("k\x00\xff"), Value: nil},
		{Port: 1, Timestamp: -5, Key: bytes.Repeat([]byte("x"), 70000), Value: bytes.Repeat([]byte("y"), 3)},
	}
	b := Encode(recs)
	n, err := Validate(b)
	if err != nil || n != len(recs) {
		t.Fatalf("Validate = %d, %v; want %d, nil", n, err, len(recs))
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("decoded %d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		w, g := recs[i], got[i]
		if w.Port != g.Port || w.Timestamp != g.Timestamp || !bytes.Equal(w.Key, g.Key) || !bytes.Equal(w.Value, g.Value) {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}
	if Count(b) != len(recs) {
		t.Errorf("Count = %d", Count(b))
	}
}

func TestBatchExampleFromSpec(t *testing.T) {
	// The example in ABI.md, byte for byte.
	want := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xe8, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', '1'}
	var bl Builder
	bl.Add(0, 1000, []byte("a"), []byte("1"))
	if !bytes.Equal(bl.Bytes(), want) {
		t.Fatalf("encoding = % x\nwant       % x", bl.Bytes(), want)
	}
}

func TestEmptyBatch(t *testing.T) {
	var bl Builder
	if got := bl.Bytes(); !bytes.Equal(got, []byte{0, 0, 0, 0}) {
		t.Fatalf("empty batch = % x", got)
	}
	if n, err := Validate(bl.Bytes()); n != 0 || err != nil {
		t.Fatalf("Validate(empty) = %d, %v", n, err)
	}
	if bl.Size() != BatchHeaderSize {
		t.Fatalf("Size = %d", bl.Size())
	}
}

func TestBuilderReuse(t *testing.T) {
	var bl Builder
	bl.Add(0, 1, []byte("a"), nil)
	bl.Add(0, 2, []byte("b"), nil)
	bl.Reset()
	bl.Add(7, 3, []byte("c"), []byte("v"))
	recs, err := Decode(bl.Bytes())
	if err != nil || len(recs) != 1 || recs[0].Port != 7 || string(recs[0].Key) != "c" {
		t.Fatalf("after Reset: %+v, %v", recs, err)
	}
	if bl.Len() != 1 {
		t.Fatalf("Len = %d", bl.Len())
	}
}

func TestMalformedBatches(t *testing.T) {
	good := Encode([]Record{{Key: []byte("key"), Value: []byte("value")}, {Key: []byte("k2")}})
	withCount := func(n uint32) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b, n)
		return b
	}
	bigLen := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bigLen[4+12:], math.MaxUint32) // klen of record 0
	cases := map[string][]byte{
		"nil":             nil,
		"short header":    {1, 0},
		"count too large": withCount(3),
		"huge count":      withCount(math.MaxUint32),
		"count too small": withCount(1),
		"truncated":       good[:len(good)-1],
		"trailing":        append(append([]byte(nil), good...), 0),
		"key overrun":     bigLen,
		"header cut":      good[:4+10],
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Validate(b); !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("Validate: err = %v, want ErrMalformedBatch", err)
			}
			if _, err := Decode(b); !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("Decode: err = %v, want ErrMalformedBatch", err)
			}
		})
	}
}

func TestReaderAliasesAndCaps(t *testing.T) {
	b := Encode([]Record{{Key: []byte("ab"), Value: []byte("cd")}, {Key: []byte("ef")}})
	rd, err := NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if ok, err := rd.Next(&r); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// Appending to a key must not overwrite the value that follows it.
	_ = append(r.Key, 'X')
	if string(r.Value) != "cd" {
		t.Fatalf("value clobbered through key capacity: %q", r.Value)
	}
	if rd.Remaining() != 1 {
		t.Fatalf("Remaining = %d", rd.Remaining())
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode([]Record{{Port: 1, Timestamp: 2, Key: []byte("k"), Value: []byte("v")}}))
	f.Add(Encode(nil))
	f.Add([]byte{255, 255, 255, 255})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := Decode(b)
		n, verr := Validate(b)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Decode err %v but Validate err %v", err, verr)
		}
		maxPort, ok := MaxPort(b)
		if ok != (err == nil) {
			t.Fatalf("MaxPort ok %v but Decode err %v", ok, err)
		}
		want := uint32(0)
		for _, r := range recs {
			want = max(want, r.Port)
		}
		if ok && maxPort != want {
			t.Fatalf("MaxPort %d, want %d", maxPort, want)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("error does not wrap ErrMalformedBatch: %v", err)
			}
			return
		}
		if n != len(recs) {
			t.Fatalf("Validate count %d, Decode %d", n, len(recs))
		}
		// A valid batch re-encodes to the same bytes.
		if again := Encode(recs); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", again, b)
		}
	})
}

func TestAppendBatch(t *testing.T) {
	var b Builder
	b.Add(1, 1, []byte("a"), nil)
	b.AppendBatch(Encode([]Record{{Port: 2, Timestamp: 2, Key: []byte("b")}, {Port: 3, Timestamp: 3, Value: []byte("c")}}))
	b.AppendBatch(Encode(nil))
	recs, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Port != 1 || string(recs[1].Key) != "b" || string(recs[2].Value) != "c" || b.Len() != 3 {
		t.Fatalf("AppendBatch gave %+v", recs)
	}
	var e Builder
	e.AppendBatch(Encode([]Record{{Key: []byte("x")}}))
	if recs, err := Decode(e.Bytes()); err != nil || len(recs) != 1 {
		t.Fatalf("AppendBatch into an empty builder: %+v %v", recs, err)
	}
}
