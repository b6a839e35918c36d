package wasmtest

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

// Format writes records one a line as "PORT KEY=VALUE@TS", the form the
// tests state the records they want in.
func Format(recs []abi.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %s=%s@%d", r.Port, r.Key, r.Value, r.Timestamp))
	}
	return out
}

// WantRecords fails the test unless got, formatted by Format, is want.
// The message is cut short: some scripts emit thousands of records.
func WantRecords(t testing.TB, what string, got []abi.Record, want ...string) {
	t.Helper()
	if g := Format(got); !slices.Equal(g, want) {
		t.Fatalf("%s emitted\n%.3000s\nwant\n%.3000s", what, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// WantFailure fails the test unless a call returned status without a trap
// and the guest failed with exactly one message containing want. It then
// forgets the failure, so that the next check of the same Host starts
// clean.
func WantFailure(t testing.TB, h *Host, what string, st int32, err error, status int32, want string) {
	t.Helper()
	if err != nil || st != status {
		t.Fatalf("%s: status %d (%s), error %v; want %d (%s)", what, st, abi.StatusText(st), err, status, abi.StatusText(status))
	}
	if len(h.Failures) != 1 || !strings.Contains(h.Failures[0], want) {
		t.Fatalf("%s: failures %q, want one containing %q", what, h.Failures, want)
	}
	h.Failures = nil
}

// StateByName returns h's state keyed by state name rather than handle,
// and a copy of its timers, so that two modules that registered their
// states in another order still compare equal.
func StateByName(h *Host) (map[string]string, map[TimerKey]bool) {
	names := map[int32]string{}
	for name, hd := range h.States {
		names[hd] = name
	}
	state := map[string]string{}
	for sk, v := range h.State {
		state[fmt.Sprintf("%s/%q/%x", names[sk.Handle], sk.Key, sk.NS)] = fmt.Sprintf("%x", v)
	}
	return state, maps.Clone(h.Timers)
}

// Same fails the test unless a module of l and its Go twin emitted the
// same records, byte for byte and in the same order.
func (l Lang) Same(t testing.TB, what string, got, goRecs []abi.Record) {
	t.Helper()
	if len(got) != len(goRecs) {
		t.Fatalf("%s: %s emitted %d records, Go %d", what, l.Name, len(got), len(goRecs))
	}
	for i := range got {
		r, g := got[i], goRecs[i]
		if r.Port != g.Port || r.Timestamp != g.Timestamp || string(r.Key) != string(g.Key) || string(r.Value) != string(g.Value) {
			t.Fatalf("%s: record %d: %s %d %d %q=%q, Go %d %d %q=%q", what, i, l.Name, r.Port, r.Timestamp, r.Key, r.Value, g.Port, g.Timestamp, g.Key, g.Value)
		}
	}
}

// SpacePieces are the pieces RandomLines builds lines from: words, every
// kind of white space Go's unicode.IsSpace knows and near misses of their
// UTF-8 encodings. A language's tests add the near misses and invalid UTF-8
// its SDK's split must get right, so the list is where they start.
var SpacePieces = []string{
	"a", "bb", "word", "naïve", "日本", "x\u200by", // U+200B is not a space
	" ", "\t", "\n", "\v", "\f", "\r", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2005", "\u200a",
	"\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
	"\u2030", "\u3001", "\u1681", "\u00a1", "\u0084",
}

// RandomLines makes n records, each a line of up to eleven pieces drawn
// from SpacePieces and then extra, at timestamps 0 to n-1. It draws from a
// fixed seed, so every run gets the same lines.
func RandomLines(n int, extra ...string) []abi.Record {
	pieces := append(slices.Clone(SpacePieces), extra...)
	rnd := rand.New(rand.NewPCG(1, 2))
	recs := make([]abi.Record, n)
	for i := range recs {
		var b strings.Builder
		for range rnd.IntN(12) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		recs[i] = Rec("", b.String(), int64(i))
	}
	return recs
}

// CompareWordcount runs the split and count operators of l's wordcount and
// of its Go twin on lines and checks that they emit the same bytes: the
// words, and the counts after the end of input. Count gets the words in two
// batches, so that the counts go through state, and must emit nothing
// before the end of input; both modules must keep the same state and
// timers until then, and none after.
func (l Lang) CompareWordcount(t *testing.T, lines []abi.Record) {
	t.Helper()
	split := func(module string) []abi.Record {
		h := l.New(t, module)
		h.MustOpen(0, "split", "")
		h.MustProcess(0, lines...)
		return h.Take()
	}
	words := split("wordcount")
	l.Same(t, "split", words, split("go/wordcount"))
	if len(words) < len(lines) {
		t.Fatalf("split emitted only %d words from %d lines", len(words), len(lines))
	}

	type counted struct {
		out    []abi.Record
		state  map[StateKey][]byte
		timers map[TimerKey]bool
	}
	count := func(module string) counted {
		h := l.New(t, module)
		h.MustOpen(0, "split", "")
		h.MustOpen(1, "count", "")
		h.MustProcess(0, lines...)
		words := h.Take()
		h.MustProcess(1, words[:len(words)/2]...)
		h.MustProcess(1, words[len(words)/2:]...)
		if out := h.Take(); len(out) != 0 {
			t.Fatalf("%s: count emitted %d records before the end of input", module, len(out))
		}
		if len(h.Timers) == 0 {
			t.Fatalf("%s: count registered no timers", module)
		}
		c := counted{state: maps.Clone(h.State), timers: maps.Clone(h.Timers)}
		h.Advance(1, abi.MaxWatermark)
		c.out = h.Take()
		if len(h.State) != 0 {
			t.Errorf("%s: %d state entries left after the end of input", module, len(h.State))
		}
		return c
	}
	c, g := count("wordcount"), count("go/wordcount")
	if !maps.EqualFunc(c.state, g.state, bytes.Equal) || !maps.Equal(c.timers, g.timers) {
		t.Fatalf("count state or timers differ:\n%s %v %v\nGo %v %v", l.Name, c.state, c.timers, g.state, g.timers)
	}
	l.Same(t, "count", c.out, g.out)
}
