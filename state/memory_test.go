package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// A store with a memory bound flushes as soon as the bytes written since
// the last flush reach half of it, within a stream of writes that no
// caller flushes (one guest call's), and keeps at most the other half in
// clean entries; without the bound the same writes all stay in memory.
// Every value reads back afterwards.
func TestMemoryBoundFlushesEarly(t *testing.T) {
	const (
		bound  = 1 << 20
		valLen = 16 << 10
		keys   = 64
		puts   = 1000 // about 16 MB: sixteen times the bound
	)
	value := func(i int) []byte {
		v := bytes.Repeat([]byte{byte(i)}, valLen)
		binary.LittleEndian.PutUint32(v, uint32(i))
		return v
	}
	write := func(s *Store) (maxPending, maxHeld int) {
		v := s.Vertex("op", true)
		h := mustRegister(t, v, "blob", 2)
		for i := range puts {
			key := fmt.Appendf(nil, "k%d", i%keys)
			ns := fmt.Appendf(nil, "n%d", i%128)
			if err := v.StatePut(h, key, ns, value(i)); err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			maxPending = max(maxPending, s.PendingBytes())
			if i%50 == 0 {
				maxHeld = max(maxHeld, s.HeldBytes())
			}
		}
		return maxPending, maxHeld
	}

	unbounded := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, unbounded)
	if pending, _ := write(unbounded); pending < puts*valLen {
		t.Fatalf("without a bound %d bytes were pending at most, want all %d", pending, puts*valLen)
	}

	s, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, MemoryBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	pending, held := write(s)
	// A write lands before the check: one value beyond half the bound,
	// plus its key in the batch.
	if pending >= bound/2+valLen+1024 {
		t.Fatalf("%d bytes pending at most, want below %d", pending, bound/2+valLen+1024)
	}
	if held > bound+2*valLen+commitChunk {
		t.Fatalf("the store held %d bytes, want at most about %d", held, bound)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := s.HeldBytes(); n > bound/2+commitChunk {
		t.Fatalf("after a flush the store holds %d bytes, want at most %d", n, bound/2+commitChunk)
	}
	// The oracle: the last value written under each (key, namespace).
	want := map[string]int{}
	for i := range puts {
		want[fmt.Sprintf("k%d/n%d", i%keys, i%128)] = i
	}
	v := s.Vertex("op", true)
	h := mustRegister(t, v, "blob", 2)
	for kn, i := range want {
		var k, n int
		if _, err := fmt.Sscanf(kn, "k%d/n%d", &k, &n); err != nil {
			t.Fatal(err)
		}
		got, err := v.StateGet(h, fmt.Appendf(nil, "k%d", k), fmt.Appendf(nil, "n%d", n), nil)
		if err != nil || !bytes.Equal(got, value(i)) {
			t.Fatalf("%s: %d bytes, %v; want value %d", kn, len(got), err, i)
		}
	}
}

func TestMemoryBoundNegative(t *testing.T) {
	if _, err := Open(Options{Dir: t.TempDir(), KeyGroups: fullRange, MemoryBytes: -1}); err == nil {
		t.Fatal("a negative memory bound was accepted")
	}
}
