package state

import (
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// The stores on one budget split it: a second store halves what the first
// may keep cached at its next flush, and its close gives it back.
func TestBudgetShared(t *testing.T) {
	b := NewBudget(64 << 20)
	defer b.Close()
	open := func() *Store {
		s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := open()
	defer s1.Close()
	if got, want := s1.cache.cleanBytes, 32<<20; got != want {
		t.Fatalf("one store may keep %d bytes, want %d (half the budget)", got, want)
	}
	s2 := open()
	if err := s1.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := s1.cache.cleanBytes, 16<<20; got != want {
		t.Fatalf("with two stores, one may keep %d bytes, want %d", got, want)
	}
	if got, want := s1.flushN, (64<<20)/4/2/changeBytes; got != want {
		t.Fatalf("changes between flushes: %d, want %d (its share of a quarter of the budget)", got, want)
	}
	// Its cache is empty: the changes may take its clean share too.
	if got, want := s1.CacheEntries(), (64<<20)/2/2/changeBytes+(64<<20)/4/2/changeBytes; got != want {
		t.Fatalf("changes between flushes with nothing cached: %d, want %d (its shares of the clean entries and of the changes)", got, want)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := s1.cache.cleanBytes, 32<<20; got != want {
		t.Fatalf("after the other store closed, one may keep %d bytes, want %d", got, want)
	}
	for _, bad := range []int64{-1, 1 << 20} {
		if CheckBudget(bad) == nil {
			t.Errorf("CheckBudget(%d) accepted it", bad)
		}
	}
	if err := CheckBudget(0); err != nil {
		t.Errorf("CheckBudget(0) (the default): %v", err)
	}
}

// The changes a store gathers between flushes take the share of the budget
// its clean entries leave unused: keys that fit the budget are changed
// again and again without a flush, while the clean entries and the changes
// together stay within the two shares, and a store whose clean entries
// fill their share flushes at its share of the changes' quarter.
func TestBudgetChangesTakeUnusedCleanShare(t *testing.T) {
	b := NewBudget(minMemoryBudget) // 8 MiB of clean entries, 4 MiB of changes
	defer b.Close()
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Vertex("v", true)
	h, err := v.RegisterState("n", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	quarter := minMemoryBudget / 4 / changeBytes
	room := minMemoryBudget/2 + minMemoryBudget/4
	flushes := 0
	write := func(keys, rounds int) {
		t.Helper()
		for r := range rounds {
			for i := range keys {
				k := []byte("k" + strconv.Itoa(i))
				if _, err := v.StateGet(h, k, nil, nil); err != nil && err != operator.ErrNotFound {
					t.Fatal(err)
				}
				if err := v.StatePut(h, k, nil, []byte(strconv.Itoa(r))); err != nil {
					t.Fatal(err)
				}
				if held := s.cache.cleanHeld + s.Pending()*changeBytes; held > room+changeBytes {
					t.Fatalf("clean entries and changes count %d bytes, over the %d of both shares", held, room)
				}
				if s.Pending() >= s.CacheEntries() {
					flushes++
					if err := s.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	// 2x the changes' quarter in keys, each changed three times: they and
	// their changes fit the two shares.
	write(2*quarter, 3)
	if flushes != 0 {
		t.Fatalf("%d keys that fit the budget flushed %d times, want none", 2*quarter, flushes)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Many more keys than fit: the clean entries fill their share, and the
	// changes are flushed at the quarter.
	write(20*quarter, 1)
	if flushes == 0 {
		t.Fatalf("%d keys beyond the budget never flushed", 20*quarter)
	}
	if s.cache.cleanHeld < s.cache.cleanBytes-s.cache.cleanBytes/8 {
		t.Fatalf("clean entries hold %d bytes, want their share of %d nearly full", s.cache.cleanHeld, s.cache.cleanBytes)
	}
	if got := s.CacheEntries(); got > quarter+quarter/4 {
		t.Fatalf("with the clean share full the changes may take %d entries, want about %d (the quarter)", got, quarter)
	}
}

// A store's cache keeps what its clean entries hold within its share, and
// its count of it (cleanHeld) matches the entries; a key it no longer holds
// is read back from Pebble with its value.
func TestBudgetBoundsCache(t *testing.T) {
	b := NewBudget(minMemoryBudget)
	defer b.Close()
	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := s.Vertex("v", true)
	h, err := v.RegisterState("n", abi.StateValue)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 200_000
	for i := range keys {
		if err := v.StatePut(h, []byte("k"+strconv.Itoa(i)), nil, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if _, err := v.StateGet(h, []byte("k"+strconv.Itoa(i/2)), nil, nil); err != nil {
			t.Fatal(err)
		}
		if s.Pending() >= s.CacheEntries() {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	c := s.cache
	sum := 0
	for idx := range c.entries {
		if e := &c.entries[idx]; e.used && !e.dirty {
			sum += int(c.bytes(int32(idx)))
		}
	}
	if sum != c.cleanHeld {
		t.Fatalf("clean entries hold %d bytes, the cache counts %d", sum, c.cleanHeld)
	}
	if c.cleanHeld > c.cleanBytes {
		t.Fatalf("clean entries hold %d bytes, over the store's share of %d", c.cleanHeld, c.cleanBytes)
	}
	if !c.lost {
		t.Fatal("nothing left the cache: the test does not cover reads from Pebble")
	}
	for _, i := range []int{0, 1, keys / 3, keys - 1} {
		got, err := v.StateGet(h, []byte("k"+strconv.Itoa(i)), nil, nil)
		if err != nil || string(got) != strconv.Itoa(i) {
			t.Fatalf("k%d = %q, %v; want %d", i, got, err, i)
		}
	}
}
