package state

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

var fullRange = abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}

func openStore(t testing.TB, dir string, groups abi.KeyGroupRange) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, KeyGroups: groups})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func closeStore(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// keyIn returns a key (with the given prefix) that hashes to key group kg.
func keyIn(t testing.TB, prefix string, kg int) []byte {
	t.Helper()
	for i := range 1 << 20 {
		k := []byte(fmt.Sprintf("%s-%d", prefix, i))
		if abi.KeyGroup(k, abi.DefaultMaxParallelism) == kg {
			return k
		}
	}
	t.Fatalf("no key with prefix %q in key group %d", prefix, kg)
	return nil
}

func mustRegister(t testing.TB, v *VertexState, name string, kind int32) int32 {
	t.Helper()
	h, err := v.RegisterState(name, kind)
	if err != nil {
		t.Fatalf("RegisterState(%q, %d): %v", name, kind, err)
	}
	return h
}

func mustPut(t testing.TB, v *VertexState, h int32, key, ns, val string) {
	t.Helper()
	if err := v.StatePut(h, []byte(key), []byte(ns), []byte(val)); err != nil {
		t.Fatalf("StatePut(%q, %q): %v", key, ns, err)
	}
}

func mustDelete(t testing.TB, v *VertexState, h int32, key, ns string) {
	t.Helper()
	if err := v.StateDelete(h, []byte(key), []byte(ns)); err != nil {
		t.Fatalf("StateDelete(%q, %q): %v", key, ns, err)
	}
}

// expectGet checks the value of (key, ns); want "" with absent=true means
// operator.ErrNotFound.
func expectGet(t testing.TB, v *VertexState, h int32, key, ns, want string, absent bool) {
	t.Helper()
	got, err := v.StateGet(h, []byte(key), []byte(ns), nil)
	switch {
	case absent && !errors.Is(err, operator.ErrNotFound):
		t.Fatalf("StateGet(%q, %q) = %q, %v; want ErrNotFound", key, ns, got, err)
	case !absent && (err != nil || string(got) != want):
		t.Fatalf("StateGet(%q, %q) = %q, %v; want %q", key, ns, got, err, want)
	}
}

func flush(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestValueStateAcrossFlushAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("counter", true)
	h := mustRegister(t, v, "count", abi.StateValue)

	expectGet(t, v, h, "a", "", "", true)
	mustPut(t, v, h, "a", "", "1")
	mustPut(t, v, h, "b", "", "2")
	expectGet(t, v, h, "a", "", "1", false) // own write before Flush
	mustPut(t, v, h, "a", "", "11")
	expectGet(t, v, h, "a", "", "11", false)
	flush(t, s)
	expectGet(t, v, h, "a", "", "11", false)
	mustDelete(t, v, h, "b", "")
	expectGet(t, v, h, "b", "", "", true) // delete visible before Flush
	mustPut(t, v, h, "c", "", "")         // empty value is a value
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("counter", true)
	h = mustRegister(t, v, "count", abi.StateValue)
	expectGet(t, v, h, "a", "", "11", false)
	expectGet(t, v, h, "b", "", "", true)
	expectGet(t, v, h, "c", "", "", false)
}

func TestWritesReachPebbleOnlyOnFlush(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "n", "val")
	pk := AppendEntryKey(nil, abi.KeyGroup([]byte("k"), abi.DefaultMaxParallelism), "v", "s", []byte("k"), []byte("n"))
	if _, _, err := s.db.Get(pk); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("before Flush, Pebble Get = %v; want not found (write-back)", err)
	}
	flush(t, s)
	val, closer, err := s.db.Get(pk)
	if err != nil {
		t.Fatalf("after Flush, Pebble Get: %v", err)
	}
	if string(val) != "val" {
		t.Fatalf("Pebble holds %q, want %q", val, "val")
	}
	closer.Close()
	mustDelete(t, v, h, "k", "n")
	flush(t, s)
	if _, _, err := s.db.Get(pk); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("after delete and Flush, Pebble Get = %v; want not found", err)
	}
}

