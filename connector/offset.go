package connector

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Rewindable is implemented by every source: the position after the records
// returned so far, and a way back to it. A checkpoint stores the offset as
// the source subtask's operator state; a restore opens the source and seeks
// it there, so the records after the checkpoint are read again exactly once.
type Rewindable interface {
	// Offset returns the position after the last record returned by Next
	// (and whatever the source needs to resume its watermark), encoded
	// compactly, self-describing enough that Seek can refuse an offset of
	// another source kind or of another subtask/parallelism with a clear
	// error.
	Offset() ([]byte, error)
	// Seek moves an opened source to offset; the next Next continues
	// exactly after that record; watermarks continue from the saved
	// maximum timestamp.
	Seek(offset []byte) error
}

var (
	_ Rewindable = (*genSource)(nil)
	_ Rewindable = (*fileSource)(nil)
)

// offsetVersion is the version of the offset encoding. Seek refuses any
// other version.
const offsetVersion = 1

// offsetHeader is what every source offset starts with. It is JSON: a few
// dozen bytes per subtask, readable in a checkpoint dump.
type offsetHeader struct {
	Version     int    `json:"version"`
	Kind        string `json:"kind"`        // source connector name: "gen", "file"
	Subtask     int    `json:"subtask"`     // subtask that produced the offset
	Parallelism int    `json:"parallelism"` // of the source when the offset was taken
}

// decodeOffset checks offset's header against the source that seeks (what
// names it in errors, kind is its connector name) and then decodes the
// whole offset strictly into dst, which embeds an offsetHeader.
func decodeOffset(what, kind string, subtask, parallelism int, offset []byte, dst any) error {
	var h offsetHeader
	if err := json.Unmarshal(offset, &h); err != nil {
		return fmt.Errorf("%s: seek: offset %q is not a source offset: %v", what, truncate(offset), err)
	}
	if h.Version != offsetVersion {
		return fmt.Errorf("%s: seek: offset version %d is not supported (this build reads version %d)", what, h.Version, offsetVersion)
	}
	if h.Kind != kind {
		return fmt.Errorf("%s: seek: the offset belongs to a %q source, not a %q source", what, h.Kind, kind)
	}
	if h.Subtask != subtask || h.Parallelism != parallelism {
		return fmt.Errorf("%s: seek: the offset belongs to subtask %d of parallelism %d, not subtask %d of parallelism %d",
			what, h.Subtask, h.Parallelism, subtask, parallelism)
	}
	dec := json.NewDecoder(bytes.NewReader(offset))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%s: seek: malformed %s offset %q: %v", what, kind, truncate(offset), err)
	}
	return nil
}
