package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A batch is the unit that crosses every boundary: host↔guest, subtask↔subtask
// and worker↔worker. Little-endian throughout:
//
//	batch  := count:u32 record*count
//	record := port:u32 ts:i64 klen:u32 vlen:u32 key[klen] value[vlen]
//
// port is the input index on a batch handed to wstream_process, the output
// index on a batch passed to emit_batch, and the time domain on a timer batch
// (where value holds the timer's namespace).
const (
	BatchHeaderSize  = 4
	RecordHeaderSize = 20
)

// ErrMalformedBatch is wrapped by every batch decoding error.
var ErrMalformedBatch = errors.New("abi: malformed batch")

// Record is one record of a batch. Key and Value alias the batch's bytes.
type Record struct {
	Port      uint32
	Timestamp int64
	Key       []byte
	Value     []byte
}

// Builder appends records to a batch. The zero value is an empty batch ready
// for use; Reset keeps the buffer to avoid allocation on the hot path.
type Builder struct {
	buf []byte
	n   uint32
}

// Reset empties the builder, keeping its capacity.
func (b *Builder) Reset() {
	b.buf = b.buf[:0]
	b.n = 0
}

// Add appends one record.
func (b *Builder) Add(port uint32, ts int64, key, value []byte) {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	b.buf = AppendRecord(b.buf, port, ts, key, value)
	b.n++
}

// AddRecord appends r.
func (b *Builder) AddRecord(r *Record) { b.Add(r.Port, r.Timestamp, r.Key, r.Value) }

// Len is the number of records added since the last Reset.
func (b *Builder) Len() int { return int(b.n) }

// Size is the encoded size in bytes.
func (b *Builder) Size() int {
	if len(b.buf) == 0 {
		return BatchHeaderSize
	}
	return len(b.buf)
}

// Bytes returns the encoded batch. It aliases the builder's buffer: it is
// valid until the next Add or Reset.
func (b *Builder) Bytes() []byte {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(b.buf, b.n)
	return b.buf
}

// AppendBatch appends every record of the encoded batch b, which the
// caller has validated (see Validate), with one copy.
func (b *Builder) AppendBatch(batch []byte) {
	n := Count(batch)
	if n == 0 {
		return
	}
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	b.buf = append(b.buf, batch[BatchHeaderSize:]...)
	b.n += uint32(n)
}

// AppendRecord appends the encoding of one record (without batch header) to dst.
func AppendRecord(dst []byte, port uint32, ts int64, key, value []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, port)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ts))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(key)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(value)))
	dst = append(dst, key...)
	return append(dst, value...)
}

// Reader iterates over an encoded batch without copying.
type Reader struct {
	data      []byte
	off       int
	remaining uint32
	index     int
}

