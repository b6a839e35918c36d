package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/wstream/wstream/abi"
)

// CanonicalFormatVersion is the version of the canonical state stream that
// ExportCanonical writes and the only one ImportCanonical and ScanCanonical
// read. Any change to the layout below, to the key → key-group hash
// (abi.KeyHash) or to the meaning of a field is a new version.
//
// # Canonical state stream, version 1
//
// The canonical stream is the portable form of a store's keyed state: what
// a savepoint holds, independent of Pebble's files and of the store's key
// layout, restorable into a store of any key-group range. It is a header,
// stored uncompressed so that any reader can tell the version before it
// decompresses anything, followed by a zstd stream (one or more frames, to
// the end of the input) whose content is a sequence of records ended by a
// trailer record. All integers are big-endian unless they are uvarints
// (encoding/binary; lengths and counts of variable fields).
//
//	header (29 bytes, uncompressed):
//
//	offset size
//	0      17   magic "WSTREAM-CANONICAL"
//	17     2    format version, u16 (1). A reader checks magic and version
//	            before anything else: every later version keeps these 19
//	            bytes, so an older reader can say "written by a newer
//	            wstream" instead of failing on the fields that follow.
//	19     2    max parallelism (number of key groups), u16, 1..32768
//	21     2    first key group of the exporting store's range, u16
//	23     2    last key group of that range (inclusive), u16
//	25     4    CRC-32C (Castagnoli) of bytes 0..24, u32
//
//	zstd content: records, then the trailer
//
//	record   := uvarint(len(body)) body          1 <= len(body) <= 64 MiB
//	body     := tag u8, fields
//
//	entry    (tag 0x01): key group u16, vertex, state name, key, namespace, value
//	timer    (tag 0x02): key group u16, vertex, domain u8 (0 event time,
//	                     1 processing time), time i64 (two's complement), key,
//	                     namespace
//	trailer  (tag 0xff): entries u64, timers u64, SHA-256 (32 bytes) of every
//	                     byte of the stream before the trailer's length
//	                     prefix: the header and all records, uncompressed
//
//	vertex, state name, key, namespace, value: uvarint(len) bytes
//
// A record's fields fill its body exactly. Records are in non-decreasing key
// group order; every key group lies in the header's range and is the key
// group of the record's key (abi.KeyGroup(key, max parallelism)). Within a
// key group ExportCanonical writes the entries, then the timers, in the
// order of the store's keys, but a reader relies on no more than key-group
// order. The trailer is the last record: nothing may follow it in the
// decompressed content, and its counts are those of the entry and timer
// records before it. Byte offsets in error messages are offsets in this
// uncompressed stream (the header's bytes are the file's first bytes too).
const CanonicalFormatVersion = 1

// CanonicalMagic starts every canonical state stream.
const CanonicalMagic = "WSTREAM-CANONICAL"

// CanonicalHeaderSize is the size of a version 1 header.
const CanonicalHeaderSize = 29

// MaxCanonicalRecord bounds a record body: larger lengths are malformed.
const MaxCanonicalRecord = 64 << 20

// Record tags. Part of the format.
const (
	canonicalTagEntry   byte = 0x01
	canonicalTagTimer   byte = 0x02
	canonicalTagTrailer byte = 0xff

	canonicalTrailerLen = 1 + 8 + 8 + sha256.Size
	// canonicalPrefixLen is the header part that every version keeps.
	canonicalPrefixLen = len(CanonicalMagic) + 2
)

