package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/wstream/wstream/abi"
)

// fuzzStores keeps one store per (max parallelism, key-group range) for a
// fuzz process: opening Pebble costs tens of milliseconds, so an input is
// imported into a store emptied by reset instead of a new one.
type fuzzStores struct {
	dir    string // below which the stores are
	stores map[[3]int]*Store
}

func newFuzzStores(tb testing.TB) *fuzzStores {
	fs := &fuzzStores{dir: tb.TempDir(), stores: map[[3]int]*Store{}}
	tb.Cleanup(func() {
		for _, s := range fs.stores {
			_ = s.Close()
		}
	})
	return fs
}

// get returns an empty store of maxPar key groups serving groups; t is
// the test in progress.
func (fs *fuzzStores) get(t testing.TB, maxPar int, groups abi.KeyGroupRange) *Store {
	k := [3]int{maxPar, groups.Start, groups.End}
	s := fs.stores[k]
	if s == nil {
		dir, err := os.MkdirTemp(fs.dir, "store")
		if err != nil {
			t.Fatal(err)
		}
		s, err = Open(Options{Dir: dir, MaxParallelism: maxPar, KeyGroups: groups, CacheEntries: 64})
		if err != nil {
			t.Fatal(err)
		}
		fs.stores[k] = s
		return s
	}
	resetStore(t, s)
	return s
}

// resetStore removes every key, cached entry and timer of s.
func resetStore(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := s.db.DeleteRange([]byte{0}, []byte{0xff, 0xff, 0xff}, pebble.NoSync); err != nil {
		tb.Fatal(err)
	}
	s.cache.evictAll()
	clear(s.dirtyBases)
	s.vertices = map[string]*VertexState{}
}

// canonicalContent is what a canonical stream holds, independent of record
// order and repetition: the last value of each entry, and the timers.
type canonicalContent struct {
	entries map[string]string
	timers  map[string]bool
	// next is the earliest timer time of each vertex and domain.
	next map[string]int64
}

func newCanonicalContent() *canonicalContent {
	return &canonicalContent{entries: map[string]string{}, timers: map[string]bool{}, next: map[string]int64{}}
}

func (c *canonicalContent) add(r *CanonicalRecord) {
	if r.Kind == KindEntry {
		c.entries[fmt.Sprintf("%d %q %q %q %q", r.KeyGroup, r.Vertex, r.State, r.Key, r.Namespace)] = string(r.Value)
		return
	}
	c.timers[fmt.Sprintf("%d %q %d %d %q %q", r.KeyGroup, r.Vertex, r.Domain, r.Time, r.Key, r.Namespace)] = true
	vd := fmt.Sprintf("%q %d", r.Vertex, r.Domain)
	if t, ok := c.next[vd]; !ok || r.Time < t {
		c.next[vd] = r.Time
	}
}

// within returns the part of c whose key groups lie in g.
func (c *canonicalContent) within(tb testing.TB, g abi.KeyGroupRange) *canonicalContent {
	out := newCanonicalContent()
	kgOf := func(k string) int {
		var kg int
		if _, err := fmt.Sscanf(k, "%d ", &kg); err != nil {
			tb.Fatal(err)
		}
		return kg
	}
	for k, v := range c.entries {
		if g.Contains(kgOf(k)) {
			out.entries[k] = v
		}
	}
	for k := range c.timers {
		if g.Contains(kgOf(k)) {
			out.timers[k] = true
		}
	}
	return out
}

// scanContent scans a stream, returning what it holds.
func scanContent(r io.Reader) (*canonicalContent, CanonicalTrailer, error) {
	c := newCanonicalContent()
	tr, err := ScanCanonical(r, func(rec CanonicalRecord) error {
		c.add(&rec)
		return nil
	})
	return c, tr, err
}

