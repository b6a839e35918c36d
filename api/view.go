package api

import (
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// The view types: one model of a job, a worker and a checkpoint for every
// face — the REST API, the web UI (which reads the REST API) and the
// CLI's -o json (cmd/wstream builds the same types from what the NATS
// control plane tells it). Times are Unix milliseconds, durations
// milliseconds (fields ending in Millis), sizes bytes, and enums strings.

// JobSummary is one job of a list: GET /v1/jobs and `wstream list -o json`.
type JobSummary struct {
	JobID string `json:"jobId"`
	Name  string `json:"name"`
	// State is one of Flink's names: CREATED, RUNNING, FAILING, RESTARTING,
	// CANCELLING, CANCELED, FINISHED, FAILED, SUSPENDED.
	State string `json:"state"`
	// Tenant owns the job ("" on a cluster without tenants).
	Tenant string `json:"tenant"`
	// Attempt counts from 0; Restarts are those the restart strategy made,
	// Cause says why the latest one happened.
	Attempt  int    `json:"attempt"`
	Restarts int    `json:"restarts"`
	Cause    string `json:"cause"`
	// Error is what the job failed with.
	Error     string `json:"error"`
	StartTime int64  `json:"startTime"`
	// EndTime is null while the job has not ended; DurationMillis is how
	// long it has run, or ran.
	EndTime        *int64 `json:"endTime"`
	DurationMillis int64  `json:"durationMillis"`
	// Tasks counts the subtasks of the current attempt; null where the
	// answer does not know them (the CLI's list over NATS).
	Tasks *TaskCounts `json:"tasks"`
}

// TaskCounts counts a job's subtasks (one per chain and parallel
// instance).
type TaskCounts struct {
	Total int `json:"total"`
	// Deployed are placed on a worker; Sampled have reported figures.
	Deployed int `json:"deployed"`
	Sampled  int `json:"sampled"`
}

// Ended reports whether a state is final (the job runs no more).
func Ended(state string) bool {
	switch state {
	case "FINISHED", "FAILED", "CANCELED", "SUSPENDED":
		return true
	}
	return false
}

// SummaryOf turns a list row into a summary: without its result the end
// time of an ended job is not known, and the duration is to now for a
// running one.
func SummaryOf(j transport.JobInfo, now time.Time) JobSummary {
	s := JobSummary{JobID: j.JobID, Name: j.Name, State: j.State, Tenant: j.Tenant, Attempt: j.Attempt, Restarts: j.Restarts,
		Cause: j.Cause, Error: j.Error, StartTime: j.Started.UnixMilli()}
	if !Ended(j.State) {
		s.DurationMillis = max(0, now.Sub(j.Started).Milliseconds())
	}
	return s
}

// Job is one job in detail: GET /v1/jobs/{id}.
type Job struct {
	JobSummary
	// Now is the coordinator's clock when it answered.
	Now            int64  `json:"now"`
	Module         string `json:"module"`
	ModuleDigest   string `json:"moduleDigest"`
	MaxParallelism int    `json:"maxParallelism"`
	// Checkpointing is null for a job that takes no checkpoints.
	Checkpointing *coordinator.CheckpointSettings `json:"checkpointing"`
	// RestartLog says why each restart happened, oldest first.
	RestartLog []Restart                  `json:"restartLog"`
	Vertices   []coordinator.VertexStatus `json:"vertices"`
	Edges      []job.Edge                 `json:"edges"`
	Result     *JobResult                 `json:"result"`
	Upgrades   []Upgrade                  `json:"upgrades"`
}

// Upgrade is one upgrade or rescale of a job, as GET /v1/jobs/{id},
// `wstream checkpoints -o json` and `wstream upgrade -o json` show it.
// Time is Unix ms; DowntimeMillis, from the savepoint's barrier to the
// new module's first record, is null when no record reached the new
// module before the upgrade was recorded.
type Upgrade struct {
	Time    int64  `json:"time"`
	Outcome string `json:"outcome"` // done | rolled back | aborted
	Cause   string `json:"cause,omitempty"`
	// Savepoint is the id of the savepoint the new attempt started from
	// (0: none was taken).
	Savepoint      int64    `json:"savepoint"`
	FromAttempt    int      `json:"fromAttempt"`
	Attempt        int      `json:"attempt"`
	OldModule      string   `json:"oldModule"`
	OldDigest      string   `json:"oldDigest"`
	NewModule      string   `json:"newModule"`
	NewDigest      string   `json:"newDigest"`
	OldSubtasks    int      `json:"oldSubtasks"`
	NewSubtasks    int      `json:"newSubtasks"`
	Migrated       []string `json:"migrated"`
	DowntimeMillis *int64   `json:"downtimeMillis"`
}

// UpgradeOf turns a line of a job's upgrade history into the view.
func UpgradeOf(e coordinator.UpgradeEntry) Upgrade {
	u := Upgrade{Time: e.Time.UnixMilli(), Outcome: e.Outcome, Cause: e.Cause, Savepoint: e.Savepoint, FromAttempt: e.FromAttempt,
		Attempt: e.Attempt, OldModule: e.OldModule, OldDigest: e.OldDigest, NewModule: e.NewModule, NewDigest: e.NewDigest,
		OldSubtasks: e.OldSubtasks, NewSubtasks: e.NewSubtasks, Migrated: orEmpty(e.Migrated)}
	if e.DowntimeKnown {
		d := e.Downtime.Milliseconds()
		u.DowntimeMillis = &d
	}
	return u
}

// UpgradesOf turns a job's upgrade history into the view, oldest first
// ([] for none).
func UpgradesOf(es []coordinator.UpgradeEntry) []Upgrade {
	out := make([]Upgrade, 0, len(es))
	for _, e := range es {
		out = append(out, UpgradeOf(e))
	}
	return out
}

// orEmpty is s, or an empty slice for nil: JSON's [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Restart is one restart of a job: Attempt is the attempt that ended (the first restart ends attempt 0 and starts attempt 1).
type Restart struct {
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	Time    int64  `json:"time"`
}

// JobResult is how a job ended.
type JobResult struct {
	State          string `json:"state"`
	Error          string `json:"error"`
	DurationMillis int64  `json:"durationMillis"`
	Restarts       int    `json:"restarts"`
	// Metrics are the last attempt's figures by vertex, plan order.
	Metrics []transport.VertexMetrics `json:"metrics"`
}

// ResultOf turns how a job ended into the view.
func ResultOf(r *transport.JobResult) *JobResult {
	return &JobResult{State: r.State, Error: r.Error, DurationMillis: r.Duration.Milliseconds(), Restarts: r.Restarts,
		Metrics: orEmpty(r.Metrics)}
}

// JobOutcome is how a job ended as `wstream deploy` and `wstream follow`
// print it with -o json: the fields of GET /v1/jobs/{id} that say so.
type JobOutcome struct {
	JobID  string     `json:"jobId"`
	Result *JobResult `json:"result"`
}

// JobOf turns the coordinator's detail into the view. A job that has
// ended keeps its final figures: a vertex with no live sample shows the
// counts of its result.
func JobOf(d *coordinator.JobDetail) *Job {
	out := &Job{JobSummary: SummaryOf(d.JobInfo, time.UnixMilli(d.Now)), Now: d.Now, Module: d.Module, ModuleDigest: d.ModuleDigest,
		MaxParallelism: d.MaxParallelism, Checkpointing: d.Checkpointing, Vertices: d.Vertices, Edges: d.Edges,
		Upgrades: UpgradesOf(d.Upgrades), RestartLog: []Restart{}}
	if out.Vertices == nil {
		out.Vertices = []coordinator.VertexStatus{}
	}
	out.DurationMillis = d.DurationMillis
	for _, r := range d.RestartLog {
		out.RestartLog = append(out.RestartLog, Restart{Attempt: r.Attempt, Reason: r.Reason, Time: r.Time.UnixMilli()})
	}
	if r := d.Result; r != nil {
		out.Result = ResultOf(r)
		// In whole milliseconds, so that end − start is the duration.
		end := out.StartTime + r.Duration.Milliseconds()
		out.EndTime = &end
		final := map[string]transport.VertexMetrics{}
		for _, m := range r.Metrics {
			final[m.Vertex] = m
		}
		for i := range out.Vertices {
			v := &out.Vertices[i]
			m, ok := final[v.ID]
			if !ok || v.Metrics.Sampled > 0 {
				continue
			}
			v.Metrics.RecordsIn, v.Metrics.RecordsOut, v.Metrics.DeadLetters = m.RecordsIn, m.RecordsOut, m.DeadLetters
		}
	}
	tc := &TaskCounts{}
	chains := map[string]bool{}
	for _, v := range out.Vertices {
		if chains[v.Chain] {
			continue
		}
		chains[v.Chain] = true
		for _, s := range v.Subtasks {
			tc.Total++
			if s.Worker != "" && out.EndTime == nil {
				tc.Deployed++
			}
			if s.Metrics != nil {
				tc.Sampled++
			}
		}
	}
	out.Tasks = tc
	return out
}

// Worker is one worker: GET /v1/workers and `wstream workers -o json`.
type Worker struct {
	ID string `json:"id"`
	// Slots ≤ 0: unlimited.
	Slots    int   `json:"slots"`
	Used     int   `json:"used"`
	Live     bool  `json:"live"`
	LastSeen int64 `json:"lastSeen"`
	// Subtasks are placed on the worker; null where the answer does not
	// know them (the CLI over NATS).
	Subtasks []coordinator.PlacedSubtask `json:"subtasks"`
}

// WorkerOf turns a worker row into the view.
func WorkerOf(r transport.WorkerRow, subtasks []coordinator.PlacedSubtask) Worker {
	return Worker{ID: r.ID, Slots: r.Slots, Used: r.Used, Live: r.Live, LastSeen: r.LastSeen.UnixMilli(), Subtasks: subtasks}
}

// Checkpoint is one checkpoint or savepoint of a job's history.
type Checkpoint struct {
	coordinator.CheckpointStats
	// DeadLetters counts the records and timers sent to dead-letter sinks
	// in the checkpoint's interval (in the data directory's history).
	DeadLetters int64 `json:"deadLetters,omitempty"`
}

// CheckpointOf turns a line of a job's checkpoint history (the data
// directory's) into the statistics the REST API shows.
func CheckpointOf(e coordinator.HistoryEntry) Checkpoint {
	st := e.Status
	if st == "aborted" {
		st = coordinator.CheckpointFailed
	}
	return Checkpoint{DeadLetters: e.DeadLetters, CheckpointStats: coordinator.CheckpointStats{ID: e.ID, Kind: e.Kind.String(), Status: st, Attempt: e.Attempt, Reason: e.Reason,
		TriggerTime: e.Trigger, EndTime: e.Done, DurationMillis: e.Duration.Milliseconds(), StateSize: e.StateSize,
		Uploaded: e.Uploaded, InFlightBytes: e.InFlightBytes, AlignmentMs: e.Alignment.Milliseconds(),
		SyncMs: e.Sync.Milliseconds(), AsyncMs: e.Async.Milliseconds(), Unaligned: e.Unaligned}}
}

// CheckpointList is a job's checkpoint history: GET
// /v1/jobs/{id}/checkpoints/history and `wstream checkpoints -o json`
// (which adds the checkpoints retained in the data directory and the
// upgrades).
type CheckpointList struct {
	JobID    string       `json:"jobId"`
	History  []Checkpoint `json:"history"`
	Retained []int64      `json:"retained,omitempty"`
	Upgrades []Upgrade    `json:"upgrades,omitempty"`
}

// Exception is one failure of a job; Time is Unix ms.
type Exception struct {
	Time      int64  `json:"time"`
	Attempt   int    `json:"attempt"`
	Kind      string `json:"kind"`
	Chain     string `json:"chain,omitempty"`
	Subtask   *int   `json:"subtask,omitempty"`
	Worker    string `json:"worker,omitempty"`
	AfterPeer bool   `json:"afterPeer,omitempty"`
	Message   string `json:"message"`
}

// ExceptionGroup gathers the failures of one cause: the same message
// once, with how often and when it happened.
type ExceptionGroup struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
	// Kinds are the kinds of entries the cause appeared as (task,
	// restart, job); Attempts the attempts it ended, ascending.
	Kinds    []string `json:"kinds"`
	Attempts []int    `json:"attempts"`
	First    int64    `json:"first"`
	Last     int64    `json:"last"`
}

