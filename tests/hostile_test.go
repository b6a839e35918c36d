package tests

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// TestHostile deploys every module of examples/wasm/hostile (see its
// README.md) in turn to one long-running cluster: a `wstream server` and one
// `wstream worker` with a 16 MiB memory limit and a 2 s call deadline. Each
// deploy must fail with an error naming the cause, the error must hold no
// raw control character, no process may print a Go panic, the worker's
// resident set must stay under hostileRSSBound while the attack runs, and,
// once an attack has reached the worker, a well-behaved job (Go wordcount)
// must then run on the same worker with exact output. The infinite loop and
// the timer cascade are also cancelled with `wstream cancel`, on an
// embedded deploy whose deadline and cascade quota are lifted so that only
// the cancellation can stop them.
func TestHostile(t *testing.T) {
	h := startHostileCluster(t)
	start := time.Now()
	for _, c := range hostileCases {
		if !t.Run(strings.TrimSuffix(c.file, ".wat"), func(t *testing.T) { h.attack(t, c) }) && h.wk.exited() {
			t.Fatalf("the worker exited: %v\n%s", h.wk.err, shown(h.wk.stderr.String()))
		}
	}
	t.Run("cancel", func(t *testing.T) {
		t.Run("loop-process", func(t *testing.T) { hostileCancel(t, "loop-process.wat", "started") })
		t.Run("timer-cascade", func(t *testing.T) { hostileCancel(t, "timer-cascade.wat", "cascading") })
	})
	for _, p := range []*edgeProc{h.srv, h.wk} {
		checkNoPanic(t, fmt.Sprintf("wstream %v", p.args[0]), p.stdout.String()+p.stderr.String())
		if p.exited() {
			t.Errorf("wstream %s exited during the test: %v", p.args[0], p.err)
		}
	}
	t.Logf("worker resident set: %d MiB at the start, %d MiB at most during any attack (bound %d MiB); %s in all",
		h.baseRSS>>10, h.maxRSS>>10, hostileRSSBound>>10, time.Since(start).Round(time.Millisecond))
}

// hostileRSSBound bounds the worker's resident set (KiB) while any attack
// runs. Measured on a busy 2-core machine: about 105 MiB once the worker has
// run the Go wordcount (compiled code, instances), 240–260 MiB during deep
// recursion (a call stack at wazero's ceiling of about 84 MB plus the 42 MB
// buffer it was copied from), and 300–330 MiB at most, during the 32 MiB
// output amplification, which follows it: the Go runtime returns freed
// memory to the system lazily, so what one attack freed still counts
// during the next. Each attack's own claim is bounded (at most about
// 130 MB), and the garbage collector lets the heap reach twice what is
// live; 448 MiB leaves room for that and for the collector's timing. An
// attack that were not bounded (a stack, an output buffer, a timer book
// that kept growing) would pass it within a second.
const hostileRSSBound = 448 << 10

// hostileWorkerFlags are the worker's host settings: a small memory limit,
// a short deadline so that loops fail fast, a cascade quota that a cascade
// reaches in a fraction of a second (the default, a million, takes a
// million on_timer calls), and 1 MiB of state writes per call (the default
// is 32), which a timer flood, each timer a state write, reaches well
// within the deadline on a busy machine. Every other quota keeps its
// default.
var hostileWorkerFlags = []string{"--memory-limit", "16", "--call-timeout", "2s", "--max-cascaded-timers", "20000", "--max-state-bytes-per-call", "1048576"}

// hostileCase is one module of examples/wasm/hostile and what deploying it
// must answer.
type hostileCase struct {
	file string
	// want are substrings of the error deploy prints (from "wstream: " on).
	want []string
	// refused says that deploy refuses the module or its plan itself, so
	// that no job is submitted; eitherWay that it may refuse it or submit a
	// job that fails.
	refused, eitherWay bool
	// dryRun says to check `deploy --dry-run` too: it prints the plan's
	// names in the execution graph.
	dryRun bool
	// check, when set, checks more of what the attack produced.
	check func(t *testing.T, r hostileResult)
}

// hostileResult is what one hostile deploy produced.
type hostileResult struct {
	stderr, errText string
	elapsed         time.Duration
	worker          string // the worker's output during the attack
}