// checkCanonicalStream checks the readers of a canonical stream: a scan
// allocates memory in proportion to the stream's content, ScanCanonical
// and ImportCanonical agree on whether it is valid, errors wrap the
// package's sentinels, and a valid stream restores: imported into a store
// of the whole key-group range it exports again with the same content and
// timers, and imported into a store of half the range it holds exactly that
// half.
func checkCanonicalStream(t *testing.T, stores *fuzzStores, stream []byte) {
	var (
		want *canonicalContent
		tr   CanonicalTrailer
		err  error
	)
	used := allocated(func() { want, tr, err = scanContent(bytes.NewReader(stream)) })
	// What a scan allocates is bounded by what the stream decompresses
	// to, not by lengths it claims.
	if n := rawLength(stream, 1<<30); used > uint64(32<<20)+4*uint64(n) {
		t.Fatalf("scanning %d bytes that decompress to %d allocated %d bytes", len(stream), n, used)
	}
	if err != nil {
		if !errors.Is(err, ErrCanonicalCorrupt) && !errors.Is(err, ErrCanonicalVersion) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		return
	}
	h := tr.Header
	// A stream may repeat an entry or timer: the trailer counts records.
	if int64(len(want.entries)) > tr.Entries || int64(len(want.timers)) > tr.Timers {
		t.Fatalf("trailer counts %d entries and %d timers, the stream has %d and %d distinct ones",
			tr.Entries, tr.Timers, len(want.entries), len(want.timers))
	}
	if tr.RawBytes < CanonicalHeaderSize+canonicalTrailerLen+1 || (tr.FirstKeyGroup < 0) != (tr.Entries+tr.Timers == 0) {
		t.Fatalf("implausible trailer %+v", tr)
	}
	full := abi.KeyGroupRange{Start: 0, End: h.MaxParallelism - 1}
	s := stores.get(t, h.MaxParallelism, full)
	st, err := s.ImportCanonical(bytes.NewReader(stream))
	if err != nil {
		t.Fatalf("ScanCanonical accepts the stream, ImportCanonical does not: %v", err)
	}
	if st.Entries != tr.Entries || st.Timers != tr.Timers || st.Skipped != 0 {
		t.Fatalf("imported %+v, the trailer counts %d entries and %d timers", st, tr.Entries, tr.Timers)
	}
	for vd, ts := range want.next {
		var vertex string
		var domain int32
		if _, err := fmt.Sscanf(vd, "%q %d", &vertex, &domain); err != nil {
			t.Fatal(err)
		}
		if got, ok := s.Vertex(vertex, true).NextTimer(domain); !ok || got != ts {
			t.Fatalf("vertex %q domain %d: next timer %d (%v) after the import, want %d", vertex, domain, got, ok, ts)
		}
	}
	var out bytes.Buffer
	if _, err := s.ExportCanonical(&out, 1); err != nil {
		t.Fatalf("export after import: %v", err)
	}
	got, _, err := scanContent(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("the export of an imported stream does not scan: %v", err)
	}
	sameContent(t, "export after import", got, want)

	if h.MaxParallelism > 1 {
		half := abi.KeyGroupRange{Start: 0, End: h.MaxParallelism/2 - 1}
		s := stores.get(t, h.MaxParallelism, half)
		st, err := s.ImportCanonical(bytes.NewReader(stream))
		if err != nil {
			t.Fatalf("import into key groups %v: %v", half, err)
		}
		if st.Entries+st.Timers+st.Skipped != tr.Entries+tr.Timers {
			t.Fatalf("imported %+v into key groups %v, the trailer counts %d entries and %d timers", st, half, tr.Entries, tr.Timers)
		}
		out.Reset()
		if _, err := s.ExportCanonical(&out, 1); err != nil {
			t.Fatalf("export after import: %v", err)
		}
		got, _, err := scanContent(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("the export of an imported stream does not scan: %v", err)
		}
		sameContent(t, fmt.Sprintf("export of key groups %v", half), got, want.within(t, half))
	}
}

