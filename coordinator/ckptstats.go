package coordinator

import (
	"sort"
	"sync"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/logging"
)

// DefaultCheckpointHistory is how many recent checkpoints of a job the
// coordinator keeps with their details unless Config.CheckpointHistory
// says otherwise.
const DefaultCheckpointHistory = 100

// Checkpoint statuses in the REST API's statistics.
const (
	CheckpointCompleted  = "completed"
	CheckpointFailed     = "failed"
	CheckpointInProgress = "in_progress"
)

// CheckpointStats is one checkpoint or savepoint of a job as the REST API
// shows it. Times are Unix milliseconds, durations milliseconds, sizes
// bytes; sums over subtasks, and the slowest subtask's alignment, sync and
// async durations.
type CheckpointStats struct {
	ID      int64  `json:"id"`
	Kind    string `json:"kind"`   // checkpoint | savepoint
	Status  string `json:"status"` // completed | failed | in_progress
	Attempt int    `json:"attempt"`
	// Reason says why a failed checkpoint was aborted.
	Reason         string `json:"reason,omitempty"`
	TriggerTime    int64  `json:"triggerTime"`
	EndTime        int64  `json:"endTime,omitempty"`
	DurationMillis int64  `json:"durationMillis"`
	StateSize      int64  `json:"stateSize"`
	Uploaded       int64  `json:"uploaded"`
	InFlightBytes  int64  `json:"inFlightBytes"`
	AlignmentMs    int64  `json:"alignmentMillis"`
	SyncMs         int64  `json:"syncMillis"`
	AsyncMs        int64  `json:"asyncMillis"`
	Unaligned      bool   `json:"unaligned"`
}

// SubtaskCheckpointStats is one subtask's part of a checkpoint.
type SubtaskCheckpointStats struct {
	// Chain names the vertices the subtask runs, joined by "+".
	Chain   string `json:"chain"`
	Subtask int    `json:"subtask"`
	// Acknowledged is false for a subtask that had finished before the
	// checkpoint: it has no part in it.
	Acknowledged       bool  `json:"acknowledged"`
	StartDelayMs       int64 `json:"startDelayMillis"`
	AlignmentMs        int64 `json:"alignmentMillis"`
	AlignmentBytes     int64 `json:"alignmentBytes"`
	SyncMs             int64 `json:"syncMillis"`
	AsyncMs            int64 `json:"asyncMillis"`
	StateSize          int64 `json:"stateSize"`
	Uploaded           int64 `json:"uploaded"`
	InFlightBytes      int64 `json:"inFlightBytes"`
	InFlightReferenced int64 `json:"inFlightReferenced"`
	Unaligned          bool  `json:"unaligned"`
}

// MinAvgMax summarizes one figure over a job's completed checkpoints.
type MinAvgMax struct {
	Min   int64 `json:"min"`
	Avg   int64 `json:"avg"`
	Max   int64 `json:"max"`
	Count int64 `json:"count"`
}

func (s *MinAvgMax) add(v int64) {
	if s.Count == 0 || v < s.Min {
		s.Min = v
	}
	if s.Count == 0 || v > s.Max {
		s.Max = v
	}
	// Avg is kept as the running sum until it is read (summary).
	s.Avg += v
	s.Count++
}

func (s MinAvgMax) final() MinAvgMax {
	if s.Count > 0 {
		s.Avg /= s.Count
	}
	return s
}

// CheckpointSummary is Flink's checkpoint summary: minimum, average and
// maximum of each figure over every completed checkpoint and savepoint the
// history file holds.
type CheckpointSummary struct {
	DurationMillis  MinAvgMax `json:"durationMillis"`
	StateSize       MinAvgMax `json:"stateSize"`
	Uploaded        MinAvgMax `json:"uploaded"`
	InFlightBytes   MinAvgMax `json:"inFlightBytes"`
	AlignmentMillis MinAvgMax `json:"alignmentMillis"`
}

// statsEntry is a checkpoint of the recent history with its subtasks'
// figures (none for a failed one, nor for those read from the history
// file).
type statsEntry struct {
	CheckpointStats
	tasks map[checkpoint.TaskID]checkpoint.Metrics
}