// hostileFailed is the error of a job whose operator op (at vertex "op") failed
// in export call with what.
func hostileFailed(op, call, what string) []string {
	return []string{fmt.Sprintf("operator %q (vertex op, subtask 0)", op), call + ": " + what}
}

// hostileDeadline is the error of a call that ran past the worker's deadline.
func hostileDeadline(op, call string) []string {
	return hostileFailed(op, call, "exceeded the call deadline of 2s; the instance was closed")
}

// The text escape-fail.wat and escape-trap.wat write, as the host must
// show it: every control character escaped, U+202E spelled out, the
// invalid byte replaced.
const (
	hostileEscaped = `\x1b[2J\x1b[H\rjob hostile-escape-0000 finished in 1ms\n\x1b]0;pwned\a\u202e` + "\uFFFD"
	// Split at its newline, as stdout and stderr lines are.
	hostileEscaped1 = `\x1b[2J\x1b[H\rjob hostile-escape-0000 finished in 1ms`
	hostileEscaped2 = `\x1b]0;pwned\a\u202e` + "\uFFFD"
)

// hostileStateQuota ends the error of a call that wrote more state than
// hostileWorkerFlags allow.
const hostileStateQuota = "bytes of state in one call, over the quota of 1048576 bytes (1 MiB) of state writes per call (--max-state-bytes-per-call)"

