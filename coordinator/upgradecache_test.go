package coordinator

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUpgradeCache: polls of an unchanged history read the file once; an
// appended upgrade, a rewrite and a removal are seen at the next poll.
func TestUpgradeCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upgrades.jsonl")
	var u upgradeCache
	read := func(wantLen, wantReads int) {
		t.Helper()
		es, err := u.read(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != wantLen || u.reads != wantReads {
			t.Fatalf("read: %d entries after %d file reads, want %d after %d", len(es), u.reads, wantLen, wantReads)
		}
	}
	read(0, 0) // no file: nothing to read
	line := `{"time":"2026-12-07T10:00:00Z","outcome":"done","fromAttempt":0,"attempt":1,"oldModule":"a","oldDigest":"x","newModule":"b","newDigest":"y","oldSubtasks":1,"newSubtasks":1}` + "\n"
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		read(1, 1)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
	f.Close()
	read(2, 2)
	read(2, 2)
	// A rewrite of the same size is seen by its modification time.
	if err := os.WriteFile(path, []byte(line+line), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	read(2, 3)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	read(0, 3)
}