func TestNamespacesStatesAndVerticesAreSeparate(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v1, v2 := s.Vertex("one", true), s.Vertex("two", true)
	a := mustRegister(t, v1, "a", abi.StateValue)
	b := mustRegister(t, v1, "b", abi.StateValue)
	a2 := mustRegister(t, v2, "a", abi.StateValue)
	mustPut(t, v1, a, "k", "", "v1.a")
	mustPut(t, v1, a, "k", "w1", "v1.a.w1")
	mustPut(t, v1, b, "k", "", "v1.b")
	mustPut(t, v2, a2, "k", "", "v2.a")
	flush(t, s)
	expectGet(t, v1, a, "k", "", "v1.a", false)
	expectGet(t, v1, a, "k", "w1", "v1.a.w1", false)
	expectGet(t, v1, a, "k", "w2", "", true)
	expectGet(t, v1, b, "k", "", "v1.b", false)
	expectGet(t, v2, a2, "k", "", "v2.a", false)
	mustDelete(t, v1, a, "k", "")
	expectGet(t, v1, a, "k", "w1", "v1.a.w1", false)
	expectGet(t, v2, a2, "k", "", "v2.a", false)
}

func TestStateGetReusesDst(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "", "hello")
	dst := make([]byte, 3, 16)
	got, err := v.StateGet(h, []byte("k"), nil, dst)
	if err != nil || string(got) != "hello" {
		t.Fatalf("StateGet = %q, %v", got, err)
	}
	if &got[0] != &dst[:1][0] {
		t.Fatal("StateGet did not reuse dst")
	}
	key := []byte("k")
	if n := testing.AllocsPerRun(100, func() { _, _ = v.StateGet(h, key, nil, dst) }); n != 0 {
		t.Fatalf("StateGet of a cached key: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = v.StatePut(h, key, nil, got) }); n != 0 {
		t.Fatalf("StatePut of a cached key: %v allocations, want 0", n)
	}
}

// collect returns the entries StateIter yields as "ns=value" strings.
func collect(t testing.TB, v *VertexState, h int32, key, prefix string, after []byte) []string {
	t.Helper()
	var out []string
	err := v.StateIter(h, []byte(key), []byte(prefix), after, func(ns, val []byte) bool {
		out = append(out, string(ns)+"="+string(val))
		return true
	})
	if err != nil {
		t.Fatalf("StateIter(%q, %q, %q): %v", key, prefix, after, err)
	}
	return out
}

func expectEntries(t testing.TB, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("entries = %q, want %q", got, want)
	}
}

func TestMapStateIteration(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, fullRange)
	v := s.Vertex("m", true)
	h := mustRegister(t, v, "map", abi.StateMap)
	for _, ns := range []string{"b1", "a", "b2", "b", "c", "b\xff", "b3"} {
		mustPut(t, v, h, "k", ns, "v"+ns)
	}
	mustPut(t, v, h, "k2", "b1", "other key") // same prefix, another key
	mustPut(t, v, h, "k\x00", "b1", "other key")

	// Unflushed writes are visible.
	expectEntries(t, collect(t, v, h, "k", "", nil), "a=va", "b=vb", "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff", "c=vc")
	expectEntries(t, collect(t, v, h, "k", "b", nil), "b=vb", "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff")
	expectEntries(t, collect(t, v, h, "k", "b", []byte("b1")), "b2=vb2", "b3=vb3", "b\xff=vb\xff")
	expectEntries(t, collect(t, v, h, "k", "b", []byte("b")), "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff")
	expectEntries(t, collect(t, v, h, "k", "b", []byte("a")), "b=vb", "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff")
	expectEntries(t, collect(t, v, h, "k", "b", []byte("b\xff")))
	expectEntries(t, collect(t, v, h, "k", "", []byte{}), "a=va", "b=vb", "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff", "c=vc")
	expectEntries(t, collect(t, v, h, "k", "", []byte("b")), "b1=vb1", "b2=vb2", "b3=vb3", "b\xff=vb\xff", "c=vc")
	expectEntries(t, collect(t, v, h, "k", "z", nil))
	expectEntries(t, collect(t, v, h, "absent", "", nil))

	// Interleave unflushed deletes and puts with iteration.
	mustDelete(t, v, h, "k", "b2")
	mustPut(t, v, h, "k", "b1", "new")
	mustPut(t, v, h, "k", "b0", "vb0")
	expectEntries(t, collect(t, v, h, "k", "b", nil), "b=vb", "b0=vb0", "b1=new", "b3=vb3", "b\xff=vb\xff")
	mustDelete(t, v, h, "k", "b")
	expectEntries(t, collect(t, v, h, "k", "b", nil), "b0=vb0", "b1=new", "b3=vb3", "b\xff=vb\xff")

	// Stopping early.
	n := 0
	if err := v.StateIter(h, []byte("k"), nil, nil, func(ns, val []byte) bool { n++; return n < 2 }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("fn called %d times after returning false at 2", n)
	}
	closeStore(t, s)

	s = openStore(t, dir, fullRange)
	defer closeStore(t, s)
	v = s.Vertex("m", true)
	h = mustRegister(t, v, "map", abi.StateMap)
	expectEntries(t, collect(t, v, h, "k", "", nil), "a=va", "b0=vb0", "b1=new", "b3=vb3", "b\xff=vb\xff", "c=vc")
	expectEntries(t, collect(t, v, h, "k2", "", nil), "b1=other key")
}