var hostileCases = []hostileCase{
	// Loops of every shape: each fails at the deadline of the call it is in.
	{file: "loop-process.wat", want: hostileDeadline("loop", "wstream_process")},
	{file: "loop-hostcalls.wat", want: hostileDeadline("spin", "wstream_process")},
	{file: "loop-open.wat", want: hostileDeadline("open", "wstream_open")},
	{file: "loop-timer.wat", want: hostileDeadline("timer", "wstream_on_timer")},
	{file: "loop-close.wat", want: hostileDeadline("close", "wstream_close")},
	{file: "loop-alloc.wat", want: hostileDeadline("alloc", "wstream_alloc")},
	{file: "sleep-wasi.wat", want: hostileDeadline("sleep", "wstream_process")},
	{file: "loop-init.wat", refused: true, want: []string{"module loop-init.wasm: instantiating: _initialize: exceeded the call deadline of 2s"}},
	{file: "loop-plan.wat", refused: true, want: []string{"module loop-plan.wasm: wstream_plan failed: exceeded the call deadline of 2s"}},
	{file: "timer-cascade.wat", want: hostileFailed("cascade", "wstream_on_timer",
		"registered 20001 already-due event-time timers while firing timers, over the quota of 20000 already-due timers per firing (--max-cascaded-timers)")},
	{file: "timer-cascade-processing.wat", want: hostileFailed("cascade", "wstream_on_timer",
		"registered 20001 already-due processing-time timers while firing timers, over the quota of 20000 already-due timers per firing (--max-cascaded-timers)")},

	// Memory and stack.
	{file: "memory-grow.wat", want: append(hostileFailed("grow", "wstream_process", "wasm error: unreachable"),
		"(the instance hit its memory limit of 16 MiB (256 pages): growing memory to 257 pages was refused)")},
	// Deploy's own limit is the default, 64 MiB: only the worker refuses.
	// The module is valid: the error must say that its memory is over the
	// limit, not that the module is malformed.
	{file: "memory-min.wat", want: []string{"memory", "16 Mi"},
		check: func(t *testing.T, r hostileResult) {
			if strings.Contains(r.errText, "invalid or truncated") {
				t.Errorf("the error calls a valid module whose memory is over the worker's limit invalid:\n%s", shown(r.errText))
			}
		}},
	{file: "deep-recursion.wat", want: hostileFailed("recurse", "wstream_process",
		"stack overflow: the guest's call stack reached wazero's ceiling of about 84 MB of host memory")},

	// Output amplification.
	{file: "amplify-records.wat", want: hostileFailed("amplify", "wstream_process",
		"emitted 101000 records for 1 input record, over the quota of 100000 records per input record (--max-records-per-input)")},
	{file: "amplify-bytes.wat", want: append(hostileFailed("amplify", "wstream_process", "emitted "),
		"bytes of records in one call, over the quota of 33554432 bytes (32 MiB) of output per call (--max-output-bytes-per-call)")},
	{file: "source-close.wat", want: hostileFailed("source", "wstream_close",
		"emitted 1000001 records in one call, over the quota of 1000000 records per call (--max-records-per-call)")},

	// State and timer floods. Timers are state kept on disk, with no count
	// quota by default: each registration is a state write of the call.
	{file: "state-flood.wat", want: append(hostileFailed("flood", "wstream_process", "wrote "),
		hostileStateQuota)},
	{file: "timer-flood-key.wat", want: append(hostileFailed("flood", "wstream_process", "wrote "),
		hostileStateQuota)},
	{file: "timer-flood-subtask.wat", want: append(hostileFailed("flood", "wstream_process", "wrote "),
		hostileStateQuota)},
	{file: "timer-flood-bytes.wat", want: append(hostileFailed("flood", "wstream_process", "wrote "),
		hostileStateQuota)},

	// Logs and terminal escapes.
	{file: "log-flood.wat", want: hostileDeadline("flood", "wstream_process"), check: checkLogFlood},
	{file: "escape-fail.wat", want: hostileFailed("escape", "wstream_process", hostileEscaped),
		check: func(t *testing.T, r hostileResult) {
			// The log line, and the stdout and stderr lines split at the
			// text's newline.
			if !hasGuestLine(r.worker, "op", hostileEscaped) {
				t.Errorf("the worker's log has no line of vertex op, subtask 0 saying %q:\n%s", hostileEscaped, shown(r.worker))
			}
			for _, l := range []string{hostileEscaped1, hostileEscaped2} {
				if !hasGuestLine(r.worker, "", l) {
					t.Errorf("the worker's log has no guest line of subtask 0 saying %q:\n%s", l, shown(r.worker))
				}
			}
		}},
	// The trap's error quotes the guest's stderr.
	{file: "escape-trap.wat", want: append(hostileFailed("escape", "wstream_process", "wasm error: unreachable"),
		"stderr:\n"+hostileEscaped1+"\n"+hostileEscaped2)},
	// The names arrive escaped, whether the plan is refused or the job fails.
	{file: "escape-operator.wat", eitherWay: true, dryRun: true, want: []string{`\x1b[2J\r\x1b]0;pwned\asplit`}},
	{file: "escape-plan.wat", refused: true, want: []string{`"op"`, `\x1b[2J\r\x1b]0;pwned\alat`}},

	// Plans.
	{file: "plan-deep.wat", refused: true, want: []string{"the plan exported by module plan-deep.wasm", "JSON nested deeper than the MaxDepth limit of 64 levels"}},
	{file: "plan-huge.wat", refused: true, want: []string{"the plan exported by module plan-huge.wasm", "bytes exceed the MaxPlanBytes limit of 1048576"}},
	{file: "plan-parallelism.wat", refused: true, want: []string{"parallelism: 96 exceeds the MaxVertexParallelism limit of 32"}},

	// Lying exports.
	{file: "lying-signatures.wat", refused: true, want: []string{"module lying-signatures.wasm",
		`export "wstream_close" has signature (i64) -> (i32), expected (i32) -> (i32)`,
		`export "wstream_plan" has signature () -> (i32), expected () -> (i64)`,
		`export "wstream_process" has signature (i32, i32) -> (i32), expected (i32, i32, i32) -> (i32)`}},
	{file: "lying-abi-version.wat", refused: true, want: []string{"module lying-abi-version.wasm: wstream_abi_version() returned 2, expected 1"}},
	{file: "lying-imports.wat", refused: true, want: []string{"module lying-imports.wasm", "wstream.exec", `"system" from module "env"`,
		"wstream.emit with signature () -> (i32)"}},
	{file: "lying-plan-pointer.wat", refused: true, want: []string{"module lying-plan-pointer.wasm: wstream_plan() returned the region [0x7fff0000, +256), outside guest memory"}},
	{file: "lying-operator.wat", want: hostileFailed("splitx", "wstream_open", `the module has no operator "splitx" (wstream_open returned -10)`)},
	{file: "lying-alloc.wat", want: hostileFailed("alloc", "wstream_alloc", "wstream_alloc(4096) failed: it returned 0x1fff0, a region past the end of memory")},
	{file: "lying-status.wat", want: hostileFailed("status", "wstream_process", "returned status 12345")},
}

// hostileCluster is the cluster every attack runs on.
type hostileCluster struct {
	dir, url, data string // data: the deploying commands' data directory
	srv, wk        *edgeProc
	rss            *rssWatch
	good           string // the well-behaved module
	goods          int    // well-behaved jobs run so far
	baseRSS        int64
	maxRSS         int64
}

