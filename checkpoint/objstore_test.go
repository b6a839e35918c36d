package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream starts a JetStream server inside the test, reachable
// only in-process, and returns a connection to it.
func startJetStream(t testing.TB) *nats.Conn {
	t.Helper()
	nc, _ := startJetStreamServer(t)
	return nc
}

// startJetStreamServer is startJetStream that returns the server too.
func startJetStreamServer(t testing.TB) (*nats.Conn, *server.Server) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		ServerName: "checkpoint-test",
		JetStream:  true,
		StoreDir:   t.TempDir(),
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("JetStream server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return nc, srv
}

// backend is a storage under test with the means to reach its files
// around it.
type backend struct {
	s  *Storage
	nc *nats.Conn // for an object store
	// damage replaces the stored bytes of the file p (relative to the
	// root); remove deletes it; names lists every stored file.
	damage func(p string, content []byte)
	remove func(p string)
	names  func() []string
	// read returns the stored bytes of the file p.
	read func(p string) []byte
}

// flip flips one bit of the stored byte at of the file p.
func (b backend) flip(p string, at int) {
	data := b.read(p)
	data[at] ^= 0x20
	b.damage(p, data)
}

func dirStorage(t *testing.T) backend {
	s := testStorage(t)
	return backend{
		s: s,
		damage: func(p string, content []byte) {
			name := filepath.Join(s.Root(), filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, content, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(p string) {
			if err := os.Remove(filepath.Join(s.Root(), filepath.FromSlash(p))); err != nil {
				t.Fatal(err)
			}
		},
		names: func() []string { return slices.Sorted(maps.Keys(readTree(t, s.Root()))) },
		read: func(p string) []byte {
			data, err := os.ReadFile(filepath.Join(s.Root(), filepath.FromSlash(p)))
			if err != nil {
				t.Fatal(err)
			}
			return data
		},
	}
}

func objStorage(t *testing.T) backend {
	nc := startJetStream(t)
	s, err := OpenStorageAt("nats-obj://ckpt/jobs/j1", nc)
	if err != nil {
		t.Fatal(err)
	}
	obs := bucketOf(t, nc, "ckpt")
	ctx := context.Background()
	return backend{
		s:  s,
		nc: nc,
		damage: func(p string, content []byte) {
			if _, err := obs.PutBytes(ctx, "jobs/j1/"+p, content); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(p string) {
			if err := obs.Delete(ctx, "jobs/j1/"+p); err != nil {
				t.Fatal(err)
			}
		},
		names: func() []string { return bucketNames(t, obs, "jobs/j1/") },
		read: func(p string) []byte {
			data, err := obs.GetBytes(ctx, "jobs/j1/"+p)
			if err != nil {
				t.Fatal(err)
			}
			return data
		},
	}
}

func bucketOf(t *testing.T, nc *nats.Conn, bucket string) jetstream.ObjectStore {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// bucketNames lists the bucket's objects below prefix, relative to it.
func bucketNames(t *testing.T, obs jetstream.ObjectStore, prefix string) []string {
	t.Helper()
	infos, err := obs.List(context.Background())
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		if rel, ok := strings.CutPrefix(info.Name, prefix); ok {
			names = append(names, rel)
		}
	}
	slices.Sort(names)
	return names
}

// faultStorage is dirStorage through a faultBackend with no fault set:
// the wrapper itself must change nothing.
func faultStorage(t *testing.T) backend {
	b := dirStorage(t)
	injectFaults(b.s)
	return b
}

// forBackends runs fn against every backend: a directory, the object
// store of a real embedded JetStream server, the fault-injecting backend
// over a directory, and the object store whose every request first meets
// a fault of the moment.
func forBackends(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, c := range []struct {
		name string
		open func(*testing.T) backend
	}{{"dir", dirStorage}, {"obj", objStorage}, {"fault", faultStorage}, {"obj-flaky", flakyObjStorage}} {
		t.Run(c.name, func(t *testing.T) { fn(t, c.open(t)) })
	}
}

func TestBackendsWriteReadVerify(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		for level, id := range []int64{1, 2} {
			if err := s.SetCompression(level); err != nil {
				t.Fatal(err)
			}
			m := writeTestCheckpoint(t, s, id)
			got, err := s.ReadMetadata(id)
			if err != nil {
				t.Fatalf("ReadMetadata(%d): %v", id, err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("ReadMetadata(%d) = %+v, want %+v", id, got, m)
			}
			if err := s.Verify(got); err != nil {
				t.Fatalf("Verify(%d): %v", id, err)
			}
			for _, h := range got.Tasks[0].State {
				if h.Compressed != (level > 0) {
					t.Fatalf("checkpoint %d: %s compressed = %v at level %d", id, h.Path, h.Compressed, level)
				}
				r, err := s.Open(id, h)
				if err != nil {
					t.Fatal(err)
				}
				data, err := io.ReadAll(r)
				r.Close()
				if want := stateFiles[strings.TrimPrefix(h.Path, "tasks/0-1/state/")]; err != nil || string(data) != want {
					t.Fatalf("Open(%d, %s) = %d bytes, %v; want %d bytes", id, h.Path, len(data), err, len(want))
				}
			}
		}
		if ids, err := s.Completed(); err != nil || !slices.Equal(ids, []int64{1, 2}) {
			t.Fatalf("Completed = %v, %v", ids, err)
		}
		if _, err := s.WriteFile(2, "tasks/0-1/late", []byte("x")); err == nil || !strings.Contains(err.Error(), "is complete") {
			t.Fatalf("writing into a complete checkpoint = %v", err)
		}
		if err := s.WriteMetadata(&Metadata{ID: 2, Kind: KindCheckpoint}); err == nil {
			t.Fatal("a second WriteMetadata of checkpoint 2 succeeded")
		}
		// Files without metadata make an incomplete checkpoint.
		if _, err := s.WriteFile(3, "tasks/0-1/channels/out-0-1", []byte("partial")); err != nil {
			t.Fatal(err)
		}
		if ids, _ := s.Completed(); !slices.Equal(ids, []int64{1, 2}) {
			t.Fatalf("Completed with checkpoint 3 incomplete = %v", ids)
		}
		if id, err := s.MaxID(); err != nil || id != 3 {
			t.Fatalf("MaxID = %d, %v; want 3", id, err)
		}
		removed, err := s.CleanIncomplete()
		if err != nil || !slices.Equal(removed, []int64{3}) {
			t.Fatalf("CleanIncomplete = %v, %v", removed, err)
		}
		for _, n := range b.names() {
			if strings.HasPrefix(n, "chk-0000000003") {
				t.Fatalf("CleanIncomplete left %s", n)
			}
		}
		// Retention: discarding checkpoint 1 removes its files, and only its.
		if err := s.Discard(1); err != nil {
			t.Fatal(err)
		}
		names := b.names()
		for _, n := range names {
			if strings.HasPrefix(n, "chk-0000000001") {
				t.Fatalf("Discard(1) left %s", n)
			}
		}
		if !slices.Contains(names, "chk-0000000002/_metadata") || !slices.Contains(names, "chk-0000000002/tasks/0-1/state/000005.sst") {
			t.Fatalf("after Discard(1) the storage holds %v", names)
		}
		if ids, _ := s.Completed(); !slices.Equal(ids, []int64{2}) {
			t.Fatalf("Completed after Discard(1) = %v", ids)
		}
		if m, skipped, err := s.LatestUsable(); err != nil || m.ID != 2 || len(skipped) != 0 {
			t.Fatalf("LatestUsable = %v, %v, %v", m, skipped, err)
		}
	})
}

func TestBackendsDamageNamed(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		if err := s.SetCompression(1); err != nil {
			t.Fatal(err)
		}
		writeTestCheckpoint(t, s, 6)
		m := writeTestCheckpoint(t, s, 7)
		const sst = "chk-0000000007/tasks/0-1/state/000005.sst"
		b.damage(sst, []byte("not what was written"))
		err := s.Verify(m)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), sst+": 20 bytes, truncated") {
			t.Fatalf("Verify with a replaced file = %v; want %s named", err, sst)
		}
		const ch = "chk-0000000007/tasks/0-1/channels/in-0-2"
		b.remove(ch)
		err = s.Verify(m)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ch+": missing") || !strings.Contains(err.Error(), sst) {
			t.Fatalf("Verify with a missing file = %v; want %s missing and %s damaged", err, ch, sst)
		}
		// Same size, other bytes: the checksum catches it, when reading too.
		var h FileHandle
		for _, x := range m.Tasks[0].State {
			if x.Path == "tasks/0-1/state/000002.sst" {
				h = x
			}
		}
		r, err := s.Open(7, h)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := io.ReadAll(r.(*rawReader).hr)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		stored[len(stored)/2] ^= 0xff
		b.damage("chk-0000000007/"+h.Path, stored)
		r, err = s.Open(7, h)
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chk-0000000007/"+h.Path+": SHA-256") {
			t.Fatalf("reading a damaged file = %v", err)
		}
		dst := t.TempDir()
		if err := s.Restore(m, testTask, dst); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Restore of a damaged checkpoint = %v", err)
		}
		if got := readTree(t, dst); len(got) != 0 {
			t.Fatalf("a failed restore left %v", got)
		}
		got, skipped, err := s.LatestUsable()
		if err != nil || got.ID != 6 || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), ch+": missing") {
			t.Fatalf("LatestUsable = %v, %v, %v; want 6 with 7 skipped", got, skipped, err)
		}
		missing, _, err := s.Audit()
		if err != nil || len(missing) != 3 {
			t.Fatalf("Audit = %v, %v; want the 3 damaged files of checkpoint 7", missing, err)
		}
		// Damaged metadata.
		b.damage("chk-0000000006/_metadata", []byte(`{"format":"wstream-checkpoint","version":1,"id":6}`))
		if _, err := s.ReadMetadata(6); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chk-0000000006/_metadata: checksum mismatch") {
			t.Fatalf("ReadMetadata of damaged metadata = %v", err)
		}
		if _, _, err := s.LatestUsable(); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("LatestUsable with none usable = %v", err)
		}
	})
}

