package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// fuzzID is the checkpoint id of the fuzz fixture.
const fuzzID = 7

// metadataFixture is a storage root holding checkpoint fuzzID with a file
// behind every kind of handle the writers produce: plain and compressed
// state files, compressed and uncompressed shared state files, and a
// channel-state file.
type metadataFixture struct {
	files map[string][]byte // path from the root → content, _metadata excluded
	meta  *Metadata         // as WriteMetadata wrote it
	data  []byte            // its _metadata file
}

func newMetadataFixture(tb testing.TB) *metadataFixture {
	tb.Helper()
	root := filepath.Join(tb.TempDir(), "root")
	s, err := OpenStorage(root)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := writeCheckpointFiles(s, fuzzID, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	src := tb.TempDir()
	put := func(name, content string) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	task := s.TaskDir(fuzzID, testTask) + "/state/"
	if err := s.SetCompression(2); err != nil {
		tb.Fatal(err)
	}
	h, err := s.CopyFile(fuzzID, task+"000009.sst", put("000009.sst", strings.Repeat("compressed ", 200)))
	if err != nil {
		tb.Fatal(err)
	}
	m.Tasks[0].State = append(m.Tasks[0].State, h)
	h, _, err = s.PutShared(put("000011.sst", strings.Repeat("shared and compressed ", 100)), "")
	if err != nil {
		tb.Fatal(err)
	}
	h.Name = task + "000011.sst"
	m.Tasks[0].State = append(m.Tasks[0].State, h)
	if err := s.SetCompression(0); err != nil {
		tb.Fatal(err)
	}
	h, _, err = s.PutShared(put("000012.sst", "shared as it is"), "")
	if err != nil {
		tb.Fatal(err)
	}
	h.Name = task + "000012.sst"
	m.Tasks[0].State = append(m.Tasks[0].State, h)
	if err := s.WriteMetadata(m); err != nil {
		tb.Fatal(err)
	}
	fx := &metadataFixture{files: map[string][]byte{}, meta: m}
	fx.data, err = os.ReadFile(filepath.Join(s.Dir(fuzzID), MetadataName))
	if err != nil {
		tb.Fatal(err)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == MetadataName {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fx.files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return fx
}

// materialize writes the fixture's files and meta as the _metadata of
// checkpoint fuzzID into a new root below dir, and returns the root.
func (fx *metadataFixture) materialize(tb testing.TB, dir string, meta []byte) string {
	tb.Helper()
	root := filepath.Join(dir, "root")
	files := map[string][]byte{DirName(fuzzID) + "/" + MetadataName: meta}
	for p, b := range fx.files {
		files[p] = b
	}
	for p, b := range files {
		name := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// cloneMetadata deep-copies m through its JSON encoding.
func cloneMetadata(tb testing.TB, m *Metadata) *Metadata {
	tb.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	var c Metadata
	if err := json.Unmarshal(b, &c); err != nil {
		tb.Fatal(err)
	}
	return &c
}

// sealed returns m's _metadata file as WriteMetadata writes it.
func sealed(tb testing.TB, m *Metadata) []byte {
	tb.Helper()
	b, err := encodeMetadata(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// metadataVariants are the fixture's metadata and edits of it, each sealed
// with a valid checksum: a savepoint, a version 1 checkpoint, and handles
// that point outside the checkpoint, lie about sizes or collide.
func (fx *metadataFixture) metadataVariants(tb testing.TB) [][]byte {
	out := [][]byte{fx.data}
	edit := func(fn func(m *Metadata)) {
		m := cloneMetadata(tb, fx.meta)
		fn(m)
		out = append(out, sealed(tb, m))
	}
	state := func(m *Metadata) []FileHandle { return m.Tasks[0].State }
	edit(func(m *Metadata) { m.Kind = KindSavepoint })
	edit(func(m *Metadata) { // plain handles only: version 1
		m.Tasks[0].State = slices.DeleteFunc(state(m), func(h FileHandle) bool { return h.Shared || h.Compressed })
	})
	edit(func(m *Metadata) { state(m)[0].Path = "../../../escaped" })
	edit(func(m *Metadata) { state(m)[0].Path = "/etc/passwd" })
	edit(func(m *Metadata) { state(m)[0].Path = "tasks/0-1/state/../../../../x" })
	edit(func(m *Metadata) { state(m)[0].Path = MetadataName })
	edit(func(m *Metadata) { state(m)[len(state(m))-1].Path = "shared/../chk-0000000007/_metadata" })
	edit(func(m *Metadata) { state(m)[len(state(m))-1].Name = "tasks/0-1/state/../../1-0/state/x" })
	edit(func(m *Metadata) { state(m)[len(state(m))-1].Name = "" })
	edit(func(m *Metadata) { state(m)[0].Size = -1 })
	edit(func(m *Metadata) { state(m)[0].Size = 1 << 62 })
	edit(func(m *Metadata) { state(m)[0].RawSize = 3 })
	edit(func(m *Metadata) { state(m)[0].Compressed = true; state(m)[0].RawSize = 1 << 40 })
	edit(func(m *Metadata) { state(m)[len(state(m))-3].RawSize = -1 })
	edit(func(m *Metadata) { state(m)[len(state(m))-3].RawSize = 1 << 40 })
	edit(func(m *Metadata) { m.Tasks[0].State = append(state(m), state(m)[0]) })
	edit(func(m *Metadata) {
		h := state(m)[0]
		h.Path += "/below"
		m.Tasks[0].State = append(state(m), h)
	})
	edit(func(m *Metadata) { m.Tasks = append(m.Tasks, m.Tasks[0]) })
	edit(func(m *Metadata) { m.Tasks[0].Channels[0].File.Path = "tasks/0-1/channels/../../../../../x" })
	edit(func(m *Metadata) { m.Tasks = nil; m.Metrics = map[string]Metrics{} })
	edit(func(m *Metadata) { m.Plan = json.RawMessage(` { "name" : "x" } `) })
	return out
}

// fuzzSeeds adds data, its truncations and some bit flips.
func fuzzSeeds(data []byte) [][]byte {
	out := [][]byte{data}
	for _, n := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1} {
		if n >= 0 && n < len(data) {
			out = append(out, data[:n])
		}
	}
	for i := 1; i < 8 && len(data) > 0; i++ {
		b := bytes.Clone(data)
		b[i*len(data)/8] ^= 1 << (i % 8)
		out = append(out, b)
	}
	return out
}

// FuzzReadMetadata checks that no _metadata file makes the decoder panic,
// and that whatever it accepts encodes back to a file it accepts again,
// unchanged.
func FuzzReadMetadata(f *testing.F) {
	fx := newMetadataFixture(f)
	for _, v := range fx.metadataVariants(f) {
		for _, s := range fuzzSeeds(v) {
			f.Add(s, false)
			f.Add(s, true)
		}
	}
	for _, s := range []string{
		`{"format":"wstream-checkpoint","version":2}`,
		`{"format":"wstream-checkpoint","version":3}`,
		`{"format":"wstream-checkpoint","version":1,"id":7,"kind":0,"tasks":null}`,
		`{"format":"wstream-checkpoint","version":1,"id":7,"kind":1,"plan":" [ 1 ] ","metrics":{}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, reseal bool) {
		const name = "chk-0000000007/_metadata"
		if reseal {
			data = resealMetadata(data)
		}
		m, err := decodeMetadata(name, fuzzID, data)
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if m.ID != fuzzID || m.Format != MetadataFormat || m.Version < 1 || m.Version > MetadataVersion {
			t.Fatalf("accepted id %d, format %q, version %d", m.ID, m.Format, m.Version)
		}
		// What is read can be written: a copy of the checkpoint
		// (CopyCheckpoint) writes the metadata it read.
		enc, err := encodeMetadata(m)
		if err != nil {
			t.Fatalf("accepted metadata does not encode: %v", err)
		}
		m2, err := decodeMetadata(name, fuzzID, enc)
		if err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v\n%s", err, enc)
		}
		enc2, err := encodeMetadata(m2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("metadata changed in a round trip:\n%s\n%s", enc, enc2)
		}
	})
}

// resealMetadata replaces the checksum of a JSON object with the one its
// content has, so that the fuzzer's edits get past the checksum to the
// checks behind it. Anything else is returned as it is.
func resealMetadata(data []byte) []byte {
	var obj map[string]json.RawMessage
	var m Metadata
	if json.Unmarshal(data, &obj) != nil || json.Unmarshal(data, &m) != nil {
		return data
	}
	sum, err := m.checksum()
	if err != nil {
		return data
	}
	obj["checksum"], _ = json.Marshal(sum)
	out, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	return out
}

// treeDigest describes every file below dir, for checking that readers
// change nothing.
func treeDigest(tb testing.TB, dir string) string {
	tb.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel)
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			b.WriteString(" " + hex.EncodeToString(sum[:8]))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

// FuzzVerifyMetadata feeds the readers of a restore (OpenRestorePoint,
// OpenSavepoint, Verify, Restore, Audit, CopyCheckpoint) metadata whose
// structure the fuzzer chooses, sealed with a valid checksum so that it
// gets past ReadMetadata, against the fixture's real files. They must not
// panic, must agree with each other, must leave the storage as it was, and
// Restore must write only below its destination, exactly the verified
// bytes.
func FuzzVerifyMetadata(f *testing.F) {
	fx := newMetadataFixture(f)
	for _, v := range fx.metadataVariants(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Metadata
		if json.Unmarshal(data, &m) != nil {
			return
		}
		m.ID, m.Format, m.Checksum = fuzzID, MetadataFormat, ""
		m.Version = min(max(m.Version, 1), MetadataVersion)
		sum, err := m.checksum()
		if err != nil {
			return
		}
		m.Checksum = sum
		meta, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		root := fx.materialize(t, dir, meta)
		before := treeDigest(t, root)

		st, got, err := OpenRestorePoint(root)
		_, _, sperr := OpenSavepoint(root)
		if (sperr == nil) != (err == nil && m.Kind == KindSavepoint) {
			t.Fatalf("OpenSavepoint: %v, but OpenRestorePoint: %v of kind %s", sperr, err, m.Kind)
		}
		if err != nil {
			if st2, err2 := OpenStorage(root); err2 == nil {
				_, _, _ = st2.Audit()
			}
		} else {
			if missing, _, err := st.Audit(); err != nil || len(missing) > 0 {
				t.Fatalf("verified checkpoint fails Audit: %v %v", err, missing)
			}
			for i, task := range got.Tasks {
				out := filepath.Join(t.TempDir(), "restore")
				dst := filepath.Join(out, "dst")
				if err := st.Restore(got, task.Task, dst); err != nil {
					if entries, _ := os.ReadDir(dst); len(entries) > 0 {
						t.Fatalf("failed Restore of task %d left %s behind: %v", i, entries[0].Name(), err)
					}
				} else {
					checkRestored(t, st, got, task, dst)
				}
				if entries, _ := os.ReadDir(out); len(entries) > 1 || len(entries) == 1 && entries[0].Name() != "dst" {
					t.Fatalf("Restore of task %d wrote outside its destination: %v", i, entries)
				}
			}
			copyDir := filepath.Join(dir, "copy")
			dstStorage, err := OpenStorage(copyDir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.CopyCheckpoint(fuzzID, dstStorage); err == nil {
				if _, _, err := OpenRestorePoint(copyDir); err != nil {
					t.Fatalf("copy of a verified checkpoint does not verify: %v", err)
				}
			}
		}
		if after := treeDigest(t, root); after != before {
			t.Fatalf("readers changed the storage:\n%s\n%s", before, after)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 2 {
			t.Fatalf("readers wrote next to the storage: %v", entries)
		}
	})
}

// checkRestored checks that dst holds exactly task's state files, each with
// the bytes Open returns for its handle.
func checkRestored(t *testing.T, st *Storage, m *Metadata, task SubtaskState, dst string) {
	t.Helper()
	prefix := st.TaskDir(m.ID, task.Task) + "/state/"
	want := map[string][]byte{}
	for _, h := range task.State {
		p := h.Path
		if h.Shared {
			p = h.Name
		}
		r, err := st.Open(m.ID, h)
		if err != nil {
			t.Fatalf("restored %s, but Open fails: %v", p, err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("restored %s, but reading it fails: %v", p, err)
		}
		want[strings.TrimPrefix(p, prefix)] = b
	}
	n := 0
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if w, ok := want[filepath.ToSlash(rel)]; !ok || !bytes.Equal(w, b) {
			t.Errorf("restored %s: %d bytes, want %d (listed: %v)", rel, len(b), len(w), ok)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("restored %d files, want %d", n, len(want))
	}
}

// FuzzOpenStored checks the reader of one stored file against a handle
// that describes the bytes stored (size and SHA-256, as Verify checks) but
// whose compression fields the fuzzer chooses: whatever the bytes are, the
// reader returns exactly the raw bytes the handle records or an error
// wrapping ErrCorrupt, and its memory stays proportional to those sizes,
// not to sizes the stored bytes claim.
func FuzzOpenStored(f *testing.F) {
	raw := []byte(strings.Repeat("0123456789abcdef", 300))
	for level := 1; level <= 4; level++ {
		var b bytes.Buffer
		w, err := encodeInto(&b, writeOpts{level: level}, func(w io.Writer) error {
			_, err := w.Write(raw)
			return err
		})
		if err != nil {
			f.Fatal(err)
		}
		for _, s := range fuzzSeeds(b.Bytes()) {
			f.Add(s, true, w.raw)
		}
	}
	f.Add(raw, false, int64(0))
	f.Add(raw, false, int64(len(raw)))
	f.Add(raw, false, int64(7))
	f.Add([]byte{}, true, int64(0))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, true, int64(0))
	// A minimal frame: 1 KiB window, one raw block of one byte.
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x09, 0x00, 0x00, 'x'}, true, int64(1))
	f.Fuzz(func(t *testing.T, stored []byte, compressed bool, rawSize int64) {
		root := t.TempDir()
		s, err := OpenStorage(root)
		if err != nil {
			t.Fatal(err)
		}
		// As WriteFile would store it, without its syncs, which would
		// make this target slow.
		name := filepath.Join(s.Dir(1), "f")
		if err := os.Mkdir(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, stored, 0o644); err != nil {
			t.Fatal(err)
		}
		h := FileHandle{Path: "f", Size: int64(len(stored)), SHA256: sha256Hex(stored), Compressed: compressed, RawSize: rawSize}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := s.Open(1, h)
		var got []byte
		if err == nil {
			// Read in small steps: a reader that returns more than the
			// handle allows must be caught before it is all read.
			got, err = io.ReadAll(io.LimitReader(r, max(h.Size, h.RawSize, 0)+1))
			r.Close()
		}
		runtime.ReadMemStats(&after)
		if used, limit := after.TotalAlloc-before.TotalAlloc, uint64(64<<20+16*len(stored)); used > limit {
			t.Fatalf("reading %d stored bytes (raw size %d) allocated %d bytes", len(stored), rawSize, used)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		want := stored
		if compressed {
			dec, derr := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(1<<30))
			if derr != nil {
				t.Fatal(derr)
			}
			want, derr = dec.DecodeAll(stored, nil)
			dec.Close()
			if derr != nil {
				t.Fatalf("read %d bytes of a file that does not decompress: %v", len(got), derr)
			}
		} else if rawSize != 0 && rawSize != int64(len(stored)) {
			t.Fatalf("read an uncompressed file of %d bytes with raw size %d", len(stored), rawSize)
		}
		if compressed && int64(len(got)) != rawSize {
			t.Fatalf("read %d bytes, the handle records %d", len(got), rawSize)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes that differ from the %d stored ones decode to", len(got), len(want))
		}
	})
}

// FuzzLocation checks the parsers of checkpoint directory names and
// object store locations: what they accept formats back to the same text.
func FuzzLocation(f *testing.F) {
	for _, s := range []string{
		"chk-0000000007", "chk-12345678901", "chk-0", "chk--000000001", "chk-+000000001", "chk-0000000007/",
		"nats-obj://b/p/q", "nats-obj://b", "nats-obj://b/", "nats-obj:///p", "nats-obj://b/../p",
		"nats-obj://b//p//", "nats-obj://b/p\\q", "nats-obj://b-_9/chk-0000000042", "/tmp/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if id, ok := ParseDirName(s); ok {
			if id < 1 || DirName(id) != s {
				t.Fatalf("%q parsed as id %d", s, id)
			}
		}
		bucket, prefix, err := ParseObjectLocation(s)
		if err != nil {
			return
		}
		loc := ObjectScheme + bucket
		if prefix != "" {
			loc += "/" + prefix
			if clean, err := cleanRel(prefix); err != nil || clean != prefix {
				t.Fatalf("%q: prefix %q is not clean", s, prefix)
			}
		}
		b2, p2, err := ParseObjectLocation(loc)
		if err != nil || b2 != bucket || p2 != prefix {
			t.Fatalf("%q → %q, %q → %q: %q, %q, %v", s, bucket, prefix, loc, b2, p2, err)
		}
		if j := JoinLocation(loc, "chk-0000000001"); !strings.HasPrefix(j, loc+"/") {
			t.Fatalf("JoinLocation(%q) = %q", loc, j)
		}
	})
}

// TestReadMetadataRefusesUnknownKind pins a fuzz finding: metadata of kind
// 0 (no "kind" at all) read as valid, and readers took it for a checkpoint;
// WriteMetadata writes no such file.
func TestReadMetadataRefusesUnknownKind(t *testing.T) {
	for _, kind := range []Kind{0, 3, 255} {
		m := &Metadata{Format: MetadataFormat, Version: 1, ID: fuzzID, Kind: kind}
		sum, err := m.checksum()
		if err != nil {
			t.Fatal(err)
		}
		m.Checksum = sum
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		_, err = decodeMetadata("chk-0000000007/_metadata", fuzzID, data)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "unknown kind") {
			t.Errorf("kind %d: %v, want an unknown kind error wrapping ErrCorrupt", kind, err)
		}
	}
}

// TestOpenBoundsZstdWindow pins a fuzz finding: a stored file of a few
// bytes whose zstd frame header declares a large window made Open allocate
// that window (up to 512 MiB) before reading any data.
func TestOpenBoundsZstdWindow(t *testing.T) {
	s := testStorage(t)
	// Window descriptor 0x98: 2^29 bytes; then one raw block of one byte.
	stored := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x98, 0x09, 0x00, 0x00, 'x'}
	h, err := s.WriteFile(1, "f", stored)
	if err != nil {
		t.Fatal(err)
	}
	h.Compressed, h.RawSize = true, 1
	var got []byte
	used := allocatedBytes(func() {
		r, err := s.Open(1, h)
		if err != nil {
			t.Fatal(err)
		}
		got, err = io.ReadAll(r)
		r.Close()
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("read %q, error %v, want one wrapping ErrCorrupt", got, err)
		}
	})
	if used > 16<<20 {
		t.Errorf("opening a %d-byte file allocated %d bytes", len(stored), used)
	}
}

func allocatedBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestWritersFitZstdWindow keeps the writers within the window the readers
// accept (maxZstdWindow): a frame declares its window whatever its size.
func TestWritersFitZstdWindow(t *testing.T) {
	raw := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 1<<15) // > 1 MiB
	for level := 1; level <= 4; level++ {
		var b bytes.Buffer
		if _, err := encodeInto(&b, writeOpts{level: level}, func(w io.Writer) error {
			_, err := w.Write(raw)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var h zstd.Header
		if err := h.Decode(b.Bytes()); err != nil {
			t.Fatal(err)
		}
		if h.WindowSize > maxZstdWindow {
			t.Errorf("level %d writes a window of %d bytes, readers accept %d", level, h.WindowSize, maxZstdWindow)
		}
	}
}