func startHostileCluster(t *testing.T) *hostileCluster {
	t.Helper()
	at := time.Now()
	wstreamBin(t)
	h := &hostileCluster{dir: t.TempDir(), good: module(t, "wordcount")}
	built := time.Since(at)
	h.data = filepath.Join(h.dir, "deploy")
	srvData := filepath.Join(h.dir, "server")
	h.srv = startEdge(t, h.dir, "server", "--tenants=false", "--data", srvData, "--listen", "127.0.0.1:0")
	h.srv.until(t, "server URL", false, func() bool {
		b, err := os.ReadFile(filepath.Join(srvData, "nats.url"))
		h.url = strings.TrimSpace(string(b))
		return err == nil && h.url != ""
	})
	// -v: the worker logs guest lines, which the escape and log attacks
	// check.
	args := append([]string{"worker", "-v", "--nats", h.url, "--data", filepath.Join(h.dir, "worker")}, hostileWorkerFlags...)
	h.wk = startEdge(t, h.dir, args...)
	h.wk.until(t, "worker connected", false, func() bool { return strings.Contains(h.wk.stderr.String(), "connected") })
	h.rss = watchRSS(t, h.wk.cmd.Process.Pid)
	// The first job compiles the well-behaved module on the worker, once.
	up := time.Now()
	h.runGood(t)
	h.baseRSS = h.rss.reset()
	t.Logf("building the binaries took %s, starting the cluster %s, its first well-behaved job %s",
		built.Round(time.Millisecond), up.Sub(at.Add(built)).Round(time.Millisecond), time.Since(up).Round(time.Millisecond))
	return h
}

// deploy runs `wstream deploy --nats` with args and the module and waits
// for it to exit.
func (h *hostileCluster) deploy(t *testing.T, args ...string) (*edgeProc, int) {
	t.Helper()
	all := append([]string{"deploy", "--nats", h.url, "--data", h.data, "--call-timeout", "2s"}, args...)
	p := startEdge(t, h.dir, all...)
	return p, p.wait(t, edgeWait)
}

// attack deploys the module of c and checks what it must answer.
func (h *hostileCluster) attack(t *testing.T, c hostileCase) {
	wasm := testmod.WATModule(t, "examples/wasm/hostile/"+c.file)
	// A copy named after the source: errors name the module by its file.
	mod := filepath.Join(h.dir, strings.TrimSuffix(c.file, ".wat")+".wasm")
	if b, err := os.ReadFile(wasm); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(mod, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.dryRun {
		r := runCLI(t, h.dir, "deploy", "--dry-run", "--data", h.data, mod)
		checkNoRawText(t, "deploy --dry-run's output", r.stdout+r.stderr)
		checkNoPanic(t, "deploy --dry-run", r.stdout+r.stderr)
	}
	wkOut := len(h.wk.stderr.String())
	wkStdout := len(h.wk.stdout.String())
	h.rss.reset()
	start := time.Now()
	p, code := h.deploy(t, mod)
	r := hostileResult{stderr: p.stderr.String(), elapsed: time.Since(start)}
	peak := h.rss.reset()
	h.maxRSS = max(h.maxRSS, peak)
	r.worker = h.wk.stderr.String()[wkOut:] + h.wk.stdout.String()[wkStdout:]
	if i := strings.Index(r.stderr, "wstream: "); i >= 0 {
		r.errText = r.stderr[i:]
	}
	t.Logf("exit %d after %s; worker resident set at most %d MiB; %s", code, r.elapsed.Round(time.Millisecond), peak>>10, shown(firstLine(r.errText)))

	if code == 0 || r.errText == "" {
		t.Errorf("deploy of %s: exit %d, no error\n%s", c.file, code, shown(r.stderr))
	}
	hostileContains(t, "the error", r.errText, c.want...)
	checkNoRawText(t, "deploy's output", p.stdout.String()+r.stderr)
	checkNoRawText(t, "the worker's output", r.worker)
	checkNoPanic(t, "deploy", p.stdout.String()+r.stderr)
	checkNoPanic(t, "the worker", r.worker)
	// No line may pass for the end of a job but the deploy's own summary.
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "job hostile-escape-0000") {
			t.Errorf("deploy printed the guest's fake line %q", l)
		}
	}
	submitted := jobLine.MatchString(r.stderr) || strings.Contains(r.errText, "job hostile-")
	if c.eitherWay {
		c.refused = !submitted
	}
	if c.refused && submitted {
		t.Errorf("deploy submitted a job for a module it must refuse:\n%s", shown(r.stderr))
	}
	if !c.refused && !strings.Contains(r.errText, "job hostile-") {
		t.Errorf("the error does not name the job:\n%s", shown(r.errText))
	}
	if peak > hostileRSSBound {
		t.Errorf("the worker's resident set reached %d MiB during the attack, over the bound of %d MiB", peak>>10, hostileRSSBound>>10)
	}
	if c.check != nil {
		c.check(t, r)
	}
	if h.wk.exited() {
		t.Fatalf("the worker exited: %v\n%s", h.wk.err, shown(h.wk.stderr.String()))
	}
	if c.refused {
		// Nothing reached the worker: the next attack's well-behaved job
		// is the next job it runs.
		if strings.Contains(r.worker, "hostile-"+strings.TrimSuffix(c.file, ".wat")) {
			t.Errorf("the worker heard of a job deploy refused:\n%s", shown(r.worker))
		}
		return
	}
	h.runGood(t)
}

