package tests

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// edgeProc is a wstream process of the edge-case tests: its output is kept,
// and a process that outlives its deadline is taken for hung and made to
// dump its goroutines.
type edgeProc struct {
	args           []string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// startEdge starts wstream with args in dir. The test's cleanup kills it if
// it still runs then.
func startEdge(t *testing.T, dir string, args ...string) *edgeProc {
	t.Helper()
	return startEdgeEnv(t, dir, nil, args...)
}

// startEdgeEnv is startEdge with env added to the environment.
func startEdgeEnv(t *testing.T, dir string, env []string, args ...string) *edgeProc {
	t.Helper()
	p := &edgeProc{args: args, cmd: exec.Command(wstreamBin(t), args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *edgeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// code is the exit code of a process that has exited.
func (p *edgeProc) code() int {
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// wait waits up to d for the process to exit and returns its exit code. A
// process still running then hangs: the test fails with its goroutine dump.
func (p *edgeProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code()
	case <-time.After(d):
	}
	t.Fatalf("wstream %v did not exit within %v: hung; %s", p.args, d, p.hangReport())
	return -1
}

// mustExit0 waits up to d and fails the test unless the exit code is 0.
func (p *edgeProc) mustExit0(t *testing.T, d time.Duration) {
	t.Helper()
	if code := p.wait(t, d); code != 0 {
		t.Fatalf("wstream %v: exit %d\n%s%s", p.args, code, p.stdout.String(), p.stderr.String())
	}
}

// mustExitStopped waits for a deploy whose job another command stopped
// with a savepoint: it exits 3, stopped from outside (docs/cli.md).
func (p *edgeProc) mustExitStopped(t *testing.T, d time.Duration) {
	t.Helper()
	if code := p.wait(t, d); code != 3 {
		t.Fatalf("wstream %v: exit %d, want 3 (stopped from outside)\n%s%s", p.args, code, p.stdout.String(), p.stderr.String())
	}
}

// hangReport makes a hung process print every goroutine's stack (SIGQUIT,
// Go's default handler) and returns where its stderr, dump included, was
// saved, with the dump's beginning.
func (p *edgeProc) hangReport() string {
	if p.exited() {
		return "it has exited meanwhile"
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	out := p.stderr.String()
	where := "its stderr could not be saved"
	// The dump outlives the test's temporary directories.
	if f, err := os.CreateTemp("", "wstream-hang-*.txt"); err == nil {
		_, _ = f.WriteString(out)
		_ = f.Close()
		where = "its stderr with the goroutine dump is in " + f.Name()
	}
	if len(out) > 16000 {
		out = out[:16000] + "\n…"
	}
	return where + ":\n" + out
}

// kill sends SIGKILL, as a crash would, and waits until the process is gone.
func (p *edgeProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !p.exited() {
		t.Fatal(err)
	}
	<-p.done
}

// edgeWait is how long one wstream process of these tests may take before
// it counts as hung: generous, because another copy of the test suite may
// share the machine's two cores.
const edgeWait = 2 * time.Minute

// until polls cond every 10 ms until it holds. It fails the test when the
// process exits first (unless mayExit) or when edgeWait passes, with the
// process's goroutine dump.
func (p *edgeProc) until(t *testing.T, what string, mayExit bool, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(edgeWait)
	for !cond() {
		if p.exited() && !mayExit {
			t.Fatalf("wstream %v exited (%v) before %s\n%s", p.args, p.err, what, p.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("wstream %v: no %s after %v; %s", p.args, what, edgeWait, p.hangReport())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// jobID waits for the deploy to print its job's id.
func (p *edgeProc) jobID(t *testing.T) string {
	t.Helper()
	var id string
	p.until(t, "job id", false, func() bool {
		m := jobLine.FindStringSubmatch(p.stderr.String())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	return id
}

// edgeStopped is the savepoint line of a successful `stop` or `savepoint`.
var edgeStopped = regexp.MustCompile(`(?:stopped with savepoint|savepoint) (\d+) of job \S+: (\S+)\n`)

// savepointOf parses what a successful `wstream stop` or `savepoint`
// printed: the savepoint's id and location.
func savepointOf(t *testing.T, stdout string) (int64, string) {
	t.Helper()
	m := edgeStopped.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no savepoint id and location in %q", stdout)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id, m[2]
}

// ckptRow is one row of `wstream checkpoints`.
type ckptRow struct {
	id      int64
	kind    string // checkpoint, savepoint
	status  string // completed, aborted
	attempt int
	line    string
}

// checkpointTable runs `wstream checkpoints JOB` and parses its table. It
// fails the test when an id shows twice: ids never repeat over a job's
// life, whatever happened to it.
func checkpointTable(t *testing.T, dir, data, job string) []ckptRow {
	t.Helper()
	r := runCLI(t, dir, "checkpoints", "--data", data, job)
	if r.code != 0 {
		t.Fatalf("wstream checkpoints %s: exit %d\n%s", job, r.code, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("wstream checkpoints %s printed no table:\n%s", job, r.stdout)
	}
	var rows []ckptRow
	seen := map[int64]string{}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "retained:") {
			break
		}
		f := strings.Fields(l)
		if len(f) < 11 {
			t.Fatalf("wstream checkpoints %s: malformed row %q", job, l)
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		attempt, err2 := strconv.Atoi(f[10])
		if err1 != nil || err2 != nil {
			t.Fatalf("wstream checkpoints %s: malformed row %q", job, l)
		}
		if prev, ok := seen[id]; ok {
			t.Errorf("wstream checkpoints %s shows id %d twice:\n  %s\n  %s\nthe whole table:\n%s", job, id, prev, l, r.stdout)
		}
		seen[id] = l
		rows = append(rows, ckptRow{id: id, kind: strings.TrimSuffix(f[1], "*"), status: f[2], attempt: attempt, line: l})
	}
	return rows
}

// completedAfter returns the completed checkpoints (not savepoints) of rows
// whose id is above id.
func completedAfter(rows []ckptRow, id int64) []ckptRow {
	var out []ckptRow
	for _, r := range rows {
		if r.id > id && r.kind == "checkpoint" && r.status == "completed" {
			out = append(out, r)
		}
	}
	return out
}

// genSpec is a configuration of the gen source, and genRecord's output
// computed here: the oracle of tests that read gen. Record i is a pure
// function of (seed, keys, words, i) (connector/gen.go): splitmix64 at
// position i of the seeded stream, then once per word.
type genSpec struct {
	count, keys, words, seed, rate int64
}

// flag is the --source value that configures gen so.
func (g genSpec) flag() string {
	return fmt.Sprintf("gen:count=%d,keys=%d,words=%d,seed=%d,rate=%d", g.count, g.keys, g.words, g.seed, g.rate)
}

// config is the same as a plan's connector config.
func (g genSpec) config() string {
	return fmt.Sprintf(`{"count":%d,"keys":%d,"words":%d,"seed":%d,"rate":%d}`, g.count, g.keys, g.words, g.seed, g.rate)
}

func genMix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const genGolden = 0x9e3779b97f4a7c15

// words returns the words of record i; the first is its key.
func (g genSpec) recordWords(i int64) []string {
	seed := genMix(uint64(g.seed))
	r := genMix(seed + uint64(i)*genGolden)
	out := make([]string, g.words)
	for j := range out {
		k, _ := bits.Mul64(genMix(r+uint64(j+1)*genGolden), uint64(g.keys))
		out[j] = "w" + strconv.FormatUint(k, 10)
	}
	return out
}

// wordCounts is what a wordcount of the whole input emits: every word
// with the number of its occurrences, as sorted "word<TAB>count" lines.
func (g genSpec) wordCounts() []string {
	n := map[string]int{}
	for i := range g.count {
		for _, w := range g.recordWords(i) {
			n[w]++
		}
	}
	return countLines(n)
}

// runningCounts is what testops' runcount keyed by gen's key emits: for a
// key of n records, the lines "key<TAB>1" … "key<TAB>n", sorted.
func (g genSpec) runningCounts() []string {
	n := map[string]int{}
	for i := range g.count {
		n[g.recordWords(i)[0]]++
	}
	var out []string
	for k, c := range n {
		for i := 1; i <= c; i++ {
			out = append(out, k+"\t"+strconv.Itoa(i))
		}
	}
	sort.Strings(out)
	return out
}

func countLines(n map[string]int) []string {
	out := make([]string, 0, len(n))
	for w, c := range n {
		out = append(out, w+"\t"+strconv.Itoa(c))
	}
	sort.Strings(out)
	return out
}

// sameLines fails the test unless got and want (sorted) are equal, saying
// what is missing and what is repeated or extra.
func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	have := map[string]int{}
	for _, l := range got {
		have[l]++
	}
	var missing, extra []string
	for _, l := range want {
		if have[l] == 0 {
			missing = append(missing, l)
		} else {
			have[l]--
		}
	}
	for l, n := range have {
		for range n {
			extra = append(extra, l)
		}
	}
	sort.Strings(extra)
	t.Errorf("%s: %d lines, want %d: %d missing (e.g. %q), %d repeated or unexpected (e.g. %q)",
		what, len(got), len(want), len(missing), edgeFirst(missing, 5), len(extra), edgeFirst(extra, 5))
}

func edgeFirst(s []string, n int) []string { return s[:min(n, len(s))] }

// partsOf returns the committed part files in out of checkpoint id.
func partsOf(out string, id int64) []string {
	p, _ := filepath.Glob(filepath.Join(out, fmt.Sprintf("part-*-%010d", id)))
	return p
}

// msgIDsOf returns the message ids in stream whose transaction (the
// CHECKPOINT field of JOB/VERTEX/SUBTASK/CHECKPOINT/INDEX) is id.
func msgIDsOf(t *testing.T, js jetstream.JetStream, stream string, id int64) []string {
	t.Helper()
	_, ids := outputLines(t, js, stream)
	var out []string
	for m := range ids {
		if f := strings.Split(m, "/"); len(f) == 5 && f[3] == strconv.FormatInt(id, 10) {
			out = append(out, m)
		}
	}
	return out
}

// createStreams creates JetStream streams with a duplicate window long
// enough for a whole test: the exactly-once sink relies on it.
func createStreams(t *testing.T, js jetstream.JetStream, cfgs ...jetstream.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range cfgs {
		c.Duplicates = 10 * time.Minute
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
}