func sameContent(t *testing.T, what string, got, want *canonicalContent) {
	t.Helper()
	if !maps.Equal(got.entries, want.entries) {
		t.Fatalf("%s: entries differ:\n got %v\nwant %v", what, got.entries, want.entries)
	}
	if !maps.Equal(got.timers, want.timers) {
		t.Fatalf("%s: timers differ:\n got %v\nwant %v", what, slices.Sorted(maps.Keys(got.timers)), slices.Sorted(maps.Keys(want.timers)))
	}
}

// fuzzExports returns real exports: of an empty store, and of stores of one
// and of the default number of key groups holding entries and timers, at
// two compression levels.
func fuzzExports(tb testing.TB) [][]byte {
	var out [][]byte
	for _, maxPar := range []int{1, abi.DefaultMaxParallelism} {
		s, err := Open(Options{Dir: tb.TempDir(), MaxParallelism: maxPar, KeyGroups: abi.KeyGroupRange{Start: 0, End: maxPar - 1}})
		if err != nil {
			tb.Fatal(err)
		}
		for _, fill := range []bool{false, true} {
			if fill {
				agg := s.Vertex("agg", true)
				count := mustRegister(tb, agg, "count", abi.StateValue)
				seen := mustRegister(tb, agg, "seen", abi.StateMap)
				for i := range 6 {
					k := "k" + strconv.Itoa(i)
					mustPut(tb, agg, count, k, "", strconv.Itoa(i))
					mustPut(tb, agg, seen, k, "n"+strconv.Itoa(i), "")
					mustTimer(tb, agg, int32(i%2), k, "w", int64(i*100-250))
				}
			}
			for _, level := range []int{0, 1} {
				var b bytes.Buffer
				if _, err := s.ExportCanonical(&b, level); err != nil {
					tb.Fatal(err)
				}
				out = append(out, b.Bytes())
			}
		}
		if err := s.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// rawLength is the length of what the zstd content of a stream
// decompresses to, or of its part that does before an error, up to limit.
func rawLength(stream []byte, limit int64) int64 {
	if len(stream) < CanonicalHeaderSize {
		return 0
	}
	dec, err := zstd.NewReader(bytes.NewReader(stream[CanonicalHeaderSize:]), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return 0
	}
	defer dec.Close()
	n, _ := io.Copy(io.Discard, io.LimitReader(dec, limit))
	return n
}

// FuzzScanCanonical feeds arbitrary bytes to the canonical stream readers,
// with the checks of checkCanonicalStream.
func FuzzScanCanonical(f *testing.F) {
	for _, e := range fuzzExports(f) {
		for _, s := range truncationsAndFlips(e) {
			f.Add(s)
		}
	}
	hdr := AppendCanonicalHeader(nil, 128, abi.KeyGroupRange{Start: 0, End: 127})
	f.Add(hdr)
	f.Add(AppendCanonicalHeader(nil, 0, abi.KeyGroupRange{Start: 1, End: 0}))
	f.Add([]byte(CanonicalMagic + "\x00\x02"))
	f.Add([]byte("WSTREAM"))
	stores := newFuzzStores(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		checkCanonicalStream(t, stores, stream)
	})
}

// sealCanonical builds a stream of content (records without the trailer)
// under a header of maxPar key groups, with the trailer a valid stream of
// those records would have: the fuzzer's edits of the records reach the
// record checks instead of stopping at the checksum. The zstd content is
// two frames, split after content[:split] (a stream may have several).
func sealCanonical(enc *zstd.Encoder, maxPar int, content []byte, split int) []byte {
	hdr := AppendCanonicalHeader(nil, maxPar, abi.KeyGroupRange{Start: 0, End: maxPar - 1})
	var entries, timers uint64
	for rest := content; len(rest) > 0; {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n == 0 || n > uint64(len(rest)-w) {
			break
		}
		switch rest[w] {
		case canonicalTagEntry:
			entries++
		case canonicalTagTimer:
			timers++
		}
		rest = rest[w+int(n):]
	}
	sum := sha256.New()
	sum.Write(hdr)
	sum.Write(content)
	raw := append(slices.Clone(content), canonicalTrailerLen, canonicalTagTrailer)
	raw = binary.BigEndian.AppendUint64(raw, entries)
	raw = binary.BigEndian.AppendUint64(raw, timers)
	raw = sum.Sum(raw)
	split = min(max(split, 0), len(content))
	return enc.EncodeAll(raw[split:], enc.EncodeAll(raw[:split], hdr))
}

// FuzzCanonicalRecords fuzzes the records of a canonical stream under a
// valid header and trailer (see sealCanonical), with the checks of
// checkCanonicalStream. Records of one key group (maxPar 1) pass the
// key-group checks whatever their keys; the others test those checks.
func FuzzCanonicalRecords(f *testing.F) {
	d, err := zstd.NewReader(nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range fuzzExports(f) {
		h, err := ReadCanonicalHeader(bytes.NewReader(e))
		if err != nil {
			f.Fatal(err)
		}
		raw, err := d.DecodeAll(e[CanonicalHeaderSize:], nil)
		if err != nil {
			f.Fatal(err)
		}
		content := raw[:len(raw)-1-canonicalTrailerLen]
		sel := uint8(0)
		if h.MaxParallelism > 1 {
			sel = 2
		}
		for _, s := range truncationsAndFlips(content) {
			f.Add(s, sel, uint16(len(s)))
			f.Add(s, sel, uint16(len(s)/2))
		}
	}
	d.Close()
	f.Add(entryRecord(0, "v", "s", "k", "", "value"), uint8(0), uint16(3))
	f.Add(slices.Concat(entryRecord(0, "v", "s", "k", "", "1"), entryRecord(0, "v", "s", "k", "", "2")), uint8(0), uint16(0))
	f.Add([]byte{0x0c, canonicalTagTimer, 0, 0, 1, 'v', 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0}, uint8(0), uint16(0))
	f.Add([]byte{0x0c, canonicalTagTimer, 0, 0, 1, 'v', 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(0), uint16(0))
	// A record length of 64 MiB in a frame of its own: the rest of the
	// record never comes.
	f.Add([]byte{0x80, 0x80, 0x80, 0x20}, uint8(0), uint16(4))
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		f.Fatal(err)
	}
	stores := newFuzzStores(f)
	f.Fuzz(func(t *testing.T, content []byte, sel uint8, split uint16) {
		maxPar := []int{1, 2, abi.DefaultMaxParallelism}[int(sel)%3]
		checkCanonicalStream(t, stores, sealCanonical(enc, maxPar, content, int(split)))
	})
}

// FuzzDecodeKey checks that DecodeKey refuses what the key encoders cannot
// produce and that it inverts them: a key it accepts encodes back to
// itself.
func FuzzDecodeKey(f *testing.F) {
	f.Add(AppendEntryKey(nil, 5, "vertex", "state", []byte("key"), []byte("ns")))
	f.Add(AppendEntryKey(nil, 0, "", "", nil, nil))
	f.Add(AppendTimerKey(nil, 127, "v", abi.TimeProcessing, -1, []byte("key"), nil))
	f.Add(AppendTimerKey(nil, abi.MaxMaxParallelism-1, "v", abi.TimeEvent, 1<<62, nil, []byte{0xff}))
	f.Add([]byte{0x80, 0, 1, 0x80, 0})
	f.Add([]byte{0, 1, 2, 0x81, 0x00})
	f.Fuzz(func(t *testing.T, k []byte) {
		d, err := DecodeKey(k)
		if err != nil {
			if !errors.Is(err, ErrMalformedKey) {
				t.Fatalf("error does not wrap ErrMalformedKey: %v", err)
			}
			return
		}
		var again []byte
		switch d.Kind {
		case KindEntry:
			again = AppendEntryKey(nil, d.KeyGroup, string(d.Vertex), string(d.State), d.Key, d.Namespace)
		case KindTimer:
			again = AppendTimerKey(nil, d.KeyGroup, string(d.Vertex), d.Domain, d.Time, d.Key, d.Namespace)
		default:
			t.Fatalf("decoded kind %v", d.Kind)
		}
		if !bytes.Equal(again, k) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", k, d, again)
		}
	})
}

// truncationsAndFlips returns data, some of its prefixes and copies with a
// bit flipped.
func truncationsAndFlips(data []byte) [][]byte {
	out := [][]byte{data}
	for _, n := range []int{0, 1, 19, CanonicalHeaderSize, CanonicalHeaderSize + 4, len(data) / 2, len(data) - 1} {
		if n >= 0 && n < len(data) {
			out = append(out, data[:n])
		}
	}
	for i := 1; i < 6 && len(data) > 0; i++ {
		b := bytes.Clone(data)
		b[i*len(data)/6] ^= 1 << i
		out = append(out, b)
	}
	return out
}

// TestCanonicalBoundsZstdWindow pins a fuzz finding: a stream of a few
// dozen bytes whose zstd frame declares a large window made a scan
// allocate that window (up to 512 MiB) before any record.
func TestCanonicalBoundsZstdWindow(t *testing.T) {
	stream := AppendCanonicalHeader(nil, 1, abi.KeyGroupRange{Start: 0, End: 0})
	// Window descriptor 0x98: 2^29 bytes; then one raw block of one byte.
	stream = append(stream, 0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x98, 0x09, 0x00, 0x00, 0x01)
	var err error
	used := allocated(func() { _, _, err = scanContent(bytes.NewReader(stream)) })
	if !errors.Is(err, ErrCanonicalCorrupt) {
		t.Errorf("scan: %v, want an error wrapping ErrCanonicalCorrupt", err)
	}
	if used > 16<<20 {
		t.Errorf("scanning %d bytes allocated %d bytes", len(stream), used)
	}
}

// TestCanonicalRecordLengthAllocatesWithData pins a bug: a record length
// (up to 64 MiB) made the reader allocate a buffer of that size at once,
// before the record's bytes arrived, whatever the stream held.
func TestCanonicalRecordLengthAllocatesWithData(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The length in a frame of its own, so that the decoder has more to
	// give when the reader asks for the record.
	stream := sealCanonical(enc, 1, []byte{0x80, 0x80, 0x80, 0x20}, 4)
	used := allocated(func() { _, _, err = scanContent(bytes.NewReader(stream)) })
	if !errors.Is(err, ErrCanonicalCorrupt) {
		t.Errorf("scan: %v, want an error wrapping ErrCanonicalCorrupt", err)
	}
	if used > 16<<20 {
		t.Errorf("scanning %d bytes allocated %d bytes", len(stream), used)
	}
}

// TestExportFitsZstdWindow keeps the exporter within the window readers
// accept (maxCanonicalWindow): a frame declares its window whatever its
// size.
func TestExportFitsZstdWindow(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	for i := range 256 {
		mustPut(t, v, h, "k"+strconv.Itoa(i), "", strings.Repeat(strconv.Itoa(i), 2000))
	}
	for level := 0; level <= 4; level++ {
		var b bytes.Buffer
		if _, err := s.ExportCanonical(&b, level); err != nil {
			t.Fatal(err)
		}
		var zh zstd.Header
		if err := zh.Decode(b.Bytes()[CanonicalHeaderSize:]); err != nil {
			t.Fatal(err)
		}
		if zh.WindowSize > maxCanonicalWindow {
			t.Errorf("level %d writes a window of %d bytes, readers accept %d", level, zh.WindowSize, maxCanonicalWindow)
		}
	}
}
