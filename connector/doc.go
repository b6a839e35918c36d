// Package connector holds the sources and sinks that bring records into a
// job and take them out: the deterministic generator "gen", the "file"
// source and the "jetstream" source (a JetStream stream, positions by stream
// sequence); the "stdout", "file" and "discard" sinks and the "jetstream"
// sink (exactly once with checkpoints: a checkpoint's records are staged in
// an object store and published with Nats-Msg-Id ids when it completes).
// docs/connectors.md documents every field.
//
// A connector is chosen by name and configured by a JSON object from the job
// plan. Configuration is strict: field names are case-sensitive and given
// once (encoding/json alone would read "URL" as url), an unknown field is an
// error that names the field and the connector (and the right spelling of
// one in another case), and an empty or null configuration means the
// defaults. Constructing a connector (NewSource, NewSink) only checks its
// configuration and does no IO, so ValidateSource and ValidateSink are cheap
// enough for plan validation; Open acquires files and writers.
//
// DecodeSource and DecodeSink return the decoded configuration, a Config,
// and NewSourceFrom and NewSinkFrom build the connector from it: a caller
// that checks a configuration (Config.Reach says what it reaches beyond
// the job owner's account: a NATS server, credentials, host files, the
// terminal) builds the connector from the very value it checked.
//
// Connectors and their configuration fields (defaults in brackets):
//
//   - source "gen": deterministic word records. count (records across all
//     subtasks, 0 = unbounded) [0], keys (distinct words) [1000], words (per
//     record) [1], seed [1], rate (records/s across the job, each subtask
//     taking its share; 0 = unlimited) [0], interval (event ms between
//     records) [1], disorder (max ms of seeded jitter added to ts) [0],
//     watermarkDelay [disorder], start (ts of record 0) [0]. Record i is a
//     pure function of (seed, i): its value is `words` words "w<k>" joined by
//     spaces with k drawn by a counter-based splitmix64 hash of (seed, i,
//     word index), its key the first word, its ts start + i·interval + jitter.
//   - source "file": path (required), format "text" (value = line, empty key,
//     ts = 1-based line number) or "tsv" (ts<TAB>key<TAB>value) [text],
//     watermarkDelay [0], batch (records per batch; 1 puts a watermark after every record) [0 = the runtime's].
//   - sink "stdout": no fields. One line per record, key<TAB>value or the
//     value alone when the key is empty; each batch reaches the writer in
//     one call under a lock per writer, so subtasks sharing it never
//     interleave lines.
//   - sink "file": path (required), format "text" (as stdout) or "tsv" (what
//     the file source reads back) [text]. Subtask s of p > 1 writes
//     path.part-<s>. Output goes to a temporary file renamed at Close. It is
//     Transactional: after BeginTransactions, path is a directory of
//     exactly-once part files, part-<s>-<checkpoint id>, pre-committed as
//     hidden .pending files at each checkpoint and renamed into place when
//     the checkpoint completes (see fileTxns). A failed pre-commit whose
//     file is whole is taken back (PreCommitAborter), so the checkpoint is
//     declined and the next one commits the records.
//   - sink "discard": no fields; counts records, batches and bytes.
//
// Parallel subtasks split the input deterministically: subtask s of p takes
// the records (gen) or lines (file) whose index is s modulo p, so the union
// of what the subtasks produce does not depend on p.
//
// Every source is Rewindable: Offset is its position after the records
// returned so far (operator state stored in checkpoints) and Seek returns an
// opened source there, so a restore reads every record after the checkpoint
// exactly once. Offsets are versioned JSON naming the source kind, subtask
// and parallelism; Seek refuses any other.
//
// A source reports an event-time watermark after each call to Next: the
// largest timestamp it has emitted minus the configured watermark delay,
// minus one, never decreasing. With a delay at least as large as the input's
// out-of-orderness, no later record of that subtask has a timestamp at or
// below a watermark it already reported. When a bounded source is done the
// runtime advances the watermark to abi.MaxWatermark itself.
package connector
