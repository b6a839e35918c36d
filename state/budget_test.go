package state

import (
	"strconv"
	"testing"

	"github.com/wstream/wstream/abi"
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
	if got, want := s1.CacheEntries(), (64<<20)/4/2/changeBytes; got != want {
		t.Fatalf("changes between flushes: %d, want %d (its share of a quarter of the budget)", got, want)
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
			sum += int(e.bytes())
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
