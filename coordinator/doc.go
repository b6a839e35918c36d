// Package coordinator accepts jobs, places their subtasks on workers, and
// follows them to their end. It speaks only NATS (subjects and messages in
// package transport), so the same code runs inside the embedded default and
// as `wstream server` against a cluster.
//
// A job's life:
//
//  1. a client stores the module in the JetStream object store and sends a
//     SubmitRequest; the coordinator validates the plan and builds the
//     physical graph (a tenant's module must be in the tenant's store,
//     within its size limit, its bytes hashing to its digest);
//  2. it places the subtasks on the live workers' free slots (subtask s of
//     every chain on the s-th worker, round robin, so forward edges stay on
//     a worker and keyed exchanges spread), creates the job's JetStream data
//     stream when they span several workers, and sends each worker a
//     Deployment of its subtasks; a worker fetches the module, wires its
//     subtasks (local channels between its own, JetStream channels to the
//     others) and starts them;
//  3. workers report each subtask's end (finished, failed, canceled);
//  4. the first failure cancels the job on every worker; when every subtask
//     has ended the attempt restarts (placed again) per the restart
//     strategy, or the coordinator removes the data stream and publishes the
//     JobResult (state, error, records per vertex, duration) on the job's
//     done subject.
//
// What happens to a job is decided by its lifecycle, a pure state machine
// (package lifecycle: Flink's job states CREATED, RUNNING, FAILING,
// RESTARTING, CANCELLING, CANCELED, FINISHED, FAILED, SUSPENDED, attempts,
// restarts, failover, resume, stop with savepoint). The coordinator is its
// driver: NATS callbacks (task reports, heartbeats, cancels), the liveness
// monitor, restart timers and deployments feed it events under c.mu, and
// the coordinator carries out its actions (lifecycle.go): deploy an
// attempt, cancel one on workers, start and stop the checkpoint driver,
// release slots, schedule a restart, drop the data stream, persist the
// spec, publish the result. `wstream list` shows each job's lifecycle
// state, attempt and latest restart cause. Close suspends the jobs that
// run: their checkpoints stop, and the next coordinator resumes them.
//
// An UpgradeRequest replaces a running job's module and plan at a savepoint
// barrier, as the job's next attempt (upgrade.go; docs/upgrade.md): the new
// plan is checked first (job.CheckUpgrade), the barrier is a stop with
// savepoint, the new module restores it, and a failure before its first
// checkpoint rolls back to the old module from the same savepoint. Upgrades
// are recorded in DATA/jobs/JOB/upgrades.jsonl.
//
// Workers heartbeat (Config.HeartbeatInterval). A worker silent for longer
// than Config.WorkerTimeout is declared lost: it leaves placement, and every
// attempt with subtasks on it fails with "worker W lost: no heartbeat for D"
// (its subtasks that had not reported count as ended, the others are
// cancelled), so the job restarts per its strategy on the remaining workers
// from its latest checkpoint, or fails without one. The job record lists
// each restart's cause. A lost worker that heartbeats or registers again
// takes new work.
//
// Checkpoint triggers and notifications go to every worker of the attempt;
// acknowledgements come from all of them on the job's ack subject.
//
// High availability. The coordinator keeps each job's spec (JobSpec: plan,
// module digest, settings, attempt, restarts, state, latest completed
// checkpoint, result) in the JetStream key-value bucket
// transport.JobsBucket (file storage), written as the job starts, as each
// attempt starts, as checkpoints complete and as the job ends. A
// coordinator started with Config.ResumeJobs (`wstream server`) resumes the
// jobs that the bucket says are running: it learns the workers from their
// heartbeats (a heartbeat carries what registration needs), and adopts the
// attempt they run when every subtask of it is listed with the job's module
// and the workers have heard its epoch, and, with tenants, list the
// attempt's credentials, which the authority finds are that attempt's in
// the account of the job's tenant (adopt.go); otherwise it cancels the
// old attempt wherever a heartbeat still lists it, and starts a new attempt
// from the latest completed checkpoint, as after a restart.
//
// Leader election (lease.go, leader.go; docs/cluster.md). Any number of
// coordinators may run against one cluster: the one holding the lease (a
// key of the bucket LeaderBucket, renewed by compare-and-set) leads, the
// others are standbys that subscribe to nothing and act on nothing, and
// take over (resuming the bucket's jobs as above) once the lease has not
// changed for a whole period. The revision that took the lease is the
// leader's epoch. Every job-spec write is a compare-and-set refused when
// the stored spec has a higher epoch, and so is every reservation of a
// checkpoint id (the counter holds ID@EPOCH; a new leader stamps it with its
// epoch when it takes a job over); every write, id reservation, checkpoint
// completion, result and worker command first checks that the lease is
// still held (renewing it when its period ran out, as after a pause), and
// commands carry the epoch, which workers refuse when they have seen a
// higher one. A leader
// that finds its lease taken stops acting and calls Config.Deposed.
//
// A new job's record (DATA/jobs/JOB/job.json: the same JobSpec, on disk)
// and spec are written once
// its first attempt is deployed, which keeps the record's syncs off the
// path to the job's first record, and the submission is answered only
// after them: an accepted job is one a restarted coordinator finds. A job
// whose coordinator died before writing them was never accepted; the next
// coordinator does not know it, and cancels its attempt where the workers'
// heartbeats list it. A new job whose record cannot be written (a full
// disk, a data directory that is not one) is not accepted either: its
// attempt is cancelled and the submission fails, naming the record's
// directory. The records of later attempts are written before they are
// deployed; a failure to write one is logged, and the job goes on.
//
// Heartbeats list the job attempts a worker runs. The coordinator cancels
// the attempts it does not run (any more), and fails an attempt when a
// worker no longer runs it although some of its subtasks there never
// reported their end (the reports were lost while NATS was unreachable).
// While its own connection is down the coordinator declares no worker lost;
// when it is back it checks the data stream of every attempt that spans
// several workers: an attempt whose stream is gone fails and restarts from
// its latest checkpoint (the stream is on file storage, so it normally
// survives, and the workers' JetStream channels end an attempt that lived
// through a NATS restart themselves: credits and barriers may have been
// lost). Clients (Watch.Wait) take a job's result from its spec when
// they missed the done message. The spec with the result reaches the
// bucket before the done message goes out (unless the bucket cannot be
// written for 5 s), so a client that heard of the end lists the job ended.
//
// Workers send their subtasks' metrics samples about once a second
// (transport.SubjectMetrics, a subject of the service account that tenants
// cannot reach). The coordinator keeps the latest sample of each subtask of
// a job's current attempt, with rates from consecutive samples, for the
// REST API (SubtaskMetrics), and each job's checkpoint figures for the
// metrics endpoint (MetricsStats); both are dropped when the job ends.
//
// Checkpoint ids come from one counter per job in the key-value bucket
// transport.CheckpointIDsBucket, raised with compare-and-set before each
// trigger goes out (idCounter): storage cannot serve, it deletes the
// checkpoints that never completed and the savepoints it exported. A
// checkpoint completes in this order: (1) every acknowledgement is in;
// (2) the leader checks its lease; (3) it writes the job's completions
// record in the same bucket by compare-and-set at its epoch (a new leader
// stamps that record at take-over, so a deposed leader's write fails);
// (4) it writes the metadata; (5) it notifies the subtasks, whose sinks
// commit.
//
// Readers that list (`wstream list`, `wstream workers`, the REST API's
// overview, jobs and workers, the metrics endpoint) and the detail readers
// (a job, a vertex, the checkpoint overview) read an immutable view of the
// jobs and workers (view.go), which every release of Coordinator.mu
// publishes first: they never wait for the lock, and see every change whose
// lock was released before they read.
//
// The query side (status.go) serves the REST API (package api): the
// cluster overview, workers, jobs with their vertices and the subtasks'
// latest metrics samples (SubtaskMetrics; busy and backpressure ratios
// from consecutive samples), checkpoint statistics (ckptstats.go: counts,
// latest, a min/avg/max summary, the recent checkpoints with their
// subtasks' figures, loaded from the job's history file on first use, so
// a coordinator that took a job over continues its predecessor's), and
// exceptions (subtasks' failure reports, restart causes, the job's error).
// Each call acts for a Caller, who sees its own jobs only; savepoint, stop
// and cancel go through the same paths as the NATS control plane.
//
// Locks and loops. Coordinator.mu guards the workers and the jobs, their
// lifecycles included; actions that wait on workers, NATS or files are
// carried out after it is released. Each attempt's checkpoint driver is a
// loop (one goroutine owning the checkpoint state machine: ckptDriver):
// acks, ticks, savepoint requests and the outcomes of its I/O are messages
// to it, and it never waits for c.mu, so c.mu may be held while sending it
// one (a driver is stopped under c.mu, when the lifecycle asks for it, and
// waits for its I/O). Heartbeats do not wait for it: a reconnection they
// report hands the driver its abort without waiting (outage.go), since
// the driver's I/O may take seconds and c.mu would keep every heartbeat
// out as long. What the driver learns for the lifecycle goes, in
// order, into the job's inbox (inbox.go), which is handed to the lifecycle
// under c.mu before any other event of the job. A job's checkpoint
// statistics and exceptions, and the inbox, have locks of their own, taken
// last.
package coordinator
