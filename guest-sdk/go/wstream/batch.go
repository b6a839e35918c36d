package wstream

import (
	"encoding/binary"
	"fmt"

	"github.com/wstream/wstream/abi"
)

// batchIter walks an encoded abi batch in place. It is abi.Reader cut down
// to what the per-record loop needs, so that the compiler inlines next.
type batchIter struct {
	b    []byte
	off  int
	left uint32
	i    int
}

func newBatchIter(b []byte) (batchIter, error) {
	if len(b) < abi.BatchHeaderSize {
		return batchIter{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte header", abi.ErrMalformedBatch, len(b), abi.BatchHeaderSize)
	}
	return batchIter{b: b, off: abi.BatchHeaderSize, left: binary.LittleEndian.Uint32(b)}, nil
}

// next decodes the next record into r; it returns false at the end of the
// batch or at a malformed record (then err tells which).
func (it *batchIter) next(r *abi.Record) bool {
	if it.left == 0 {
		return false
	}
	d := it.b[it.off:]
	if len(d) < abi.RecordHeaderSize {
		return false
	}
	kl := uint64(binary.LittleEndian.Uint32(d[12:]))
	vl := uint64(binary.LittleEndian.Uint32(d[16:]))
	if kl+vl > uint64(len(d)-abi.RecordHeaderSize) {
		return false
	}
	k := abi.RecordHeaderSize + int(kl)
	e := k + int(vl)
	r.Port = binary.LittleEndian.Uint32(d)
	r.Timestamp = int64(binary.LittleEndian.Uint64(d[4:]))
	r.Key = d[abi.RecordHeaderSize:k:k]
	r.Value = d[k:e:e]
	it.off += e
	it.left--
	it.i++
	return true
}

// err reports why next returned false: nil at a well-formed end.
func (it *batchIter) err() error {
	switch {
	case it.left == 0 && it.off == len(it.b):
		return nil
	case it.left == 0:
		return fmt.Errorf("%w: %d trailing bytes after %d records", abi.ErrMalformedBatch, len(it.b)-it.off, it.i)
	case len(it.b)-it.off < abi.RecordHeaderSize:
		return fmt.Errorf("%w: record %d at offset %d: header truncated", abi.ErrMalformedBatch, it.i, it.off)
	}
	return fmt.Errorf("%w: record %d at offset %d: key and value overrun the batch", abi.ErrMalformedBatch, it.i, it.off)
}