// Errors of the canonical stream readers. Every error of ImportCanonical and
// ScanCanonical about the stream wraps one of them.
var (
	// ErrCanonicalCorrupt: not a canonical stream, or truncated, corrupt
	// (checksum mismatch, undecodable zstd) or malformed.
	ErrCanonicalCorrupt = errors.New("state: corrupt canonical state stream")
	// ErrCanonicalVersion: a format version this wstream does not read.
	ErrCanonicalVersion = errors.New("state: unsupported canonical format version")
	// ErrCanonicalMismatch: the stream does not fit the store (max
	// parallelism differs).
	ErrCanonicalMismatch = errors.New("state: canonical state stream does not match the store")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CanonicalHeader is the decoded header of a canonical stream.
type CanonicalHeader struct {
	Version        int
	MaxParallelism int
	// KeyGroups is the key-group range of the store that wrote the stream.
	KeyGroups abi.KeyGroupRange
}

// CanonicalRecord is one entry or timer of a canonical stream. Its byte
// slices alias the reader's buffer: they are valid only during the callback
// that receives the record.
type CanonicalRecord struct {
	Kind      KeyKind // KindEntry or KindTimer
	KeyGroup  int
	Vertex    []byte
	State     []byte // KindEntry only
	Domain    int32  // KindTimer only
	Time      int64  // KindTimer only
	Key       []byte
	Namespace []byte
	Value     []byte // KindEntry only
	// Offset is the record's byte offset in the uncompressed stream and
	// Index its position (1 for the first record after the header).
	Offset int64
	Index  int64
}

// CanonicalTrailer is what a complete, verified stream ends with.
type CanonicalTrailer struct {
	Header         CanonicalHeader
	Entries        int64
	Timers         int64
	RawBytes       int64 // uncompressed length: header, records and trailer
	SHA256         [sha256.Size]byte
	FirstKeyGroup  int // first and last key group of any record; -1 when none
	LastKeyGroup   int
	RecordsScanned int64
}

// ExportStats describe what ExportCanonical wrote.
type ExportStats struct {
	Entries, Timers int64
	// RawBytes is the uncompressed stream length (header, records,
	// trailer); CompressedBytes is what was written to the writer.
	RawBytes, CompressedBytes int64
	// PerState has the entries of each state, by "vertex/state".
	PerState map[string]StateStats
	// TimersPerVertex counts the timers of each vertex.
	TimersPerVertex map[string]int64
	// KeyGroups is the exporting store's key-group range (the header's).
	KeyGroups abi.KeyGroupRange
}

// StateStats describe the entries of one state in a canonical stream.
type StateStats struct {
	Entries int64
	Bytes   int64 // record bytes, length prefixes included
	// KeyGroups is the first to the last key group with an entry.
	KeyGroups abi.KeyGroupRange
}

// ImportStats describe what ImportCanonical wrote: entries and timers in
// the store's key-group range, and the records of other key groups that it
// skipped.
type ImportStats struct {
	Entries, Timers, Skipped int64
}

// canonicalChunk is the size of the raw-byte buffers of the writer and the
// reader: large enough that hashing and compression see big writes.
const canonicalChunk = 256 << 10

// maxImportBatch keeps an import's Pebble batch below Pebble's 4 GiB batch
// limit (where it panics).
const maxImportBatch = 3 << 30

// maxCanonicalWindow bounds the zstd window a reader accepts. The decoder
// allocates the window a frame's header declares as it starts the frame,
// up to 512 MiB for a few bytes of header; the exporting encoder declares
// at most 8 MiB at every level.
const maxCanonicalWindow = 8 << 20

// canonicalChunks is the number of raw-byte chunks in flight between the
// iteration and the compressor.
const canonicalChunks = 4

// encoderPools keep zstd encoders and chunk buffers, by level (0 default,
// 1..4 the zstd.EncoderLevel values): a new encoder allocates its block
// buffers and match tables, and savepoints export one stream per subtask.
var encoderPools [int(zstd.SpeedBestCompression) + 1]sync.Pool

// compressPipe compresses the chunks that the exporting goroutine fills in
// a goroutine of its own, with a queue of chunks between them deep enough
// that neither waits for the other's slower moments: iterating Pebble and
// hashing overlap with zstd.
type compressPipe struct {
	level  int
	enc    *zstd.Encoder
	bufs   [][]byte
	full   chan []byte
	free   chan []byte
	done   chan error
	failed atomic.Bool
}

func newCompressPipe(w io.Writer, level int) (*compressPipe, error) {
	if level < 0 || level > int(zstd.SpeedBestCompression) {
		return nil, fmt.Errorf("state: export canonical stream: zstd level %d is outside [0, %d] (0 = default)",
			level, int(zstd.SpeedBestCompression))
	}
	p, ok := encoderPools[level].Get().(*compressPipe)
	if ok {
		p.enc.Reset(w)
		p.failed.Store(false)
	} else {
		opts := []zstd.EOption{zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0))}
		if level != 0 {
			opts = append(opts, zstd.WithEncoderLevel(zstd.EncoderLevel(level)))
		}
		enc, err := zstd.NewWriter(w, opts...)
		if err != nil {
			return nil, fmt.Errorf("state: export canonical stream: zstd encoder: %w", err)
		}
		p = &compressPipe{level: level, enc: enc, done: make(chan error, 1)}
	}
	for len(p.bufs) < canonicalChunks {
		p.bufs = append(p.bufs, make([]byte, 0, canonicalChunk))
	}
	p.full = make(chan []byte, canonicalChunks)
	p.free = make(chan []byte, canonicalChunks)
	for _, b := range p.bufs[1:] {
		p.free <- b[:0]
	}
	go p.run()
	return p, nil
}