// ckptStats is what the coordinator knows of a job's checkpoints beyond
// their storage: counts, the latest of each outcome, a summary, and the
// most recent ones with their subtasks' figures. The checkpoint driver adds
// each checkpoint as it ends; the first use reads the job's history file,
// so a coordinator that resumed the job starts from what its predecessor
// recorded.
type ckptStats struct {
	mu     sync.Mutex
	loaded bool
	// completed and failed count checkpoints and savepoints.
	completed, failed int64
	restores          int64
	latestCompleted   *CheckpointStats
	latestSavepoint   *CheckpointStats
	latestFailed      *CheckpointStats
	summary           CheckpointSummary
	// recent holds the latest checkpoints, oldest first.
	recent []statsEntry
}

// historyStats turns a history line into statistics.
func historyStats(e HistoryEntry) CheckpointStats {
	st := e.Status
	if st == "aborted" {
		st = CheckpointFailed
	}
	return CheckpointStats{ID: e.ID, Kind: e.Kind.String(), Status: st, Attempt: e.Attempt, Reason: e.Reason,
		TriggerTime: e.Trigger, EndTime: e.Done, DurationMillis: e.Duration.Milliseconds(), StateSize: e.StateSize,
		Uploaded: e.Uploaded, InFlightBytes: e.InFlightBytes, AlignmentMs: e.Alignment.Milliseconds(),
		SyncMs: e.Sync.Milliseconds(), AsyncMs: e.Async.Milliseconds(), Unaligned: e.Unaligned}
}

// loadLocked reads the job's history file once; s.mu is held.
func (s *ckptStats) loadLocked(c *Coordinator, jobID string) {
	if s.loaded {
		return
	}
	s.loaded = true
	if c.cfg.DataDir == "" {
		return
	}
	hist, err := ReadHistory(c.cfg.DataDir, jobID)
	if err != nil {
		c.cfg.Log.Warn("reading the job's checkpoint history", logging.Job, jobID, "err", err)
		return
	}
	for _, e := range hist {
		s.addLocked(c.cfg.CheckpointHistory, historyStats(e), nil)
	}
}

// record writes a checkpoint's history line (write) and adds it, under
// the stats' lock so that a first read of the history file sees each line
// once.
func (s *ckptStats) record(c *Coordinator, jobID string, e HistoryEntry, tasks map[checkpoint.TaskID]checkpoint.Metrics, write func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadLocked(c, jobID)
	write()
	s.addLocked(c.cfg.CheckpointHistory, historyStats(e), tasks)
}

func (s *ckptStats) addLocked(limit int, cs CheckpointStats, tasks map[checkpoint.TaskID]checkpoint.Metrics) {
	p := &cs
	switch cs.Status {
	case CheckpointCompleted:
		s.completed++
		if cs.Kind == checkpoint.KindSavepoint.String() {
			s.latestSavepoint = p
		} else {
			s.latestCompleted = p
		}
		s.summary.DurationMillis.add(cs.DurationMillis)
		s.summary.StateSize.add(cs.StateSize)
		s.summary.Uploaded.add(cs.Uploaded)
		s.summary.InFlightBytes.add(cs.InFlightBytes)
		s.summary.AlignmentMillis.add(cs.AlignmentMs)
	default:
		s.failed++
		s.latestFailed = p
	}
	s.recent = append(s.recent, statsEntry{CheckpointStats: cs, tasks: tasks})
	if over := len(s.recent) - limit; over > 0 {
		// Drop the oldest; copy now and then so the array does not grow.
		s.recent = append(s.recent[:0:0], s.recent[over:]...)
	}
}

func (s *ckptStats) restored() {
	s.mu.Lock()
	s.restores++
	s.mu.Unlock()
}

