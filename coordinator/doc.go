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
//  2. it picks a worker with enough free slots and sends it a Deployment;
//     the worker fetches the module, wires the subtasks and starts them;
//  3. workers report each subtask's end (finished, failed, canceled);
//  4. the first failure cancels the job on every worker; when every subtask
//     has ended the coordinator publishes the JobResult (state, error,
//     records per vertex, duration) on the job's done subject.
package coordinator
