package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The exact-count tests run the wordcount of several guest languages on a
// generated text and compare every word's committed count with counts the
// test computed itself while generating the text. Comparing the engine with
// itself (a reference run) hides faults that every run shares: unaligned
// checkpoints once repeated records with no failure at all.
//
// WSTREAM_MATRIX=full (make test-matrix) runs every checkpoint mode ×
// parallelism 1–4 × the Go, C and Rust wordcounts × every scenario; without
// it a short form runs that fits the normal test suite.

const (
	exactVocab = 6000
	exactSeed  = 20240611
)

// scenario is what happens to one run of a cell.
type scenario int

const (
	noFailure scenario = iota
	killResume
	workers
	workersKillResume
	rescale
	localKillResume
)

var scenarios = []scenario{noFailure, killResume, workers, workersKillResume, rescale, localKillResume}

// cell is one run of the matrix.
type cell struct {
	mode string // aligned, at-least-once or unaligned
	p    int
	lang string
	sc   scenario
	// interval is the checkpoint interval in milliseconds; 0 picks one of
	// 100–300 by the cell's position.
	interval int
}

func (c cell) name() string {
	switch c.sc {
	case noFailure:
		return "no-failure"
	case killResume:
		return "kill-resume"
	case workers:
		return "workers2"
	case workersKillResume:
		return "workers2-kill-resume"
	case rescale:
		return fmt.Sprintf("restore-at-p%d", rescaleTo(c.p))
	case localKillResume:
		return "local-recovery-kill-resume"
	}
	return "?"
}

// rescaleTo is the parallelism a cell of parallelism p is restored at.
func rescaleTo(p int) int { return p%4 + 1 }

// shortCells is the form of the matrix that the normal test suite runs:
// every mode once, the unaligned mode (whose bug hid from the old tests) at
// p=2 and p=3 with the Go and the Rust wordcount, one SIGKILL and resume,
// and one run exchanging data over JetStream. Against the build before the
// fix of the repeated records, each unaligned cell at p=2 failed in most
// runs and the four together in every run; the Rust and C runs take a
// third of the Go runs' time.
var shortCells = []cell{
	{"aligned", 2, "c", noFailure, 200},
	{"at-least-once", 3, "rust", noFailure, 150},
	{"unaligned", 2, "go", noFailure, 100},
	{"unaligned", 2, "rust", noFailure, 100},
	{"unaligned", 2, "rust", killResume, 100},
	{"unaligned", 2, "rust", workers, 150},
	{"unaligned", 3, "go", noFailure, 250},
	{"unaligned", 3, "rust", noFailure, 300},
}

func fullCells() []cell {
	var cells []cell
	for _, mode := range []string{"aligned", "at-least-once", "unaligned"} {
		for p := 1; p <= 4; p++ {
			for _, lang := range []string{"go", "c", "rust"} {
				for _, sc := range scenarios {
					cells = append(cells, cell{mode, p, lang, sc, 0})
				}
			}
		}
	}
	return cells
}

// TestExactCounts checks the committed word counts of the wordcount against
// an oracle independent of the engine, for every checkpoint mode, with and
// without a killed process, over JetStream between workers, after a restore
// at another parallelism and with local recovery.
func TestExactCounts(t *testing.T) {
	cells, lines := shortCells, 500_000
	if os.Getenv("WSTREAM_MATRIX") == "full" {
		// The C wordcount reads half a million lines in under a second:
		// with checkpoints up to 300 ms apart, kills at 45% of the input
		// and stops right after a resume want a longer run.
		cells, lines = fullCells(), 1_000_000
	}
	in := genWordInput(t, t.TempDir(), lines, exactVocab, exactSeed)
	if len(in.want) < exactVocab/2 {
		t.Fatalf("the input holds only %d distinct words", len(in.want))
	}
	t.Logf("input: %d lines, %d words, %d distinct", in.lines, in.words, len(in.want))
	env := &exactEnv{bin: exactBin(t), in: in, mods: map[string]string{}}
	for _, c := range cells {
		if env.mods[c.lang] == "" {
			env.mods[c.lang] = langModule(t, c.lang, "wordcount")
		}
	}
	// Cells run one after the other: each job uses every core it gets.
	for i, c := range cells {
		name := fmt.Sprintf("%s/p%d/%s/%s", c.mode, c.p, c.lang, c.name())
		t.Run(name, func(t *testing.T) { env.run(t, c, i) })
	}
}

type exactEnv struct {
	bin  string
	in   *wordInput
	mods map[string]string // guest language → wordcount module
}

