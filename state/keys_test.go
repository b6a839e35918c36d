package state

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/wstream/wstream/abi"
)

func TestEntryKeyRoundTrip(t *testing.T) {
	long := bytes.Repeat([]byte{0xab}, 300) // two-byte uvarint length
	cases := []struct {
		kg            int
		vertex, state string
		key, ns       []byte
	}{
		{0, "v", "s", []byte("k"), nil},
		{127, "", "count", nil, nil},
		{abi.MaxMaxParallelism - 1, "window-agg", "sum", []byte("user-1"), []byte{0, 0, 0, 1}},
		{42, string(long), string(long[:256]), long, long},
		{1, "v", "s", []byte{}, []byte{0xff, 0xff}},
	}
	for _, c := range cases {
		k := AppendEntryKey([]byte("junk-before"), c.kg, c.vertex, c.state, c.key, c.ns)[len("junk-before"):]
		d, err := DecodeKey(k)
		if err != nil {
			t.Fatalf("DecodeKey(%x): %v", k, err)
		}
		if d.Kind != KindEntry || d.KeyGroup != c.kg || string(d.Vertex) != c.vertex || string(d.State) != c.state ||
			!bytes.Equal(d.Key, c.key) || !bytes.Equal(d.Namespace, c.ns) {
			t.Fatalf("DecodeKey(AppendEntryKey(%d, %q, %q, %x, %x)) = %+v", c.kg, c.vertex, c.state, c.key, c.ns, d)
		}
		if again := AppendEntryKey(nil, d.KeyGroup, string(d.Vertex), string(d.State), d.Key, d.Namespace); !bytes.Equal(again, k) {
			t.Fatalf("re-encoding %+v gives %x, want %x", d, again, k)
		}
	}
}

func TestTimerKeyRoundTrip(t *testing.T) {
	for _, ts := range []int64{math.MinInt64, -1000, -1, 0, 1, 1 << 40, math.MaxInt64} {
		for _, domain := range []int32{abi.TimeEvent, abi.TimeProcessing} {
			k := AppendTimerKey(nil, 77, "vertex", domain, ts, []byte("key"), []byte("ns"))
			d, err := DecodeKey(k)
			if err != nil {
				t.Fatalf("DecodeKey(%x): %v", k, err)
			}
			if d.Kind != KindTimer || d.KeyGroup != 77 || string(d.Vertex) != "vertex" || d.Domain != domain ||
				d.Time != ts || string(d.Key) != "key" || string(d.Namespace) != "ns" || d.State != nil {
				t.Fatalf("DecodeKey(timer %d, %d) = %+v", domain, ts, d)
			}
		}
	}
}

func TestDecodeKeyRejectsMalformed(t *testing.T) {
	good := AppendEntryKey(nil, 3, "v", "s", []byte("k"), []byte("n"))
	timer := AppendTimerKey(nil, 3, "v", abi.TimeEvent, 5, []byte("k"), nil)
	badDomain := slices.Clone(timer)
	badDomain[5] = 7 // kg(2) kind(1) len(1) 'v'(1) → domain at 5
	cases := map[string][]byte{
		"empty":             nil,
		"short":             {0, 1},
		"unknown kind":      {0, 1, 0x09, 0},
		"key group too big": {0x80, 0x00, byte(KindEntry), 0},
		"vertex overrun":    {0, 1, byte(KindEntry), 5, 'a'},
		"bad uvarint":       {0, 1, byte(KindEntry), 0x80},
		"non-minimal len":   {0, 1, byte(KindEntry), 0x81, 0x00, 'v', 1, 's', 0},
		"missing state":     {0, 1, byte(KindEntry), 1, 'v'},
		"missing key len":   good[:7],
		"timer truncated":   timer[:8],
		"bad timer domain":  badDomain,
	}
	for name, k := range cases {
		if _, err := DecodeKey(k); !errors.Is(err, ErrMalformedKey) {
			t.Errorf("%s: DecodeKey(%x) = %v, want ErrMalformedKey", name, k, err)
		}
	}
	if _, err := DecodeKey(good); err != nil {
		t.Fatalf("control: %v", err)
	}
}

