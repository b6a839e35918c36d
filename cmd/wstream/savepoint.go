package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/transport"
)

func savepointCommand() *cli.Command {
	return &cli.Command{
		Name:      "savepoint",
		Usage:     "take a savepoint of a running job",
		ArgsUsage: "JOB [DIR]",
		Description: `Takes an aligned savepoint of JOB and writes it, self-contained and in the
canonical format, to DIR/savepoint-JOB-ID (DIR defaults to DATA/savepoints). The
job goes on running. Restore it with wstream deploy --from-savepoint, at any
parallelism. Reaches the job through --nats, or through --data when the job runs
in a local wstream deploy.`,
		Flags: []cli.Flag{natsFlag, dataFlag, &cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long", Value: 10 * time.Minute}},
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 || c.NArg() > 2 {
				return usageError{fmt.Errorf("savepoint: want JOB [DIR], got %d arguments", c.NArg())}
			}
			return requestSavepoint(c, c.Args().Get(0), c.Args().Get(1), false, false)
		},
	}
}

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop a running job with a savepoint",
		ArgsUsage: "JOB",
		Description: `Takes a savepoint of JOB (its sources emit nothing after it), lets the
sinks commit, and stops the job. The savepoint goes to --savepoint DIR (default
DATA/savepoints), in DIR/savepoint-JOB-ID.

It is all or nothing: if the savepoint fails (storage error, timeout, a subtask
failing), the job goes on running, its sources resume, sinks commit nothing for
it, and the command exits non-zero with the cause.

With --drain, sources first advance event time to the end, so that every
event-time timer fires (windows close) and its output reaches the sinks before
the savepoint: for a job that will not be resumed. A drained stop that then
fails leaves the job running with event time at its end.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "savepoint", Usage: "directory for the savepoint"},
			&cli.BoolFlag{Name: "drain", Usage: "advance event time to the end before the savepoint, firing every event-time timer"},
			natsFlag, dataFlag,
			&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long", Value: 10 * time.Minute},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("stop: want one JOB argument, got %d", c.NArg())}
			}
			return requestSavepoint(c, c.Args().First(), c.String("savepoint"), true, c.Bool("drain"))
		},
	}
}

func requestSavepoint(c *cli.Context, jobID, dir string, stop, drain bool) error {
	asked := time.Now()
	if dir != "" && !checkpoint.IsObjectLocation(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		dir = abs
	}
	err := askSavepoint(c, jobID, dir, stop, drain, asked)
	if err != nil && c.String("nats") == "" {
		// A local job that ended as the request was made: say so rather
		// than how the connection to its deploy failed.
		if done, oerr := localOutcome(c, jobID, dir, stop, asked); done {
			return oerr
		}
	}
	return err
}

func askSavepoint(c *cli.Context, jobID, dir string, stop, drain bool, asked time.Time) error {
	e, err := clientEngine(c)
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	b, _ := json.Marshal(transport.SavepointRequest{JobID: jobID, Dir: dir, Stop: stop, Drain: drain})
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	var stopProgress func()
	if isTerminal(c.App.ErrWriter) && c.String("nats") == "" {
		// The job runs in a local deploy: its files are on this machine.
		stopProgress = showProgress(c.App.ErrWriter, coordinator.CheckpointRoot(c.String("data"), jobID))
	} else {
		// A cluster's: its files are the workers'.
		what := "savepoint of job " + jobID
		if stop {
			what = "stopping job " + jobID + " with a savepoint"
		}
		log, err := newLogger(c, slog.LevelWarn)
		if err != nil {
			return err
		}
		stopProgress = busy(c.App.ErrWriter, log, what)
	}
	type answer struct {
		msg *nats.Msg
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		m, err := e.Conn().RequestWithContext(ctx, transport.SubjectSavepoint, b)
		answers <- answer{m, err}
	}()
	var msg *nats.Msg
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for msg == nil {
		select {
		case a := <-answers:
			if a.err != nil {
				stopProgress()
				return fmt.Errorf("savepoint of job %s: %w", jobID, a.err)
			}
			msg = a.msg
		case <-poll.C:
			// A local deploy takes its NATS server with it when its job
			// ends: no answer comes then, and the job's files say how the
			// request ended.
			if c.String("nats") != "" || e.Conn().IsConnected() {
				continue
			}
			if done, err := localOutcome(c, jobID, dir, stop, asked); done {
				stopProgress()
				return err
			}
		}
	}
	stopProgress()
	var r transport.SavepointReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("bad savepoint reply: %w", err)
	}
	if r.Error != "" {
		if strings.HasPrefix(r.Error, "no job") {
			return errors.New(r.Error)
		}
		if stop && !r.JobEnded {
			return fmt.Errorf("job %s was not stopped and goes on running: %s", jobID, r.Error)
		}
		return errors.New(r.Error)
	}
	return savepointTaken(c, jobID, r.ID, r.Dir, stop, asked)
}

// savepointTaken reports a savepoint that completed: a line, or with -o
// json the object GET /v1/jobs/{id}/savepoints/{request} answers for a
// request of the REST API.
func savepointTaken(c *cli.Context, jobID string, id int64, location string, stop bool, asked time.Time) error {
	asJSON, err := jsonOutput(c)
	if err != nil {
		return err
	}
	if asJSON {
		kind := "savepoint"
		if stop {
			kind = "stop"
		}
		end := time.Now().UnixMilli()
		return writeJSON(c.App.Writer, api.SavepointStatus{JobID: jobID, Kind: kind, Status: api.StatusCompleted, SavepointID: id,
			Location: location, RequestedAt: asked.UnixMilli(), EndTime: &end})
	}
	verb := "savepoint"
	if stop {
		verb = "stopped with savepoint"
	}
	fmt.Fprintf(c.App.Writer, "%s %d of job %s: %s\n", verb, id, jobID, location)
	return nil
}

// isTerminal reports whether w is a terminal (progress lines are for
// people; logs and pipes stay quiet).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// showProgress prints, every half second until stopped, how much of the
// savepoint in progress under root has been written, its rate, and an
// estimate of the time left from the size of the job's last checkpoint.
func showProgress(w io.Writer, root string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	expected := lastStateSize(root)
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
				n := inProgressBytes(root)
				el := time.Since(start).Seconds()
				rate := float64(n) / el
				line := fmt.Sprintf("savepoint: %s written, %s/s", mb(n), mb(int64(rate)))
				if expected > n && n > 0 && rate > 1<<16 {
					line = fmt.Sprintf("savepoint: %s of ~%s written, %s/s, ETA %.0fs", mb(n), mb(expected), mb(int64(rate)), float64(expected-n)/rate)
				}
				fmt.Fprintf(w, "\r\033[K%s", line)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// inProgressBytes sums the files of the checkpoint directories under root
// that have no metadata yet (the savepoint being written).
func inProgressBytes(root string) int64 {
	dirs, _ := filepath.Glob(filepath.Join(root, checkpoint.DirGlob))
	var n int64
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, checkpoint.MetadataName)); err == nil {
			continue
		}
		_ = filepath.Walk(d, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				n += fi.Size()
			}
			return nil
		})
	}
	return n
}

// lastStateSize is the state size of the job's newest completed checkpoint
// (0 when unknown).
func lastStateSize(root string) int64 {
	st, err := checkpoint.OpenStorage(root)
	if err != nil {
		return 0
	}
	ids, err := st.Completed()
	if err != nil || len(ids) == 0 {
		return 0
	}
	m, err := st.ReadMetadata(ids[len(ids)-1])
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range m.Tasks {
		for _, f := range t.State {
			n += f.Size
		}
	}
	return n
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "print what a savepoint or checkpoint holds",
		ArgsUsage: "DIR",
		Description: `DIR is a savepoint directory, a job's checkpoint directory