// fn may use the state while iterating; it sees the entries as of the start.
func TestStateIterAllowsStateCallsInCallback(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("m", true)
	h := mustRegister(t, v, "map", abi.StateMap)
	for i := range 5 {
		mustPut(t, v, h, "k", fmt.Sprint(i), fmt.Sprint(i))
	}
	var seen []string
	err := v.StateIter(h, []byte("k"), nil, nil, func(ns, val []byte) bool {
		seen = append(seen, string(ns))
		// Overwrite the key buffer, write and delete while iterating.
		if _, err := v.StateGet(h, []byte("other"), ns, nil); !errors.Is(err, operator.ErrNotFound) {
			t.Errorf("StateGet in callback: %v", err)
		}
		if err := v.StatePut(h, []byte("k"), append([]byte("x"), ns...), val); err != nil {
			t.Errorf("StatePut in callback: %v", err)
		}
		if err := v.StateDelete(h, []byte("k"), []byte("4")); err != nil {
			t.Errorf("StateDelete in callback: %v", err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	expectEntries(t, seen, "0", "1", "2", "3", "4")
	expectEntries(t, collect(t, v, h, "k", "", nil), "0=0", "1=1", "2=2", "3=3", "x0=0", "x1=1", "x2=2", "x3=3", "x4=4")
}

// A small hot-key cache evicts; evicted entries come back from Pebble.
func TestEvictedEntriesAreReadFromPebble(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, CacheEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	for i := range 100 {
		mustPut(t, v, h, fmt.Sprint(i), "", fmt.Sprint("v", i))
		if i%10 == 9 {
			flush(t, s)
		}
	}
	if s.cache.live > 4 {
		t.Fatalf("cache holds %d entries after Flush, capacity 4", s.cache.live)
	}
	for i := range 100 {
		expectGet(t, v, h, fmt.Sprint(i), "", fmt.Sprint("v", i), false)
	}
	for i := range 100 {
		mustDelete(t, v, h, fmt.Sprint(i), "")
	}
	flush(t, s)
	for i := range 100 {
		expectGet(t, v, h, fmt.Sprint(i), "", "", true)
	}
}

func TestRegisterState(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	a := mustRegister(t, v, "a", abi.StateValue)
	b := mustRegister(t, v, "b", abi.StateMap)
	if a == b {
		t.Fatalf("two states share handle %d", a)
	}
	if again := mustRegister(t, v, "a", abi.StateValue); again != a {
		t.Fatalf("re-registering returned %d, want %d", again, a)
	}
	mustRegister(t, v, strings.Repeat("n", operator.MaxNameSize), abi.StateValue)
	cases := []struct {
		name string
		kind int32
		want error
	}{
		{"a", abi.StateMap, operator.ErrBadArgument},
		{"c", 0, operator.ErrBadArgument},
		{"c", 3, operator.ErrBadArgument},
		{"", abi.StateValue, operator.ErrBadArgument},
		{strings.Repeat("n", operator.MaxNameSize+1), abi.StateValue, operator.ErrLimit},
	}
	for _, c := range cases {
		if _, err := v.RegisterState(c.name, c.kind); !errors.Is(err, c.want) {
			t.Errorf("RegisterState(%.10q, %d) = %v, want %v", c.name, c.kind, err, c.want)
		}
	}
	for _, h := range []int32{-1, 3, 100} {
		if _, err := v.StateGet(h, []byte("k"), nil, nil); !errors.Is(err, operator.ErrBadHandle) || operator.Status(err) != abi.StatusBadHandle {
			t.Errorf("StateGet(handle %d) = %v, want ErrBadHandle", h, err)
		}
	}
}

func TestVertexIdentity(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	if s.Vertex("x", true) != s.Vertex("x", true) {
		t.Fatal("same vertex id returned different values")
	}
	if s.Vertex("x", true) == s.Vertex("y", true) {
		t.Fatal("different vertex ids returned the same value")
	}
	if got := s.Vertex("x", true).ID(); got != "x" {
		t.Fatalf("ID = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Vertex with a different keyed flag did not panic")
		}
	}()
	s.Vertex("x", false)
}

// allCalls runs every state and timer call of v with key and returns their
// errors by name.
func allCalls(v *VertexState, h int32, key []byte) map[string]error {
	return map[string]error{
		"StateGet":      func() error { _, err := v.StateGet(h, key, nil, nil); return err }(),
		"StatePut":      v.StatePut(h, key, nil, []byte("x")),
		"StateDelete":   v.StateDelete(h, key, nil),
		"StateIter":     v.StateIter(h, key, nil, nil, func(_, _ []byte) bool { return true }),
		"RegisterTimer": v.RegisterTimer(abi.TimeEvent, key, nil, 1),
		"DeleteTimer":   v.DeleteTimer(abi.TimeEvent, key, nil, 1),
	}
}

func TestKeyGroupRefusal(t *testing.T) {
	owned := abi.KeyGroupRange{Start: 10, End: 20}
	s := openStore(t, t.TempDir(), owned)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateMap)
	for _, kg := range []int{0, 9, 21, 127} {
		for call, err := range allCalls(v, h, keyIn(t, "out", kg)) {
			if !errors.Is(err, operator.ErrKeyGroup) || operator.Status(err) != abi.StatusKeyGroup {
				t.Errorf("%s with a key of group %d: %v, want ErrKeyGroup", call, kg, err)
			}
		}
	}
	for _, kg := range []int{10, 15, 20} {
		for call, err := range allCalls(v, h, keyIn(t, "in", kg)) {
			if err != nil && !errors.Is(err, operator.ErrNotFound) {
				t.Errorf("%s with a key of owned group %d: %v", call, kg, err)
			}
		}
	}
}

func TestUnkeyedVertexHasNoKeyedState(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", false)
	if _, err := v.RegisterState("s", abi.StateValue); !errors.Is(err, operator.ErrNoKeyedState) {
		t.Fatalf("RegisterState: %v, want ErrNoKeyedState", err)
	}
	for call, err := range allCalls(v, 0, []byte("k")) {
		if !errors.Is(err, operator.ErrNoKeyedState) || operator.Status(err) != abi.StatusNoKeyedState {
			t.Errorf("%s: %v, want ErrNoKeyedState", call, err)
		}
	}
	if n, err := v.PopTimers(abi.TimeEvent, abi.MaxWatermark, &abi.Builder{}); n != 0 || err != nil {
		t.Fatalf("PopTimers = %d, %v", n, err)
	}
}

func TestLimits(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateMap)
	maxKey := bytes.Repeat([]byte{'k'}, operator.MaxKeySize)
	bigKey := append(maxKey, 'k')
	maxVal := make([]byte, operator.MaxValueSize)
	maxVal[len(maxVal)-1] = 7

	if err := v.StatePut(h, maxKey, maxKey, maxVal); err != nil {
		t.Fatalf("StatePut at the limits: %v", err)
	}
	flush(t, s)
	got, err := v.StateGet(h, maxKey, maxKey, nil)
	if err != nil || !bytes.Equal(got, maxVal) {
		t.Fatalf("StateGet at the limits: %d bytes, %v", len(got), err)
	}
	if err := v.RegisterTimer(abi.TimeEvent, maxKey, maxKey, 1); err != nil {
		t.Fatalf("RegisterTimer at the limits: %v", err)
	}

	over := map[string]error{
		"put value": v.StatePut(h, []byte("k"), nil, append(maxVal, 0)),
		"put key":   v.StatePut(h, bigKey, nil, nil),
		"put ns":    v.StatePut(h, []byte("k"), bigKey, nil),
		"get key":   func() error { _, err := v.StateGet(h, bigKey, nil, nil); return err }(),
		"delete ns": v.StateDelete(h, []byte("k"), bigKey),
		"iter key":  v.StateIter(h, bigKey, nil, nil, func(_, _ []byte) bool { return true }),
		"iter pfx":  v.StateIter(h, []byte("k"), bigKey, nil, func(_, _ []byte) bool { return true }),
		"iter from": v.StateIter(h, []byte("k"), nil, bigKey, func(_, _ []byte) bool { return true }),
		"timer key": v.RegisterTimer(abi.TimeEvent, bigKey, nil, 1),
		"timer ns":  v.DeleteTimer(abi.TimeEvent, []byte("k"), bigKey, 1),
	}
	for what, err := range over {
		if !errors.Is(err, operator.ErrLimit) || operator.Status(err) != abi.StatusLimit {
			t.Errorf("%s over the limit: %v, want ErrLimit", what, err)
		}
	}
}

func TestClosedStore(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	closeStore(t, s)
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	for call, err := range allCalls(v, h, []byte("k")) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", call, err)
		}
	}
	if _, err := v.PopTimers(abi.TimeEvent, 0, &abi.Builder{}); !errors.Is(err, ErrClosed) {
		t.Errorf("PopTimers after Close: %v", err)
	}
}

