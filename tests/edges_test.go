package tests

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// The edge-case tests pin down how savepoints, stops, the end of the input
// and failures interact: every run's committed output is compared with an
// oracle the test computes itself, and `wstream checkpoints` must never
// show a checkpoint id twice.

// countPlan is a keyed running count of gen's records (testops' runcount):
// for a key of n records the output is "key<TAB>1" … "key<TAB>n", so that a
// lost or repeated record shows. sink is the sink vertex's connector and
// config.
func countPlan(g genSpec, interval int, sink string) string {
	return fmt.Sprintf(`{"name":"edge","parallelism":2,
 "checkpoint":{"interval":%d},
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":%s},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink",%s}],
 "edges":[
  {"from":"source","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, interval, g.config(), sink)
}

const fileSink = `"connector":"file","config":{"path":"out"}`

func jetstreamSink(url, stream, prefix string) string {
	return fmt.Sprintf(`"connector":"jetstream","config":{"url":%q,"stream":%q,"subject":"%s.{key}"}`, url, stream, prefix)
}

// asMessages turns "key<TAB>value" lines into the "subject key value"
// lines outputLines reads from a stream whose subjects are prefix.{key}.
func asMessages(lines []string, prefix string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		k, v, _ := strings.Cut(l, "\t")
		out[i] = prefix + "." + k + " " + k + " " + v
	}
	sort.Strings(out)
	return out
}

var resumingFrom = regexp.MustCompile(`resuming job \S+ from checkpoint (\d+)`)

// TestSavepointThenKill takes an intermediate savepoint of a running job,
// kills the deploy process with SIGKILL before the next checkpoint
// completes, and resumes the job: the savepoint had no side effect (its
// sink transaction was never committed, neither before the kill nor after),
// the resume restored a checkpoint (never the savepoint), and the output is
// exact, with the file sink and with the exactly-once JetStream sink.
func TestSavepointThenKill(t *testing.T) {
	mod := module(t, "testops")
	// About 3 s of input; checkpoints every second leave a wide gap after
	// the savepoint for the kill.
	g := genSpec{count: 9000, keys: 40, words: 1, seed: 5, rate: 3000}
	want := g.runningCounts()

	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		writePlan(t, dir, countPlan(g, 1000, fileSink))
		savepointThenKill(t, dir, mod, func(id int64) int { return len(partsOf(out, id)) })
		sameLines(t, "committed output", committed(t, out), want)
	})

	t.Run("jetstream", func(t *testing.T) {
		url, js := startNATS(t)
		createStreams(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
		dir := t.TempDir()
		writePlan(t, dir, countPlan(g, 1000, jetstreamSink(url, "OUT", "out")))
		savepointThenKill(t, dir, mod, func(id int64) int { return len(msgIDsOf(t, js, "OUT", id)) })
		got, _ := outputLines(t, js, "OUT")
		sameLines(t, "output stream", got, asMessages(want, "out"))
	})
}

// savepointThenKill deploys plan.json in dir, takes a savepoint once a
// checkpoint has completed, kills the process as soon as the savepoint is
// written and resumes the job to its end. committedOf(id) counts what the
// sink committed under transaction id: nothing of the savepoint's, ever,
// unless a checkpoint completed between the savepoint and the kill.
func savepointThenKill(t *testing.T, dir, mod string, committedOf func(id int64) int) {
	data := filepath.Join(dir, "wstream-data")
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	d.until(t, "completed checkpoint", false, func() bool { _, id := newestCheckpoint(data); return id >= 1 })
	sp := startEdge(t, dir, "savepoint", job, filepath.Join(dir, "sp"))
	sp.mustExit0(t, edgeWait)
	if d.exited() {
		t.Fatalf("the job ended before the kill: the input is too short\n%s", d.stderr.String())
	}
	d.kill(t)
	spID, spDir := savepointOf(t, sp.stdout.String())

	rows := checkpointTable(t, dir, data, job)
	if !slices.ContainsFunc(rows, func(r ckptRow) bool { return r.id == spID && r.kind == "savepoint" && r.status == "completed" }) {
		t.Fatalf("savepoint %d is not in the history as completed:\n%v", spID, rows)
	}
	// With a checkpoint every second the kill almost always comes first; a
	// checkpoint that beat it commits the savepoint's data by design.
	clean := len(completedAfter(rows, spID)) == 0
	if clean {
		if n := committedOf(spID); n > 0 {
			t.Errorf("the intermediate savepoint %d committed sink output (%d) before any later checkpoint completed", spID, n)
		}
	} else {
		t.Logf("a checkpoint completed between savepoint %d and the kill: %v", spID, completedAfter(rows, spID))
	}

	r := startEdge(t, dir, "deploy", "--resume", job)
	r.mustExit0(t, edgeWait)
	m := resumingFrom.FindStringSubmatch(r.stderr.String())
	if m == nil {
		t.Fatalf("the resume restored no checkpoint although one had completed:\n%s", r.stderr.String())
	}
	from, _ := strconv.ParseInt(m[1], 10, 64)
	t.Logf("savepoint %d, killed, resumed from checkpoint %d", spID, from)
	if from == spID || clean && from > spID {
		t.Errorf("the resume restored %d; the savepoint is %d and the latest checkpoint before it is older", from, spID)
	}
	after := checkpointTable(t, dir, data, job)
	for _, row := range after[len(rows):] {
		if row.id <= spID {
			t.Errorf("the resumed job used id %d, not above savepoint %d:\n%s", row.id, spID, row.line)
		}
	}
	if clean {
		if n := committedOf(spID); n > 0 {
			t.Errorf("output of intermediate savepoint %d was committed (%d) after the resume from checkpoint %d", spID, n, from)
		}
	}
	if _, err := os.Stat(filepath.Join(spDir, "chk-"+fmt.Sprintf("%010d", spID), "_metadata")); err != nil {
		t.Errorf("the savepoint the command reported is not complete: %v", err)
	}
}

// TestStopWithSavepointFails asks for a stop with a savepoint into a
// directory below a regular file (its mkdir fails; the tests run as root,
// so permission bits would not stop the write): the command fails saying
// the job goes on running, the sources resume, and the job finishes on its
// own with exact output. The failed savepoint shows once, aborted.
func TestStopWithSavepointFails(t *testing.T) {
	mod := module(t, "testops")
	g := genSpec{count: 6000, keys: 40, words: 1, seed: 6, rate: 3000}
	dir := t.TempDir()
	data := filepath.Join(dir, "wstream-data")
	writePlan(t, dir, countPlan(g, 300, fileSink))
	blocker := filepath.Join(dir, "blocker")
	if err := os.WriteFile(blocker, []byte("a file, not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	d.until(t, "completed checkpoint", false, func() bool { _, id := newestCheckpoint(data); return id >= 1 })
	stop := startEdge(t, dir, "stop", "--savepoint", filepath.Join(blocker, "sp"), job)
	if code := stop.wait(t, edgeWait); code == 0 {
		t.Fatalf("stop into a directory below a regular file succeeded:\n%s", stop.stdout.String())
	}
	if !strings.Contains(stop.stderr.String(), "goes on running") || !strings.Contains(stop.stderr.String(), "not a directory") {
		t.Errorf("the failed stop does not say that the job goes on, and why:\n%s", stop.stderr.String())
	}
	if d.exited() {
		t.Fatalf("the job ended right after a failed stop:\n%s", d.stderr.String())
	}
	d.mustExit0(t, edgeWait)
	if !strings.Contains(d.stderr.String(), "finished") {
		t.Errorf("the job did not finish normally:\n%s", d.stderr.String())
	}
	sameLines(t, "committed output", committed(t, filepath.Join(dir, "out")), g.runningCounts())
	rows := checkpointTable(t, dir, data, job)
	var aborted []ckptRow
	for _, r := range rows {
		if r.kind == "savepoint" {
			aborted = append(aborted, r)
		}
	}
	if len(aborted) != 1 || aborted[0].status != "aborted" {
		t.Errorf("want the failed savepoint once, aborted; the history shows %v", aborted)
	}
	if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "sp" }) {
		t.Error("a savepoint directory appeared")
	}
}

// TestStopWithSavepointResume stops a job with a savepoint and finishes it
// from there: the stop commits what came before the savepoint, the restored
// job the rest, nothing twice; the restored job's checkpoint ids continue
// above the savepoint's.
func TestStopWithSavepointResume(t *testing.T) {
	mod := module(t, "testops")
	g := genSpec{count: 6000, keys: 40, words: 1, seed: 7, rate: 3000}
	dir := t.TempDir()
	data := filepath.Join(dir, "wstream-data")
	out := filepath.Join(dir, "out")
	writePlan(t, dir, countPlan(g, 300, fileSink))
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	d.until(t, "completed checkpoint", false, func() bool { _, id := newestCheckpoint(data); return id >= 1 })
	stop := startEdge(t, dir, "stop", "--savepoint", filepath.Join(dir, "sp"), job)
	stop.mustExit0(t, edgeWait)
	d.mustExitStopped(t, edgeWait)
	if !strings.Contains(d.stderr.String(), "stopped") {
		t.Errorf("no summary of a stopped job:\n%s", d.stderr.String())
	}
	spID, spDir := savepointOf(t, stop.stdout.String())
	// Committed at the stop: each key's counts 1…m without a gap or a
	// repeat, and not all of them.
	part := committed(t, out)
	if len(part) == 0 || len(part) >= int(g.count) {
		t.Fatalf("the stopped job committed %d of %d lines: the stop came too late or nothing was committed", len(part), g.count)
	}
	perKey := map[string][]int{}
	for _, l := range part {
		k, v, _ := strings.Cut(l, "\t")
		n, _ := strconv.Atoi(v)
		perKey[k] = append(perKey[k], n)
	}
	for k, ns := range perKey {
		sort.Ints(ns)
		for i, n := range ns {
			if n != i+1 {
				t.Fatalf("key %s: committed counts %v at the stop, want 1…%d", k, ns, len(ns))
			}
		}
	}
	first := checkpointTable(t, dir, data, job)

	r := startEdge(t, dir, "deploy", "--plan", "plan.json", "--from-savepoint", spDir, mod)
	r.mustExit0(t, edgeWait)
	sameLines(t, "committed output of the stopped and the restored job", committed(t, out), g.runningCounts())
	job2 := jobLine.FindStringSubmatch(r.stderr.String())
	if job2 == nil {
		t.Fatalf("no job id:\n%s", r.stderr.String())
	}
	second := checkpointTable(t, dir, data, job2[1])
	if len(second) == 0 {
		t.Fatal("the restored job took no checkpoint")
	}
	for _, row := range second {
		if row.id <= spID {
			t.Errorf("the restored job used id %d, not above savepoint %d it started from", row.id, spID)
		}
	}
	if !slices.ContainsFunc(first, func(r ckptRow) bool { return r.id == spID && r.kind == "savepoint" && r.status == "completed" }) {
		t.Errorf("savepoint %d is not in the stopped job's history as completed", spID)
	}
}

// windowPlan runs the window example's operator behind a JetStream
// source. Unbounded, the source waits for more at the end of the stream, so
// that only a stop ends the job; bounded, it ends at the last message.
func windowPlan(url string, bounded bool, out string) string {
	return fmt.Sprintf(`{"name":"window","parallelism":2,
 "checkpoint":{"interval":200},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","parallelism":1,
   "config":{"url":%q,"stream":"EVENTS","subject":"ev.>","bounded":%t,"timestamp":"header","watermarkDelay":300}},
  {"id":"window","kind":"operator","operator":"window","config":{"size":1000},"outputs":["main","late"]},
  {"id":"sink","kind":"sink","connector":"file","parallelism":1,"config":{"path":%q}},
  {"id":"late","kind":"sink","connector":"discard","parallelism":1}],
 "edges":[
  {"from":"source","to":"window","partition":"key"},
  {"from":"window","to":"sink","partition":"rebalance"},
  {"from":"window","to":"late","partition":"rebalance","output":"late"}]}`, url, bounded, out)
}

// TestStopDrainWindow stops an unbounded window job with --drain once it
// has read all of its input: event time advances to the end, every open
// window fires, and the committed output equals both the windows computed
// here and a bounded run's, which fires them at the end of its input.
func TestStopDrainWindow(t *testing.T) {
	mod := module(t, "window")
	url, js := startNATS(t)
	createStreams(t, js, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"ev.>"}})
	// In event-time order, so that no record is late whatever the batching.
	const n, sensors, step = 4000, 7, 5
	sums := map[[2]int64]int64{}
	rng := rand.New(rand.NewSource(3))
	for i := range n {
		ts, key, v := int64(i*step), "s"+strconv.Itoa(i%sensors), int64(rng.Intn(2001)-1000)
		sums[[2]int64{int64(i % sensors), ts / 1000 * 1000}] += v
		m := &nats.Msg{Subject: "ev." + key, Data: []byte(strconv.FormatInt(v, 10)), Header: nats.Header{}}
		m.Header.Set("Wstream-Key", key)
		m.Header.Set("Wstream-Timestamp", strconv.FormatInt(ts, 10))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing the input timed out")
	}
	var want []string
	// Windows whose timer fires on the watermark alone: end-1 at or below
	// the source's last watermark, maxTs - delay - 1.
	early := 0
	for k, s := range sums {
		want = append(want, fmt.Sprintf("s%d\t%d,%d,%d", k[0], k[1], k[1]+1000, s))
		if k[1]+1000-1 <= (n-1)*step-300-1 {
			early++
		}
	}
	sort.Strings(want)
	if early == len(want) || early == 0 {
		t.Fatalf("%d of %d windows fire before the drain: the test shows nothing", early, len(want))
	}

	dir := t.TempDir()
	writePlan(t, dir, windowPlan(url, true, "ref"))
	startEdge(t, dir, "deploy", "-q", "--plan", "plan.json", mod).mustExit0(t, edgeWait)
	sameLines(t, "the bounded run's windows", committed(t, filepath.Join(dir, "ref")), want)

	writePlan(t, dir, windowPlan(url, false, "out"))
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	// Every window the watermark closes is committed: the input is read.
	out := filepath.Join(dir, "out")
	d.until(t, fmt.Sprintf("%d committed windows", early), false, func() bool { return len(committed(t, out)) >= early })
	got := committed(t, out)
	if len(got) != early {
		t.Fatalf("%d windows committed before the drain, want %d: %v", len(got), early, got)
	}
	stop := startEdge(t, dir, "stop", "--drain", "--savepoint", filepath.Join(dir, "sp"), job)
	stop.mustExit0(t, edgeWait)
	d.mustExitStopped(t, edgeWait)
	sameLines(t, "windows after stop --drain", committed(t, out), want)
	checkpointTable(t, dir, filepath.Join(dir, "wstream-data"), job)
}

// skewPlan reads stream SKEW at parallelism 2 in two forward chains,
// source → chaos → sink: subtask 0 gets a handful of records and ends
// soon, subtask 1 gets the rest, stalled by chaos, which fails it 400–600
// ms after every start (a trap, or the subtask dying). A source batch holds
// up to 1024 records and a checkpoint waits for the batch in progress: the
// stalls keep a batch near 130 ms, so that checkpoints complete between
// failures.
func skewPlan(url, sink string) string {
	return fmt.Sprintf(`{"name":"skew","parallelism":2,
 "checkpoint":{"interval":100},
 "restart":{"strategy":"fixed-delay","attempts":1000,"delay":10},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","config":{"url":%q,"stream":"SKEW","subject":"in.>","bounded":true,"timestamp":"header"}},
  {"id":"chaos","kind":"operator","operator":"chaos","config":{"seed":3,"stallEvery":160,"stallMs":20,"failAfterMs":[400,600],"exitShare":0.3}},
  {"id":"sink","kind":"sink",%s}],
 "edges":[
  {"from":"source","to":"chaos"},
  {"from":"chaos","to":"sink"}]}`, url, sink)
}

// TestFinishedSinkThenFailure runs a bounded job at parallelism 2 in which
// one sink subtask finishes early and the other subtask fails again and
// again after that: restores bring the finished subtask back as finished,
// and the output holds every record exactly once, on the file sink and on
// the JetStream sink.
func TestFinishedSinkThenFailure(t *testing.T) {
	mod := module(t, "testops")
	url, js := startNATS(t)
	createStreams(t, js,
		jetstream.StreamConfig{Name: "SKEW", Subjects: []string{"in.>", "pad.>"}},
		jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
	// The source's subtask s takes the stream sequences ≡ s mod 2 that
	// match its filter: of the even ones only the first few are input.
	const odd, even = 8000, 12
	var want []string
	began := time.Now()
	for seq := 1; seq <= 2*odd; seq++ {
		subj, key := "pad.x", "k"+strconv.Itoa(seq%5)
		if seq%2 == 1 || seq <= 2*even {
			subj = "in." + key
			want = append(want, key+"\tr"+strconv.Itoa(seq))
		}
		m := &nats.Msg{Subject: subj, Data: []byte("r" + strconv.Itoa(seq)), Header: nats.Header{}}
		m.Header.Set("Wstream-Key", key)
		m.Header.Set("Wstream-Timestamp", strconv.Itoa(seq))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing the input timed out")
	}
	t.Logf("input published in %v", time.Since(began).Round(time.Millisecond))
	sort.Strings(want)

	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		runSkewed(t, dir, mod, skewPlan(url, fileSink))
		sameLines(t, "committed output", committed(t, filepath.Join(dir, "out")), want)
	})
	t.Run("jetstream", func(t *testing.T) {
		dir := t.TempDir()
		runSkewed(t, dir, mod, skewPlan(url, jetstreamSink(url, "OUT", "out")))
		got, _ := outputLines(t, js, "OUT")
		sameLines(t, "output stream", got, asMessages(want, "out"))
	})
}

// runSkewed runs the skewed plan to its end and checks that the scenario
// happened: a completed checkpoint recorded sink subtask 0 as finished, and
// the job failed and restarted after that.
func runSkewed(t *testing.T, dir, mod, plan string) {
	writePlan(t, dir, plan)
	data := filepath.Join(dir, "wstream-data")
	d := startEdge(t, dir, "deploy", "--plan", "plan.json", mod)
	job := d.jobID(t)
	finishedAt := -1
	d.until(t, "the end of the job", true, func() bool {
		if finishedAt < 0 && finishedInCheckpoint(data, job) {
			finishedAt = recordedAttempt(data, job)
		}
		return d.exited()
	})
	if d.code() != 0 {
		t.Fatalf("deploy: exit %d\n%s", d.code(), d.stderr.String())
	}
	attempts := jobAttempt(t, data)
	t.Logf("sink subtask 0 finished by attempt %d; %d attempts in all", finishedAt, attempts+1)
	if finishedAt < 0 || attempts <= finishedAt {
		t.Fatalf("the scenario did not happen: subtask 0 seen finished at attempt %d, last attempt %d", finishedAt, attempts)
	}
	checkpointTable(t, dir, data, job)
}

// finishedInCheckpoint reports whether a completed checkpoint of job in
// dataDir records subtask 0 of the job's only chain as finished.
func finishedInCheckpoint(dataDir, job string) bool {
	metas, _ := filepath.Glob(filepath.Join(dataDir, "jobs", job, "checkpoints", "chk-*", "_metadata"))
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var md struct {
			Tasks []struct {
				Task struct {
					Subtask int `json:"subtask"`
				} `json:"task"`
				Finished bool `json:"finished"`
			} `json:"tasks"`
		}
		if json.Unmarshal(b, &md) != nil {
			continue
		}
		for _, task := range md.Tasks {
			if task.Finished && task.Task.Subtask == 0 {
				return true
			}
		}
	}
	return false
}

// recordedAttempt reads the attempt the coordinator recorded for job.
func recordedAttempt(dataDir, job string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "jobs", job, "job.json"))
	if err != nil {
		return -1
	}
	var r struct {
		Attempt int `json:"attempt"`
	}
	if json.Unmarshal(b, &r) != nil {
		return -1
	}
	return r.Attempt
}

// TestStopWithSavepointRandom stops the wordcount of every guest language
// with a savepoint at random moments — at once, within the input, right as
// the input ends (when the counts reach the sink), around the end — at
// parallelism 1 and 2 with checkpoints every 100–500 ms in every checkpoint
// mode (a pending savepoint pauses them, so none subsumes it), and finishes
// every stopped job from its savepoint. A stop either succeeds (the job ends,
// stopped) or fails and the job runs to its end; the committed counts are
// exact either way, and no step may hang. WSTREAM_MATRIX=full runs 60
// iterations, the normal suite 10; WSTREAM_EDGE_SEED repeats a run's
// choices.
func TestStopWithSavepointRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("WSTREAM_EDGE_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (WSTREAM_EDGE_SEED repeats it)", seed)
	rng := rand.New(rand.NewSource(seed))
	rounds := 1
	if os.Getenv("WSTREAM_MATRIX") == "full" {
		rounds = 6
	}
	g := genSpec{count: 3000, keys: 200, words: 3, seed: 9}
	want := g.wordCounts()
	base := t.TempDir()
	mods := map[string]string{}
	for _, lang := range testmod.Languages {
		mods[lang] = langModule(t, lang, "wordcount")
	}
	// Every moment as often as the others, in a random order.
	moments := make([]int, rounds*len(testmod.Languages)*2)
	for i := range moments {
		moments[i] = i % len(momentNames)
	}
	rng.Shuffle(len(moments), func(i, j int) { moments[i], moments[j] = moments[j], moments[i] })
	outcomes := map[string]int{}
	i := 0
	for range rounds {
		for _, lang := range testmod.Languages {
			for _, p := range []int{1, 2} {
				s := stopRun{base: base, lang: lang, mod: mods[lang], p: p, g: g, i: i,
					mode:     []string{"aligned", "at-least-once", "unaligned"}[i%3],
					interval: 100 + rng.Intn(401), input: time.Duration(400+rng.Intn(600)) * time.Millisecond,
					moment: moments[i], at: rng.Float64()}
				i++
				t.Run(fmt.Sprintf("%02d-%s-p%d-%s-%s", s.i, lang, p, s.mode, momentNames[s.moment]), func(t *testing.T) {
					outcomes[s.run(t, want)]++
				})
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
	if outcomes["stopped"]+outcomes["stopped-finished"] == 0 {
		t.Error("no stop succeeded: the test exercised no savepoint")
	}
}

var momentNames = []string{"at-once", "within", "input-end", "around-end"}

// stopRun is one iteration of TestStopWithSavepointRandom.
type stopRun struct {
	base, lang, mod string
	mode            string // checkpoint mode; savepoints are aligned in every one
	p, i, interval  int
	g               genSpec
	input           time.Duration // how long the rate-limited input lasts
	moment          int           // index in momentNames
	at              float64       // where in its range the stop goes, [0, 1)
}

// stopDeadline bounds one iteration: far above its normal second or two,
// so that only a hang reaches it.
const stopDeadline = 90 * time.Second

// run deploys, stops and, when the stop succeeded, restores the job, and
// checks the output. It returns the outcome: "stopped", "ended" (the stop
// came after the job) or "refused" (the job went on).
func (s stopRun) run(t *testing.T, want []string) string {
	deadline := time.Now().Add(stopDeadline)
	left := func() time.Duration { return max(time.Until(deadline), time.Second) }
	data := filepath.Join(s.base, "data-"+s.lang) // one per language: its module compiles once
	out := fmt.Sprintf("out-%02d", s.i)
	outDir := filepath.Join(s.base, out)
	g := s.g
	g.rate = g.count * int64(time.Second) / int64(s.input)
	deploy := func(extra ...string) []string {
		return append(append([]string{"deploy", "--data", data, "-p", strconv.Itoa(s.p), "--checkpoint-mode", s.mode,
			"--checkpoint-interval", fmt.Sprintf("%dms", s.interval), "--sink", "file:path=" + out}, extra...), s.mod)
	}
	d := startEdge(t, s.base, deploy("--source", g.flag())...)
	job := d.jobID(t)
	start := time.Now()
	// waitFor waits until cond holds or the job ended, whichever is first.
	waitFor := func(what string, cond func() bool) {
		for !cond() && !d.exited() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s; %s", what, d.hangReport())
			}
			time.Sleep(5 * time.Millisecond) // polling interval
		}
	}
	switch s.moment {
	case 1:
		at := time.Duration(s.at * float64(s.input))
		waitFor("time passing", func() bool { return time.Since(start) >= at })
	case 2:
		// The counts are emitted at the end of the input, into the sink's
		// open transaction.
		waitFor("counts at the sink", func() bool { return sinkHolds(outDir) })
	case 3:
		at := time.Duration((0.8 + 0.4*s.at) * float64(s.input))
		waitFor("time passing", func() bool { return time.Since(start) >= at })
	}
	stop := startEdge(t, s.base, "stop", "--data", data, "--savepoint", filepath.Join(s.base, "sp"), job)
	awaitStop(t, d, stop, deadline)
	// 3: stopped from outside; 0: the input ended first.
	if d.code() != 3 && d.code() != 0 {
		t.Fatalf("deploy: exit %d\n%s", d.code(), d.stderr.String())
	}
	first := checkpointTable(t, s.base, data, job)
	stopped := strings.Contains(d.stderr.String(), "stopped")
	took := time.Since(start).Round(time.Millisecond)

	if stop.code() != 0 {
		msg := strings.TrimSpace(stop.stderr.String())
		if stopped {
			t.Fatalf("the stop failed (%s) yet the job stopped:\n%s", msg, d.stderr.String())
		}
		if strings.Contains(msg, "subsumed") {
			t.Errorf("a savepoint was subsumed: %s", msg)
		}
		outcome := "refused"
		for _, ended := range []string{"has ended", "no wstream is running", "connecting to NATS", "all tasks have finished"} {
			if strings.Contains(msg, ended) {
				outcome = "ended"
			}
		}
		t.Logf("stop after %v: %s (%s)", took, outcome, msg)
		sameLines(t, "committed counts of the job that ran on", committed(t, outDir), want)
		return outcome
	}
	outcome := "stopped"
	if !stopped {
		// The input had ended: the job finished as the stop succeeded.
		outcome = "stopped-finished"
		if !strings.Contains(d.stderr.String(), "finished") {
			t.Fatalf("stop succeeded (%s) yet the job neither stopped nor finished:\n%s", strings.TrimSpace(stop.stdout.String()), d.stderr.String())
		}
	}
	spID, spDir := savepointOf(t, stop.stdout.String())
	t.Logf("stop after %v: %s with savepoint %d; %d counts committed at the stop", took, outcome, spID, len(committed(t, outDir)))
	r := startEdge(t, s.base, deploy("--source", s.g.flag(), "--from-savepoint", spDir)...)
	select {
	case <-r.done:
	case <-time.After(left()):
		t.Fatalf("the job restored from savepoint %d did not end; %s", spID, r.hangReport())
	}
	if r.code() != 0 {
		t.Fatalf("deploy --from-savepoint: exit %d\n%s", r.code(), r.stderr.String())
	}
	sameLines(t, "committed counts of the stopped and the restored job", committed(t, outDir), want)
	if m := jobLine.FindStringSubmatch(r.stderr.String()); m != nil {
		for _, row := range checkpointTable(t, s.base, data, m[1]) {
			if row.id <= spID {
				t.Errorf("the restored job used id %d, not above savepoint %d", row.id, spID)
			}
		}
	}
	if !slices.ContainsFunc(first, func(r ckptRow) bool { return r.id == spID && r.status == "completed" }) {
		t.Errorf("savepoint %d is not in the history as completed", spID)
	}
	return outcome
}

// awaitStop waits until both the stop command and the job's deploy have
// exited. A process still running at the deadline hangs, and so does a stop
// still waiting 10 s after the deploy, whose embedded NATS server was to
// answer it, exited: the test fails with the goroutine dumps of the hung
// processes.
func awaitStop(t *testing.T, d, stop *edgeProc, deadline time.Time) {
	t.Helper()
	var deployGone time.Time
	for !d.exited() || !stop.exited() {
		if d.exited() && deployGone.IsZero() {
			deployGone = time.Now()
		}
		switch {
		case time.Now().After(deadline):
			var report []string
			for _, p := range []*edgeProc{d, stop} {
				if !p.exited() {
					report = append(report, fmt.Sprintf("wstream %v: %s", p.args, p.hangReport()))
				}
			}
			t.Fatalf("hung after the stop:\n%s", strings.Join(report, "\n"))
		case !deployGone.IsZero() && time.Since(deployGone) > 10*time.Second:
			t.Fatalf("wstream stop still waits 10 s after the job's process exited (%s); the stop: %s", strings.TrimSpace(d.stderr.String()), stop.hangReport())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// sinkHolds reports whether the file sink in dir holds any output yet,
// committed or not.
func sinkHolds(dir string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}