(DATA/jobs/JOB/checkpoints: its newest complete checkpoint), or one chk-* directory;
or the same in a JetStream object store, nats-obj://BUCKET/PREFIX[/chk-N], read
through the cluster at --nats (or the deploy running on --data).
Prints the subtasks with their key-group ranges, state files, state names with
entries and bytes (canonical savepoints), source offsets and in-flight data.
--verify checks every file's size and SHA-256, and reads every canonical file to
its checksum.`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "verify", Usage: "check every checksum"}, natsFlag, dataFlag, outputFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("inspect: want one DIR argument, got %d", c.NArg())}
			}
			asJSON, err := jsonOutput(c)
			if err != nil {
				return err
			}
			dir := c.Args().First()
			var nc *nats.Conn
			if checkpoint.IsObjectLocation(dir) {
				e, err := clientEngine(c)
				if err != nil {
					return fmt.Errorf("inspect %s: an object-store location is read through a cluster: %w", dir, err)
				}
				defer e.Close(context.Background())
				nc = e.Conn()
			}
			return inspect(c.App.Writer, dir, c.Bool("verify"), asJSON, nc)
		},
	}
}

// openSnapshotDir finds the checkpoint a directory or object-store
// location names: a storage root (its newest complete checkpoint) or one
// chk-* in it. nc reaches the object store of a nats-obj:// location; a
// local directory must exist (inspecting never creates one).
func openSnapshotDir(dir string, nc *nats.Conn) (*checkpoint.Storage, *checkpoint.Metadata, error) {
	root, base := filepath.Dir(dir), filepath.Base(dir)
	object := checkpoint.IsObjectLocation(dir)
	if object {
		// A URL: filepath would collapse the slashes of nats-obj://.
		trimmed := strings.TrimRight(dir, "/")
		i := strings.LastIndex(trimmed, "/")
		root, base = trimmed[:i], trimmed[i+1:]
	}
	id := int64(0)
	if strings.HasPrefix(base, checkpoint.DirPrefix) {
		var ok bool
		if id, ok = checkpoint.ParseDirName(base); !ok {
			return nil, nil, fmt.Errorf("%s: not a checkpoint directory name (%s)", dir, checkpoint.DirName(1))
		}
	} else {
		root = dir
	}
	if !object {
		fi, err := os.Stat(root)
		if err != nil {
			return nil, nil, err
		}
		if !fi.IsDir() {
			return nil, nil, fmt.Errorf("%s is not a directory", root)
		}
	}
	st, err := checkpoint.OpenStorageAt(root, nc)
	if err != nil {
		return nil, nil, err
	}
	if id == 0 {
		ids, err := st.Completed()
		if err != nil {
			return nil, nil, err
		}
		if len(ids) == 0 {
			return nil, nil, fmt.Errorf("%s holds no complete checkpoint or savepoint", dir)
		}
		id = ids[len(ids)-1]
	}
	m, err := st.ReadMetadata(id)
	if err != nil {
		return nil, nil, err
	}
	return st, m, nil
}

func inspect(w io.Writer, dir string, verify, asJSON bool, nc *nats.Conn) error {
	st, m, err := openSnapshotDir(dir, nc)
	if err != nil {
		return err
	}
	if asJSON {
		return inspectJSON(w, st, m, verify)
	}
	fmt.Fprintf(w, "%s %d of job %s\n", m.Kind, m.ID, m.JobID)
	fmt.Fprintf(w, "  format %s v%d, created %s, max parallelism %d\n", m.Format, m.Version, time.UnixMilli(m.Done).UTC().Format(time.RFC3339), m.MaxParallelism)
	if m.ModuleDigest != "" {
		fmt.Fprintf(w, "  module %s\n", m.ModuleDigest)
	}
	tasks := append([]checkpoint.SubtaskState(nil), m.Tasks...)
	sort.Slice(tasks, func(i, j int) bool {
		a, b := tasks[i].Task, tasks[j].Task
		return a.Chain < b.Chain || a.Chain == b.Chain && a.Subtask < b.Subtask
	})
	var total int64
	for _, t := range tasks {
		fmt.Fprintf(w, "  subtask %s", t.Task)
		if t.Finished {
			fmt.Fprint(w, " (finished)")
		}
		if len(t.State) > 0 {
			fmt.Fprintf(w, " key groups %d-%d", t.KeyGroups.Start, t.KeyGroups.End)
		}
		fmt.Fprintln(w)
		for _, f := range t.State {
			total += f.Size
			fmt.Fprintf(w, "    state file %s (%d bytes)\n", f.Path, f.Size)
			if filepath.Base(f.Path) == "canonical.zst" {
				if err := describeCanonical(w, st, m.ID, f); err != nil {
					return err
				}
			}
		}
		ops := make([]string, 0, len(t.Operator))
		for v := range t.Operator {
			ops = append(ops, v)
		}
		sort.Strings(ops)
		for _, v := range ops {
			fmt.Fprintf(w, "    operator state of %s: %s\n", v, abbreviate(t.Operator[v]))
		}
		for _, ch := range t.Channels {
			side := "output"
			if ch.Input {
				side = "input"
			}
			total += ch.File.Size
			fmt.Fprintf(w, "    in-flight %s of edge %d, peer %d: %d bytes\n", side, ch.Edge, ch.Peer, ch.Bytes)
		}
	}
	fmt.Fprintf(w, "  %d files, %d bytes\n", countFiles(tasks), total)
	if verify {
		if err := st.Verify(m); err != nil {
			return err
		}
		fmt.Fprintln(w, "  verified: every file's size and SHA-256 match")
		// Across every checkpoint of the directory: files that are
		// referenced but missing, and shared files nothing references.
		missing, unreferenced, err := st.Audit()
		if err != nil {
			return err
		}
		for _, u := range unreferenced {
			fmt.Fprintf(w, "  unreferenced: %s\n", u)
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d referenced files are missing or damaged: %w", len(missing), errors.Join(missing...))
		}
		fmt.Fprintf(w, "  audit: no missing files, %d unreferenced\n", len(unreferenced))
	}
	return nil
}

func describeCanonical(w io.Writer, st *checkpoint.Storage, id int64, f checkpoint.FileHandle) error {
	r, err := st.Open(id, f)
	if err != nil {
		return err
	}
	defer r.Close()
	type agg struct{ entries, bytes int64 }
	per := map[string]*agg{}
	var timers int64
	_, err = state.ScanCanonical(r, func(rec state.CanonicalRecord) error {
		if rec.Kind == state.KindTimer {
			timers++
			return nil
		}
		k := string(rec.Vertex) + "/" + string(rec.State)
		a := per[k]
		if a == nil {
			a = &agg{}
			per[k] = a
		}
		a.entries++
		a.bytes += int64(len(rec.Key) + len(rec.Namespace) + len(rec.Value))
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	names := make([]string, 0, len(per))
	for k := range per {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "      state %s: %d entries, %d bytes\n", k, per[k].entries, per[k].bytes)
	}
	if timers > 0 {
		fmt.Fprintf(w, "      timers: %d\n", timers)
	}
	return nil
}

func countFiles(tasks []checkpoint.SubtaskState) int {
	n := 0
	for _, t := range tasks {
		n += len(t.State) + len(t.Channels)
	}
	return n
}

func abbreviate(b []byte) string {
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}

// localOutcome tells how a savepoint request of a local job ended when the
// job's deploy went away before it answered: done is false while the job's
// record still says it runs (the connection may come back). A savepoint
// that completed after the request is in the job's checkpoint history.
func localOutcome(c *cli.Context, jobID, dir string, stop bool, asked time.Time) (done bool, err error) {
	data := c.String("data")
	rec, err := coordinator.ReadRecord(data, jobID)
	if err != nil {
		return false, nil
	}
	switch strings.ToLower(rec.State) {
	case "running", "created", "restarting", "failing", "cancelling":
		return false, nil
	}
	hist, _ := coordinator.ReadHistory(data, jobID)
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		if h.Kind != checkpoint.KindSavepoint || h.Status != "completed" || h.Done < asked.UnixMilli() {
			continue
		}
		if dir == "" {
			dir = filepath.Join(data, "savepoints")
		}
		return true, savepointTaken(c, jobID, h.ID, checkpoint.JoinLocation(dir, fmt.Sprintf("savepoint-%s-%d", jobID, h.ID)), stop, asked)
	}
	return true, fmt.Errorf("job %s ended (%s) before its savepoint completed: no savepoint was taken", jobID, strings.ToLower(rec.State))
}

// inspectJSON writes what the checkpoint holds (api.Snapshot: the REST
// API's names and units) and, with verify, the outcome of the checks; a
// failed check is also the command's error.
func inspectJSON(w io.Writer, st *checkpoint.Storage, m *checkpoint.Metadata, verify bool) error {
	out := struct {
		api.Snapshot
		Verified     *bool    `json:"verified,omitempty"`
		Missing      []string `json:"missing,omitempty"`
		Unreferenced []string `json:"unreferenced,omitempty"`
	}{Snapshot: api.SnapshotOf(m)}
	var failed error
	if verify {
		ok := true
		if err := st.Verify(m); err != nil {
			ok, failed = false, err
			out.Missing = append(out.Missing, err.Error())
		}
		missing, unreferenced, err := st.Audit()
		if err != nil {
			return err
		}
		for _, e := range missing {
			ok = false
			out.Missing = append(out.Missing, e.Error())
		}
		if failed == nil && len(missing) > 0 {
			failed = fmt.Errorf("%d referenced files are missing or damaged: %w", len(missing), errors.Join(missing...))
		}
		out.Verified, out.Unreferenced = &ok, unreferenced
	}
	if err := writeJSON(w, out); err != nil {
		return err
	}
	return failed
}
