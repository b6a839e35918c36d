package state

// Reading the canonical format: its header, records and trailer, checked as
// they are read.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
	"github.com/wstream/wstream/abi"
)

// ReadCanonicalHeader reads and checks the header of a canonical stream,
// consuming exactly its bytes from r.
func ReadCanonicalHeader(r io.Reader) (CanonicalHeader, error) {
	var b [CanonicalHeaderSize]byte
	h, err := readCanonicalHeader(r, &b)
	return h, err
}

func readCanonicalHeader(r io.Reader, b *[CanonicalHeaderSize]byte) (CanonicalHeader, error) {
	var h CanonicalHeader
	// Magic and version first: a later version may have another header.
	if n, err := io.ReadFull(r, b[:canonicalPrefixLen]); err != nil {
		if m := min(n, len(CanonicalMagic)); string(b[:m]) != CanonicalMagic[:m] {
			return h, badMagic(b[:m])
		}
		return h, fmt.Errorf("%w: header truncated at byte %d (a header has %d bytes): %v",
			ErrCanonicalCorrupt, n, CanonicalHeaderSize, err)
	}
	if string(b[:len(CanonicalMagic)]) != CanonicalMagic {
		return h, badMagic(b[:len(CanonicalMagic)])
	}
	h.Version = int(binary.BigEndian.Uint16(b[len(CanonicalMagic):]))
	switch {
	case h.Version > CanonicalFormatVersion:
		return h, fmt.Errorf("%w: the stream has format version %d (at byte %d) and was written by a newer wstream; this wstream reads version %d: restore it with a newer wstream",
			ErrCanonicalVersion, h.Version, len(CanonicalMagic), CanonicalFormatVersion)
	case h.Version < 1:
		return h, fmt.Errorf("%w: format version %d at byte %d is not a valid version",
			ErrCanonicalVersion, h.Version, len(CanonicalMagic))
	}
	if n, err := io.ReadFull(r, b[canonicalPrefixLen:]); err != nil {
		return h, fmt.Errorf("%w: header truncated at byte %d (a header has %d bytes): %v",
			ErrCanonicalCorrupt, canonicalPrefixLen+n, CanonicalHeaderSize, err)
	}
	if got, want := binary.BigEndian.Uint32(b[25:]), crc32.Checksum(b[:25], castagnoli); got != want {
		return h, fmt.Errorf("%w: header checksum mismatch at byte 25 (stored %08x, computed %08x)",
			ErrCanonicalCorrupt, got, want)
	}
	h.MaxParallelism = int(binary.BigEndian.Uint16(b[19:]))
	h.KeyGroups = abi.KeyGroupRange{Start: int(binary.BigEndian.Uint16(b[21:])), End: int(binary.BigEndian.Uint16(b[23:]))}
	if h.MaxParallelism < 1 || h.MaxParallelism > abi.MaxMaxParallelism {
		return h, fmt.Errorf("%w: max parallelism %d at byte 19 is outside [1, %d]",
			ErrCanonicalCorrupt, h.MaxParallelism, abi.MaxMaxParallelism)
	}
	if g := h.KeyGroups; g.Start > g.End || g.End >= h.MaxParallelism {
		return h, fmt.Errorf("%w: key-group range [%d, %d] at byte 21 is empty or outside [0, %d]",
			ErrCanonicalCorrupt, g.Start, g.End, h.MaxParallelism-1)
	}
	return h, nil
}

func badMagic(got []byte) error {
	return fmt.Errorf("%w: not a wstream canonical state stream: it starts with %q at byte 0, want %q",
		ErrCanonicalCorrupt, got, CanonicalMagic)
}

// canonicalReader reads the records of the zstd content of a canonical
// stream, hashing the bytes it consumes.
type canonicalReader struct {
	src    io.Reader
	buf    []byte
	r, w   int   // buf[r:w] is unread
	base   int64 // stream offset of buf[0]
	sum    hash.Hash
	hashed int // buf[:hashed] has been hashed
	srcErr error
}

// fill makes at least n bytes unread, or returns why it cannot.
func (cr *canonicalReader) fill(n int) error {
	for cr.w-cr.r < n {
		if cr.srcErr != nil {
			return cr.srcErr
		}
		if cr.r > 0 {
			cr.sum.Write(cr.buf[cr.hashed:cr.r])
			copy(cr.buf, cr.buf[cr.r:cr.w])
			cr.base += int64(cr.r)
			cr.w -= cr.r
			cr.r, cr.hashed = 0, 0
		}
		if cr.w == len(cr.buf) {
			// Full: at most double it. n comes from a length the stream
			// claims; the buffer grows with the bytes that arrive.
			nb := make([]byte, min(n, 2*len(cr.buf)))
			copy(nb, cr.buf[:cr.w])
			cr.buf = nb
		}
		m, err := cr.src.Read(cr.buf[cr.w:])
		cr.w += m
		if err != nil {
			cr.srcErr = err
		}
	}
	return nil
}