// NewReader checks the batch header and returns a reader positioned at the
// first record. Records are checked one by one as Next reaches them; call
// Validate first when the whole batch must be known good before any effect.
func NewReader(b []byte) (Reader, error) {
	if len(b) < BatchHeaderSize {
		return Reader{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte header", ErrMalformedBatch, len(b), BatchHeaderSize)
	}
	n := binary.LittleEndian.Uint32(b)
	// Each record needs at least its header: refuse counts the bytes cannot hold
	// before anything is allocated from them.
	if uint64(n)*RecordHeaderSize > uint64(len(b)-BatchHeaderSize) {
		return Reader{}, fmt.Errorf("%w: count %d needs at least %d bytes, batch has %d", ErrMalformedBatch, n, uint64(n)*RecordHeaderSize+BatchHeaderSize, len(b))
	}
	return Reader{data: b, off: BatchHeaderSize, remaining: n}, nil
}

// Count is the number of records the batch header declares.
func Count(b []byte) int {
	if len(b) < BatchHeaderSize {
		return 0
	}
	return int(binary.LittleEndian.Uint32(b))
}

// Offset is where in the batch the next record starts (its length after
// the last record).
func (r *Reader) Offset() int { return r.off }

// Remaining is the number of records not yet read.
func (r *Reader) Remaining() int { return int(r.remaining) }

// Next decodes the next record into rec. It returns false with a nil error at
// the end of the batch, and an error (wrapping ErrMalformedBatch) when the
// bytes are not a valid batch, including trailing bytes after the last record.
func (r *Reader) Next(rec *Record) (bool, error) {
	if r.remaining == 0 {
		if r.off != len(r.data) {
			return false, fmt.Errorf("%w: %d trailing bytes after %d records", ErrMalformedBatch, len(r.data)-r.off, r.index)
		}
		return false, nil
	}
	d := r.data[r.off:]
	if len(d) < RecordHeaderSize {
		return false, fmt.Errorf("%w: record %d at offset %d: header truncated", ErrMalformedBatch, r.index, r.off)
	}
	klen := uint64(binary.LittleEndian.Uint32(d[12:]))
	vlen := uint64(binary.LittleEndian.Uint32(d[16:]))
	if RecordHeaderSize+klen+vlen > uint64(len(d)) {
		return false, fmt.Errorf("%w: record %d at offset %d: key %d + value %d bytes overrun the batch", ErrMalformedBatch, r.index, r.off, klen, vlen)
	}
	rec.Port = binary.LittleEndian.Uint32(d)
	rec.Timestamp = int64(binary.LittleEndian.Uint64(d[4:]))
	k := RecordHeaderSize + int(klen)
	rec.Key = d[RecordHeaderSize:k:k]
	e := k + int(vlen)
	rec.Value = d[k:e:e]
	r.off += e
	r.remaining--
	r.index++
	return true, nil
}

// Validate checks a whole batch and returns its record count.
func Validate(b []byte) (int, error) {
	r, err := NewReader(b)
	if err != nil {
		return 0, err
	}
	var rec Record
	n := 0
	for {
		ok, err := r.Next(&rec)
		if err != nil {
			return n, err
		}
		if !ok {
			return n, nil
		}
		n++
	}
}

// MaxPort reports whether b is a well-formed batch (Validate says why not)
// and returns the largest port of its records, 0 when it has none. It is
// Validate's check in one tight loop, for the host's check of every batch a
// guest emits.
func MaxPort(b []byte) (maxPort uint32, ok bool) {
	if len(b) < BatchHeaderSize {
		return 0, false
	}
	size := uint64(len(b))
	off := uint64(BatchHeaderSize)
	// Every record moves off by at least its header or ends the loop, so a
	// count larger than the bytes can hold ends it early.
	for n := binary.LittleEndian.Uint32(b); n > 0; n-- {
		if size-off < RecordHeaderSize {
			return 0, false
		}
		d := b[off : off+RecordHeaderSize]
		off += RecordHeaderSize + uint64(binary.LittleEndian.Uint32(d[12:])) + uint64(binary.LittleEndian.Uint32(d[16:]))
		if off > size {
			return 0, false
		}
		maxPort = max(maxPort, binary.LittleEndian.Uint32(d))
	}
	return maxPort, off == size
}

// Decode validates b and returns its records. The records alias b.
func Decode(b []byte) ([]Record, error) {
	r, err := NewReader(b)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, r.Remaining())
	for {
		var rec Record
		ok, err := r.Next(&rec)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, rec)
	}
}

// Encode returns a new batch holding recs.
func Encode(recs []Record) []byte {
	var b Builder
	for i := range recs {
		b.AddRecord(&recs[i])
	}
	return append([]byte(nil), b.Bytes()...)
}

// Mark is a position in a Builder, for Truncate.
type Mark struct {
	n    uint32
	size int
}

// Mark returns the builder's current position.
func (b *Builder) Mark() Mark { return Mark{n: b.n, size: len(b.buf)} }

// Truncate drops the records added after m, a Mark of this builder taken
// since its last Reset.
func (b *Builder) Truncate(m Mark) {
	if m.size <= len(b.buf) && m.n <= b.n {
		b.buf, b.n = b.buf[:m.size], m.n
	}
}