func TestBackendsSharedReferences(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.s
		if err := s.SetCompression(2); err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("a compressible sst ", 1000)
		m1, up1 := writeSharedCheckpoint(t, s, 1, map[string]string{"000002.sst": big, "000003.sst": "three", "MANIFEST-1": "m1"})
		m2, up2 := writeSharedCheckpoint(t, s, 2, map[string]string{"000003.sst": "three", "000004.sst": "four", "MANIFEST-1": "m2"})
		if up1 != 2 || up2 != 1 {
			t.Fatalf("uploads = %d, %d; want 2, 1 (000003.sst once)", up1, up2)
		}
		h := m1.Tasks[0].State[0]
		h.Name = "" // set by the caller, not PutShared
		if !h.Shared || !h.Compressed || h.RawSize != int64(len(big)) || h.Size >= h.RawSize {
			t.Fatalf("shared handle %+v", h)
		}
		// A fresh storage on the same root learns the existing files.
		again, err := OpenStorageAt(s.Root(), b.nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := again.SetCompression(2); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(t.TempDir(), "000002.sst")
		writeTree(t, filepath.Dir(src), map[string]string{"000002.sst": big})
		got, uploaded, err := again.PutShared(src, "")
		if err != nil || uploaded || got != h {
			t.Fatalf("PutShared of a stored file = %+v, %v, %v; want %+v, not uploaded", got, uploaded, err, h)
		}
		// A wrong digest stores nothing.
		before := b.names()
		if _, _, err := again.PutShared(src, sha256Hex([]byte("other"))); err == nil || !strings.Contains(err.Error(), "not the") {
			t.Fatalf("PutShared with a wrong digest = %v", err)
		}
		if after := b.names(); !slices.Equal(before, after) {
			t.Fatalf("a failed PutShared changed the storage: %v → %v", before, after)
		}
		// A damaged shared file is replaced.
		b.damage(h.Path, []byte("junk"))
		if err := s.Verify(m1); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), h.Path) {
			t.Fatalf("Verify with a damaged shared file = %v", err)
		}
		if got, uploaded, err := again.PutShared(src, ""); err != nil || !uploaded || got != h {
			t.Fatalf("PutShared over a damaged file = %+v, %v, %v", got, uploaded, err)
		}
		if err := s.Verify(m1); err != nil {
			t.Fatalf("Verify after the repair: %v", err)
		}
		// Reference counting as the coordinator does it: discarding
		// checkpoint 1 leaves 000002.sst unreferenced; removing it.
		if err := s.Discard(1); err != nil {
			t.Fatal(err)
		}
		missing, unref, err := s.Audit()
		if err != nil || len(missing) != 0 || !slices.Equal(unref, []string{h.Path}) {
			t.Fatalf("Audit = %v, %v, %v; want %s unreferenced", missing, unref, err, h.Path)
		}
		if err := s.RemoveShared(h.Path); err != nil {
			t.Fatal(err)
		}
		if err := s.RemoveShared(h.Path); err != nil {
			t.Fatalf("removing a removed shared file: %v", err)
		}
		var shared []string
		for _, n := range b.names() {
			if strings.HasPrefix(n, "shared/") {
				shared = append(shared, n)
			}
		}
		want := []string{m2.Tasks[0].State[0].Path, m2.Tasks[0].State[1].Path}
		slices.Sort(want)
		if !slices.Equal(shared, want) {
			t.Fatalf("shared files stored = %v, want %v", shared, want)
		}
		files, err := s.SharedFiles()
		if err != nil || !slices.Equal(slices.Sorted(maps.Keys(files)), want) {
			t.Fatalf("SharedFiles = %v, %v", files, err)
		}
		dst := t.TempDir()
		if err := s.Restore(m2, testTask, dst); err != nil {
			t.Fatal(err)
		}
		if got, want := readTree(t, dst), map[string]string{"000003.sst": "three", "000004.sst": "four", "MANIFEST-1": "m2"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("restored %v, want %v", got, want)
		}
	})
}