// first is the chunk the exporting goroutine starts with.
func (p *compressPipe) first() []byte { return p.bufs[0][:0] }

func (p *compressPipe) run() {
	var err error
	for b := range p.full {
		if err == nil {
			if _, err = p.enc.Write(b); err != nil {
				p.failed.Store(true)
			}
		}
		p.free <- b[:0]
	}
	if err == nil {
		err = p.enc.Close()
	}
	p.done <- err
}

// send queues b for compression and returns an empty chunk, and false
// when the compressor has failed (finish then says why).
func (p *compressPipe) send(b []byte) ([]byte, bool) {
	p.full <- b
	return <-p.free, !p.failed.Load()
}

// finish compresses what was sent, ends the zstd stream, and pools the
// encoder when all went well.
func (p *compressPipe) finish() error {
	close(p.full)
	err := <-p.done
	if err != nil {
		return err
	}
	// Keep the chunks, which may have grown for a large record, and drop
	// the reference to the caller's writer.
	// The run loop returned every chunk it got before it sent on done.
	p.bufs = p.bufs[:0]
	for len(p.free) > 0 {
		p.bufs = append(p.bufs, (<-p.free)[:0])
	}
	p.enc.Reset(io.Discard)
	encoderPools[p.level].Put(p)
	return nil
}

// AppendCanonicalHeader appends a version 1 header to dst.
func AppendCanonicalHeader(dst []byte, maxParallelism int, groups abi.KeyGroupRange) []byte {
	start := len(dst)
	dst = append(dst, CanonicalMagic...)
	dst = binary.BigEndian.AppendUint16(dst, CanonicalFormatVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(maxParallelism))
	dst = binary.BigEndian.AppendUint16(dst, uint16(groups.Start))
	dst = binary.BigEndian.AppendUint16(dst, uint16(groups.End))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// bstr views b as a string without copying, for the key-layout helpers,
// which only append it.
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func uvarintField(dst, f []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(f)))
	return append(dst, f...)
}

func fieldLen(f []byte) int { return uvarintLen(uint64(len(f))) + len(f) }

// ExportCanonical writes every state entry and timer of the store's
// key-group range (all vertices) to w as a canonical stream (see
// CanonicalFormatVersion for the layout), zstd-compressed at level
// (a zstd.EncoderLevel, 0 for the default), and returns what it wrote.
// It first writes the cached changes (Flush). Keys of other key groups that
// a rescale left in the Pebble directory belong to other subtasks and are
// not exported.
//
// It streams: one Pebble iterator fills reusable chunks of records, which a
// pooled zstd encoder compresses in another goroutine while the iteration
// goes on (see compressPipe); nothing is allocated per entry and memory does
// not grow with the state. To export while processing continues, open the store's
// Checkpoint as a Store and export that.
func (s *Store) ExportCanonical(w io.Writer, level int) (ExportStats, error) {
	st := ExportStats{KeyGroups: s.groups}
	if s.err != nil {
		return st, s.err
	}
	if err := s.Flush(); err != nil {
		return st, err
	}
	fail := func(err error) (ExportStats, error) {
		return st, fmt.Errorf("state: export canonical stream of %s: %w", s.dir, err)
	}
	cw := &countingWriter{w: w}
	ew, err := newExportWriter(cw, level)
	if err != nil {
		return st, err
	}
	defer ew.abandon()
	// The header goes out uncompressed.
	var hdr [CanonicalHeaderSize]byte
	AppendCanonicalHeader(hdr[:0], s.maxPar, s.groups)
	ew.sum.Write(hdr[:])
	if _, err := cw.Write(hdr[:]); err != nil {
		return fail(err)
	}
	ew.raw = int64(len(hdr))
	if err := s.ready(); err != nil {
		return st, err
	}
	tally := newExportTally()
	if err := s.exportRecords(ew, tally); err != nil {
		return fail(err)
	}
	if err := ew.close(tally.entries, tally.timers); err != nil {
		return fail(err)
	}
	st.Entries, st.Timers = tally.entries, tally.timers
	st.RawBytes = ew.raw
	st.CompressedBytes = cw.n
	st.PerState = make(map[string]StateStats, len(tally.perState))
	for name, ss := range tally.perState {
		st.PerState[name] = *ss
	}
	st.TimersPerVertex = tally.perVertex
	return st, nil
}

