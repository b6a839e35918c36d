package state

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// fillCanonical writes value, map and namespaced state and timers of two
// vertices into s (whose range must be fullRange) and leaves the last
// writes unflushed.
func fillCanonical(t testing.TB, s *Store, keys int) {
	t.Helper()
	agg := s.Vertex("agg", true)
	count := mustRegister(t, agg, "count", abi.StateValue)
	seen := mustRegister(t, agg, "seen", abi.StateMap)
	win := s.Vertex("win", true)
	sum := mustRegister(t, win, "sum", abi.StateValue)
	for i := range keys {
		k := "user-" + strconv.Itoa(i)
		mustPut(t, agg, count, k, "", strconv.Itoa(i*7))
		for j := range i % 4 {
			mustPut(t, agg, seen, k, "item-"+strconv.Itoa(j), strings.Repeat("v", j))
		}
		for w := range 2 {
			ns := binary.BigEndian.AppendUint64(nil, uint64(1000*(i%5+w)))
			mustPut(t, win, sum, k, string(ns), fmt.Sprintf("sum=%d", i+w))
			mustTimer(t, win, abi.TimeEvent, k, string(ns), int64(1000*(i%5+w)+999))
		}
		if i%10 == 0 {
			mustTimer(t, agg, abi.TimeProcessing, k, "", -int64(i)-1)
		}
		if i == keys/2 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An empty value and a deletion that must not be exported.
	mustPut(t, agg, count, "empty", "", "")
	mustPut(t, agg, count, "gone", "", "x")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := agg.StateDelete(count, []byte("gone"), nil); err != nil {
		t.Fatal(err)
	}
	mustPut(t, agg, count, "unflushed", "", "still cached")
}

// dump returns every key and value in the store's Pebble directory.
func dump(t testing.TB, s *Store) map[string]string {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	m := make(map[string]string)
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	return m
}

// popAll pops every timer of both domains of vertex id.
func popAll(t testing.TB, s *Store, id string) []string {
	t.Helper()
	v := s.Vertex(id, true)
	var out []string
	for _, d := range []int32{abi.TimeEvent, abi.TimeProcessing} {
		for {
			got := pop(t, v, d, math.MaxInt64)
			if len(got) == 0 {
				break
			}
			for _, g := range got {
				out = append(out, fmt.Sprintf("%d@%s", d, g))
			}
		}
	}
	return out
}

func export(t testing.TB, s *Store) ([]byte, ExportStats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := s.ExportCanonical(&buf, 0)
	if err != nil {
		t.Fatalf("ExportCanonical: %v", err)
	}
	if st.CompressedBytes != int64(buf.Len()) {
		t.Fatalf("CompressedBytes = %d, wrote %d", st.CompressedBytes, buf.Len())
	}
	return buf.Bytes(), st
}

func mustImport(t testing.TB, s *Store, stream []byte) ImportStats {
	t.Helper()
	st, err := s.ImportCanonical(bytes.NewReader(stream))
	if err != nil {
		t.Fatalf("ImportCanonical: %v", err)
	}
	return st
}

func sameMaps(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			d, _ := DecodeKey([]byte(k))
			t.Fatalf("%s: missing %+v", what, d)
		}
		if g != v {
			t.Fatalf("%s: key %x = %q, want %q", what, k, g, v)
		}
	}
}

