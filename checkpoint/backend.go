package checkpoint

import (
	"errors"
	"io"
)

// Backend stores a Storage's files as named objects: a directory on a
// filesystem (dirBackend) or a JetStream object store (objBackend). A name
// is the file's slash-separated path below the storage root
// (chk-0000000007/_metadata, shared/<sha256>.sst); a dir argument is "" for
// the root or a name prefix ending in "/". The backend knows nothing of
// checkpoints: metadata, shared files, retention, verification and
// recovery are the Storage's, written once above it.
//
// Errors say which of three things happened, and callers rely on it:
//
//   - missing: Open and Stat of an object that does not exist return an
//     error wrapping fs.ErrNotExist. The Storage turns it into corruption
//     when the metadata names the object.
//   - corrupt: bytes that are not what was stored (a chunk that does not
//     match its object's digest), or an object whose stored bytes are gone
//     for good (an object's info naming chunks the store no longer holds),
//     wrap ErrCorrupt. Stat reports the latter too.
//   - unavailable: anything else that stops Open, Stat, List or a read
//     (a timeout, no responders, a lost connection, a disk error) wraps
//     ErrUnavailable: the same call may succeed later, and it says nothing
//     about the object.
//
// Writes fail with ordinary errors; a failed Put leaves nothing readable
// under the name. Reads never wait without bound: a read that stops
// making progress fails, unavailable.
type Backend interface {
	// Location names the store in messages: a directory's absolute path,
	// or nats-obj://BUCKET/PREFIX.
	Location() string
	// Put stores what fill writes as the object name, atomically: it
	// appears complete, or not at all (an existing object of that name is
	// then kept). An error of fill comes back wrapped, so errors.Is finds it.
	// fill may be called again, when a put that met a fault of the moment
	// is tried again: each call writes the whole content from its start.
	Put(name string, o PutOptions, fill func(io.Writer) error) error
	// Open opens the object name for reading its stored bytes.
	Open(name string) (ObjectReader, error)
	// Stat describes the object name.
	Stat(name string) (ObjectInfo, error)
	// List returns the entries directly below dir, by name: objects, and
	// subdirectories with a Name ending in "/". A missing dir is empty.
	List(dir string) ([]ObjectInfo, error)
	// Delete removes the object name, durably; a missing one is no error.
	Delete(name string) error
	// DeleteAll removes every object below dir, and whatever interrupted
	// puts left there.
	DeleteAll(dir string) error
	// Sync makes the names of the objects below dir that Put stored with
	// Deferred durable, and dir's own.
	Sync(dir string) error
	// RemoveTemporaries removes what interrupted puts left directly in dir
	// and returns how many it removed (none, where a put leaves nothing).
	RemoveTemporaries(dir string) (int, error)
}

// PutOptions says how Backend.Put stores an object.
type PutOptions struct {
	// Meta is kept with the object where the backend can keep it (the
	// object store; a directory cannot) and returned by Stat.
	Meta map[string]string
	// NoReplace keeps an object another writer stored under the name
	// first: Put then fails with an error wrapping fs.ErrExist. A backend
	// whose puts replace atomically anyway (the object store) may ignore it.
	NoReplace bool
	// Deferred lets the name become durable only at the next Sync of a
	// directory above it, which the checkpoint's completion does once for
	// all its files.
	Deferred bool
}

// ObjectInfo describes a stored object, or a directory in a List.
type ObjectInfo struct {
	Name string // the object's name; a directory's ends in "/"
	Size int64  // stored bytes
	// Digest is the hex SHA-256 of the stored bytes when the backend keeps
	// one (the object store), else "".
	Digest string
	// Meta is PutOptions.Meta where the backend keeps it.
	Meta map[string]string
	// ModTime (unix nanoseconds, 0 when unknown) changes when the object
	// is replaced.
	ModTime int64
}

// ObjectReader reads an object's stored bytes.
type ObjectReader interface {
	io.ReadCloser
	// Size is the number of stored bytes.
	Size() int64
}

// ErrUnavailable marks errors about checkpoint files that cannot be read
// now (a read or listing failed or timed out: the disk, the object store or
// the network) although nothing says they are damaged. Unlike ErrCorrupt it
// says nothing about the checkpoint: the same read may succeed later, so a
// restore must wait and retry, never pass the checkpoint over. Test for it
// with errors.Is.
var ErrUnavailable = errors.New("checkpoint: unavailable")

// MarkUnavailable wraps err, a check that could not answer now (a read
// that timed out), so that it matches ErrUnavailable; a verdict of
// corruption, or nil, is returned as it is.
func MarkUnavailable(err error) error { return unavailable(err) }

// unavailable wraps err, a failure to read or list storage, in
// ErrUnavailable, unless it is a verdict of corruption already.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() + " (cannot be read now)" }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, ErrUnavailable}
}