func TestOpenValidatesOptions(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]Options{
		"no dir":            {KeyGroups: fullRange},
		"negative max par":  {Dir: dir, MaxParallelism: -1, KeyGroups: fullRange},
		"max par too large": {Dir: dir, MaxParallelism: abi.MaxMaxParallelism + 1, KeyGroups: fullRange},
		"range past max":    {Dir: dir, KeyGroups: abi.KeyGroupRange{Start: 0, End: 128}},
		"negative start":    {Dir: dir, KeyGroups: abi.KeyGroupRange{Start: -1, End: 3}},
		"empty range":       {Dir: dir, KeyGroups: abi.KeyGroupRange{Start: 4, End: 3}},
		"negative cache":    {Dir: dir, KeyGroups: fullRange, CacheEntries: -1},
	}
	for name, o := range cases {
		if s, err := Open(o); err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "state: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	s, err := Open(Options{Dir: dir + "/nested/dir", MaxParallelism: 4, KeyGroups: abi.KeyGroupRange{Start: 0, End: 3}})
	if err != nil {
		t.Fatalf("Open with a missing directory: %v", err)
	}
	defer closeStore(t, s)
	if s.Dir() != dir+"/nested/dir" || s.MaxParallelism() != 4 || s.KeyGroups() != (abi.KeyGroupRange{Start: 0, End: 3}) {
		t.Fatalf("Dir %q, MaxParallelism %d, KeyGroups %v", s.Dir(), s.MaxParallelism(), s.KeyGroups())
	}
}