// exactRun is one cell's run in its own directory.
type exactRun struct {
	*exactEnv
	c         cell
	dir, data string
	interval  string
	// killAt is the share of the input that the sources must have read
	// by a completed checkpoint before the process is killed; a
	// checkpoint must have completed in any case, so that the resume has
	// one to restore.
	killAt float64
}

func (e *exactEnv) run(t *testing.T, c cell, i int) {
	dir := t.TempDir()
	interval := c.interval
	if interval == 0 {
		// Vary the interval, as the kill point, from cell to cell.
		interval = 100 + 50*(i%5)
	}
	r := &exactRun{exactEnv: e, c: c, dir: dir, data: filepath.Join(dir, "wstream-data"),
		interval: fmt.Sprintf("%dms", interval),
		// Kill at the first checkpoint, or at one past a fifth or nearly
		// half of the input (measured by its source offsets, so whatever
		// the machine's speed): early and late state, one checkpoint or
		// several referring to each other's files.
		killAt: []float64{0, 0.2, 0.45}[i%3]}
	switch c.sc {
	case noFailure:
		r.noFailure(t)
	case killResume:
		r.killResume(t, nil)
	case workers:
		r.noFailure(t, "--workers", "2")
	case workersKillResume:
		r.killResume(t, []string{"--workers", "2"}, "--workers", "2")
	case rescale:
		r.rescale(t)
	case localKillResume:
		r.localKillResume(t)
	}
	r.checkModeRan(t)
}

// checkModeRan checks that the run checkpointed, in the cell's mode: a
// mode flag that did not take effect would make the cell test another one.
func (r *exactRun) checkModeRan(t *testing.T) {
	t.Helper()
	if t.Failed() {
		return
	}
	completed, unaligned, inFlight := checkpointHistory(t, r.data)
	t.Logf("%d checkpoints completed, %d unaligned, %d with in-flight data persisted", completed, unaligned, inFlight)
	switch {
	case completed == 0:
		t.Error("no checkpoint completed: the run exercised no checkpoint")
	case r.c.mode == "unaligned" && unaligned == 0:
		// Only the checkpoints taken after the sources ended may be
		// aligned: no barrier has anything to overtake then.
		t.Errorf("none of the %d checkpoints of an unaligned job was unaligned", completed)
	case r.c.mode != "unaligned" && unaligned > 0:
		t.Errorf("%d checkpoints of a job in mode %s were unaligned", unaligned, r.c.mode)
	}
}

// deploy returns the arguments of a deploy of the cell's wordcount at
// parallelism p, with extra flags.
func (r *exactRun) deploy(p int, extra ...string) []string {
	args := []string{"deploy", "-q", "-p", strconv.Itoa(p),
		"--checkpoint-mode", r.c.mode, "--checkpoint-interval", r.interval,
		"--source", "file:path=" + r.in.path, "--sink", "file:path=out"}
	return append(append(args, extra...), r.mods[r.c.lang])
}

func (r *exactRun) out() string { return filepath.Join(r.dir, "out") }

func (r *exactRun) noFailure(t *testing.T, extra ...string) {
	startWS(t, r.bin, r.dir, r.deploy(r.c.p, extra...)...).mustSucceed(t)
	// Without failures at-least-once has nothing to repeat: exact too.
	checkCounts(t, r.out(), r.in, true)
}

// startAndKill deploys the cell at its parallelism, waits until a
// completed checkpoint has its sources past killAt of the input and kills
// the process with SIGKILL. It returns the job and that checkpoint.
func (r *exactRun) startAndKill(t *testing.T, extra ...string) (string, int64) {
	t.Helper()
	p := startWS(t, r.bin, r.dir, r.deploy(r.c.p, extra...)...)
	var job string
	var id, lo, hi int64
	var chans, ranged int
	p.until(t, fmt.Sprintf("a completed checkpoint past %.0f%% of the input", 100*r.killAt), func() bool {
		job, id = newestCheckpoint(r.data)
		if id == 0 {
			return false
		}
		var ok bool
		lo, hi, chans, ranged, ok = checkpointSummary(t, r.data, job, id)
		return ok && float64(lo) >= r.killAt*float64(r.in.lines)
	})
	p.kill(t)
	if len(partFiles(t, r.dir)) > 0 {
		t.Fatal("the wordcount committed counts before its input ended")
	}
	t.Logf("killed after checkpoint %d: sources at lines %d–%d of %d, %d channel states (%d stream ranges)", id, lo, hi, r.in.lines, chans, ranged)
	return job, id
}

