package transport

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/wstream/wstream/checkpoint"
)

// Subjects of the control plane. Job and worker ids are restricted to
// [A-Za-z0-9_-] so they are single subject tokens.
const (
	SubjectSavepoint = "wstream.coord.savepoint"
	// SubjectUpgrade replaces a running job's module (UpgradeRequest).
	SubjectUpgrade = "wstream.coord.upgrade"
	// SubjectTenant manages tenants (admin only).
	SubjectTenant  = "wstream.coord.tenant"
	SubjectSubmit  = "wstream.coord.submit"
	SubjectCancel  = "wstream.coord.cancel"
	SubjectList    = "wstream.coord.list"
	SubjectWorkers = "wstream.coord.workers"
	// SubjectRegister and SubjectHeartbeat, followed by "." and the
	// worker's id, are where a worker registers and heartbeats
	// (WorkerRegisterSubject): on a cluster with tenants a worker's
	// credentials allow it to publish under its own id only.
	SubjectRegister  = "wstream.coord.register"
	SubjectHeartbeat = "wstream.coord.heartbeat"
	// SubjectLeader is where the leading coordinator tells workers its
	// epoch (LeaderAnnouncement), at once when it takes the lease and at
	// every renewal.
	SubjectLeader = "wstream.leader"
)

// WorkerRegisterSubject is where worker registers with the coordinator.
func WorkerRegisterSubject(worker string) string { return SubjectRegister + "." + worker }

// WorkerHeartbeatSubject is where worker heartbeats.
func WorkerHeartbeatSubject(worker string) string { return SubjectHeartbeat + "." + worker }

// WorkerSubjects is everything the coordinator sends worker (deploy,
// cancel, checkpoint, credentials), and its inbox: what a worker's
// credentials allow it to subscribe to.
func WorkerSubjects(worker string) string { return "wstream.worker." + worker + ".>" }

// WorkerInboxPrefix is the inbox prefix of worker's own connection: the
// answers to its requests come under WorkerSubjects, so that it never
// needs the account's whole _INBOX.> (where other users' answers go).
func WorkerInboxPrefix(worker string) string { return "wstream.worker." + worker + ".inbox" }

// WorkerCredsSubject is where the coordinator sends a worker renewed
// credentials of a job attempt's account (CredsRenewal).
func WorkerCredsSubject(worker string) string { return "wstream.worker." + worker + ".creds" }

// AttemptInboxPrefix is the inbox prefix of the connections a worker
// opens with a job attempt's credentials (which may not subscribe to the
// account's _INBOX.>).
func AttemptInboxPrefix(job string, attempt int) string {
	return "_WS_INBOX." + job + "." + strconv.Itoa(attempt)
}

// CredsRenewal replaces the credentials of one job attempt's account
// before the ones the worker holds expire.
type CredsRenewal struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	JWT     string `json:"jwt"`
	Seed    string `json:"seed"`
	// Epoch is the leadership epoch of the coordinator that minted them:
	// a worker takes none from a deposed one, whose credentials the new
	// leader would not know to revoke.
	Epoch uint64 `json:"epoch,omitempty"`
}

// WorkerDeploySubject is where the coordinator sends a worker its tasks.
func WorkerDeploySubject(worker string) string { return "wstream.worker." + worker + ".deploy" }

// WorkerCancelSubject is where the coordinator tells a worker to stop a job.
func WorkerCancelSubject(worker string) string { return "wstream.worker." + worker + ".cancel" }

// TaskStatusSubject is where worker reports its tasks of a job ("*" for
// either: any). The worker's id in the subject is what a worker's
// credentials allow it to publish under, so that one worker cannot report
// for another.
func TaskStatusSubject(job, worker string) string { return "wstream.job." + job + ".task." + worker }

// JobDoneSubject is where the coordinator announces a job's end.
func JobDoneSubject(job string) string { return "wstream.job." + job + ".done" }

// WorkerCheckpointSubject is where the coordinator sends a worker checkpoint
// triggers and notifications.
func WorkerCheckpointSubject(worker string) string { return "wstream.worker." + worker + ".ckpt" }