// exportRecords writes the records of every entry and timer of the store's
// key groups, in key order, to ew, counting them in tally.
func (s *Store) exportRecords(ew *exportWriter, tally *exportTally) error {
	lower, upper := KeyGroupSpan(s.groups)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k, err := DecodeKey(it.Key())
		if err != nil {
			_ = it.Close()
			return err
		}
		switch k.Kind {
		case KindEntry:
			val, err := it.ValueAndErr()
			if err == nil {
				err = ew.entry(&k, val, tally)
			}
			if err != nil {
				_ = it.Close()
				return err
			}
		case KindTimer:
			if err := ew.timer(&k, tally); err != nil {
				_ = it.Close()
				return err
			}
		}
	}
	tally.endTimerVertex()
	return it.Close()
}

// exportWriter is ExportCanonical's output past the header: records
// gathered in chunks that a compressPipe compresses, their checksum and
// their raw size.
type exportWriter struct {
	pipe     *compressPipe
	sum      hash.Hash
	buf      []byte
	raw      int64
	finished bool
}

func newExportWriter(w io.Writer, level int) (*exportWriter, error) {
	// The encoder writes nothing before the first chunk reaches it.
	pipe, err := newCompressPipe(w, level)
	if err != nil {
		return nil, err
	}
	return &exportWriter{pipe: pipe, sum: sha256.New(), buf: pipe.first()}, nil
}

// room makes room for a record of n bytes in the chunk, sending the chunk
// on when it would not fit.
func (ew *exportWriter) room(n int) error {
	if len(ew.buf)+n <= cap(ew.buf) {
		return nil
	}
	return ew.flush()
}

// flush sends the chunk to the compressor.
func (ew *exportWriter) flush() error {
	if len(ew.buf) == 0 {
		return nil
	}
	ew.sum.Write(ew.buf)
	ew.raw += int64(len(ew.buf))
	var ok bool
	if ew.buf, ok = ew.pipe.send(ew.buf); !ok {
		ew.finished = true
		return ew.pipe.finish()
	}
	return nil
}

// entry appends the record of state entry k with value val.
func (ew *exportWriter) entry(k *Key, val []byte, tally *exportTally) error {
	body := 3 + fieldLen(k.Vertex) + fieldLen(k.State) + fieldLen(k.Key) + fieldLen(k.Namespace) + fieldLen(val)
	n := uvarintLen(uint64(body)) + body
	if err := ew.room(n); err != nil {
		return err
	}
	buf := binary.AppendUvarint(ew.buf, uint64(body))
	buf = append(buf, canonicalTagEntry, byte(k.KeyGroup>>8), byte(k.KeyGroup))
	buf = uvarintField(buf, k.Vertex)
	buf = uvarintField(buf, k.State)
	buf = uvarintField(buf, k.Key)
	buf = uvarintField(buf, k.Namespace)
	ew.buf = uvarintField(buf, val)
	tally.entry(k, n)
	return nil
}

// timer appends the record of timer k.
func (ew *exportWriter) timer(k *Key, tally *exportTally) error {
	body := 3 + fieldLen(k.Vertex) + 1 + 8 + fieldLen(k.Key) + fieldLen(k.Namespace)
	n := uvarintLen(uint64(body)) + body
	if err := ew.room(n); err != nil {
		return err
	}
	buf := binary.AppendUvarint(ew.buf, uint64(body))
	buf = append(buf, canonicalTagTimer, byte(k.KeyGroup>>8), byte(k.KeyGroup))
	buf = uvarintField(buf, k.Vertex)
	buf = append(buf, byte(k.Domain))
	buf = binary.BigEndian.AppendUint64(buf, uint64(k.Time))
	buf = uvarintField(buf, k.Key)
	ew.buf = uvarintField(buf, k.Namespace)
	tally.timer(k)
	return nil
}