// Exceptions is a job's failure history, newest first, and grouped by
// cause (most recent group first).
type Exceptions struct {
	Root      *Exception       `json:"root"`
	Entries   []Exception      `json:"entries"`
	Groups    []ExceptionGroup `json:"groups"`
	Truncated bool             `json:"truncated"`
}

// ExceptionsOf turns the coordinator's failure history into the view:
// context that a message repeats ("a: a: b") appears once, a restart's
// cause that ended no attempt of record (attempt −1) is the attempt 0
// it ended, and entries of the same cause form one group.
func ExceptionsOf(x *coordinator.Exceptions) *Exceptions {
	conv := func(e coordinator.Exception) Exception {
		return Exception{Time: e.Time.UnixMilli(), Attempt: max(e.Attempt, 0), Kind: e.Kind, Chain: e.Chain, Subtask: e.Subtask,
			Worker: e.Worker, AfterPeer: e.AfterPeer, Message: dedupeContext(e.Message)}
	}
	out := &Exceptions{Entries: []Exception{}, Groups: []ExceptionGroup{}, Truncated: x.Truncated}
	if x.Root != nil {
		r := conv(*x.Root)
		out.Root = &r
	}
	index := map[string]int{}
	for _, e := range x.Entries {
		v := conv(e)
		out.Entries = append(out.Entries, v)
		k := causeKey(v.Message)
		i, ok := index[k]
		if !ok {
			i = len(out.Groups)
			index[k] = i
			out.Groups = append(out.Groups, ExceptionGroup{Message: v.Message, First: v.Time, Last: v.Time, Kinds: []string{}, Attempts: []int{}})
		}
		g := &out.Groups[i]
		g.Count++
		g.First = min(g.First, v.Time)
		g.Last = max(g.Last, v.Time)
		if !contains(g.Kinds, v.Kind) {
			g.Kinds = append(g.Kinds, v.Kind)
		}
		if !contains(g.Attempts, v.Attempt) {
			g.Attempts = insertSorted(g.Attempts, v.Attempt)
		}
	}
	return out
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func insertSorted(s []int, v int) []int {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// digits are what differs between two reports of one cause: subtask
// numbers, attempts, offsets.
var digits = regexp.MustCompile(`[0-9]+`)

// causeKey is what two messages of the same cause share: the message
// without the prefixes naming the subtask and without numbers.
func causeKey(msg string) string {
	return digits.ReplaceAllString(msg, "#")
}

// dedupeContext drops a context that a message repeats right after
// itself: "wstream_open: wstream_open: no such file" is
// "wstream_open: no such file".
func dedupeContext(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:0:0]
	for _, p := range parts {
		if len(out) > 0 && out[len(out)-1] == p {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

// VersionInfo is what a binary is: the first fields of GET /v1/config,
// and `wstream version -o json`.
type VersionInfo struct {
	Version string `json:"version"`
	// ABI is the host↔guest ABI version the binary speaks (abi/ABI.md).
	ABI int `json:"abi"`
	// Go is the Go version the binary was built with; Commit its VCS
	// revision when known.
	Go     string `json:"go"`
	Commit string `json:"commit,omitempty"`
}

// Build tells the version of this binary.
func Build() VersionInfo {
	goV, commit := buildInfo()
	return VersionInfo{Version: Version, ABI: abi.Version, Go: goV, Commit: commit}
}

// ConfigReply answers GET /v1/config: what the UI and clients need to
// know of the server.
type ConfigReply struct {
	VersionInfo
	// Tenants is true on a multi-tenant cluster.
	Tenants bool `json:"tenants"`
	// Features lists the optional endpoints this server serves: deploy
	// (POST /v1/jobs) and rescale (POST /v1/jobs/{id}/rescale).
	Features []string `json:"features"`
	// RefreshMillis is how often the UI polls.
	RefreshMillis int64 `json:"refreshMillis"`
	// MaxModuleBytes bounds a module uploaded with POST /v1/jobs.
	MaxModuleBytes int64 `json:"maxModuleBytes"`
}

// Version is the server's version, set by the binary (cmd/wstream).
var Version = "dev"

func buildInfo() (goVersion, commit string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			commit = s.Value
		}
	}
	return bi.GoVersion, commit
}

// Tenant is a tenant and its quotas (defaults filled in), as `wstream
// tenant list -o json` prints it.
type Tenant struct {
	Name    string       `json:"name"`
	Account string       `json:"account"`
	Removed bool         `json:"removed"`
	Created int64        `json:"created"`
	Updated int64        `json:"updated"`
	Quotas  TenantQuotas `json:"quotas"`
}

// TenantQuotas are a tenant's quotas in bytes (and bytes per second).
type TenantQuotas struct {
	Jobs                int   `json:"jobs"`
	Subtasks            int   `json:"subtasks"`
	Parallelism         int   `json:"parallelism"`
	MemoryBytes         int64 `json:"memoryBytes"`
	StateBytes          int64 `json:"stateBytes"`
	StateWriteRateBytes int64 `json:"stateWriteRateBytes"`
	StorageBytes        int64 `json:"storageBytes"`
	MemoryStorageBytes  int64 `json:"memoryStorageBytes"`
	Streams             int64 `json:"streams"`
	ModuleBytes         int64 `json:"moduleBytes"`
	Weight              int   `json:"weight"`
}

// TenantOf turns a tenant's record into the view.
func TenantOf(t tenant.Tenant) Tenant {
	q := t.Quotas.WithDefaults()
	return Tenant{Name: t.Name, Account: t.Account, Removed: t.Removed, Created: t.Created.UnixMilli(), Updated: t.Updated.UnixMilli(),
		Quotas: TenantQuotas{Jobs: q.Jobs, Subtasks: q.Subtasks, Parallelism: q.Parallelism, MemoryBytes: int64(q.MemoryMiB) << 20,
			StateBytes: q.StateBytes, StateWriteRateBytes: q.StateWriteRate, StorageBytes: q.StorageBytes,
			MemoryStorageBytes: q.MemoryStorageBytes, Streams: q.Streams, ModuleBytes: q.ModuleBytes, Weight: q.Weight}}
}
