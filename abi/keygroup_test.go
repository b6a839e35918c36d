package abi

import (
	"fmt"
	"testing"
)

// TestKeyGroupGolden pins the key → key group mapping: savepoints and
// rescaling depend on it never changing.
func TestKeyGroupGolden(t *testing.T) {
	cases := []struct {
		key           string
		hash          uint64
		kg128, kg1000 int
	}{
		{"", 0xefd01f60ba992926, 38, 342},
		{"a", 0x82a2a958a9bece5b, 91, 315},
		{"hello", 0xe9c562c0fdb23244, 68, 124},
		{"w42", 0xa93ca5a1f6d451f3, 115, 987},
		{"sensor-1", 0xd9272224b5783dc7, 71, 967},
	}
	for _, c := range cases {
		if got := KeyHash([]byte(c.key)); got != c.hash {
			t.Errorf("KeyHash(%q) = %#x, want %#x", c.key, got, c.hash)
		}
		if got := reference(c.key); got != c.hash {
			t.Errorf("the ABI.md definition gives %#x for %q, want %#x", got, c.key, c.hash)
		}
		if got := KeyGroup([]byte(c.key), 128); got != c.kg128 {
			t.Errorf("KeyGroup(%q, 128) = %d, want %d", c.key, got, c.kg128)
		}
		if got := KeyGroup([]byte(c.key), 1000); got != c.kg1000 {
			t.Errorf("KeyGroup(%q, 1000) = %d, want %d", c.key, got, c.kg1000)
		}
	}
}

// reference is the definition from ABI.md written out step by step.
func reference(key string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func TestKeyGroupRanges(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 1000, MaxMaxParallelism} {
		for _, p := range []int{1, 2, 3, 4, 7, 16, 128} {
			if p > maxP {
				continue
			}
			next := 0
			for i := 0; i < p; i++ {
				r := RangeForSubtask(i, p, maxP)
				if r.Start != next {
					t.Fatalf("maxP=%d p=%d subtask %d starts at %d, want %d", maxP, p, i, r.Start, next)
				}
				if r.Len() < 1 {
					t.Fatalf("maxP=%d p=%d subtask %d owns nothing", maxP, p, i)
				}
				for kg := r.Start; kg <= r.End; kg++ {
					if s := SubtaskForKeyGroup(kg, p, maxP); s != i {
						t.Fatalf("maxP=%d p=%d: key group %d in range of %d but maps to %d", maxP, p, kg, i, s)
					}
				}
				next = r.End + 1
			}
			if next != maxP {
				t.Fatalf("maxP=%d p=%d: ranges end at %d", maxP, p, next)
			}
		}
	}
}

func TestKeyGroupSpread(t *testing.T) {
	// Keys that differ only in a suffix (typical ids) must spread over the
	// key groups; a hash without finaliser would cluster them.
	counts := make([]int, 128)
	for i := 0; i < 128*100; i++ {
		counts[KeyGroup([]byte(fmt.Sprintf("w%d", i)), 128)]++
	}
	for kg, n := range counts {
		if n < 50 || n > 150 {
			t.Fatalf("key group %d got %d of 12800 keys; distribution is skewed", kg, n)
		}
	}
}

// TestKeyGroupIsModulo checks that KeyGroup is the hash modulo the max
// parallelism (abi/ABI.md) for every max parallelism up to 4096 and up to
// MaxMaxParallelism, powers of two (found without a division) and others.
func TestKeyGroupIsModulo(t *testing.T) {
	for _, key := range []string{"", "a", "w42", "sensor-1", "a longer key of forty bytes, or so long"} {
		h := KeyHash([]byte(key))
		for m := 1; m <= MaxMaxParallelism; m++ {
			if m > 4096 && m&(m-1) != 0 && m != MaxMaxParallelism {
				continue
			}
			if got, want := KeyGroup([]byte(key), m), int(h%uint64(m)); got != want {
				t.Fatalf("KeyGroup(%q, %d) = %d, want %d", key, m, got, want)
			}
		}
	}
}