// CheckpointCounts counts a job's checkpoints and savepoints.
type CheckpointCounts struct {
	// Restored counts the attempts that restored a checkpoint or savepoint
	// since this coordinator took the job.
	Restored   int64 `json:"restored"`
	Total      int64 `json:"total"`
	InProgress int   `json:"inProgress"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
}

// RestoredCheckpoint is what the job's current attempt restored.
type RestoredCheckpoint struct {
	ID   int64  `json:"id"`
	Kind string `json:"kind"` // checkpoint | savepoint
	// Location is the storage (directory or nats-obj:// location) it was
	// read from.
	Location string `json:"location"`
	Attempt  int    `json:"attempt"`
	// Time is when the attempt was deployed, Unix milliseconds.
	Time int64 `json:"time"`
}

// CheckpointLatest holds the latest checkpoint of each outcome.
type CheckpointLatest struct {
	Completed *CheckpointStats    `json:"completed"`
	Savepoint *CheckpointStats    `json:"savepoint"`
	Failed    *CheckpointStats    `json:"failed"`
	Restored  *RestoredCheckpoint `json:"restored"`
}

// CheckpointOverview is Flink's checkpoint overview of a job.
type CheckpointOverview struct {
	JobID    string              `json:"jobId"`
	Counts   CheckpointCounts    `json:"counts"`
	Latest   CheckpointLatest    `json:"latest"`
	Settings *CheckpointSettings `json:"settings"`
	// InProgress lists the checkpoints that are pending now.
	InProgress []CheckpointStats `json:"inProgress"`
}

// CheckpointSettings are a job's checkpoint settings, durations in
// milliseconds.
type CheckpointSettings struct {
	IntervalMillis       int64  `json:"intervalMillis"`
	Mode                 string `json:"mode"`
	TimeoutMillis        int64  `json:"timeoutMillis"`
	MinPauseMillis       int64  `json:"minPauseMillis"`
	AlignedTimeoutMillis int64  `json:"alignedTimeoutMillis"`
	MaxConcurrent        int    `json:"maxConcurrent"`
	TolerableFailures    int    `json:"tolerableFailures"`
	Retain               int    `json:"retain"`
	Incremental          bool   `json:"incremental"`
	// Storage is where the checkpoints go: a directory or nats-obj://.
	Storage string `json:"storage"`
}

// CheckpointDetail is one checkpoint with its subtasks' figures.
type CheckpointDetail struct {
	CheckpointStats
	Subtasks []SubtaskCheckpointStats `json:"subtasks"`
	// SubtasksFrom says where the subtasks' figures come from: "memory"
	// (the coordinator's recent history), "metadata" (the retained
	// checkpoint's metadata in storage) or "" when no one has them any
	// more (a failed checkpoint, or one that was subsumed before this
	// coordinator took the job).
	SubtasksFrom string `json:"subtasksFrom"`
}

func subtaskStats(chains []string, t checkpoint.TaskID, m checkpoint.Metrics, acked bool) SubtaskCheckpointStats {
	name := ""
	if t.Chain >= 0 && t.Chain < len(chains) {
		name = chains[t.Chain]
	}
	out := SubtaskCheckpointStats{Chain: name, Subtask: t.Subtask, Acknowledged: acked}
	if acked {
		out.StartDelayMs, out.AlignmentMs, out.AlignmentBytes = m.StartDelay.Milliseconds(), m.Alignment.Milliseconds(), m.AlignmentBytes
		out.SyncMs, out.AsyncMs, out.StateSize, out.Uploaded = m.Sync.Milliseconds(), m.Async.Milliseconds(), m.StateSize, m.Uploaded
		out.InFlightBytes, out.InFlightReferenced, out.Unaligned = m.InFlightBytes, m.InFlightReferenced, m.Unaligned
	}
	return out
}

// sortSubtasks orders a checkpoint's subtasks by chain, then subtask.
func sortSubtasks(chains []string, s []SubtaskCheckpointStats) {
	idx := map[string]int{}
	for i, c := range chains {
		idx[c] = i
	}
	sort.Slice(s, func(i, k int) bool {
		if s[i].Chain != s[k].Chain {
			return idx[s[i].Chain] < idx[s[k].Chain]
		}
		return s[i].Subtask < s[k].Subtask
	})
}
