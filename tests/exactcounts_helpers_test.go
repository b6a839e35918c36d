package tests

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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
)

// wordInput is a generated text file and the count of every word in it,
// computed while writing it: the oracle of the exact-count tests, which
// owes nothing to the engine.
type wordInput struct {
	path  string
	lines int
	words int64
	want  map[string]int64
}

// genWordInput writes lines lines of lowercase words to dir/input.txt from
// a seeded generator. The vocabulary has vocab distinct words; most draws
// follow a steep Zipf law, so a few words are hot (the hottest is two
// fifths of the text) and the tail is cold. The skew loads one count
// subtask far more than the others: its input channels fill and the split
// subtasks block sending, which is where unaligned barriers once repeated
// records (with a flatter law they caught the split blocked far less
// often).
func genWordInput(t *testing.T, dir string, lines, vocab int, seed uint64) *wordInput {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dict := make([]string, 0, vocab)
	seen := map[string]bool{}
	var b []byte
	for len(dict) < vocab {
		b = b[:0]
		for n := 1 + rng.IntN(12); n > 0; n-- {
			b = append(b, byte('a'+rng.IntN(26)))
		}
		if w := string(b); !seen[w] {
			seen[w] = true
			dict = append(dict, w)
		}
	}
	zipf := rand.NewZipf(rng, 2, 1, uint64(vocab-1))
	in := &wordInput{path: filepath.Join(dir, "input.txt"), lines: lines, want: map[string]int64{}}
	f, err := os.Create(in.path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for range lines {
		for i, n := 0, 1+rng.IntN(8); i < n; i++ {
			// A uniform share keeps every word of the vocabulary in use.
			k := rng.IntN(vocab)
			if rng.IntN(10) < 7 {
				k = int(zipf.Uint64())
			}
			if i > 0 {
				w.WriteByte(' ')
			}
			w.WriteString(dict[k])
			in.want[dict[k]]++
			in.words++
		}
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return in
}

// checkCounts compares the word counts committed under outDir (part files
// of `word<TAB>count` lines) with the oracle. With exact, every word must be
// committed once with its count; otherwise (at-least-once after a restore)
// duplicates are allowed and every count must be at least the oracle's.
func checkCounts(t *testing.T, outDir string, in *wordInput, exact bool) {
	t.Helper()
	got := map[string]int64{}
	lines := map[string]int{}
	var malformed []string
	for _, l := range committed(t, outDir) {
		word, n, ok := strings.Cut(l, "\t")
		c, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			malformed = append(malformed, l)
			continue
		}
		got[word] += c
		lines[word]++
	}
	if len(malformed) > 0 {
		t.Errorf("%d committed lines are not word<TAB>count, e.g. %q", len(malformed), malformed[0])
	}
	var wrong []string
	var short, extra, repeated int
	var surplus int64
	for word, want := range in.want {
		g := got[word]
		surplus += g - want
		if g < want {
			short++
		}
		if g < want || exact && (g != want || lines[word] != 1) {
			wrong = append(wrong, fmt.Sprintf("%s: %d, want %d (on %d lines)", word, g, want, lines[word]))
		}
	}
	for word, g := range got {
		if _, ok := in.want[word]; !ok {
			extra++
			surplus += g
			wrong = append(wrong, fmt.Sprintf("%s: %d, not in the input", word, g))
		}
	}
	for _, n := range lines {
		if n > 1 {
			repeated++
		}
	}
	if len(wrong) == 0 {
		if !exact && surplus > 0 {
			t.Logf("at-least-once: %d words counted too often, %d surplus occurrences", countOver(got, in.want), surplus)
		}
		return
	}
	sort.Strings(wrong)
	t.Errorf("%d of %d words wrong (%d short, %d not in the input, %d committed on several lines; %+d occurrences overall); e.g.\n  %s",
		len(wrong), len(in.want), short, extra, repeated, surplus, strings.Join(wrong[:min(len(wrong), 8)], "\n  "))
}

func countOver(got, want map[string]int64) int {
	n := 0
	for w, c := range got {
		if c > want[w] {
			n++
		}
	}
	return n
}

// exactBin is the wstream binary the exact-count tests run:
// WSTREAM_TEST_BIN when set (a build of another revision, to check that the
// tests catch its bugs), else the working tree's.
func exactBin(t *testing.T) string {
	if p := os.Getenv("WSTREAM_TEST_BIN"); p != "" {
		return p
	}
	return wstreamBin(t)
}

// wsProc is a running wstream command.
type wsProc struct {
	args   []string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error
}

// startWS starts bin with args in dir; the test's cleanup kills it if it
// is still running then.
func startWS(t *testing.T, bin, dir string, args ...string) *wsProc {
	t.Helper()
	p := &wsProc{args: args, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// runTimeout bounds one wstream process: generous, because another test
// suite may share the machine's two cores.
const runTimeout = 3 * time.Minute

// wait waits for the process to exit and returns its exit code. A process
// that outlives runTimeout hangs: it is made to dump its goroutines
// (SIGQUIT) into a file kept for the failure report.
func (p *wsProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(runTimeout):
		t.Fatalf("wstream %v did not finish in %v; %s", p.args, runTimeout, p.dump())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wstream %v: %v", p.args, p.err)
	return -1
}

// dump ends a hung process with SIGQUIT, which makes a Go program print
// every goroutine's stack, and saves its stderr to a file that outlives
// the test. It returns where the file is.
func (p *wsProc) dump() string {
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	f, err := os.CreateTemp("", "wstream-hang-*.txt")
	if err != nil {
		return "its stderr could not be saved: " + err.Error()
	}
	defer f.Close()
	if _, err := f.WriteString(p.stderr.String()); err != nil {
		return "its stderr could not be saved: " + err.Error()
	}
	return "its stderr, with a goroutine dump, is in " + f.Name()
}

// mustSucceed waits for the process and fails the test unless it exits 0.
func (p *wsProc) mustSucceed(t *testing.T) {
	t.Helper()
	if code := p.wait(t); code != 0 {
		t.Fatalf("wstream %v: exit %d\n%s", p.args, code, p.stderr.String())
	}
}

// until polls cond until it holds. It fails the test when the process exits
// first or the deadline passes: the condition is progress the run was
// expected to make.
func (p *wsProc) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(runTimeout)
	for !cond() {
		select {
		case <-p.done:
			t.Fatalf("wstream %v ended (%v) before %s; a faster machine needs a larger input\n%s", p.args, p.err, what, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("wstream %v: no %s after %v; %s", p.args, what, runTimeout, p.dump())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// kill sends SIGKILL, as a crash would, and waits for the process to go.
func (p *wsProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// newestCheckpoint returns the only job in dataDir and the id of its newest
// completed checkpoint (0 for none): a checkpoint is complete once its
// _metadata exists, which is written last.
func newestCheckpoint(dataDir string) (string, int64) {
	metas, _ := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "checkpoints", "chk-*", "_metadata"))
	job, newest := "", int64(0)
	for _, m := range metas {
		chk := filepath.Dir(m)
		id, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(chk), "chk-"), 10, 64)
		if err == nil && id > newest {
			job, newest = filepath.Base(filepath.Dir(filepath.Dir(chk))), id
		}
	}
	return job, newest
}

var resumedFrom = regexp.MustCompile(`resuming job \S+ from checkpoint (\d+)`)

// checkResumedFrom checks that a resumed run restored a checkpoint no older
// than the one completed before the kill, rather than starting over.
func checkResumedFrom(t *testing.T, p *wsProc, killedAfter int64) {
	t.Helper()
	m := resumedFrom.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("the resumed job did not restore a checkpoint although checkpoint %d had completed:\n%s", killedAfter, p.stderr.String())
	}
	if id, _ := strconv.ParseInt(m[1], 10, 64); id < killedAfter {
		t.Fatalf("resumed from checkpoint %d, older than checkpoint %d completed before the kill", id, killedAfter)
	}
}

// jobState reads the state the coordinator recorded for job in dataDir.
func jobState(t *testing.T, dataDir, job string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "jobs", job, "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.State
}

// checkpointHistory sums up the checkpoint history of every job in dataDir:
// the completed checkpoints (savepoints aside), how many of them were
// unaligned and how many persisted in-flight data.
func checkpointHistory(t *testing.T, dataDir string) (completed, unaligned, inFlight int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "checkpoints", "history.jsonl"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e struct {
				Kind          int    `json:"kind"`
				Status        string `json:"status"`
				InFlightBytes int64  `json:"inFlightBytes"`
				Unaligned     bool   `json:"unaligned"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if e.Kind != 1 || e.Status != "completed" {
				continue
			}
			completed++
			if e.Unaligned {
				unaligned++
			}
			if e.InFlightBytes > 0 {
				inFlight++
			}
		}
	}
	return completed, unaligned, inFlight
}

// checkpointSummary describes checkpoint id of job in dataDir: how far its
// file source subtasks had read (the least and the largest next line), its
// channel states, and those of them that refer to data left in the job's
// JetStream data stream (a range) instead of a copy. ok is false when the
// checkpoint is gone (retaining one, a later one may have replaced it).
func checkpointSummary(t *testing.T, dataDir, job string, id int64) (minLine, maxLine int64, chans, ranged int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "jobs", job, "checkpoints", fmt.Sprintf("chk-%010d", id), "_metadata"))
	if err != nil {
		return 0, 0, 0, 0, false
	}
	var m struct {
		Tasks []struct {
			Operator map[string][]byte `json:"operator"`
			Channels []struct {
				Range *struct{} `json:"range"`
			} `json:"channels"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("checkpoint %d of %s: %v", id, job, err)
	}
	minLine = -1
	for _, task := range m.Tasks {
		if src, ok := task.Operator["source"]; ok {
			var off struct {
				Line int64 `json:"line"`
			}
			if err := json.Unmarshal(src, &off); err != nil {
				t.Fatalf("checkpoint %d of %s: source offset %q: %v", id, job, src, err)
			}
			if minLine < 0 || off.Line < minLine {
				minLine = off.Line
			}
			maxLine = max(maxLine, off.Line)
		}
		for _, c := range task.Channels {
			chans++
			if c.Range != nil {
				ranged++
			}
		}
	}
	return minLine, maxLine, chans, ranged, true
}
