package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/objfault"
)

// breakObject stores content as the object name (below the storage's
// prefix) with meta through f, as another writer's put would, refused
// after its info was stored: the info is left naming chunks that are
// gone, and nothing removes it.
func breakObject(t *testing.T, f *objfault.Flaky, name string, meta map[string]string, content []byte) {
	t.Helper()
	f.Fail(objfault.OpPutAfterInfo, 1)
	_, err := f.Put(context.Background(), jetstream.ObjectMeta{Name: "jobs/j1/" + name, Metadata: meta}, bytes.NewReader(content))
	if !errors.Is(err, objfault.TooManyRequests) {
		t.Fatalf("put refused after its info = %v, want 429", err)
	}
}

// within runs fn and fails the test if it has not returned in a minute:
// a read of the object store must never wait for ever.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s has not returned after a minute", what)
	}
}

// TestObjectPutRefusedAfterInfo: a put whose chunk is refused after its
// info was stored (the client then purges the chunks) is tried again and
// stored intact; refused so every time, the write fails and leaves
// nothing under the name, neither an object that cannot be read nor one
// that looks whole.
func TestObjectPutRefusedAfterInfo(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // several chunks
	const rel = "tasks/0-1/channels/in-0-0"
	name := DirName(1) + "/" + rel

	b := objStorage(t)
	f := makeFlaky(t, b.s)
	f.Fail(objfault.OpPutAfterInfo, fastRetry.Attempts-1)
	h, err := b.s.WriteFile(1, rel, data)
	if err != nil {
		t.Fatalf("WriteFile refused after the info %d times: %v", fastRetry.Attempts-1, err)
	}
	if got := b.read(name); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, want the %d written", len(got), len(data))
	}
	if err := b.s.verifyFile(1, h); err != nil {
		t.Fatal(err)
	}

	b = objStorage(t)
	f = makeFlaky(t, b.s)
	f.Fail(objfault.OpPutAfterInfo, fastRetry.Attempts)
	if _, err := b.s.WriteFile(1, rel, data); !errors.Is(err, objfault.TooManyRequests) {
		t.Fatalf("WriteFile refused every time = %v, want the 429", err)
	}
	if n := f.Faulted(objfault.OpPutAfterInfo); n != fastRetry.Attempts {
		t.Fatalf("%d puts refused after their info, want %d", n, fastRetry.Attempts)
	}
	if names := b.names(); len(names) != 0 {
		t.Fatalf("a failed write left %v", names)
	}
	if _, err := b.s.b.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after a failed write = %v, want fs.ErrNotExist", err)
	}
	if _, err := b.s.b.Open(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open after a failed write = %v, want fs.ErrNotExist", err)
	}
}

// TestObjectBrokenIsCorruptAtOnce: a file of a complete checkpoint whose
// object another writer's failed put left naming chunks that are gone can
// never be read again: Stat, Open, Verify and LatestUsable say it is
// corrupt, not unavailable, without waiting for chunks, and LatestUsable
// passes the checkpoint over for the one before.
func TestObjectBrokenIsCorruptAtOnce(t *testing.T) {
	b := objStorage(t)
	writeTestCheckpoint(t, b.s, 1)
	m2 := writeTestCheckpoint(t, b.s, 2)
	f := makeFlaky(t, b.s)
	name := DirName(2) + "/tasks/0-1/state/000002.sst"
	breakObject(t, f, name, nil, []byte(stateFiles["000002.sst"]))

	start := time.Now()
	within(t, "reading a broken object", func() {
		if _, err := b.s.b.Stat(name); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
			t.Errorf("Stat = %v, want ErrCorrupt", err)
		}
		if r, err := b.s.b.Open(name); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
			if err == nil {
				_, err = io.Copy(io.Discard, r)
				r.Close()
			}
			t.Errorf("Open (and read) = %v, want ErrCorrupt", err)
		}
		if err := b.s.Verify(m2); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
			t.Errorf("Verify = %v, want ErrCorrupt", err)
		}
		m, skipped, err := b.s.LatestUsable()
		if err != nil || m == nil || m.ID != 1 || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) {
			t.Errorf("LatestUsable = %v, %v, %v; want checkpoint 1, 2 skipped as corrupt", m, skipped, err)
		}
	})
	// Each answer came from the store's word, not from a read's deadline.
	if d := time.Since(start); d >= objectOpTimeout {
		t.Fatalf("the answers took %v, as long as a read's deadline", d)
	}
}

