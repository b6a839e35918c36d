package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIncrementalCheckpointsShareFiles runs a keyed job with incremental
// checkpoints (the default), keeping one: state files are shared, uploaded
// once and referenced by later checkpoints, and when a checkpoint is no
// longer retained the files only it referenced are deleted, so the shared
// directory holds exactly what the retained checkpoint references.
func TestIncrementalCheckpointsShareFiles(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	plan := strings.Replace(chaosPlan(0, 0, 6000, "aligned", 0), `"interval":200`, `"interval":100,"retain":1`, 1)
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, dir, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	roots, _ := filepath.Glob(filepath.Join(dir, "wstream-data", "jobs", "*", "checkpoints"))
	if len(roots) != 1 {
		t.Fatalf("checkpoint roots: %v", roots)
	}
	root := roots[0]
	hist, err := os.ReadFile(filepath.Join(root, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Some checkpoint uploaded less than it references.
	shared := false
	for _, l := range strings.Split(strings.TrimSpace(string(hist)), "\n") {
		var e struct {
			StateSize, Uploaded int64
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.Uploaded < e.StateSize {
			shared = true
		}
	}
	if !shared {
		t.Fatalf("no checkpoint reused an earlier upload:\n%s", hist)
	}
	// The shared directory holds exactly the retained checkpoint's files.
	metas, _ := filepath.Glob(filepath.Join(root, "chk-*", "_metadata"))
	if len(metas) != 1 {
		t.Fatalf("%d checkpoints retained, want 1", len(metas))
	}
	b, err := os.ReadFile(metas[0])
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tasks []struct {
			State []struct {
				Path   string
				Shared bool
			}
		}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// Every state file is shared, Pebble's small files too (most are
	// alike from one checkpoint to the next).
	referenced := map[string]bool{}
	for _, task := range m.Tasks {
		for _, f := range task.State {
			if !f.Shared {
				t.Errorf("%s is the checkpoint's own file, not a shared one", f.Path)
			}
			referenced[f.Path] = true
		}
	}
	files, _ := os.ReadDir(filepath.Join(root, "shared"))
	for _, f := range files {
		if !referenced["shared/"+f.Name()] {
			t.Errorf("shared/%s is referenced by no retained checkpoint but was not deleted", f.Name())
		}
	}
	if len(files) != len(referenced) {
		t.Errorf("shared directory holds %d files, the retained checkpoint references %d", len(files), len(referenced))
	}
	r := runCLI(t, dir, "inspect", "--verify", root)
	if r.code != 0 || !strings.Contains(r.stdout, "audit: no missing files, 0 unreferenced") {
		t.Fatalf("inspect --verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
