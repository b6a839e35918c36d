// Package lifecycle is the life of one job as a pure state machine: Flink's
// job states, attempts, restarts, failover and coordinator resume (the
// source documents in shared/seeds: seed 002 §3.2 and §6, seed 003's
// CheckpointFailureManager). Like the checkpoint coordinator it starts no
// goroutines, reads no clock and does no IO: a driver (package
// coordinator) feeds a Job events with the time as milliseconds and carries
// out, in order, the Actions that Ready hands back. Every ordering question
// is a scenario in testdata/lifecycle.
//
// # States
//
// The states are Flink's JobStatus, by their names:
//
//	CREATED     accepted; the first attempt is not deployed yet (a job
//	            resumed from the HA store starts here too)
//	RUNNING     the current attempt is deployed and nothing has failed
//	FAILING     an attempt failed and no restart is allowed: its subtasks
//	            are being cancelled, then the job is FAILED
//	RESTARTING  an attempt failed and the restart strategy allows a restart:
//	            its subtasks are being cancelled, the restart delay runs,
//	            then the next attempt is deployed
//	CANCELLING  the user cancelled; the attempt's subtasks are stopping
//	CANCELED    ended by the user (or by its workers, without a failure)
//	FINISHED    every subtask finished, or the job was stopped with a
//	            savepoint (Result.Stopped)
//	FAILED      ended by a failure
//	SUSPENDED   the coordinator let go of the job (it shut down); the HA
//	            store still says it runs, and the next coordinator resumes it
//
// FINISHED, FAILED and CANCELED are the ends of a job; SUSPENDED ends it
// for this coordinator only. No event changes a job in one of these four.
//
// # An attempt
//
// Attempt n of a job goes through:
//
//  1. Deploy. The job asks for attempt n (Deploy: after Submit, Resume, or
//     when a restart's delay has passed). The driver places its subtasks,
//     reports Placed with the subtasks per worker, sends each worker its
//     part and reports Deployed, or DeployFailed with the workers that took
//     their part. Events that doom the attempt while it is being deployed
//     (a failure, a cancel, a lost worker) change the job's state at once,
//     but their cancels wait for the deployment to complete: a cancel must
//     not overtake a deployment. A failed deployment of a new job's first
//     attempt ends the job FAILED; that of any later attempt (a restart,
//     a resume, a roll-back) is a failed attempt and goes through the
//     restart strategy, as in 3.
//  2. Run. Deployed makes the job RUNNING and starts its checkpoints
//     (seed 002 §3.2: the checkpoint scheduler starts when the job turns
//     RUNNING). Workers report each
//     subtask's end (TaskEnded). A worker declared lost (WorkerLost), or
//     whose heartbeats stop listing the attempt while some of its subtasks
//     never reported (lost reports, after Config.MissedHeartbeats
//     heartbeats in a row), counts its unreported subtasks as ended.
//  3. Fail. The first failure of the attempt (a failed subtask, a lost
//     worker, lost reports, or a reason of the coordinator's own: Fail, for
//     too many failed checkpoints or a lost data stream) decides at once:
//     RESTARTING when the restart strategy allows restart number
//     Restarts()+1, FAILING otherwise (seed 002 §6.1: the RestartStrategy
//     decides whether to recover). Every worker of the attempt is told to
//     cancel it. Its checkpoint driver triggers nothing more
//     (HoldCheckpoints: no trigger outside RUNNING), but its pending
//     checkpoints go on until its subtasks have ended: one
//     that the failed subtask acknowledged may still complete, and be the
//     one the restart restores (Flink aborts, at a task's failure, only
//     the pending checkpoints that task did not acknowledge).
//  4. End. When every subtask of the attempt has ended, its checkpoints
//     stop and its slots are released. A RUNNING job is FINISHED when every subtask finished, also
//     FINISHED (stopped) after a stop with savepoint, CANCELED otherwise; a
//     FAILING job is FAILED, a CANCELLING one CANCELED. A RESTARTING job
//     counts the restart, records its cause, moves to attempt n+1, persists
//     its spec and schedules the restart (ScheduleRestart); Tick deploys
//     attempt n+1 once the delay has passed, restoring the latest completed
//     checkpoint (seed 002 §6.1: JobMaster loads the latest checkpoint of
//     the CompletedCheckpointStore and schedules the tasks again).
//
// A job's end is, in this order: checkpoints stop, slots are released, the
// data stream is dropped, the spec is persisted with the result, and the
// result is published. The spec comes before the result, so that a client
// that takes the result from the spec finds it there.
//
// # Stale events
//
// Every event names the attempt it is about. Reports, deployments and
// failures of an attempt that is not the current one, reports of a worker
// already counted (lost, or all its subtasks reported) and anything after
// the job's end return ErrStale or ErrEnded and change nothing. A worker
// whose heartbeat lists an attempt the job no longer runs (an older one, the
// current one when it is failing or being cancelled, any of an ended job) is
// told to cancel it, at most every Config.RecancelAfter per worker and
// attempt: the first cancel may have been lost.
//
// # Cancel, stop and resume
//
// Cancel while nothing runs (CREATED before its deployment, RESTARTING
// during the delay) ends the job CANCELED at once, without deploying.
// Cancel of a deployed attempt goes through CANCELLING. A stop with
// savepoint keeps the job RUNNING until the savepoint completes
// (StopCompleted): the subtasks then stop, and the job ends FINISHED with
// Result.Stopped. When the savepoint fails (StopFailed) the job goes on
// RUNNING and its sources resume. A failure after the savepoint completed
// still fails the attempt over (Flink triggers a global failover when a job
// does not finish after its stop-with-savepoint).
//
// # Upgrade
//
// An upgrade (UpgradeRequested) replaces the job's module and plan in its
// next attempt, from a savepoint: the same job, so that its checkpoint ids
// go on increasing and its sinks keep their identity.
//
//  1. Barrier. The upgrade's savepoint goes out as a stop with savepoint
//     does; the old module runs until it completes (StopCompleted; its
//     sinks commit on it), then its subtasks stop. StopFailed, or a failure
//     before the old attempt has ended, aborts the upgrade (UpgradeEnded,
//     aborted) and the job goes on as it would have.
//  2. Switch. When every subtask of the old attempt has ended the job is
//     RESTARTING (no restart is counted) and the next attempt is deployed
//     with ModuleNew, restoring RestoreUpgrade.
//  3. Probation. Until the new attempt completes a checkpoint
//     (UpgradeConfirmed, or the job finishes on it: UpgradeEnded, done) a
//     failure of its deployment or of any of its subtasks rolls the
//     upgrade back: once its subtasks have ended the next attempt is
//     deployed with ModuleOld from the same savepoint, whatever the
//     restart strategy says, and the roll-back enters the restart log
//     (UpgradeEnded, rolled back). Nothing the new module wrote was
//     committed: sinks commit on checkpoints only.
//
// A job recovered from the HA store (Recover, then Resume) is CREATED with
// the attempt after the one that ran, so that heartbeats listing the old
// attempt cancel it; its restart log gets an entry for the coordinator
// restart (seed 002 §6.2: a new JobManager recovers the job and its latest
// checkpoint and goes on), which does not count against the restart
// strategy.
package lifecycle