// runGood runs the Go wordcount on the cluster, with a new seed each time,
// and checks its output against genSpec's oracle.
func (h *hostileCluster) runGood(t *testing.T) {
	t.Helper()
	h.goods++
	g := genSpec{count: 2000, keys: 40, words: 3, seed: int64(h.goods)}
	out := filepath.Join(h.dir, fmt.Sprintf("good-%d.txt", h.goods))
	// At parallelism 1 the job runs two Go instances rather than four; its
	// output is the same.
	p, code := h.deploy(t, "-p", "1", "--source", g.flag(), "--sink", "file:path="+out, h.good)
	if code != 0 {
		t.Fatalf("the well-behaved job: exit %d\n%s", code, shown(p.stderr.String()))
	}
	checkNoPanic(t, "the well-behaved job's deploy", p.stderr.String())
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the well-behaved job's output: %v", err)
	}
	sameLines(t, "the well-behaved job's output", sortedLines(string(b)), g.wordCounts())
}

// checkLogFlood checks that the guest's log lines were throttled: at most
// the default 1000 per second of the attack (plus one second for the
// window in progress), and a notice of the suppressed ones.
func checkLogFlood(t *testing.T, r hostileResult) {
	t.Helper()
	lines, notices := 0, 0
	for _, l := range strings.Split(r.worker, "\n") {
		switch {
		case isGuestLine(l, "op", "x"), isGuestLine(l, "op (flood)", "y"):
			lines++
		case strings.Contains(l, " guest log lines suppressed (over the limit of 1000 lines per second, --guest-log-lines-per-second)"):
			notices++
		}
	}
	most := 1000 * (int(r.elapsed/time.Second) + 2)
	t.Logf("%d guest lines logged, %d notices of suppressed lines", lines, notices)
	if lines == 0 || lines > most || notices == 0 {
		t.Errorf("%d guest lines logged in %s (want 1..%d) and %d notices of suppressed lines (want some)", lines, r.elapsed, most, notices)
	}
}

// hostileCancel deploys the module of file on the embedded default (a
// deploy that runs its own server and worker) with an hour's call deadline
// and no cascade quota, waits until the guest logs marker, cancels the job
// with `wstream cancel --nats` and expects the deploy to end, with the job
// cancelled, within seconds.
func hostileCancel(t *testing.T, file, marker string) {
	dir := t.TempDir()
	mod := testmod.WATModule(t, "examples/wasm/hostile/"+file)
	data := filepath.Join(dir, "data")
	d := startEdge(t, dir, "deploy", "-v", "--data", data, "--call-timeout", "1h", "--max-cascaded-timers", "-1", mod)
	job := d.jobID(t)
	b, err := os.ReadFile(filepath.Join(data, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(string(b))
	d.until(t, "the guest's "+marker+" line", false, func() bool { return hasGuestLine(d.stderr.String(), "op", marker) })
	at := time.Now()
	r := runCLI(t, dir, "cancel", "--nats", url, job)
	if r.code != 0 {
		t.Fatalf("wstream cancel %s: exit %d\n%s", job, r.code, shown(r.stderr))
	}
	checkNoPanic(t, "wstream cancel", r.stdout+r.stderr)
	took := time.Since(at)
	// The command returns once the coordinator has cancelled the job; the
	// guest must then be stopped and the deploy end promptly.
	const within = 10 * time.Second
	select {
	case <-d.done:
	case <-time.After(within):
		t.Fatalf("the job still runs %s after wstream cancel returned; %s", within, d.hangReport())
	}
	t.Logf("wstream cancel took %s; the deploy ended %s after it returned",
		took.Round(time.Millisecond), (time.Since(at) - took).Round(time.Millisecond))
	out := d.stderr.String()
	if !strings.Contains(out, "job "+job+" canceled") {
		t.Errorf("the deploy does not report the job cancelled:\n%s", shown(out))
	}
	checkNoPanic(t, "deploy", d.stdout.String()+out)
	checkNoRawText(t, "deploy's output", d.stdout.String()+out)
}

// hostileContains fails t for each of want that s lacks.
func hostileContains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, shown(s))
		}
	}
}