// scanCanonical reads a whole stream: the header, which check may refuse,
// then every record, which it validates and passes to fn, then the trailer,
// which it verifies.
func scanCanonical(r io.Reader, check func(CanonicalHeader) error, fn func(*CanonicalRecord) error) (CanonicalTrailer, error) {
	tr := CanonicalTrailer{FirstKeyGroup: -1, LastKeyGroup: -1}
	var hb [CanonicalHeaderSize]byte
	h, err := readCanonicalHeader(r, &hb)
	tr.Header = h
	if err != nil {
		return tr, err
	}
	if check != nil {
		if err := check(h); err != nil {
			return tr, err
		}
	}
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(min(runtime.GOMAXPROCS(0), 4)),
		zstd.WithDecoderMaxWindow(maxCanonicalWindow))
	if err != nil {
		return tr, fmt.Errorf("state: canonical stream: zstd decoder: %w", err)
	}
	defer dec.Close()
	cr := &canonicalReader{src: dec, buf: make([]byte, canonicalChunk), base: CanonicalHeaderSize, sum: sha256.New()}
	cr.sum.Write(hb[:])

	var rec CanonicalRecord
	prevKG := 0
	for index := int64(1); ; index++ {
		start := cr.base + int64(cr.r)
		where := func() string { return fmt.Sprintf("record %d at byte %d", index, start) }
		body, recAt, err := cr.record(where)
		if err != nil {
			return tr, err
		}
		tr.RecordsScanned = index
		if body[0] == canonicalTagTrailer {
			return tr, cr.trailer(&tr, body, recAt, start, where)
		}
		if err := parseCanonicalRecord(body, &rec); err != nil {
			return tr, fmt.Errorf("%w: %s: %v", ErrCanonicalCorrupt, where(), err)
		}
		if err := checkRecordKeyGroup(h, &rec, prevKG, where); err != nil {
			return tr, err
		}
		kg := rec.KeyGroup
		prevKG = kg
		if tr.FirstKeyGroup < 0 {
			tr.FirstKeyGroup = kg
		}
		tr.LastKeyGroup = kg
		if rec.Kind == KindEntry {
			tr.Entries++
		} else {
			tr.Timers++
		}
		rec.Offset, rec.Index = start, index
		if err := fn(&rec); err != nil {
			return tr, err
		}
	}
}

// record reads the next record's length prefix and body, and returns the
// body (valid until the next read) and where its length prefix starts in
// the buffer. where names the record in errors.
func (cr *canonicalReader) record(where func() string) (body []byte, recAt int, err error) {
	readErr := func(err error, what string) error {
		switch {
		case err == io.EOF:
			return fmt.Errorf("%w: truncated: the stream ends at byte %d, in %s (%s); a complete stream ends with a trailer",
				ErrCanonicalCorrupt, cr.base+int64(cr.w), where(), what)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("%w: truncated or damaged: the compressed data ends inside a zstd frame after byte %d, in %s (%s)",
				ErrCanonicalCorrupt, cr.base+int64(cr.w), where(), what)
		}
		return fmt.Errorf("%w: %s: decompress: %v", ErrCanonicalCorrupt, where(), err)
	}
	// The length prefix: a uvarint of at most 10 bytes.
	var size uint64
	var w int
	for {
		size, w = binary.Uvarint(cr.buf[cr.r:cr.w])
		if w > 0 {
			break
		}
		if w < 0 {
			return nil, 0, fmt.Errorf("%w: %s: the record length is not a valid uvarint", ErrCanonicalCorrupt, where())
		}
		if err := cr.fill(cr.w - cr.r + 1); err != nil {
			return nil, 0, readErr(err, "length")
		}
	}
	if size < 1 || size > MaxCanonicalRecord {
		return nil, 0, fmt.Errorf("%w: %s: record length %d is outside [1, %d]", ErrCanonicalCorrupt, where(), size, MaxCanonicalRecord)
	}
	if err := cr.fill(w + int(size)); err != nil {
		return nil, 0, readErr(err, fmt.Sprintf("a record of %d bytes", size))
	}
	recAt = cr.r
	body = cr.buf[cr.r+w : cr.r+w+int(size)]
	cr.r += w + int(size)
	return body, recAt, nil
}