// CheckpointAckSubject is where subtasks acknowledge or decline checkpoints.
func CheckpointAckSubject(job string) string { return "wstream.job." + job + ".ack" }

// ModuleBucket is the JetStream object store bucket holding deployed modules
// by digest, so that every worker can fetch what a job runs.
const ModuleBucket = "wstream-modules"

// JobsBucket is the JetStream key-value bucket (file storage) where the
// coordinator keeps every job under its id: what it needs to run the job
// again, its state, its latest completed checkpoint and, once it has
// ended, its result. A coordinator that starts resumes the jobs the bucket
// says are running.
const JobsBucket = "wstream_jobs"

// CheckpointIDsBucket is the JetStream key-value bucket (file storage) that
// holds, under each job's id, the highest checkpoint id the job has used.
// The coordinator raises it with compare-and-set before a trigger goes out,
// so ids never repeat over a job's life: across attempts, restarts,
// resumes, coordinator failover and savepoints.
const CheckpointIDsBucket = "wstream_checkpoint_ids"

// SubmitRequest asks the coordinator to run a job.
type SubmitRequest struct {
	// Resume, when set, continues an existing job (its id) from its latest
	// checkpoint instead of starting a new one.
	Resume string `json:"resume,omitempty"`
	// FromSavepoint starts the job from the savepoint in this directory.
	FromSavepoint string `json:"fromSavepoint,omitempty"`
	// AllowNonRestoredState lets a savepoint hold state of vertices that
	// the plan no longer has (it is dropped).
	AllowNonRestoredState bool            `json:"allowNonRestoredState,omitempty"`
	Name                  string          `json:"name"`
	Plan                  json.RawMessage `json:"plan"`
	ModuleDigest          string          `json:"moduleDigest"`
	ModuleName            string          `json:"moduleName"`
	// Tenant runs the job as this tenant: only the admin may name one (a
	// tenant's own requests run as that tenant).
	Tenant string `json:"tenant,omitempty"`
}

// SubmitReply answers a SubmitRequest.
type SubmitReply struct {
	JobID string `json:"jobId,omitempty"`
	Error string `json:"error,omitempty"`
}

// SavepointRequest asks the coordinator for a savepoint of a running job,
// written to Dir (default: DATA/savepoints/savepoint-JOB-ID); with Stop the
// job is stopped once the savepoint is complete and its sinks committed.
type SavepointRequest struct {
	JobID string `json:"jobId"`
	Dir   string `json:"dir,omitempty"`
	Stop  bool   `json:"stop,omitempty"`
	// Drain, with Stop, advances event time to the end before the
	// savepoint, so that every event-time timer fires first.
	Drain bool `json:"drain,omitempty"`
}

// SavepointReply answers a SavepointRequest when the savepoint is complete
// (or failed).
type SavepointReply struct {
	ID    int64  `json:"id,omitempty"`
	Dir   string `json:"dir,omitempty"`
	Error string `json:"error,omitempty"`
	// JobEnded: the job had ended before the request (there is nothing to
	// stop or to take a savepoint of).
	JobEnded bool `json:"jobEnded,omitempty"`
}

// UpgradeRequest asks the coordinator to replace the module and plan of a
// running job at a savepoint barrier. The module must be in the module
// store already (ModuleBucket, under its digest). Plan is the new plan;
// the checkpoint and restart settings it leaves out are the running job's.
type UpgradeRequest struct {
	JobID        string          `json:"jobId"`
	Plan         json.RawMessage `json:"plan"`
	ModuleDigest string          `json:"moduleDigest"`
	ModuleName   string          `json:"moduleName"`
	// CanMigrate says the module exports wstream_migrate (the client
	// compiled it): without it an upgrade that raises a state's layout
	// version is refused before anything stops.
	CanMigrate bool `json:"canMigrate,omitempty"`
}

