package transport

import (
	"encoding/json"
	"time"
)

// Subjects of the control plane. Job and worker ids are restricted to
// [A-Za-z0-9_-] so they are single subject tokens.
const (
	SubjectSubmit    = "wstream.coord.submit"
	SubjectCancel    = "wstream.coord.cancel"
	SubjectList      = "wstream.coord.list"
	SubjectRegister  = "wstream.coord.register"
	SubjectHeartbeat = "wstream.coord.heartbeat"
)

// WorkerDeploySubject is where the coordinator sends a worker its tasks.
func WorkerDeploySubject(worker string) string { return "wstream.worker." + worker + ".deploy" }

// WorkerCancelSubject is where the coordinator tells a worker to stop a job.
func WorkerCancelSubject(worker string) string { return "wstream.worker." + worker + ".cancel" }

// TaskStatusSubject is where workers report their tasks of a job.
func TaskStatusSubject(job string) string { return "wstream.job." + job + ".task" }

// JobDoneSubject is where the coordinator announces a job's end.
func JobDoneSubject(job string) string { return "wstream.job." + job + ".done" }

// ModuleBucket is the JetStream object store bucket holding deployed modules
// by digest, so that every worker can fetch what a job runs.
const ModuleBucket = "wstream-modules"

// SubmitRequest asks the coordinator to run a job.
type SubmitRequest struct {
	Name         string          `json:"name"`
	Plan         json.RawMessage `json:"plan"`
	ModuleDigest string          `json:"moduleDigest"`
	ModuleName   string          `json:"moduleName"`
}

// SubmitReply answers a SubmitRequest.
type SubmitReply struct {
	JobID string `json:"jobId,omitempty"`
	Error string `json:"error,omitempty"`
}

// CancelRequest asks the coordinator to stop a job.
type CancelRequest struct {
	JobID string `json:"jobId"`
	// Failed says the job failed elsewhere: sinks abort instead of
	// flushing.
	Failed bool `json:"failed,omitempty"`
}

// Reply is a generic acknowledgement.
type Reply struct {
	Error string `json:"error,omitempty"`
}

// WorkerInfo registers a worker (and is repeated as its heartbeat).
type WorkerInfo struct {
	ID    string `json:"id"`
	Slots int    `json:"slots"`
}

// TaskRef names one subtask of a job: chain index in the physical graph and
// subtask index.
type TaskRef struct {
	Chain   int `json:"chain"`
	Subtask int `json:"subtask"`
}

// Deployment hands a worker tasks of a job.
type Deployment struct {
	JobID        string          `json:"jobId"`
	Plan         json.RawMessage `json:"plan"`
	ModuleDigest string          `json:"moduleDigest"`
	ModuleName   string          `json:"moduleName"`
	Tasks        []TaskRef       `json:"tasks"`
}

// Task states.
const (
	TaskRunning  = "running"
	TaskFinished = "finished"
	TaskFailed   = "failed"
	TaskCanceled = "canceled"
)

// VertexMetrics counts one vertex's records in one subtask.
type VertexMetrics struct {
	Vertex     string `json:"vertex"`
	RecordsIn  int64  `json:"recordsIn"`
	RecordsOut int64  `json:"recordsOut"`
}

// TaskStatus reports a subtask's state change.
type TaskStatus struct {
	JobID   string          `json:"jobId"`
	Worker  string          `json:"worker"`
	Task    TaskRef         `json:"task"`
	State   string          `json:"state"`
	Error   string          `json:"error,omitempty"`
	Metrics []VertexMetrics `json:"metrics,omitempty"`
}

// Job states.
const (
	JobRunning  = "running"
	JobFinished = "finished"
	JobFailed   = "failed"
	JobCanceled = "canceled"
)

// JobResult announces the end of a job.
type JobResult struct {
	JobID    string          `json:"jobId"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Error    string          `json:"error,omitempty"`
	Metrics  []VertexMetrics `json:"metrics,omitempty"` // summed over subtasks, plan order
	Duration time.Duration   `json:"duration"`
}

// JobInfo is one row of a list reply.
type JobInfo struct {
	JobID   string    `json:"jobId"`
	Name    string    `json:"name"`
	State   string    `json:"state"`
	Started time.Time `json:"started"`
	Error   string    `json:"error,omitempty"`
}

// ListReply answers a list request.
type ListReply struct {
	Jobs  []JobInfo `json:"jobs"`
	Error string    `json:"error,omitempty"`
}
