package state

import (
	"bytes"
	"errors"
	"testing"

	"github.com/wstream/wstream/abi"
)

// TestImportCanonicalMigrating: the migration sees every entry of the
// store's key groups and replaces the values it returns; a failing one
// leaves the store as it was.
func TestImportCanonicalMigrating(t *testing.T) {
	src := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, src)
	fillCanonical(t, src, 100)
	stream, _ := export(t, src)

	dst := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, dst)
	seen := 0
	_, err := dst.ImportCanonicalMigrating(bytes.NewReader(stream), func(rec *CanonicalRecord) ([]byte, error) {
		seen++
		if string(rec.Vertex) == "agg" && string(rec.State) == "count" {
			return append([]byte("v2:"), rec.Value...), nil
		}
		return rec.Value, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	agg := dst.Vertex("agg", true)
	count := mustRegister(t, agg, "count", abi.StateValue)
	if v, err := agg.StateGet(count, []byte("user-17"), nil, nil); err != nil || string(v) != "v2:119" {
		t.Fatalf("migrated count of user-17: %q, %v", v, err)
	}
	win := dst.Vertex("win", true)
	sum := mustRegister(t, win, "sum", abi.StateValue)
	if n, err := win.StateGet(sum, []byte("user-3"), []byte{0, 0, 0, 0, 0, 0, 0x0b, 0xb8}, nil); err != nil || string(n) != "sum=3" {
		t.Fatalf("another state changed: %q, %v", n, err)
	}
	if want := int(100 + 2 + 25*6 + 200); seen != want {
		t.Fatalf("the migration saw %d entries, want %d", seen, want)
	}

	fresh := openStore(t, t.TempDir(), fullRange)
	defer closeStore(t, fresh)
	boom := errors.New("boom")
	_, err = fresh.ImportCanonicalMigrating(bytes.NewReader(stream), func(rec *CanonicalRecord) ([]byte, error) {
		if string(rec.Key) == "user-50" {
			return nil, boom
		}
		return rec.Value, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("a failing migration: %v", err)
	}
	if m := dump(t, fresh); len(m) != 0 {
		t.Fatalf("a failed import left %d keys", len(m))
	}
}
