package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/wstream/wstream/internal/durable"
)

// dirBackend keeps objects as files below a directory, each written
// atomically: into a temporary file (.NAME.tmp-*) in the same directory,
// synced, renamed (or, with NoReplace, linked) to its name, then the
// directory synced unless the put is Deferred. A failed put leaves neither
// name behind. Names beginning with "." are temporaries, never objects.
type dirBackend struct {
	root string // absolute
	fs   storageFS
	// parentsSynced holds the directories whose entry in their parent an
	// undeferred put has synced: a directory may be new (or left unsynced
	// by a process that crashed), and a file in it is durable only with it.
	parentsSynced sync.Map
}

func (b *dirBackend) Location() string { return b.root }

func (b *dirBackend) path(name string) string {
	return filepath.Join(b.root, filepath.FromSlash(name))
}

func (b *dirBackend) Put(name string, o PutOptions, fill func(io.Writer) error) error {
	target := b.path(name)
	dir := filepath.Dir(target)
	if err := b.mkdirs(dir); err != nil {
		return err
	}
	f, err := b.fs.CreateTemp(dir, "."+filepath.Base(target)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if o.NoReplace {
			err = b.linkNoReplace(tmp, target)
		} else {
			err = b.fs.Rename(tmp, target)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if o.Deferred {
		return nil
	}
	err = b.fs.SyncDir(dir)
	if _, done := b.parentsSynced.Load(dir); err == nil && !done && dir != b.root {
		if err = b.fs.SyncDir(filepath.Dir(dir)); err == nil {
			b.parentsSynced.Store(dir, true)
		}
	}
	if err != nil {
		// The name may not survive a crash: take it back, so that a failed
		// write never leaves a file that looks written.
		_ = os.Remove(target)
		return err
	}
	return nil
}

// linkNoReplace gives tmp the name target unless target exists, then
// removes tmp. Where the filesystem has no hard links it renames.
func (b *dirBackend) linkNoReplace(tmp, target string) error {
	err := os.Link(tmp, target)
	switch {
	case err == nil:
		return os.Remove(tmp)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s: %w", target, fs.ErrExist)
	}
	return b.fs.Rename(tmp, target)
}

// mkdirs creates dir and its missing parents. Their entries become durable
// when a Sync above them or an undeferred put into them syncs them.
func (b *dirBackend) mkdirs(dir string) error {
	var missing []string
	for d := dir; ; {
		_, err := os.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		// A concurrent writer may have created it meanwhile.
		if err := b.fs.Mkdir(missing[i]); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

func (b *dirBackend) Open(name string) (ObjectReader, error) {
	f, err := b.fs.Open(b.path(name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, unavailable(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, unavailable(err)
	}
	return &dirReader{storageReadFile: f, size: fi.Size()}, nil
}

// dirReader marks read errors as ErrUnavailable: a file's bytes are
// checked above, so an error of the read itself is the disk's.
type dirReader struct {
	storageReadFile
	size int64
}

func (r *dirReader) Size() int64 { return r.size }

func (r *dirReader) Read(p []byte) (int, error) {
	n, err := r.storageReadFile.Read(p)
	if err != nil && err != io.EOF {
		err = unavailable(err)
	}
	return n, err
}

func (b *dirBackend) Stat(name string) (ObjectInfo, error) {
	fi, err := os.Stat(b.path(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ObjectInfo{}, err
	case err != nil:
		return ObjectInfo{}, unavailable(err)
	}
	// A directory where a file should be exists: reading it fails, which
	// says the store cannot answer, and nothing may treat the name as free.
	return ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}, nil
}

func (b *dirBackend) List(dir string) ([]ObjectInfo, error) {
	entries, err := os.ReadDir(b.path(dir))
	if errors.Is(err, fs.ErrNotExist) && dir != "" {
		return nil, nil
	}
	// A root that is gone (created at open) is a mount or disk that cannot
	// answer now, not a storage without checkpoints.
	if err != nil {
		return nil, unavailable(err)
	}
	var out []ObjectInfo
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if e.IsDir() {
			out = append(out, ObjectInfo{Name: dir + e.Name() + "/"})
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, unavailable(err)
		}
		out = append(out, ObjectInfo{Name: dir + e.Name(), Size: fi.Size(), ModTime: fi.ModTime().UnixNano()})
	}
	return out, nil
}

func (b *dirBackend) Delete(name string) error {
	p := b.path(name)
	switch err := os.Remove(p); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return b.fs.SyncDir(filepath.Dir(p))
}

func (b *dirBackend) DeleteAll(dir string) error {
	p := b.path(dir)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	return b.fs.SyncDir(filepath.Dir(filepath.Clean(p)))
}

// Sync syncs every directory below dir, then dir's entry in its parent.
func (b *dirBackend) Sync(dir string) error {
	p := filepath.Clean(b.path(dir))
	err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return b.fs.SyncDir(q)
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // nothing was put there
	}
	if err == nil && p != b.root {
		err = b.fs.SyncDir(filepath.Dir(p))
	}
	return err
}

func (b *dirBackend) RemoveTemporaries(dir string) (int, error) {
	p := b.path(dir)
	entries, err := os.ReadDir(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(p, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
			n++
		}
	}
	if n > 0 {
		return n, b.fs.SyncDir(p)
	}
	return 0, nil
}

// storageFS is what a dirBackend creates, writes, renames, syncs and
// opens through, so that tests can make any of these operations fail.
type storageFS interface {
	// CreateTemp creates a new file in dir whose name begins with prefix.
	CreateTemp(dir, prefix string) (storageFile, error)
	Rename(oldpath, newpath string) error
	Mkdir(dir string) error
	// SyncDir makes the entries of the directory dir durable.
	SyncDir(dir string) error
	// Open reads what was written.
	Open(name string) (storageReadFile, error)
}

// storageReadFile is a file being read through a storageFS.
type storageReadFile interface {
	io.ReadCloser
	Stat() (fs.FileInfo, error)
}

// storageFile is a file being written through a storageFS.
type storageFile interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

// osStorageFS is the storageFS of the operating system.
type osStorageFS struct{}

func (osStorageFS) CreateTemp(dir, prefix string) (storageFile, error) {
	return os.CreateTemp(dir, prefix+"*")
}

func (osStorageFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osStorageFS) Mkdir(dir string) error { return os.Mkdir(dir, 0o755) }

func (osStorageFS) SyncDir(dir string) error { return durable.SyncDir(dir) }

func (osStorageFS) Open(name string) (storageReadFile, error) { return os.Open(name) }
