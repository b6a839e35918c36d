// Package checkpoint takes consistent snapshots of a running job and brings
// the job back from them: Flink's checkpoints and savepoints (the design in
// DESIGN.md, "Checkpoint path", and the source documents in shared/seeds),
// rebuilt for sandboxed operators.
//
// The algorithms are pure state machines in the manner of etcd raft: they
// start no goroutines, read no clock and do no IO. A driver owns each one
// from a single goroutine, feeds it events with the time as milliseconds,
// and carries out, in order, the actions its Ready method hands back. Every
// ordering question is therefore a scenario test in testdata/, with no
// sleeps.
//
// # Coordinator
//
// A Coordinator runs in the job's coordinator process. It triggers
// checkpoints, collects every task's acknowledgement, and decides when a
// checkpoint completes or aborts. The life of checkpoint n:
//
//  1. Trigger. Tick triggers a periodic checkpoint when it is due (the first
//     after Config.InitialDelay, then every Config.Interval at a fixed rate),
//     fewer than Config.MaxConcurrent periodic checkpoints are pending, and
//     Config.MinPause has passed since the last checkpoint or savepoint
//     ended (completed or aborted). TriggerSavepoint triggers a savepoint at once, whatever
//     the limits. Ids come from one counter and strictly increase, across
//     restarts too: the driver passes the next id to NewCoordinator. The
//     driver carries out the Trigger action by sending it to the source
//     subtasks.
//  2. Acknowledge. Each task snapshots (sync phase, then async upload) and
//     the driver reports its Ack with the state handles and metrics. A task
//     may Decline instead, which aborts the checkpoint. A task that finishes
//     (TaskFinished) counts as acked with empty state for the pending
//     checkpoints and is not waited for by later ones.
//  3. Persist. When no task is waited for any more, the coordinator emits
//     Persist with the Completed checkpoint. Persists run one at a time, in
//     the order the checkpoints became fully acknowledged; the driver writes
//     the metadata atomically and reports the outcome with Persisted. Every
//     task has answered such a checkpoint, so any further ack for it is a
//     duplicate (ErrDuplicateAck) or comes from a finished task
//     (ErrTaskFinished): both are ignored. It no longer expires and cannot
//     be declined.
//  4. Complete. After Persisted(n, nil), and only then, the coordinator
//     emits NotifyComplete for n: sinks commit the transactions they
//     prepared for it. A periodic checkpoint joins the completed store, and
//     pending periodic checkpoints older than n are aborted ("subsumed");
//     the retained checkpoints beyond Config.Retain are discarded, oldest
//     first. A savepoint belongs to the user: it is not retained, never
//     discarded, and subsumes nothing.
//  5. Abort. A decline, a timeout (Config.Timeout after the trigger, for
//     savepoints too), a failed Persist, subsumption, Stop and a failed job
//     end a checkpoint with NotifyAborted (every subtask drops it and
//     forwards a cancel marker) followed by Discard (its files go).
//
// Declines, timeouts and failed persists of periodic checkpoints count as
// failures; a completed periodic checkpoint resets the count. Two aborts do
// not count: a trigger the driver could not send (TriggerFailed: the id
// could not be recorded, no task took part), and a decline whose reason
// says a newer checkpoint this coordinator triggered subsumed it
// (SubsumedReason; Flink's CHECKPOINT_SUBSUMED), as when a savepoint's
// barrier overtakes a pending checkpoint's. HoldTriggers, called once the
// job leaves RUNNING, ends triggering while pending checkpoints may still
// complete. When the
// count of consecutive failures exceeds Config.TolerableFailures (-1:
// unlimited), the coordinator emits FailJob once, aborts the checkpoints
// that still wait for acks, and triggers nothing more. Stop does the same
// without FailJob. Checkpoints already fully acknowledged still persist and
// complete after either, so a driver drains Ready until Pending is empty.
//
// Messages about checkpoints that are not pending: the coordinator
// remembers the last RecentEnded ids that ended (expired, aborted,
// completed). An ack or decline for one of them is late and ignored (nil).
// One for an id never triggered, triggered before this coordinator started,
// or forgotten wraps ErrUnknownCheckpoint. Every event that carries a time
// first expires the checkpoints whose deadline has passed, so an ack that
// arrives after its checkpoint's deadline is late even without a Tick in
// between. Periodic triggers happen only in Tick.
//
// # Barrier handlers
//
// The barrier handler (aligned, at-least-once, unaligned, aligned with a
// timeout) lives in package subtask, with the rest of a subtask's
// checkpoint behaviour; Kind and Mode here are its types.
//
// # Storage
//
// A Storage keeps the checkpoints of one job. Unlike the state machines
// above it does IO: a subtask's async phase writes its files into it, and
// the coordinator's driver carries out Persist with WriteMetadata and
// Discard with Discard.
//
// A Storage is logic over a Backend, a store of named objects with sizes
// and streaming reads and writes, which knows nothing of checkpoints.
// Everything about checkpoints is written once, above it:
//
//	Storage      metadata (encoded, checked, written last, removed first);
//	   │         shared files (named by content, deduplicated, replaced when
//	   │         damaged); Verify, Open and Restore (streamed, size and
//	   │         SHA-256 checked as read); Discard, CleanIncomplete, Audit;
//	   │         LatestUsable; CopyCheckpoint
//	Backend      Put (atomic, from a writer) · Open (a reader) · Stat · List ·
//	   │         Delete · DeleteAll · Sync · RemoveTemporaries
//	   ├── a directory (OpenStorage): temporary file, sync, rename
//	   └── a JetStream object store (OpenObjectStorage): chunks, then the
//	       object's info
//
// The Backend's errors keep apart what recovery must keep apart: an object
// that does not exist (fs.ErrNotExist), bytes that are not what was stored
// (ErrCorrupt), and a store that cannot answer now (ErrUnavailable: a
// timeout, no responders, a lost connection, a disk error). The Storage
// turns a missing object that the metadata names into ErrCorrupt; an
// unavailable one stays ErrUnavailable and is never taken for damage, so
// LatestUsable stops there instead of passing the checkpoint over, and
// nothing is deleted because it could not be read. The tests run every
// behaviour against both backends, a third that injects faults (slow,
// unavailable, corrupt, missing, failed puts) around them, and the object
// store with a fault of the moment before every request.
//
// The layout, in a directory or as object names:
//
//	ROOT/                                  one per job, e.g. DATA/jobs/JOB/checkpoints
//	  chk-0000000007/                        Dir(7)
//	    _metadata                            written last, atomically: its presence means complete
//	    tasks/<chain>-<subtask>/state/…      keyed-state files (a Pebble checkpoint)
//	    tasks/<chain>-<subtask>/channels/…   in-flight data of unaligned checkpoints
//	  shared/<sha256>.sst                    shared files (incremental checkpoints), PutShared
//
// A FileHandle names a file by its slash-separated path below the
// checkpoint's directory (tasks/0-1/state/000005.sst), with its size and
// SHA-256. A shared handle (Shared) names a file below the root instead
// (shared/<sha256>.sst), and its Name is the path the file has in the
// snapshot (tasks/0-1/state/000005.sst), where Restore puts it. A
// compressed handle (Compressed, after SetCompression(1..4)) names a zstd
// file: Size and SHA256 are of the stored bytes, RawSize of the original
// ones, and Open and Restore decompress. WriteMetadata writes metadata
// version 1 when no handle uses these fields, so older wstreams read it, and
// version 2 otherwise.
//
// Incremental checkpoints: Pebble SSTs never change, so a task puts each
// with PutShared, which names it by the SHA-256 of its bytes and uploads
// nothing when that file exists, and lists the returned handle, Name set,
// in SubtaskState.State. Its other files (MANIFEST, OPTIONS, …) go the same
// way: most are alike from one checkpoint to the next. Shared files belong to no checkpoint: Discard
// leaves them, and the shared-state registry counts the complete
// checkpoints referencing each and removes one with RemoveShared when none
// is left. Audit reports files complete checkpoints reference that are
// missing or damaged, and shared files none references (the registry's
// garbage, or files of a checkpoint still in progress); SharedFiles lists
// them all. The rules that keep a checkpoint from half-landing:
//
//  1. Every file is put atomically: it appears complete under its name, or
//     not at all. In a directory: into a temporary file (.NAME.tmp-*) in
//     the same directory, synced, renamed to its name, then the directory
//     synced. In an object store: the object's info, which makes it
//     visible, is published after its last chunk, and a put cut short (a
//     failed fill, a wrong SHA-256, a lost connection) discards its chunks.
//     The client publishes the info before the server has acknowledged
//     every chunk, so a chunk refused then leaves an info naming chunks
//     that are gone: a put that finally failed deletes such an info (only
//     if it is still the last one of its name), and Stat and Open report
//     one that remains (another writer's) as corrupt, at once.
//  2. WriteMetadata makes the names of the checkpoint's files durable
//     (Backend.Sync: every directory of the checkpoint), then writes
//     _metadata the same way. _metadata is JSON with Format
//     MetadataFormat, Version (up to MetadataVersion) and Checksum, the SHA-256 of
//     the metadata's compact encoding with Checksum empty. ReadMetadata
//     refuses another format, a newer version ("written by a newer
//     wstream"), a checksum that does not match and metadata that records
//     another id, naming the file.
//  3. A checkpoint with _metadata is complete, and its files no longer
//     change: writes into it are refused. One without (in progress, aborted,
//     or cut short by a crash) is incomplete: Completed omits it, recovery
//     never uses it, and CleanIncomplete removes it, temporary files
//     included. MaxID counts it, so a restarted coordinator never reuses
//     its id.
//  4. Discard removes _metadata first, durably, then the rest, so a
//     checkpoint half removed by a crash is incomplete, not damaged.
//  5. A shared file is put like any other, checked against the given
//     SHA-256 first; in a directory it is linked to its name only if no
//     file has it (another writer's identical file wins). The files of a
//     checkpoint that references shared files are durable before its
//     _metadata as ever; CleanIncomplete removes shared temporary files a
//     crash left.
//
// # Object store
//
// The object store backend lets workers on several hosts share checkpoints
// without a shared filesystem: OpenObjectStorage(js, bucket, prefix,
// replicas), or OpenStorageAt (OpenReplicatedStorageAt, which creates a
// missing bucket with replicas copies on a NATS cluster) with a location
// nats-obj://BUCKET/PREFIX and a NATS connection (a location that is not
// nats-obj:// is a directory, as for OpenStorage). The object of a file is
// named PREFIX/ and the file's path from the root
// (PREFIX/chk-0000000042/_metadata, PREFIX/shared/<sha256>.sst), so
// handles, metadata and error messages are those of a directory, and Root
// is the location. There are no temporary names. A shared object records
// the SHA-256 and size of its raw bytes and its encoding in the object's
// metadata, so PutShared learns an existing one without reading it (in a
// directory it reads the file once per Storage). The object store checks
// each object's own digest when it is read, and the handles' sizes and
// SHA-256 are checked as for files. Writers of the same shared object on
// several hosts both upload it, and the last put wins; the bytes are the
// same, since a job's workers compress at the plan's level and zstd's
// output for a level is deterministic.
//
// A request that meets a fault of the moment (a 429 "too many requests"
// from a server that syncs every write on a busy machine, a timeout, no
// responders while a stream's leader moves) is tried again with backoff
// and jitter (internal/transient: 6 attempts, 3 to 6 s of waiting in all); a
// put calls its fill again from the start. An answer (not found, a digest
// that does not match) is not asked again. When every attempt meets such a
// fault, a read is ErrUnavailable, never missing or corrupt, and a put
// fails with the last error, naming the object and the bucket: the
// subtask declines that checkpoint. A read has a deadline of 30 s plus a
// second a MiB of the object: one whose chunks stop coming fails then,
// unavailable, unless the store no longer holds them (corrupt: no later
// read finds them). PutShared does not reuse a shared object whose chunks
// are gone; it uploads the file again.
//
// CopyCheckpoint copies a complete checkpoint with the shared files it
// references into another Storage of either kind, stored bytes as they
// are, metadata last: a savepoint written to nats-obj://BUCKET/PREFIX is
// opened by OpenSavepointAt and OpenRestorePointAt (whose location may
// end in one chk-* element) like a savepoint directory.
//
// A task's snapshot and restore, with state.Store:
//
//  1. Sync phase: Store.Checkpoint(tmp), tmp beside the store's directory.
//  2. Async phase: CopyDir(id, TaskDir(id, t)+"/state", tmp), which copies
//     on a few goroutines; state.DirSize(tmp) is Metrics.StateSize; then
//     remove tmp. The handles go into the ack as SubtaskState.State.
//     Channel state goes below TaskDir(id, t)+"/channels/" with WriteFile.
//  3. Recovery: LatestUsable returns the newest complete checkpoint whose
//     metadata reads and whose files verify (exist, size, SHA-256), and
//     says which newer ones it skipped and why; Restore copies the task's
//     state files into a fresh directory, checking each file's size and
//     SHA-256 as it copies; state.Open opens that directory with the
//     task's key-group range. A rescale restores each old task whose key
//     groups overlap the new task's into a scratch directory, from which
//     the new task's store ingests its own key groups
//     (state.Store.ImportStore). Every file streams through a buffer of
//     its own; none is held in memory whole.
//
// Errors about missing or damaged files wrap ErrCorrupt and name the file
// by its path below ROOT (chk-0000000007/tasks/0-1/state/000005.sst).
package checkpoint