// checkNoPanic fails t when out holds a Go panic or a goroutine dump.
func checkNoPanic(t *testing.T, who, out string) {
	t.Helper()
	for _, s := range []string{"panic:", "goroutine ", "fatal error:"} {
		if i := strings.Index(out, s); i >= 0 {
			t.Errorf("%s printed %q:\n%s", who, s, shown(out[max(0, i-2000):min(len(out), i+4000)]))
		}
	}
}

// checkNoRawText fails t when out holds a character that drives a
// terminal: a C0 control other than a newline or a tab (ESC, CR, BEL…),
// DEL, a C1 control, or a bidirectional formatting character.
func checkNoRawText(t *testing.T, what, out string) {
	t.Helper()
	for i, c := range out {
		if rawChar(c) {
			s := out[max(0, i-200):min(len(out), i+200)]
			t.Errorf("%s holds the raw character %U at byte %d: %q", what, c, i, s)
			return
		}
	}
}

// hasGuestLine says whether out, log lines in slog's text format, has a
// guest's line msg from subtask 0 of vertex (of any vertex when vertex is
// empty: the guest's stdout and stderr are not a vertex's callback's).
func hasGuestLine(out, vertex, msg string) bool {
	for _, l := range strings.Split(out, "\n") {
		if isGuestLine(l, vertex, msg) {
			return true
		}
	}
	return false
}

func isGuestLine(l, vertex, msg string) bool {
	if vertex == "" {
		return strings.Contains(l, " "+textAttr("msg", msg)+" ") && strings.Contains(l, " guest=true ") && strings.Contains(l, " subtask=0")
	}
	return strings.Contains(l, " "+textAttr("msg", msg)+" ") && strings.Contains(l, " guest=true ") &&
		strings.Contains(l, " "+textAttr("vertex", vertex)+" subtask=0")
}

// textAttr is key=value as slog's text handler writes it (quoted and
// escaped where it must be).
func textAttr(key, value string) string {
	var b strings.Builder
	l := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey {
			return slog.Attr{}
		}
		return a
	}}))
	// Under its own key "msg" the attribute would go with the message.
	l.Info("", "k", value)
	return key + strings.TrimPrefix(strings.TrimSpace(b.String()), "k")
}

func rawChar(c rune) bool {
	return (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f) ||
		(c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0x2028 || c == 0x2029
}

// shown is s with the characters rawChar refuses escaped, so that the
// test's own messages cannot drive a terminal either.
func shown(s string) string {
	if strings.IndexFunc(s, rawChar) < 0 {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		if rawChar(c) {
			q := strconv.QuoteRune(c)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// rssWatch samples the resident set of a process every 5 ms and keeps the
// peak since the last reset.
type rssWatch struct {
	mu   sync.Mutex
	peak int64 // KiB
	last int64
}

var vmRSSLine = regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`)

func readRSS(pid int) (int64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := vmRSSLine.FindStringSubmatch(sc.Text()); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func watchRSS(t *testing.T, pid int) *rssWatch {
	w := &rssWatch{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, ok := readRSS(pid); ok {
				w.mu.Lock()
				w.last, w.peak = n, max(w.peak, n)
				w.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return w
}

// reset returns the peak since the last reset and starts a new one from the
// latest sample.
func (w *rssWatch) reset() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.peak
	w.peak = w.last
	return p
}