// recordingLogger captures Pebble's messages.
type recordingLogger struct{ msgs []string }

func (l *recordingLogger) Infof(f string, a ...any)  { l.msgs = append(l.msgs, fmt.Sprintf(f, a...)) }
func (l *recordingLogger) Errorf(f string, a ...any) { l.msgs = append(l.msgs, fmt.Sprintf(f, a...)) }
func (l *recordingLogger) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func TestLoggerAndSharedCache(t *testing.T) {
	cache := pebble.NewCache(1 << 20)
	defer cache.Unref()
	var log recordingLogger
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Cache: cache, Logger: &log})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "", "v")
	flush(t, s)
	// Force a memtable flush, which Pebble logs.
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	if len(log.msgs) == 0 {
		t.Fatal("the given logger received no Pebble messages")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "boom 7") {
			t.Fatalf("quietLogger.Fatalf recovered %v, want a panic with the message", r)
		}
	}()
	quietLogger{}.Fatalf("boom %d", 7)
}

func TestStateIterEmptyNamespaceAndAfter(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("m", true)
	h := mustRegister(t, v, "map", abi.StateMap)
	mustPut(t, v, h, "k", "", "empty")
	mustPut(t, v, h, "k", "\x00", "zero")
	mustPut(t, v, h, "k", "a", "a")
	expectEntries(t, collect(t, v, h, "k", "", nil), "=empty", "\x00=zero", "a=a")
	// A non-nil empty after excludes only the empty namespace.
	expectEntries(t, collect(t, v, h, "k", "", []byte{}), "\x00=zero", "a=a")
	expectEntries(t, collect(t, v, h, "k", "", []byte{0}), "a=a")
}

