package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/subtask"
)

// TaskID names one subtask of a job: the chain's index in the physical graph
// (job.Graph.Chains) and the subtask index.
type TaskID struct {
	Chain   int `json:"chain"`
	Subtask int `json:"subtask"`
}

func (t TaskID) String() string { return fmt.Sprintf("%d/%d", t.Chain, t.Subtask) }

// Kind says what a snapshot is for; package subtask owns it.
type Kind = subtask.Kind

const (
	// KindCheckpoint is a periodic checkpoint: owned by the system,
	// retained per Config.Retain, discarded when subsumed.
	KindCheckpoint = subtask.KindCheckpoint
	// KindSavepoint is user-triggered: always aligned, never expires,
	// never discarded by the system.
	KindSavepoint = subtask.KindSavepoint
)

// FileHandle is one persisted file of a snapshot. Path is relative to the
// checkpoint's directory, or, for a shared file, to the storage root; Size
// and SHA256 (hex) are those of the bytes stored.
type FileHandle struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Shared says Path ("shared/<name>") is relative to the storage root:
	// the file is content-addressed and may be referenced by several
	// checkpoints (see Storage.PutShared).
	Shared bool `json:"shared,omitempty"`
	// Compressed says the file is stored zstd-compressed: Size and SHA256
	// are of the stored (compressed) bytes and RawSize is the size of the
	// original bytes, which readers (Open, Restore) return.
	Compressed bool `json:"compressed,omitempty"`
	// RawSize is the size of the original bytes. It is set on compressed
	// and shared handles; 0 on any other handle means Size.
	RawSize int64 `json:"rawSize,omitempty"`
	// Name is, for a shared keyed-state file, the path the file has in the
	// snapshot, relative to the checkpoint's directory as a non-shared
	// file's Path is (tasks/0-1/state/000123.sst): Restore recreates it
	// there. Empty on other handles.
	Name string `json:"name,omitempty"`
}

// ChannelState is the in-flight data of one channel captured by an
// unaligned checkpoint: the records that the barrier overtook (output side)
// or that were still to arrive before the barrier (input side). Replayed on
// restore before any new input.
type ChannelState struct {
	Input bool       `json:"input"` // input side (true) or output side
	Edge  int        `json:"edge"`  // job.ChainEdge.Index
	Peer  int        `json:"peer"`  // the subtask at the other end
	File  FileHandle `json:"file"`  // concatenated encoded abi batches, each prefixed by its u32 length
	Bytes int64      `json:"bytes"` // payload bytes captured
	// Range, when set, is overtaken data that was not copied: it still
	// sits in the job's data stream and is read back from there on
	// restore, ahead of the batches of File (then often empty).
	Range *ChannelRange `json:"range,omitempty"`
}

// ChannelRange is a run of one channel's frames in a JetStream stream: the
// messages of Subject with stream sequences First to Last (inclusive).
// Messages and Bytes count the data batches among them and their bytes.
type ChannelRange struct {
	Stream   string `json:"stream"`
	Subject  string `json:"subject"`
	First    uint64 `json:"first"`
	Last     uint64 `json:"last"`
	Messages int    `json:"messages"`
	Bytes    int64  `json:"bytes"`
}

// SubtaskState is what one subtask's snapshot holds.
type SubtaskState struct {
	Task TaskID `json:"task"`
	// KeyGroups is the range of the chain head's keyed state (when keyed).
	KeyGroups abi.KeyGroupRange `json:"keyGroups"`
	// State lists the keyed-state files (a Pebble checkpoint).
	State []FileHandle `json:"state,omitempty"`
	// Operator holds small per-vertex operator state by vertex id: source
	// offsets, sink transactions.
	Operator map[string][]byte `json:"operator,omitempty"`
	// Channels is the in-flight data of an unaligned checkpoint.
	Channels []ChannelState `json:"channels,omitempty"`
	// Finished says the subtask had finished (its input ended and it
	// closed) before the checkpoint completed: a restore does not run it
	// again, so its input is not replayed and its output not repeated.
	Finished bool `json:"finished,omitempty"`
}

// Metrics are what a subtask reports about its part of a checkpoint.
type Metrics struct {
	// StartDelay: from the trigger to the first barrier at this subtask.
	StartDelay time.Duration `json:"startDelay"`
	// Alignment: from the first to the last barrier (0 for unaligned).
	Alignment time.Duration `json:"alignment"`
	// AlignmentBytes: input bytes processed while aligning.
	AlignmentBytes int64         `json:"alignmentBytes"`
	Sync           time.Duration `json:"sync"`
	Async          time.Duration `json:"async"`
	StateSize      int64         `json:"stateSize"`
	// InFlightBytes: channel state persisted by an unaligned checkpoint.
	InFlightBytes int64 `json:"inFlightBytes"`
	// InFlightReferenced: channel state an unaligned checkpoint recorded
	// as stream ranges (ChannelRange) instead of writing it to storage.
	InFlightReferenced int64 `json:"inFlightReferenced,omitempty"`
	// Uploaded: bytes this checkpoint wrote to storage (an incremental
	// checkpoint references earlier uploads instead of writing them again).
	Uploaded  int64 `json:"uploaded"`
	Unaligned bool  `json:"unaligned"`
	// DeadLetters: records and timers the subtask sent to its dead-letter
	// sink since its previous snapshot (docs/dead-letters.md).
	DeadLetters int64 `json:"deadLetters,omitempty"`
}

// SubsumedReason is why a subtask drops a pending checkpoint that the
// barrier or trigger of the newer checkpoint by overtook; package subtask
// owns the wording, which the coordinator recognises (a decline so worded
// is not a failure).
func SubsumedReason(by int64) string { return subtask.SubsumedReason(by) }

// SubsumedByCancelReason: see SubsumedReason.
func SubsumedByCancelReason(by int64) string { return subtask.SubsumedByCancelReason(by) }

// subsumedBy returns the newer checkpoint a reason that ends as
// SubsumedReason or SubsumedByCancelReason make it names.
func subsumedBy(reason string) (int64, bool) {
	i := strings.LastIndex(reason, "subsumed by ")
	if i < 0 {
		return 0, false
	}
	rest := strings.TrimPrefix(reason[i+len("subsumed by "):], "cancelled ")
	num, ok := strings.CutPrefix(rest, "checkpoint ")
	if !ok {
		return 0, false
	}
	by, err := strconv.ParseInt(num, 10, 64)
	if err != nil || by < 1 {
		return 0, false
	}
	return by, true
}
