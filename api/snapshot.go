package api

import (
	"encoding/json"

	"github.com/wstream/wstream/checkpoint"
)

// Snapshot is what a savepoint or checkpoint holds, as `wstream inspect
// -o json` prints it: in the names and units of the REST API's
// checkpoints (kind a string, triggerTime and endTime Unix ms,
// durationMillis, stateSize bytes), not those of the metadata file.
type Snapshot struct {
	JobID          string            `json:"jobId"`
	ID             int64             `json:"id"`
	Kind           string            `json:"kind"`
	Format         string            `json:"format"`
	Version        int               `json:"version"`
	TriggerTime    int64             `json:"triggerTime"`
	EndTime        int64             `json:"endTime"`
	DurationMillis int64             `json:"durationMillis"`
	ModuleDigest   string            `json:"moduleDigest"`
	MaxParallelism int               `json:"maxParallelism"`
	StateSize      int64             `json:"stateSize"`
	InFlightBytes  int64             `json:"inFlightBytes"`
	Plan           json.RawMessage   `json:"plan"`
	Subtasks       []SnapshotSubtask `json:"subtasks"`
	Checksum       string            `json:"checksum"`
}

// SnapshotSubtask is one subtask's part of a snapshot. ChainIndex is the
// chain's place in the job's graph (REST's chain is the chain's name,
// which the metadata does not keep); key groups are inclusive.
type SnapshotSubtask struct {
	ChainIndex    int               `json:"chainIndex"`
	Subtask       int               `json:"subtask"`
	KeyGroupStart int               `json:"keyGroupStart"`
	KeyGroupEnd   int               `json:"keyGroupEnd"`
	StateSize     int64             `json:"stateSize"`
	InFlightBytes int64             `json:"inFlightBytes"`
	Finished      bool              `json:"finished"`
	Files         []SnapshotFile    `json:"files"`
	Operator      map[string][]byte `json:"operator"`
}

// SnapshotFile is one keyed-state file of a subtask.
type SnapshotFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Shared bool   `json:"shared"`
}

// SnapshotOf turns a snapshot's metadata into the view.
func SnapshotOf(m *checkpoint.Metadata) Snapshot {
	out := Snapshot{JobID: m.JobID, ID: m.ID, Kind: m.Kind.String(), Format: m.Format, Version: m.Version, TriggerTime: m.Trigger,
		EndTime: m.Done, DurationMillis: max(m.Done-m.Trigger, 0), ModuleDigest: m.ModuleDigest, MaxParallelism: m.MaxParallelism,
		Plan: m.Plan, Subtasks: []SnapshotSubtask{}, Checksum: m.Checksum}
	if len(out.Plan) == 0 {
		out.Plan = json.RawMessage("null")
	}
	for _, t := range m.Tasks {
		s := SnapshotSubtask{ChainIndex: t.Task.Chain, Subtask: t.Task.Subtask, KeyGroupStart: t.KeyGroups.Start, KeyGroupEnd: t.KeyGroups.End,
			Finished: t.Finished, Files: []SnapshotFile{}, Operator: t.Operator}
		if s.Operator == nil {
			s.Operator = map[string][]byte{}
		}
		for _, f := range t.State {
			s.Files = append(s.Files, SnapshotFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256, Shared: f.Shared})
			s.StateSize += f.Size
		}
		for _, ch := range t.Channels {
			s.InFlightBytes += ch.Bytes
		}
		out.StateSize += s.StateSize
		out.InFlightBytes += s.InFlightBytes
		out.Subtasks = append(out.Subtasks, s)
	}
	return out
}