// killResume kills the job after a checkpoint and resumes it to the end
// from its data directory, with resumeFlags (the in-process workers are not
// part of the job's record).
func (r *exactRun) killResume(t *testing.T, deployFlags []string, resumeFlags ...string) {
	job, id := r.startAndKill(t, deployFlags...)
	res := startWS(t, r.bin, r.dir, append([]string{"deploy", "--resume", job, "-q"}, resumeFlags...)...)
	res.mustSucceed(t)
	checkResumedFrom(t, res, id)
	if s := jobState(t, r.data, job); s != "finished" {
		t.Fatalf("job %s ended %s", job, s)
	}
	// At-least-once replays what its snapshots already counted.
	checkCounts(t, r.out(), r.in, r.c.mode != "at-least-once")
}

// localKillResume is killResume with local recovery: the resumed subtasks
// must take their keyed state from the snapshots kept in the data directory.
func (r *exactRun) localKillResume(t *testing.T) {
	job, id := r.startAndKill(t, "--local-recovery")
	// Only the count subtasks have keyed state; each keeps its newest
	// snapshot (or, when a later checkpoint completed just before the
	// kill, that one's).
	manifests, _ := filepath.Glob(filepath.Join(r.data, "jobs", job, "local", "*", "chk-*", "_manifest"))
	tasks := map[string]bool{}
	for _, m := range manifests {
		tasks[filepath.Base(filepath.Dir(filepath.Dir(m)))] = true
	}
	if len(tasks) != r.c.p {
		t.Fatalf("local recovery is on, yet %d subtasks kept a local snapshot by checkpoint %d, want the %d count subtasks: %v", len(tasks), id, r.c.p, manifests)
	}
	res := startWS(t, r.bin, r.dir, "deploy", "--resume", job, "-q", "-v")
	res.mustSucceed(t)
	checkResumedFrom(t, res, id)
	log := res.stderr.String()
	if i := strings.Index(log, "restoring from checkpoint storage"); i >= 0 {
		start := strings.LastIndex(log[:i], "\n") + 1
		t.Errorf("a subtask did not restore from its local snapshot: %s", log[start:i+len("restoring from checkpoint storage")])
	}
	checkCounts(t, r.out(), r.in, r.c.mode != "at-least-once")
}

var savepointDir = regexp.MustCompile(`: (\S+)\n`)

// rescale kills the job after a checkpoint and finishes it at another
// parallelism.
//
// A retained checkpoint restores at any parallelism with --from-checkpoint,
// but not one that holds in-flight data of an unaligned checkpoint: by
// design that channel state belongs to the old subtasks' channels and is
// not redistributed (docs/checkpoints.md, Savepoints; checkSavepoint in
// coordinator/savepoint.go refuses it). The documented way then is to
// resume the job from that checkpoint at its own parallelism, stop it with
// a savepoint (always aligned) and start the new parallelism from the
// savepoint, which this does.
func (r *exactRun) rescale(t *testing.T) {
	to := rescaleTo(r.c.p)
	job, id := r.startAndKill(t)
	root := filepath.Join(r.data, "jobs", job, "checkpoints")
	direct := startWS(t, r.bin, r.dir, r.deploy(to, "--from-checkpoint", root)...)
	if direct.wait(t) == 0 {
		t.Logf("restored the retained %s checkpoint at parallelism %d directly", r.c.mode, to)
		checkCounts(t, r.out(), r.in, r.c.mode != "at-least-once")
		return
	}
	if r.c.mode != "unaligned" || !strings.Contains(direct.stderr.String(), "in-flight data") {
		t.Fatalf("restoring checkpoint of %s at parallelism %d failed:\n%s", root, to, direct.stderr.String())
	}
	if len(partFiles(t, r.dir)) > 0 {
		t.Fatal("the refused restore committed output")
	}

	t.Logf("the %s checkpoint holds in-flight data: resume, savepoint, restore the savepoint at parallelism %d", r.c.mode, to)
	// Stopped as soon as it runs, the resumed job has most of its input
	// ahead of it, whatever the machine's speed.
	res := startWS(t, r.bin, r.dir, "deploy", "--resume", job)
	res.until(t, "the resumed job running", func() bool { return strings.Contains(res.stderr.String(), "job "+job+" running") })
	stop := startWS(t, r.bin, r.dir, "stop", "--savepoint", filepath.Join(r.dir, "sp"), job)
	stop.mustSucceed(t)
	res.mustSucceed(t)
	checkResumedFrom(t, res, id)
	m := savepointDir.FindStringSubmatch(stop.stdout.String())
	if m == nil {
		t.Fatalf("stop printed no savepoint directory: %q", stop.stdout.String())
	}
	if len(partFiles(t, r.dir)) > 0 {
		t.Fatal("the stopped wordcount committed counts before its input ended")
	}
	startWS(t, r.bin, r.dir, r.deploy(to, "--from-savepoint", m[1])...).mustSucceed(t)
	checkCounts(t, r.out(), r.in, true)
}
