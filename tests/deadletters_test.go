package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/coordinator"
)

// poisonInput is a generated tsv input of keyed records with unique values
// and the records testops' poison fails on: the oracle of the dead-letter
// test, computed while writing it.
type poisonInput struct {
	path  string
	lines int
	good  map[string]int    // key → good records
	bad   map[string]string // bad record's value → key
	ts    map[string]int64  // bad record's value → timestamp
}

const (
	poisonEvery = 10_000
	poisonSalt  = "dl"
)

// poisonedValue is testops' poison hash: FNV-1a 64 of salt then value.
func poisonedValue(v string) bool {
	h := uint64(14695981039346656037)
	for _, c := range []byte(poisonSalt + v) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h%poisonEvery == 0
}

func genPoisonInput(t *testing.T, dir string, lines, keys int) *poisonInput {
	t.Helper()
	rng := rand.New(rand.NewPCG(20261201, 7))
	in := &poisonInput{path: filepath.Join(dir, "input.tsv"), lines: lines, good: map[string]int{}, bad: map[string]string{}, ts: map[string]int64{}}
	f, err := os.Create(in.path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range lines {
		k := "k" + strconv.Itoa(rng.IntN(keys))
		v := fmt.Sprintf("r%d-%d", i, rng.Uint32())
		fmt.Fprintf(w, "%d\t%s\t%s\n", i+1, k, v)
		if poisonedValue(v) {
			in.bad[v], in.ts[v] = k, int64(i+1)
		} else {
			in.good[k]++
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return in
}

// wantCounts is the running counts of the good records, sorted: what the
// job commits when the bad records are left out.
func (in *poisonInput) wantCounts() []string {
	var out []string
	for k, n := range in.good {
		for i := 1; i <= n; i++ {
			out = append(out, k+"\t"+strconv.Itoa(i))
		}
	}
	sort.Strings(out)
	return out
}

const poisonPlan = `{"name":"poison","parallelism":2,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"file","config":{"path":%q,"format":"tsv","rate":100000}},
  {"id":"count","kind":"operator","operator":"poison","config":{"every":%d,"salt":%q}},
  {"id":"sink","kind":"sink","connector":"file","config":{"path":"out"}}],
 "edges":[
  {"from":"source","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`

// TestDeadLettersExactlyOnceUnderKills is the acceptance test of dead-letter
// mode: testops' poison traps on one record in 10,000, chosen by a hash of
// its value, while the job checkpoints every 200 ms and the deploy process
// is killed (SIGKILL) and resumed, twice with the file sink of dead letters
// and once with the JetStream sink. The committed output must be the
// running counts of the good records only (the bad ones' state changes
// rolled back), and the committed dead letters each bad record exactly once
// with its error, key, time and input position. One more run, without kills,
// reads its input at full speed, where the guest marks commit points.
func TestDeadLettersExactlyOnceUnderKills(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		in := genPoisonInput(t, dir, 400_000, 500)
		runPoisonKills(t, dir, in, "dead-letter:file:path=dead", []float64{0.25, 0.6})
		checkDeadLetters(t, in, committed(t, filepath.Join(dir, "dead", "count")))
	})
	t.Run("summary", func(t *testing.T) {
		// Without kills, the summary counts every bad record once. (After a
		// kill it counts the last run's only, which may have met none.)
		dir := t.TempDir()
		in := genPoisonInput(t, dir, 100_000, 500)
		if len(in.bad) == 0 {
			t.Fatal("no bad record in the input")
		}
		writePlan(t, dir, fmt.Sprintf(poisonPlan, in.path, poisonEvery, poisonSalt))
		r := runCLI(t, dir, "deploy", "--plan", "plan.json", "--on-guest-error", "dead-letter:file:path=dead", module(t, "testops"))
		if r.code != 0 {
			t.Fatalf("deploy: exit %d\n%s", r.code, r.stderr)
		}
		m := regexp.MustCompile(`(?m)^\s+count\s+operator .* dead letters (\d+)`).FindStringSubmatch(r.stderr)
		if m == nil || m[1] != strconv.Itoa(len(in.bad)) {
			t.Errorf("the summary should count %d dead letters of vertex count:\n%s", len(in.bad), r.stderr)
		}
		sameLines(t, "the committed running counts", committed(t, filepath.Join(dir, "out")), in.wantCounts())
		checkDeadLetters(t, in, committed(t, filepath.Join(dir, "dead", "count")))
	})
	t.Run("full speed", func(t *testing.T) {
		// Without the source's rate, batches are full (hundreds of
		// records) and come as fast as the guest takes them: a subtask
		// meets a bad record every few dozen batches, and the Go guest
		// marks commit points, which dead-letter mode asks for after a
		// failure. The counts and the dead letters are exact still.
		dir := t.TempDir()
		in := genPoisonInput(t, dir, 600_000, 500)
		plan := fmt.Sprintf(poisonPlan, in.path, poisonEvery, poisonSalt)
		writePlan(t, dir, strings.Replace(plan, `,"rate":100000`, "", 1))
		r := runCLI(t, dir, "deploy", "--plan", "plan.json", "--on-guest-error", "dead-letter:file:path=dead", module(t, "testops"))
		if r.code != 0 {
			t.Fatalf("deploy: exit %d\n%s", r.code, r.stderr)
		}
		sameLines(t, "the committed running counts", committed(t, filepath.Join(dir, "out")), in.wantCounts())
		checkDeadLetters(t, in, committed(t, filepath.Join(dir, "dead", "count")))
	})
	t.Run("jetstream", func(t *testing.T) {
		url, js := startNATS(t)
		createStreams(t, js, jetstream.StreamConfig{Name: "DL", Subjects: []string{"dl"}})
		dir := t.TempDir()
		in := genPoisonInput(t, dir, 200_000, 500)
		runPoisonKills(t, dir, in, "dead-letter:jetstream:url="+url+",stream=DL,subject=dl", []float64{0.4})
		// outputLines fails on a repeated message id.
		msgs, _ := outputLines(t, js, "DL")
		var lines []string
		for _, m := range msgs {
			// "subject key data", the key empty.
			lines = append(lines, strings.TrimPrefix(m, "dl  "))
		}
		checkDeadLetters(t, in, lines)
	})
}

// runPoisonKills runs poisonPlan over in with dead letters as spec says,
// kills the deploy process once a completed checkpoint is past each share
// of the input in turn, resumes it to the end, and checks the committed
// output. It returns the last run.
func runPoisonKills(t *testing.T, dir string, in *poisonInput, spec string, shares []float64) *wsProc {
	t.Helper()
	if len(in.bad) < 10 {
		t.Fatalf("only %d bad records: the input is too small to show anything", len(in.bad))
	}
	t.Logf("input: %d records, %d bad", in.lines, len(in.bad))
	writePlan(t, dir, fmt.Sprintf(poisonPlan, in.path, poisonEvery, poisonSalt))
	bin, mod := exactBin(t), module(t, "testops")
	data := filepath.Join(dir, "wstream-data")

	// killAfter waits for a completed checkpoint newer than after whose
	// sources are past share of the input and kills the process.
	killAfter := func(p *wsProc, after int64, share float64) (string, int64) {
		var job string
		var id int64
		p.until(t, fmt.Sprintf("a completed checkpoint past %.0f%% of the input", 100*share), func() bool {
			job, id = newestCheckpoint(data)
			if id <= after {
				return false
			}
			lo, _, _, _, ok := checkpointSummary(t, data, job, id)
			// The history line is written just after the checkpoint's
			// metadata: a kill between the two loses that line, and the
			// history count below would miss its dead letters.
			return ok && float64(lo) >= share*float64(in.lines) && historyHas(t, data, job, id)
		})
		p.kill(t)
		return job, id
	}
	p := startWS(t, bin, dir, "deploy", "-q", "--plan", "plan.json", "--on-guest-error", spec, "--max-dead-letters", "1000", mod)
	var job string
	var killed int64
	for i, share := range shares {
		// A kill may have let a newer checkpoint complete: each resumed
		// run must complete one of its own.
		_, newest := newestCheckpoint(data)
		var id int64
		job, id = killAfter(p, newest, share)
		if i > 0 {
			checkResumedFrom(t, p, killed)
		}
		killed = id
		t.Logf("killed after checkpoint %d", id)
		args := []string{"deploy", "--resume", job}
		if i < len(shares)-1 {
			args = append(args, "-q")
		}
		p = startWS(t, bin, dir, args...)
	}
	p.mustSucceed(t)
	checkResumedFrom(t, p, killed)
	if s := jobState(t, data, job); s != "finished" {
		t.Fatalf("job %s ended %s", job, s)
	}
	sameLines(t, "the committed running counts", committed(t, filepath.Join(dir, "out")), in.wantCounts())

	// The checkpoint history counts the dead letters of each interval
	// (those replayed after a kill again).
	var inHistory int64
	hist := runCLI(t, dir, "checkpoints", "--data", data, "-o", "json", job)
	var h struct {
		History []struct {
			DeadLetters int64 `json:"deadLetters"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(hist.stdout), &h); err != nil {
		t.Fatalf("wstream checkpoints -o json: %v\n%s", err, hist.stdout)
	}
	for _, e := range h.History {
		inHistory += e.DeadLetters
	}
	if inHistory < int64(len(in.bad)) {
		t.Errorf("the checkpoint history counts %d dead letters, fewer than the %d bad records", inHistory, len(in.bad))
	}
	return p
}

// checkDeadLetters checks that the committed dead letters (JSON lines) are
// the bad records of in, each once, with the trap's error, key, time and
// input channel.
func checkDeadLetters(t *testing.T, in *poisonInput, lines []string) {
	t.Helper()
	seen := map[string]int{}
	for _, l := range lines {
		var d struct {
			Error     string          `json:"error"`
			Vertex    string          `json:"vertex"`
			Operator  string          `json:"operator"`
			Subtask   int             `json:"subtask"`
			Key       []byte          `json:"key"`
			EventTime int64           `json:"eventTime"`
			Input     json.RawMessage `json:"input"`
			ValueText string          `json:"valueText"`
		}
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("dead letter %q: %v", l, err)
		}
		seen[d.ValueText]++
		k, bad := in.bad[d.ValueText]
		switch {
		case !bad:
			t.Errorf("a dead letter for a good record: %s", l)
		case !strings.Contains(d.Error, "unreachable") || !strings.Contains(d.Error, "testops poison trap at record"):
			t.Errorf("dead letter of %q without the trap's error: %q", d.ValueText, d.Error)
		case string(d.Key) != k || d.EventTime != in.ts[d.ValueText] || d.Vertex != "count" || d.Operator != "poison":
			t.Errorf("dead letter of %q: key %q, time %d, vertex %q, operator %q; want key %q, time %d, vertex count, operator poison",
				d.ValueText, d.Key, d.EventTime, d.Vertex, d.Operator, k, in.ts[d.ValueText])
		case !strings.Contains(string(d.Input), `"channel"`):
			t.Errorf("dead letter of %q names no input channel: %s", d.ValueText, d.Input)
		}
	}
	for v := range in.bad {
		if seen[v] != 1 {
			t.Errorf("bad record %q has %d committed dead letters, want 1", v, seen[v])
		}
	}
}

// historyHas says whether checkpoint id of job is in the job's checkpoint
// history.
func historyHas(t *testing.T, dataDir, job string, id int64) bool {
	t.Helper()
	hist, err := coordinator.ReadHistory(dataDir, job)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.ID == id {
			return true
		}
	}
	return false
}
