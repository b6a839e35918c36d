package worker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

// persist is the asynchronous phase: copy the state files and the channel
// state into storage, then acknowledge (or decline on failure).
func (t *task) persist(snap *snapshotInProgress) {
	start := time.Now()
	ack := transport.CheckpointAck{JobID: t.jobID, Attempt: t.attempt, Task: t.id, ID: snap.id}
	fail := func(err error) {
		ack.Decline = fmt.Sprintf("subtask %s: %v", t.label, err)
		ack.State = nil
		t.ckpt.publish(ack)
	}
	st := snap.state
	s := t.ckpt.storage
	base := s.TaskDir(snap.id, t.id)
	if snap.stateDir != "" {
		var files []checkpoint.FileHandle
		var err error
		switch {
		case snap.kind == checkpoint.KindSavepoint && t.ckpt.nativeSavepoints:
			// Self-contained copies of the Pebble files: never shared.
			files, err = s.CopyDir(snap.id, base+"/state", snap.stateDir)
		case snap.kind == checkpoint.KindSavepoint:
			files, err = t.exportCanonical(snap, base)
		case t.ckpt.incremental:
			files, err = t.uploadIncremental(snap, base)
		default:
			files, err = s.CopyDir(snap.id, base+"/state", snap.stateDir)
		}
		if err != nil {
			_ = os.RemoveAll(snap.stateDir)
			fail(err)
			return
		}
		st.State = files
		for _, f := range files {
			snap.metrics.StateSize += f.Size
		}
		if !t.ckpt.incremental || snap.kind == checkpoint.KindSavepoint {
			snap.metrics.Uploaded = snap.metrics.StateSize
		}
	}
	// The sync snapshot is removed, or kept as the local snapshot once the
	// checkpoint is persisted.
	keep := snap.stateDir != "" && snap.kind == checkpoint.KindCheckpoint && t.localDir() != ""
	if snap.stateDir != "" && !keep {
		_ = os.RemoveAll(snap.stateDir)
	}
	fail = func(err error) {
		if keep {
			_ = os.RemoveAll(snap.stateDir)
		}
		ack.Decline = fmt.Sprintf("subtask %s: %v", t.label, err)
		ack.State = nil
		t.ckpt.publish(ack)
	}
	chans := append(snap.out, snap.replay...)
	for _, c := range snap.in {
		if c != nil && (len(c.batches) > 0 || c.rng != nil) {
			chans = append(chans, *c)
		}
	}
	for _, c := range chans {
		side := "out"
		switch {
		case c.replay:
			// Its own file: the same channel may have a capture too,
			// which is replayed after it.
			side = "replay"
		case c.input:
			side = "in"
		}
		// A channel with a range has a file too, empty unless batches
		// follow the range: every channel state names a file.
		f, err := s.WriteFile(snap.id, fmt.Sprintf("%s/channels/%s-%d-%d", base, side, c.edge, c.peer), encodeChannel(c.batches))
		if err != nil {
			fail(err)
			return
		}
		st.Channels = append(st.Channels, checkpoint.ChannelState{Input: c.input, Edge: c.edge, Peer: c.peer, File: f, Bytes: c.bytes, Range: c.rng})
		// Only what was written counts as persisted; a range stays in the
		// stream.
		snap.metrics.InFlightBytes += c.bytes
		if c.rng != nil {
			snap.metrics.InFlightReferenced += c.rng.Bytes
		}
	}
	if keep {
		// Not keeping it only costs a restore from storage.
		if err := t.keepLocal(snap); err != nil {
			t.ckpt.log.Warn("keeping the local snapshot", "subtask", t.label, "err", err)
		}
	}
	snap.metrics.Async = time.Since(start)
	ack.State, ack.Metrics = st, snap.metrics
	t.ckpt.publish(ack)
}

// encodeChannel frames batches as u32 length + bytes.
func encodeChannel(batches [][]byte) []byte {
	n := 0
	for _, b := range batches {
		n += 4 + len(b)
	}
	out := make([]byte, 0, n)
	for _, b := range batches {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// decodeChannel reverses encodeChannel, validating every batch.
func decodeChannel(r io.Reader, what string) ([][]byte, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("%s: truncated frame header", what)
		}
		n := int(binary.LittleEndian.Uint32(data))
		if n > len(data)-4 {
			return nil, fmt.Errorf("%s: frame of %d bytes overruns the file", what, n)
		}
		b := data[4 : 4+n]
		if _, err := abi.Validate(b); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, b)
		data = data[4+n:]
	}
	return out, nil
}

