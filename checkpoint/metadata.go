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
)

// Metadata describes one completed checkpoint or savepoint: it is the
// content of the checkpoint's _metadata file.
type Metadata struct {
	// Format is MetadataFormat and Version the format version; WriteMetadata
	// sets both.
	Format  string `json:"format"`
	Version int    `json:"version"`

	JobID string `json:"jobId"`
	ID    int64  `json:"id"`
	Kind  Kind   `json:"kind"`
	// Trigger and Done are the times (unix milliseconds) the checkpoint was
	// triggered and completed.
	Trigger int64 `json:"trigger"`
	Done    int64 `json:"done"`

	// Plan is the job plan the checkpoint was taken with.
	Plan json.RawMessage `json:"plan,omitempty"`
	// ModuleDigest identifies the WebAssembly module that ran the job.
	ModuleDigest   string `json:"moduleDigest,omitempty"`
	MaxParallelism int    `json:"maxParallelism"`

	Tasks []SubtaskState `json:"tasks"`
	// Metrics are the subtasks' reports, by TaskID.String().
	Metrics map[string]Metrics `json:"metrics,omitempty"`

	// Checksum is the hex SHA-256 of the compact JSON encoding of the
	// metadata with Checksum empty. WriteMetadata sets it and ReadMetadata
	// verifies it.
	Checksum string `json:"checksum"`
}

// checksum computes m's checksum: the SHA-256 of its compact JSON encoding
// with Checksum empty.
func (m *Metadata) checksum() (string, error) {
	c := *m
	c.Checksum = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// WriteMetadata completes checkpoint m.ID: it sets m's Format, Version and
// Checksum (and compacts m.Plan, as ReadMetadata returns it), makes the
// names of the checkpoint's files durable (Backend.Sync), and writes
// _metadata atomically, last. Only then does the checkpoint count as
// complete; a checkpoint that is already complete is an error.
func (s *Storage) WriteMetadata(m *Metadata) error {
	if err := s.checkIncomplete(m.ID); err != nil {
		return fmt.Errorf("checkpoint: write metadata: %w", err)
	}
	data, err := encodeMetadata(m)
	if err != nil {
		return err
	}
	if err := s.b.Sync(DirName(m.ID) + "/"); err != nil {
		return fmt.Errorf("checkpoint: sync directories of checkpoint %d in %s: %w", m.ID, s.root, err)
	}
	_, err = s.writeAtomic(m.ID, MetadataName, 0, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

// encodeMetadata sets m's Format, Version and Checksum (and compacts
// m.Plan) and returns the content of its _metadata file.
func encodeMetadata(m *Metadata) ([]byte, error) {
	if m.Kind != KindCheckpoint && m.Kind != KindSavepoint {
		return nil, fmt.Errorf("checkpoint: write metadata of checkpoint %d: unknown kind %s", m.ID, m.Kind)
	}
	if len(m.Plan) > 0 {
		var plan bytes.Buffer
		if err := json.Compact(&plan, m.Plan); err != nil {
			return nil, fmt.Errorf("checkpoint: write metadata of checkpoint %d: plan is not JSON: %w", m.ID, err)
		}
		m.Plan = plan.Bytes()
	}
	m.Format = MetadataFormat
	m.Version = 1
	for _, h := range m.handles() {
		if h.Shared || h.Compressed || h.RawSize != 0 || h.Name != "" {
			m.Version = 2
			break
		}
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	m.Checksum = sum
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata of checkpoint %d: %w", m.ID, err)
	}
	return data, nil
}

// ReadMetadata reads and checks the metadata of checkpoint id. It refuses a
// file of another format, of a version this wstream does not know, with a
// checksum that does not match, or recording another checkpoint id or an
// unknown kind; its errors name the file.
func (s *Storage) ReadMetadata(id int64) (*Metadata, error) {
	data, err := s.readAll(s.relToRoot(id, MetadataName))
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		// Removed since it was listed: not there to restore.
		return nil, &corruptError{path: s.relToRoot(id, MetadataName), problem: "missing", cause: err}
	default:
		return nil, fmt.Errorf("checkpoint: read metadata: %w", unavailable(err))
	}
	return decodeMetadata(JoinLocation(s.Dir(id), MetadataName), id, data)
}

// readAll returns the stored bytes of the object name.
func (s *Storage) readAll(name string) ([]byte, error) {
	r, err := s.b.Open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// decodeMetadata decodes and checks data, the _metadata file name of
// checkpoint id, as ReadMetadata describes.
func decodeMetadata(name string, id int64, data []byte) (*Metadata, error) {
	// Format and version first: a newer version may have fields this one
	// does not know.
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("checkpoint: %s is not checkpoint metadata (%v): %w", name, err, ErrCorrupt)
	}
	if head.Format != MetadataFormat {
		return nil, fmt.Errorf("checkpoint: %s has format %q, want %q: not a wstream checkpoint",
			name, head.Format, MetadataFormat)
	}
	if head.Version > MetadataVersion {
		return nil, fmt.Errorf("checkpoint: %s has metadata version %d, written by a newer wstream; this one reads up to version %d",
			name, head.Version, MetadataVersion)
	}
	if head.Version < 1 {
		return nil, fmt.Errorf("checkpoint: %s has unknown metadata version %d", name, head.Version)
	}
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint: decode %s: %v: %w", name, err, ErrCorrupt)
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: checksum %s: %w", name, err)
	}
	if sum != m.Checksum {
		return nil, fmt.Errorf("checkpoint: %s: checksum mismatch: file records %q, content hashes to %q: %w",
			name, m.Checksum, sum, ErrCorrupt)
	}
	if m.ID != id {
		return nil, fmt.Errorf("checkpoint: %s records checkpoint %d, not %d: %w", name, m.ID, id, ErrCorrupt)
	}
	// WriteMetadata writes no other kind; readers would take one for a
	// checkpoint.
	if m.Kind != KindCheckpoint && m.Kind != KindSavepoint {
		return nil, fmt.Errorf("checkpoint: %s records the unknown kind %d: %w", name, uint8(m.Kind), ErrCorrupt)
	}
	return &m, nil
}

// handles returns every file of m: state and channel state of each task.
func (m *Metadata) handles() []FileHandle {
	var hs []FileHandle
	for i := range m.Tasks {
		t := &m.Tasks[i]
		hs = append(hs, t.State...)
		for j := range t.Channels {
			hs = append(hs, t.Channels[j].File)
		}
	}
	return hs
}
