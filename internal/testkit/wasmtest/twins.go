package wasmtest

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// The checks below are shared by the Go examples (examples/wasm/go) and
// their twins in the other languages, which must behave alike.

// CheckWordcount drives the split and count operators of a wordcount module
// through a small input and checks the words, the counts, the int64 state
// and that no state is left.
func CheckWordcount(t testing.TB, h *Host) {
	t.Helper()
	h.MustOpen(0, "split", "")
	h.MustOpen(1, "count", "")

	h.MustProcess(0,
		Rec("", "the quick brown fox", 10),
		Rec("", "  jumps over\tthe lazy dog\n", 11),
		Rec("", "", 12),
		Rec("", "naïve\u00a0the   end", 13), // U+00A0 is a space too
	)
	words := h.Take()
	if h.Batches != 1 {
		t.Errorf("split emitted through %d emit_batch calls, want 1", h.Batches)
	}
	var got []string
	for _, r := range words {
		got = append(got, fmt.Sprintf("%s@%d", r.Key, r.Timestamp))
		if len(r.Value) != 0 || r.Port != 0 {
			t.Errorf("word %q: value %q port %d, want empty value on port 0", r.Key, r.Value, r.Port)
		}
	}
	want := []string{"the@10", "quick@10", "brown@10", "fox@10", "jumps@11", "over@11", "the@11", "lazy@11", "dog@11", "naïve@13", "the@13", "end@13"}
	if !slices.Equal(got, want) {
		t.Fatalf("split emitted %q\nwant %q", got, want)
	}

	// Two batches, so counts carry over through state.
	h.MustProcess(1, words[:5]...)
	h.MustProcess(1, words[5:]...)
	if out := h.Take(); len(out) != 0 {
		t.Fatalf("count emitted %d records before the end of input", len(out))
	}
	if len(h.Timers) != 10 {
		t.Errorf("%d timers registered, want one per distinct word (10)", len(h.Timers))
	}
	for sk, v := range h.State {
		if sk.Key == "the" && string(v) != "\x03\x00\x00\x00\x00\x00\x00\x00" {
			t.Errorf("state of \"the\" = %q, want 3 as 8 bytes little-endian", v)
		}
	}
	h.Advance(1, abi.MaxWatermark)
	counts := map[string]string{}
	for _, r := range h.Take() {
		if r.Timestamp != math.MaxInt64 {
			t.Errorf("count for %q at ts %d, want the timer's time", r.Key, r.Timestamp)
		}
		counts[string(r.Key)] = string(r.Value)
	}
	wantCounts := map[string]string{"the": "3", "quick": "1", "brown": "1", "fox": "1", "jumps": "1", "over": "1", "lazy": "1", "dog": "1", "naïve": "1", "end": "1"}
	if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
		t.Fatalf("counts %v\nwant %v", counts, wantCounts)
	}
	if len(h.State) != 0 {
		t.Errorf("%d state entries left after the final counts, want 0", len(h.State))
	}
	h.MustClose(0)
	h.MustClose(1)
}

// BenchUpper measures one wstream_process call over a 1000-record batch of
// the upper operator of the mapfilter module h runs, emit_batch included,
// and reports the cost per record. It checks that every record was emitted
// and that the guest's memory did not grow over the run.
func BenchUpper(b *testing.B, h *Host) {
	const records = 1000
	h.Discard = true
	h.MustOpen(0, "upper", "")
	recs := make([]abi.Record, records)
	for i := range recs {
		recs[i] = Rec(fmt.Sprintf("key-%05d", i), fmt.Sprintf("the quick brown fox %05d jumps", i), int64(i))
	}
	batch := abi.Encode(recs)
	args := []uint64{0, uint64(h.Write(batch)), uint64(len(batch))}
	// Warm up: the output buffer grows to its working size on the first calls.
	for range 10 {
		if _, err := h.ProcessFn.Call(h.Ctx, args...); err != nil {
			b.Fatal(err)
		}
	}
	h.Emitted = 0
	pages, _ := h.Module.Memory().Grow(0)
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for b.Loop() {
		res, err := h.ProcessFn.Call(h.Ctx, args...)
		if err != nil || res[0] != 0 {
			b.Fatalf("process: %v %v %q", res, err, h.Failures)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
	if h.Emitted != b.N*records {
		b.Fatalf("emitted %d records, want %d", h.Emitted, b.N*records)
	}
	// The SDK allocates nothing per record: the guest heap must not grow.
	if after, _ := h.Module.Memory().Grow(0); after != pages {
		b.Errorf("guest memory grew from %d to %d pages over the run", pages, after)
	}
}

// CheckIdentityFlush opens the identity operator of a testops module in
// slot 0 and processes in, which must start with one record over 64 KiB
// followed by small ones: every record must come out as it went in, through
// two emit_batch calls (one early flush past 64 KiB, one at the end).
func CheckIdentityFlush(t testing.TB, h *Host, in []abi.Record) {
	t.Helper()
	h.MustOpen(0, "identity", "")
	h.MustProcess(0, in...)
	out := h.Take()
	if len(out) != len(in) {
		t.Fatalf("identity emitted %d records, want %d", len(out), len(in))
	}
	for i := range in {
		if string(out[i].Key) != string(in[i].Key) || string(out[i].Value) != string(in[i].Value) || out[i].Timestamp != in[i].Timestamp {
			t.Errorf("record %d: got key %q ts %d (%d value bytes), want key %q ts %d (%d)", i, out[i].Key, out[i].Timestamp, len(out[i].Value), in[i].Key, in[i].Timestamp, len(in[i].Value))
		}
	}
	// The first record pushed the buffer past 64 KiB: one early flush.
	if h.Batches != 2 {
		t.Errorf("emit_batch calls = %d, want 2 (one early flush past 64 KiB, one at the end)", h.Batches)
	}
}

// CheckUpper processes in through the upper operator of a mapfilter module,
// open in slot op, checks that it emitted want (each record as
// key=value@timestamp) and returns what it emitted.
func CheckUpper(t testing.TB, h *Host, op int32, in []abi.Record, want []string) []abi.Record {
	t.Helper()
	h.MustProcess(op, in...)
	upper := h.Take()
	var got []string
	for _, r := range upper {
		got = append(got, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("upper emitted %q, want %q", got, want)
	}
	return upper
}

// CheckIdentityBatches opens the identity operator of a testops module in
// slot 0 and checks its batching: CheckIdentityFlush with a record over
// 64 KiB and records at the extremes of time, then small records (one
// emit_batch call for all of them, however many) and an empty batch (no
// call at all).
func CheckIdentityBatches(t testing.TB, h *Host, small int) {
	t.Helper()
	CheckIdentityFlush(t, h, []abi.Record{Rec("c", strings.Repeat("v", 100<<10), math.MaxInt64), Rec("a", "1", -5), Rec("", "", math.MinInt64)})
	h.Batches = 0
	many := make([]abi.Record, small)
	for i := range many {
		many[i] = Rec(strconv.Itoa(i), "value", int64(i))
	}
	h.MustProcess(0, many...)
	if out := h.Take(); len(out) != small || h.Batches != 1 {
		t.Errorf("%d small records: %d emitted in %d emit_batch calls, want %d in 1", small, len(out), h.Batches, small)
	}
	h.Batches = 0
	h.MustProcess(0)
	if h.Batches != 0 {
		t.Errorf("an empty batch made %d emit_batch calls", h.Batches)
	}
}