// close sends the last chunk and the trailer and waits for the compressor.
func (ew *exportWriter) close(entries, timers int64) error {
	if err := ew.flush(); err != nil {
		return err
	}
	// The trailer is not part of its own checksum.
	var digest [sha256.Size]byte
	ew.sum.Sum(digest[:0])
	buf := append(ew.buf, canonicalTrailerLen, canonicalTagTrailer)
	buf = binary.BigEndian.AppendUint64(buf, uint64(entries))
	buf = binary.BigEndian.AppendUint64(buf, uint64(timers))
	buf = append(buf, digest[:]...)
	ew.raw += int64(len(buf))
	ew.pipe.full <- buf
	ew.finished = true
	return ew.pipe.finish()
}

// abandon stops the compressor of an export that did not close.
func (ew *exportWriter) abandon() {
	if !ew.finished {
		_ = ew.pipe.finish()
	}
}

// exportTally counts an export's records per state and timers per vertex.
type exportTally struct {
	entries, timers int64
	perState        map[string]*StateStats
	perVertex       map[string]int64
	// cur is the state of the run of entries being exported, and
	// timerVertex the vertex of the run of timers (haveTimerVertex), with
	// timerCount of them so far.
	cur                 *StateStats
	curVertex, curState []byte
	nameBuf             []byte
	timerVertex         []byte
	timerCount          int64
	haveTimerVertex     bool
}

func newExportTally() *exportTally {
	return &exportTally{perState: make(map[string]*StateStats), perVertex: make(map[string]int64)}
}

// entry counts state entry k, whose record takes n bytes.
func (t *exportTally) entry(k *Key, n int) {
	t.entries++
	// The entries of one state are runs: look the name up once a run.
	if t.cur == nil || !bytes.Equal(k.Vertex, t.curVertex) || !bytes.Equal(k.State, t.curState) {
		t.curVertex = append(t.curVertex[:0], k.Vertex...)
		t.curState = append(t.curState[:0], k.State...)
		t.nameBuf = append(append(append(t.nameBuf[:0], k.Vertex...), '/'), k.State...)
		t.cur = t.perState[string(t.nameBuf)]
		if t.cur == nil {
			t.cur = &StateStats{KeyGroups: abi.KeyGroupRange{Start: k.KeyGroup, End: k.KeyGroup}}
			t.perState[string(t.nameBuf)] = t.cur
		}
	}
	t.cur.Entries++
	t.cur.Bytes += int64(n)
	t.cur.KeyGroups.End = k.KeyGroup
}

// timer counts timer k.
func (t *exportTally) timer(k *Key) {
	t.timers++
	if !t.haveTimerVertex || !bytes.Equal(k.Vertex, t.timerVertex) {
		t.endTimerVertex()
		t.haveTimerVertex = true
		t.timerVertex = append(t.timerVertex[:0], k.Vertex...)
	}
	t.timerCount++
}

// endTimerVertex adds the run of timers counted so far to its vertex.
func (t *exportTally) endTimerVertex() {
	if t.haveTimerVertex {
		t.perVertex[string(t.timerVertex)] += t.timerCount
	}
	t.timerCount = 0
}

// ImportCanonical reads a canonical stream and writes into the store every
// entry and timer whose key group lies in the store's range; the others are
// skipped (after a rescale they belong to other subtasks) but read and
// verified all the same. Entries and timers already in the store stay
// unless the stream has the same entry (its value then replaces theirs) or
// timer; importing a stream twice is harmless.
//
// The import is atomic: it first writes the store's cached changes (Flush),
// then writes the stream's records, in key order as ExportCanonical writes
// them, into SST files beside the store's directory (ingestWriter), which
// Pebble ingests in one step only after the trailer's counts and checksum
// verify. On any error (bad magic, a newer format version, another max
// parallelism, truncation, a checksum mismatch, a malformed record) it
// returns an error that says what and at which byte offset and record, and
// the store is as before. Memory stays bounded by a block per file,
// whatever the size of the state. Records out of key order (a stream not
// written by ExportCanonical) are collected in a Pebble batch instead,
// committed after the ingest; the batch holds them in memory, so they are
// limited to about 3 GiB per import, and the import says so when a stream
// exceeds that. Afterwards the store drops its cached entries and reads the
// timers back from Pebble as it needs them, as after Open.
func (s *Store) ImportCanonical(r io.Reader) (ImportStats, error) {
	return s.ImportCanonicalMigrating(r, nil)
}

