package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
)

func testStorage(t *testing.T) *Storage {
	t.Helper()
	s, err := OpenStorage(filepath.Join(t.TempDir(), "jobs", "j1", "checkpoints"))
	if err != nil {
		t.Fatalf("OpenStorage: %v", err)
	}
	return s
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeTree creates files (slash-separated path → content) below dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		name := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns the regular files below dir as slash-separated path →
// content.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(r)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return out
}

var testTask = TaskID{Chain: 0, Subtask: 1}

// stateFiles is a small fake Pebble checkpoint.
var stateFiles = map[string]string{
	"000002.sst":      strings.Repeat("sst-two ", 300),
	"000005.sst":      strings.Repeat("sst-five ", 500),
	"MANIFEST-000001": "manifest",
	"OPTIONS-000003":  "options",
	"marker.format":   "",
}

// writeTestCheckpoint writes checkpoint id with state files from a fresh
// directory, a channel-state file and operator state, then its metadata.
func writeTestCheckpoint(t *testing.T, s *Storage, id int64) *Metadata {
	t.Helper()
	m, err := writeCheckpointFiles(s, id, t.TempDir())
	if err != nil {
		t.Fatalf("write checkpoint %d: %v", id, err)
	}
	if err := s.WriteMetadata(m); err != nil {
		t.Fatalf("WriteMetadata(%d): %v", id, err)
	}
	return m
}

// writeCheckpointFiles writes the files of checkpoint id, using src as a
// scratch directory, and returns the metadata to complete it with.
func writeCheckpointFiles(s *Storage, id int64, src string) (*Metadata, error) {
	for p, content := range stateFiles {
		name := filepath.Join(src, "state", p)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	task := s.TaskDir(id, testTask)
	state, err := s.CopyDir(id, task+"/state", filepath.Join(src, "state"))
	if err != nil {
		return nil, err
	}
	ch, err := s.WriteFile(id, task+"/channels/in-0-2", []byte("in-flight batches"))
	if err != nil {
		return nil, err
	}
	return &Metadata{
		JobID:          "j1",
		ID:             id,
		Kind:           KindCheckpoint,
		Trigger:        1_700_000_000_000 + id,
		Done:           1_700_000_000_500 + id,
		Plan:           json.RawMessage(`{"vertices": [{"id": "src"}, {"id": "count"}]}`),
		ModuleDigest:   "sha256:abc",
		MaxParallelism: abi.DefaultMaxParallelism,
		Tasks: []SubtaskState{{
			Task:      testTask,
			KeyGroups: abi.KeyGroupRange{Start: 64, End: 127},
			State:     state,
			Operator:  map[string][]byte{"src": []byte("offset=42")},
			Channels:  []ChannelState{{Input: true, Edge: 0, Peer: 2, File: ch, Bytes: ch.Size}},
		}, {
			Task: TaskID{Chain: 1, Subtask: 0},
		}},
		Metrics: map[string]Metrics{testTask.String(): {Sync: 3 * time.Millisecond, StateSize: 42, Unaligned: true}},
	}, nil
}

func TestWriteFileAndOpen(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		data := []byte("hello checkpoint")
		h, err := s.WriteFile(7, "tasks/0-1/state/x.sst", data)
		if err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
		want := FileHandle{Path: "tasks/0-1/state/x.sst", Size: int64(len(data)), SHA256: sha256Hex(data)}
		if h != want {
			t.Fatalf("WriteFile handle = %+v, want %+v", h, want)
		}
		if got := b.read("chk-0000000007/tasks/0-1/state/x.sst"); !bytes.Equal(got, data) {
			t.Fatalf("stored file = %q; want %q", got, data)
		}
		r, err := s.Open(7, h)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Open read %q, %v; want %q", got, err, data)
		}

		// A native-separator or unclean path is stored clean and slash-separated.
		h, err = s.WriteFile(7, filepath.Join("tasks", "0-1", "channels", ".", "c"), nil)
		if err != nil || h.Path != "tasks/0-1/channels/c" || h.Size != 0 || h.SHA256 != sha256Hex(nil) {
			t.Fatalf("WriteFile(empty) = %+v, %v", h, err)
		}

		src := filepath.Join(t.TempDir(), "src")
		big := bytes.Repeat([]byte("0123456789abcdef"), 100_000)
		if err := os.WriteFile(src, big, 0o644); err != nil {
			t.Fatal(err)
		}
		h, err = s.CopyFile(7, "tasks/0-1/state/big.sst", src)
		if err != nil || h.Size != int64(len(big)) || h.SHA256 != sha256Hex(big) {
			t.Fatalf("CopyFile = %+v, %v", h, err)
		}
		if _, err := s.CopyFile(7, "tasks/0-1/state/none", filepath.Join(t.TempDir(), "absent")); err == nil ||
			!strings.Contains(err.Error(), "chk-0000000007/tasks/0-1/state/none") {
			t.Fatalf("CopyFile of a missing source: %v; want an error naming the target", err)
		}
		if s.Dir(7) != JoinLocation(s.Root(), "chk-0000000007") {
			t.Fatalf("Dir(7) = %s", s.Dir(7))
		}
		if got := s.TaskDir(7, TaskID{Chain: 3, Subtask: 12}); got != "tasks/3-12" {
			t.Fatalf("TaskDir = %s", got)
		}
	})
}

func TestWriteFileRejectsBadArguments(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		for _, tc := range []struct {
			id   int64
			rel  string
			want string
		}{
			{1, "", "not a relative path"},
			{1, "../escape", "not a relative path"},
			{1, "/abs/file", "not a relative path"},
			{1, "a/../../b", "not a relative path"},
			{1, ".", "names the checkpoint directory"},
			{1, "_metadata", "reserved"},
			{1, "./_metadata", "reserved"},
			{0, "a", "not positive"},
			{-3, "a", "not positive"},
		} {
			if _, err := s.WriteFile(tc.id, tc.rel, []byte("x")); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteFile(%d, %q) = %v; want an error containing %q", tc.id, tc.rel, err, tc.want)
			}
		}
		if got := b.names(); len(got) != 0 {
			t.Fatalf("rejected writes left files: %v", got)
		}
	})
}