// ackJSON is used by the worker to publish acks.
func ackJSON(a transport.CheckpointAck) []byte {
	b, _ := json.Marshal(a)
	return b
}

// exportCanonical writes the keyed state of a savepoint's sync snapshot in
// the canonical, backend-independent format: it opens the snapshot's Pebble
// checkpoint as a store of its own and exports it, so processing went on
// meanwhile.
func (t *task) exportCanonical(snap *snapshotInProgress, base string) ([]checkpoint.FileHandle, error) {
	st, err := state.Open(state.Options{Dir: snap.stateDir, MaxParallelism: t.store.MaxParallelism(), KeyGroups: snap.state.KeyGroups})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot %d for export: %w", snap.id, err)
	}
	// The canonical format is zstd already: the storage stores it as it
	// is, whatever compression it applies to Pebble files.
	h, err := t.ckpt.storage.WriteFrom(snap.id, base+"/state/"+canonicalFile, func(w io.Writer) error {
		_, err := st.ExportCanonical(w, 0)
		return err
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("exporting savepoint %d: %w", snap.id, err)
	}
	return []checkpoint.FileHandle{h}, nil
}

// uploadIncremental persists a keyed-state snapshot incrementally: Pebble's
// SST files are immutable, so each is stored once, shared, named by its
// content, and referenced by every later checkpoint that still has it (the
// coordinator's registry deletes it when none does); the small mutable files
// (MANIFEST, OPTIONS, WAL) are copied into the checkpoint itself.
func (t *task) uploadIncremental(snap *snapshotInProgress, base string) ([]checkpoint.FileHandle, error) {
	var paths []string
	err := filepath.WalkDir(snap.stateDir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// The files go up side by side: each is written, synced and renamed
	// (a shared table's directory synced too), and on a local disk the
	// syncs of several files share the filesystem's journal commits,
	// where one after the other each waits for its own (a checkpoint's
	// asynchronous phase was mostly that wait, and a job with checkpoints
	// ends with one).
	files := make([]checkpoint.FileHandle, len(paths))
	uploaded := make([]bool, len(paths))
	errs := make([]error, len(paths))
	sem := make(chan struct{}, uploadConcurrency)
	var wg sync.WaitGroup
	for i, p := range paths {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			files[i], uploaded[i], errs[i] = t.uploadStateFile(snap, base, p)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, h := range files {
		if uploaded[i] {
			snap.metrics.Uploaded += h.Size
		}
	}
	return files, nil
}

// uploadStateFile puts one file of the snapshot's Pebble checkpoint into
// storage as a shared file, named by its content: it is written (and
// synced) once, by whichever checkpoint has it first. That holds for the
// tables, which Pebble never changes, and for most of the small files
// too: OPTIONS, the format marker and the empty log are the same in every
// checkpoint of the job, so only the MANIFEST and new tables cost a write
// and a sync, where a copy of each small file cost one per checkpoint.
// uploaded says whether its bytes were written now.
func (t *task) uploadStateFile(snap *snapshotInProgress, base, p string) (checkpoint.FileHandle, bool, error) {
	s := t.ckpt.storage
	rel, err := filepath.Rel(snap.stateDir, p)
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	name := base + "/state/" + filepath.ToSlash(rel)
	var sum string
	if filepath.Ext(p) == ".sst" {
		sum, err = t.sstDigest(p)
	} else {
		// Not cached: the MANIFEST keeps its name as it grows.
		sum, err = checkpoint.FileSHA256(p)
	}
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	h, uploaded, err := s.PutShared(p, sum)
	if err != nil {
		return checkpoint.FileHandle{}, false, err
	}
	h.Name = name
	return h, uploaded, nil
}

// sstDigest returns the SHA-256 of an SST file of the subtask's store.
// SST files never change and their numbers are not reused while the store
// lives, so each is hashed once.
func (t *task) sstDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s/%d", filepath.Base(path), fi.Size())
	t.digestMu.Lock()
	sum, ok := t.digests[key]
	t.digestMu.Unlock()
	if ok {
		return sum, nil
	}
	sum, err = checkpoint.FileSHA256(path)
	if err != nil {
		return "", err
	}
	t.digestMu.Lock()
	if t.digests == nil {
		t.digests = map[string]string{}
	}
	t.digests[key] = sum
	t.digestMu.Unlock()
	return sum, nil
}
