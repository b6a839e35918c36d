package state

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// checkpointOf takes a checkpoint of s into a new directory and returns it.
func checkpointOf(t testing.TB, s *Store) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snap")
	if err := s.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImportStoreRescale moves the state of one store to four through its
// native snapshot, and back to one through theirs: every entry and timer
// lands in exactly the store that owns its key group, as the union of the
// original's says.
func TestImportStoreRescale(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 300)
	want := dump(t, src)
	snap := checkpointOf(t, src)

	var four []*Store
	for _, r := range ranges(4) {
		s := openStore(t, t.TempDir(), r)
		defer closeStore(t, s)
		st, err := s.ImportStore(snap, fullRange)
		if err != nil {
			t.Fatal(err)
		}
		got := dump(t, s)
		if st.Entries+st.Timers != int64(len(got)) {
			t.Fatalf("store of %v: import counted %d, holds %d", r, st.Entries+st.Timers, len(got))
		}
		for k := range got {
			if d, err := DecodeKey([]byte(k)); err != nil || !r.Contains(d.KeyGroup) {
				t.Fatalf("store of %v holds key group %d (%v)", r, d.KeyGroup, err)
			}
		}
		four = append(four, s)
	}
	sameMaps(t, "union of 4", union(t, four), want)

	one := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, one)
	for _, s := range four {
		if _, err := one.ImportStore(checkpointOf(t, s), s.KeyGroups()); err != nil {
			t.Fatal(err)
		}
	}
	sameMaps(t, "merged back", dump(t, one), want)
	for _, id := range []string{"win", "agg"} {
		gotTimers, wantTimers := popAll(t, one, id), popAll(t, src, id)
		if len(wantTimers) == 0 || !slices.Equal(gotTimers, wantTimers) {
			t.Fatalf("timers of %s after 1→4→1: %d, want %d", id, len(gotTimers), len(wantTimers))
		}
	}
	// The store reads the imported entries, and writes over them.
	agg := one.Vertex("agg", true)
	h := mustRegister(t, agg, "count", abi.StateValue)
	if v, err := agg.StateGet(h, []byte("user-7"), nil, nil); err != nil || string(v) != "49" {
		t.Fatalf("user-7 = %q, %v; want 49", v, err)
	}
	mustPut(t, agg, h, "user-7", "", "50")
	if v, err := agg.StateGet(h, []byte("user-7"), nil, nil); err != nil || string(v) != "50" {
		t.Fatalf("user-7 after put = %q, %v; want 50", v, err)
	}
}

// TestImportStoreReplacesCachedValues: an import over a store that has
// read and cached a key answers with the imported value afterwards.
func TestImportStoreReplacesCachedValues(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	v := src.Vertex("v", true)
	h := mustRegister(t, v, "s", abi.StateValue)
	mustPut(t, v, h, "k", "", "imported")
	snap := checkpointOf(t, src)

	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	dv := dst.Vertex("v", true)
	dh := mustRegister(t, dv, "s", abi.StateValue)
	if got, err := dv.StateGet(dh, []byte("k"), nil, nil); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("before: %q, %v; want not found", got, err)
	}
	if _, err := dst.ImportStore(snap, fullRange); err != nil {
		t.Fatal(err)
	}
	if got, err := dv.StateGet(dh, []byte("k"), nil, nil); err != nil || !bytes.Equal(got, []byte("imported")) {
		t.Fatalf("after: %q, %v; want imported", got, err)
	}
}