func TestMetadataRoundTrip(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		m := writeTestCheckpoint(t, s, 3)
		if m.Format != MetadataFormat || m.Version != 1 || len(m.Checksum) != 64 {
			t.Fatalf("WriteMetadata left format %q version %d checksum %q", m.Format, m.Version, m.Checksum)
		}
		if string(m.Plan) != `{"vertices":[{"id":"src"},{"id":"count"}]}` {
			t.Fatalf("WriteMetadata left plan %s; want it compact", m.Plan)
		}
		got, err := s.ReadMetadata(3)
		if err != nil {
			t.Fatalf("ReadMetadata: %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("ReadMetadata =\n%+v\nwant\n%+v", got, m)
		}
		if err := s.Verify(got); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if len(got.Tasks[0].State) != len(stateFiles) {
			t.Fatalf("state handles %d, want %d", len(got.Tasks[0].State), len(stateFiles))
		}
		ids, err := s.Completed()
		if err != nil || !slices.Equal(ids, []int64{3}) {
			t.Fatalf("Completed = %v, %v; want [3]", ids, err)
		}

		// A complete checkpoint is immutable.
		if _, err := s.WriteFile(3, "tasks/0-1/state/late", []byte("x")); err == nil || !strings.Contains(err.Error(), "complete") {
			t.Fatalf("WriteFile into a complete checkpoint: %v", err)
		}
		if err := s.WriteMetadata(m); err == nil || !strings.Contains(err.Error(), "complete") {
			t.Fatalf("second WriteMetadata: %v", err)
		}
		if err := s.WriteMetadata(&Metadata{ID: 4, Kind: Kind(9)}); err == nil || !strings.Contains(err.Error(), "kind") {
			t.Fatalf("WriteMetadata with a bad kind: %v", err)
		}

		// A stateless checkpoint has no directory until its metadata.
		if err := s.WriteMetadata(&Metadata{JobID: "j1", ID: 4, Kind: KindSavepoint}); err != nil {
			t.Fatalf("WriteMetadata without files: %v", err)
		}
		if m4, err := s.ReadMetadata(4); err != nil || m4.Kind != KindSavepoint {
			t.Fatalf("ReadMetadata(4) = %+v, %v", m4, err)
		}
	})
}

// editMetadata rewrites checkpoint id's _metadata through fn, keeping its
// checksum field as it was, and returns the name errors give the file.
func editMetadata(t *testing.T, b backend, id int64, fn func(map[string]any)) string {
	t.Helper()
	p := DirName(id) + "/" + MetadataName
	var raw map[string]any
	if err := json.Unmarshal(b.read(p), &raw); err != nil {
		t.Fatal(err)
	}
	fn(raw)
	data, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	b.damage(p, data)
	return JoinLocation(b.s.Dir(id), MetadataName)
}

func TestReadMetadataRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(map[string]any)
		want    string
		corrupt bool
	}{
		{"bad checksum", func(m map[string]any) { m["jobId"] = "other" }, "checksum mismatch", true},
		{"changed file handle", func(m map[string]any) {
			m["tasks"].([]any)[0].(map[string]any)["state"].([]any)[0].(map[string]any)["size"] = 1
		}, "checksum mismatch", true},
		{"wrong format", func(m map[string]any) { m["format"] = "flink-savepoint" }, `format "flink-savepoint"`, false},
		{"no format", func(m map[string]any) { delete(m, "format") }, `format ""`, false},
		{"newer version", func(m map[string]any) { m["version"] = 3; m["newField"] = true }, "version 3, written by a newer wstream", false},
		{"version 0", func(m map[string]any) { m["version"] = 0 }, "unknown metadata version 0", false},
		{"unknown field", func(m map[string]any) { m["owner"] = "x" }, `unknown field "owner"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, b backend) {
				s := b.s
				writeTestCheckpoint(t, s, 1)
				name := editMetadata(t, b, 1, tc.edit)
				_, err := s.ReadMetadata(1)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), name) {
					t.Fatalf("ReadMetadata = %v; want an error naming %s and containing %q", err, name, tc.want)
				}
				if errors.Is(err, ErrCorrupt) != tc.corrupt {
					t.Fatalf("errors.Is(%v, ErrCorrupt) = %t, want %t", err, !tc.corrupt, tc.corrupt)
				}
			})
		})
	}

	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		writeTestCheckpoint(t, s, 1)
		const p = "chk-0000000001/" + MetadataName
		name := JoinLocation(s.Dir(1), MetadataName)
		good := b.read(p)
		for _, tc := range []struct{ name, content, want string }{
			{"truncated", string(good[:len(good)/2]), "not checkpoint metadata"},
			{"trailing data", string(good) + `{"x":1}`, "not checkpoint metadata"},
			{"empty", "", "not checkpoint metadata"},
		} {
			b.damage(p, []byte(tc.content))
			if _, err := s.ReadMetadata(1); err == nil || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), name) || !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: ReadMetadata = %v; want a corruption error naming %s containing %q", tc.name, err, name, tc.want)
			}
		}

		// Metadata moved to another checkpoint's directory.
		b.damage("chk-0000000002/"+MetadataName, good)
		if _, err := s.ReadMetadata(2); err == nil || !strings.Contains(err.Error(), "records checkpoint 1, not 2") {
			t.Fatalf("ReadMetadata of moved metadata = %v", err)
		}
		if _, err := s.ReadMetadata(9); err == nil || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrCorrupt) ||
			!strings.Contains(err.Error(), "chk-0000000009/"+MetadataName) {
			t.Fatalf("ReadMetadata of an absent checkpoint = %v", err)
		}
	})
}

func flipFileByte(t *testing.T, name string, at int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDetectsDamage(t *testing.T) {
	const sst = "tasks/0-1/state/000005.sst"
	const channel = "tasks/0-1/channels/in-0-2"
	for _, tc := range []struct {
		name   string
		file   string
		damage func(b backend, p string)
		want   string
	}{
		{"missing", sst, func(b backend, p string) { b.remove(p) }, "missing"},
		{"truncated", sst, func(b backend, p string) { b.damage(p, b.read(p)[:100]) }, "truncated"},
		{"grown", sst, func(b backend, p string) { b.damage(p, append(b.read(p), "more"...)) }, "larger than"},
		{"flipped byte", sst, func(b backend, p string) { b.flip(p, 1234) }, "SHA-256"},
		{"flipped channel byte", channel, func(b backend, p string) { b.flip(p, 0) }, "SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, b backend) {
				s := b.s
				m := writeTestCheckpoint(t, s, 7)
				rel := "chk-0000000007/" + tc.file
				tc.damage(b, rel)
				err := s.Verify(m)
				if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), rel) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Verify = %v; want a corruption error naming %s containing %q", err, rel, tc.want)
				}
				// Only the damaged file is reported.
				if n := strings.Count(err.Error(), "\n"); n != 0 {
					t.Fatalf("Verify reported %d problems for one damaged file: %v", n+1, err)
				}
				// Open's reader reports the same at EOF.
				var h FileHandle
				for _, x := range m.handles() {
					if x.Path == tc.file {
						h = x
					}
				}
				r, err := s.Open(7, h)
				if err == nil {
					_, err = io.ReadAll(r)
					r.Close()
				}
				if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), rel) {
					t.Fatalf("reading the damaged file through Open: %v; want a corruption error naming %s", err, rel)
				}
			})
		})
	}

	t.Run("several", func(t *testing.T) {
		forBackends(t, func(t *testing.T, b backend) {
			s := b.s
			m := writeTestCheckpoint(t, s, 7)
			for _, p := range []string{"000002.sst", "MANIFEST-000001"} {
				b.remove("chk-0000000007/tasks/0-1/state/" + p)
			}
			err := s.Verify(m)
			for _, p := range []string{"000002.sst", "MANIFEST-000001"} {
				if err == nil || !strings.Contains(err.Error(), "chk-0000000007/tasks/0-1/state/"+p+": missing") {
					t.Fatalf("Verify = %v; want %s reported missing", err, p)
				}
			}
		})
	})

	t.Run("path outside the checkpoint", func(t *testing.T) {
		forBackends(t, func(t *testing.T, b backend) {
			s := b.s
			m := writeTestCheckpoint(t, s, 7)
			m.Tasks[0].State[0].Path = "../chk-0000000006/x"
			if err := s.Verify(m); err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "invalid file path") {
				t.Fatalf("Verify = %v; want an invalid path error", err)
			}
		})
	})
}

func TestCrashBetweenFilesAndMetadata(t *testing.T) {
	s := testStorage(t)
	writeTestCheckpoint(t, s, 3)
	// Checkpoint 4 wrote its files; the coordinator died before _metadata,
	// in the middle of writing it.
	if _, err := writeCheckpointFiles(s, 4, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(4), "._metadata.tmp-123"), []byte(`{"format":`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Checkpoint 5 was aborted before any file.
	if err := os.Mkdir(s.Dir(5), 0o755); err != nil {
		t.Fatal(err)
	}
	// Unrelated entries are ignored.
	writeTree(t, s.Root(), map[string]string{"chk-12/x": "", "notes.txt": "", "chk-0000000009": "a file"})

	if ids, err := s.Completed(); err != nil || !slices.Equal(ids, []int64{3}) {
		t.Fatalf("Completed = %v, %v; want [3]", ids, err)
	}
	if id, err := s.MaxID(); err != nil || id != 5 {
		t.Fatalf("MaxID = %d, %v; want 5 (incomplete ones count)", id, err)
	}
	m, skipped, err := s.LatestUsable()
	if err != nil || m.ID != 3 || len(skipped) != 0 {
		t.Fatalf("LatestUsable = %v, %v, %v; want checkpoint 3", m, skipped, err)
	}
	removed, err := s.CleanIncomplete()
	if err != nil || !slices.Equal(removed, []int64{4, 5}) {
		t.Fatalf("CleanIncomplete = %v, %v; want [4 5]", removed, err)
	}
	for _, id := range []int64{4, 5} {
		if _, err := os.Stat(s.Dir(id)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("checkpoint %d's directory survived CleanIncomplete: %v", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "notes.txt")); err != nil {
		t.Fatalf("CleanIncomplete removed an unrelated file: %v", err)
	}
	if id, err := s.MaxID(); err != nil || id != 3 {
		t.Fatalf("MaxID after cleaning = %d, %v; want 3", id, err)
	}
	if removed, err := s.CleanIncomplete(); err != nil || len(removed) != 0 {
		t.Fatalf("second CleanIncomplete = %v, %v", removed, err)
	}
	if err := s.Verify(m); err != nil {
		t.Fatalf("the complete checkpoint no longer verifies: %v", err)
	}
}

func TestMaxIDBeyondTenDigits(t *testing.T) {
	s := testStorage(t)
	for _, id := range []int64{9_999_999_999, 10_000_000_001, 2} {
		if err := os.Mkdir(s.Dir(id), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if id, err := s.MaxID(); err != nil || id != 10_000_000_001 {
		t.Fatalf("MaxID = %d, %v", id, err)
	}
	if empty, err := OpenStorage(t.TempDir()); err != nil {
		t.Fatal(err)
	} else if n, err := empty.MaxID(); err != nil || n != 0 {
		t.Fatalf("MaxID of an empty root = %d, %v; want 0", n, err)
	}
}

func TestLatestUsableFallsBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		for id := int64(1); id <= 4; id++ {
			writeTestCheckpoint(t, s, id)
		}
		b.flip("chk-0000000004/tasks/0-1/state/000002.sst", 10)
		metaName := editMetadata(t, b, 3, func(m map[string]any) { m["done"] = 1 })

		m, skipped, err := s.LatestUsable()
		if err != nil {
			t.Fatalf("LatestUsable: %v", err)
		}
		if m.ID != 2 {
			t.Fatalf("LatestUsable chose checkpoint %d, want 2", m.ID)
		}
		if len(skipped) != 2 {
			t.Fatalf("skipped = %v; want checkpoints 4 and 3", skipped)
		}
		if msg := skipped[0].Error(); !strings.Contains(msg, "checkpoint 4 skipped") ||
			!strings.Contains(msg, "chk-0000000004/tasks/0-1/state/000002.sst") || !errors.Is(skipped[0], ErrCorrupt) {
			t.Fatalf("skipped[0] = %v; want checkpoint 4 with its damaged file", skipped[0])
		}
		if msg := skipped[1].Error(); !strings.Contains(msg, "checkpoint 3 skipped") ||
			!strings.Contains(msg, metaName) || !strings.Contains(msg, "checksum mismatch") {
			t.Fatalf("skipped[1] = %v; want checkpoint 3's metadata checksum", skipped[1])
		}

		for _, id := range []int64{1, 2} {
			b.remove(DirName(id) + "/tasks/0-1/channels/in-0-2")
		}
		m, skipped, err = s.LatestUsable()
		if !errors.Is(err, ErrNoCheckpoint) || m != nil || len(skipped) != 4 || !strings.Contains(err.Error(), s.Root()) {
			t.Fatalf("LatestUsable with none usable = %v, %d skipped, %v; want ErrNoCheckpoint naming the root", m, len(skipped), err)
		}
		if _, skipped, err := testStorage(t).LatestUsable(); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 0 {
			t.Fatalf("LatestUsable of an empty storage = %v, %v", skipped, err)
		}
	})
}

// TestLatestUsableWith: a checkpoint whose files are intact but which the
// caller's test refuses (its in-flight data left in a stream is gone) is
// skipped with the caller's reason, for the next older one.
func TestLatestUsableWith(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		for id := int64(1); id <= 3; id++ {
			writeTestCheckpoint(t, s, id)
		}
		lost := errors.New("messages 5-9 of wstream.data.x in stream wstream-data-x are lost")
		m, skipped, err := s.LatestUsableWith(func(m *Metadata) error {
			if m.ID == 3 {
				return lost
			}
			return nil
		})
		if err != nil || m.ID != 2 {
			t.Fatalf("LatestUsableWith chose %v, %v; want checkpoint 2", m, err)
		}
		if len(skipped) != 1 || !errors.Is(skipped[0], lost) || !strings.Contains(skipped[0].Error(), "checkpoint 3 skipped") {
			t.Fatalf("skipped = %v; want checkpoint 3 with the caller's reason", skipped)
		}
		if _, skipped, err := s.LatestUsableWith(func(*Metadata) error { return lost }); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 3 {
			t.Fatalf("none accepted: %v, %d skipped; want ErrNoCheckpoint", err, len(skipped))
		}
	})
}

func TestDiscard(t *testing.T) {
	s := testStorage(t)
	writeTestCheckpoint(t, s, 1)
	writeTestCheckpoint(t, s, 2)
	if err := s.Discard(1); err != nil {
		t.Fatalf("Discard(1): %v", err)
	}
	if _, err := os.Stat(s.Dir(1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Discard left the directory: %v", err)
	}
	if ids, err := s.Completed(); err != nil || !slices.Equal(ids, []int64{2}) {
		t.Fatalf("Completed = %v, %v; want [2]", ids, err)
	}
	if err := s.Discard(1); err != nil {
		t.Fatalf("Discard of a discarded checkpoint: %v", err)
	}

	// A Discard that fails after removing _metadata leaves an incomplete
	// checkpoint, never a complete-looking one with files missing.
	ffs := &faultStorageFS{failAt: 1}
	setFS(s, ffs)
	if err := s.Discard(2); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Discard with a failing directory sync = %v", err)
	}
	setFS(s, osStorageFS{})
	if ids, err := s.Completed(); err != nil || len(ids) != 0 {
		t.Fatalf("Completed after a failed Discard = %v, %v; want none", ids, err)
	}
	if removed, err := s.CleanIncomplete(); err != nil || !slices.Equal(removed, []int64{2}) {
		t.Fatalf("CleanIncomplete = %v, %v; want [2]", removed, err)
	}
}

// faultStorageFS is the operating system's storageFS, except that its
// failAt-th operation (counting creates, writes, syncs, closes, renames,
// directory creations and directory syncs from 1) fails; a failing write
// writes half of its bytes first.
type faultStorageFS struct {
	osStorageFS
	failAt int

	mu       sync.Mutex
	ops      int
	injected string // the operation that failed
}

func (f *faultStorageFS) step(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.ops != f.failAt {
		return nil
	}
	f.injected = op
	return fmt.Errorf("injected failure of %s (operation %d)", op, f.ops)
}

func (f *faultStorageFS) failed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

func (f *faultStorageFS) CreateTemp(dir, prefix string) (storageFile, error) {
	if err := f.step("create in " + dir); err != nil {
		return nil, err
	}
	file, err := f.osStorageFS.CreateTemp(dir, prefix)
	if err != nil {
		return nil, err
	}
	return &faultStorageFile{storageFile: file, fs: f}, nil
}

func (f *faultStorageFS) Rename(oldpath, newpath string) error {
	if err := f.step("rename to " + newpath); err != nil {
		return err
	}
	return f.osStorageFS.Rename(oldpath, newpath)
}

func (f *faultStorageFS) Mkdir(dir string) error {
	if err := f.step("mkdir " + dir); err != nil {
		return err
	}
	return f.osStorageFS.Mkdir(dir)
}

func (f *faultStorageFS) SyncDir(dir string) error {
	if err := f.step("sync directory " + dir); err != nil {
		return err
	}
	return f.osStorageFS.SyncDir(dir)
}

type faultStorageFile struct {
	storageFile
	fs *faultStorageFS
}

func (f *faultStorageFile) Write(p []byte) (int, error) {
	if err := f.fs.step("write " + f.Name()); err != nil {
		n, _ := f.storageFile.Write(p[:len(p)/2])
		return n, err
	}
	return f.storageFile.Write(p)
}

func (f *faultStorageFile) Sync() error {
	if err := f.fs.step("sync " + f.Name()); err != nil {
		return err
	}
	return f.storageFile.Sync()
}

func (f *faultStorageFile) Close() error {
	err := f.fs.step("close " + f.Name())
	if cerr := f.storageFile.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestInjectedFailureNeverHalfLands fails each filesystem operation of
// writing a checkpoint in turn and checks that no failure leaves a
// complete-looking checkpoint, a file with partial content under its final
// name, or a temporary file.
func TestInjectedFailureNeverHalfLands(t *testing.T) {
	want := map[string]string{"tasks/0-1/channels/in-0-2": "in-flight batches"}
	for p, c := range stateFiles {
		want["tasks/0-1/state/"+p] = c
	}
	base := t.TempDir()
	failures := map[string]bool{}
	for n := 1; ; n++ {
		s, err := OpenStorage(filepath.Join(base, fmt.Sprint(n)))
		if err != nil {
			t.Fatal(err)
		}
		ffs := &faultStorageFS{failAt: n}
		setFS(s, ffs)
		m, err := writeCheckpointFiles(s, 1, t.TempDir())
		if err == nil {
			err = s.WriteMetadata(m)
		}
		op := ffs.failed()
		if op == "" {
			// Every operation has been failed once; this run succeeded.
			if err != nil {
				t.Fatalf("run without failure: %v", err)
			}
			if _, err := s.ReadMetadata(1); err != nil {
				t.Fatalf("run without failure: %v", err)
			}
			if n < 30 {
				t.Fatalf("writing a checkpoint took %d operations; the fault injection does not see them", n-1)
			}
			break
		}
		failures[strings.Fields(op)[0]] = true
		if err == nil {
			t.Fatalf("operation %d (%s) failed but writing the checkpoint succeeded", n, op)
		}
		if !strings.Contains(err.Error(), "injected") {
			t.Fatalf("operation %d (%s): error %v does not carry the cause", n, op, err)
		}
		if ids, err := s.Completed(); err != nil || len(ids) != 0 {
			t.Fatalf("operation %d (%s) failed: Completed = %v, %v; want none", n, op, ids, err)
		}
		if _, _, err := s.LatestUsable(); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("operation %d (%s) failed: LatestUsable = %v", n, op, err)
		}
		for p, content := range readTree(t, s.Root()) {
			rel := strings.TrimPrefix(p, "chk-0000000001/")
			if strings.Contains(rel, ".tmp-") {
				t.Fatalf("operation %d (%s) failed: temporary file %s left behind", n, op, p)
			}
			if content != want[rel] {
				t.Fatalf("operation %d (%s) failed: %s holds %d bytes, want %d", n, op, p, len(content), len(want[rel]))
			}
		}
		if _, err := s.CleanIncomplete(); err != nil {
			t.Fatal(err)
		}
		if got := readTree(t, s.Root()); len(got) != 0 {
			t.Fatalf("operation %d (%s): CleanIncomplete left %v", n, op, got)
		}
	}
	for _, op := range []string{"create", "write", "sync", "close", "rename", "mkdir"} {
		if !failures[op] {
			t.Errorf("no %s operation was failed; seen %v", op, failures)
		}
	}
}

// gateStorageFS holds the first two file creations until both have
// arrived, so a CopyDir that copies one file at a time never passes it.
type gateStorageFS struct {
	osStorageFS
	mu      sync.Mutex
	arrived int
	both    chan struct{}
}

func (g *gateStorageFS) CreateTemp(dir, prefix string) (storageFile, error) {
	g.mu.Lock()
	g.arrived++
	if g.arrived == 2 {
		close(g.both)
	}
	n := g.arrived
	g.mu.Unlock()
	if n <= 2 {
		select {
		case <-g.both:
		case <-time.After(10 * time.Second):
			return nil, errors.New("a second file copy never started while the first was in progress")
		}
	}
	return g.osStorageFS.CreateTemp(dir, prefix)
}

func TestCopyDirParallel(t *testing.T) {
	s := testStorage(t)
	src := t.TempDir()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("d%d/f%02d", i%3, i)] = strings.Repeat(fmt.Sprint(i), i*100)
	}
	files["top"] = "top"
	writeTree(t, src, files)
	setFS(s, &gateStorageFS{both: make(chan struct{})})

	hs, err := s.CopyDir(2, "tasks/1-0/state", src)
	if err != nil {
		t.Fatalf("CopyDir: %v", err)
	}
	if len(hs) != len(files) {
		t.Fatalf("CopyDir returned %d handles for %d files", len(hs), len(files))
	}
	if !slices.IsSortedFunc(hs, func(a, b FileHandle) int { return strings.Compare(a.Path, b.Path) }) {
		t.Fatalf("handles not sorted by path: %v", hs)
	}
	for _, h := range hs {
		content, ok := files[strings.TrimPrefix(h.Path, "tasks/1-0/state/")]
		if !ok || h.Size != int64(len(content)) || h.SHA256 != sha256Hex([]byte(content)) {
			t.Fatalf("handle %+v does not match its source", h)
		}
	}
	got := readTree(t, filepath.Join(s.Dir(2), "tasks", "1-0", "state"))
	if !reflect.DeepEqual(got, files) {
		t.Fatalf("copied tree differs from the source")
	}

	if err := os.Symlink("top", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CopyDir(3, "x", src); err == nil || !strings.Contains(err.Error(), filepath.Join(src, "link")) ||
		!strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("CopyDir of a directory with a symlink = %v", err)
	}
	if _, err := s.CopyDir(3, "x", filepath.Join(src, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("CopyDir of a missing directory = %v", err)
	}
}

func TestRestore(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		m := writeTestCheckpoint(t, s, 5)

		dst := filepath.Join(t.TempDir(), "restored", "db")
		if err := s.Restore(m, testTask, dst); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := readTree(t, dst); !reflect.DeepEqual(got, stateFiles) {
			t.Fatalf("restored %v, want the task's state files", got)
		}
		if err := s.Restore(m, testTask, dst); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("Restore into a non-empty directory = %v", err)
		}

		// A task without state restores to an empty directory.
		empty := filepath.Join(t.TempDir(), "empty")
		if err := s.Restore(m, TaskID{Chain: 1, Subtask: 0}, empty); err != nil {
			t.Fatalf("Restore of a stateless task: %v", err)
		}
		if got := readTree(t, empty); len(got) != 0 {
			t.Fatalf("stateless restore wrote %v", got)
		}
		if err := s.Restore(m, TaskID{Chain: 9, Subtask: 9}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no state for task 9/9") {
			t.Fatalf("Restore of an unknown task = %v", err)
		}

		// A damaged file fails the restore, names the file and leaves dst empty.
		b.flip("chk-0000000005/tasks/0-1/state/000005.sst", 4000)
		dst = t.TempDir()
		err := s.Restore(m, testTask, dst)
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chk-0000000005/tasks/0-1/state/000005.sst") {
			t.Fatalf("Restore of a damaged checkpoint = %v", err)
		}
		if got := readTree(t, dst); len(got) != 0 {
			t.Fatalf("a failed restore left %v in the destination", got)
		}

		// State files must lie below the task's state directory.
		m.Tasks[0].State[0].Path = "tasks/0-2/state/000002.sst"
		if err := s.Restore(m, testTask, t.TempDir()); err == nil || !strings.Contains(err.Error(), "outside tasks/0-1/state/") {
			t.Fatalf("Restore of a misplaced state file = %v", err)
		}
	})
}

func TestOpenStorage(t *testing.T) {
	if _, err := OpenStorage(""); err == nil {
		t.Fatal("OpenStorage(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStorage(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("OpenStorage of a file = %v", err)
	}
	s := testStorage(t)
	writeTestCheckpoint(t, s, 1)
	again, err := OpenStorage(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := again.Completed(); err != nil || !slices.Equal(ids, []int64{1}) {
		t.Fatalf("reopened storage: Completed = %v, %v", ids, err)
	}
}

// writeSharedCheckpoint writes checkpoint id of testTask whose .sst state
// files are shared (put with PutShared) and the rest copied, then its
// metadata. It returns the metadata and how many shared files it uploaded.
func writeSharedCheckpoint(t *testing.T, s *Storage, id int64, files map[string]string) (*Metadata, int) {
	t.Helper()
	src := t.TempDir()
	writeTree(t, src, files)
	task := s.TaskDir(id, testTask)
	var state []FileHandle
	uploads := 0
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range files {
			if !yield(p) {
				return
			}
		}
	}) {
		name := filepath.Join(src, filepath.FromSlash(p))
		if !strings.HasSuffix(p, ".sst") {
			h, err := s.CopyFile(id, task+"/state/"+p, name)
			if err != nil {
				t.Fatalf("CopyFile(%s): %v", p, err)
			}
			state = append(state, h)
			continue
		}
		h, uploaded, err := s.PutShared(name, "")
		if err != nil {
			t.Fatalf("PutShared(%s): %v", p, err)
		}
		if uploaded {
			uploads++
		}
		h.Name = task + "/state/" + p
		state = append(state, h)
	}
	m := &Metadata{JobID: "j1", ID: id, Kind: KindCheckpoint, MaxParallelism: abi.DefaultMaxParallelism,
		Tasks: []SubtaskState{{Task: testTask, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}, State: state}}}
	if err := s.WriteMetadata(m); err != nil {
		t.Fatalf("WriteMetadata(%d): %v", id, err)
	}
	return m, uploads
}

func TestPutSharedDedup(t *testing.T) {
	s := testStorage(t)
	src := filepath.Join(t.TempDir(), "000007.sst")
	content := []byte(strings.Repeat("immutable sst ", 1000))
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256Hex(content)
	h, uploaded, err := s.PutShared(src, "")
	if err != nil || !uploaded {
		t.Fatalf("first PutShared = %+v, %t, %v; want an upload", h, uploaded, err)
	}
	want := FileHandle{Path: "shared/" + sum + ".sst", Size: int64(len(content)), SHA256: sum, Shared: true, RawSize: int64(len(content))}
	if h != want {
		t.Fatalf("PutShared handle = %+v, want %+v", h, want)
	}
	stored := filepath.Join(s.Root(), "shared", sum+".sst")
	fi, err := os.Stat(stored)
	if err != nil {
		t.Fatal(err)
	}

	// The same content again, from another file, with its digest given:
	// nothing is copied.
	again := filepath.Join(t.TempDir(), "000042.sst")
	if err := os.WriteFile(again, content, 0o644); err != nil {
		t.Fatal(err)
	}
	h2, uploaded, err := s.PutShared(again, sum)
	if err != nil || uploaded || h2 != want {
		t.Fatalf("second PutShared = %+v, %t, %v; want %+v without an upload", h2, uploaded, err, want)
	}
	// A fresh Storage (a restarted worker) learns the existing file.
	fresh, err := OpenStorage(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if h3, uploaded, err := fresh.PutShared(again, ""); err != nil || uploaded || h3 != want {
		t.Fatalf("PutShared on a reopened storage = %+v, %t, %v; want %+v without an upload", h3, uploaded, err, want)
	}
	if fi2, err := os.Stat(stored); err != nil || !fi2.ModTime().Equal(fi.ModTime()) || !os.SameFile(fi, fi2) {
		t.Fatalf("the shared file was rewritten: %v", err)
	}
	if files, err := s.SharedFiles(); err != nil || !reflect.DeepEqual(files, map[string]int64{want.Path: want.Size}) {
		t.Fatalf("SharedFiles = %v, %v", files, err)
	}

	// A wrong digest stores nothing.
	other := filepath.Join(t.TempDir(), "000043.sst")
	if err := os.WriteFile(other, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	wrong := sha256Hex([]byte("not other"))
	if _, _, err := s.PutShared(other, wrong); err == nil || !strings.Contains(err.Error(), "not the "+wrong+" given") {
		t.Fatalf("PutShared with a wrong digest = %v", err)
	}
	if _, _, err := s.PutShared(other, "xyz"); err == nil || !strings.Contains(err.Error(), "not a hex SHA-256") {
		t.Fatalf("PutShared with a malformed digest = %v", err)
	}
	if got := readTree(t, filepath.Join(s.Root(), "shared")); len(got) != 1 {
		t.Fatalf("shared directory holds %v; want only the first file", slices.Collect(func(yield func(string) bool) {
			for p := range got {
				yield(p)
			}
		}))
	}

	// A damaged shared file is replaced by the next put of its content.
	flipFileByte(t, stored, 10)
	h4, uploaded, err := fresh.PutShared(src, sum)
	if err != nil || !uploaded || h4 != want {
		t.Fatalf("PutShared over a damaged file = %+v, %t, %v; want a fresh upload", h4, uploaded, err)
	}
	if b, err := os.ReadFile(stored); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("damaged shared file not replaced: %v", err)
	}

	// Checkpoints share files: the second uploads only its new one.
	files := map[string]string{"000002.sst": "two", "000005.sst": "five", "MANIFEST-000001": "manifest"}
	_, n := writeSharedCheckpoint(t, s, 1, files)
	if n != 2 {
		t.Fatalf("checkpoint 1 uploaded %d shared files, want 2", n)
	}
	files["000009.sst"] = "nine"
	m2, n := writeSharedCheckpoint(t, s, 2, files)
	if n != 1 {
		t.Fatalf("checkpoint 2 uploaded %d shared files, want 1", n)
	}
	if m2.Version != 2 {
		t.Fatalf("metadata with shared files has version %d, want 2", m2.Version)
	}
	// Discard leaves shared files to whoever counts their references.
	before, _ := s.SharedFiles()
	if err := s.Discard(1); err != nil {
		t.Fatal(err)
	}
	if after, err := s.SharedFiles(); err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("Discard changed the shared files: %v → %v, %v", before, after, err)
	}
	got, err := s.ReadMetadata(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(got); err != nil {
		t.Fatalf("Verify of checkpoint 2 after discarding 1: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "db")
	if err := s.Restore(got, testTask, dst); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := readTree(t, dst); !reflect.DeepEqual(got, files) {
		t.Fatalf("restored %v, want %v", got, files)
	}
}

func TestCompressionRoundTrip(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		if err := s.SetCompression(5); err == nil {
			t.Fatal("SetCompression(5) succeeded")
		}
		if err := s.SetCompression(3); err != nil {
			t.Fatal(err)
		}
		m := writeTestCheckpoint(t, s, 1)
		for _, h := range m.Tasks[0].State {
			raw := stateFiles[strings.TrimPrefix(h.Path, "tasks/0-1/state/")]
			if !h.Compressed || h.RawSize != int64(len(raw)) {
				t.Fatalf("CopyDir handle %+v: want compressed, raw size %d", h, len(raw))
			}
			stored := b.read("chk-0000000001/" + h.Path)
			if int64(len(stored)) != h.Size || sha256Hex(stored) != h.SHA256 {
				t.Fatalf("stored file of %s does not match its handle", h.Path)
			}
			if len(raw) > 1000 && len(stored) >= len(raw)/4 {
				t.Fatalf("%s stored in %d bytes from %d: not compressed", h.Path, len(stored), len(raw))
			}
			r, err := s.Open(1, h)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(got) != raw {
				t.Fatalf("Open(%s) read %d bytes, %v; want the %d raw bytes", h.Path, len(got), err, len(raw))
			}
		}
		if ch := m.Tasks[0].Channels[0].File; ch.Compressed {
			t.Fatalf("WriteFile compressed %+v", ch)
		}
		if err := s.Verify(m); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		dst := filepath.Join(t.TempDir(), "db")
		if err := s.Restore(m, testTask, dst); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := readTree(t, dst); !reflect.DeepEqual(got, stateFiles) {
			t.Fatalf("restored %v, want the raw state files", got)
		}

		// Shared files compress too; a compressed shared file is found again
		// by a storage whose compression is off.
		files := map[string]string{"000002.sst": strings.Repeat("a", 5000), "OPTIONS-000003": "options"}
		m2, _ := writeSharedCheckpoint(t, s, 2, files)
		var shared FileHandle
		for _, h := range m2.Tasks[0].State {
			if h.Shared {
				shared = h
			}
		}
		if !shared.Compressed || shared.RawSize != 5000 || shared.Size >= 5000 {
			t.Fatalf("shared handle %+v: want compressed from 5000 bytes", shared)
		}
		fresh, err := OpenStorageAt(s.Root(), b.nc)
		if err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(t.TempDir(), "000002.sst")
		writeTree(t, filepath.Dir(src), map[string]string{"000002.sst": files["000002.sst"]})
		if h, uploaded, err := fresh.PutShared(src, ""); err != nil || uploaded || h != (FileHandle{Path: shared.Path, Size: shared.Size, SHA256: shared.SHA256, Shared: true, Compressed: true, RawSize: 5000}) {
			t.Fatalf("PutShared of a stored compressed file = %+v, %t, %v; want %+v", h, uploaded, err, shared)
		}
		dst = filepath.Join(t.TempDir(), "db")
		if err := fresh.Restore(m2, testTask, dst); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := readTree(t, dst); !reflect.DeepEqual(got, files) {
			t.Fatalf("restored %v", got)
		}
	})
}

func TestVerifyCompressedAndShared(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		if err := s.SetCompression(1); err != nil {
			t.Fatal(err)
		}
		m := writeTestCheckpoint(t, s, 1)
		const sst = "tasks/0-1/state/000005.sst"
		b.flip("chk-0000000001/"+sst, 20)
		err := s.Verify(m)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chk-0000000001/"+sst+": SHA-256") {
			t.Fatalf("Verify of a damaged compressed file = %v", err)
		}
		var h FileHandle
		for _, x := range m.Tasks[0].State {
			if x.Path == sst {
				h = x
			}
		}
		r, err := s.Open(1, h)
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chk-0000000001/"+sst) {
			t.Fatalf("reading a damaged compressed file = %v; want a corruption error naming it", err)
		}
		dst := t.TempDir()
		if err := s.Restore(m, testTask, dst); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), sst) {
			t.Fatalf("Restore of a damaged compressed file = %v", err)
		}
		if got := readTree(t, dst); len(got) != 0 {
			t.Fatalf("a failed restore left %v", got)
		}
		b.flip("chk-0000000001/"+sst, 20)
		if err := s.Verify(m); err != nil {
			t.Fatalf("Verify after undoing the damage: %v", err)
		}
		// A handle whose raw size is wrong fails on reading.
		h.RawSize++
		r, err = s.Open(1, h)
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "decompresses to") {
			t.Fatalf("reading with a wrong raw size = %v", err)
		}

		// A missing shared file is reported by its name below the root.
		m2, _ := writeSharedCheckpoint(t, s, 2, map[string]string{"000002.sst": "two", "000003.sst": "three"})
		gone := m2.Tasks[0].State[0].Path
		if err := s.RemoveShared(gone); err != nil {
			t.Fatal(err)
		}
		err = s.Verify(m2)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpoint: "+gone+": missing") || strings.Count(err.Error(), "\n") != 0 {
			t.Fatalf("Verify with a missing shared file = %v; want %s reported missing", err, gone)
		}
		if _, skipped, err := s.LatestUsable(); err != nil || len(skipped) != 1 {
			t.Fatalf("LatestUsable = %v, %v; want checkpoint 2 skipped", skipped, err)
		}
		// Shared paths are checked.
		bad := m2.Tasks[0].State[1]
		bad.Path = "shared/../chk-0000000001/x"
		if err := s.verifyFile(2, bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "invalid shared file path") {
			t.Fatalf("Verify of a bad shared path = %v", err)
		}
		m2.Tasks[0].State[1].Name = ""
		if err := s.Restore(m2, testTask, t.TempDir()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "has no name") {
			t.Fatalf("Restore of a shared file without a name = %v", err)
		}
	})
}

func TestAuditAndRemoveShared(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		m1, _ := writeSharedCheckpoint(t, s, 1, map[string]string{"000002.sst": "two", "000003.sst": "three"})
		writeSharedCheckpoint(t, s, 2, map[string]string{"000003.sst": "three", "000004.sst": "four"})
		if missing, unref, err := s.Audit(); err != nil || len(missing) != 0 || len(unref) != 0 {
			t.Fatalf("Audit of an intact storage = %v, %v, %v", missing, unref, err)
		}

		// Checkpoint 1 goes; the registry has not yet removed its only file.
		if err := s.Discard(1); err != nil {
			t.Fatal(err)
		}
		two := m1.Tasks[0].State[0].Path // 000002.sst
		// And a file both reference goes missing.
		three := "shared/" + sha256Hex([]byte("three")) + ".sst"
		if err := s.RemoveShared(three); err != nil {
			t.Fatal(err)
		}
		missing, unref, err := s.Audit()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(unref, []string{two}) {
			t.Fatalf("Audit unreferenced = %v, want [%s]", unref, two)
		}
		if len(missing) != 1 || !errors.Is(missing[0], ErrCorrupt) || !strings.Contains(missing[0].Error(), "checkpoint 2: checkpoint: "+three+": missing") {
			t.Fatalf("Audit missing = %v; want %s missing from checkpoint 2", missing, three)
		}

		// RemoveShared: removed, idempotent, and only shared paths.
		if err := s.RemoveShared(two); err != nil {
			t.Fatal(err)
		}
		if err := s.RemoveShared(two); err != nil {
			t.Fatalf("second RemoveShared = %v", err)
		}
		for _, p := range []string{"chk-0000000002/_metadata", "shared/", "shared/../x", "shared/.tmp", "shared/a/b"} {
			if err := s.RemoveShared(p); err == nil {
				t.Fatalf("RemoveShared(%q) succeeded", p)
			}
		}
		if _, err := s.ReadMetadata(2); err != nil {
			t.Fatalf("checkpoint 2 damaged by RemoveShared: %v", err)
		}
		files, err := s.SharedFiles()
		if err != nil || len(files) != 1 {
			t.Fatalf("SharedFiles = %v, %v; want only 000004.sst", files, err)
		}
		if _, unref, err := s.Audit(); err != nil || len(unref) != 0 {
			t.Fatalf("Audit after RemoveShared = %v, %v", unref, err)
		}

		if missing, _, err := testStorage(t).Audit(); err != nil || len(missing) != 0 {
			t.Fatalf("Audit of an empty storage = %v, %v", missing, err)
		}
		if IsObjectLocation(s.Root()) {
			return // no temporary files
		}
		// A crash's temporary file is not a shared file; CleanIncomplete
		// removes it.
		tmp := filepath.Join(s.Root(), "shared", ".abc.sst.tmp-123")
		if err := os.WriteFile(tmp, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		if files, err := s.SharedFiles(); err != nil || len(files) != 1 {
			t.Fatalf("SharedFiles with a temporary file = %v, %v", files, err)
		}
		if _, err := s.CleanIncomplete(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("CleanIncomplete left %s: %v", tmp, err)
		}
	})
}

// syncLogFS is the operating system's storageFS that logs renames and
// directory syncs, in order.
type syncLogFS struct {
	osStorageFS
	mu  sync.Mutex
	log []string
}

func (f *syncLogFS) add(op string) {
	f.mu.Lock()
	f.log = append(f.log, op)
	f.mu.Unlock()
}

func (f *syncLogFS) Rename(oldpath, newpath string) error {
	f.add("rename " + filepath.Dir(newpath))
	return f.osStorageFS.Rename(oldpath, newpath)
}

func (f *syncLogFS) SyncDir(dir string) error {
	f.add("sync " + dir)
	return f.osStorageFS.SyncDir(dir)
}

// TestCheckpointDirectoriesSyncedAtCompletion: the files of an incomplete
// checkpoint do not sync their directories one by one; WriteMetadata syncs
// every directory that received one, after the file arrived there and
// before _metadata claims the checkpoint complete, and then _metadata's own.
func TestCheckpointDirectoriesSyncedAtCompletion(t *testing.T) {
	s, err := OpenStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := &syncLogFS{}
	setFS(s, log)
	m, err := writeCheckpointFiles(s, 1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, op := range log.log {
		if dir, ok := strings.CutPrefix(op, "rename "); ok {
			written[dir] = true
		}
		if strings.HasPrefix(op, "sync ") {
			t.Fatalf("a directory synced before the checkpoint completes: %v", log.log)
		}
	}
	if len(written) < 2 {
		t.Fatalf("the checkpoint's files went to %d directories: %v", len(written), log.log)
	}
	before := len(log.log)
	if err := s.WriteMetadata(m); err != nil {
		t.Fatal(err)
	}
	synced := map[string]int{}
	metaAt, metaSynced := -1, false
	for k, op := range log.log[before:] {
		if dir, ok := strings.CutPrefix(op, "sync "); ok {
			if _, seen := synced[dir]; !seen {
				synced[dir] = k
			}
			if metaAt >= 0 && dir == s.Dir(1) {
				metaSynced = true
			}
		}
		if op == "rename "+s.Dir(1) && metaAt < 0 {
			metaAt = k
		}
	}
	for dir := range written {
		if k, ok := synced[dir]; !ok || (metaAt >= 0 && k > metaAt) {
			t.Errorf("directory %s: synced %v before _metadata arrived (log %v)", dir, ok, log.log[before:])
		}
	}
	if _, ok := synced[s.root]; !ok {
		t.Errorf("the storage root was not synced: %v", log.log[before:])
	}
	if metaAt < 0 || !metaSynced {
		t.Errorf("_metadata renamed at %d, its directory synced after it %v: %v", metaAt, metaSynced, log.log[before:])
	}
}