func TestCanonicalRoundTripSameRange(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 300)
	stream, st := export(t, src)
	want := dump(t, src)

	var entries, timers int64
	for k := range want {
		d, err := DecodeKey([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == KindEntry {
			entries++
		} else {
			timers++
		}
	}
	if st.Entries != entries || st.Timers != timers {
		t.Fatalf("stats: %d entries, %d timers; the store has %d and %d", st.Entries, st.Timers, entries, timers)
	}
	if st.KeyGroups != fullRange || st.RawBytes <= st.CompressedBytes {
		t.Fatalf("stats: %+v", st)
	}
	// 300 count entries plus "empty" and "unflushed"; "gone" is deleted.
	if got := st.PerState["agg/count"]; got.Entries != 302 || got.Bytes <= 0 || got.KeyGroups.Start > got.KeyGroups.End {
		t.Fatalf("agg/count stats %+v", got)
	}
	if got := st.PerState["agg/seen"].Entries; got != 75*(0+1+2+3) {
		t.Fatalf("agg/seen has %d entries", got)
	}
	if got := st.PerState["win/sum"].Entries; got != 600 {
		t.Fatalf("win/sum has %d entries", got)
	}
	if len(st.PerState) != 3 || st.TimersPerVertex["win"] != 600 || st.TimersPerVertex["agg"] != 30 {
		t.Fatalf("per state %v, timers per vertex %v", st.PerState, st.TimersPerVertex)
	}

	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	is := mustImport(t, dst, stream)
	if is != (ImportStats{Entries: entries, Timers: timers}) {
		t.Fatalf("import stats %+v", is)
	}
	sameMaps(t, "imported", dump(t, dst), want)

	// The state reads back through the vertex API.
	agg := dst.Vertex("agg", true)
	count := mustRegister(t, agg, "count", abi.StateValue)
	seen := mustRegister(t, agg, "seen", abi.StateMap)
	if v, err := agg.StateGet(count, []byte("user-17"), nil, nil); err != nil || string(v) != "119" {
		t.Fatalf("count of user-17 = %q, %v", v, err)
	}
	if v, err := agg.StateGet(count, []byte("unflushed"), nil, nil); err != nil || string(v) != "still cached" {
		t.Fatalf("unflushed = %q, %v", v, err)
	}
	if _, err := agg.StateGet(count, []byte("gone"), nil, nil); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	var items []string
	if err := agg.StateIter(seen, []byte("user-3"), nil, nil, func(ns, v []byte) bool {
		items = append(items, string(ns)+"="+string(v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(items, ",") != "item-0=,item-1=v,item-2=vv" {
		t.Fatalf("map entries of user-3: %q", items)
	}

	// Timers fire after the import, in the same order as in the source.
	for _, id := range []string{"win", "agg"} {
		got, want := popAll(t, dst, id), popAll(t, src, id)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Fatalf("timers of %s after import: %d, want %d (%.5q vs %.5q)", id, len(got), len(want), got, want)
		}
	}
}

// TestCanonicalImportTwice: a second import of the same stream changes
// nothing, and does not duplicate timers in the queues.
func TestCanonicalImportTwice(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 50)
	stream, _ := export(t, src)
	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	mustImport(t, dst, stream)
	mustImport(t, dst, stream)
	sameMaps(t, "imported twice", dump(t, dst), dump(t, src))
	if got, want := popAll(t, dst, "win"), popAll(t, src, "win"); !slices.Equal(got, want) {
		t.Fatalf("timers: %d, want %d", len(got), len(want))
	}
}

// TestCanonicalImportReplacesCachedValues: values cached by the target
// before the import are not served afterwards.
func TestCanonicalImportReplacesCachedValues(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	v := src.Vertex("agg", true)
	h := mustRegister(t, v, "count", abi.StateValue)
	mustPut(t, v, h, "a", "", "new")
	mustPut(t, v, h, "b", "", "new")
	stream, _ := export(t, src)

	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	dv := dst.Vertex("agg", true)
	dh := mustRegister(t, dv, "count", abi.StateValue)
	mustPut(t, dv, dh, "a", "", "old")            // cached, unflushed
	_, _ = dv.StateGet(dh, []byte("b"), nil, nil) // cached absence
	mustImport(t, dst, stream)
	for _, k := range []string{"a", "b"} {
		if got, err := dv.StateGet(dh, []byte(k), nil, nil); err != nil || string(got) != "new" {
			t.Fatalf("%s after import = %q, %v", k, got, err)
		}
	}
}

// importInto imports stream into one new store per range and returns them.
func importInto(t testing.TB, stream []byte, ranges []abi.KeyGroupRange) []*Store {
	t.Helper()
	var stores []*Store
	var total ImportStats
	for _, r := range ranges {
		s := openStore(t, t.TempDir(), r)
		t.Cleanup(func() { closeStore(t, s) })
		st := mustImport(t, s, stream)
		total.Entries += st.Entries
		total.Timers += st.Timers
		total.Skipped += st.Skipped
		for k := range dump(t, s) {
			d, _ := DecodeKey([]byte(k))
			if !r.Contains(d.KeyGroup) {
				t.Fatalf("store of %v got key group %d", r, d.KeyGroup)
			}
		}
		stores = append(stores, s)
	}
	all := total.Entries + total.Timers
	if total.Skipped != all*int64(len(ranges)-1) {
		t.Fatalf("imported %d, skipped %d over %d stores", all, total.Skipped, len(ranges))
	}
	return stores
}

func ranges(parallelism int) []abi.KeyGroupRange {
	var rs []abi.KeyGroupRange
	for i := range parallelism {
		rs = append(rs, abi.RangeForSubtask(i, parallelism, abi.DefaultMaxParallelism))
	}
	return rs
}

// union merges the dumps of stores, failing on a key held twice.
func union(t testing.TB, stores []*Store) map[string]string {
	t.Helper()
	m := make(map[string]string)
	for _, s := range stores {
		for k, v := range dump(t, s) {
			if _, dup := m[k]; dup {
				t.Fatalf("key %x in two stores", k)
			}
			m[k] = v
		}
	}
	return m
}

func TestCanonicalRescaleOneToTwo(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 300)
	stream, _ := export(t, src)
	want := dump(t, src)

	stores := importInto(t, stream, ranges(2))
	sameMaps(t, "union of 2", union(t, stores), want)
	for _, s := range stores {
		if len(dump(t, s)) == 0 {
			t.Fatalf("store of %v got nothing", s.KeyGroups())
		}
	}
	// Every timer fires in exactly one of the two.
	for _, id := range []string{"win", "agg"} {
		var got []string
		for _, s := range stores {
			got = append(got, popAll(t, s, id)...)
		}
		wantTimers := popAll(t, src, id)
		slices.Sort(got)
		slices.Sort(wantTimers)
		if !slices.Equal(got, wantTimers) {
			t.Fatalf("timers of %s: %d, want %d", id, len(got), len(wantTimers))
		}
	}
}

func TestCanonicalRescaleOneToFourToOne(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 300)
	stream, _ := export(t, src)
	want := dump(t, src)

	four := importInto(t, stream, ranges(4))
	sameMaps(t, "union of 4", union(t, four), want)

	one := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, one)
	var got ImportStats
	for i, s := range four {
		part, st := export(t, s)
		if st.KeyGroups != s.KeyGroups() {
			t.Fatalf("export of %v says %v", s.KeyGroups(), st.KeyGroups)
		}
		tr, err := ScanCanonical(bytes.NewReader(part), func(CanonicalRecord) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if r := ranges(4)[i]; tr.Header.KeyGroups != r || tr.FirstKeyGroup < r.Start || tr.LastKeyGroup > r.End {
			t.Fatalf("part %d: %+v", i, tr)
		}
		is := mustImport(t, one, part)
		got.Entries += is.Entries
		got.Timers += is.Timers
		if is.Skipped != 0 {
			t.Fatalf("merge skipped %d", is.Skipped)
		}
	}
	sameMaps(t, "merged back", dump(t, one), want)
	if got.Entries+got.Timers != int64(len(want)) {
		t.Fatalf("merge imported %d, want %d", got.Entries+got.Timers, len(want))
	}
	gotTimers, wantTimers := popAll(t, one, "win"), popAll(t, src, "win")
	if !slices.Equal(gotTimers, wantTimers) {
		t.Fatalf("timers after 1→4→1: %d, want %d", len(gotTimers), len(wantTimers))
	}
}

func TestCanonicalScan(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 40)
	stream, st := export(t, src)

	h, err := ReadCanonicalHeader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if h != (CanonicalHeader{Version: 1, MaxParallelism: abi.DefaultMaxParallelism, KeyGroups: fullRange}) {
		t.Fatalf("header %+v", h)
	}
	var n, timers int64
	prev := -1
	tr, err := ScanCanonical(bytes.NewReader(stream), func(r CanonicalRecord) error {
		n++
		if r.Index != n || r.KeyGroup < prev || r.Offset < CanonicalHeaderSize {
			t.Fatalf("record %+v after key group %d", r, prev)
		}
		prev = r.KeyGroup
		if r.Kind == KindTimer {
			timers++
			if string(r.Vertex) == "agg" && (r.Domain != abi.TimeProcessing || r.Time >= 0) {
				t.Fatalf("timer %+v", r)
			}
		} else if string(r.Vertex) == "agg" && string(r.State) == "count" && string(r.Key) == "user-3" && string(r.Value) != "21" {
			t.Fatalf("entry %+v", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Entries != st.Entries || tr.Timers != st.Timers || timers != st.Timers || tr.RawBytes != st.RawBytes {
		t.Fatalf("trailer %+v, export %+v", tr, st)
	}
	stop := errors.New("stop")
	if _, err := ScanCanonical(bytes.NewReader(stream), func(CanonicalRecord) error { return stop }); err != stop {
		t.Fatalf("callback error: %v", err)
	}
}

func TestCanonicalEmptyStoreAndLevels(t *testing.T) {
	src := openStore(t, t.TempDir(), abi.KeyGroupRange{Start: 5, End: 9})
	defer closeStore(t, src)
	stream, st := export(t, src)
	if st.Entries != 0 || st.Timers != 0 || st.RawBytes != CanonicalHeaderSize+1+canonicalTrailerLen {
		t.Fatalf("empty export %+v", st)
	}
	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	if is := mustImport(t, dst, stream); is != (ImportStats{}) {
		t.Fatalf("empty import %+v", is)
	}

	fillCanonical(t, dst, 20)
	want := dump(t, dst)
	for level := range int(zstd.SpeedBestCompression) + 1 {
		var buf bytes.Buffer
		if _, err := dst.ExportCanonical(&buf, level); err != nil {
			t.Fatalf("level %d: %v", level, err)
		}
		s := openStore(t, t.TempDir(), fullRange)
		mustImport(t, s, buf.Bytes())
		sameMaps(t, "level "+strconv.Itoa(level), dump(t, s), want)
		closeStore(t, s)
	}
	var out bytes.Buffer
	if _, err := dst.ExportCanonical(&out, 9); err == nil || !strings.Contains(err.Error(), "level 9") || out.Len() != 0 {
		t.Fatalf("export at level 9: %v, wrote %d bytes", err, out.Len())
	}
}

func TestCanonicalClosedStore(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	closeStore(t, s)
	if _, err := s.ExportCanonical(io.Discard, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("export: %v", err)
	}
	if _, err := s.ImportCanonical(bytes.NewReader(nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("import: %v", err)
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after < len(p) {
		return 0, errors.New("disk full")
	}
	f.after -= len(p)
	return len(p), nil
}

func TestCanonicalExportWriteError(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	fillCanonical(t, s, 100)
	for _, after := range []int{0, 100} {
		if _, err := s.ExportCanonical(&failingWriter{after: after}, 0); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("export to a failing writer: %v", err)
		}
	}
	// The store still exports.
	export(t, s)
}

// splitStream returns a stream's header and decompressed content.
func splitStream(t testing.TB, stream []byte) (hdr, raw []byte) {
	t.Helper()
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw, err = d.DecodeAll(stream[CanonicalHeaderSize:], nil)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(stream[:CanonicalHeaderSize]), raw
}

func joinStream(t testing.TB, hdr, raw []byte) []byte {
	t.Helper()
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.EncodeAll(raw, slices.Clone(hdr))
}

// records splits decompressed content into its records, length prefixes
// included; the trailer is the last.
func records(t testing.TB, raw []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(raw) > 0 {
		n, w := binary.Uvarint(raw)
		if w <= 0 || int(n)+w > len(raw) {
			t.Fatalf("bad record length at %x", raw[:min(len(raw), 16)])
		}
		out = append(out, raw[:w+int(n)])
		raw = raw[w+int(n):]
	}
	return out
}

// rebuild assembles a stream from a header and records (no trailer) with a
// trailer that counts entries and timers and checksums what precedes it.
func rebuild(t testing.TB, hdr []byte, recs [][]byte, entries, timers uint64) []byte {
	t.Helper()
	raw := slices.Concat(recs...)
	sum := sha256.Sum256(slices.Concat(hdr, raw))
	raw = append(raw, canonicalTrailerLen, canonicalTagTrailer)
	raw = binary.BigEndian.AppendUint64(raw, entries)
	raw = binary.BigEndian.AppendUint64(raw, timers)
	raw = append(raw, sum[:]...)
	return joinStream(t, hdr, raw)
}

func entryRecord(kg int, vertex, state, key, ns, value string) []byte {
	body := []byte{canonicalTagEntry, byte(kg >> 8), byte(kg)}
	for _, f := range []string{vertex, state, key, ns, value} {
		body = uvarintField(body, []byte(f))
	}
	return append(binary.AppendUvarint(nil, uint64(len(body))), body...)
}

func TestCanonicalImportErrors(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 100)
	stream, st := export(t, src)
	hdr, raw := splitStream(t, stream)
	recs := records(t, raw)
	body := recs[:len(recs)-1] // without the trailer
	entries, timers := uint64(st.Entries), uint64(st.Timers)
	// The first record whose key group differs from the first one's.
	var later int
	for i, r := range body {
		if r[2] != body[0][2] || r[3] != body[0][3] {
			later = i
			break
		}
	}
	// The last value byte of an entry with a value: the record still parses.
	valueFlipped := slices.Clone(raw)
	at := 0
	for _, r := range body {
		var rec CanonicalRecord
		_, w := binary.Uvarint(r)
		if err := parseCanonicalRecord(r[w:], &rec); err != nil {
			t.Fatal(err)
		}
		at += len(r)
		if rec.Kind == KindEntry && len(rec.Value) > 0 {
			break
		}
	}
	valueFlipped[at-1] ^= 0x01
	k0 := keyIn(t, "k", 0)

	with := func(b []byte, i int, v byte) []byte {
		b = slices.Clone(b)
		b[i] = v
		return b
	}
	cases := []struct {
		name   string
		stream []byte
		is     error
		says   []string
	}{
		{"bad magic", with(stream, 0, 'X'), ErrCanonicalCorrupt, []string{"not a wstream canonical state stream", "byte 0"}},
		{"empty input", nil, ErrCanonicalCorrupt, []string{"header truncated at byte 0"}},
		{"not a stream at all", []byte("hello, world"), ErrCanonicalCorrupt, []string{"not a wstream canonical"}},
		{"version 2", with(stream, 18, 2), ErrCanonicalVersion, []string{"format version 2", "newer wstream", "reads version 1"}},
		{"version 0", with(stream, 18, 0), ErrCanonicalVersion, []string{"version 0"}},
		{"header checksum", with(stream, 22, stream[22]^0x40), ErrCanonicalCorrupt, []string{"header checksum mismatch at byte 25"}},
		{"truncated header", stream[:20], ErrCanonicalCorrupt, []string{"header truncated at byte 20"}},
		{"header only", stream[:CanonicalHeaderSize], ErrCanonicalCorrupt, []string{"truncated", "record 1 at byte 29"}},
		{"truncated compressed stream", stream[:len(stream)/2], ErrCanonicalCorrupt, []string{"record", "at byte"}},
		{"last byte missing", stream[:len(stream)-1], ErrCanonicalCorrupt, []string{"byte"}},
		{"truncated content", joinStream(t, hdr, raw[:len(raw)/2]), ErrCanonicalCorrupt, []string{"truncated: the stream ends at byte", "record"}},
		{"no trailer", joinStream(t, hdr, raw[:len(raw)-len(recs[len(recs)-1])]), ErrCanonicalCorrupt, []string{"truncated", "a complete stream ends with a trailer"}},
		{"flipped compressed byte", with(stream, len(stream)/2, stream[len(stream)/2]^0x10), ErrCanonicalCorrupt, []string{"at byte"}},
		{"flipped value byte", joinStream(t, hdr, valueFlipped), ErrCanonicalCorrupt, []string{"checksum mismatch", "altered or damaged"}},
		{"trailer counts", rebuild(t, hdr, body, entries+1, timers), ErrCanonicalCorrupt, []string{"the trailer counts"}},
		{"data after the trailer", joinStream(t, hdr, slices.Concat(raw, body[0])), ErrCanonicalCorrupt, []string{"data after the trailer"}},
		{"key-group order", rebuild(t, hdr, slices.Concat(body[later:later+1], body[:later], body[later+1:]), entries, timers),
			ErrCanonicalCorrupt, []string{"record 2 at byte", "key-group order"}},
		{"key in another key group", rebuild(t, hdr, [][]byte{entryRecord(1, "v", "s", string(k0), "", "x")}, 1, 0),
			ErrCanonicalCorrupt, []string{"record 1 at byte 29", "is in key group 0, the record says 1"}},
		{"unknown tag", rebuild(t, hdr, [][]byte{with(entryRecord(0, "v", "s", string(k0), "", "x"), 1, 0x07)}, 1, 0),
			ErrCanonicalCorrupt, []string{"record 1 at byte 29", "unknown record tag 0x07"}},
		{"field overrun", rebuild(t, hdr, [][]byte{with(entryRecord(0, "v", "s", string(k0), "", "x"), 4, 0x7f)}, 1, 0),
			ErrCanonicalCorrupt, []string{"record 1", "vertex id of 127 bytes overruns the record"}},
		{"trailing field bytes", rebuild(t, hdr, [][]byte{append(with(entryRecord(0, "v", "s", string(k0), "", "x"), 0, byte(len(entryRecord(0, "v", "s", string(k0), "", "x")))), 0)}, 1, 0),
			ErrCanonicalCorrupt, []string{"record 1", "1 bytes after the last field"}},
		{"huge record", joinStream(t, hdr, binary.AppendUvarint(nil, MaxCanonicalRecord+1)), ErrCanonicalCorrupt, []string{"record 1 at byte 29", "outside [1, 67108864]"}},
		{"empty record", joinStream(t, hdr, []byte{0}), ErrCanonicalCorrupt, []string{"record length 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := openStore(t, filepath.Join(t.TempDir(), "db"), fullRange)
			defer closeStore(t, dst)
			v := dst.Vertex("agg", true)
			h := mustRegister(t, v, "count", abi.StateValue)
			mustPut(t, v, h, "pre", "", "existing")
			mustTimer(t, v, abi.TimeEvent, "pre", "", 5)
			before := dump(t, dst)

			is, err := dst.ImportCanonical(bytes.NewReader(c.stream))
			if err == nil {
				t.Fatalf("import succeeded: %+v", is)
			}
			t.Log(err)
			if !errors.Is(err, c.is) {
				t.Fatalf("error %v is not %v", err, c.is)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not say %q", err, s)
				}
			}
			if is != (ImportStats{}) {
				t.Fatalf("failed import reports %+v", is)
			}
			// Nothing of the stream reached the store.
			sameMaps(t, "after a failed import", dump(t, dst), before)
			if _, err := v.StateGet(h, []byte("user-1"), nil, nil); !errors.Is(err, operator.ErrNotFound) {
				t.Fatalf("user-1 after a failed import: %v", err)
			}
			expectTimers(t, pop(t, v, abi.TimeEvent, math.MaxInt64), "5:pre/")
			if ts, ok := dst.Vertex("win", true).NextTimer(abi.TimeEvent); ok {
				t.Fatalf("a timer at %d of the failed import is queued", ts)
			}
			// ScanCanonical refuses the same streams.
			if _, err := ScanCanonical(bytes.NewReader(c.stream), func(CanonicalRecord) error { return nil }); !errors.Is(err, c.is) {
				t.Fatalf("ScanCanonical: %v", err)
			}
		})
	}
}

func TestCanonicalImportWrongMaxParallelism(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 10)
	stream, _ := export(t, src)

	dst, err := Open(Options{Dir: t.TempDir(), MaxParallelism: 256, KeyGroups: abi.KeyGroupRange{Start: 0, End: 255}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, dst)
	before := dump(t, dst)
	_, err = dst.ImportCanonical(bytes.NewReader(stream))
	if !errors.Is(err, ErrCanonicalMismatch) || !strings.Contains(err.Error(), "max parallelism 128") || !strings.Contains(err.Error(), "store 256") {
		t.Fatalf("import into max parallelism 256: %v", err)
	}
	sameMaps(t, "after a refused import", dump(t, dst), before)
}

// TestCanonicalExportAllocations: the export does not allocate per entry.
func TestCanonicalExportAllocations(t *testing.T) {
	allocs := func(keys int) float64 {
		s := openStore(t, t.TempDir(), fullRange)
		defer closeStore(t, s)
		fillCanonical(t, s, keys)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		export(t, s) // warm the encoder pool
		return testing.AllocsPerRun(3, func() {
			if _, err := s.ExportCanonical(io.Discard, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(200), allocs(4000)
	// 4000 keys are about 15000 more records than 200.
	if large > small+500 {
		t.Fatalf("export allocates %.0f times for 200 keys, %.0f for 4000", small, large)
	}
}

// BenchmarkCanonicalExport compares the export's throughput of raw stream
// bytes with compressing the same bytes with zstd directly (same level and
// concurrency), in one run, and reports both and their ratio.
func BenchmarkCanonicalExport(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), KeyGroups: fullRange})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	v := s.Vertex("sessions", true)
	h := mustRegister(b, v, "profile", abi.StateValue)
	m := mustRegister(b, v, "events", abi.StateMap)
	const keys = 100_000
	for i := range keys {
		k := "user-" + strconv.Itoa(i)
		mustPut(b, v, h, k, "", fmt.Sprintf(`{"id":%d,"name":"user %d","score":%d,"region":"eu-%d","active":%t}`, i, i, i*37%1009, i%7, i%3 == 0))
		for j := range 2 {
			mustPut(b, v, m, k, "ev-"+strconv.Itoa(j), fmt.Sprintf("click:%d:%d", i*j, i%13))
		}
		if i%5000 == 4999 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Settle the LSM, so that background compactions do not compete with
	// the measurement.
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	lower, upper := KeyGroupSpan(fullRange)
	if err := s.db.Compact(context.Background(), lower, upper, true); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := s.ExportCanonical(&buf, 0)
	if err != nil {
		b.Fatal(err)
	}
	hdr, raw := splitStream(b, buf.Bytes())
	raw = slices.Concat(hdr, raw)
	if int64(len(raw)) != st.RawBytes {
		b.Fatalf("raw %d, stats %d", len(raw), st.RawBytes)
	}
	enc, err := zstd.NewWriter(io.Discard, zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		b.Fatal(err)
	}
	var exportTime, zstdTime time.Duration
	b.SetBytes(st.RawBytes)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.ExportCanonical(io.Discard, 0); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		enc.Reset(io.Discard)
		if _, err := enc.Write(raw); err != nil {
			b.Fatal(err)
		}
		if err := enc.Close(); err != nil {
			b.Fatal(err)
		}
		exportTime += t1.Sub(t0)
		zstdTime += time.Since(t1)
	}
	n := float64(b.N) * float64(st.RawBytes) / 1e6
	b.ReportMetric(n/exportTime.Seconds(), "export-MB/s")
	b.ReportMetric(n/zstdTime.Seconds(), "zstd-MB/s")
	b.ReportMetric(zstdTime.Seconds()/exportTime.Seconds(), "export/zstd")
	b.ReportMetric(float64(st.RawBytes)/float64(st.CompressedBytes), "ratio-raw/compressed")
}

// TestCanonicalLargeRecords: records larger than the writer's and reader's
// chunks, and streams of many chunks, round-trip.
func TestCanonicalLargeRecords(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	v := src.Vertex("blob", true)
	h := mustRegister(t, v, "data", abi.StateValue)
	big := bytes.Repeat([]byte("0123456789abcdef"), (3*canonicalChunk)/16+5)
	for i := range 3 {
		if err := v.StatePut(h, []byte("big-"+strconv.Itoa(i)), nil, big[i:]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20_000 {
		mustPut(t, v, h, "small-"+strconv.Itoa(i), "", strings.Repeat("x", i%50))
	}
	stream, st := export(t, src)
	if st.RawBytes < 4*canonicalChunk {
		t.Fatalf("stream of %d raw bytes spans too few chunks", st.RawBytes)
	}
	for _, r := range [][]abi.KeyGroupRange{{fullRange}, ranges(3)} {
		sameMaps(t, "large records", union(t, importInto(t, stream, r)), dump(t, src))
	}
}
