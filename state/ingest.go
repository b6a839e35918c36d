package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wstream/wstream/abi"
)

// ingestFileBytes is the size at which an import starts a new SST file:
// the files are ingested into the bottom level, where Pebble keeps files of
// about this size too.
const ingestFileBytes = 64 << 20

// importProgress counts the bytes of keys and values ImportStore and the
// canonical imports have written into SST files in this process, for
// progress displays.
var importProgress atomic.Int64

// ImportProgress returns the bytes of keys and values that imports of
// keyed state (rescales) have moved so far in this process.
func ImportProgress() int64 { return importProgress.Load() }

// ImportStore moves the state entries and timers of the key groups this
// store owns from the store in srcDir, a restored snapshot of a subtask
// that owned srcGroups, into this store: the rescale of native snapshots.
// The entries are read from srcDir in key order and written into SST files
// beside this store's directory, which Pebble then ingests as they are, at
// once, so a failure changes nothing; no key is written through the
// memtable, nothing is compacted, and memory stays bounded by a block of
// each. srcDir's Pebble is opened read-only and stays as it is.
func (s *Store) ImportStore(srcDir string, srcGroups abi.KeyGroupRange) (ImportStats, error) {
	var st ImportStats
	if s.err != nil {
		return st, s.err
	}
	fail := func(err error) (ImportStats, error) {
		return ImportStats{}, fmt.Errorf("state: import the key groups [%d, %d] of %s into %s: %w",
			s.groups.Start, s.groups.End, srcDir, s.dir, err)
	}
	span := abi.KeyGroupRange{Start: max(srcGroups.Start, s.groups.Start), End: min(srcGroups.End, s.groups.End)}
	if span.Start > span.End {
		return st, nil // nothing of srcDir is this store's
	}
	if err := s.Flush(); err != nil {
		return st, err
	}
	if err := s.ready(); err != nil {
		return st, err
	}
	src, err := pebble.Open(srcDir, &pebble.Options{ReadOnly: true, Logger: quietLogger{}, FS: noSyncFS{FS: vfs.Default}})
	if err != nil {
		return fail(fmt.Errorf("open: %w", err))
	}
	defer src.Close()
	lower, upper := KeyGroupSpan(span)
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fail(err)
	}
	w := s.newIngestWriter()
	defer w.abort()
	timers := abi.KeyGroupRange{Start: 1, End: 0} // empty
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fail(err)
		}
		if len(k) > 2 && KeyKind(k[2]) == KindTimer {
			kg := int(k[0])<<8 | int(k[1])
			if timers.Len() == 0 {
				timers.Start = kg
			}
			timers.End = kg
			st.Timers++
		} else {
			st.Entries++
		}
		if err := w.set(k, v); err != nil {
			_ = it.Close()
			return fail(err)
		}
	}
	if err := it.Close(); err != nil {
		return fail(err)
	}
	if err := w.ingest(); err != nil {
		return fail(err)
	}
	if timers.Len() > 0 {
		s.unloadTimers() // the queues read the imported timers from Pebble
	}
	return st, nil
}

// ingestWriter writes keys in increasing order into SST files beside a
// store's directory and ingests them into the store.
type ingestWriter struct {
	s     *Store
	dir   string // of the files; "" until the first key
	opts  sstable.WriterOptions
	w     *sstable.Writer
	size  int64 // of keys and values in w
	paths []string
	err   error
}

func (s *Store) newIngestWriter() *ingestWriter {
	// The bottom level's writer options (bloom filters as Open sets them);
	// the table format the store's Pebble writes.
	po := &pebble.Options{}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	po.EnsureDefaults()
	return &ingestWriter{s: s, opts: po.MakeWriterOptions(len(po.Levels)-1, s.db.TableFormat())}
}

// set adds key with value; keys must come in strictly increasing order.
func (w *ingestWriter) set(key, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.w == nil {
		if err := w.next(); err != nil {
			w.err = err
			return err
		}
	}
	if err := w.w.Set(key, value); err != nil {
		w.err = err
		return err
	}
	n := int64(len(key) + len(value))
	w.size += n
	importProgress.Add(n)
	if w.size >= ingestFileBytes {
		if err := w.finish(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// next starts a new file.
func (w *ingestWriter) next() error {
	if w.dir == "" {
		d, err := os.MkdirTemp(filepath.Dir(w.s.dir), "."+filepath.Base(w.s.dir)+".ingest-")
		if err != nil {
			return err
		}
		w.dir = d
	}
	p := filepath.Join(w.dir, strconv.Itoa(len(w.paths))+".sst")
	f, err := vfs.Default.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	w.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), w.opts)
	w.paths = append(w.paths, p)
	w.size = 0
	return nil
}

// finish closes the current file, if any.
func (w *ingestWriter) finish() error {
	if w.w == nil {
		return nil
	}
	err := w.w.Close()
	w.w = nil
	return err
}

// ingest closes the last file and ingests every file into the store, in
// one step. Pebble links the files into its directory.
func (w *ingestWriter) ingest() error {
	if w.err != nil {
		return w.err
	}
	if err := w.finish(); err != nil {
		return err
	}
	if len(w.paths) == 0 {
		return nil
	}
	s := w.s
	if err := s.db.Ingest(context.Background(), w.paths); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.whole = false    // entries reached Pebble past the cache
	s.cache.evictAll() // cached entries of the ingested key groups may be stale now
	return nil
}

// abort removes the files (after an ingest, Pebble has its own links).
func (w *ingestWriter) abort() {
	if w.w != nil {
		_ = w.w.Close()
		w.w = nil
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
}