// Iterating a key without unflushed writes leaves the write-back cache
// alone; iterating one with them flushes.
func TestStateIterFlushesOnlyWhenItsKeyIsDirty(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("m", true)
	h := mustRegister(t, v, "map", abi.StateMap)
	mustPut(t, v, h, "a", "x", "1")
	expectEntries(t, collect(t, v, h, "b", "", nil))
	if n := len(s.cache.dirty); n != 1 {
		t.Fatalf("%d dirty entries after iterating a clean key, want 1", n)
	}
	expectEntries(t, collect(t, v, h, "a", "", nil), "x=1")
	if n := len(s.cache.dirty); n != 0 {
		t.Fatalf("%d dirty entries after iterating a dirty key, want 0", n)
	}
}

// services is the runtime's shape: VertexState plus watermark, clock and log.
type services struct{ *VertexState }

func (services) Watermark() int64      { return abi.MinWatermark }
func (services) ProcessingTime() int64 { return 0 }
func (services) Log(int32, string)     {}

var _ operator.Services = services{}

// Without a Logger, Pebble's messages (TestLoggerAndSharedCache shows there
// are some) reach neither stdout nor the standard logger.
func TestDefaultLoggerIsQuiet(t *testing.T) {
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	stdout := os.Stdout
	os.Stdout = out
	log.SetOutput(&logged)
	defer func() {
		os.Stdout = stdout
		log.SetOutput(os.Stderr)
	}()

	s := openStore(t, t.TempDir(), fullRange)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "", "v")
	flush(t, s)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	printed, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(printed) != 0 || logged.Len() != 0 {
		t.Fatalf("Pebble printed %q to stdout and %q to the standard logger", printed, logged.String())
	}
}

// Large values are not kept in the hot-key cache once flushed, but stay
// readable.
func TestLargeValuesLeaveTheCache(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	big := strings.Repeat("x", maxCachedValue+1)
	mustPut(t, v, h, "big", "", big)
	mustPut(t, v, h, "small", "", "s")
	expectGet(t, v, h, "big", "", big, false)   // dirty: served from the cache
	expectGet(t, v, h, "small", "", "s", false) // read: no longer blind
	flush(t, s)
	if s.cache.live != 1 {
		t.Fatalf("%d cached entries after flushing a large and a small value, want 1", s.cache.live)
	}
	expectGet(t, v, h, "big", "", big, false)
	if s.cache.live != 1 {
		t.Fatalf("%d cached entries after reading the large value, want 1", s.cache.live)
	}
}

