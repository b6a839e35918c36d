package coordinator

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteJSONAtomicIsDurable: a record's file is in place before its
// directory is synced, and every directory the write created has its parent
// synced, top down, before that.
func TestWriteJSONAtomicIsDurable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data", "jobs", "j1")
	var synced []string
	old := syncDir
	defer func() { syncDir = old }()
	syncDir = func(d string) error {
		if d == dir {
			b, err := os.ReadFile(filepath.Join(dir, "job.json"))
			if err != nil || len(b) == 0 {
				t.Errorf("directory synced before the record was in place: %v", err)
			}
		}
		synced = append(synced, d)
		return old(d)
	}
	if err := writeJSONAtomic(dir, "job.json", Record{JobID: "j1", State: "running"}); err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "data"), filepath.Join(root, "data", "jobs"), dir}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %q, want %q", synced, want)
	}
	// Rewritten in place: only the directory of the rename.
	synced = nil
	if err := writeJSONAtomic(dir, "job.json", Record{JobID: "j1", State: "finished"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(synced, []string{dir}) {
		t.Fatalf("synced %q on a rewrite, want only %q", synced, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "job.json" {
		t.Fatalf("the directory holds %v, want only job.json", entries)
	}
}