func TestObjectPutFailureLeavesNothing(t *testing.T) {
	b := objStorage(t)
	boom := errors.New("boom")
	_, err := b.s.WriteFrom(4, "tasks/0-0/state/canonical", func(w io.Writer) error {
		if _, err := w.Write(make([]byte, 300<<10)); err != nil { // several chunks
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFrom = %v, want the fill's error", err)
	}
	if names := b.names(); len(names) != 0 {
		t.Fatalf("a failed write left %v", names)
	}
	if id, err := b.s.MaxID(); err != nil || id != 0 {
		t.Fatalf("MaxID = %d, %v", id, err)
	}
	// The bucket's stream holds no chunk of it either.
	js, _ := jetstream.New(b.nc)
	st, err := js.Stream(context.Background(), "OBJ_ckpt")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("stream holds %d messages after a failed write (%v)", info.State.Msgs, err)
	}
}

func TestObjectStoragePrefixesAreSeparate(t *testing.T) {
	nc := startJetStream(t)
	a, err := OpenStorageAt("nats-obj://ckpt/jobs/a", nc)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := OpenStorageAt("nats-obj://ckpt/jobs/b", nc)
	if err != nil {
		t.Fatal(err)
	}
	writeTestCheckpoint(t, a, 3)
	if ids, err := bb.Completed(); err != nil || len(ids) != 0 {
		t.Fatalf("the other prefix lists %v, %v", ids, err)
	}
	if ids, err := a.Completed(); err != nil || !slices.Equal(ids, []int64{3}) {
		t.Fatalf("Completed = %v, %v", ids, err)
	}
	if a.Root() != "nats-obj://ckpt/jobs/a" || a.Dir(3) != "nats-obj://ckpt/jobs/a/chk-0000000003" {
		t.Fatalf("Root %s, Dir %s", a.Root(), a.Dir(3))
	}
	if _, err := OpenStorageAt("nats-obj://ckpt/x", nil); err == nil || !strings.Contains(err.Error(), "needs a NATS connection") {
		t.Fatalf("OpenStorageAt without a connection = %v", err)
	}
}

func TestParseObjectLocation(t *testing.T) {
	for _, c := range []struct {
		in, bucket, prefix string
		ok                 bool
	}{
		{"nats-obj://ckpt", "ckpt", "", true},
		{"nats-obj://ckpt/", "ckpt", "", true},
		{"nats-obj://wstream_ckpt/jobs/j-1/", "wstream_ckpt", "jobs/j-1", true},
		{"nats-obj://", "", "", false},
		{"nats-obj://a.b/x", "", "", false},
		{"nats-obj://ckpt/../x", "", "", false},
		{"nats-obj://ckpt/a//b", "", "", false},
		{"/var/ckpt", "", "", false},
	} {
		bucket, prefix, err := ParseObjectLocation(c.in)
		if (err == nil) != c.ok || bucket != c.bucket || prefix != c.prefix {
			t.Errorf("ParseObjectLocation(%q) = %q, %q, %v", c.in, bucket, prefix, err)
		}
	}
	if got := JoinLocation("nats-obj://b/sp", "savepoint-j-3"); got != "nats-obj://b/sp/savepoint-j-3" {
		t.Errorf("JoinLocation = %s", got)
	}
	if got := JoinLocation("/data/sp", "savepoint-j-3"); got != filepath.Join("/data/sp", "savepoint-j-3") {
		t.Errorf("JoinLocation = %s", got)
	}
}

// A savepoint copied into an object store opens, verifies and restores
// from there, and copies back out into a directory.
func TestSavepointInObjectStore(t *testing.T) {
	nc := startJetStream(t)
	s := testStorage(t)
	if err := s.SetCompression(1); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"000002.sst": strings.Repeat("two ", 500), "000003.sst": "three", "OPTIONS-1": "o"}
	// A checkpoint is not a savepoint.
	writeSharedCheckpoint(t, s, 1, map[string]string{"000002.sst": files["000002.sst"]})
	if _, _, err := OpenSavepointAt(s.Root(), nil); err == nil || !strings.Contains(err.Error(), "not a savepoint") {
		t.Fatalf("OpenSavepointAt of a checkpoint = %v", err)
	}
	sp, err := OpenStorage(filepath.Join(t.TempDir(), "sp"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.SetCompression(1); err != nil {
		t.Fatal(err)
	}
	m := writeSavepoint(t, sp, 3, files)
	loc := "nats-obj://savepoints/savepoint-j1-3"
	dst, err := OpenStorageAt(loc, nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.CopyCheckpoint(3, dst); err != nil {
		t.Fatalf("CopyCheckpoint into the object store: %v", err)
	}
	if _, err := sp.CopyCheckpoint(3, dst); err == nil || !strings.Contains(err.Error(), "is complete") {
		t.Fatalf("a second copy = %v", err)
	}
	st, got, err := OpenSavepointAt(loc, nc)
	if err != nil {
		t.Fatalf("OpenSavepointAt(%s): %v", loc, err)
	}
	if got.Kind != KindSavepoint || got.ID != 3 || !reflect.DeepEqual(got.Tasks, m.Tasks) {
		t.Fatalf("savepoint metadata %+v, want the tasks of %+v", got, m)
	}
	out := t.TempDir()
	if err := st.Restore(got, testTask, out); err != nil {
		t.Fatal(err)
	}
	if tree := readTree(t, out); !reflect.DeepEqual(tree, files) {
		t.Fatalf("restored %v, want %v", tree, files)
	}
	for _, l := range []string{loc, loc + "/chk-0000000003", loc + "/"} {
		if _, m2, err := OpenRestorePointAt(l, nc); err != nil || m2.ID != 3 {
			t.Fatalf("OpenRestorePointAt(%s) = %v, %v", l, m2, err)
		}
	}
	if _, _, err := OpenRestorePointAt(loc+"/chk-0000000004", nc); err == nil {
		t.Fatal("OpenRestorePointAt of a missing checkpoint succeeded")
	}
	if _, _, err := OpenRestorePointAt("nats-obj://empty", nc); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("OpenRestorePointAt of an empty bucket = %v", err)
	}
	// And back into a directory, self-contained.
	back, err := OpenStorage(filepath.Join(t.TempDir(), "back"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CopyCheckpoint(3, back); err != nil {
		t.Fatal(err)
	}
	if _, m3, err := OpenSavepoint(back.Root()); err != nil || !reflect.DeepEqual(m3.Tasks, m.Tasks) {
		t.Fatalf("OpenSavepoint of the copy = %v, %v", m3, err)
	}
	// A damaged source file stops the copy, and nothing looks complete.
	other, err := OpenStorageAt("nats-obj://savepoints/other", nc)
	if err != nil {
		t.Fatal(err)
	}
	h := got.Tasks[0].State[0]
	flipFileByte(t, filepath.Join(sp.Root(), "shared", strings.TrimPrefix(h.Path, "shared/")), 3)
	if _, err := sp.CopyCheckpoint(3, other); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), h.Path) {
		t.Fatalf("copying a damaged checkpoint = %v", err)
	}
	if ids, err := other.Completed(); err != nil || len(ids) != 0 {
		t.Fatalf("after a failed copy: %v, %v", ids, err)
	}
}

// writeSavepoint writes savepoint id of testTask into s: its .sst state
// files shared, the others copied.
func writeSavepoint(t *testing.T, s *Storage, id int64, files map[string]string) *Metadata {
	t.Helper()
	src := t.TempDir()
	writeTree(t, src, files)
	task := s.TaskDir(id, testTask)
	var state []FileHandle
	for _, p := range slices.Sorted(maps.Keys(files)) {
		name := filepath.Join(src, p)
		var h FileHandle
		var err error
		if strings.HasSuffix(p, ".sst") {
			h, _, err = s.PutShared(name, "")
			h.Name = task + "/state/" + p
		} else {
			h, err = s.CopyFile(id, task+"/state/"+p, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		state = append(state, h)
	}
	m := &Metadata{JobID: "j1", ID: id, Kind: KindSavepoint, MaxParallelism: 128,
		Tasks: []SubtaskState{{Task: testTask, State: state, Operator: map[string][]byte{"src": []byte("offset=7")}}}}
	if err := s.WriteMetadata(m); err != nil {
		t.Fatal(err)
	}
	return m
}

// BenchmarkBackendsUploadRestore copies a task's 16 state files of 1 MiB
// into storage (compressed at level 1) and restores them, on each backend.
func BenchmarkBackendsUploadRestore(b *testing.B) {
	src := b.TempDir()
	seed := uint64(1)
	for i := range 16 {
		data := make([]byte, 1<<20)
		for j := range data {
			seed = seed*6364136223846793005 + 1442695040888963407
			data[j] = "abcdefgh"[seed>>61] // compressible, not trivially
		}
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("%06d.sst", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"fs", "obj"} {
		b.Run(name, func(b *testing.B) {
			var s *Storage
			var err error
			if name == "fs" {
				s, err = OpenStorage(b.TempDir())
			} else {
				s, err = OpenStorageAt("nats-obj://bench", startJetStream(b))
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := s.SetCompression(1); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(16 << 20)
			var id int64
			for b.Loop() {
				id++
				hs, err := s.CopyDir(id, s.TaskDir(id, testTask)+"/state", src)
				if err != nil {
					b.Fatal(err)
				}
				m := &Metadata{JobID: "bench", ID: id, Kind: KindCheckpoint, MaxParallelism: 128,
					Tasks: []SubtaskState{{Task: testTask, State: hs}}}
				if err := s.WriteMetadata(m); err != nil {
					b.Fatal(err)
				}
				if err := s.Restore(m, testTask, filepath.Join(b.TempDir(), "restore")); err != nil {
					b.Fatal(err)
				}
				if err := s.Discard(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestObjectStoreFailureReported(t *testing.T) {
	b := objStorage(t)
	writeTestCheckpoint(t, b.s, 1)
	js, _ := jetstream.New(b.nc)
	if err := js.DeleteObjectStore(context.Background(), "ckpt"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.WriteFile(2, "tasks/0-0/channels/in-0-0", []byte("data")); err == nil || !strings.Contains(err.Error(), "tasks/0-0/channels/in-0-0") {
		t.Fatalf("writing into a deleted bucket = %v; want an error naming the file", err)
	}
	if _, err := b.s.Completed(); err == nil {
		t.Fatal("listing a deleted bucket succeeded")
	}
}

// TestObjectStoreConnectionLostIsUnavailable: with the connection to the
// object store lost, the checkpoints cannot be read now: LatestUsable says
// so (ErrUnavailable, neither "no checkpoint" nor corruption), cleaning and
// discarding fail without deleting anything, and a new connection finds
// the same checkpoint.
func TestObjectStoreConnectionLostIsUnavailable(t *testing.T) {
	nc, srv := startJetStreamServer(t)
	s, err := OpenStorageAt("nats-obj://ckpt/jobs/j1", nc)
	if err != nil {
		t.Fatal(err)
	}
	writeTestCheckpoint(t, s, 1)
	writeTestCheckpoint(t, s, 2)
	nc.Close()
	m, skipped, err := s.LatestUsable()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoCheckpoint) || errors.Is(err, ErrCorrupt) || m != nil || len(skipped) != 0 {
		t.Fatalf("LatestUsable without a connection = %v, %v, %v; want ErrUnavailable", m, skipped, err)
	}
	if _, err := s.ReadMetadata(2); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadMetadata without a connection = %v; want ErrUnavailable", err)
	}
	if _, err := s.CleanIncomplete(); err == nil {
		t.Fatal("CleanIncomplete without a connection succeeded")
	}
	if err := s.Discard(1); err == nil {
		t.Fatal("Discard without a connection succeeded")
	}
	nc2, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	s2, err := OpenStorageAt("nats-obj://ckpt/jobs/j1", nc2)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := s2.Completed(); err != nil || !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("Completed once connected again = %v, %v; want both kept", ids, err)
	}
	if m, skipped, err := s2.LatestUsable(); err != nil || m.ID != 2 || len(skipped) != 0 {
		t.Fatalf("LatestUsable once connected again = %v, %v, %v; want checkpoint 2", m, skipped, err)
	}
}