// TestBlindWritesLeaveTheCache: entries written without being read leave
// the cache at a flush and stay readable, and their buffers serve the next
// writes; an entry read is kept.
func TestBlindWritesLeaveTheCache(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	val := []byte(strings.Repeat("v", 16<<10))
	put := func(from int) {
		for i := from; i < from+32; i++ {
			if err := v.StatePut(h, []byte(fmt.Sprintf("k%02d", i)), nil, val); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustPut(t, v, h, "read", "", "r")
	expectGet(t, v, h, "read", "", "r", false)
	put(0)
	flush(t, s)
	if s.cache.live != 1 {
		t.Fatalf("%d cached entries after a flush of 32 blind writes and one read, want 1", s.cache.live)
	}
	expectGet(t, v, h, "k07", "", string(val), false)
	// The buffers the blind entries left behind...
	kept := map[*byte]bool{}
	for _, idx := range s.cache.free {
		if e := &s.cache.entries[idx]; e.spill != 0 && cap(s.cache.spills[e.spill-1].val) >= len(val) {
			kept[unsafe.SliceData(s.cache.spills[e.spill-1].val)] = true
		}
	}
	if len(kept) != 31 {
		t.Fatalf("%d value buffers kept for reuse after the flush, want 31 (32, one taken by the read of k07)", len(kept))
	}
	// ...hold the values of the next keys written, as a flood writes.
	put(32)
	reused := 0
	for _, idx := range s.cache.dirty {
		if kept[unsafe.SliceData(s.cache.val(idx))] {
			reused++
		}
	}
	if reused != len(kept) {
		t.Errorf("%d of the %d kept buffers reused by the next 32 writes", reused, len(kept))
	}
	flush(t, s)
	expectGet(t, v, h, "k40", "", string(val), false)
}

// TestFlushKeepsItsBatch: a flush of more than a commit chunk commits in
// chunks whose buffer never grows past commitChunk, so that Pebble keeps it
// for the next batch and flushes allocate no batches.
func TestFlushKeepsItsBatch(t *testing.T) {
	s := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, s)
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	val := []byte(strings.Repeat("v", 48<<10))
	var buf *byte
	for round := range 3 {
		for i := range 50 { // 2.3 MiB: three chunks
			if err := v.StatePut(h, []byte(fmt.Sprintf("r%dk%02d", round, i)), nil, val); err != nil {
				t.Fatal(err)
			}
		}
		flush(t, s)
		repr := s.batch.Repr()
		if c := cap(repr); c == 0 || c > commitChunk {
			t.Fatalf("round %d: the batch's buffer holds %d bytes after a flush, want (0, %d]", round, c, commitChunk)
		}
		if p := unsafe.SliceData(repr); round > 0 && p != buf {
			t.Errorf("round %d: the flush grew a new batch buffer", round)
		} else {
			buf = p
		}
	}
	expectGet(t, v, h, "r2k49", "", string(val), false)
}

func TestPendingCountsUnflushedChanges(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Vertex("v", true)
	h, err := v.RegisterState("s", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 0 {
		t.Fatalf("Pending = %d on a new store", s.Pending())
	}
	for i := 0; i < 3; i++ {
		// The same key three times is one pending change.
		if err := v.StatePut(h, []byte("k"), nil, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.StatePut(h, []byte("k2"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := v.RegisterTimer(abi.TimeEvent, []byte("k"), nil, 5); err != nil {
		t.Fatal(err)
	}
	if got := s.Pending(); got != 3 {
		t.Fatalf("Pending = %d, want 3 (two keys, one timer)", got)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 0 {
		t.Fatalf("Pending = %d after Flush", s.Pending())
	}
}

// A store with MaxBytes fails its Flush once it is larger on disk, with a
// QuotaError that stays; below the bound nothing fails.
func TestStateQuota(t *testing.T) {
	const most = 8 << 20
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, MaxBytes: most})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	val := strings.Repeat("x", 64<<10)
	var qe *QuotaError
	written := 0
	for i := 0; ; i++ {
		if err := v.StatePut(h, []byte(fmt.Sprint(i)), nil, []byte(val)); err != nil {
			t.Fatal(err)
		}
		written += len(val)
		err := s.Flush()
		if err == nil {
			if written > 4*most {
				t.Fatalf("%d bytes written and no quota error", written)
			}
			continue
		}
		if !errors.As(err, &qe) {
			t.Fatalf("flush: %v, want a QuotaError", err)
		}
		break
	}
	if written < most/2 || qe.Most != most || qe.Size <= most {
		t.Fatalf("quota error after %d bytes: %+v", written, qe)
	}
	if !strings.Contains(qe.Error(), "over the state quota of 8388608 bytes") {
		t.Fatalf("error text %q", qe.Error())
	}
	if err := s.Flush(); !errors.As(err, &qe) {
		t.Fatalf("the next flush: %v, want the same QuotaError", err)
	}
}
