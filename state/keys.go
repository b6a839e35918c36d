package state

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// KeyKind tells what a Pebble key of a Store holds. It is the byte that
// follows the key group, so that within one key group all state entries sort
// before all timers.
type KeyKind uint8

// Key kinds. The values are part of the on-disk format.
const (
	KindEntry KeyKind = 0x01 // a keyed state entry; the Pebble value is the state value
	KindTimer KeyKind = 0x02 // a registered timer; the Pebble value is empty
)

func (k KeyKind) String() string {
	switch k {
	case KindEntry:
		return "entry"
	case KindTimer:
		return "timer"
	}
	return fmt.Sprintf("kind(0x%02x)", uint8(k))
}

// ErrMalformedKey is wrapped by every error of DecodeKey.
var ErrMalformedKey = errors.New("state: malformed key")

// Key is a decoded Pebble key. Its byte slices alias the encoded key.
type Key struct {
	KeyGroup  int
	Kind      KeyKind
	Vertex    []byte
	State     []byte // state name; KindEntry only
	Domain    int32  // time domain; KindTimer only
	Time      int64  // timer time; KindTimer only
	Key       []byte // the record key the entry or timer belongs to
	Namespace []byte
}

// timeBias flips the sign bit so that big-endian byte order of the encoded
// time equals signed order: MinInt64 encodes as 0x00…, -1 as 0x7f ff…,
// 0 as 0x80 00….
const timeBias = 1 << 63

// AppendEntryKey appends the Pebble key of the state entry (vertex, name,
// key, ns) in key group kg to dst.
func AppendEntryKey(dst []byte, kg int, vertex, name string, key, ns []byte) []byte {
	dst = appendEntryBase(dst, kg, vertex, name, key)
	return append(dst, ns...)
}

// AppendTimerKey appends the Pebble key of the timer (vertex, domain, ts,
// key, ns) in key group kg to dst.
func AppendTimerKey(dst []byte, kg int, vertex string, domain int32, ts int64, key, ns []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(kg))
	dst = appendTimerMid(dst, vertex, domain)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts)^timeBias)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, ns...)
}

// appendEntryBase appends everything of an entry key but the namespace: the
// prefix shared by all namespaces of one (vertex, state, key).
func appendEntryBase(dst []byte, kg int, vertex, name string, key []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(kg))
	dst = appendEntryMid(dst, vertex, name)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// appendEntryMid appends the part of an entry key between the key group and
// the record key; a VertexState precomputes it once per state.
func appendEntryMid(dst []byte, vertex, name string) []byte {
	dst = append(dst, byte(KindEntry))
	dst = binary.AppendUvarint(dst, uint64(len(vertex)))
	dst = append(dst, vertex...)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(dst, name...)
}

// appendTimerMid appends the part of a timer key between the key group and
// the time.
func appendTimerMid(dst []byte, vertex string, domain int32) []byte {
	dst = append(dst, byte(KindTimer))
	dst = binary.AppendUvarint(dst, uint64(len(vertex)))
	dst = append(dst, vertex...)
	return append(dst, byte(domain))
}

// KeyGroupPrefix returns the two-byte prefix that every key of key group kg
// starts with.
func KeyGroupPrefix(kg int) []byte {
	return binary.BigEndian.AppendUint16(nil, uint16(kg))
}

// KeyGroupSpan returns the Pebble key span [lower, upper) that holds exactly
// the keys of the key groups in r: what a rescale moves and an export reads.
func KeyGroupSpan(r abi.KeyGroupRange) (lower, upper []byte) {
	// Key groups are below abi.MaxMaxParallelism (1<<15), so End+1 still fits
	// in two bytes.
	return KeyGroupPrefix(r.Start), KeyGroupPrefix(r.End + 1)
}

// DecodeKey decodes a Pebble key written by a Store. It refuses anything that
// AppendEntryKey or AppendTimerKey could not have produced, including
// non-minimal length encodings, so that decoding and encoding are inverse.
func DecodeKey(k []byte) (Key, error) {
	var d Key
	if len(k) < 3 {
		return d, fmt.Errorf("%w: %d bytes is shorter than key group and kind (%x)", ErrMalformedKey, len(k), k)
	}
	d.KeyGroup = int(binary.BigEndian.Uint16(k))
	if d.KeyGroup >= abi.MaxMaxParallelism {
		return d, fmt.Errorf("%w: key group %d is not below %d (%x)", ErrMalformedKey, d.KeyGroup, abi.MaxMaxParallelism, k)
	}
	d.Kind = KeyKind(k[2])
	rest := k[3:]
	var err error
	if d.Vertex, rest, err = cutLengthPrefixed(rest, "vertex id"); err != nil {
		return d, keyError(err, k)
	}
	switch d.Kind {
	case KindEntry:
		if d.State, rest, err = cutLengthPrefixed(rest, "state name"); err != nil {
			return d, keyError(err, k)
		}
	case KindTimer:
		if len(rest) < 9 {
			return d, fmt.Errorf("%w: timer domain and time truncated (%x)", ErrMalformedKey, k)
		}
		d.Domain = int32(rest[0])
		if d.Domain != abi.TimeEvent && d.Domain != abi.TimeProcessing {
			return d, fmt.Errorf("%w: timer domain %d is neither event (0) nor processing (1) time (%x)", ErrMalformedKey, d.Domain, k)
		}
		d.Time = int64(binary.BigEndian.Uint64(rest[1:]) ^ timeBias)
		rest = rest[9:]
	default:
		return d, fmt.Errorf("%w: unknown kind 0x%02x (%x)", ErrMalformedKey, k[2], k)
	}
	if d.Key, rest, err = cutLengthPrefixed(rest, "record key"); err != nil {
		return d, keyError(err, k)
	}
	d.Namespace = rest
	return d, nil
}

func keyError(err error, k []byte) error {
	return fmt.Errorf("%w: %v (%x)", ErrMalformedKey, err, k)
}

// cutLengthPrefixed splits a uvarint-length-prefixed field off b.
func cutLengthPrefixed(b []byte, what string) (field, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, nil, fmt.Errorf("%s length is not a valid uvarint", what)
	}
	if w != uvarintLen(n) {
		return nil, nil, fmt.Errorf("%s length %d is not minimally encoded", what, n)
	}
	b = b[w:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%s of %d bytes overruns the key (%d left)", what, n, len(b))
	}
	return b[:n:n], b[n:], nil
}

func uvarintLen(n uint64) int {
	w := 1
	for n >= 0x80 {
		n >>= 7
		w++
	}
	return w
}

// prefixSuccessor returns the smallest key greater than every key that starts
// with p, appended to dst, or nil when there is none (p is all 0xff).
func prefixSuccessor(dst, p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			dst = append(dst, p[:i+1]...)
			dst[len(dst)-1]++
			return dst
		}
	}
	return nil
}