// UpgradeReply answers an UpgradeRequest when the upgrade has ended: done
// (the new module completed a checkpoint, or the job finished on it), or
// with Error when it was refused, aborted or rolled back (RolledBack: the
// old module runs again from the upgrade's savepoint).
type UpgradeReply struct {
	Error      string `json:"error,omitempty"`
	RolledBack bool   `json:"rolledBack,omitempty"`
	// Savepoint is the barrier's savepoint (0 when it never completed),
	// in SavepointDir; Attempt the attempt that runs afterwards.
	Savepoint    int64  `json:"savepoint,omitempty"`
	SavepointDir string `json:"savepointDir,omitempty"`
	Attempt      int    `json:"attempt,omitempty"`
	// Downtime is from the barrier (the savepoint's trigger) to the first
	// record the new module was handed; DowntimeKnown is false when no
	// record reached it before the reply.
	Downtime      time.Duration `json:"downtime,omitempty"`
	DowntimeKnown bool          `json:"downtimeKnown,omitempty"`
	// Migrated lists the states whose values went through wstream_migrate
	// ("vertex/state v1→v2").
	Migrated []string `json:"migrated,omitempty"`
}

// CancelRequest asks the coordinator to stop a job, or a worker to stop its
// subtasks of one attempt of a job.
type CancelRequest struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt,omitempty"`
	// Failed says the job failed elsewhere: sinks abort (or, when the job
	// restarts, keep their files for recovery) instead of flushing.
	Failed bool `json:"failed,omitempty"`
	// Epoch is the leadership epoch of the coordinator that sends the
	// command to a worker, which refuses it when a later leader has spoken
	// to it.
	Epoch uint64 `json:"epoch,omitempty"`
}

// LeaderAnnouncement is the leading coordinator's id and epoch, published
// on SubjectLeader: a worker refuses commands of lower epochs from then on.
type LeaderAnnouncement struct {
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
}

// Reply is a generic acknowledgement.
type Reply struct {
	Error string `json:"error,omitempty"`
}

// WorkerInfo registers a worker (and is repeated as its heartbeat). A
// heartbeat is a registration too: a coordinator that restarted learns its
// workers from their heartbeats.
// WorkerRow is one worker in a workers reply.
type WorkerRow struct {
	ID    string `json:"id"`
	Slots int    `json:"slots"` // 0: unlimited
	// Used counts the subtasks placed on the worker.
	Used     int       `json:"used"`
	LastSeen time.Time `json:"lastSeen"`
	// Live is false once the worker has been silent longer than the
	// coordinator's worker timeout (its jobs fail over).
	Live bool `json:"live"`
}

// WorkersReply answers a workers request (the admin's only).
type WorkersReply struct {
	Workers []WorkerRow `json:"workers"`
	// Leader is the id of the coordinator that answers: the one leading.
	Leader string `json:"leader,omitempty"`
	Error  string `json:"error,omitempty"`
}

type WorkerInfo struct {
	ID    string `json:"id"`
	Slots int    `json:"slots"`
	// Running lists, in a heartbeat, the job attempts that have subtasks on
	// the worker when it is sent: the coordinator cancels attempts it no
	// longer runs, and notices subtasks whose end it never heard of.
	Running []RunningAttempt `json:"running,omitempty"`
	// Reconnects counts, in a heartbeat, the worker's reconnections to
	// NATS: when it grows, checkpoint triggers sent to the worker or acks
	// it sent may have been lost, and the coordinator aborts the pending
	// checkpoints of its jobs instead of waiting for their timeout.
	Reconnects uint64 `json:"reconnects,omitempty"`
	// Epoch is, in a heartbeat, the highest leadership epoch the worker
	// has heard: a new leader adopts the worker's attempts once it has
	// heard the leader's own (it refuses earlier leaders' commands then).
	Epoch uint64 `json:"epoch,omitempty"`
}

