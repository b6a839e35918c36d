package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Metadata keys of a shared object, where the backend keeps metadata (the
// object store): the hex SHA-256 and the size of the raw bytes, and "zstd"
// when the stored bytes are compressed. PutShared then learns an existing
// object from them without reading it.
const (
	objMetaRawSHA256 = "wstream-raw-sha256"
	objMetaRawSize   = "wstream-raw-size"
	objMetaEncoding  = "wstream-encoding"
)

// sharedEntry is a shared file's handle as PutShared last saw the file.
type sharedEntry struct {
	h       FileHandle
	size    int64
	modTime int64 // unix nanoseconds
}

// PutShared stores the file src as a shared file named by its content,
// ROOT/shared/<rawSHA256>.<ext> where ext is src's extension (none when src
// has none), compressed as SetCompression says, atomically. rawSHA256 is
// the hex SHA-256 of src's bytes; when it is "", PutShared reads src once
// to compute it. A given digest is checked against the bytes copied, so a
// wrong one fails and stores nothing.
//
// When a file of that name already exists and holds those bytes (stored
// compressed or not), nothing is copied and uploaded is false; the handle
// then describes the existing file, which PutShared learns from the
// backend's digest and metadata, or else reads once per Storage. An
// existing file that does not hold those bytes is damaged and replaced
// (uploaded is true).
//
// The handle has Shared set, Path "shared/<name>", Size and SHA256 of the
// stored bytes, RawSize the size of src's bytes and Compressed as stored;
// Name is empty, for the caller to set (see FileHandle.Name). Shared files
// belong to no checkpoint: Discard leaves them, and whoever tracks their
// references removes them with RemoveShared.
func (s *Storage) PutShared(src string, rawSHA256 string) (h FileHandle, uploaded bool, err error) {
	fail := func(err error) (FileHandle, bool, error) {
		return FileHandle{}, false, fmt.Errorf("checkpoint: put shared file %s: %w", src, err)
	}
	if rawSHA256 == "" {
		if rawSHA256, err = FileSHA256(src); err != nil {
			return fail(err)
		}
	}
	rawSHA256 = strings.ToLower(rawSHA256)
	if b, err := hex.DecodeString(rawSHA256); err != nil || len(b) != sha256.Size {
		return fail(fmt.Errorf("%q is not a hex SHA-256", rawSHA256))
	}
	name := rawSHA256
	if ext := strings.TrimPrefix(filepath.Ext(src), "."); ext != "" {
		if strings.ContainsAny(ext, `/\`) || !filepath.IsLocal(ext) {
			return fail(fmt.Errorf("extension %q cannot name a shared file", ext))
		}
		name += "." + ext
	}
	rel := SharedDir + "/" + name

	lock := s.sharedLock(name)
	lock.Lock()
	defer lock.Unlock()

	existing, state, err := s.inspectShared(rel, rawSHA256)
	if err != nil {
		return fail(err)
	}
	if state == sharedIntact {
		return existing, false, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	level := s.compression()
	opts := writeOpts{
		level:   level,
		hashRaw: true,
		check: func(w written) error {
			if w.rawSum != rawSHA256 {
				return fmt.Errorf("%s has SHA-256 %s, not the %s given", src, w.rawSum, rawSHA256)
			}
			if w.raw != fi.Size() {
				return fmt.Errorf("%s changed size while it was copied", src)
			}
			return nil
		},
	}
	meta := map[string]string{objMetaRawSHA256: rawSHA256, objMetaRawSize: strconv.FormatInt(fi.Size(), 10)}
	if level > 0 {
		meta[objMetaEncoding] = "zstd"
	}
	// Never replace a file another process may have just written; a
	// damaged one is replaced.
	w, err := s.put(rel, opts, PutOptions{Meta: meta, NoReplace: state == sharedAbsent}, func(dst io.Writer) error {
		return copyFrom(dst, f)
	})
	if errors.Is(err, fs.ErrExist) {
		existing, state, ierr := s.inspectShared(rel, rawSHA256)
		if ierr == nil && state == sharedIntact {
			return existing, false, nil
		}
	}
	if err != nil {
		return FileHandle{}, false, fmt.Errorf("checkpoint: put shared file %s: %w", src, err)
	}
	h = w.handle(rel, level > 0)
	h.Shared, h.RawSize = true, w.raw
	s.remember(name, rel, h)
	return h, true, nil
}

func (s *Storage) sharedLock(name string) *sync.Mutex {
	return &s.sharedLocks[name[0]]
}

// Shared file states, as inspectShared finds them.
const (
	sharedAbsent = iota
	sharedIntact
	sharedDamaged
)

// inspectShared returns the handle of the shared file rel when it holds
// the bytes with SHA-256 rawSum, stored compressed or not, and says whether
// it is absent, intact or damaged.
func (s *Storage) inspectShared(rel, rawSum string) (FileHandle, int, error) {
	name := path.Base(rel)
	info, err := s.b.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.forget(name)
		return FileHandle{}, sharedAbsent, nil
	case errors.Is(err, ErrCorrupt):
		// An object whose chunks the store lost (a failed put of another
		// writer left it): no checkpoint may refer to it, a put mends it.
		s.forget(name)
		return FileHandle{}, sharedDamaged, nil
	case err != nil:
		return FileHandle{}, 0, err
	}
	if info.Digest != "" {
		// The backend keeps the stored bytes' digest and the raw bytes'
		// description: nothing to read.
		if h, ok := sharedHandle(rel, info, rawSum); ok {
			return h, sharedIntact, nil
		}
		return FileHandle{}, sharedDamaged, nil
	}
	s.sharedMu.Lock()
	e, ok := s.sharedSeen[name]
	s.sharedMu.Unlock()
	if ok && info.ModTime != 0 && e.size == info.Size && e.modTime == info.ModTime {
		return e.h, sharedIntact, nil
	}
	h, intact, err := s.readShared(rel, rawSum)
	if err != nil || !intact {
		return FileHandle{}, sharedDamaged, err
	}
	s.remember(name, rel, h)
	return h, sharedIntact, nil
}

// readShared reads the shared file rel and returns its handle, and whether
// it holds the raw bytes with SHA-256 rawSum, stored compressed or not.
func (s *Storage) readShared(rel, rawSum string) (FileHandle, bool, error) {
	f, err := s.b.Open(rel)
	if err != nil {
		return FileHandle{}, false, err
	}
	defer f.Close()
	stored := sha256.New()
	sc := &countingWriter{w: stored}
	in := io.TeeReader(f, sc)
	raw := sha256.New()
	rc := &countingWriter{w: raw}
	compressed := false
	var magic [4]byte
	if n, _ := io.ReadFull(in, magic[:]); n == 4 && bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		dec, err := getDecoder(io.MultiReader(bytes.NewReader(magic[:]), in))
		if err == nil {
			_, err = io.Copy(rc, dec)
			putDecoder(dec)
		}
		compressed = err == nil && hex.EncodeToString(raw.Sum(nil)) == rawSum
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return FileHandle{}, false, err
	}
	sum := hex.EncodeToString(stored.Sum(nil))
	h := FileHandle{Path: rel, Size: sc.n, SHA256: sum, Shared: true, RawSize: sc.n}
	switch {
	case compressed:
		h.Compressed, h.RawSize = true, rc.n
	case sum != rawSum:
		return FileHandle{}, false, nil
	}
	return h, true, nil
}

// sharedHandle returns the handle of the shared object described by info
// (with a Digest) when it holds the raw bytes with SHA-256 rawSum, stored
// compressed or not.
func sharedHandle(rel string, info ObjectInfo, rawSum string) (FileHandle, bool) {
	h := FileHandle{Path: rel, Size: info.Size, SHA256: info.Digest, Shared: true, RawSize: info.Size}
	if info.Meta[objMetaRawSHA256] == rawSum && info.Meta[objMetaEncoding] == "zstd" {
		raw, err := strconv.ParseInt(info.Meta[objMetaRawSize], 10, 64)
		if err != nil || raw < 0 {
			return FileHandle{}, false
		}
		h.Compressed, h.RawSize = true, raw
		return h, true
	}
	return h, h.SHA256 == rawSum
}

// sharedMeta is the object metadata of the shared file h.
func sharedMeta(h FileHandle) map[string]string {
	base, _ := sharedBase(h.Path)
	raw := h.RawSize
	if raw == 0 && !h.Compressed {
		raw = h.Size
	}
	meta := map[string]string{
		objMetaRawSHA256: strings.TrimSuffix(base, path.Ext(base)),
		objMetaRawSize:   strconv.FormatInt(raw, 10),
	}
	if h.Compressed {
		meta[objMetaEncoding] = "zstd"
	}
	return meta
}

// remember caches h, the handle of the shared file rel, while the backend
// reports the same size and modification time for it.
func (s *Storage) remember(name, rel string, h FileHandle) {
	info, err := s.b.Stat(rel)
	if err != nil || info.ModTime == 0 || info.Size != h.Size {
		return
	}
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	if s.sharedSeen == nil {
		s.sharedSeen = map[string]sharedEntry{}
	}
	s.sharedSeen[name] = sharedEntry{h: h, size: info.Size, modTime: info.ModTime}
}

func (s *Storage) forget(name string) {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	delete(s.sharedSeen, name)
}

// FileSHA256 returns the hex SHA-256 of a file's bytes.
func FileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SharedFiles returns every shared file, by its path from the root
// ("shared/<name>"), with its size. Temporary files of writes in progress
// (or cut short by a crash) are not listed; CleanIncomplete removes them.
func (s *Storage) SharedFiles() (map[string]int64, error) {
	entries, err := s.b.List(SharedDir + "/")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list shared files in %s: %w", s.root, err)
	}
	files := make(map[string]int64, len(entries))
	for _, e := range entries {
		if _, ok := sharedBase(e.Name); ok {
			files[e.Name] = e.Size
		}
	}
	return files, nil
}

// RemoveShared removes the shared file p ("shared/<name>"), durably.
// Removing a missing file is not an error. The caller must know no complete
// checkpoint references the file any more.
func (s *Storage) RemoveShared(p string) error {
	name, ok := sharedBase(p)
	if !ok {
		return fmt.Errorf("checkpoint: remove shared file: %q is not a shared file path (shared/<name>)", p)
	}
	lock := s.sharedLock(name)
	lock.Lock()
	defer lock.Unlock()
	s.forget(name)
	if err := s.b.Delete(SharedDir + "/" + name); err != nil {
		return fmt.Errorf("checkpoint: remove shared file %s in %s: %w", p, s.root, err)
	}
	return nil
}

// Audit checks the storage's complete checkpoints against their files.
// missing has an error for each file a complete checkpoint references that
// is missing or damaged (each wraps ErrCorrupt, names the checkpoint and
// the file; a shared file is checked once however many checkpoints
// reference it, and reported for each), and for each complete checkpoint
// whose metadata does not read (its references are then unknown).
// unreferenced lists, sorted, the shared files no complete checkpoint
// references: garbage, unless a checkpoint in progress is about to
// reference them. err is for failures to list the storage.
func (s *Storage) Audit() (missing []error, unreferenced []string, err error) {
	ids, err := s.Completed()
	if err != nil {
		return nil, nil, err
	}
	type sharedKey struct {
		path, sum  string
		size, raw  int64
		compressed bool
	}
	verdicts := map[sharedKey]error{}
	referenced := map[string]bool{}
	for _, id := range ids {
		m, err := s.ReadMetadata(id)
		if err != nil {
			missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, err))
			continue
		}
		hs := m.handles()
		var plain []FileHandle
		for _, h := range hs {
			if !h.Shared {
				plain = append(plain, h)
				continue
			}
			referenced[h.Path] = true
			k := sharedKey{h.Path, h.SHA256, h.Size, h.RawSize, h.Compressed}
			verdict, ok := verdicts[k]
			if !ok {
				verdict = s.verifyFile(id, h)
				verdicts[k] = verdict
			}
			if verdict != nil {
				missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, verdict))
			}
		}
		errs := parallel(len(plain), false, func(i int) error { return s.verifyFile(id, plain[i]) })
		for _, err := range errs {
			if err != nil {
				missing = append(missing, fmt.Errorf("checkpoint %d: %w", id, err))
			}
		}
	}
	files, err := s.SharedFiles()
	if err != nil {
		return missing, nil, err
	}
	for p := range files {
		if !referenced[p] {
			unreferenced = append(unreferenced, p)
		}
	}
	slices.Sort(unreferenced)
	return missing, unreferenced, nil
}