// trailer checks the trailer record body, whose length prefix starts at
// recAt in the buffer and at byte start of the stream, against what tr
// counted and the stream's checksum, and that nothing follows it.
func (cr *canonicalReader) trailer(tr *CanonicalTrailer, body []byte, recAt int, start int64, where func() string) error {
	if len(body) != canonicalTrailerLen {
		return fmt.Errorf("%w: %s: trailer of %d bytes, want %d", ErrCanonicalCorrupt, where(), len(body), canonicalTrailerLen)
	}
	cr.sum.Write(cr.buf[cr.hashed:recAt])
	cr.hashed = recAt
	var digest [sha256.Size]byte
	cr.sum.Sum(digest[:0])
	copy(tr.SHA256[:], body[17:])
	if digest != tr.SHA256 {
		return fmt.Errorf("%w: checksum mismatch: the SHA-256 of bytes 0 to %d is %x, the trailer (%s) says %x: the stream was altered or damaged",
			ErrCanonicalCorrupt, start, digest, where(), tr.SHA256)
	}
	entries, timers := binary.BigEndian.Uint64(body[1:]), binary.BigEndian.Uint64(body[9:])
	if entries != uint64(tr.Entries) || timers != uint64(tr.Timers) {
		return fmt.Errorf("%w: %s: the trailer counts %d entries and %d timers, the stream holds %d and %d",
			ErrCanonicalCorrupt, where(), entries, timers, tr.Entries, tr.Timers)
	}
	tr.RawBytes = cr.base + int64(cr.r)
	// Nothing may follow the trailer.
	if err := cr.fill(1); err == nil {
		return fmt.Errorf("%w: data after the trailer at byte %d", ErrCanonicalCorrupt, tr.RawBytes)
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: after the trailer at byte %d: decompress: %v", ErrCanonicalCorrupt, tr.RawBytes, err)
	}
	return nil
}

// checkRecordKeyGroup checks that record rec's key group is in the
// header's range, not before the previous record's (prevKG), and the one
// its key hashes to.
func checkRecordKeyGroup(h CanonicalHeader, rec *CanonicalRecord, prevKG int, where func() string) error {
	kg := rec.KeyGroup
	if !h.KeyGroups.Contains(kg) {
		return fmt.Errorf("%w: %s: key group %d is outside the header's range [%d, %d]",
			ErrCanonicalCorrupt, where(), kg, h.KeyGroups.Start, h.KeyGroups.End)
	}
	if kg < prevKG {
		return fmt.Errorf("%w: %s: key group %d follows key group %d: records must be in key-group order",
			ErrCanonicalCorrupt, where(), kg, prevKG)
	}
	if want := abi.KeyGroup(rec.Key, h.MaxParallelism); want != kg {
		return fmt.Errorf("%w: %s: key %q is in key group %d, the record says %d",
			ErrCanonicalCorrupt, where(), truncate(rec.Key), want, kg)
	}
	return nil
}

// parseCanonicalRecord decodes an entry or timer body into rec, whose
// slices then alias body.
func parseCanonicalRecord(body []byte, rec *CanonicalRecord) error {
	if len(body) < 3 {
		return fmt.Errorf("record of %d bytes is shorter than tag and key group", len(body))
	}
	tag := body[0]
	rec.KeyGroup = int(binary.BigEndian.Uint16(body[1:]))
	rest := body[3:]
	var err error
	if rec.Vertex, rest, err = cutField(rest, "vertex id"); err != nil {
		return err
	}
	switch tag {
	case canonicalTagEntry:
		rec.Kind = KindEntry
		rec.Domain, rec.Time = 0, 0
		if rec.State, rest, err = cutField(rest, "state name"); err != nil {
			return err
		}
	case canonicalTagTimer:
		rec.Kind = KindTimer
		rec.State, rec.Value = nil, nil
		if len(rest) < 9 {
			return errors.New("timer domain and time truncated")
		}
		rec.Domain = int32(rest[0])
		if rec.Domain != abi.TimeEvent && rec.Domain != abi.TimeProcessing {
			return fmt.Errorf("timer domain %d is neither event (0) nor processing (1) time", rec.Domain)
		}
		rec.Time = int64(binary.BigEndian.Uint64(rest[1:]))
		rest = rest[9:]
	default:
		return fmt.Errorf("unknown record tag 0x%02x", tag)
	}
	if rec.Key, rest, err = cutField(rest, "key"); err != nil {
		return err
	}
	if rec.Namespace, rest, err = cutField(rest, "namespace"); err != nil {
		return err
	}
	if tag == canonicalTagEntry {
		if rec.Value, rest, err = cutField(rest, "value"); err != nil {
			return err
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes after the last field", len(rest))
	}
	return nil
}

func cutField(b []byte, what string) (field, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, nil, fmt.Errorf("%s length is not a valid uvarint", what)
	}
	b = b[w:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%s of %d bytes overruns the record (%d left)", what, n, len(b))
	}
	return b[:n:n], b[n:], nil
}

// ScanCanonical reads a canonical stream without a store, for tools that
// list its contents: it checks the header, passes every entry and timer to
// fn in stream order, and verifies the trailer. Records reach fn before the
// checksum at the end is verified: when ScanCanonical returns an error, what
// fn saw may be damaged. An error of fn stops the scan and is returned as
// is.
func ScanCanonical(r io.Reader, fn func(CanonicalRecord) error) (CanonicalTrailer, error) {
	return scanCanonical(r, nil, func(rec *CanonicalRecord) error { return fn(*rec) })
}