// RunningAttempt names one attempt of a job; in a heartbeat, with what a
// new leader needs to adopt it instead of restarting it.
type RunningAttempt struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	// Tasks are the attempt's subtasks on the worker, Module the digest
	// of the module they run, and Epoch the leadership epoch of the
	// deployment that started them.
	Tasks  []TaskRef `json:"tasks,omitempty"`
	Module string    `json:"module,omitempty"`
	Epoch  uint64    `json:"epoch,omitempty"`
	// Creds are the user JWTs (never the seeds) of the attempt's
	// credentials that the worker holds and that have not expired (on a
	// cluster with tenants), listed for a while after the worker heard a
	// new leader's epoch: the leader, which did not mint them, checks that
	// they are the attempt's, in the job's account, before it adopts the
	// attempt, and revokes them when the attempt ends.
	Creds []string `json:"creds,omitempty"`
}

// TaskRef names one subtask of a job: chain index in the physical graph and
// subtask index.
type TaskRef struct {
	Chain   int `json:"chain"`
	Subtask int `json:"subtask"`
}

// Deployment hands a worker tasks of one attempt of a job.
type Deployment struct {
	JobID        string          `json:"jobId"`
	Attempt      int             `json:"attempt"`
	Plan         json.RawMessage `json:"plan"`
	ModuleDigest string          `json:"moduleDigest"`
	ModuleName   string          `json:"moduleName"`
	Tasks        []TaskRef       `json:"tasks"`
	// CheckpointRoot is the job's checkpoint storage directory when the job
	// checkpoints.
	CheckpointRoot string `json:"checkpointRoot,omitempty"`
	// RestoreID is the checkpoint to restore from (0: start fresh).
	RestoreID int64 `json:"restoreId,omitempty"`
	// Restartable says a failure will be followed by a restart: sinks then
	// keep their files for recovery instead of aborting.
	Restartable bool `json:"restartable,omitempty"`
	// SavepointRoot, with RestoreID, restores the job from a savepoint
	// (a storage root holding one checkpoint in canonical form), possibly
	// at another parallelism; CheckpointRoot is then the job's own storage.
	SavepointRoot string `json:"savepointRoot,omitempty"`
	// DataStream, when set, is the JetStream stream (DataStream(JobID))
	// that carries the channels between this worker's subtasks and those of
	// the job's other workers: the job is spread over several workers, and a
	// channel whose two ends are not both in Tasks goes through it.
	DataStream string `json:"dataStream,omitempty"`
	// Tenant owns the job. TenantJWT and TenantSeed are the credentials of
	// a user of the job's NATS account (the tenant's; the service
	// account's for the admin's jobs on a cluster with tenants), minted
	// for this attempt: they expire (CredsRenewal replaces them) and allow
	// no control-plane subject. The worker reaches the job's data (module,
	// data stream, checkpoints in object stores, JetStream connectors)
	// through them, never through its own user.
	Tenant     string `json:"tenant,omitempty"`
	TenantJWT  string `json:"tenantJwt,omitempty"`
	TenantSeed string `json:"tenantSeed,omitempty"`
	// Quotas of the job's tenant that the worker enforces (0: the
	// worker's own bounds).
	MemoryLimitMiB int   `json:"memoryLimitMiB,omitempty"`
	StateBytes     int64 `json:"stateBytes,omitempty"`
	StateWriteRate int64 `json:"stateWriteRate,omitempty"`
	Weight         int   `json:"weight,omitempty"`
	// ModuleBytes is the largest module the worker fetches for the job
	// (0: the worker's own cap).
	ModuleBytes int64 `json:"moduleBytes,omitempty"`
	// ReportFirstRecord asks each subtask with operators to report, in a
	// TaskStatus of state TaskFirstRecord, when its operators are first
	// handed records (an upgrade measures its downtime so).
	ReportFirstRecord bool `json:"reportFirstRecord,omitempty"`
	// Epoch is the sending coordinator's leadership epoch (CancelRequest).
	Epoch uint64 `json:"epoch,omitempty"`
	// Replicas is the replica count (the server's --replicas; 0: one) of
	// every stream and store the worker creates for the job: checkpoint
	// and savepoint object stores, a JetStream sink's stream and staging
	// store on the cluster's own server.
	Replicas int `json:"replicas,omitempty"`
}