// TestObjectSharedReuseSkipsBroken: a shared object whose info looks whole
// (same size, digest and description) but whose chunks are gone is not
// reused: PutShared uploads the file again, and a checkpoint referring to
// it reads it.
func TestObjectSharedReuseSkipsBroken(t *testing.T) {
	b := objStorage(t)
	f := makeFlaky(t, b.s)
	src := filepath.Join(t.TempDir(), "000007.sst")
	content := bytes.Repeat([]byte("shared sst "), 1000)
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	h, uploaded, err := b.s.PutShared(src, "")
	if err != nil || !uploaded {
		t.Fatalf("first PutShared = %v, uploaded %v", err, uploaded)
	}
	// Another writer puts the same bytes with the same description, and
	// its put is refused after its info.
	info, err := b.s.b.Stat(h.Path)
	if err != nil {
		t.Fatal(err)
	}
	breakObject(t, f, h.Path, info.Meta, b.read(h.Path))

	fresh, err := OpenStorageAt("nats-obj://ckpt/jobs/j1", b.nc)
	if err != nil {
		t.Fatal(err)
	}
	h2, uploaded, err := fresh.PutShared(src, "")
	if err != nil || !uploaded {
		t.Fatalf("PutShared over a broken object = %v, uploaded %v; want it uploaded again", err, uploaded)
	}
	if h2 != h {
		t.Fatalf("handle %+v, want %+v", h2, h)
	}
	r, err := fresh.Open(1, h2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("reading the shared file again: %d bytes, %v", len(got), err)
	}
}

// TestObjectRemoveBrokenKeepsLaterPut: the delete of a broken object is
// conditional on its info being the one found broken: a good put of the
// same name that landed in between stays.
func TestObjectRemoveBrokenKeepsLaterPut(t *testing.T) {
	b := objStorage(t)
	f := makeFlaky(t, b.s)
	ob := b.s.b.(*objBackend)
	const name = "shared/abc.sst"
	breakObject(t, f, name, nil, []byte("first"))
	ctx := context.Background()
	m, err := ob.stream.GetLastMsgForSubject(ctx, ob.metaSubject(name))
	if err != nil {
		t.Fatal(err)
	}
	oi, err := f.GetInfo(ctx, ob.objName(name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.PutBytes(ctx, ob.objName(name), []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := ob.deleteIfLast(ctx, name, *oi, m.Sequence); err != nil {
		t.Fatalf("deleteIfLast of a replaced info: %v", err)
	}
	if got := b.read(name); string(got) != "second" {
		t.Fatalf("object holds %q after the stale delete, want the later put's", got)
	}
	// Broken again, and removed: the info found broken is the last.
	if err := ob.Put(name, PutOptions{}, func(w io.Writer) error { _, err := w.Write([]byte("third")); return err }); err != nil {
		t.Fatal(err)
	}
	breakObject(t, f, name, nil, []byte("fourth"))
	if err := ob.removeBroken(name); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after removeBroken = %v, want fs.ErrNotExist", err)
	}
}

// BenchmarkObjectOpenSmall opens and reads a small object of a checkpoint:
// the cost of a read's requests (the info, the chunks, and since the
// check of a put refused after its info, the stream's count of them).
func BenchmarkObjectOpenSmall(b *testing.B) {
	s, err := OpenStorageAt("nats-obj://bench", startJetStream(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.WriteFile(1, "tasks/0-1/state/MANIFEST-000001", bytes.Repeat([]byte("m"), 1<<10)); err != nil {
		b.Fatal(err)
	}
	name := DirName(1) + "/tasks/0-1/state/MANIFEST-000001"
	for b.Loop() {
		r, err := s.b.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

// stalledResult is an object's read whose chunks stopped coming: every
// read fails as the client's does when the read's deadline passes.
type stalledResult struct{ jetstream.ObjectResult }

func (stalledResult) Read([]byte) (int, error) { return 0, nats.ErrTimeout }
func (stalledResult) Close() error             { return nil }

// TestObjectStalledReadKind: a read whose chunks stopped coming is
// unavailable while the store holds them, and corrupt once it does not.
func TestObjectStalledReadKind(t *testing.T) {
	b := objStorage(t)
	f := makeFlaky(t, b.s)
	ob := b.s.b.(*objBackend)
	const name = "chk-0000000001/tasks/0-1/state/000002.sst"
	if err := ob.Put(name, PutOptions{}, func(w io.Writer) error { _, err := w.Write([]byte("bytes")); return err }); err != nil {
		t.Fatal(err)
	}
	read := func() error {
		oi, err := f.GetInfo(context.Background(), ob.objName(name))
		if err != nil {
			t.Fatal(err)
		}
		r := &objReader{r: stalledResult{}, cancel: func() {}, b: ob, info: oi, name: name}
		defer r.Close()
		_, err = r.Read(make([]byte, 10))
		return err
	}
	if err := read(); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a stalled read of a whole object = %v, want ErrUnavailable", err)
	}
	breakObject(t, f, name, nil, []byte("other bytes"))
	if err := read(); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a stalled read of an object whose chunks are gone = %v, want ErrCorrupt", err)
	}
}