// Distinct tuples must never share an encoding, even when their fields'
// concatenations are equal.
func TestEntryKeysAreUnambiguous(t *testing.T) {
	a := AppendEntryKey(nil, 1, "ab", "c", []byte("d"), nil)
	b := AppendEntryKey(nil, 1, "a", "bc", []byte("d"), nil)
	c := AppendEntryKey(nil, 1, "a", "b", []byte("cd"), nil)
	d := AppendEntryKey(nil, 1, "a", "b", []byte("c"), []byte("d"))
	keys := [][]byte{a, b, c, d}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if bytes.Equal(keys[i], keys[j]) {
				t.Fatalf("tuples %d and %d share encoding %x", i, j, keys[i])
			}
		}
	}
}

func TestKeyGroupSortsFirst(t *testing.T) {
	// The largest key of group 4 (a timer, with long fields) sorts before the
	// smallest key of group 5.
	hi := AppendTimerKey(nil, 4, "\xff\xff", abi.TimeProcessing, math.MaxInt64, bytes.Repeat([]byte{0xff}, 100), []byte{0xff})
	lo := AppendEntryKey(nil, 5, "", "a", nil, nil)
	if bytes.Compare(hi, lo) >= 0 {
		t.Fatalf("key of group 4 %x sorts after key of group 5 %x", hi, lo)
	}
	if e, tm := AppendEntryKey(nil, 4, "z", "z", []byte("z"), nil), AppendTimerKey(nil, 4, "a", 0, 0, nil, nil); bytes.Compare(e, tm) >= 0 {
		t.Fatalf("entry %x sorts after timer %x in one key group", e, tm)
	}
}

func TestTimerKeysSortByTime(t *testing.T) {
	times := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -2, -1, 0, 1, 2, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	var prev []byte
	for i, ts := range times {
		// The key bytes would sort the other way round: time must dominate.
		k := AppendTimerKey(nil, 9, "v", abi.TimeEvent, ts, []byte{byte(len(times) - i)}, nil)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("timer at %d (%x) does not sort after timer at %d (%x)", ts, k, times[i-1], prev)
		}
		prev = k
	}
}

// All keys of one key group form one contiguous run in byte order, and
// KeyGroupSpan bounds exactly the keys of a range.
func TestKeyGroupsAreContiguous(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const groups = 8
	var keys [][]byte
	for range 2000 {
		kg := r.IntN(groups)
		key := randBytes(r, 6)
		ns := randBytes(r, 4)
		if r.IntN(2) == 0 {
			keys = append(keys, AppendEntryKey(nil, kg, string(randBytes(r, 3)), string(randBytes(r, 3)), key, ns))
		} else {
			keys = append(keys, AppendTimerKey(nil, kg, string(randBytes(r, 3)), int32(r.IntN(2)), r.Int64()-r.Int64(), key, ns))
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	seen := map[int]bool{}
	last := -1
	for _, k := range keys {
		d, err := DecodeKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if d.KeyGroup != last {
			if seen[d.KeyGroup] {
				t.Fatalf("key group %d appears in two separate runs", d.KeyGroup)
			}
			seen[d.KeyGroup] = true
			last = d.KeyGroup
		}
	}
	rg := abi.KeyGroupRange{Start: 2, End: 5}
	lower, upper := KeyGroupSpan(rg)
	for _, k := range keys {
		d, _ := DecodeKey(k)
		in := bytes.Compare(k, lower) >= 0 && bytes.Compare(k, upper) < 0
		if in != rg.Contains(d.KeyGroup) {
			t.Fatalf("key of group %d: in span [%x, %x) = %t", d.KeyGroup, lower, upper, in)
		}
	}
}

func TestPrefixSuccessor(t *testing.T) {
	cases := []struct{ in, want []byte }{
		{[]byte{1, 2, 3}, []byte{1, 2, 4}},
		{[]byte{1, 2, 0xff}, []byte{1, 3}},
		{[]byte{0xff, 0xff}, nil},
		{nil, nil},
	}
	for _, c := range cases {
		if got := prefixSuccessor(nil, c.in); !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("prefixSuccessor(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

func randBytes(r *rand.Rand, max int) []byte {
	b := make([]byte, r.IntN(max+1))
	for i := range b {
		b[i] = byte(r.IntN(4)) * 0x55 // few distinct values: many shared prefixes
	}
	return b
}