// Migrate converts the value of an entry as it is imported (a state whose
// value layout changed): it returns the value to store, the record's own
// when it leaves it as it is. The record's slices are valid only during the
// call. An error stops the import, which then changes nothing.
type Migrate func(rec *CanonicalRecord) ([]byte, error)

// ImportCanonicalMigrating is ImportCanonical with every entry of the
// store's key groups passed through migrate (nil: none is).
func (s *Store) ImportCanonicalMigrating(r io.Reader, migrate Migrate) (ImportStats, error) {
	var st ImportStats
	if s.err != nil {
		return st, s.err
	}
	fail := func(err error) (ImportStats, error) {
		return ImportStats{}, fmt.Errorf("state: import canonical stream into %s: %w", s.dir, err)
	}
	check := func(h CanonicalHeader) error {
		if h.MaxParallelism != s.maxPar {
			return fmt.Errorf("%w: the stream has max parallelism %d (header byte 19), the store %d: state cannot be moved between jobs with different max parallelism",
				ErrCanonicalMismatch, h.MaxParallelism, s.maxPar)
		}
		return s.Flush()
	}
	if err := s.ready(); err != nil {
		return st, err
	}
	s.whole = false // entries reach Pebble past the cache
	// Records in key order, as ExportCanonical writes them, go into SST
	// files that Pebble ingests: memory stays bounded whatever the size of
	// the state, and nothing passes through the memtable or compactions.
	// A record out of order (a stream from elsewhere) goes into a batch,
	// committed after the ingest so that a later record of a key wins.
	w := s.newIngestWriter()
	defer w.abort()
	var last []byte
	sorted := 0 // records in key order so far; -1 once one was not
	b := s.db.NewBatch()
	defer b.Close()
	var keyBuf []byte
	timerGroups := abi.KeyGroupRange{Start: 1, End: 0} // empty
	_, err := scanCanonical(r, check, func(rec *CanonicalRecord) error {
		if !s.groups.Contains(rec.KeyGroup) {
			st.Skipped++
			return nil
		}
		var val []byte
		if rec.Kind == KindEntry {
			keyBuf = AppendEntryKey(keyBuf[:0], rec.KeyGroup, bstr(rec.Vertex), bstr(rec.State), rec.Key, rec.Namespace)
			val = rec.Value
			if migrate != nil {
				v, err := migrate(rec)
				if err != nil {
					return fmt.Errorf("record %d at byte %d (vertex %q, state %q): %w", rec.Index, rec.Offset, rec.Vertex, rec.State, err)
				}
				val = v
			}
			st.Entries++
		} else {
			keyBuf = AppendTimerKey(keyBuf[:0], rec.KeyGroup, bstr(rec.Vertex), rec.Domain, rec.Time, rec.Key, rec.Namespace)
			st.Timers++
			if timerGroups.Len() == 0 || rec.KeyGroup < timerGroups.Start {
				timerGroups.Start = rec.KeyGroup
			}
			timerGroups.End = max(timerGroups.End, rec.KeyGroup)
		}
		if sorted >= 0 && (sorted == 0 || bytes.Compare(keyBuf, last) > 0) {
			sorted++
			last = append(last[:0], keyBuf...)
			return w.set(keyBuf, val)
		}
		sorted = -1
		if b.Len()+len(keyBuf)+len(val)+32 > maxImportBatch {
			return fmt.Errorf("%s at byte %d: the imported state out of key order exceeds %d bytes, more than one import can hold; restore with a higher parallelism",
				fmt.Sprintf("record %d", rec.Index), rec.Offset, maxImportBatch)
		}
		return b.Set(keyBuf, val, nil)
	})
	if err != nil {
		return fail(err)
	}
	if err := w.ingest(); err != nil {
		return fail(err)
	}
	if !b.Empty() {
		// The store has no WAL: flushing the memtable makes the import
		// durable at once.
		if err := b.Commit(pebble.NoSync); err != nil {
			s.err = fmt.Errorf("state: import canonical stream into %s: commit: %w", s.dir, err)
			return st, s.err
		}
		if err := s.db.Flush(); err != nil {
			s.err = fmt.Errorf("state: import canonical stream into %s: flush: %w", s.dir, err)
			return st, s.err
		}
	}
	// Every cached entry is clean after the Flush or the ingest, and may be
	// stale now.
	s.cache.evictAll()
	if timerGroups.Len() > 0 {
		// The imported timers are in Pebble alone; the queues read them
		// from there.
		s.unloadTimers()
	}
	return st, nil
}
