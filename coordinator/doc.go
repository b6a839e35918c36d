// Package coordinator accepts jobs, places their subtasks on workers, and
// follows them to their end. It speaks only NATS (subjects and messages in
// package transport), so the same code runs inside the embedded default and
// as `wstream server` against a cluster.
//
// A job's life:
//
//  1. a client stores the module in the JetStream object store and sends a
//     SubmitRequest; the coordinator validates the plan and builds the
//     physical graph;
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
package coordinator