// TenantOp is what a TenantRequest asks of the coordinator.
type TenantOp string

// Tenant operations.
const (
	TenantAdd          TenantOp = "add"
	TenantUpdate       TenantOp = "update"
	TenantRemove       TenantOp = "remove"
	TenantList         TenantOp = "list"
	TenantCreds        TenantOp = "creds"        // a new client user of the tenant
	TenantWorkerCreds  TenantOp = "worker-creds" // a worker's own user
	TenantWorkerRevoke TenantOp = "worker-revoke"
)

// ParseTenantOp returns the operation s names, and an error listing the
// operations for any other string.
func ParseTenantOp(s string) (TenantOp, error) {
	switch op := TenantOp(s); op {
	case TenantAdd, TenantUpdate, TenantRemove, TenantList, TenantCreds, TenantWorkerCreds, TenantWorkerRevoke:
		return op, nil
	}
	return "", fmt.Errorf("unknown tenant operation %q (add, update, remove, list, creds, worker-creds, worker-revoke)", s)
}

// TenantRequest manages tenants: Op says how.
type TenantRequest struct {
	Op     TenantOp        `json:"op"`
	Name   string          `json:"name,omitempty"`
	Quotas json.RawMessage `json:"quotas,omitempty"`
}

// TenantReply answers a TenantRequest: the tenants (list, or the one
// changed) and, for add, the credentials file of the tenant's first user.
type TenantReply struct {
	Tenants []json.RawMessage `json:"tenants,omitempty"`
	Creds   string            `json:"creds,omitempty"`
	// APIToken is the tenant's new REST API bearer token (add, creds).
	APIToken string `json:"apiToken,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ControlAction is what a CheckpointControl asks of the subtasks.
type ControlAction string

// Checkpoint control actions.
const (
	CheckpointTrigger  ControlAction = "trigger"
	CheckpointComplete ControlAction = "complete"
	CheckpointAbort    ControlAction = "abort"
	// CheckpointStop stops every subtask after a stop-with-savepoint.
	CheckpointStop ControlAction = "stop"
)

// ParseControlAction returns the action s names, and an error for any
// other string.
func ParseControlAction(s string) (ControlAction, error) {
	switch a := ControlAction(s); a {
	case CheckpointTrigger, CheckpointComplete, CheckpointAbort, CheckpointStop:
		return a, nil
	}
	return "", fmt.Errorf("checkpoint control action %q must be %q, %q, %q or %q",
		s, CheckpointTrigger, CheckpointComplete, CheckpointAbort, CheckpointStop)
}

// UnmarshalJSON parses the action where a message arrives, so that a
// message with an unknown one fails to decode rather than reaching the
// subtasks.
func (a *ControlAction) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseControlAction(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// CheckpointControl carries a checkpoint trigger (to the listed subtasks) or
// a notification (to every subtask of the attempt on the worker).
type CheckpointControl struct {
	JobID     string              `json:"jobId"`
	Attempt   int                 `json:"attempt"`
	Action    ControlAction       `json:"action"`
	ID        int64               `json:"id"`
	Kind      checkpoint.Kind     `json:"kind,omitempty"`
	Timestamp int64               `json:"timestamp,omitempty"`
	Reason    string              `json:"reason,omitempty"`
	Tasks     []checkpoint.TaskID `json:"tasks,omitempty"`
	// Stop, on a savepoint trigger, makes sources stop emitting after it:
	// the job is about to be stopped with this savepoint. On its completion
	// it tells sinks to commit: an intermediate savepoint commits nothing
	// (the next checkpoint commits its data). Sources resume if it aborts.
	Stop bool `json:"stop,omitempty"`
	// Drain, on a stopping savepoint's trigger, makes sources advance the
	// watermark to the end before the barrier.
	Drain bool `json:"drain,omitempty"`
	// Epoch is the sending coordinator's leadership epoch (CancelRequest).
	Epoch uint64 `json:"epoch,omitempty"`
}

// CheckpointAck is a subtask's acknowledgement of its part of a checkpoint,
// or its decline when Decline is set.
type CheckpointAck struct {
	JobID   string                   `json:"jobId"`
	Attempt int                      `json:"attempt"`
	Task    checkpoint.TaskID        `json:"task"`
	ID      int64                    `json:"id"`
	State   *checkpoint.SubtaskState `json:"state,omitempty"`
	Metrics checkpoint.Metrics       `json:"metrics"`
	Decline string                   `json:"decline,omitempty"`
	// EndOfInput, with ID 0, says that the subtask's input has ended: it
	// has flushed everything downstream and now takes part in checkpoints
	// by trigger, as a source does, until one taken after this completes
	// (the final checkpoint); then it commits and finishes.
	EndOfInput bool `json:"endOfInput,omitempty"`
}

// Task states.
const (
	TaskRunning  = "running"
	TaskFinished = "finished"
	TaskFailed   = "failed"
	TaskCanceled = "canceled"
	// TaskFirstRecord is no end: the subtask's operators were handed
	// their first records (TaskStatus.At), when the deployment asked.
	TaskFirstRecord = "first-record"
)

// VertexMetrics counts one vertex's records in one subtask.
type VertexMetrics struct {
	Vertex     string `json:"vertex"`
	RecordsIn  int64  `json:"recordsIn"`
	RecordsOut int64  `json:"recordsOut"`
	// DeadLetters counts the records and timers the vertex sent to the
	// dead-letter sink (docs/dead-letters.md).
	DeadLetters int64 `json:"deadLetters,omitempty"`
}

// TaskStatus reports a subtask's state change.
type TaskStatus struct {
	JobID   string          `json:"jobId"`
	Attempt int             `json:"attempt"`
	Worker  string          `json:"worker"`
	Task    TaskRef         `json:"task"`
	State   string          `json:"state"`
	Error   string          `json:"error,omitempty"`
	Metrics []VertexMetrics `json:"metrics,omitempty"`
	// AfterPeer: the subtask failed because a channel to another subtask
	// closed, a consequence of that one's failure (not a root cause).
	AfterPeer bool `json:"afterPeer,omitempty"`
	// At is when it happened, in Unix milliseconds (TaskFirstRecord).
	At int64 `json:"at,omitempty"`
}

// Job states.
const (
	JobRunning  = "running"
	JobFinished = "finished"
	JobFailed   = "failed"
	JobCanceled = "canceled"
	// JobStopped: stopped with a savepoint.
	JobStopped = "stopped"
)

// JobResult announces the end of a job.
type JobResult struct {
	JobID    string          `json:"jobId"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Error    string          `json:"error,omitempty"`
	Metrics  []VertexMetrics `json:"metrics,omitempty"` // summed over the last attempt's subtasks, plan order
	Duration time.Duration   `json:"duration"`
	Restarts int             `json:"restarts,omitempty"`
}

// JobInfo is one row of a list reply.
type JobInfo struct {
	JobID string `json:"jobId"`
	Name  string `json:"name"`
	// State is the job's state by Flink's names: CREATED, RUNNING,
	// FAILING, RESTARTING, CANCELLING, CANCELED, FINISHED, FAILED,
	// SUSPENDED (package lifecycle).
	State string `json:"state"`
	// Attempt is the job's current attempt (0 first); Restarts counts the
	// restarts its restart strategy made, Cause says why the latest one
	// happened (or the one under way).
	Attempt  int       `json:"attempt"`
	Restarts int       `json:"restarts,omitempty"`
	Cause    string    `json:"cause,omitempty"`
	Started  time.Time `json:"started"`
	Error    string    `json:"error,omitempty"`
	// Tenant owns the job ("" on a cluster without tenants).
	Tenant string `json:"tenant,omitempty"`
}

// ListReply answers a list request.
type ListReply struct {
	Jobs []JobInfo `json:"jobs"`
	// Leader is the id of the coordinator that answers: the one leading.
	Leader string `json:"leader,omitempty"`
	Error  string `json:"error,omitempty"`
}
